"""What only the ZooKeeper metadata store (kop/storage/zookeeper) has: ephemeral and sequential nodes,
watches, session state, and operations that ride out a ZooKeeper restart. The contract it shares with the
sqlite store is specified, for both, in tests/test_storage_metadata.py.

ZooKeeper is a real server (tests/support/bookkeeper.py, shared with the BookKeeper tests); every test
works under its own chroot, so tests never see each other's nodes.
"""

from __future__ import annotations

import asyncio
import uuid

import pytest

from kop.storage.api import NodeExistsError
from kop.storage.zookeeper import ZooKeeperMetadataStore, parse_zookeeper_servers
from tests.support.bookkeeper import BookKeeperCluster


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


async def test_ephemeral_nodes_vanish_with_their_session(cluster):
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


async def test_ping_names_the_session_that_answered(cluster):
    """ping() is the cluster lease's proof of life (kop/cluster/lease.py): the id of the session that answered,
    None once there is none (closed)."""
    ms = await ZooKeeperMetadataStore.connect(zk_url(cluster))
    session = ms.session_id
    assert session is not None and await ms.ping() == session
    await ms.close()
    assert await ms.ping() is None


async def test_sequential_nodes_get_increasing_suffixes(cluster):
    ms = await ZooKeeperMetadataStore.connect(zk_url(cluster))
    paths = [await ms.create("/seq/ID-", sequential=True) for _ in range(3)]
    numbers = [int(p.rsplit("-", 1)[1]) for p in paths]
    assert numbers == sorted(numbers) and len(set(numbers)) == 3
    assert all(len(p.rsplit("-", 1)[1]) == 10 for p in paths)  # ZooKeeper's 10-digit suffix
    await ms.close()


async def test_watches_deliver_changes_on_the_event_loop(cluster):
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


async def test_session_listeners_hear_connected_and_suspended(cluster):
    """Session state reaches the loop: a listener learns of a lost connection (ZooKeeper stopped) and of
    the reconnection; operations issued while disconnected wait for it instead of failing."""
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


async def test_operations_issued_during_a_zookeeper_restart_complete_after_it(cluster):
    """CAS writes straddling a ZooKeeper SIGKILL + restart: each is applied exactly once (a write whose
    answer was lost with the connection is retried, and its retry's BadVersion recognised as ours)."""
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
