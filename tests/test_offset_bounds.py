"""Where a partition log starts and ends (kop/offset/bounds.py): plain numbers, no ledger.

The high watermark is the durable index + 1. The log start is max(first retained batch's base offset,
DeleteRecords' offset), with the first batch's base replaced by the start a compaction kept when that is
lower, never above the high watermark, and the high watermark itself for a log without entries.
"""

from __future__ import annotations

from dataclasses import dataclass

from kop.offset.bounds import LogBounds


@dataclass
class Durable:
    durable_index: int = -1


def test_an_empty_log_starts_and_ends_at_zero() -> None:
    b = LogBounds(Durable())
    assert (b.log_start_offset, b.high_watermark, b.retained_start) == (0, 0, None)


def test_the_high_watermark_follows_the_durable_index() -> None:
    durable = Durable(9)
    b = LogBounds(durable, first_offset=0)
    assert b.high_watermark == 10
    durable.durable_index = 14  # an append became durable
    assert b.high_watermark == 15


def test_without_entries_the_log_starts_at_the_high_watermark() -> None:
    # every entry trimmed (retention) or compacted away: nothing to read, the next offset is the start
    b = LogBounds(Durable(41), first_offset=None)
    assert b.log_start_offset == 42


def test_the_log_starts_at_the_first_batch_or_at_delete_records_offset_whichever_is_later() -> None:
    b = LogBounds(Durable(99), first_offset=10)
    assert b.log_start_offset == 10
    b.delete_offset = 25  # DeleteRecords inside the retained data
    assert b.log_start_offset == 25
    b.delete_offset = 5  # an older DeleteRecords offset below the first batch
    assert b.log_start_offset == 10


def test_the_log_start_never_passes_the_high_watermark() -> None:
    b = LogBounds(Durable(9), first_offset=0, delete_offset=50)
    assert b.log_start_offset == 10


def test_a_compaction_floor_keeps_the_start_where_it_was() -> None:
    # compaction removed the first batches (first entry now starts at 30) but Kafka keeps the log start
    b = LogBounds(Durable(99), first_offset=30, start_floor=20)
    assert b.log_start_offset == 20 and b.retained_start == 20
    b.delete_offset = 25
    assert b.log_start_offset == 25
    b.start_floor = 40  # a floor above the first entry changes nothing
    b.delete_offset = 0
    assert b.log_start_offset == 30 and b.retained_start == 30


def test_a_floor_alone_is_the_start_of_a_log_compacted_to_nothing() -> None:
    b = LogBounds(Durable(99), first_offset=None, start_floor=12)
    assert b.log_start_offset == 12 and b.retained_start == 12
