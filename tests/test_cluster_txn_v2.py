"""Transaction version 2 in cluster mode (two brokers on the shared ZooKeeper and bookies of
tests/support/bookkeeper.py): a TV2 producer's transactional Produce v12 goes to the broker that leads the
partition, which is not the one coordinating the transactional id; that broker adds the partition to the
transaction with the inter-broker AddPartitionsToTxn v5 (kop/coordinator/transactions/markers.py), as Kafka's
AddPartitionsToTxnManager does, so EndTxn v5 writes the marker there and read_committed sees the records."""

from __future__ import annotations

import time
from typing import Any

from tests.support.clients import create_topic
from tests.support.cluster import broker_id, eventually, leader_of, start_brokers, stop_brokers
from tests.support.txn_wire import RawClient, batches_of, txn_batch

PARTITIONS = 4
RETRIABLE = {14, 15, 16, 19, 51}


def retried(call: Any) -> Any:
    for _ in range(200):
        r = call()
        if r.error_code not in RETRIABLE:
            return r
        time.sleep(0.1)
    raise AssertionError(f"still retriable: {r}")


def test_produce_at_another_broker_adds_the_partition_at_the_coordinator(cluster, tmp_path_factory) -> None:
    brokers = start_brokers(tmp_path_factory, cluster, 2, transactionStateLogNumPartitions=4)
    clients: list[RawClient] = []
    try:
        topic = "txn-v2-cluster"
        create_topic(brokers[0].bootstrap, topic, PARTITIONS)
        tid = "tx-v2-cluster"
        by_id = {broker_id(b): b for b in brokers}
        first = RawClient(brokers[0].bootstrap)
        clients.append(first)
        found = retried(lambda: first.call(10, 4, key_type=1, coordinator_keys=[tid]).coordinators[0])
        coordinator = by_id[found.node_id]
        others = eventually("a partition led by the other broker", lambda: [
            p for p in range(PARTITIONS) if leader_of(brokers, topic, p) is not coordinator])
        part = others[0]
        leader = leader_of(brokers, topic, part)
        at_coordinator, at_leader = RawClient(coordinator.bootstrap), RawClient(leader.bootstrap)
        clients += [at_coordinator, at_leader]
        init = retried(lambda: at_coordinator.call(22, 4, transactional_id=tid, transaction_timeout_ms=60000,
                                                   producer_id=-1, producer_epoch=-1))
        pid, epoch = init.producer_id, init.producer_epoch

        r = retried(lambda: at_leader.produce(topic, part, txn_batch(pid, epoch, 0, [b"v2-0", b"v2-1"]),
                                              transactional_id=tid, version=12))
        assert r.error_code == 0
        (state,) = at_coordinator.call(65, 0, transactional_ids=[tid]).transaction_states
        assert state.transaction_state == "Ongoing"
        assert [(t.topic, list(t.partitions)) for t in state.topics] == [(topic, [part])]
        end = retried(lambda: at_coordinator.call(26, 5, transactional_id=tid, producer_id=pid, producer_epoch=epoch,
                                                  committed=True))
        assert (end.error_code, end.producer_epoch) == (0, epoch + 1)

        def committed() -> list[bytes] | None:
            f = at_leader.fetch(topic, part, 0, committed=True)
            values = [v for _, h, vs in batches_of(f.records) if not h.is_control for v in vs]
            return values or None

        assert eventually("the committed records", committed) == [b"v2-0", b"v2-1"]
    finally:
        for c in clients:
            c.close()
        stop_brokers(brokers)
