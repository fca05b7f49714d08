"""The parts of a node of several worker processes (kop/node/, kop/cluster/workers.py) that need no node:
the static ownership, the workers' config, the node's merged /metrics, and the two storage changes the workers
rely on - ledger ids reserved across processes sharing a directory, and the sqlite store's polled watches.
The node itself, with real processes and clients: tests/test_node_workers.py."""

from __future__ import annotations

import asyncio
from collections import Counter

import pytest

from kop.cluster.workers import worker_of
from kop.config import BrokerConfig, ConfigError
from kop.node.admin import merge_metrics
from kop.node.worker import check_node_config, node_workers, worker_overrides
from kop.storage.local.ledgers import LocalLedgerStore
from kop.storage.local.metadata import SqliteMetadataStore
from kop.topics.names import TopicName


def test_every_partition_has_one_worker_and_a_topic_is_spread_over_all() -> None:
    topic = TopicName("public", "default", "orders")
    for workers in (2, 3, 4):
        owners = [worker_of(topic, p, workers) for p in range(workers * 4)]
        assert Counter(owners) == {i: 4 for i in range(workers)}  # even, every worker
    offsets = TopicName("public", "__kafka", "__consumer_offsets")
    assert Counter(worker_of(offsets, p, 2) for p in range(50)) == {0: 25, 1: 25}


def test_a_worker_runs_the_node_config_on_ports_of_its_own() -> None:
    config = BrokerConfig.from_strings({
        "kafkaListeners": "PLAINTEXT://0.0.0.0:9092,SSL://0.0.0.0:9094",
        "kafkaAdvertisedListeners": "PLAINTEXT://kafka.example:9092,SSL://kafka.example:9094",
        "kafkaBrokerId": "5", "numWorkers": "3", "webServicePortTls": "8443", "brokerServicePortTls": "6651",
        "tlsCertificateFilePath": "/x.pem", "tlsKeyFilePath": "/x.key",
    })
    assert worker_overrides(config, 2) == {
        "kafkaBrokerId": "7",
        "kafkaListeners": "PLAINTEXT://0.0.0.0:0,SSL://0.0.0.0:0",
        "kafkaAdvertisedListeners": "PLAINTEXT://kafka.example:0,SSL://kafka.example:0",
        "brokerServicePort": "0", "brokerServicePortTls": "0", "webServicePort": "0", "webServicePortTls": "0",
        "numWorkers": "1",
    }


def test_what_a_node_of_workers_refuses_and_how_many_it_runs() -> None:
    with pytest.raises(ConfigError, match="advertisedListeners"):
        check_node_config(BrokerConfig.from_strings({"numWorkers": "2",
                                                     "advertisedListeners": "internal:pulsar://127.0.0.1:6650"}))
    bk = BrokerConfig.from_strings({"numWorkers": "2", "metadataStoreUrl": "zk:127.0.0.1:2181"})
    with pytest.raises(ConfigError, match="embedded storage"):
        check_node_config(bk)
    assert node_workers(BrokerConfig.from_strings({"numWorkers": "3"})) == 3
    assert node_workers(BrokerConfig.from_strings({"numWorkers": "0"})) >= 1  # one per core
    assert node_workers(BrokerConfig.from_strings({"numWorkers": "0", "metadataStoreUrl": "zk:h:2181"})) == 1
    with pytest.raises(ConfigError, match="numWorkers"):
        BrokerConfig.from_strings({"numWorkers": "-1"})


def test_node_metrics_label_every_sample_with_its_worker_and_name_each_family_once() -> None:
    def text(requests: int) -> str:
        return ("# HELP kop_requests_total Requests.\n# TYPE kop_requests_total counter\n"
                f'kop_requests_total{{api="Produce"}} {requests}\n'
                "# HELP kop_up Up.\n# TYPE kop_up gauge\nkop_up 1\n")

    merged = merge_metrics({0: text(3), 1: text(4)})
    assert merged == (
        "# HELP kop_requests_total Requests.\n# TYPE kop_requests_total counter\n"
        'kop_requests_total{worker="0",api="Produce"} 3\nkop_requests_total{worker="1",api="Produce"} 4\n'
        '# HELP kop_up Up.\n# TYPE kop_up gauge\nkop_up{worker="0"} 1\nkop_up{worker="1"} 1\n')


async def test_stores_sharing_a_directory_never_hand_out_the_same_ledger_id(tmp_path) -> None:
    """Two workers' stores opened before either created a ledger (each read the same counter): the blocks they
    reserve are disjoint."""
    a = LocalLedgerStore(tmp_path, fsync="none", exclusive=False)
    b = LocalLedgerStore(tmp_path, fsync="none", exclusive=False)
    try:
        ids = []
        for _ in range(3):
            for store in (a, b):
                handle = await store.create_ledger()
                ids.append(handle.ledger_id)
                await handle.close()
        assert len(set(ids)) == len(ids), ids
        c = LocalLedgerStore(tmp_path, fsync="none", exclusive=False)  # a restarted worker: past both blocks
        handle = await c.create_ledger()
        assert handle.ledger_id not in ids
        await handle.close()
        await c.close()
    finally:
        await a.close()
        await b.close()


async def test_sqlite_watches_see_another_processes_writes(tmp_path) -> None:
    """Watches of one store see writes made through another connection (another worker) - children and data."""
    watcher = SqliteMetadataStore(tmp_path, durable=False)
    writer = SqliteMetadataStore(tmp_path, durable=False)
    children: asyncio.Queue[list[str]] = asyncio.Queue()
    values: asyncio.Queue[bytes | None] = asyncio.Queue()
    try:
        await writer.put("/topics/a", b"1")
        await watcher.watch_children_async("/topics", children.put_nowait)
        await watcher.watch_data_async("/topics/a", lambda value, stat: values.put_nowait(value))
        assert await asyncio.wait_for(children.get(), 30) == ["a"]  # at once: the state now
        assert await asyncio.wait_for(values.get(), 30) == b"1"
        await writer.put("/topics/b", b"")
        await writer.put("/topics/a", b"2")
        assert await asyncio.wait_for(children.get(), 30) == ["a", "b"]
        assert await asyncio.wait_for(values.get(), 30) == b"2"
        await writer.delete("/topics/a")
        assert await asyncio.wait_for(values.get(), 30) is None
        assert await asyncio.wait_for(children.get(), 30) == ["b"]
    finally:
        await watcher.close()
        await writer.close()
