"""The ZooKeeper session lease: how long after its last proof of life a cluster broker may still serve.

Why a lease and not only kazoo's state callback: the callback runs on kazoo's thread and reaches the event
loop some time after the fact. A broker that was paused (SIGSTOP, a stopped container, a VM migration, a
long GC-like stall) past its session timeout wakes up with requests already waiting on its sockets, and its
event loop may serve them from memory - committed offsets, "I lead this partition" - before kazoo has even
noticed that the session is gone and another broker owns the bundles (issue #24). The lease closes that
window without waiting for anyone: serving is allowed only while the clock says the session must still be
alive.

The arithmetic (sans-IO; the clock is passed in). ZooKeeper expires a session no earlier than one session
timeout after the last request it received from the client, so a request *sent* at time `t` and answered
on session `s` proves that `s` lives until at least `t + timeout`. The lease trusts it until
`t + timeout * fraction` (default 2/3: the remaining third is the margin for the server's own clock, the
loop's delay in noticing the reply and the other broker's takeover not being earlier than expiry). The
clock is monotonic (`time.monotonic`, CLOCK_MONOTONIC), which keeps running while the process is stopped:
a broker woken from SIGSTOP finds its lease lapsed before it reads a byte. A proof on another session (the
old one expired, kazoo opened a new one) does not count for the session this broker's bundles belong to.

The timeout used must be the one the server granted: ZooKeeper clamps the requested session timeout to
[2, 20] x its tickTime, and kazoo does not expose the negotiated value, so a server whose maxSessionTimeout
is under `metadataStoreSessionTimeoutMillis` would make the lease too long (docs/cluster.md says so).
"""

from __future__ import annotations

import time
from collections.abc import Callable

DEFAULT_FRACTION = 2 / 3
# Renewal reads per lease length: at 4 a lease is renewed long before it lapses, even if one read is slow.
RENEWALS_PER_LEASE = 4


class SessionLease:
    """Proofs of life of one ZooKeeper session, and whether they still cover `now`."""

    __slots__ = ("length", "_clock", "_session", "_proved_at")

    def __init__(self, session_timeout_s: float, fraction: float = DEFAULT_FRACTION,
                 clock: Callable[[], float] = time.monotonic) -> None:
        if not 0 < fraction < 1:
            raise ValueError(f"lease fraction {fraction} must be in (0, 1): the rest is the margin")
        self.length = session_timeout_s * fraction
        self._clock = clock
        self._session: int | None = None
        self._proved_at = float("-inf")

    @property
    def renew_every(self) -> float:
        """How often the broker sends its renewal read (seconds)."""
        return self.length / RENEWALS_PER_LEASE

    @property
    def session(self) -> int | None:
        """The session the lease is held for (None: none; nothing is served)."""
        return self._session

    def hold(self, session: int | None) -> None:
        """Hold the lease for `session` (the one this broker registered with); proofs of an earlier session
        are forgotten. None: no session (it expired) - the lease is lapsed until the next hold()."""
        if session != self._session:
            self._session = session
            self._proved_at = float("-inf")

    def now(self) -> float:
        return self._clock()

    def proved(self, sent_at: float, session: int | None) -> bool:
        """A request sent at `sent_at` (this lease's clock, read *before* sending) was answered on
        `session`. Returns whether it renewed the lease (the held session, and newer than the last proof)."""
        if session is None or session != self._session or sent_at <= self._proved_at:
            return False
        self._proved_at = sent_at
        return True

    def expires_at(self) -> float:
        """When the lease lapses (-inf without a proof)."""
        return self._proved_at + self.length

    def valid(self, now: float | None = None) -> bool:
        """Whether the held session is proven alive at `now` (default: the clock's now)."""
        if self._session is None:
            return False
        return (self._clock() if now is None else now) < self._proved_at + self.length
