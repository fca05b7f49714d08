"""Pulsar's topic compaction on our broker (kop/pulsar/compacted.py), where it goes beyond what Apache Pulsar can be
compared with (tests/e2e/test_pulsar_compaction.py does that): the horizon kept across a restart, and what a
compaction does to a `cleanup.policy=compact` topic (the Kafka cleaner's pass: Kafka consumers see the compacted log
too) versus a `delete` one (nothing removed). What a record means to the compacted view is
tests/test_pulsar_compaction_rule.py (sans-IO)."""

from __future__ import annotations

import time
import urllib.request
import uuid

import pulsar
import pytest

from tests.support.admin import kop_admin, kop_admin_json, ok, topic_url
from tests.support.broker import KopBroker
from tests.support.clients import create_topic

RECEIVE_MS = 30_000  # a guard against hangs, not a timing assertion
WAIT_S = 60  # how long a compaction may take before the test gives up (a wait, not an assertion on time)


def _compact(admin: str, topic: str, trigger: bool = True, part: str | None = None) -> None:
    """Trigger a compaction of the topic (unless done already) and wait until the compaction of `part` (the topic
    itself when it is non-partitioned, as a Pulsar producer creates it; a partition of a Kafka-created one) ended."""
    if trigger:
        req = urllib.request.Request(topic_url(admin, topic) + "/compaction", method="PUT")
        with urllib.request.urlopen(req, timeout=60) as resp:
            assert resp.status == 204
    deadline = time.monotonic() + WAIT_S
    while (status := ok(topic_url(admin, part or topic) + "/compaction"))["status"] == "RUNNING":
        assert time.monotonic() < deadline, "the compaction did not end"
        time.sleep(0.1)
    assert status == {"status": "SUCCESS", "lastError": ""}


def _read(client: pulsar.Client, topic: str, compacted: bool, n: int) -> list[tuple[str, bytes]]:
    """The first n messages of `topic` (a non-partitioned topic or one partition's name) from the earliest."""
    reader = client.create_reader(f"persistent://public/default/{topic}", pulsar.MessageId.earliest,
                                  is_read_compacted=compacted)
    got = []
    for _ in range(n):
        msg = reader.read_next(RECEIVE_MS)
        got.append((msg.partition_key(), msg.data()))
    assert not reader.has_message_available()
    reader.close()
    return got


@pytest.fixture(scope="module")
def broker(tmp_path_factory):
    """One broker for the module (the first test restarts it)."""
    b = KopBroker(tmp_path_factory.mktemp("kop"), {"allowAutoTopicCreation": "true", "defaultNumPartitions": 1}).start()
    yield b
    b.stop()


def test_the_horizon_outlives_a_restart_and_a_delete_topic_keeps_everything(broker):
    topic = f"cmp-{uuid.uuid4().hex[:8]}"
    client = pulsar.Client(broker.pulsar_url, operation_timeout_seconds=60)
    producer = client.create_producer(f"persistent://public/default/{topic}", batching_enabled=False)
    for key, value in [("k1", b"a"), ("k2", b"b"), ("k1", b"c")]:
        producer.send(value, partition_key=key)
    producer.close()
    _compact(broker.admin_url, topic)
    client.close()
    broker.stop()
    broker.start()
    # in memory, as Pulsar's; kop-admin (pulsar-admin's verbs) reads it
    assert kop_admin(broker.admin_url, "topics", "compaction-status", topic).stdout == "NOT_RUN\n"
    assert kop_admin_json(broker.admin_url, "topics", "compaction-status", topic) == {
        "status": "NOT_RUN", "lastError": ""}
    client = pulsar.Client(broker.pulsar_url, operation_timeout_seconds=60)
    assert _read(client, topic, True, 2) == [("k2", b"b"), ("k1", b"c")]  # the view is rebuilt
    assert _read(client, topic, False, 3) == [("k1", b"a"), ("k2", b"b"), ("k1", b"c")]  # nothing removed
    client.close()


