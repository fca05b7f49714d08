"""Kafka and Pulsar clients on the same topics of our broker, and Pulsar subscriptions across a crash (issue 13).

A Pulsar-side module (tests/e2e/conftest.py) that runs on our broker only, on both storage backends (`kop`,
`kop-bk`): every test here needs one broker speaking both protocols (Apache Pulsar has no Kafka listener, Apache
Kafka no Pulsar one), or kills the broker it talks to. What the Python Kafka clients already prove on the
embedded storage (tests/test_pulsar_consume.py, tests/test_pulsar_produce.py: kafka-python and confluent-kafka
records read by pulsar-client, pulsar-client messages read by them) is not repeated; this module adds

* the Java Kafka producer (kafka-console-producer: keys, headers, null values, each codec) read by pulsar-client:
  ordering key, partition key, event time (= the Kafka timestamp the Kafka consumer sees), properties, null value,
  and message ids that agree with the admin REST getMessageIdByIndex offset by offset;
* pulsar-client batched messages (ordering key, partition key, event time, properties) after Kafka records, read
  by the Java console consumer and by Spark's kafka source (on a non-partitioned topic, Pulsar's kind: issue #22)
  with continuous offsets and the mapped key/timestamp/headers;
* a durable subscription that survives `kill -9` of the broker, on BookKeeper too (the cursor lives in ZooKeeper
  there).

Topics are partitioned, one partition (see test_pulsar_clients.py), except Spark's, a non-partitioned one.
"""

from __future__ import annotations

import time

import pulsar
import pytest

from kop.pulsar.convert import ORDERING_KEY_HEADER
from tests.support.admin import ok, rest, topic_url
from tests.support.clients import Rec, consume_kafka_python, create_topic, produce_kafka_python

PULSAR_SIDE_TARGETS = ("kop", "kop-bk")

RECEIVE_MS = 30_000  # a generous bound for one receive under load; never a measured quantity
BASE_TS = 1_700_000_000_000


def pulsar_client(url: str) -> pulsar.Client:
    return pulsar.Client(url, operation_timeout_seconds=60, logger=pulsar.ConsoleLogger(pulsar.LoggerLevel.Warn))


# ---- Java Kafka producer -> pulsar-client -------------------------------------------------------------------


@pytest.mark.parametrize("codec", ["none", "gzip", "snappy", "lz4", "zstd"])
def test_java_kafka_producer_records_read_by_pulsar(target, pulsar_broker, java_tools, codec):
    broker = pulsar_broker.handle
    topic = target.topic(f"jkp-{codec}")
    create_topic(broker.bootstrap, topic, partitions=1)
    # headers \t key \t value; "NULL" is a null key or value. Records 0-1 have no key, 3 and 7 a null value.
    lines, want = [], []
    for i in range(12):
        key = None if i < 2 else f"key-{i % 5}"
        value = None if i in (3, 7) else f"value-{i}-" + "xyz" * 20
        headers = {"idx": str(i), "src": "java"}
        want.append((key, value, headers))
        lines.append("\t".join([",".join(f"{k}:{v}" for k, v in headers.items()), key or "NULL", value or "NULL"]))
    java_tools.run(
        "kafka-console-producer", "--bootstrap-server", broker.bootstrap, "--topic", topic,
        "--property", "parse.key=true", "--property", "parse.headers=true", "--property", "null.marker=NULL",
        "--producer-property", f"compression.type={codec}", "--producer-property", "linger.ms=200",
        input="\n".join(lines) + "\n", check=True)

    kafka = consume_kafka_python(broker.bootstrap, topic, {0: 12})  # the Kafka view: offsets and timestamps
    assert [g.offset for g in kafka] == list(range(12))
    assert [g.value for g in kafka] == [v.encode() if v is not None else None for _, v, _ in want]

    client = pulsar_client(pulsar_broker.service_url)
    consumer = client.subscribe(topic, "s", initial_position=pulsar.InitialPosition.Earliest)
    got = [consumer.receive(RECEIVE_MS) for _ in range(12)]
    entries = set()
    admin = topic_url(pulsar_broker.admin_url, f"{topic}-partition-0")
    for offset, (m, (key, value, headers), k) in enumerate(zip(got, want, kafka, strict=True)):
        consumer.acknowledge(m)
        if key is None:
            assert (m.partition_key(), m.ordering_key()) == ("", ""), offset
        else:
            assert (m.partition_key(), m.ordering_key()) == (key, key), offset
        assert m.properties() == headers
        assert m.has_null_value() == (value is None)
        assert m.data() == (value.encode() if value is not None else b"")
        assert m.event_timestamp() == k.timestamp  # the producer's CreateTime
        mid = m.message_id()
        entries.add((mid.ledger_id(), mid.entry_id()))
        by_index = ok(f"{admin}/getMessageIdByIndex?index={offset}")
        assert (by_index["ledgerId"], by_index["entryId"], by_index["partitionIndex"]) == (
            mid.ledger_id(), mid.entry_id(), mid.partition()) == (by_index["ledgerId"], by_index["entryId"], 0)
        first = ok(f"{admin}/getIndexByMessageId?ledgerId={mid.ledger_id()}&entryId={mid.entry_id()}")["firstIndex"]
        assert first + max(mid.batch_index(), 0) == offset
    assert len(entries) < 12  # the producer batched: several records per entry, told apart by batch index
    consumer.close()
    client.close()


