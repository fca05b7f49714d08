"""The ledger store over real bookies (kop/storage/bookkeeper), against a real ZooKeeper and 4 real bookies
(tests/support/bookkeeper.py, one cluster per test process).

* (The ledger-store contract both backends keep is in tests/test_storage_ledgers.py.)
* BookKeeper's own shell, from the same jars, lists our ledgers, parses their metadata and reads entries.
* Open-with-recovery by a second client fences the first: its next append fails with LedgerFencedError.
* Recovery decides on the tail as BookKeeper does: an entry on an ack quorum of bookies is kept (and
  re-replicated), an entry on fewer is dropped.
* A reader of a closed ledger follows BookKeeper's own recovery of a dead bookie (the shell's `recover`),
  which moves that bookie's copies elsewhere, by re-reading the metadata after a failed read.
* A bookie SIGKILLed during appends (E=3, Qw=3, Qa=2): every acknowledged entry survives, appends go on
  after an ensemble change, and a ledger with the dead bookie in its ensemble can still be recovered.

Ledgers use E=3, Qw=3, Qa=2 unless a test says otherwise.
"""

from __future__ import annotations

import asyncio
import re
import time

import pytest

from kop.storage.api import LedgerClosedError, LedgerFencedError, StorageError
from kop.storage.bookkeeper import (
    BookKeeperLedgerStore,
    LedgerMetadata,
    ledger_path,
    parse_metadata_service_uri,
)
from kop.storage.bookkeeper import protocol as p
from kop.storage.bookkeeper.metadata import CLOSED, Segment, decode_bookie_address, ledger_id_from_path
from tests.support.storage import run_uvloop  # the broker's event loop


def payload(i: int, size: int = 100) -> bytes:
    return (f"entry-{i}-".encode() * size)[:size]


# ---- BookKeeper only --------------------------------------------------------------------------------------------


def test_the_client_runs_on_the_default_asyncio_loop_too(cluster):
    async def main():
        store = await BookKeeperLedgerStore.connect(cluster.metadata_service_uri)
        lh = await store.create_ledger()
        assert await asyncio.gather(*(lh.append(payload(i)) for i in range(20))) == list(range(20))
        other = await BookKeeperLedgerStore.connect(cluster.metadata_service_uri)
        rh = await other.open_ledger(lh.ledger_id, recover=True)
        assert [bytes(x) for x in await rh.read(0, 19)] == [payload(i) for i in range(20)]
        with pytest.raises(LedgerFencedError):
            await lh.append(b"fenced")
        await store.close()
        await other.close()

    asyncio.run(main())


def test_a_managed_ledger_runs_on_bookkeeper_and_zookeeper(cluster):
    """The managed ledger over the two ZooKeeper/BookKeeper stores: adds, rollover, reopen (recovering the
    last ledger), reads across ledgers; its info is in ZooKeeper at Pulsar's path."""
    from kop.managed_ledger import ManagedLedgerConfig, ManagedLedgerFactory
    from kop.managed_ledger.ledger import Position
    from kop.storage.zookeeper import ZooKeeperMetadataStore

    async def main():
        config = ManagedLedgerConfig(max_entries_per_ledger=10)
        root = f"zk:{cluster.zk_connect}/kop-ml-{time.time_ns()}"
        meta = await ZooKeeperMetadataStore.connect(root)
        store = await BookKeeperLedgerStore.connect(cluster.metadata_service_uri)
        factory = ManagedLedgerFactory(store, meta, config)
        ml = await factory.open("public/default/persistent/bk-partition-0")
        positions = [await ml.add_entry(b"m%03d" % i) for i in range(25)]
        assert len({pos.ledger_id for pos in positions}) >= 3  # rolled over
        await factory.close()
        await store.close()
        await meta.close()

        meta = await ZooKeeperMetadataStore.connect(root)
        store = await BookKeeperLedgerStore.connect(cluster.metadata_service_uri)
        factory = ManagedLedgerFactory(store, meta, config)
        ml = await factory.open("public/default/persistent/bk-partition-0")
        assert ml.number_of_entries == 25
        entries = await ml.read_entries(Position(positions[0].ledger_id, 0), 100)
        assert [bytes(e.data) for e in entries] == [b"m%03d" % i for i in range(25)]
        await ml.add_entry(b"after reopen")
        assert await meta.exists("/managed-ledgers/public/default/persistent/bk-partition-0")
        for li in ml.ledgers():  # every ledger it lists is a BookKeeper ledger with metadata at BK's path
            assert await store.zk.exists(ledger_path(li.ledger_id))
        await factory.close()
        await store.close()
        await meta.close()

    run_uvloop(main())


