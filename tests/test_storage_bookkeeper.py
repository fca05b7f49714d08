"""The ledger store over real bookies (kop/storage/bookkeeper), against a real ZooKeeper and 4 real bookies
(tests/support/bookkeeper.py, one cluster per test process).

* The ledger-store contract, run against both backends - local files and BookKeeper - with the same
  tests: what the managed ledger relies on holds for either.
* BookKeeper's own shell, from the same jars, lists our ledgers, parses their metadata and reads entries.
* Open-with-recovery by a second client fences the first: its next append fails with LedgerFencedError.
* Recovery decides on the tail as BookKeeper does: an entry on an ack quorum of bookies is kept (and
  re-replicated), an entry on fewer is dropped.
* A bookie SIGKILLed during appends (E=3, Qw=3, Qa=2): every acknowledged entry survives, appends go on
  after an ensemble change, and a ledger with the dead bookie in its ensemble can still be recovered.

Ledgers use E=3, Qw=3, Qa=2 unless a test says otherwise.
"""

from __future__ import annotations

import asyncio
import re
import subprocess
import sys
import time
from collections.abc import Awaitable, Callable

import pytest
import uvloop

from kop.storage.api import LedgerClosedError, LedgerFencedError, LedgerStore, NoSuchLedgerError, StorageError
from kop.storage.bookkeeper import (
    BookKeeperLedgerStore,
    LedgerMetadata,
    ledger_path,
    parse_metadata_service_uri,
)
from kop.storage.bookkeeper import protocol as p
from kop.storage.bookkeeper.metadata import CLOSED, Segment, decode_bookie_address, ledger_id_from_path
from kop.storage.local.ledgers import LocalLedgerStore
from tests.support.bookkeeper import BookKeeperCluster, shared_cluster


def run(coro):
    """On uvloop, the broker's event loop (test_the_client_runs_on_the_default_asyncio_loop_too covers
    the standard one)."""
    return uvloop.run(coro)


def payload(i: int, size: int = 100) -> bytes:
    return (f"entry-{i}-".encode() * size)[:size]


@pytest.fixture
def cluster() -> BookKeeperCluster:
    """The process-wide cluster, with all 4 bookies up and registered."""
    c = shared_cluster()
    c.ensure_all_up()
    return c


Opener = Callable[[], Awaitable[LedgerStore]]


@pytest.fixture(params=["local", "bookkeeper"])
def open_store(request, tmp_path) -> Opener:
    """Opens the ledger store under test; opening it again gives another client of the same ledgers."""
    if request.param == "local":
        async def local() -> LedgerStore:
            return LocalLedgerStore(tmp_path, fsync="always")

        return local
    cluster = request.getfixturevalue("cluster")

    async def bookkeeper() -> LedgerStore:
        return await BookKeeperLedgerStore.connect(cluster.metadata_service_uri)

    return bookkeeper


# ---- the contract both backends keep --------------------------------------------------------------------------


def test_appends_get_consecutive_ids_and_read_back(open_store):
    async def main():
        store = await open_store()
        lh = await store.create_ledger()
        assert lh.last_add_confirmed == -1 and lh.length == 0
        ids = await asyncio.gather(*(lh.append(payload(i)) for i in range(50)))
        assert ids == list(range(50))
        assert lh.last_add_confirmed == 49 and lh.length == 50 * 100
        assert [bytes(x) for x in await lh.read(0, 49)] == [payload(i) for i in range(50)]
        assert bytes((await lh.read(7, 7))[0]) == payload(7)
        await lh.close()
        await store.close()

    run(main())


def test_an_entry_can_be_given_as_parts(open_store):
    async def main():
        store = await open_store()
        lh = await store.create_ledger()
        assert await lh.append([b"head:", memoryview(b"--body--")[2:6], bytearray(b":tail")]) == 0
        assert await lh.append(b"") == 1  # an empty entry is an entry
        assert [bytes(x) for x in await lh.read(0, 1)] == [b"head:body:tail", b""]
        await store.close()

    run(main())


