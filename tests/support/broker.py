"""Our broker as a real subprocess:

    python -m kop.cli standalone --data-dir <dir>/data \
        --override kafkaListeners=PLAINTEXT://127.0.0.1:<free port> \
        --override brokerServicePort=<another free port> --override key=value ...

stdout/stderr go to <dir>/broker.log. Ready = the Kafka port (and the Pulsar one, when that handler is on) accepts TCP connections.
The admin HTTP server listens on an ephemeral port (webServicePort=0, so brokers never fight over 8080);
`admin_url` reads the address the broker logged.

The Pulsar handler is on by default, so every test broker gets a free `brokerServicePort` (unless one is
given); `pulsar_port` / `pulsar_url` (= `pulsar_service_url`) name it, and ready means both ports accept
connections while the config serves Pulsar.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

from .net import free_port, port_open, wait_until
from .proc import ServerProcess


class KopBroker(ServerProcess):
    def __init__(
        self,
        base_dir: Path,
        overrides: dict[str, object] | None = None,
        config_file: Path | None = None,
        port: int | None = None,
        pulsar_port: int | None = None,
    ) -> None:
        super().__init__()
        self.base_dir = Path(base_dir)
        self.base_dir.mkdir(parents=True, exist_ok=True)
        self.data_dir = self.base_dir / "data"
        self.log_path = self.base_dir / "broker.log"
        self.port = port or free_port()
        # The pulsar handler is on by default (brokerServicePort=6650): each test broker gets a free port of
        # its own, kept across restarts, so brokers started side by side never fight over 6650.
        self.pulsar_port = pulsar_port or free_port()
        self.config_file = config_file
        self.overrides: dict[str, str] = {
            "kafkaListeners": f"PLAINTEXT://127.0.0.1:{self.port}",
            "brokerServicePort": str(self.pulsar_port),
            "bindAddress": "127.0.0.1",
            "webServicePort": "0",
            "webServiceBindAddress": "127.0.0.1",
            # one process, unless KOP_TEST_WORKERS asks every test broker to be a node of that many workers (to
            # run a part of the suite against one); tests of a node (tests/test_node_workers.py) set numWorkers
            "numWorkers": os.environ.get("KOP_TEST_WORKERS", "1"),
            # as the `kafka` target's group.initial.rebalance.delay.ms (tests/support/kafka_server.py): a classic
            # group's first join (a console consumer's too) is not held 3 s for members that may follow; a test
            # of the delay sets it
            "groupInitialRebalanceDelayMs": "0",
        }
        self.overrides.update({k: str(v) for k, v in (overrides or {}).items()})
        self.pulsar_port = int(self.overrides["brokerServicePort"])
        self.starts = 0

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"

    @property
    def serves_pulsar(self) -> bool:
        """Whether the config enables the pulsar handler (it binds after the Kafka one: start() waits for both)."""
        protocols = self.overrides.get("messagingProtocols")
        if protocols is None and self.config_file is not None:
            from kop.config import read_properties

            protocols = read_properties(self.config_file).get("messagingProtocols")
        return "pulsar" in (protocols or "kafka,pulsar").lower()

    @property
    def pulsar_url(self) -> str:
        return f"pulsar://127.0.0.1:{self.pulsar_port}"

    @property
    def pulsar_service_url(self) -> str:
        return f"pulsar://127.0.0.1:{self.pulsar_port}"

    def command(self) -> list[str]:
        cmd = [sys.executable, "-m", "kop.cli", "standalone", "--data-dir", str(self.data_dir)]
        if self.config_file is not None:
            cmd += ["--config", str(self.config_file)]
        for k, v in self.overrides.items():  # {brokerServicePort}: the port picked for this broker (named listeners)
            cmd += ["--override", f"{k}={v.replace('{brokerServicePort}', str(self.pulsar_port))}"]
        return cmd

    def start(self, timeout: float = 60) -> KopBroker:
        assert not self.alive(), "already running"
        self.starts += 1
        with open(self.log_path, "ab") as f:
            f.write(f"\n===== start #{self.starts}: {' '.join(self.command())}\n".encode())
        self._spawn(self.command(), dict(os.environ, PYTHONUNBUFFERED="1"))
        try:
            wait_until(
                f"kop broker on {self.bootstrap}",
                lambda: port_open("127.0.0.1", self.port)
                and (not self.serves_pulsar or port_open("127.0.0.1", self.pulsar_port))
                and (self.overrides.get("numWorkers", "1") == "1" or self._node_ready()),
                timeout,
                self.proc,
                self.log_path,
            )
        except Exception:
            self.kill()
            raise
        return self

    def _node_ready(self) -> bool:
        """A node of several workers (numWorkers != 1): its supervisor logged that every worker is ready."""
        return "node ready" in self.log_path.read_text(errors="replace").rsplit("===== start #", 1)[-1]

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
