"""Replacing closed ledgers (kop/managed_ledger/rewrite.py + ManagedLedger.replace_ledgers): the building
block of compaction. One compare-and-set swaps the list; a crash at any step leaves the old list or the new
one, and whatever is left unreferenced is garbage-collected. Real files, real sqlite."""

from __future__ import annotations

import asyncio

from kop.managed_ledger import InvalidPositionError, ManagedLedgerConfig, Position
from kop.offset.storage import LogStorage
from kop.storage.local.ledgers import LocalLedgerStore
from kop.storage.local.metadata import SqliteMetadataStore
from tests.support.storage import run, settled

NAME = "public/default/persistent/t-partition-0"


def open_storage(path, **ml) -> LogStorage:
    return LogStorage(LocalLedgerStore(path / "ledgers", fsync="none"), SqliteMetadataStore(path, durable=False),
                   ManagedLedgerConfig(**ml) if ml else None)


async def filled(st: LogStorage, n: int):
    ml = await st.factory.open(NAME)
    for i in range(n):
        await ml.add_entry(b"e%03d" % i)
    await settled(ml)
    return ml


async def all_entries(ml) -> list[bytes]:
    first = ml.first_position()
    if first is None:
        return []
    return [bytes(e.data) for e in await ml.read_entries(first, 10_000)]


async def test_replace_a_run_keeps_the_current_ledger_and_order(tmp_path):
    st = open_storage(tmp_path, max_entries_per_ledger=3)
    ml = await filled(st, 10)  # ledgers of 3, 3, 3, then the current one with 1
    infos = ml.ledgers()
    assert [li.entries for li in infos] == [3, 3, 3, 1]
    old = [li.ledger_id for li in infos[:3]]
    rw = ml.rewriter()
    for i in (1, 4, 8):
        await rw.add(b"e%03d" % i)
    new = await rw.finish()
    assert len(new) == 1 and new[0].entries == 3
    assert await ml.replace_ledgers(old, new, {"p": "1"})
    assert await all_entries(ml) == [b"e001", b"e004", b"e008", b"e009"]
    assert [li.ledger_id for li in ml.ledgers()] == [new[0].ledger_id, infos[3].ledger_id]
    assert ml.layout_version == 1 and ml.properties["p"] == "1"
    assert sorted(await st.ledger_store.list_ledgers()) == sorted([new[0].ledger_id, infos[3].ledger_id])
    try:  # a position in a replaced ledger is gone, not some other entry
        await ml.read_entry(Position(old[0], 0))
        raise AssertionError("read from a replaced ledger")
    except InvalidPositionError:
        pass
    await ml.add_entry(b"e010")  # appends go on
    await st.close()
    st = open_storage(tmp_path, max_entries_per_ledger=3)
    ml = await st.factory.open(NAME)
    assert await all_entries(ml) == [b"e001", b"e004", b"e008", b"e009", b"e010"]
    assert ml.properties["p"] == "1"
    await st.close()


def test_replace_by_nothing_and_the_rewriter_rolls_by_size_limits(tmp_path):
    async def main():
        st = open_storage(tmp_path, max_entries_per_ledger=2)
        ml = await filled(st, 7)
        infos = ml.ledgers()
        rw = ml.rewriter()
        for i in range(5):
            await rw.add([b"x", b"%d" % i])
        new = await rw.finish()
        assert [li.entries for li in new] == [2, 2, 1]  # rolled at max_entries_per_ledger
        await rw_abort_is_harmless_after_finish(rw, new, st)
        # replace the middle run (ledgers 2 and 3) by nothing
        assert await ml.replace_ledgers([infos[1].ledger_id, infos[2].ledger_id], [])
        assert await all_entries(ml) == [b"e000", b"e001", b"e006"]
        assert ml.number_of_entries == 3
        await st.close()

    async def rw_abort_is_harmless_after_finish(rw, new, st):
        ids = {li.ledger_id for li in new}
        assert ids <= set(await st.ledger_store.list_ledgers())
        await rw.abort()  # deletes what it wrote
        assert not ids & set(await st.ledger_store.list_ledgers())

    run(main())


async def test_replace_is_refused_when_the_run_changed(tmp_path):
    st = open_storage(tmp_path, max_entries_per_ledger=2)
    ml = await filled(st, 7)
    infos = ml.ledgers()
    run_ids = [li.ledger_id for li in infos[:3]]
    rw = ml.rewriter()
    await rw.add(b"y")
    new = await rw.finish()
    await ml.trim_ledgers(1)  # retention took the first ledger meanwhile
    v = ml.layout_version
    assert not await ml.replace_ledgers(run_ids, new)
    assert ml.layout_version == v
    assert not await ml.replace_ledgers([infos[1].ledger_id, infos[3].ledger_id], new)  # not consecutive
    current = ml.current_ledger_id
    assert not await ml.replace_ledgers([current], new)  # never the current ledger
    assert await all_entries(ml) == [b"e%03d" % i for i in range(2, 7)]
    # trim by ids: refused once the first ledgers are not those any more
    assert await ml.trim_ledgers(1, ids=[infos[0].ledger_id]) == 0
    assert await ml.trim_ledgers(1, ids=[infos[1].ledger_id]) == 1
    await st.close()


def test_crash_before_and_after_the_swap_leaves_one_list_and_garbage_is_collected(tmp_path):
    async def crash_before(path):
        st = open_storage(path, max_entries_per_ledger=2)
        ml = await filled(st, 5)
        rw = ml.rewriter()
        await rw.add(b"z")
        new = await rw.finish()
        st.abandon()  # killed before the CAS
        return [li.ledger_id for li in new]

    async def crash_after(path):
        st = open_storage(path, max_entries_per_ledger=2)
        ml = await st.factory.open(NAME)
        infos = ml.ledgers()
        rw = ml.rewriter()
        await rw.add(b"z")
        new = await rw.finish()
        # the CAS happens, then the process dies before deleting the old ledgers
        store = st.ledger_store
        deleted = []

        async def no_delete(ledger_id):
            deleted.append(ledger_id)
            raise asyncio.CancelledError  # dies here

        store.delete_ledger = no_delete
        try:
            await ml.replace_ledgers([infos[0].ledger_id, infos[1].ledger_id], new)
        except asyncio.CancelledError:
            pass
        st.abandon()
        return [li.ledger_id for li in infos[:2]]

    async def reopen(path):
        st = open_storage(path, max_entries_per_ledger=2)
        collected = await st.collect_garbage()
        ml = await st.factory.open(NAME)
        entries = await all_entries(ml)
        await st.close()
        return collected, entries

    orphans = run(crash_before(tmp_path))
    collected, entries = run(reopen(tmp_path))
    assert collected == orphans
    assert entries == [b"e%03d" % i for i in range(5)]
    old = run(crash_after(tmp_path))
    collected, entries = run(reopen(tmp_path))
    assert collected == old[1:] or collected == old  # the first delete may have started
    assert entries == [b"z", b"e004"]