def test_ledger_paths_and_metadata_format():
    assert ledger_path(42) == "/ledgers/00/0000/L0042"
    assert ledger_path(1234567890) == "/ledgers/12/3456/L7890"
    assert ledger_path(2**31 - 1) == "/ledgers/000/0000/0021/4748/L3647"
    assert ledger_id_from_path(["00", "0000", "L0042"]) == 42
    assert ledger_id_from_path(["000", "0000", "0021", "4748", "L3647"]) == 2**31 - 1
    assert ledger_id_from_path(["available"]) is None
    md = LedgerMetadata(3, 3, 2, [Segment(0, ["a:1", "b:2", "c:3"]), Segment(17, ["a:1", "d:4", "c:3"])],
                        state=CLOSED, last_entry_id=99, length=12345, password=b"pw", ctime=1,
                        custom={"application": b"kop"}, ctoken=7)
    raw = md.encode()
    assert raw.startswith(b"BookieMetadataFormatVersion\t3\n")
    back = LedgerMetadata.decode(raw)
    assert back == md
    assert back.ensemble_for(16) == ["a:1", "b:2", "c:3"] and back.ensemble_for(17) == ["a:1", "d:4", "c:3"]
    with pytest.raises(StorageError, match="format 2"):
        LedgerMetadata.decode(b"BookieMetadataFormatVersion\t2\nquorumSize: 2\n")
    assert parse_metadata_service_uri("zk+hierarchical://h1:1;h2:2/ledgers") == ("h1:1,h2:2", "/ledgers")
    assert parse_metadata_service_uri("h:1") == ("h:1", "/ledgers")
    with pytest.raises(ValueError):
        parse_metadata_service_uri("etcd://h:1/ledgers")
    assert decode_bookie_address("127.0.0.1:3181", None) == ("127.0.0.1", 3181)


def test_entry_format_and_digest():
    key = p.master_key(b"")
    assert len(key) == 20
    prefix = p.encode_add(key, 5, 7, 6, 1000, (b"hel", b"lo"), 5)
    frame = memoryview(prefix + b"hello")
    assert int.from_bytes(frame[:4], "big") == len(frame) - 4
    assert int.from_bytes(frame[4:8], "big") == (2 << 24) | (1 << 16)
    entry = p.decode_entry(frame[28:], 5, 7)
    assert (entry.ledger_id, entry.entry_id, entry.lac, entry.length, bytes(entry.payload)) == (5, 7, 6, 1000, b"hello")
    damaged = bytearray(frame[28:])
    damaged[-1] ^= 1
    with pytest.raises(p.DigestError):
        p.decode_entry(memoryview(damaged), 5, 7)
    with pytest.raises(p.DigestError):
        p.decode_entry(frame[28:], 5, 8)


def test_bookkeepers_own_shell_lists_and_reads_our_ledger(cluster):
    async def write() -> int:
        store = await BookKeeperLedgerStore.connect(cluster.metadata_service_uri)
        lh = await store.create_ledger()
        for i in range(5):
            await lh.append(b"written by kop in python #%d" % i)
        await lh.close()
        await store.close()
        return lh.ledger_id

    ledger_id = run_uvloop(write())
    listed = cluster.shell("listledgers")
    assert listed.returncode == 0, listed.stderr[-3000:]
    assert f"ledgerID: {ledger_id}" in listed.stdout.splitlines()
    meta = cluster.shell("ledgermetadata", "-ledgerid", ledger_id)
    assert meta.returncode == 0, meta.stderr[-3000:]
    assert re.search(r"ensembleSize=3, writeQuorumSize=3, ackQuorumSize=2, state=CLOSED, length=\d+, "
                     r"lastEntryId=4, digestType=CRC32C", meta.stdout), meta.stdout
    read = cluster.shell("readledger", "-ledgerid", ledger_id, "-firstentryid", 3, "-lastentryid", 4, "-msg")
    assert read.returncode == 0, read.stderr[-3000:]
    assert "written by kop in python #3" in read.stdout and "written by kop in python #4" in read.stdout
    assert re.search(rf"Lid={ledger_id}, Eid=4,", read.stdout), read.stdout


