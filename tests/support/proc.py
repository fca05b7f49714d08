"""Child processes that cannot outlive the test run.

Servers and clients started by tests run in their own session (so a SIGKILL of the broker does not hit
pytest), which also means nothing stops them when pytest itself dies (a timeout, a Ctrl-C, a crash).
Leaked brokers and JVMs then steal the CPU from every later test. Linux can tie a child to its parent:
PR_SET_PDEATHSIG makes the kernel send SIGKILL to the child when the thread that started it exits.
"""

from __future__ import annotations

import ctypes
import signal

_PR_SET_PDEATHSIG = 1

try:
    _libc = ctypes.CDLL("libc.so.6", use_errno=True)
except OSError:  # not glibc Linux: fall back to the fixtures' own teardown
    _libc = None


def die_with_parent() -> None:
    """A Popen preexec_fn. Start such children from the main thread: the signal follows the forking thread."""
    if _libc is not None:
        _libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)
