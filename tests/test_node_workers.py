"""One `kop standalone` node of two worker processes (numWorkers=2, kop/node/; issue #27), real processes and
real clients: ONE node for the module.

- Kafka (confluent-kafka) and Pulsar (pulsar-client) clients bootstrap on the node's ports and are routed to the
  owner of each partition, on a topic whose partitions are owned by both workers;
- a consumer group and a transaction whose coordinators live on different workers;
- a worker SIGKILLed under acks=all load is restarted by the supervisor and no acknowledged record is lost;
- a Pulsar consumer's subscription on a partition whose worker is SIGKILLed resumes at its acknowledged position.
"""

from __future__ import annotations

import json
import re
import sqlite3
import threading
import time
import urllib.request
from pathlib import Path

import pytest

from kop.cluster.workers import worker_of
from kop.coordinator.records import partition_for
from kop.managed_ledger.cursor import CursorInfo, cursor_path
from kop.topics.names import TopicName
from tests.support.broker import KopBroker
from tests.support.clients import create_topic
from tests.support.net import wait_until

WORKERS = 2
BROKER_ID = 1  # KopBroker's kafkaBrokerId: worker i is broker 1 + i


class Node:
    """The node under test: KopBroker (the supervisor's process) plus what the log says of the workers."""

    def __init__(self, broker: KopBroker) -> None:
        self.broker = broker

    def log(self) -> str:
        return self.broker.log_path.read_text(errors="replace")

    def worker_pids(self) -> dict[int, int]:
        """Each worker's current pid ("worker i started (pid p)", the last one of each)."""
        return {int(i): int(p) for i, p in re.findall(r"worker (\d+) started \(pid (\d+)\)", self.log())}

    @property
    def admin(self) -> str:
        found = re.findall(r"node admin HTTP at (http://\S+)", self.log())
        assert found, self.broker.log_tail()
        return found[-1]

    def ready(self) -> bool:
        try:
            with urllib.request.urlopen(self.admin + "/ready", timeout=5) as r:
                return r.status == 200
        except OSError:
            return False

    def kill_worker(self, index: int) -> None:
        """SIGKILL worker `index`, then wait until the supervisor restarted it and every worker is ready."""
        import os
        import signal

        before = self.worker_pids()[index]
        os.kill(before, signal.SIGKILL)
        wait_until(f"worker {index} restarted", lambda: self.worker_pids().get(index) != before, 30,
                   self.broker.proc, self.broker.log_path)
        wait_until("node ready again", self.ready, 60, self.broker.proc, self.broker.log_path)


@pytest.fixture(scope="module")
def node(tmp_path_factory) -> Node:
    broker = KopBroker(tmp_path_factory.mktemp("kop-node"), {"numWorkers": WORKERS, "groupInitialRebalanceDelayMs": 0})
    broker.start()
    n = Node(broker)
    try:
        wait_until("node ready", lambda: "node ready" in n.log() and n.ready(), 90, broker.proc, broker.log_path)
        yield n
    finally:
        broker.stop()


def _leaders(bootstrap: str, topic: str) -> dict[int, int]:
    from confluent_kafka.admin import AdminClient

    admin = AdminClient({"bootstrap.servers": bootstrap})
    md = admin.list_topics(topic, timeout=30)
    return {p.id: p.leader for p in md.topics[topic].partitions.values()}


def _brokers(bootstrap: str) -> dict[int, tuple[str, int]]:
    """The brokers (workers) Metadata names: id -> (host, port)."""
    from confluent_kafka.admin import AdminClient

    admin = AdminClient({"bootstrap.servers": bootstrap})
    return {b.id: (b.host, b.port) for b in admin.list_topics(timeout=30).brokers.values()}


def _read_all(bootstrap: str, topic: str, partitions: int, expected: int) -> list[tuple[int, int, bytes]]:
    """Every record of `topic` from the start, (partition, offset, value), read_committed."""
    from confluent_kafka import Consumer, TopicPartition

    c = Consumer({"bootstrap.servers": bootstrap, "group.id": f"reader-{topic}", "enable.auto.commit": False,
                  "isolation.level": "read_committed"})
    c.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
    got: list[tuple[int, int, bytes]] = []
    deadline = time.monotonic() + 60
    try:
        while len(got) < expected and time.monotonic() < deadline:
            for m in c.consume(500, 0.5):
                if not m.error():
                    got.append((m.partition(), m.offset(), m.value()))
    finally:
        c.close()
    return got


