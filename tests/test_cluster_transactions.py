"""Transactions in cluster mode (two brokers sharing ZooKeeper and the bookies of tests/support/bookkeeper.py,
as tests/test_cluster_takeover.py): the coordinator writes markers into partitions another broker owns
through WriteTxnMarkers (kop/coordinator/transactions/markers.py), and takes over a transactional id whose
coordinator broker was SIGKILLed mid-transaction.

* A transaction over partitions led by both brokers commits, one aborts: read_committed readers see exactly
  the committed records, with offsets from a sendOffsetsToTransaction of a group coordinated by either.
* The broker coordinating the id dies with the transaction open: the producer either commits on the new
  coordinator or is fenced (as in Kafka); nothing of a transaction that did not commit becomes visible,
  and the next session of the id works.
"""

from __future__ import annotations

import uuid

from tests.support.clients import create_topic
from tests.support.cluster import broker_id, eventually, leader_of, start_brokers, stop_brokers

PARTITIONS = 8


def consume(bootstrap: str, topic: str, isolation: str, want: int) -> list[str]:
    from confluent_kafka import Consumer

    c = Consumer({"bootstrap.servers": bootstrap, "group.id": f"read-{uuid.uuid4().hex[:6]}",
                  "auto.offset.reset": "earliest", "enable.auto.commit": False, "isolation.level": isolation})
    c.subscribe([topic])
    got: list[str] = []
    try:
        eventually(f"{want} records ({isolation})",
                   lambda: got.extend(m.value().decode() for m in c.consume(50, 0.3) if not m.error())
                   or len(got) >= want, timeout=120)
        got.extend(m.value().decode() for m in c.consume(50, 1.0) if not m.error())
    finally:
        c.close()
    return got


def coordinator_id(broker, tid: str) -> int | None:
    """The broker id FindCoordinator (key type 1) names for `tid`, asked of `broker`; None on an error."""
    from kafka.protocol.metadata.find_coordinator import FindCoordinatorRequest

    from tests.support.wire import WireClient

    with WireClient(broker.bootstrap) as w:
        r = w.send(FindCoordinatorRequest(key=tid, key_type=1), 3)
    return r.node_id if r.error_code == 0 else None


def test_markers_reach_partitions_of_the_other_broker(cluster, tmp_path_factory) -> None:
    from confluent_kafka import Producer

    brokers = start_brokers(tmp_path_factory, cluster, 2, transactionStateLogNumPartitions=4)
    try:
        topic = "txn-cluster"
        create_topic(brokers[0].bootstrap, topic, PARTITIONS)
        owners = {p: broker_id(leader_of(brokers, topic, p)) for p in range(PARTITIONS)}
        assert set(owners.values()) == {1, 2}, owners  # both brokers lead some of its partitions
        p = Producer({"bootstrap.servers": brokers[0].bootstrap, "transactional.id": "tx-cluster"})
        p.init_transactions(60)
        for round_, commit in (("c1", True), ("a", False), ("c2", True)):
            p.begin_transaction()
            for part in range(PARTITIONS):
                p.produce(topic, value=f"{round_}-{part}".encode(), partition=part)
            p.flush(60)
            (p.commit_transaction if commit else p.abort_transaction)(60)
        want = sorted(f"{r}-{part}" for r in ("c1", "c2") for part in range(PARTITIONS))
        assert sorted(consume(brokers[1].bootstrap, topic, "read_committed", len(want))) == want
        everything = consume(brokers[1].bootstrap, topic, "read_uncommitted", 3 * PARTITIONS)
        assert len(everything) == 3 * PARTITIONS
    finally:
        stop_brokers(brokers)


def test_coordinator_broker_killed_mid_transaction(cluster, tmp_path_factory) -> None:
    from confluent_kafka import KafkaException, Producer

    brokers = start_brokers(tmp_path_factory, cluster, 2, transactionStateLogNumPartitions=4)
    try:
        topic = "txn-takeover"
        create_topic(brokers[0].bootstrap, topic, PARTITIONS)
        tid = next(t for t in (f"tx-takeover-{i}" for i in range(100))
                   if eventually(f"a coordinator for {t}", lambda t=t: coordinator_id(brokers[0], t)) == 2)
        survivor, victim = brokers[0], brokers[1]
        p = Producer({"bootstrap.servers": survivor.bootstrap, "transactional.id": tid,
                      "transaction.timeout.ms": 60000})
        p.init_transactions(60)
        p.begin_transaction()
        for part in range(PARTITIONS):
            p.produce(topic, value=f"committed-{part}".encode(), partition=part)
        p.commit_transaction(60)
        p.begin_transaction()
        for part in range(PARTITIONS):
            p.produce(topic, value=f"open-{part}".encode(), partition=part)
        p.flush(60)
        victim.kill()  # SIGKILL: its bundles (and the id's __transaction_state partition) go to the survivor
        eventually("the survivor to coordinate the id", lambda: coordinator_id(survivor, tid) == 1, timeout=120)
        committed = True
        try:
            p.commit_transaction(120)
        except KafkaException:
            committed = False  # fenced or aborted by the takeover: allowed, as in Kafka
        print(f"the open transaction {'committed' if committed else 'failed'} across the takeover")
        want = [f"committed-{part}" for part in range(PARTITIONS)]
        if committed:
            want += [f"open-{part}" for part in range(PARTITIONS)]
        p2 = Producer({"bootstrap.servers": survivor.bootstrap, "transactional.id": tid})
        p2.init_transactions(120)  # fences p and aborts whatever it left open
        p2.begin_transaction()
        p2.produce(topic, value=b"after", partition=0)
        p2.commit_transaction(60)
        want.append("after")
        assert sorted(consume(survivor.bootstrap, topic, "read_committed", len(want))) == sorted(want)
    finally:
        stop_brokers(brokers)