# ---- pulsar-client -> Java console consumer and Spark -------------------------------------------------------


def _mixed_topic(target, pulsar_broker, hint: str, non_partitioned: bool = False
                 ) -> tuple[str, list[tuple[bytes | None, bytes, int, dict]]]:
    """Two kafka-python records, then 20 batched pulsar-client messages (ordering key on odd, partition key on
    every third, event time on all but every fourth, properties), then one more Kafka record. Returns the topic
    and per offset the expected (key, value, timestamp or -1 for "publish time", headers). The topic is created by
    Kafka's CreateTopics (one partition), or with `non_partitioned` over the admin REST as Pulsar's kind."""
    broker = pulsar_broker.handle
    topic = target.topic(hint)
    if non_partitioned:
        assert rest(pulsar_broker.admin_url, "PUT", f"persistent/public/default/{topic}") == (204, None)
        assert rest(pulsar_broker.admin_url, "GET", f"persistent/public/default/{topic}/partitions") == (
            200, {"partitions": 0})
    else:
        create_topic(broker.bootstrap, topic, partitions=1)
    produce_kafka_python(broker.bootstrap, topic, [Rec(0, b"kk0", b"kafka-0", (("h", b"0"),), BASE_TS),
                                                   Rec(0, None, b"kafka-1", (), BASE_TS + 1)], "none")
    want: list[tuple[bytes | None, bytes, int, dict]] = [(b"kk0", b"kafka-0", BASE_TS, {"h": "0"}),
                                                          (None, b"kafka-1", BASE_TS + 1, {})]
    client = pulsar_client(pulsar_broker.service_url)
    producer = client.create_producer(topic, batching_enabled=True, batching_max_messages=8,
                                      batching_max_publish_delay_ms=500)
    ids = []
    for i in range(20):
        kw: dict = {"properties": {"i": str(i), "src": "pulsar"}}
        if i % 2:
            kw["ordering_key"] = f"ok{i}"
        if i % 3 == 0:
            kw["partition_key"] = f"pk{i}"
        if i % 4:
            kw["event_timestamp"] = BASE_TS + 100 + i
        key = f"pk{i}" if i % 3 == 0 else (f"ok{i}" if i % 2 else None)  # the partition key, else the ordering key
        headers = dict(kw["properties"])
        if i % 2 and i % 3 == 0:  # an ordering key that is not the key: in a header (issue #22)
            headers[ORDERING_KEY_HEADER] = f"ok{i}"
        want.append((key.encode() if key else None, f"pulsar-{i}".encode(), BASE_TS + 100 + i if i % 4 else -1,
                     headers))
        producer.send_async(f"pulsar-{i}".encode(), lambda res, mid: ids.append((res, mid)), **kw)
    producer.flush()
    producer.close()
    client.close()
    assert len(ids) == 20 and all(res == pulsar.Result.Ok for res, _ in ids)
    assert len({(m.ledger_id(), m.entry_id()) for _, m in ids}) < 20  # batched
    produce_kafka_python(broker.bootstrap, topic, [Rec(0, b"kk2", b"kafka-2", (), BASE_TS + 500)], "none")
    want.append((b"kk2", b"kafka-2", BASE_TS + 500, {}))
    return topic, want


def _check_timestamp(got: int, want: int, before: int) -> None:
    if want == -1:  # no event time: the broker's publish time, taken after the test began
        assert got >= before
    else:
        assert got == want


