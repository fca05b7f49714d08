"""Where a partition log starts and ends: the one state the parts of ManagedPartitionLog share.

* high watermark = last *durable* index + 1 (the interceptor's ``durable_index``);
* log start offset = max(base offset of the first retained entry, the DeleteRecords offset), where the
  first entry's base offset is replaced by the start a compaction kept (``kop.compactionStart``) when that is
  lower; never above the high watermark, and equal to it for an empty log.

Three parts write it, each its own field: the offset index learns ``first_offset`` (it reads the first
entry) and ``start_floor`` (from the property compaction writes), retention sets ``delete_offset``
(DeleteRecords). Everything that asks "is this offset in the log?" reads it. The parts share this small
interface instead of references to each other or to the whole log, so each part's tests build a LogBounds
with the numbers they need. ManagedPartitionLog is itself a LogBounds (its log_start_offset and
high_watermark, read on every fetch, stay one property away) and hands itself to its parts as such.
"""

from __future__ import annotations

from typing import Protocol


class DurableIndex(Protocol):
    """The interceptor's acknowledged end (kop/offset/interceptor.py)."""

    durable_index: int


class LogBounds:
    __slots__ = ("durable", "first_offset", "start_floor", "delete_offset")

    def __init__(self, durable: DurableIndex, first_offset: int | None = None, start_floor: int | None = None,
                 delete_offset: int = 0) -> None:
        self.durable = durable
        self.first_offset = first_offset  # base offset of the first retained entry (None: no entry)
        self.start_floor = start_floor  # log start kept by compaction (kop.compactionStart)
        self.delete_offset = delete_offset  # DeleteRecords' log start offset (kop.logStartOffset)

    @property
    def high_watermark(self) -> int:
        return self.durable.durable_index + 1

    @property
    def log_start_offset(self) -> int:
        hwm = self.durable.durable_index + 1
        first = self.first_offset
        floor = self.start_floor
        if floor is not None and (first is None or floor < first):
            first = floor  # compaction removed the first batches: the log still starts where it did
        if first is None:
            return hwm
        return min(hwm, max(first, self.delete_offset))

    @property
    def retained_start(self) -> int | None:
        """The start a compaction pass must keep: min(first entry's base offset, the start an earlier pass
        kept); None for a log without entries."""
        starts = [x for x in (self.first_offset, self.start_floor) if x is not None]
        return min(starts) if starts else None

    def __repr__(self) -> str:
        return (f"LogBounds(start={self.log_start_offset}, hwm={self.high_watermark}, first={self.first_offset}, "
                f"floor={self.start_floor}, deleted_before={self.delete_offset})")
