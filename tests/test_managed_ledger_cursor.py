"""kop/managed_ledger/cursor.py: ManagedCursorInfo in Pulsar's field numbers, and the cursor store on the
metadata store (versioned writes, the path layout beside the managed ledger, deletion with the ledger)."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from kop.managed_ledger import Position
from kop.managed_ledger.cursor import MAX_RANGES, NEXT_OFFSET, CursorInfo, CursorStore, cursor_path
from kop.storage.api import BadVersionError
from kop.storage.local.metadata import SqliteMetadataStore
from kop.storage.protobuf import LEN, VARINT, field_bytes, field_varint, iter_fields


def test_round_trip_and_field_numbers() -> None:
    info = CursorInfo(Position(7, 41), [(Position(7, 42), Position(7, 43)), (Position(8, -1), Position(8, 0))],
                      {NEXT_OFFSET: 1234}, last_active=99)
    data = info.encode()
    assert CursorInfo.decode(data) == info
    fields = [(n, w) for n, w, *_ in iter_fields(data)]
    # cursorsLedgerId=1 (-1: inline), markDelete ledger/entry=2/3, ranges=4, properties=5, lastActive=6
    assert fields == [(1, VARINT), (2, VARINT), (3, VARINT), (4, LEN), (4, LEN), (5, LEN), (6, VARINT)]
    assert next(v for n, _, v, *_ in iter_fields(data) if n == 1) == (1 << 64) - 1


def test_decodes_what_pulsar_writes_and_skips_what_it_does_not_know() -> None:
    """A cursor as Pulsar stores one inline: no properties of ours, and a cursorProperties field (8)."""
    def pos(ledger: int, entry: int) -> bytes:
        return field_varint(1, ledger) + field_varint(2, entry)

    data = (field_varint(1, (1 << 64) - 1) + field_varint(2, 18) + field_varint(3, 1)
            + field_bytes(4, field_bytes(1, pos(18, 2)) + field_bytes(2, pos(18, 3)))
            + field_bytes(8, field_bytes(1, b"k") + field_bytes(2, b"v")))
    info = CursorInfo.decode(data)
    assert info.mark_delete == Position(18, 1)
    assert info.ranges == [(Position(18, 2), Position(18, 3))]
    assert NEXT_OFFSET not in info.properties
    assert CursorInfo.decode(CursorInfo().encode()).mark_delete is None


def test_ranges_are_capped() -> None:
    info = CursorInfo(None, [(Position(1, i - 1), Position(1, i)) for i in range(MAX_RANGES + 10)])
    kept = CursorInfo.decode(info.encode()).ranges
    assert len(kept) == MAX_RANGES and kept[-1] == (Position(1, MAX_RANGES + 8), Position(1, MAX_RANGES + 9))


def test_store_saves_versioned_and_deletes(tmp_path: Path) -> None:
    async def main() -> None:
        store = SqliteMetadataStore(tmp_path)
        cursors = CursorStore(store)
        ml = "public/default/persistent/t-partition-0"
        await store.put(f"/managed-ledgers/{ml}", b"\x08\x01")
        assert await cursors.load(ml, "sub/one") is None
        v = await cursors.save(ml, "sub/one", CursorInfo(Position(3, 4), [], {NEXT_OFFSET: 5}), -1)
        assert cursor_path(ml, "sub/one") == f"/managed-ledgers/{ml}/sub%2Fone"  # URL-encoded, as Pulsar
        got = await cursors.load(ml, "sub/one")
        assert got is not None and got[0].mark_delete == Position(3, 4) and got[1] == v
        v2 = await cursors.save(ml, "sub/one", CursorInfo(Position(3, 9)), v)
        with pytest.raises(BadVersionError):  # a stale writer (another owner) cannot overwrite
            await cursors.save(ml, "sub/one", CursorInfo(Position(3, 5)), v)
        assert (await cursors.load(ml, "sub/one"))[0].mark_delete == Position(3, 9)  # type: ignore[index]
        assert v2 != v
        assert await cursors.names(ml) == ["sub/one"]
        await cursors.delete(ml, "sub/one")
        assert await cursors.load(ml, "sub/one") is None
        await store.close()

    asyncio.run(main())
