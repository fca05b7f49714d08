"""Issue 17, third defect: Produce v8+ names each record it refuses (`record_errors`) with Kafka's
`error_message`, so a producer fails exactly those records (kop/kafka/apis/produce.py).

The raw-wire tests compare the whole partition answer with what Apache Kafka 4.x says (run with
KOP_E2E_TARGET=kop,kafka); the librdkafka test is the case from the issue.
"""

from __future__ import annotations

import time

from tests.support.clients import create_topic


def test_librdkafka_fails_exactly_the_keyless_records(target) -> None:
    """100 records, every 10th without a key, to a compacted topic, in one batch: the broker refuses the
    batch naming the 10 keyless records, so librdkafka fails exactly those with INVALID_RECORD and the 90
    others with its own _INVALID_DIFFERENT_RECORD ("an invalid record in the same batch caused the failure
    of this message too") - what it does with Apache Kafka 4.x (checked on the kafka target). Without the
    names, all 100 failed alike with INVALID_RECORD. Sent again, as an application would, the 90 are
    delivered and read back."""
    from confluent_kafka import Consumer, Producer, TopicPartition

    b = target.module_broker()
    topic = target.topic("keyless")
    create_topic(b.bootstrap, topic, config={"cleanup.policy": "compact"})
    outcome: dict[int, str | None] = {}

    def on_delivery(err, msg) -> None:
        outcome[int(msg.value().split(b"-")[1])] = err.name() if err else None

    p = Producer({"bootstrap.servers": b.bootstrap, "linger.ms": 500, "batch.num.messages": 1000})
    for i in range(100):
        p.produce(topic, key=None if i % 10 == 3 else b"k%d" % i, value=b"v-%d" % i, partition=0,
                  on_delivery=on_delivery)
    assert p.flush(120) == 0
    assert sorted(i for i, e in outcome.items() if e == "INVALID_RECORD") == [i for i in range(100) if i % 10 == 3]
    others = sorted(i for i, e in outcome.items() if e != "INVALID_RECORD")
    assert others == [i for i in range(100) if i % 10 != 3]
    assert {outcome[i] for i in others} <= {"_INVALID_DIFFERENT_RECORD", None}, {outcome[i] for i in others}
    for i in others:
        if outcome[i] is not None:
            p.produce(topic, key=b"k%d" % i, value=b"v-%d" % i, partition=0, on_delivery=on_delivery)
    assert p.flush(120) == 0
    assert all(outcome[i] is None for i in others), {outcome[i] for i in others}
    c = Consumer({"bootstrap.servers": b.bootstrap, "group.id": f"g{time.monotonic_ns()}", "enable.auto.commit": False})
    try:
        c.assign([TopicPartition(topic, 0, 0)])
        got = []
        deadline = time.monotonic() + 120
        while len(got) < 90:
            assert time.monotonic() < deadline, f"read {len(got)} of 90"
            m = c.poll(0.5)
            if m is not None and not m.error():
                got.append(m.value())
        assert sorted(got) == sorted(b"v-%d" % i for i in range(100) if i % 10 != 3)
    finally:
        c.close()


def _batch(records: list[tuple[bytes | None, int]]) -> bytes:
    """One uncompressed v2 batch (kafka-python's builder, independent of our codec)."""
    from kafka.record.memory_records import MemoryRecordsBuilder

    bld = MemoryRecordsBuilder(magic=2, compression_type=0, batch_size=1 << 20)
    for key, ts in records:
        bld.append(timestamp=ts, key=key, value=b"v", headers=[])
    bld.close()
    return bld.buffer()


def test_wire_answers_as_kafka(target) -> None:
    """The refused partition's error code, record_errors and error_message, field by field, as Kafka 4.x
    answers (keyless on compacted, timestamp past message.timestamp.after.max.ms, before.max.ms)."""
    from tests.support.wire import Negotiated

    b = target.module_broker()
    compacted = target.topic("wire-compact")
    create_topic(b.bootstrap, compacted, config={"cleanup.policy": "compact"})
    bounded = target.topic("wire-ts")
    create_topic(b.bootstrap, bounded, config={"message.timestamp.after.max.ms": "60000",
                                               "message.timestamp.before.max.ms": "60000"})
    now = int(time.time() * 1000)
    with Negotiated(b.bootstrap) as wire:
        p = wire.produce(compacted, 0, _batch([(b"a", now), (None, now), (b"c", now), (None, now)]))
        assert p.error_code == 87  # INVALID_RECORD
        assert [(e.batch_index, e.batch_index_error_message) for e in p.record_errors] == [
            (1, f"Compacted topic cannot accept message without key in topic partition {compacted}-0"),
            (3, f"Compacted topic cannot accept message without key in topic partition {compacted}-0"),
        ]
        msg = f"Compacted topic cannot accept message without key in topic partition {compacted}-0"
        assert p.error_message == (
            "One or more records have been rejected due to 2 record errors in total, and only showing the first "
            f"three errors at most: [RecordError(batchIndex=1, message='{msg}'), "
            f"RecordError(batchIndex=3, message='{msg}')]")

        far = now + 3_600_000
        old = now - 3_600_000
        p = wire.produce(bounded, 0, _batch([(b"a", now), (b"b", far), (b"c", old)]))
        assert p.error_code == 32  # INVALID_TIMESTAMP
        assert p.error_message == "One or more records have been rejected due to invalid timestamp"
        assert [e.batch_index for e in p.record_errors] == [1, 2]
        for e, ts, off in zip(p.record_errors, (far, old), (1, 2), strict=True):
            text = e.batch_index_error_message
            assert text.startswith(f"Timestamp {ts} of message with offset {off} is out of range. The timestamp "
                                   "should be within ["), text
        p = wire.produce(bounded, 0, _batch([(b"a", now), (b"b", now + 1000)]))
        assert p.error_code == 0 and list(p.record_errors or []) == []
