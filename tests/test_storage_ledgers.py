"""The ledger-store contract (kop/storage/api.py LedgerStore) that the managed ledger relies on, run with the
same tests against both backends: local files (kop/storage/local/ledgers.py) and BookKeeper over a real
ZooKeeper and 4 real bookies (kop/storage/bookkeeper, tests/support/bookkeeper.py). What only one backend
has is specified in tests/test_storage_local_ledgers.py and tests/test_storage_bookkeeper.py.
"""

from __future__ import annotations

import asyncio
import subprocess
import sys
from collections.abc import Awaitable, Callable

import pytest

from kop.storage.api import LedgerClosedError, LedgerFencedError, LedgerStore, NoSuchLedgerError, StorageError
from kop.storage.bookkeeper import (
    BookKeeperLedgerStore,
)
from kop.storage.local.ledgers import LocalLedgerStore
from tests.support.storage import run_uvloop  # the broker's event loop


def payload(i: int, size: int = 100) -> bytes:
    return (f"entry-{i}-".encode() * size)[:size]


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


# ---- the contract --------------------------------------------------------------------------


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

    run_uvloop(main())


def test_an_entry_can_be_given_as_parts(open_store):
    async def main():
        store = await open_store()
        lh = await store.create_ledger()
        assert await lh.append([b"head:", memoryview(b"--body--")[2:6], bytearray(b":tail")]) == 0
        assert await lh.append(b"") == 1  # an empty entry is an entry
        assert [bytes(x) for x in await lh.read(0, 1)] == [b"head:body:tail", b""]
        await store.close()

    run_uvloop(main())


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

    run_uvloop(main())


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

    run_uvloop(main())


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

    run_uvloop(main())


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

    run_uvloop(main())


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

    run_uvloop(main())


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

    run_uvloop(main())


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

    run_uvloop(main())


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

    run_uvloop(main())


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

    run_uvloop(main())


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

        run_uvloop(check())
