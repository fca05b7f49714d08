"""What the coordinator's two sans-IO state machines (group_state.py, classic groups; consumer_group.py,
KIP-848 consumer groups) share: timers held as deadlines, records to write handed out as effects, and the
outcome of each write reported back.

Neither machine does I/O or owns a timer: the async shell (coordinator.py) takes their effects (answers
and `Write`s) with `take_effects()`, writes the records in the order asked, reports each outcome with
`write_done(write_id, error, now)`, and calls `expire_timers(now)` at `next_deadline()`. `now` is the
caller's clock in ms (the loop's monotonic time); `timestamp()` is wall time for what is written to records.
"""

from __future__ import annotations

import functools
import heapq
import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Generic, TypeVar

from kop.protocol.errors import ErrorCode

log = logging.getLogger(__name__)

Record = tuple[bytes, bytes | None]
TimerKey = tuple[str, ...]  # (kind, group id, ...): a group's timers are found by its id in position 1


@dataclass(frozen=True, slots=True)
class Write:
    """Records to append, as one batch, to the group's __consumer_offsets partition."""
    write_id: int
    group_id: str
    records: list[Record]


A = TypeVar("A")  # the answers a machine hands out beside its writes


class SansIOMachine(Generic[A]):
    """Deadlines, effects and write outcomes; subclasses add the rules (and say what their answers are)."""

    def __init__(self, wall_ms: Callable[[], int] | None = None) -> None:
        self._wall_ms = wall_ms
        self._now = 0  # the `now` of the call being served: timers set meanwhile count from it
        # key -> (deadline, sequence number, what to call, delay it was set with); the heap orders
        # (deadline, sequence, key) and keeps entries of timers since re-set or cancelled until they
        # surface (their sequence differs).
        self._timers: dict[TimerKey, tuple[int, int, Callable[[], None], int]] = {}
        self._heap: list[tuple[int, int, TimerKey]] = []
        self._timer_seq = 0
        self._on_written: dict[int, Callable[[int], None]] = {}
        self._next_write_id = 0
        self._effects: list[A | Write] = []

    def take_effects(self) -> list[A | Write]:
        """The answers and writes produced since the last call, in the order they were made."""
        out, self._effects = self._effects, []
        return out

    def next_deadline(self) -> int | None:
        """When `expire_timers` has something to do next (ms, the clock of `now`); None: no timer is set."""
        heap = self._heap
        while heap:
            _, seq, key = heap[0]
            timer = self._timers.get(key)
            if timer is not None and timer[1] == seq:
                return timer[0]
            heapq.heappop(heap)  # re-set or cancelled since
        return None

    def expire_timers(self, now: int) -> None:
        """Fire every timer due at `now`, earliest first (one firing may set or cancel others)."""
        self._now = now
        while (deadline := self.next_deadline()) is not None and deadline <= now:
            _, _, key = heapq.heappop(self._heap)
            _, _, fire, _ = self._timers.pop(key)
            try:
                fire()
            except Exception:
                log.exception("group coordinator timer %s failed", key)

    def refresh_timers(self, now: int) -> None:
        """Give every pending timer a fresh deadline: `now` plus the delay it was set with (never earlier
        than it had). For a coordinator that was not serving (its ZooKeeper session in doubt, or the
        process stopped): members could not reach it meanwhile, so their session and rebalance timers
        start over when it serves again instead of firing on time that was not theirs (issue #24)."""
        self._now = now
        for key, (deadline, _, fire, delay) in list(self._timers.items()):
            self._timer_seq += 1
            fresh = max(deadline, now + delay)
            self._timers[key] = (fresh, self._timer_seq, fire, delay)
            heapq.heappush(self._heap, (fresh, self._timer_seq, key))

    def write_done(self, write_id: int, error: int, now: int) -> None:
        """A write this machine asked for is durable (error 0) or failed with `error` (Kafka's code)."""
        self._now = now
        callback = self._on_written.pop(write_id, None)
        if callback is not None:
            callback(error)

    def timestamp(self) -> int:
        """Wall time (ms) for state time stamps, which are written to records and compared by expiration."""
        return self._wall_ms() if self._wall_ms is not None else self._now

    def _write(self, group_id: str, records: list[Record], on_done: Callable[[int], None]) -> None:
        self._next_write_id += 1
        self._on_written[self._next_write_id] = on_done
        self._effects.append(Write(self._next_write_id, group_id, records))

    def _write_logged(self, group_id: str, records: list[Record], what: str) -> None:
        def done(error: int) -> None:
            if error:
                log.warning("writing %s of group %s failed: %s", what, group_id, ErrorCode(error).name)

        self._write(group_id, records, done)

    def _schedule(self, key: TimerKey, delay_ms: int, fn: Callable[..., None], *args: object) -> None:
        self._timer_seq += 1
        delay = max(delay_ms, 0)
        deadline = self._now + delay
        self._timers[key] = (deadline, self._timer_seq, functools.partial(fn, *args), delay)
        heapq.heappush(self._heap, (deadline, self._timer_seq, key))

    def _cancel(self, key: TimerKey) -> None:
        self._timers.pop(key, None)

    def _cancel_group_timers(self, group_id: str) -> None:
        for key in [k for k in self._timers if k[1] == group_id]:
            del self._timers[key]

    def _clear_timers(self) -> None:
        self._timers.clear()
        self._heap.clear()