def test_read_up_to_stops_before_max_bytes_but_returns_at_least_one_entry(open_store):
    async def main():
        store = await open_store()
        lh = await store.create_ledger()
        for i in range(10):
            await lh.append(payload(i, 100))
        assert len(await lh.read_up_to(0, 9, 350)) == 3
        assert len(await lh.read_up_to(0, 9, 300)) == 3
        assert len(await lh.read_up_to(0, 9, 299)) == 2
        assert len(await lh.read_up_to(2, 9, 10)) == 1  # too small for one: still one
        assert len(await lh.read_up_to(0, 4, 10_000)) == 5  # bounded by `last`
        assert len(await lh.read_up_to(0, 9, 350, overhead=50)) == 7  # 50 of each entry not counted
        assert bytes(await lh.read_prefix(3, 8))[:8] == payload(3)[:8]
        with pytest.raises(StorageError):
            await lh.read(5, 10)  # beyond the last add confirmed
        await store.close()

    run(main())


def test_appends_complete_in_issue_order(open_store):
    async def main():
        store = await open_store()
        lh = await store.create_ledger()
        done: list[int] = []
        futs = [lh.append_nowait(payload(i, 1 + i % 300)) for i in range(300)]
        for f in futs:
            f.add_done_callback(lambda f: done.append(f.result()))
        await asyncio.gather(*futs)
        assert done == list(range(300))
        assert lh.length == sum(1 + i % 300 for i in range(300))
        await store.close()

    run(main())


def test_closed_ledger_refuses_appends_and_reopens_sealed(open_store):
    async def main():
        store = await open_store()
        lh = await store.create_ledger()
        for i in range(30):
            await lh.append(payload(i))
        await lh.close()
        with pytest.raises(LedgerClosedError):
            await lh.append(b"late")
        await store.close()

        store = await open_store()
        rh = await store.open_ledger(lh.ledger_id)
        assert rh.is_sealed and rh.last_add_confirmed == 29 and rh.length == 3000
        assert [bytes(x) for x in await rh.read(0, 29)] == [payload(i) for i in range(30)]
        await rh.close()
        await store.close()

    run(main())


def test_appends_issued_before_close_complete(open_store):
    async def main():
        store = await open_store()
        lh = await store.create_ledger()
        futs = [lh.append_nowait(payload(i)) for i in range(20)]
        await lh.close()
        assert [f.result() for f in futs] == list(range(20))
        rh = await store.open_ledger(lh.ledger_id)
        assert rh.last_add_confirmed == 19
        await store.close()

    run(main())


def test_ledger_ids_are_never_reused_across_restarts(open_store):
    async def main():
        store = await open_store()
        ids = [(await store.create_ledger()).ledger_id for _ in range(3)]
        assert ids == sorted(set(ids))
        await store.delete_ledger(ids[-1])  # the highest id leaves nothing behind
        await store.close()
        store = await open_store()
        assert (await store.create_ledger()).ledger_id > ids[-1]
        await store.close()

    run(main())


def test_delete_and_list(open_store):
    async def main():
        store = await open_store()
        lh = await store.create_ledger()
        await lh.append(b"a")
        await lh.close()
        assert lh.ledger_id in await store.list_ledgers()
        await store.delete_ledger(lh.ledger_id)
        assert lh.ledger_id not in await store.list_ledgers()
        with pytest.raises(NoSuchLedgerError):
            await store.open_ledger(lh.ledger_id)
        with pytest.raises(NoSuchLedgerError):
            await store.delete_ledger(lh.ledger_id)
        await store.close()

    run(main())


def test_open_with_recovery_fences_the_writer_and_seals_at_its_last_entry(open_store):
    async def main():
        store = await open_store()
        lh = await store.create_ledger()
        for i in range(5):
            await lh.append(payload(i))
        rh = await store.open_ledger(lh.ledger_id, recover=True)
        assert rh.last_add_confirmed == 4 and rh.is_sealed and rh.length == 500
        with pytest.raises(LedgerFencedError):
            await lh.append(b"after fence")
        assert rh.last_add_confirmed == 4
        await lh.close()  # closing a fenced writer changes nothing
        again = await store.open_ledger(lh.ledger_id)
        assert again.last_add_confirmed == 4 and again.is_sealed
        await store.close()

    run(main())


