"""Log compaction end to end through our broker, with kafka-python as the client.

A topic created with cleanup.policy=compact (through the admin client) gets 10 000 records over 100 keys in
many small ledgers; the broker's log cleaner (logCleanerIntervalMs short, max.compaction.lag.ms = 1 s so
the current ledger is rolled and cleaned too) compacts it. A consumer reading from the beginning then sees
exactly the latest value of each key, in offset order, at the very offsets the producer was given (gaps in
between), and the earliest/latest offsets did not move. Tombstones are served until delete.retention.ms
after the pass that first kept them, then disappear. A SIGKILLed and restarted broker serves the same. A
record without a key is refused with INVALID_RECORD, as Kafka refuses it for compacted topics.
"""

from __future__ import annotations

import time

import pytest

from tests.support.clients import STALL_TIMEOUT
from tests.support.inspect import managed_ledger

KEYS = 100
RECORDS = 10_000
DELETE_RETENTION_MS = 6_000


def wait_for(what: str, cond, timeout: float = 60.0, interval: float = 0.1):
    deadline = time.monotonic() + timeout
    while True:
        got = cond()
        if got:
            return got
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(interval)


def compacted_through(broker, topic: str, offset: int) -> bool:
    props = managed_ledger(broker, topic, 0).properties
    return int(props.get("kop.compactedOffset") or -1) >= offset


def consume_all(bootstrap: str, topic: str) -> tuple[list[tuple[int, bytes, bytes | None]], int, int]:
    """Every record from the beginning to the end offset: [(offset, key, value)], earliest, latest."""
    from kafka import KafkaConsumer, TopicPartition

    tp = TopicPartition(topic, 0)
    consumer = KafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False, group_id=None,
                             auto_offset_reset="earliest", max_partition_fetch_bytes=4096)
    try:
        consumer.assign([tp])
        earliest = consumer.beginning_offsets([tp])[tp]
        latest = consumer.end_offsets([tp])[tp]
        consumer.seek_to_beginning(tp)
        out: list[tuple[int, bytes, bytes | None]] = []
        deadline = time.monotonic() + STALL_TIMEOUT
        while consumer.position(tp) < latest:
            assert time.monotonic() < deadline, f"stuck at {consumer.position(tp)} of {latest}"
            for records in consumer.poll(timeout_ms=500).values():
                out += [(r.offset, r.key, r.value) for r in records]
        return out, earliest, latest
    finally:
        consumer.close()


def test_compacted_topic_keeps_latest_value_per_key_at_original_offsets(kop_broker):
    from kafka import KafkaProducer
    from kafka.admin import KafkaAdminClient, NewTopic
    from kafka.errors import InvalidRecordError

    broker = kop_broker(
        managedLedgerMaxEntriesPerLedger=20,
        managedLedgerMinLedgerRolloverTimeMinutes=0,
        logCleanerIntervalMs=200,
        allowAutoTopicCreation="false",
    )
    topic = "compacted-orders"
    admin = KafkaAdminClient(bootstrap_servers=broker.bootstrap)
    try:
        admin.create_topics([NewTopic(topic, 1, 1, topic_configs={
            "cleanup.policy": "compact",
            "min.cleanable.dirty.ratio": "0.01",
            "max.compaction.lag.ms": "1000",
            "delete.retention.ms": str(DELETE_RETENTION_MS),
        })])
        described = admin.describe_configs([_config_resource(topic)])
        assert "delete.retention.ms" in str(described)
    finally:
        admin.close()

    producer = KafkaProducer(bootstrap_servers=broker.bootstrap, acks="all", linger_ms=2, batch_size=2048)
    futures = []
    for i in range(RECORDS):
        key = b"key-%03d" % (i % KEYS)
        futures.append((key, b"value-%05d" % i, producer.send(topic, key=key, value=b"value-%05d" % i, partition=0)))
    producer.flush(STALL_TIMEOUT)
    latest_by_key: dict[bytes, tuple[int, bytes]] = {}
    for key, value, fut in futures:
        offset = fut.get(timeout=STALL_TIMEOUT).offset
        latest_by_key[key] = (offset, value)
    assert len(latest_by_key) == KEYS
    last_offset = max(o for o, _ in latest_by_key.values())
    assert last_offset == RECORDS - 1

    # many ledgers were written; the cleaner compacts all of them, the current one after max.compaction.lag.ms
    wait_for("the cleaner to compact everything", lambda: compacted_through(broker, topic, last_offset))
    expected = sorted((o, k, v) for k, (o, v) in latest_by_key.items())
    got, earliest, latest = consume_all(broker.bootstrap, topic)
    assert (earliest, latest) == (0, RECORDS)
    assert got == expected  # exactly the latest value per key, in offset order, original offsets (gaps)
    view = managed_ledger(broker, topic, 0)
    assert view.entries < 30 and len(view.ledgers) <= 4

    # a record without a key is refused (kafka-python then fails that producer for good: use another one)
    keyless = KafkaProducer(bootstrap_servers=broker.bootstrap, acks="all")
    with pytest.raises(InvalidRecordError, match="Compacted topic cannot accept message without key"):
        keyless.send(topic, value=b"no key", partition=0).get(timeout=STALL_TIMEOUT)
    keyless.close()

    # tombstones for 10 keys: served until delete.retention.ms after the pass that kept them, then gone
    deleted = sorted(latest_by_key)[:10]
    tombstones = {}
    for key in deleted:
        tombstones[key] = producer.send(topic, key=key, value=None, partition=0)
    producer.flush(STALL_TIMEOUT)
    t_offsets = {k: f.get(timeout=STALL_TIMEOUT).offset for k, f in tombstones.items()}
    wait_for("the cleaner to keep the tombstones", lambda: compacted_through(broker, topic, max(t_offsets.values())))
    got, _, latest = consume_all(broker.bootstrap, topic)
    with_tombstones = sorted([(o, k, v) for o, k, v in expected if k not in tombstones]
                             + [(o, k, None) for k, o in t_offsets.items()])
    if got != with_tombstones:  # only acceptable if the horizon passed meanwhile (a very slow machine)
        assert managed_ledger(broker, topic, 0).properties.get("kop.deleteHorizon") == ""
    wait_for("the tombstones to expire",
             lambda: managed_ledger(broker, topic, 0).properties.get("kop.deleteHorizon") == "",
             timeout=DELETE_RETENTION_MS / 1000 + 60)
    # The tombstone batch is gone: offsets 10000..10009 are a gap at the end of the log, which (as in Kafka)
    # a fetch answers with nothing until something is written after it. One more record: the fetch at
    # 10000 then returns its batch, past the gap.
    sentinel = producer.send(topic, key=b"sentinel", value=b"s", partition=0).get(timeout=STALL_TIMEOUT).offset
    assert sentinel == RECORDS + 10
    survivors = [(o, k, v) for o, k, v in expected if k not in tombstones] + [(sentinel, b"sentinel", b"s")]
    got, earliest, latest = consume_all(broker.bootstrap, topic)
    assert got == survivors and (earliest, latest) == (0, RECORDS + 11)
    producer.close()

    # a SIGKILLed broker comes back with the compacted log, offsets unchanged
    broker.kill()
    broker.start()
    got, earliest, latest = consume_all(broker.bootstrap, topic)
    assert got == survivors and (earliest, latest) == (0, RECORDS + 11)


def _config_resource(topic: str):
    from kafka.admin import ConfigResource, ConfigResourceType

    return ConfigResource(ConfigResourceType.TOPIC, topic)