def test_recovery_by_another_client_fences_the_writer(cluster):
    """Two clients (two brokers' worth): B opens A's open ledger with recovery; A's next append is refused
    by the bookies with EFENCED and fails with LedgerFencedError; B sees everything A had acknowledged."""

    async def main():
        a = await BookKeeperLedgerStore.connect(cluster.metadata_service_uri)
        b = await BookKeeperLedgerStore.connect(cluster.metadata_service_uri)
        lh = await a.create_ledger()
        for i in range(10):
            await lh.append(payload(i))
        rh = await b.open_ledger(lh.ledger_id, recover=True)
        assert rh.is_sealed and rh.last_add_confirmed == 9
        with pytest.raises(LedgerFencedError):
            await lh.append(b"old owner writes after takeover")
        with pytest.raises(LedgerFencedError):
            await lh.append(b"and again")
        await lh.close()
        md, _ = await b.read_metadata(lh.ledger_id)
        assert md.is_closed and md.last_entry_id == 9 and md.length == 1000
        assert [bytes(x) for x in await rh.read(0, 9)] == [payload(i) for i in range(10)]
        assert b.recoveries == 1
        await a.close()
        await b.close()

    run_uvloop(main())


def test_recovery_keeps_an_entry_on_an_ack_quorum_and_ends_at_the_first_missing_one(cluster):
    """A writer died after sending entry 3 to two bookies and entry 5 to one, with nothing acknowledged
    past entry 2 (the frames are sent by hand over our connections, as the dying writer would have).
    Recovery keeps entry 3 - it may have been acknowledged - and writes it back to all three bookies of
    its write set; entry 4 is on no bookie, so the ledger ends at 3 whatever entry 5 is."""

    async def main():
        store = await BookKeeperLedgerStore.connect(cluster.metadata_service_uri)
        lh = await store.create_ledger()
        for i in range(3):
            await lh.append(payload(i))
        ensemble = lh.ensemble

        async def raw_add(entry_id: int, positions: list[int]) -> None:
            futs = []
            prefix = p.encode_add(store.master_key, lh.ledger_id, entry_id, 2, 100 * (entry_id + 1),
                                  (payload(entry_id),), 100)
            for pos in positions:
                fut = asyncio.get_running_loop().create_future()
                store.pool.connection(ensemble[pos]).send(
                    (p.ADD_ENTRY, lh.ledger_id, entry_id), (prefix, payload(entry_id)),
                    lambda rc, _b, fut=fut: fut.set_result(rc))
                futs.append(fut)
            assert await asyncio.gather(*futs) == [p.EOK] * len(positions)

        await raw_add(3, [0, 1])
        await raw_add(5, [2])
        other = await BookKeeperLedgerStore.connect(cluster.metadata_service_uri)
        rh = await other.open_ledger(lh.ledger_id, recover=True)
        assert rh.last_add_confirmed == 3 and rh.length == 400
        assert [bytes(x) for x in await rh.read(0, 3)] == [payload(i) for i in range(4)]
        # entry 3 is now on all three bookies of its write set
        answers = await other._read_all(lh.ledger_id, ensemble, 3, fence=False)
        assert [rc for rc, _ in answers] == [p.EOK] * 3
        await store.close()
        await other.close()

    run_uvloop(main())


def test_reads_fall_back_to_the_next_bookie_of_the_write_set(cluster):
    """An entry missing on the first bookie of its write set is read from the next one. Entries 0 and 1
    are written by hand: entry 0 to positions 1 and 2 only (its write set is 0, 1, 2, so position 0 is
    asked first), entry 1 everywhere, carrying LAC 0; a reader that does not recover learns LAC 0."""

    async def main():
        store = await BookKeeperLedgerStore.connect(cluster.metadata_service_uri)
        lh = await store.create_ledger()
        loop = asyncio.get_running_loop()
        futs = []
        for entry_id, lac, positions in ((0, -1, (1, 2)), (1, 0, (0, 1, 2))):
            data = b"entry %d" % entry_id
            prefix = p.encode_add(store.master_key, lh.ledger_id, entry_id, lac, 7 * (entry_id + 1), (data,), 7)
            for pos in positions:
                fut = loop.create_future()
                store.pool.connection(lh.ensemble[pos]).send((p.ADD_ENTRY, lh.ledger_id, entry_id), (prefix, data),
                                                             lambda rc, _b, fut=fut: fut.set_result(rc))
                futs.append(fut)
        assert await asyncio.gather(*futs) == [p.EOK] * 5
        other = await BookKeeperLedgerStore.connect(cluster.metadata_service_uri)
        rh = await other.open_ledger(lh.ledger_id, recover=False)
        assert rh.last_add_confirmed == 0 and rh.length == 7 and not rh.is_sealed
        assert [bytes(x) for x in await rh.read(0, 0)] == [b"entry 0"]
        first = other.pool.connection(lh.ensemble[0])
        assert first.requests >= 2  # the LAC read and the read of entry 0 that it did not have
        await store.close()
        await other.close()

    run_uvloop(main())


