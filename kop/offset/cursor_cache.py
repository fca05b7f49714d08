"""Per-connection cursor cache: (partition log name, next offset) -> position of the entry containing it.

KoP keeps one of these per client connection (KafkaTopicConsumerManager): after a fetch returns batches
up to offset N, the position of the entry holding N is remembered under N, so the consumer's next fetch
(at N) starts reading there with no binary search. Positions are immutable values, so unlike KoP's
non-durable cursors an entry can be shared and nothing has to be closed; the LRU bound keeps a connection
that wanders over many partitions/offsets from growing without limit. A stale position is harmless:
PartitionLog.read() checks that the hinted entry really contains the offset and searches otherwise.
"""

from __future__ import annotations

from collections import OrderedDict

from kop.offset.api import Position, ReadResult


class CursorCache:
    __slots__ = ("capacity", "_entries", "hits", "misses")

    def __init__(self, capacity: int = 1024) -> None:
        self.capacity = capacity
        self._entries: OrderedDict[tuple[str, int], Position] = OrderedDict()
        self.hits = 0
        self.misses = 0

    def get(self, log_name: str, offset: int) -> Position | None:
        """The remembered position for a fetch of `offset` in `log_name` (pass it as read()'s hint)."""
        key = (log_name, offset)
        position = self._entries.get(key)
        if position is None:
            self.misses += 1
            return None
        self.hits += 1
        self._entries.move_to_end(key)
        return position

    def put(self, log_name: str, offset: int, position: Position | None) -> None:
        if position is None or self.capacity <= 0:
            return
        key = (log_name, offset)
        self._entries[key] = position
        self._entries.move_to_end(key)
        if len(self._entries) > self.capacity:
            self._entries.popitem(last=False)

    def remember(self, log_name: str, result: ReadResult) -> None:
        """Record where the read after `result` starts (its next_offset -> next_position)."""
        if result.batches:
            self.put(log_name, result.next_offset, result.next_position)

    def forget(self, log_name: str, offset: int) -> None:
        self._entries.pop((log_name, offset), None)

    def invalidate(self, log_name: str | None = None) -> None:
        """Drop everything (or everything of one log, e.g. when its topic is deleted)."""
        if log_name is None:
            self._entries.clear()
        else:
            for key in [k for k in self._entries if k[0] == log_name]:
                del self._entries[key]

    def __len__(self) -> int:
        return len(self._entries)
