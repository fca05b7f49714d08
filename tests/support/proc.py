"""Child processes that cannot outlive the test run.

Servers and clients started by tests run in their own session (so a SIGKILL of the broker does not hit
pytest), which also means nothing stops them when pytest itself dies (a timeout, a Ctrl-C, a crash).
Leaked brokers and JVMs then steal the CPU from every later test. Linux can tie a child to its parent:
PR_SET_PDEATHSIG makes the kernel send SIGKILL to the child when the thread that started it exits.
"""

from __future__ import annotations

import ctypes
import os
import signal
import subprocess
from pathlib import Path
from typing import IO, Any

from .net import read_vm_hwm_kib, tail

_PR_SET_PDEATHSIG = 1

try:
    _libc = ctypes.CDLL("libc.so.6", use_errno=True)
except OSError:  # not glibc Linux: fall back to the fixtures' own teardown
    _libc = None


def die_with_parent() -> None:
    """A Popen preexec_fn. Start such children from the main thread: the signal follows the forking thread."""
    if _libc is not None:
        _libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)


class ServerProcess:
    """What every test-started server (our broker, Apache Kafka) shares: one child process in its own session
    that dies with pytest, its output appended to `log_path`, SIGTERM/SIGKILL/restart, and the peak RSS
    (VmHWM) sampled before it goes. Subclasses build the command and say when the server is ready."""

    log_path: Path
    base_dir: Path
    stop_timeout: float = 30

    def __init__(self) -> None:
        self.proc: subprocess.Popen | None = None
        self._log_file: IO[bytes] | None = None
        self.peak_rss_kib: int | None = None

    def start(self, timeout: float = 60) -> Any:  # pragma: no cover - every subclass defines it
        raise NotImplementedError

    def _spawn(self, cmd: list[str], env: dict[str, str] | None = None) -> subprocess.Popen:
        self._log_file = open(self.log_path, "ab")  # noqa: SIM115 - lives as long as the process
        self.proc = subprocess.Popen(
            cmd,
            stdin=subprocess.DEVNULL,
            stdout=self._log_file,
            stderr=subprocess.STDOUT,
            env=env if env is not None else dict(os.environ),
            start_new_session=True,
            preexec_fn=die_with_parent,
        )
        return self.proc

    @property
    def pid(self) -> int | None:
        return self.proc.pid if self.proc else None

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def _sample_rss(self) -> None:
        if self.alive():
            hwm = read_vm_hwm_kib(self.proc.pid)
            if hwm is not None:
                self.peak_rss_kib = max(self.peak_rss_kib or 0, hwm)

    def stop(self, timeout: float | None = None) -> int | None:
        """SIGTERM and wait (SIGKILL if it does not exit in time). Returns the exit code."""
        if self.proc is None:
            return None
        if self.alive():
            self._sample_rss()
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(self.stop_timeout if timeout is None else timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(30)
        self._close_log()
        return self.proc.returncode

    def kill(self) -> None:
        """SIGKILL: no shutdown code runs, nothing is flushed beyond what the OS already has."""
        if self.alive():
            self._sample_rss()
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait(30)
        self._close_log()

    def restart(self, timeout: float | None = None) -> Any:
        """Stop (if running) and start again with the same ports, data and settings."""
        if self.alive():
            self.stop()
        return self.start() if timeout is None else self.start(timeout)

    def _close_log(self) -> None:
        if self._log_file is not None:
            self._log_file.close()
            self._log_file = None

    def log_tail(self, n: int = 80) -> str:
        return tail(self.log_path, n)

    def __enter__(self) -> Any:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def __repr__(self) -> str:
        return f"{type(self).__name__}({getattr(self, 'bootstrap', '?')}, dir={self.base_dir})"
