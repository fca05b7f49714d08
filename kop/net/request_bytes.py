"""The broker-wide bound on request bytes held in memory (Kafka's `queued.max.request.bytes`; sans-IO).

One bound per broker, shared by every protocol handler (kop/net/acceptor.py holds it): a Kafka and a Pulsar
connection charge the same total, since memory is the broker's, not a protocol's. Every connection charges
here the bytes it holds for requests: the buffer of a frame being received (which grows with the bytes that
arrive: kop/kafka/framing.py, kop/pulsar/codec/framing.py) and the frames of requests not yet answered.
When the total reaches `queuedMaxRequestBytes`, reading pauses on every connection of every protocol; it
resumes once answers (or closed connections) bring the total below 7/8 of the bound (the gap keeps a busy
broker from pausing and resuming every connection on every request).

While the bound is reached and no complete request is waiting to be answered anywhere (nothing that would
free memory), one connection may go on receiving a frame it has started (the "holder"). Without it, frames
that are all partly received could fill the bound and wait for each other forever; with it, the bound is
exceeded by at most one frame (the largest a connection accepts: socketRequestMaxBytes, or a Pulsar frame) plus the buffer growth step that reached it (a Pulsar
connection's read), as Kafka's memory pool, which grants an allocation while any memory is left, may be. Why that
holds: before the bound is reached, the step that reaches it pauses every other connection at once, before it
reads again; after, only the holder reads, and its place ends with its frame (`complete`), even when the bytes of
its next frame have begun to arrive; nor does its last read take any of them in (a Kafka connection reads into
the frame's own buffer, a Pulsar one reads no further than the frame's end while the bound is reached). The next
holder starts only once that frame is answered, so from no higher a total. A holder that stops reading for its
own reasons (its peer does not read its answers), or whose frame is dropped unanswered, gives the place up, so it
cannot hold the broker up. A peer that trickles one large frame slowly while it holds the place does slow
everyone else while the bound is reached; the pre-authentication frame limit (sasl.server.max.receive.size) is
what limits that, as in Kafka.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Protocol


class Reader(Protocol):
    """What the bound needs of a connection."""

    @property
    def mid_frame(self) -> bool: ...

    def update_reading(self) -> None: ...


class RequestBytesBound:
    __slots__ = ("limit", "used", "partial", "peak", "holder", "reached", "pauses", "_waiting", "_connections")

    def __init__(self, limit: int, connections: Callable[[], Iterable[Reader]] = tuple) -> None:
        self.limit = limit  # -1: unbounded
        self.used = 0
        self.partial = 0  # of `used`, bytes of frames still being received (the rest waits to be answered)
        self.peak = 0  # highest `used` seen (a metric; tests check the bound with it)
        self.holder: Reader | None = None
        self.reached = False
        self.pauses = 0  # times the bound was reached (a metric)
        self._waiting: dict[Reader, None] = {}  # in the order they began to wait
        self._connections = connections

    def add(self, n: int, source: Reader | None = None) -> None:
        """`source` allocated `n` more bytes for the frame it is receiving."""
        self.used += n
        self.partial += n
        if self.used > self.peak:
            self.peak = self.used
        if not self.reached and 0 <= self.limit <= self.used:
            self.reached = True
            self.pauses += 1
            if source is not None and source.mid_frame and self.holder is None and self.used == self.partial:
                self.holder = source  # the frame being read as the bound is reached is the one that goes on
            for c in list(self._connections()):
                if c is not source:  # the one charging is inside a read; it checks once the read is done
                    c.update_reading()

    def complete(self, n: int, source: Reader | None = None) -> None:
        """A frame of `n` bytes is received; its bytes stay charged until its request is answered.

        A holder's place ends with its frame, even when bytes of its next frame are already in (pipelining
        clients): that frame will be answered, which frees memory, and its next frame waits like every other
        one. Were the place kept while the connection is `mid_frame`, one holder could receive every frame
        its client pipelines, each over the bound."""
        self.partial -= n
        if source is not None and source is self.holder:
            self.holder = None

    def release(self, n: int, partial: int = 0) -> None:
        """`n` bytes are no longer held (answered, or a closed connection's), `partial` of them partly received."""
        self.used -= n
        self.partial -= partial
        if self.reached and self.used < self.limit - (self.limit >> 3):
            self.reached = False
            self._wake()
        else:
            self._hand_over()

    def may_read(self, conn: Reader) -> bool:
        """Whether `conn` may read now (called by a connection that has no reason of its own to pause)."""
        if not self.reached:
            return True
        if self.holder is conn:
            if conn.mid_frame:
                return True
            self.holder = None  # its frame is complete (or was dropped): it waits like any other
        if self.holder is None and conn.mid_frame and self.used == self.partial:
            self.holder = conn
            return True
        self._waiting[conn] = None
        self._hand_over()  # e.g. the holder's frame was dropped unanswered: someone else must go on
        return False

    def leave(self, conn: Reader) -> None:
        """`conn` pauses for reasons of its own or is closed: it holds no place and waits for nothing here."""
        self._waiting.pop(conn, None)
        if self.holder is conn:
            self.holder = None
            self._hand_over()

    def _wake(self) -> None:
        """The bound is no longer reached: every waiting connection reads again."""
        waiting, self._waiting = self._waiting, {}
        for c in waiting:
            c.update_reading()

    def _hand_over(self) -> None:
        """While the bound is reached with nothing left to answer and no holder, let one waiting connection that
        has started a frame go on (only one: each one let go may add a frame over the bound)."""
        if not self.reached or self.holder is not None or self.used != self.partial:
            return
        for c in self._waiting:
            if c.mid_frame:
                del self._waiting[c]
                self.holder = c
                c.update_reading()
                return
