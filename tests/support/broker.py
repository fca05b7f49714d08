"""Our broker as a real subprocess:

    python -m kop.cli standalone --data-dir <dir>/data \
        --override kafkaListeners=PLAINTEXT://127.0.0.1:<free port> --override key=value ...

stdout/stderr go to <dir>/broker.log. Ready = the Kafka port accepts TCP connections.
The admin HTTP server listens on an ephemeral port (webServicePort=0, so brokers never fight over 8080);
`admin_url` reads the address the broker logged.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

from .net import free_port, port_open, read_vm_hwm_kib, tail, wait_until
from .proc import die_with_parent


class KopBroker:
    def __init__(
        self,
        base_dir: Path,
        overrides: dict[str, object] | None = None,
        config_file: Path | None = None,
        port: int | None = None,
    ) -> None:
        self.base_dir = Path(base_dir)
        self.base_dir.mkdir(parents=True, exist_ok=True)
        self.data_dir = self.base_dir / "data"
        self.log_path = self.base_dir / "broker.log"
        self.port = port or free_port()
        self.config_file = config_file
        self.overrides: dict[str, str] = {
            "kafkaListeners": f"PLAINTEXT://127.0.0.1:{self.port}",
            "webServicePort": "0",
            "webServiceBindAddress": "127.0.0.1",
        }
        self.overrides.update({k: str(v) for k, v in (overrides or {}).items()})
        self.proc: subprocess.Popen | None = None
        self._log_file = None
        self.starts = 0
        self.peak_rss_kib: int | None = None

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"

    @property
    def pid(self) -> int | None:
        return self.proc.pid if self.proc else None

    def command(self) -> list[str]:
        cmd = [sys.executable, "-m", "kop.cli", "standalone", "--data-dir", str(self.data_dir)]
        if self.config_file is not None:
            cmd += ["--config", str(self.config_file)]
        for k, v in self.overrides.items():
            cmd += ["--override", f"{k}={v}"]
        return cmd

    def start(self, timeout: float = 60) -> KopBroker:
        assert not self.alive(), "already running"
        self._log_file = open(self.log_path, "ab")  # noqa: SIM115 - lives as long as the process
        self.starts += 1
        self._log_file.write(f"\n===== start #{self.starts}: {' '.join(self.command())}\n".encode())
        self._log_file.flush()
        env = dict(os.environ, PYTHONUNBUFFERED="1")
        self.proc = subprocess.Popen(
            self.command(),
            stdin=subprocess.DEVNULL,
            stdout=self._log_file,
            stderr=subprocess.STDOUT,
            env=env,
            start_new_session=True,
            preexec_fn=die_with_parent,
        )
        try:
            wait_until(
                f"kop broker on {self.bootstrap}",
                lambda: port_open("127.0.0.1", self.port),
                timeout,
                self.proc,
                self.log_path,
            )
        except Exception:
            self.kill()
            raise
        return self

    @property
    def admin_url(self) -> str:
        """The admin HTTP base URL of the current run ("admin HTTP listening on http://..." in the log)."""
        import re

        text = self.log_path.read_text(errors="replace")
        run = text.rsplit("===== start #", 1)[-1]
        found = re.findall(r"admin HTTP listening on (http://\S+)", run)
        if not found:
            raise AssertionError(f"the broker logged no admin HTTP address\n{self.log_tail()}")
        return found[-1]

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def _sample_rss(self) -> None:
        if self.alive():
            hwm = read_vm_hwm_kib(self.proc.pid)
            if hwm is not None:
                self.peak_rss_kib = max(self.peak_rss_kib or 0, hwm)

    def stop(self, timeout: float = 30) -> int | None:
        """SIGTERM and wait (SIGKILL if it does not exit in time). Returns the exit code."""
        if self.proc is None:
            return None
        if self.alive():
            self._sample_rss()
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(30)
        self._close_log()
        return self.proc.returncode

    def kill(self) -> None:
        """SIGKILL: no shutdown code runs."""
        if self.alive():
            self._sample_rss()
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait(30)
        self._close_log()

    def restart(self, timeout: float = 60) -> KopBroker:
        """Stop (if running) and start again with the same port, data dir and overrides."""
        if self.alive():
            self.stop()
        return self.start(timeout)

    def _close_log(self) -> None:
        if self._log_file is not None:
            self._log_file.close()
            self._log_file = None

    def log_tail(self, n: int = 80) -> str:
        return tail(self.log_path, n)

    def __enter__(self) -> KopBroker:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()

    def __repr__(self) -> str:
        return f"KopBroker({self.bootstrap}, dir={self.base_dir})"