def test_a_reader_follows_bookkeepers_recovery_of_a_dead_bookie(cluster):
    """BookKeeper's own recovery (`bookkeeper shell recover <dead bookie>`) copies a dead bookie's entries
    of our closed ledger to the fourth bookie and rewrites the ensemble in ZooKeeper. A reader opened
    before it, holding the old ensemble, still reads every entry after the two other bookies of that
    ensemble die too, when only the new copy is left: it re-reads the metadata after a failed read."""

    async def main():
        store = await BookKeeperLedgerStore.connect(cluster.metadata_service_uri)
        lh = await store.create_ledger()
        await asyncio.gather(*(lh.append(payload(i)) for i in range(30)))
        await lh.close()
        reader = await BookKeeperLedgerStore.connect(cluster.metadata_service_uri)
        rh = await reader.open_ledger(lh.ledger_id, recover=False)
        assert [bytes(x) for x in await rh.read(0, 29)] == [payload(i) for i in range(30)]
        old = rh.metadata
        victim, *others = old.last_ensemble
        (fourth,) = {b.bookie_id for b in cluster.bookies} - set(old.last_ensemble)

        await asyncio.to_thread(cluster.kill_bookie, cluster.bookie_by_id(victim).index)
        # -ledger: the shared cluster also holds other tests' ledgers, some left unrecoverable on purpose.
        done = await asyncio.to_thread(cluster.shell, "recover", "-force", "-ledger", lh.ledger_id, victim,
                                       timeout=180)
        assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
        md, _ = await store.read_metadata(lh.ledger_id)
        assert md.is_closed and md.last_entry_id == 29
        assert sorted(md.last_ensemble) == sorted([fourth, *others])

        for b in others:  # only the recovered copy is left
            await asyncio.to_thread(cluster.kill_bookie, cluster.bookie_by_id(b).index)
        assert [bytes(x) for x in await rh.read(0, 29)] == [payload(i) for i in range(30)]
        assert rh.metadata.last_ensemble == md.last_ensemble
        assert [bytes(x) for x in await rh.read_up_to(0, 29, 1 << 20)] == [payload(i) for i in range(30)]
        await store.close()
        await reader.close()

    run_uvloop(main())