def test_open_without_recovery_follows_the_writer(open_store):
    async def main():
        store = await open_store()
        lh = await store.create_ledger()
        await lh.append(b"0")
        rh = await store.open_ledger(lh.ledger_id, recover=False)
        assert rh.last_add_confirmed == 0 and not rh.is_sealed
        await lh.append(b"1")
        assert rh.last_add_confirmed == 1
        assert [bytes(x) for x in await rh.read(0, 1)] == [b"0", b"1"]
        assert await lh.append(b"2") == 2  # not fenced
        await store.close()

    run(main())


def test_a_ledger_left_open_recovers_with_every_acknowledged_entry(open_store):
    """The writer's store goes away without closing the ledger (as a crashed broker leaves it)."""

    async def main():
        store = await open_store()
        lh = await store.create_ledger()
        empty = await store.create_ledger()
        for i in range(25):
            await lh.append(payload(i))
        await store.close()
        store = await open_store()
        rh = await store.open_ledger(lh.ledger_id, recover=True)
        assert rh.last_add_confirmed == 24 and rh.length == 2500
        assert [bytes(x) for x in await rh.read(0, 24)] == [payload(i) for i in range(25)]
        rh = await store.open_ledger(empty.ledger_id, recover=True)
        assert rh.last_add_confirmed == -1 and rh.length == 0
        await store.close()

    run(main())


_CHILD = r"""
import asyncio, sys

async def main():
    if sys.argv[1] == "local":
        from kop.storage.local.ledgers import LocalLedgerStore
        store = LocalLedgerStore(sys.argv[2], fsync="always")
    else:
        from kop.storage.bookkeeper import BookKeeperLedgerStore
        store = await BookKeeperLedgerStore.connect(sys.argv[2])
    lh = await store.create_ledger()
    print(lh.ledger_id, flush=True)
    def acked(f):
        if not f.exception():
            print(f.result(), flush=True)
    i = 0
    while True:
        for _ in range(20):
            lh.append_nowait(b"%08d" % i * 16).add_done_callback(acked)
            i += 1
        await asyncio.sleep(0.001)

asyncio.run(main())
"""


def test_sigkill_of_the_writer_keeps_every_acknowledged_entry(request, tmp_path):
    """A real crash of the writing process, for both backends: SIGKILL while appends are in flight, then
    another client recovers the ledger and finds every entry the dead writer had acknowledged."""
    for backend in ("local", "bookkeeper"):
        target = str(tmp_path / "local") if backend == "local" else \
            request.getfixturevalue("cluster").metadata_service_uri
        proc = subprocess.Popen([sys.executable, "-c", _CHILD, backend, target], stdout=subprocess.PIPE, text=True)
        assert proc.stdout is not None
        try:
            ledger_id = int(proc.stdout.readline())
            acked = -1
            while acked < 1000:
                line = proc.stdout.readline()
                assert line, f"{backend} writer died"
                acked = int(line)
        finally:
            proc.kill()
            rest = proc.stdout.read().split()
            proc.stdout.close()
            proc.wait()
        acked = max([acked, *map(int, rest)])

        async def check(backend=backend, target=target, ledger_id=ledger_id, acked=acked):
            store = LocalLedgerStore(target) if backend == "local" else await BookKeeperLedgerStore.connect(target)
            rh = await store.open_ledger(ledger_id, recover=True)
            assert rh.last_add_confirmed >= acked, backend
            entries = await rh.read(0, rh.last_add_confirmed)
            assert all(bytes(e) == b"%08d" % i * 16 for i, e in enumerate(entries)), backend
            await store.close()

        run(check())


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

    run(main())


# ---- BookKeeper specifics -------------------------------------------------------------------------------------


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

    ledger_id = run(write())
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

    run(main())


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

    run(main())


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

    run(main())


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
        ledger_id, first_after = run(main())
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

    run(main())


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

    run(main())
