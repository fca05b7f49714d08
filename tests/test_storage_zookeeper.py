"""The metadata store contract, run against both backends - the embedded sqlite store and ZooKeeper
(kop/storage/zookeeper) - plus what only ZooKeeper has: ephemeral and sequential nodes, watches, session
state, and operations that ride out a ZooKeeper restart.

ZooKeeper is a real server (tests/support/bookkeeper.py, shared with the BookKeeper tests); every test
works under its own chroot, so tests never see each other's nodes.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Awaitable, Callable

import pytest

from kop.storage.api import BadVersionError, MetadataStore, NodeExistsError, NoSuchNodeError, NotEmptyError
from kop.storage.local.metadata import SqliteMetadataStore
from kop.storage.zookeeper import ZooKeeperMetadataStore, parse_zookeeper_servers
from tests.support.bookkeeper import BookKeeperCluster, shared_cluster


def run(coro):
    return asyncio.run(coro)


@pytest.fixture(scope="module")
def cluster() -> BookKeeperCluster:
    return shared_cluster()


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


def test_put_creates_at_version_0_and_each_put_adds_one(open_store):
    async def main():
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

    run(main())


def test_compare_and_set(open_store):
    async def main():
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

    run(main())


def test_concurrent_writers_with_the_same_expected_version_one_wins(open_store):
    async def main():
        ms = await open_store()
        await ms.put("/n", b"0")
        results = await asyncio.gather(*(ms.put("/n", b"w%d" % i, expected_version=0) for i in range(10)),
                                       return_exceptions=True)
        assert sum(not isinstance(r, Exception) for r in results) == 1
        assert all(isinstance(r, BadVersionError) for r in results if isinstance(r, Exception))
        await ms.close()

    run(main())


def test_two_clients_compare_and_set_against_each_other(open_store):
    """Two independent stores (two processes' worth) on the same data: the second CAS on a version the
    first already moved fails - how a managed ledger notices another owner."""

    async def main():
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

    run(main())


def test_children_are_names_sorted(open_store):
    async def main():
        ms = await open_store()
        for p in ["/r/b", "/r/a", "/r/c/deep", "/other"]:
            await ms.put(p, b"")
        assert await ms.children("/r") == ["a", "b", "c"]
        assert await ms.children("/") == ["other", "r"]
        assert await ms.children("/r/a") == []
        assert await ms.children("/nothing") == []
        await ms.close()

    run(main())


def test_delete(open_store):
    async def main():
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

    run(main())


def test_invalid_paths_are_rejected(open_store):
    async def main():
        ms = await open_store()
        for bad in ["relative", "/trailing/", "/double//slash"]:
            with pytest.raises(ValueError):
                await ms.put(bad, b"")
        await ms.close()

    run(main())


def test_values_survive_a_reopen(open_store):
    async def main():
        ms = await open_store()
        await ms.put("/k", b"\x00\x01binary\xff")
        await ms.put("/k", b"\x00\x02binary\xff" * 1000)
        await ms.close()
        ms = await open_store()
        value, stat = await ms.get("/k")
        assert value == b"\x00\x02binary\xff" * 1000 and stat.version == 1
        await ms.close()

    run(main())


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


# ---- ZooKeeper only --------------------------------------------------------------------------------------------


def zk_url(cluster: BookKeeperCluster) -> str:
    return f"zk:{cluster.zk_connect}/kop-test-{uuid.uuid4().hex[:12]}"


def test_parse_zookeeper_servers():
    assert parse_zookeeper_servers("zk:h1:2181,h2:2181/pulsar") == ("h1:2181,h2:2181", "/pulsar")
    assert parse_zookeeper_servers("metadata-store:zk:h:1") == ("h:1", "")
    assert parse_zookeeper_servers("127.0.0.1:2181") == ("127.0.0.1:2181", "")
    assert parse_zookeeper_servers("h:1/") == ("h:1", "")
    for bad in ["", "zk:", "zk://h:1", "h1:1,,h2:2"]:
        with pytest.raises(ValueError):
            parse_zookeeper_servers(bad)


def test_ephemeral_nodes_vanish_with_their_session(cluster):
    async def main():
        url = zk_url(cluster)
        owner = await ZooKeeperMetadataStore.connect(url)
        other = await ZooKeeperMetadataStore.connect(url)
        assert await owner.create("/brokers/b1", b"me", ephemeral=True) == "/brokers/b1"
        value, stat = await other.get("/brokers/b1")
        assert value == b"me" and stat.ephemeral
        with pytest.raises(NodeExistsError):
            await other.create("/brokers/b1", b"you", ephemeral=True)
        await owner.close()  # the session ends: ZooKeeper removes the node at once
        assert await other.get("/brokers/b1") is None
        assert await other.children("/brokers") == []
        await other.close()

    run(main())


def test_sequential_nodes_get_increasing_suffixes(cluster):
    async def main():
        ms = await ZooKeeperMetadataStore.connect(zk_url(cluster))
        paths = [await ms.create("/seq/ID-", sequential=True) for _ in range(3)]
        numbers = [int(p.rsplit("-", 1)[1]) for p in paths]
        assert numbers == sorted(numbers) and len(set(numbers)) == 3
        assert all(len(p.rsplit("-", 1)[1]) == 10 for p in paths)  # ZooKeeper's 10-digit suffix
        await ms.close()

    run(main())


def test_watches_deliver_changes_on_the_event_loop(cluster):
    async def main():
        url = zk_url(cluster)
        ms = await ZooKeeperMetadataStore.connect(url)
        writer = await ZooKeeperMetadataStore.connect(url)
        await ms.put("/w", b"")
        data_events: asyncio.Queue = asyncio.Queue()
        child_events: asyncio.Queue = asyncio.Queue()
        loop = asyncio.get_running_loop()

        def on_data(value, stat):
            assert asyncio.get_running_loop() is loop  # delivered on the loop, not kazoo's thread
            data_events.put_nowait((value, stat.version if stat else None))

        stop_data = ms.watch_data("/w/x", on_data)
        stop_children = ms.watch_children("/w", lambda names: child_events.put_nowait(names))
        assert await asyncio.wait_for(data_events.get(), 30) == (None, None)
        assert await asyncio.wait_for(child_events.get(), 30) == []
        await writer.put("/w/x", b"1")
        assert await asyncio.wait_for(data_events.get(), 30) == (b"1", 0)
        assert await asyncio.wait_for(child_events.get(), 30) == ["x"]
        await writer.put("/w/x", b"2")
        assert await asyncio.wait_for(data_events.get(), 30) == (b"2", 1)
        await writer.create("/w/eph", ephemeral=True)
        assert await asyncio.wait_for(child_events.get(), 30) == ["eph", "x"]
        await writer.close()
        assert await asyncio.wait_for(child_events.get(), 30) == ["x"]
        stop_data()
        stop_children()
        await ms.close()

    run(main())


def test_session_listeners_hear_connected_and_suspended(cluster):
    """Session state reaches the loop: a listener learns of a lost connection (ZooKeeper stopped) and of
    the reconnection; operations issued while disconnected wait for it instead of failing."""

    async def main():
        ms = await ZooKeeperMetadataStore.connect(zk_url(cluster), session_timeout_ms=30000)
        states: asyncio.Queue = asyncio.Queue()
        ms.add_session_listener(states.put_nowait)
        await ms.put("/before", b"1")
        await asyncio.to_thread(cluster.restart_zookeeper)
        seen = []
        while "connected" not in seen:
            seen.append(await asyncio.wait_for(states.get(), 60))
        assert "suspended" in seen
        assert (await ms.get("/before"))[0] == b"1"
        await ms.put("/after", b"2", expected_version=-1)
        assert ms.connected
        await ms.close()

    run(main())


def test_operations_issued_during_a_zookeeper_restart_complete_after_it(cluster):
    """CAS writes straddling a ZooKeeper SIGKILL + restart: each is applied exactly once (a write whose
    answer was lost with the connection is retried, and its retry's BadVersion recognised as ours)."""

    async def main():
        ms = await ZooKeeperMetadataStore.connect(zk_url(cluster), session_timeout_ms=30000)
        states: list[str] = []
        ms.add_session_listener(states.append)
        await ms.put("/c", b"0")
        restart = asyncio.create_task(asyncio.to_thread(cluster.restart_zookeeper))
        version = 0
        while not restart.done() or version < 5:
            stat = await ms.put("/c", b"%d" % (version + 1), expected_version=version)
            assert stat.version == version + 1
            version += 1
            await asyncio.sleep(0.01)
        await restart
        assert "suspended" in states  # the writes did straddle the outage
        value, stat = await ms.get("/c")
        assert value == b"%d" % version and stat.version == version
        await ms.close()

    run(main())
