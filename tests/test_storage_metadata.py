"""The metadata store contract (kop/storage/api.py MetadataStore), run against both backends - the embedded
sqlite store (kop/storage/local/metadata.py) and ZooKeeper (kop/storage/zookeeper) - followed by what only the
sqlite store promises (durability modes, readers beside the writer). What only ZooKeeper has (ephemeral and
sequential nodes, watches, sessions) is specified in tests/test_storage_zookeeper.py.

ZooKeeper is a real server (tests/support/bookkeeper.py, shared with the BookKeeper tests); every test works
under its own chroot, so tests never see each other's nodes.
"""

from __future__ import annotations

import asyncio
import sqlite3
import uuid
from collections.abc import Awaitable, Callable

import pytest

from kop.storage.api import BadVersionError, MetadataStore, NodeExistsError, NoSuchNodeError, NotEmptyError
from kop.storage.local.metadata import SqliteMetadataStore
from kop.storage.zookeeper import ZooKeeperMetadataStore
from tests.support.storage import run

Opener = Callable[[], Awaitable[MetadataStore]]


@pytest.fixture(params=["sqlite", "zookeeper"])
def open_store(request, tmp_path) -> Opener:
    """A function that opens the store under test (again and again: the same data each time)."""
    if request.param == "sqlite":
        async def sqlite() -> MetadataStore:
            return SqliteMetadataStore(tmp_path)

        return sqlite
    cluster = request.getfixturevalue("cluster")
    chroot = f"/kop-test-{uuid.uuid4().hex[:12]}"

    async def zookeeper() -> MetadataStore:
        return await ZooKeeperMetadataStore.connect(f"zk:{cluster.zk_connect}{chroot}")

    return zookeeper


# ---- the contract both backends keep ------------------------------------------------------------------------


async def test_put_creates_at_version_0_and_each_put_adds_one(open_store):
    ms = await open_store()
    assert await ms.get("/a/b") is None
    assert (await ms.put("/a/b", b"v0")).version == 0
    assert (await ms.put("/a/b", b"v1")).version == 1
    value, stat = await ms.get("/a/b")
    assert value == b"v1" and stat.version == 1 and not stat.ephemeral
    assert await ms.exists("/a/b") and await ms.exists("/a")  # the parent was created
    assert (await ms.get("/a"))[0] == b""
    assert not await ms.exists("/nothing")
    await ms.close()


async def test_compare_and_set(open_store):
    ms = await open_store()
    assert (await ms.put("/n", b"x", expected_version=-1)).version == 0
    with pytest.raises(NodeExistsError):
        await ms.put("/n", b"y", expected_version=-1)
    with pytest.raises(BadVersionError):
        await ms.put("/n", b"y", expected_version=3)
    with pytest.raises(BadVersionError):
        await ms.put("/absent", b"y", expected_version=0)
    assert (await ms.put("/n", b"y", expected_version=0)).version == 1
    assert (await ms.get("/n"))[0] == b"y"
    await ms.close()


async def test_concurrent_writers_with_the_same_expected_version_one_wins(open_store):
    ms = await open_store()
    await ms.put("/n", b"0")
    results = await asyncio.gather(*(ms.put("/n", b"w%d" % i, expected_version=0) for i in range(10)),
                                   return_exceptions=True)
    assert sum(not isinstance(r, Exception) for r in results) == 1
    assert all(isinstance(r, BadVersionError) for r in results if isinstance(r, Exception))
    await ms.close()


async def test_two_clients_compare_and_set_against_each_other(open_store):
    """Two independent stores (two processes' worth) on the same data: the second CAS on a version the
    first already moved fails - how a managed ledger notices another owner."""
    a = await open_store()
    b = await open_store()
    await a.put("/ml", b"a0", expected_version=-1)
    _, stat = await b.get("/ml")
    await a.put("/ml", b"a1", expected_version=stat.version)
    with pytest.raises(BadVersionError):
        await b.put("/ml", b"b1", expected_version=stat.version)
    assert (await b.get("/ml"))[0] == b"a1"
    await a.close()
    await b.close()


