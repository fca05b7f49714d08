"""Loopback helpers: free ports and waiting for a listener."""

from __future__ import annotations

import random
import socket
import subprocess
import time
from collections.abc import Callable
from pathlib import Path


def _ephemeral_low() -> int:
    try:
        return int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return 32768  # Linux's default


_PICK_LOW = 10000
# Ports this test process handed out: never handed out again. A port is only checked free, not held, so two picks
# close together (a broker's Kafka and Pulsar ports, two brokers started by one fixture) could otherwise return the
# same port, and the second listener would fail with "Address already in use".
_GIVEN: set[int] = set()


def free_port() -> int:
    """A TCP port on 127.0.0.1 that is free right now, below the kernel's ephemeral range. Why not let the kernel
    pick (bind to 0): the port is released before the broker binds it, and meanwhile any port-0 bind or outgoing
    connection may be handed the same port - a broker's own admin HTTP on webServicePort=0 took its Kafka port
    once ("Address already in use", CI). Ports below the ephemeral range are never handed out that way."""
    high = _ephemeral_low() - 1
    for _ in range(200):
        port = random.randint(_PICK_LOW, high)
        if port in _GIVEN:
            continue
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
        _GIVEN.add(port)
        return port
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:  # the low range is full: the kernel's pick
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def port_open(host: str, port: int) -> bool:
    try:
        with socket.create_connection((host, port), timeout=1):
            return True
    except OSError:
        return False


def tail(path: Path, n: int = 60) -> str:
    try:
        lines = path.read_text(errors="replace").splitlines()
    except FileNotFoundError:
        return f"<{path} does not exist>"
    return "\n".join(lines[-n:])


def wait_until(
    what: str,
    predicate: Callable[[], bool],
    timeout: float,
    proc: subprocess.Popen | None = None,
    log: Path | None = None,
    interval: float = 0.1,
) -> None:
    """Poll `predicate` until it is true; fail (showing the log) on timeout or when `proc` exits."""
    deadline = time.monotonic() + timeout
    while True:
        if predicate():
            return
        if proc is not None and proc.poll() is not None:
            raise RuntimeError(
                f"{what}: process exited with code {proc.returncode}\n--- {log}\n{tail(log) if log else ''}"
            )
        if time.monotonic() > deadline:
            raise RuntimeError(f"{what}: not ready after {timeout}s\n--- {log}\n{tail(log) if log else ''}")
        time.sleep(interval)


def read_vm_hwm_kib(pid: int) -> int | None:
    """Peak resident set size (VmHWM, KiB) of a live process, from /proc/<pid>/status."""
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1])
    except (FileNotFoundError, ProcessLookupError, ValueError):
        return None
    return None
