"""Delayed delivery (issue #22): the entries a Shared or Key_Shared subscription holds back until their time.

A Pulsar producer's ``deliver_at`` / ``deliver_after`` sets the entry's MessageMetadata.deliver_at_time (epoch ms);
the entry is stored as sent (kop/pulsar/convert.py keeps the field in the Kafka record header ``pulsar.deliver_at``)
and its dispatch waits. This is Pulsar's InMemoryDelayedDeliveryTracker, sans-IO (the caller passes the clock):

* ``add`` when the dispatcher reads an entry: an entry whose time is at or before the cutoff is not held (it goes
  out at once); the cutoff is now + ``delayedDeliveryTickTimeMillis`` (Pulsar's default, non-strict: delivery may
  come up to one tick early, which spares re-tracking an entry that is almost due).
* ``due`` pops the entries whose time is at or before the cutoff, in time order; the dispatcher replays them as it
  replays redelivered ones (before new entries). A delivered entry is never held again: a negative ack or a
  consumer leaving sends it back for redelivery at once, as in Pulsar (its time has passed).
* ``wake_in``: how long the dispatcher may sleep before the next entry's time (Pulsar's timer; its floor of one
  tick after the last run never binds here: a held entry's time is always more than a tick after it was read).
* Only Shared and Key_Shared subscriptions hold entries; Exclusive and Failover get them at once (Pulsar's rule).

The tracker is memory only, as Pulsar's: after a restart or a takeover the subscription reads again from its
mark-delete position and tracks the still-unacknowledged delayed entries anew (their times are in the entries).
Difference from Pulsar: an entry acknowledged before its time (by id) leaves the tracker at once (``discard``),
where Pulsar's queue keeps counting it until it falls due and its replay finds it acknowledged.
"""

from __future__ import annotations

import heapq

from kop.managed_ledger import Position


class DelayedTracker:
    """Held entries by position, with a heap by delivery time (removals are lazy: a popped position no longer
    held is skipped)."""

    def __init__(self, tick_ms: int) -> None:
        self.tick_ms = max(tick_ms, 0)
        self._at: dict[Position, int] = {}
        self._heap: list[tuple[int, Position]] = []

    def __len__(self) -> int:
        """Entries held now (Pulsar's getNumberOfDelayedMessages, msgDelayed in stats)."""
        return len(self._at)

    def __contains__(self, pos: Position) -> bool:
        return pos in self._at

    def add(self, pos: Position, deliver_at: int, now_ms: int) -> bool:
        """Hold the entry at `pos` until `deliver_at`; False (not held) when it is due by the cutoff already."""
        if deliver_at < 0 or deliver_at <= now_ms + self.tick_ms:
            return False
        if pos not in self._at:
            self._at[pos] = deliver_at
            heapq.heappush(self._heap, (deliver_at, pos))
        return True

    def discard(self, pos: Position) -> None:
        """The entry was acknowledged (or skipped by an admin operation): no longer held."""
        self._at.pop(pos, None)

    def due(self, now_ms: int) -> list[Position]:
        """Pop the held entries due by the cutoff (now + tick), earliest time first."""
        out: list[Position] = []
        cutoff = now_ms + self.tick_ms
        heap = self._heap
        while heap and heap[0][0] <= cutoff:
            at, pos = heapq.heappop(heap)
            if self._at.get(pos) == at:
                del self._at[pos]
                out.append(pos)
        if not self._at:
            heap.clear()
        return out

    def wake_in(self, now_ms: int) -> float | None:
        """Seconds until the next held entry falls due (0: one is due now), None when none is held."""
        heap = self._heap
        while heap and self._at.get(heap[0][1]) != heap[0][0]:
            heapq.heappop(heap)  # discarded
        if not heap:
            return None
        return max(heap[0][0] - now_ms, 0) / 1000

    def clear(self) -> None:
        """Forget every held entry (a rewind or seek: the subscription reads them again and re-tracks them)."""
        self._at.clear()
        self._heap.clear()
