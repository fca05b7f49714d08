"""Acceptance (d): the Apache Kafka 4.x command-line tools (run from the Maven jars) against the broker, and
idempotent-producer deduplication at the wire level.

* kafka-console-producer then kafka-console-consumer (assign mode: --partition 0 --offset earliest; group
  mode: --from-beginning) give back exactly the lines;
* kafka-topics --create / --list / --describe / --alter --partitions / --delete with the expected outputs;
* kafka-configs --describe / --alter --add-config retention.ms / --delete-config on a topic;
* kafka-producer-perf-test completes N records with no errors and the log holds N records;
* an idempotent Produce request sent twice is stored once: the second answer has no error and the same base
  offset; the next sequence continues right after; a sequence gap is refused (OUT_OF_ORDER_SEQUENCE_NUMBER).
"""

from __future__ import annotations

import re
import time

from tests.support.clients import STALL_TIMEOUT, consume_kafka_python, create_topic, end_offsets
from tests.support.wire import Negotiated

LINES = [f"line {i:04d} \t with spaces, unicode ✓ ünï and = : separators" for i in range(300)] + [
    "{\"json\": [1, 2, 3]}",
    "last line",
]


def test_console_producer_then_console_consumer(target, java_tools) -> None:
    broker = target.module_broker()
    b = broker.bootstrap
    topic = target.topic("console")
    create_topic(b, topic, 1)

    java_tools.run("kafka-console-producer", "--bootstrap-server", b, "--topic", topic, input="\n".join(LINES) + "\n", check=True)
    assert end_offsets(b, topic, 1) == {0: len(LINES)}

    assigned = java_tools.run(
        "kafka-console-consumer", "--bootstrap-server", b, "--topic", topic, "--partition", "0", "--offset", "earliest",
        "--max-messages", len(LINES), "--timeout-ms", int(STALL_TIMEOUT * 1000), check=True,
    )
    assert assigned.lines == LINES, assigned.stderr[-3000:]
    assert f"Processed a total of {len(LINES)} messages" in assigned.stderr

    grouped = java_tools.run(
        "kafka-console-consumer", "--bootstrap-server", b, "--topic", topic, "--from-beginning",
        "--max-messages", len(LINES), "--timeout-ms", int(STALL_TIMEOUT * 1000), check=True,
    )
    assert grouped.lines == LINES, grouped.stderr[-3000:]
    assert f"Processed a total of {len(LINES)} messages" in grouped.stderr


def _describe(java_tools, b: str, topic: str) -> tuple[dict[str, str], list[dict[str, str]]]:
    """Parse kafka-topics --describe: the topic line and one dict per partition line."""
    r = java_tools.run("kafka-topics", "--bootstrap-server", b, "--describe", "--topic", topic, check=True)
    rows = [dict(re.findall(r"(\w+): ?([^\t]*)", line)) for line in r.lines if line.strip()]
    head = [row for row in rows if "PartitionCount" in row]
    parts = [row for row in rows if "Partition" in row and "PartitionCount" not in row]
    assert len(head) == 1, r.stdout
    return head[0], parts


def _topics(java_tools, b: str) -> set[str]:
    return set(java_tools.run("kafka-topics", "--bootstrap-server", b, "--list", check=True).lines)


def test_kafka_topics_lifecycle(target, java_tools) -> None:
    broker = target.module_broker()
    b = broker.bootstrap
    topic = target.topic("topics")

    r = java_tools.run("kafka-topics", "--bootstrap-server", b, "--create", "--topic", topic, "--partitions", 2,
                       "--replication-factor", 1, "--config", "retention.ms=86400000", check=True)
    assert r.stdout.strip() == f"Created topic {topic}."
    assert topic in _topics(java_tools, b)

    again = java_tools.run("kafka-topics", "--bootstrap-server", b, "--create", "--topic", topic, "--partitions", 2)
    assert again.rc != 0 and "already exists" in (again.stdout + again.stderr)

    head, parts = _describe(java_tools, b, topic)
    assert head["Topic"] == topic
    assert head["PartitionCount"] == "2"
    assert head["ReplicationFactor"] == "1"
    assert "retention.ms=86400000" in head["Configs"]
    assert [p["Partition"] for p in parts] == ["0", "1"]
    for p in parts:
        assert p["Topic"] == topic
        assert p["Leader"].isdigit() and p["Replicas"] == p["Leader"] and p["Isr"] == p["Leader"], p

    java_tools.run("kafka-topics", "--bootstrap-server", b, "--alter", "--topic", topic, "--partitions", 4, check=True)
    head, parts = _describe(java_tools, b, topic)
    assert head["PartitionCount"] == "4"
    assert [p["Partition"] for p in parts] == ["0", "1", "2", "3"]
    assert all(p["Leader"].isdigit() for p in parts)

    shrink = java_tools.run("kafka-topics", "--bootstrap-server", b, "--alter", "--topic", topic, "--partitions", 3)
    assert shrink.rc != 0, "decreasing the partition count must fail"

    java_tools.run("kafka-topics", "--bootstrap-server", b, "--delete", "--topic", topic, check=True)
    deadline = time.monotonic() + STALL_TIMEOUT
    while topic in _topics(java_tools, b):
        assert time.monotonic() < deadline, f"{topic} still listed after --delete"
        time.sleep(0.5)
    gone = java_tools.run("kafka-topics", "--bootstrap-server", b, "--describe", "--topic", topic)
    assert gone.rc != 0 and "does not exist" in (gone.stdout + gone.stderr)