def test_pulsar_batches_read_by_the_java_console_consumer(target, pulsar_broker, java_tools):
    before = int(time.time() * 1000) - 1000
    topic, want = _mixed_topic(target, pulsar_broker, "pjc")
    out = java_tools.run(
        "kafka-console-consumer", "--bootstrap-server", pulsar_broker.handle.bootstrap, "--topic", topic,
        "--partition", "0", "--offset", "earliest", "--max-messages", str(len(want)),
        *[a for p in ("print.key=true", "print.timestamp=true", "print.offset=true", "print.headers=true",
                      "key.separator=|", "headers.separator=;", "null.literal=<null>")
          for a in ("--formatter-property", p)],
        check=True).lines
    rows = [line for line in out if line.startswith("CreateTime:")]
    assert len(rows) == len(want), out
    for offset, (row, (key, value, ts, headers)) in enumerate(zip(rows, want, strict=True)):
        # CreateTime:<ts>|Offset:<n>|<headers or NO_HEADERS>|<key>|<value>
        stamp, off, hdrs, k, v = row.split("|")
        assert off == f"Offset:{offset}"
        _check_timestamp(int(stamp.removeprefix("CreateTime:")), ts, before)
        assert (k, v) == ((key or b"<null>").decode(), value.decode())
        assert hdrs == (";".join(f"{hk}:{hv}" for hk, hv in headers.items()) if headers else "NO_HEADERS")


def test_pulsar_batches_read_by_spark(target, pulsar_broker):
    from pyspark.sql import functions as F

    from tests.support.spark import spark_session

    before = int(time.time() * 1000) - 1000
    topic, want = _mixed_topic(target, pulsar_broker, "psp", non_partitioned=True)  # issue #22: Pulsar's kind
    spark = spark_session("kop-test-pulsar-interop")
    try:
        df = (spark.read.format("kafka").option("kafka.bootstrap.servers", pulsar_broker.handle.bootstrap)
              .option("subscribe", topic).option("includeHeaders", "true").load()
              .select("partition", "offset", "key", "value", F.unix_millis("timestamp").alias("ts"), "headers"))
        rows = sorted(df.collect(), key=lambda r: r["offset"])
    finally:
        spark.stop()
    assert [(r["partition"], r["offset"]) for r in rows] == [(0, o) for o in range(len(want))]
    for r, (key, value, ts, headers) in zip(rows, want, strict=True):
        assert (None if r["key"] is None else bytes(r["key"])) == key
        assert bytes(r["value"]) == value
        _check_timestamp(r["ts"], ts, before)
        assert {h["key"]: bytes(h["value"]).decode() for h in (r["headers"] or [])} == headers


# ---- a durable subscription across kill -9 ------------------------------------------------------------------


def test_a_durable_subscription_survives_kill_9(target):
    """Acknowledged (cumulatively, then individually) before a SIGKILL: after the restart the subscription
    resumes after what was acknowledged and loses nothing unacknowledged. On `kop-bk` the cursor is in ZooKeeper
    and the entries on the bookies; tests/test_pulsar_consume.py covers batches and the embedded storage."""
    endpoint = target.pulsar_broker(dedicated=True)  # its own broker: this test kills it
    broker = endpoint.handle
    topic = target.topic("durable")
    client = pulsar_client(endpoint.service_url)
    producer = client.create_producer(topic, batching_enabled=False)
    for i in range(20):
        producer.send(f"m{i}".encode())
    consumer = client.subscribe(topic, "durable", consumer_type=pulsar.ConsumerType.Shared,
                                initial_position=pulsar.InitialPosition.Earliest)
    got = [consumer.receive(RECEIVE_MS) for _ in range(20)]
    acked = {*range(8), 10, 13, 14}
    for i in sorted(acked):
        consumer.acknowledge(got[i])
    consumer.close()  # returns once the acks are flushed and the cursor is persisted
    client.close()
    broker.kill()
    broker.restart()
    client = pulsar_client(broker.pulsar_service_url)
    consumer = client.subscribe(topic, "durable", consumer_type=pulsar.ConsumerType.Shared)
    unacked = {f"m{i}".encode() for i in range(20) if i not in acked}
    back = [consumer.receive(RECEIVE_MS) for _ in range(len(unacked))]
    assert {m.data() for m in back} == unacked  # nothing acknowledged comes back, nothing unacknowledged lost
    for m in back:
        consumer.acknowledge(m)
    producer = client.create_producer(topic)
    producer.send(b"after")
    assert consumer.receive(RECEIVE_MS).data() == b"after"
    client.close()
