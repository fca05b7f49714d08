"""Damaged storage as a partition log meets it (kop/offset/damage.py), with a stub ledger and index.

A damaged run of entries held the offsets up to the next intact entry's base offset - 1 (the durable end
when nothing intact follows); a read that meets it is counted every time and reported once per range, with
the ledger, entries, bytes and Kafka offsets; other read errors are counted and logged once per error.
(tests/test_storage_damage.py damages real ledger files under a running broker.)
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field

import pytest

from kop.managed_ledger import InvalidPositionError, Position
from kop.offset.bounds import LogBounds
from kop.offset.damage import DamageLog, index_after_damage
from kop.offset.entry_format import EntryMeta
from kop.storage.api import LedgerDamagedError, StorageError


@dataclass
class Durable:
    durable_index: int


@dataclass
class StubLedger:
    """Ledgers of entries, each entry (base offset, last offset) or None when damaged."""

    ledgers: dict[int, list[tuple[int, int] | None]]
    order: list[Position] = field(init=False)

    def __post_init__(self) -> None:
        self.order = [Position(lid, eid) for lid, entries in self.ledgers.items() for eid in range(len(entries))]

    @property
    def number_of_entries(self) -> int:
        return len(self.order)

    def ordinal_of(self, position: Position) -> int:
        try:
            return self.order.index(position)
        except ValueError:
            raise InvalidPositionError(str(position)) from None

    def next_position(self, position: Position) -> Position:
        return self.order[self.ordinal_of(position) + 1]

    def ledger_counts(self) -> list[tuple[int, int]]:
        return [(lid, len(entries)) for lid, entries in self.ledgers.items()]

    def damage_at(self, lid: int, eid: int) -> LedgerDamagedError:
        entries = self.ledgers[lid]
        last = eid
        while last + 1 < len(entries) and entries[last + 1] is None:
            last += 1
        return LedgerDamagedError(lid, eid, last, 100 * eid, 100 * (last + 1), "checksum mismatch")

    async def read_meta(self, lid: int, eid: int) -> EntryMeta:
        got = self.ledgers[lid][eid]
        if got is None:
            first = eid
            while first > 0 and self.ledgers[lid][first - 1] is None:
                first -= 1
            raise self.damage_at(lid, first)
        base, last = got
        return EntryMeta(last, last - base, -1, -1)


class StubIndex:
    def __init__(self, ml: StubLedger) -> None:
        self.ml = ml

    async def read_meta(self, lid: int, eid: int) -> EntryMeta:
        return await self.ml.read_meta(lid, eid)

    async def probe(self, lid: int, eid: int) -> EntryMeta:
        return await self.ml.read_meta(lid, eid)

    async def last_index_of(self, lid: int, entries: int) -> int:
        return (await self.ml.read_meta(lid, entries - 1)).index


# ledger 1: offsets 0..2, 3..4, damaged, damaged, 9..9 | ledger 2: damaged, 12..14 | ledger 3: 15..15, damaged
LOG = {1: [(0, 2), (3, 4), None, None, (9, 9)], 2: [None, (12, 14)], 3: [(15, 15), None]}


@pytest.mark.parametrize(("lid", "eid", "expected"), [
    (1, 2, 8),  # the next intact entry starts at 9
    (2, 0, 11),  # same, inside the next ledger's first entry
    (3, 1, 99),  # nothing intact follows: the durable end
])
async def test_a_damaged_run_held_the_offsets_up_to_the_next_intact_entry(lid, eid, expected):
    ml = StubLedger(LOG)
    e = ml.damage_at(lid, eid)
    assert await index_after_damage(ml, e, ml.read_meta, durable_index=99) == expected


async def test_consecutive_damaged_runs_are_stepped_over():
    ml = StubLedger({1: [(0, 0), None], 2: [None, None], 3: [(7, 9)]})
    assert await index_after_damage(ml, ml.damage_at(1, 1), ml.read_meta, 99) == 6


def damage_log(ml: StubLedger, durable: int = 99, first: int | None = 0) -> DamageLog:
    return DamageLog("t-0", ml, StubIndex(ml), LogBounds(Durable(durable), first_offset=first))


async def test_a_damaged_range_is_reported_once_with_its_offsets_and_counted_every_time(caplog):
    ml = StubLedger(LOG)
    damage = damage_log(ml)
    e = ml.damage_at(1, 2)
    with caplog.at_level(logging.ERROR, logger="kop.offset.damage"):
        await damage.report(e)
        await damage.report(e)
    assert damage.reads == 2
    assert damage.ranges == {(1, 2): {"ledgerId": 1, "firstEntry": 2, "lastEntry": 3, "byteStart": 200,
                                      "byteEnd": 400, "reason": "checksum mismatch", "firstOffset": 5,
                                      "lastOffset": 8}}
    assert len([r for r in caplog.records if "damaged storage" in r.getMessage()]) == 1
    assert "hold offsets 5..8" in caplog.records[0].getMessage()


async def test_a_damaged_first_entry_starts_after_the_previous_ledger():
    ml = StubLedger(LOG)
    damage = damage_log(ml)
    await damage.report(ml.damage_at(2, 0))
    assert (damage.ranges[(2, 0)]["firstOffset"], damage.ranges[(2, 0)]["lastOffset"]) == (10, 11)


async def test_damage_at_the_very_start_starts_at_the_log_start():
    ml = StubLedger({4: [None, (20, 21)]})
    damage = damage_log(ml, first=17)
    await damage.report(ml.damage_at(4, 0))
    assert (damage.ranges[(4, 0)]["firstOffset"], damage.ranges[(4, 0)]["lastOffset"]) == (17, 19)


def test_other_read_errors_are_counted_and_logged_once_per_error(caplog):
    damage = damage_log(StubLedger(LOG))
    with caplog.at_level(logging.ERROR, logger="kop.offset.damage"):
        damage.read_failed(3, StorageError("disk gone"))
        damage.read_failed(4, StorageError("disk gone"))
        damage.read_failed(4, StorageError("permission denied"))
    assert damage.reads == 3 and damage.ranges == {}
    assert [r.getMessage().split(": ", 1)[1] for r in caplog.records] == [
        "reading offset 3 failed: StorageError('disk gone')",
        "reading offset 4 failed: StorageError('permission denied')"]