def _topic_configs(java_tools, b: str, topic: str) -> tuple[str, dict[str, str]]:
    r = java_tools.run("kafka-configs", "--bootstrap-server", b, "--describe", "--entity-type", "topics", "--entity-name", topic, check=True)
    return r.stdout, dict(re.findall(r"^\s+([\w.]+)=(\S*) sensitive=", r.stdout, re.M))


def test_kafka_configs_topic_retention(target, java_tools) -> None:
    broker = target.module_broker()
    b = broker.bootstrap
    topic = target.topic("configs")
    create_topic(b, topic, 1)

    out, dynamic = _topic_configs(java_tools, b, topic)
    assert f"Dynamic configs for topic {topic} are:" in out
    assert "retention.ms" not in dynamic

    r = java_tools.run("kafka-configs", "--bootstrap-server", b, "--alter", "--entity-type", "topics", "--entity-name", topic,
                       "--add-config", "retention.ms=123456789,retention.bytes=987654321", check=True)
    assert f"Completed updating config for topic {topic}." in r.stdout
    out, dynamic = _topic_configs(java_tools, b, topic)
    assert dynamic.get("retention.ms") == "123456789", out
    assert dynamic.get("retention.bytes") == "987654321", out

    r = java_tools.run("kafka-configs", "--bootstrap-server", b, "--describe", "--all", "--entity-type", "topics", "--entity-name", topic, check=True)
    assert re.search(r"^\s+retention\.ms=123456789 sensitive=false", r.stdout, re.M), r.stdout
    assert re.search(r"^\s+cleanup\.policy=delete sensitive=false", r.stdout, re.M), r.stdout

    java_tools.run("kafka-configs", "--bootstrap-server", b, "--alter", "--entity-type", "topics", "--entity-name", topic,
                   "--delete-config", "retention.ms", check=True)
    out, dynamic = _topic_configs(java_tools, b, topic)
    assert "retention.ms" not in dynamic and dynamic.get("retention.bytes") == "987654321", out

    bad = java_tools.run("kafka-configs", "--bootstrap-server", b, "--alter", "--entity-type", "topics", "--entity-name", topic,
                         "--add-config", "retention.ms=not-a-number")
    assert bad.rc != 0


def test_producer_perf_test(target, java_tools) -> None:
    broker = target.module_broker()
    b = broker.bootstrap
    topic = target.topic("perf")
    create_topic(b, topic, 3)
    n = 100_000
    r = java_tools.run(
        "kafka-producer-perf-test", "--bootstrap-server", b, "--topic", topic, "--num-records", n, "--record-size", 100,
        "--throughput", -1, "--command-property", "acks=all", "linger.ms=5", "batch.size=65536",
        jvm_opts=["-Xmx512m"], timeout=600, check=True,
    )
    summary = r.lines[-1]
    m = re.match(r"(\d+) records sent, [\d.]+ records/sec \([\d.]+ MB/sec\), [\d.]+ ms avg latency", summary)
    assert m and int(m.group(1)) == n, r.stdout[-2000:]
    assert "ERROR" not in r.stderr and "Exception" not in r.stderr, r.stderr[-2000:]
    assert sum(end_offsets(b, topic, 3).values()) == n


def _batch(pid: int, epoch: int, seq: int, n: int, tag: bytes) -> bytes:
    from kafka.record.default_records import DefaultRecordBatchBuilder

    builder = DefaultRecordBatchBuilder(
        magic=2, compression_type=0, is_transactional=False, producer_id=pid, producer_epoch=epoch,
        base_sequence=seq, batch_size=1 << 20,
    )
    now = int(time.time() * 1000)
    for i in range(n):
        builder.append(i, timestamp=now, key=b"k%d" % i, value=tag + b"-%d" % i, headers=[])
    return bytes(builder.build())


def test_idempotent_retry_is_not_duplicated(target) -> None:
    broker = target.module_broker()
    b = broker.bootstrap
    topic = target.topic("idem")
    create_topic(b, topic, 1)

    with Negotiated(b) as wire:
        pid, epoch = wire.init_producer_id()
        assert pid >= 0 and epoch >= 0
        first = _batch(pid, epoch, 0, 5, b"first")

        r1 = wire.produce(topic, 0, first)
        assert r1.error_code == 0 and r1.base_offset == 0, r1
        r2 = wire.produce(topic, 0, first)  # the "retry": byte-identical request
        assert r2.error_code == 0, f"duplicate batch: error {r2.error_code}, want 0 (NONE)"
        assert r2.base_offset == r1.base_offset, f"duplicate batch answered base offset {r2.base_offset}, want {r1.base_offset}"

        r3 = wire.produce(topic, 0, _batch(pid, epoch, 5, 3, b"second"))
        assert r3.error_code == 0 and r3.base_offset == 5, r3

        gap = wire.produce(topic, 0, _batch(pid, epoch, 100, 1, b"gap"))
        assert gap.error_code == 45, f"sequence gap: error {gap.error_code}, want 45 OUT_OF_ORDER_SEQUENCE_NUMBER"

    assert end_offsets(b, topic, 1) == {0: 8}
    got = consume_kafka_python(b, topic, {0: 8})
    assert [g.value for g in got] == [b"first-%d" % i for i in range(5)] + [b"second-%d" % i for i in range(3)]
    assert [g.offset for g in got] == list(range(8))