def test_kafka_and_pulsar_clients_on_partitions_of_both_workers(node: Node) -> None:
    import pulsar
    from confluent_kafka import Producer

    topic = "wk-both"
    create_topic(node.broker.bootstrap, topic, 4)
    leaders = _leaders(node.broker.bootstrap, topic)
    assert set(leaders.values()) == {BROKER_ID, BROKER_ID + 1}, leaders  # both workers own partitions
    p = Producer({"bootstrap.servers": node.broker.bootstrap, "acks": "all", "enable.idempotence": True})
    for i in range(40):
        p.produce(topic, value=f"k{i}".encode(), partition=i % 4)
    assert p.flush(30) == 0
    client = pulsar.Client(node.broker.pulsar_url)
    try:
        producer = client.create_producer(f"persistent://public/default/{topic}", batching_enabled=False)
        for i in range(20):
            producer.send(f"p{i}".encode(), partition_key=str(i))
        consumer = client.subscribe(f"persistent://public/default/{topic}", "both",
                                    initial_position=pulsar.InitialPosition.Earliest)
        pulsar_got = {consumer.receive(30_000).data() for _ in range(60)}
    finally:
        client.close()
    expected = {f"k{i}".encode() for i in range(40)} | {f"p{i}".encode() for i in range(20)}
    assert pulsar_got == expected
    kafka_got = _read_all(node.broker.bootstrap, topic, 4, 60)
    assert {v for _, _, v in kafka_got} == expected and len(kafka_got) == 60
    # one admin address for the node: Pulsar's admin REST (answered by a worker) and /metrics of both workers
    with urllib.request.urlopen(f"{node.admin}/admin/v2/persistent/public/default/{topic}/partitions", timeout=30) as r:
        assert json.loads(r.read())["partitions"] == 4
    with urllib.request.urlopen(node.admin + "/metrics", timeout=30) as r:
        metrics = r.read().decode()
    assert re.search(r'^kop_\w+\{worker="0"', metrics, re.M) and re.search(r'^kop_\w+\{worker="1"', metrics, re.M)
    types = re.findall(r"^# TYPE (\S+)", metrics, re.M)
    assert types and len(types) == len(set(types))  # each family declared once


def test_group_and_transaction_coordinated_by_different_workers(node: Node) -> None:
    from confluent_kafka import Consumer, Producer
    from confluent_kafka.admin import AdminClient

    offsets = TopicName("public", "__kafka", "__consumer_offsets")
    txns = TopicName("public", "__kafka", "__transaction_state")
    group = next(g for g in (f"wk-group-{i}" for i in range(100)) if worker_of(offsets, partition_for(g, 50), 2) == 0)
    txn_id = next(t for t in (f"wk-txn-{i}" for i in range(100)) if worker_of(txns, partition_for(t, 50), 2) == 1)
    src, dst = "wk-src", "wk-dst"
    create_topic(node.broker.bootstrap, src, 4)
    create_topic(node.broker.bootstrap, dst, 4)
    p = Producer({"bootstrap.servers": node.broker.bootstrap, "acks": "all"})
    for i in range(20):
        p.produce(src, value=f"s{i}".encode(), partition=i % 4)
    assert p.flush(30) == 0
    c = Consumer({"bootstrap.servers": node.broker.bootstrap, "group.id": group, "enable.auto.commit": False,
                  "auto.offset.reset": "earliest", "isolation.level": "read_committed"})
    tp = Producer({"bootstrap.servers": node.broker.bootstrap, "transactional.id": txn_id})
    try:
        c.subscribe([src])
        seen: list[bytes] = []
        wait_until("group consumed", lambda: bool(seen.extend(m.value() for m in c.consume(50, 0.5)
                                                              if not m.error())) or len(seen) >= 20, 60)
        tp.init_transactions(30)
        tp.begin_transaction()
        for v in seen:
            tp.produce(dst, value=b"copy-" + v)
        tp.send_offsets_to_transaction(c.position(c.assignment()), c.consumer_group_metadata(), 30)
        tp.commit_transaction(30)
        committed = c.committed(c.assignment(), 30)
        assert sum(t.offset for t in committed) == 20
        admin = AdminClient({"bootstrap.servers": node.broker.bootstrap})
        assert admin.describe_consumer_groups([group])[group].result(30).coordinator.id == BROKER_ID  # worker 0; the transaction's is worker 1
    finally:
        c.close()
    copied = _read_all(node.broker.bootstrap, dst, 4, 20)
    assert sorted(v for _, _, v in copied) == sorted(b"copy-" + v for v in seen)