async def test_children_are_names_sorted(open_store):
    ms = await open_store()
    for p in ["/r/b", "/r/a", "/r/c/deep", "/other"]:
        await ms.put(p, b"")
    assert await ms.children("/r") == ["a", "b", "c"]
    assert await ms.children("/") == ["other", "r"]
    assert await ms.children("/r/a") == []
    assert await ms.children("/nothing") == []
    await ms.close()


async def test_delete(open_store):
    ms = await open_store()
    await ms.put("/p/c", b"1")
    with pytest.raises(NotEmptyError):
        await ms.delete("/p")
    with pytest.raises(BadVersionError):
        await ms.delete("/p/c", expected_version=5)
    await ms.delete("/p/c", expected_version=0)
    with pytest.raises(NoSuchNodeError):
        await ms.delete("/p/c")
    await ms.put("/q/x/y", b"")
    await ms.delete_recursive("/q")
    assert not await ms.exists("/q") and not await ms.exists("/q/x/y")
    await ms.close()


async def test_invalid_paths_are_rejected(open_store):
    ms = await open_store()
    for bad in ["relative", "/trailing/", "/double//slash"]:
        with pytest.raises(ValueError):
            await ms.put(bad, b"")
    await ms.close()


async def test_values_survive_a_reopen(open_store):
    ms = await open_store()
    await ms.put("/k", b"\x00\x01binary\xff")
    await ms.put("/k", b"\x00\x02binary\xff" * 1000)
    await ms.close()
    ms = await open_store()
    value, stat = await ms.get("/k")
    assert value == b"\x00\x02binary\xff" * 1000 and stat.version == 1
    await ms.close()


def test_managed_ledger_info_is_kept_in_pulsars_layout(open_store):
    """The managed ledger writes its info at /managed-ledgers/<name> through either store alike."""
    from kop.managed_ledger import ManagedLedgerFactory
    from kop.managed_ledger.protobuf import ManagedLedgerInfo
    from kop.storage.local.ledgers import LocalLedgerStore

    async def main(tmp):
        ms = await open_store()
        factory = ManagedLedgerFactory(LocalLedgerStore(tmp, fsync="none"), ms)
        ml = await factory.open("public/default/persistent/t-partition-0")
        for i in range(3):
            await ml.add_entry(b"e%d" % i)
        await ml.close()
        value, stat = await ms.get("/managed-ledgers/public/default/persistent/t-partition-0")
        info = ManagedLedgerInfo.decode(value)
        assert sum(li.entries or 0 for li in info.ledgers) == 3 and stat.version >= 1
        assert await factory.list() == ["public/default/persistent/t-partition-0"]
        await factory.close()
        await factory.ledger_store.close()
        await ms.close()

    import tempfile

    with tempfile.TemporaryDirectory() as tmp:
        run(main(tmp))


# ---- the sqlite store only ----------------------------------------------------------------------------------


@pytest.mark.parametrize("durable", [True, False])
async def test_values_survive_a_restart(tmp_path, durable):
    ms = SqliteMetadataStore(tmp_path, durable=durable)
    await ms.put("/k", b"\x00\x01binary\xff")
    await ms.put("/k", b"\x00\x02binary\xff")
    await ms.close()
    ms = SqliteMetadataStore(tmp_path, durable=durable)
    value, stat = await ms.get("/k")
    assert value == b"\x00\x02binary\xff" and stat.version == 1
    await ms.close()


async def test_another_process_can_read_while_the_store_writes(tmp_path):
    """WAL mode: a read-only connection (the inspect tool) sees committed values without blocking writes."""
    ms = SqliteMetadataStore(tmp_path)
    await ms.put("/x", b"1")
    reader = sqlite3.connect(f"file:{tmp_path / 'metadata.db'}?mode=ro", uri=True)
    assert reader.execute("SELECT value FROM nodes WHERE path='/x'").fetchone()[0] == b"1"
    reader.execute("BEGIN")
    reader.execute("SELECT count(*) FROM nodes").fetchone()  # hold a read snapshot open
    await ms.put("/x", b"2")  # the writer is not blocked by it
    reader.execute("COMMIT")
    assert reader.execute("SELECT value FROM nodes WHERE path='/x'").fetchone()[0] == b"2"
    reader.close()
    await ms.close()