def test_a_bookie_killed_during_appends_loses_no_acknowledged_entry(cluster):
    """E=3, Qw=3, Qa=2. A bookie of the ledger's ensemble is SIGKILLed while appends are in flight:
    every append is acknowledged (by the two live bookies, then the new ensemble), the ledger's metadata
    gains a segment without the dead bookie, and after close a second client reads every entry back.
    A second ledger, idle, with the dead bookie in its ensemble, is still recoverable (2 of 3 answer).
    BookKeeper's shell then reads an entry written after the ensemble change."""
    total, kill_at = 3000, 800

    async def main() -> tuple[int, int]:
        store = await BookKeeperLedgerStore.connect(cluster.metadata_service_uri)
        lh = await store.create_ledger()
        idle = await store.create_ledger()
        for i in range(20):
            await idle.append(payload(i))
        victim = next(b for b in lh.ensemble if b in idle.ensemble)
        futs = [lh.append_nowait(payload(i, 200)) for i in range(kill_at)]
        await futs[kill_at // 2]  # the ledger is well under way
        futs += [lh.append_nowait(payload(i, 200)) for i in range(kill_at, kill_at + 200)]
        in_flight = lh.pending
        # Killed synchronously, before the loop runs again: the 200 appends just issued have not even been
        # written to the sockets yet (that happens once per loop iteration), so they are certainly in
        # flight when the bookie dies.
        cluster.kill_bookie(cluster.bookie_by_id(victim).index)
        for i in range(kill_at + 200, total):
            futs.append(lh.append_nowait(payload(i, 200)))
            if i % 50 == 49:
                await asyncio.sleep(0)
        assert in_flight >= 200
        assert await asyncio.gather(*futs) == list(range(total))
        assert store.ensemble_changes >= 1
        assert victim not in lh.ensemble
        md, _ = await store.read_metadata(lh.ledger_id)
        assert len(md.segments) >= 2 and victim in md.segments[0].ensemble and victim not in md.last_ensemble
        await lh.close()

        reader = await BookKeeperLedgerStore.connect(cluster.metadata_service_uri)
        rh = await reader.open_ledger(lh.ledger_id)
        assert rh.last_add_confirmed == total - 1
        got = await rh.read(0, total - 1)
        assert [bytes(x) for x in got] == [payload(i, 200) for i in range(total)]
        recovered = await reader.open_ledger(idle.ledger_id, recover=True)  # the dead bookie is in its ensemble
        assert recovered.last_add_confirmed == 19
        assert [bytes(x) for x in await recovered.read(0, 19)] == [payload(i) for i in range(20)]
        await store.close()
        await reader.close()
        return lh.ledger_id, md.segments[-1].first_entry_id

    try:
        ledger_id, first_after = run_uvloop(main())
        read = cluster.shell("readledger", "-ledgerid", ledger_id, "-firstentryid", total - 1,
                             "-lastentryid", total - 1, "-msg")
        assert read.returncode == 0, read.stderr[-3000:]
        assert first_after <= total - 1
        assert payload(total - 1, 200).decode() in read.stdout
    finally:
        cluster.ensure_all_up()


def test_a_bookie_that_stops_answering_is_replaced_after_the_request_timeout(cluster):
    """A bookie of the ensemble is SIGSTOPped (connections open, no answers - a hung machine): appends go
    on without waiting for it (Qa=2 of the two others), and once its requests are older than the request
    timeout it is replaced by an ensemble change; everything reads back once it is resumed."""

    async def main():
        store = await BookKeeperLedgerStore.connect(cluster.metadata_service_uri)
        lh = await store.create_ledger()
        assert await asyncio.gather(*(lh.append(payload(i)) for i in range(100))) == list(range(100))
        victim = cluster.bookie_by_id(lh.ensemble[0])
        cluster.pause_bookie(victim.index)
        store.pool.request_timeout = 1.0  # short only from now on (a loaded machine can be slow to answer)
        try:
            assert await asyncio.gather(*(lh.append(payload(i)) for i in range(100, 200))) == list(range(100, 200))
            deadline = time.monotonic() + 60  # liveness bound, not a criterion
            i = 200
            while store.ensemble_changes == 0:
                assert time.monotonic() < deadline, "the silent bookie was never replaced"
                assert await lh.append(payload(i)) == i
                i += 1
                await asyncio.sleep(0.05)
            assert victim.bookie_id not in lh.ensemble
            store.pool.request_timeout = 10.0
            assert await asyncio.gather(*(lh.append(payload(j)) for j in range(i, i + 100))) == list(range(i, i + 100))
            await lh.close()
        finally:
            cluster.resume_bookie(victim.index)
        reader = await BookKeeperLedgerStore.connect(cluster.metadata_service_uri)
        rh = await reader.open_ledger(lh.ledger_id)
        assert [bytes(x) for x in await rh.read(0, i + 99)] == [payload(j) for j in range(i + 100)]
        await store.close()
        await reader.close()

    run_uvloop(main())


def test_without_a_replacement_bookie_pending_appends_fail_and_close_seals_at_the_lac(cluster):
    """E=Qw=Qa=4 on the 4 bookies: when one stops answering there is nobody to replace it. The pending
    appends fail (the managed ledger then rolls over), a close() that was waiting for them returns, and
    the ledger is sealed at the last acknowledged entry."""

    async def main():
        store = await BookKeeperLedgerStore.connect(cluster.metadata_service_uri, ensemble_size=4,
                                                    write_quorum=4, ack_quorum=4)
        lh = await store.create_ledger()
        assert await asyncio.gather(*(lh.append(payload(i)) for i in range(10))) == list(range(10))
        victim = cluster.bookie_by_id(lh.ensemble[2])
        cluster.pause_bookie(victim.index)
        # Short only from now on: a loaded machine may well make a live bookie answer after more than 1s.
        store.pool.request_timeout = 1.0
        try:
            futs = [lh.append_nowait(payload(i)) for i in range(10, 20)]
            await asyncio.wait_for(lh.close(), 60)  # waits for the appends, which fail; liveness bound only
            for f in futs:
                with pytest.raises(StorageError, match="ensemble change failed"):
                    f.result()
        finally:
            cluster.resume_bookie(victim.index)
        md, _ = await store.read_metadata(lh.ledger_id)
        assert md.is_closed and md.last_entry_id == 9 and md.length == 1000 and len(md.segments) == 1
        with pytest.raises(LedgerClosedError):
            await lh.append(b"after close")
        await store.close()

    run_uvloop(main())