def test_a_compact_topic_is_cleaned_for_kafka_consumers_too(broker):
    from kafka import KafkaConsumer, KafkaProducer, TopicPartition

    topic = f"cmpk-{uuid.uuid4().hex[:8]}"
    create_topic(broker.bootstrap, topic, 1, {"cleanup.policy": "compact"})
    producer = KafkaProducer(bootstrap_servers=broker.bootstrap, acks="all")
    for key, value in [(b"k1", b"a"), (b"k2", b"b"), (b"k1", b"c"), (b"k2", None), (b"k3", b"x"), (b"k4", b"")]:
        producer.send(topic, key=key, value=value, partition=0).get(timeout=60)
    producer.close()
    assert kop_admin(broker.admin_url, "topics", "compact", topic).stdout == "done\n"  # what _compact PUTs
    _compact(broker.admin_url, topic, trigger=False, part=f"{topic}-partition-0")  # Kafka's topics are partitioned
    consumer = KafkaConsumer(bootstrap_servers=broker.bootstrap, auto_offset_reset="earliest",
                             enable_auto_commit=False, consumer_timeout_ms=RECEIVE_MS)
    consumer.assign([TopicPartition(topic, 0)])
    kafka_seen = []
    for r in consumer:  # up to the last record (the guard ends a hang)
        kafka_seen.append((r.offset, r.key, r.value))
        if r.offset == 5:
            break
    consumer.close()
    # the cleaner's pass: superseded records gone, the tombstone kept for delete.retention.ms, the empty value kept
    # (Kafka's rule: only a null value is a tombstone)
    assert kafka_seen == [(2, b"k1", b"c"), (3, b"k2", None), (4, b"k3", b"x"), (5, b"k4", b"")]
    client = pulsar.Client(broker.pulsar_url, operation_timeout_seconds=60)
    # the Pulsar view's rule (Pulsar 4.2's): the tombstone deletes k2, the empty value k4
    assert _read(client, f"{topic}-partition-0", True, 2) == [("k1", b"c"), ("k3", b"x")]
    client.close()


def test_individual_acks_of_a_thinned_batch_hold(broker):
    """The C++ client hands out a batch's compacted_out slots as empty messages; acknowledging every message of the
    batch acknowledges the entry, and the positions compaction left out count as acknowledged, so a readCompacted
    subscription resumes after them. (Apache Pulsar redelivers here: the left-out positions are never acknowledged
    there, so its mark-delete position stays before them - docs/pulsar.md.)"""
    topic = f"cmpa-{uuid.uuid4().hex[:8]}"
    client = pulsar.Client(broker.pulsar_url, operation_timeout_seconds=60)
    producer = client.create_producer(f"persistent://public/default/{topic}", batching_enabled=True,
                                      batching_max_messages=3, batching_max_publish_delay_ms=60_000)
    for key, value in [("k4", b"1"), ("k4", b"2"), ("k5", b"1")]:
        producer.send_async(value, None, partition_key=key)
    producer.flush()
    _compact(broker.admin_url, topic)
    partition = f"persistent://public/default/{topic}"  # non-partitioned: the producer created it
    consumer = client.subscribe(partition, "s", is_read_compacted=True, initial_position=pulsar.InitialPosition.Earliest)
    got = []
    for _ in range(3):
        msg = consumer.receive(RECEIVE_MS)
        consumer.acknowledge(msg)
        got.append((msg.partition_key(), msg.data()))
    assert got == [("", b""), ("k4", b"2"), ("k5", b"1")]  # the slot of k4=1 comes first, empty
    consumer.close()
    producer.send_async(b"again", None, partition_key="k6")  # a sync send would wait out the 60 s batch delay
    producer.flush()
    producer.close()
    consumer = client.subscribe(partition, "s", is_read_compacted=True)
    assert consumer.receive(RECEIVE_MS).data() == b"again"
    client.close()