def test_worker_killed_under_acks_all_load_loses_no_acked_record(node: Node) -> None:
    from confluent_kafka import Producer

    topic = "wk-kill"
    create_topic(node.broker.bootstrap, topic, 4)
    acked: dict[bytes, tuple[int, int]] = {}
    errors: list[str] = []
    stop = threading.Event()

    def on_delivery(err, msg) -> None:  # noqa: ANN001 - confluent-kafka's callback
        if err is None:
            acked[msg.value()] = (msg.partition(), msg.offset())
        else:
            errors.append(str(err))

    def load() -> None:
        p = Producer({"bootstrap.servers": node.broker.bootstrap, "acks": "all", "enable.idempotence": True,
                      "linger.ms": 5})
        n = 0
        while not stop.is_set():
            p.produce(topic, value=f"r{n}".encode(), partition=n % 4, on_delivery=on_delivery)
            n += 1
            p.poll(0.002)
        p.flush(60)

    t = threading.Thread(target=load, daemon=True)
    t.start()
    try:
        wait_until("load acknowledged", lambda: len(acked) >= 200, 30)
        victim = worker_of(TopicName("public", "default", topic), 0, WORKERS)
        brokers = _brokers(node.broker.bootstrap)
        node.kill_worker(victim)
        assert _brokers(node.broker.bootstrap) == brokers  # restarted on the same ports (the supervisor holds them)
        after = len(acked)
        wait_until("acknowledged after the restart", lambda: len(acked) >= after + 200, 60)
    finally:
        stop.set()
        t.join(90)
    assert not errors, errors[:5]
    stored = {v: (p, o) for p, o, v in _read_all(node.broker.bootstrap, topic, 4, len(acked))}
    lost = [v for v in acked if v not in stored]
    moved = [v for v, at in acked.items() if v in stored and stored[v] != at]
    assert not lost and not moved, (len(acked), lost[:5], moved[:5])


def test_pulsar_subscription_resumes_at_its_acknowledged_position_after_its_worker_restarts(node: Node) -> None:
    import pulsar

    name = next(n for n in (f"wk-sub-{i}" for i in range(100))
                if worker_of(TopicName("public", "default", n), 0, WORKERS) == 1)
    topic = f"persistent://public/default/{name}"
    client = pulsar.Client(node.broker.pulsar_url, operation_timeout_seconds=60)
    try:
        producer = client.create_producer(topic, batching_enabled=False)
        consumer = client.subscribe(topic, "resume", consumer_type=pulsar.ConsumerType.Exclusive,
                                    initial_position=pulsar.InitialPosition.Earliest)
        for i in range(10):
            producer.send(f"m{i}".encode())
        first = [consumer.receive(30_000) for _ in range(5)]
        assert [m.data() for m in first] == [f"m{i}".encode() for i in range(5)]
        consumer.acknowledge_cumulative(first[-1])
        last = first[-1].message_id()
        ledger = f"public/default/persistent/{name}"  # the producer created a non-partitioned topic
        wait_until("the acknowledgement persisted", lambda: _stored_mark_delete(node, ledger, "resume")
                   == (last.ledger_id(), last.entry_id()), 30)
        node.kill_worker(1)
        rest = [consumer.receive(60_000).data() for _ in range(5)]
        assert rest == [f"m{i}".encode() for i in range(5, 10)]
    finally:
        client.close()


def _stored_mark_delete(node: Node, ledger: str, subscription: str) -> tuple[int, int] | None:
    """The subscription's mark-delete position as persisted in the node's metadata store (read-only)."""
    db = Path(node.broker.data_dir) / "metadata.db"
    con = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    try:
        row = con.execute("SELECT value FROM nodes WHERE path = ?", (cursor_path(ledger, subscription),)).fetchone()
    finally:
        con.close()
    if row is None:
        return None
    md = CursorInfo.decode(bytes(row[0])).mark_delete
    return None if md is None else (md.ledger_id, md.entry_id)


def test_sigterm_stops_every_worker_gracefully_and_a_restarted_node_keeps_their_ports(node: Node) -> None:
    """Last: SIGTERM to the node stops both workers gracefully (ledgers sealed) and the node exits 0; started
    again, its workers listen where clients knew them, and the records are all there."""
    pids = node.worker_pids()
    brokers = _brokers(node.broker.bootstrap)
    assert node.broker.stop(timeout=120) == 0
    log = node.log().rsplit("shutting down 2 workers", 1)[-1]
    assert all(f"[worker {i}] kop.server.service: broker stopped" in log for i in pids), node.broker.log_tail()
    assert "without a clean shutdown" not in log
    node.broker.start()
    wait_until("node ready", node.ready, 90, node.broker.proc, node.broker.log_path)
    assert _brokers(node.broker.bootstrap) == brokers
    assert len(_read_all(node.broker.bootstrap, "wk-both", 4, 60)) == 60
