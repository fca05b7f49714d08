"""Issue 17, second defect: every topic config Apache Kafka 4.x accepts is accepted, validated with Kafka's
rules and messages, stored and described (kop/topics/topic_config.py); segment.bytes / segment.ms roll
ledgers; compression.type makes the broker recompress.

Run with KOP_E2E_TARGET=kop,kafka to check the expectations themselves against Apache Kafka 4.x (the names,
the accepted and refused values, the messages, the described sources, the stored codec).
"""

from __future__ import annotations

import time

from tests.support.clients import create_topic

# Every topic config DescribeConfigs lists on Apache Kafka 4.x (a fresh topic, no configs set).
KAFKA_TOPIC_CONFIGS = {
    "cleanup.policy", "compression.gzip.level", "compression.lz4.level", "compression.type", "compression.zstd.level",
    "delete.retention.ms", "file.delete.delay.ms", "flush.messages", "flush.ms", "follower.replication.throttled.replicas",
    "index.interval.bytes", "leader.replication.throttled.replicas", "local.retention.bytes", "local.retention.ms",
    "max.compaction.lag.ms", "max.message.bytes", "message.timestamp.after.max.ms", "message.timestamp.before.max.ms",
    "message.timestamp.type", "min.cleanable.dirty.ratio", "min.compaction.lag.ms", "min.insync.replicas", "preallocate",
    "remote.log.copy.disable", "remote.log.delete.on.disable", "remote.storage.enable", "retention.bytes",
    "retention.ms", "segment.bytes", "segment.index.bytes", "segment.jitter.ms", "segment.ms",
    "unclean.leader.election.enable",
}
# Added by Apache Kafka 4.3 / 4.4 (unknown to a 4.2 broker): described by ours and by the `kafka` target (4.4);
# tests/e2e/test_admin_44.py sets and describes them through kafka-configs.
KAFKA_44_TOPIC_CONFIGS = {
    "errors.deadletterqueue.group.enable", "max.decompressed.message.bytes", "remote.copy.lag.bytes",
    "remote.copy.lag.ms",
}

# A non-default valid value for every config (remote.storage.enable=true needs tiered storage: refused below).
ALL_SET = {
    "cleanup.policy": "compact,delete", "compression.gzip.level": "5", "compression.lz4.level": "3",
    "compression.type": "zstd", "compression.zstd.level": "7", "delete.retention.ms": "1000",
    "file.delete.delay.ms": "10", "flush.messages": "1000", "flush.ms": "1000",
    "follower.replication.throttled.replicas": "0:1", "index.interval.bytes": "1024",
    "leader.replication.throttled.replicas": "*", "local.retention.bytes": "-2", "local.retention.ms": "-2",
    "max.compaction.lag.ms": "600000", "max.message.bytes": "2000000", "message.timestamp.after.max.ms": "60000",
    "message.timestamp.before.max.ms": "86400000", "message.timestamp.type": "LogAppendTime",
    "min.cleanable.dirty.ratio": "0.3", "min.compaction.lag.ms": "100", "min.insync.replicas": "1",
    "preallocate": "true", "remote.log.copy.disable": "false", "remote.log.delete.on.disable": "false",
    "remote.storage.enable": "false", "retention.bytes": "100000000", "retention.ms": "86400000",
    "segment.bytes": "2097152", "segment.index.bytes": "4096", "segment.jitter.ms": "10", "segment.ms": "3600000",
    "unclean.leader.election.enable": "true",
}

# The config sets frameworks create their internal topics with.
FRAMEWORK_SETS = {
    # Kafka Streams: repartition topics, key-value changelogs, windowed changelogs (InternalTopicConfig)
    "streams-repartition": {"cleanup.policy": "delete", "segment.bytes": "52428800", "retention.ms": "-1",
                            "message.timestamp.type": "CreateTime"},
    "streams-changelog": {"cleanup.policy": "compact", "message.timestamp.type": "CreateTime"},
    "streams-windowed-changelog": {"cleanup.policy": "compact,delete", "retention.ms": "86400000",
                                   "message.timestamp.type": "CreateTime"},
    # Kafka Connect: config, offset and status topics (TopicAdmin's compacted builder, min ISR)
    "connect-configs": {"cleanup.policy": "compact", "min.insync.replicas": "1"},
    "connect-offsets": {"cleanup.policy": "compact"},
    # Schema Registry's _schemas-like topic and a typical tuned topic
    "tuned": {"compression.type": "lz4", "segment.ms": "600000", "file.delete.delay.ms": "60000",
              "max.message.bytes": "5242880", "min.compaction.lag.ms": "0", "preallocate": "false"},
}

# (config, value, expected INVALID_CONFIG message or None for accepted) - as Apache Kafka 4.x answers.
CASES = [
    ("segment.bytes", "1048575", "Invalid value 1048575 for configuration segment.bytes: Value must be at least 1048576"),
    ("segment.bytes", "1048576", None),
    ("cleanup.policy", "", None),
    ("cleanup.policy", "compact, delete", None),
    ("cleanup.policy", "compacted", "Invalid value compacted for configuration cleanup.policy: String must be one of: compact, delete"),
    ("compression.zstd.level", "-131073", "Invalid value -131073 for configuration compression.zstd.level: Value must be at least -131072"),
    ("compression.zstd.level", "23", "Invalid value 23 for configuration compression.zstd.level: Value must be no more than 22"),
    ("compression.gzip.level", "0", "Invalid value 0 for configuration compression.gzip.level: Value must be between 1 and 9 or equal to -1"),
    ("compression.gzip.level", "-1", None),
    ("compression.lz4.level", "18", "Invalid value 18 for configuration compression.lz4.level: Value must be no more than 17"),
    ("compression.type", "none", "Invalid value none for configuration compression.type: String must be one of: uncompressed, zstd, lz4, snappy, gzip, producer"),
    ("compression.type", "uncompressed", None),
    ("remote.storage.enable", "true", "Tiered Storage functionality is disabled in the broker. Topic cannot be configured with remote log storage."),
    ("message.timestamp.difference.max.ms", "1000", "Unknown topic config name: message.timestamp.difference.max.ms"),
    ("message.format.version", "3.0", "Unknown topic config name: message.format.version"),
    ("max.message.bytes", "2147483648", "Invalid value 2147483648 for configuration max.message.bytes: Not a number of type INT"),
    ("preallocate", "TRUE", None),
    ("preallocate", "yes", "Invalid value yes for configuration preallocate: Expected value to be either true or false"),
    ("retention.ms", "-2", "Invalid value -2 for configuration retention.ms: Value must be at least -1"),
    ("retention.bytes", "-5", None),
    ("segment.ms", " 5 ", None),
    ("leader.replication.throttled.replicas", "x", "Invalid value [x] for configuration leader.replication.throttled.replicas: leader.replication.throttled.replicas must be the literal '*' or a list of replicas in the following format: [partitionId]:[brokerId],[partitionId]:[brokerId],..."),
    ("min.cleanable.dirty.ratio", "1.5", "Invalid value 1.5 for configuration min.cleanable.dirty.ratio: Value must be no more than 1"),
    ("min.cleanable.dirty.ratio", "abc", "Invalid value abc for configuration min.cleanable.dirty.ratio: Not a number of type DOUBLE"),
    ("message.timestamp.type", "createtime", "Invalid value createtime for configuration message.timestamp.type: String must be one of: CreateTime, LogAppendTime"),
    ("flush.messages", "0", "Invalid value 0 for configuration flush.messages: Value must be at least 1"),
    ("unknown.cfg", "1", "Unknown topic config name: unknown.cfg"),
]

# The 4.3/4.4 configs' (config, value, Kafka 4.4's INVALID_CONFIG message or None for accepted): LogConfig's types
# and ranges, checked against the `kafka` target (4.4) with the others.
CASES_44 = [
    ("max.decompressed.message.bytes", "1", None),
    ("max.decompressed.message.bytes", "2147483639", None),
    ("max.decompressed.message.bytes", "0",
     "Invalid value 0 for configuration max.decompressed.message.bytes: Value must be at least 1"),
    ("max.decompressed.message.bytes", "2147483640",
     "Invalid value 2147483640 for configuration max.decompressed.message.bytes: Value must be no more than "
     "2147483639"),
    ("max.decompressed.message.bytes", "2147483648",
     "Invalid value 2147483648 for configuration max.decompressed.message.bytes: Not a number of type INT"),
    ("remote.copy.lag.ms", "-1", None),
    ("remote.copy.lag.ms", "9223372036854775807", None),
    ("remote.copy.lag.ms", "-2", "Invalid value -2 for configuration remote.copy.lag.ms: Value must be at least -1"),
    ("remote.copy.lag.bytes", "0", None),
    ("remote.copy.lag.bytes", "x",
     "Invalid value x for configuration remote.copy.lag.bytes: Not a number of type LONG"),
    ("errors.deadletterqueue.group.enable", "TRUE", None),
    ("errors.deadletterqueue.group.enable", "1",
     "Invalid value 1 for configuration errors.deadletterqueue.group.enable: Expected value to be either true or "
     "false"),
]


def _admin(bootstrap: str):
    from confluent_kafka.admin import AdminClient

    return AdminClient({"bootstrap.servers": bootstrap})


def _create(admin, topic: str, config: dict[str, str], validate_only: bool = False) -> None:
    from confluent_kafka.admin import NewTopic

    admin.create_topics([NewTopic(topic, 1, 1, config=config)], validate_only=validate_only,
                        operation_timeout=30)[topic].result(60)


def _describe(admin, topic: str) -> dict:
    from confluent_kafka.admin import ConfigResource

    r = ConfigResource("topic", topic)
    return admin.describe_configs([r], request_timeout=30)[r].result(60)


def test_validation_as_kafka(target) -> None:
    from confluent_kafka import KafkaException

    b = target.module_broker()
    admin = _admin(b.bootstrap)
    topic = target.topic("val")
    wrong = []
    for name, value, expected in CASES + CASES_44:
        try:
            _create(admin, topic, {name: value}, validate_only=True)
            got = None
        except KafkaException as e:
            err = e.args[0]
            assert err.name() == "INVALID_CONFIG", (name, value, err)
            got = err.str()
        if got != expected:
            wrong.append(f"{name}={value!r}: got {got!r}, want {expected!r}")
    try:
        _create(admin, topic, {"min.compaction.lag.ms": "100", "max.compaction.lag.ms": "50"}, validate_only=True)
        wrong.append("min.compaction.lag.ms > max.compaction.lag.ms accepted")
    except KafkaException as e:
        assert "min.compaction.lag.ms (100) > max.compaction.lag.ms (50)" in e.args[0].str()
    assert not wrong, "\n".join(wrong)


def test_every_config_accepted_and_described(target) -> None:
    from confluent_kafka.admin import ConfigSource

    b = target.module_broker()
    admin = _admin(b.bootstrap)
    plain = target.topic("plain")
    create_topic(b.bootstrap, plain)
    described = _describe(admin, plain)
    assert set(described) == KAFKA_TOPIC_CONFIGS | KAFKA_44_TOPIC_CONFIGS
    assert set(ALL_SET) == KAFKA_TOPIC_CONFIGS
    for name, e in described.items():
        assert e.source != ConfigSource.DYNAMIC_TOPIC_CONFIG.value, name
    full = target.topic("full")
    create_topic(b.bootstrap, full, config=ALL_SET)
    described = _describe(admin, full)
    for name, value in ALL_SET.items():
        e = described[name]
        assert e.value == value, (name, e.value, value)
        assert e.source == ConfigSource.DYNAMIC_TOPIC_CONFIG.value, (name, e.source)
        assert not e.is_read_only, name
    for label, config in FRAMEWORK_SETS.items():
        t = target.topic(label)
        create_topic(b.bootstrap, t, config=config)
        described = _describe(admin, t)
        for name, value in config.items():
            assert described[name].value == value, (label, name, described[name].value)


def _alter(admin, topic: str, config: dict[str, str]) -> None:
    from confluent_kafka.admin import AlterConfigOpType, ConfigEntry, ConfigResource

    r = ConfigResource("topic", topic, incremental_configs=[
        ConfigEntry(k, v, incremental_operation=AlterConfigOpType.SET) for k, v in config.items()])
    admin.incremental_alter_configs([r])[r].result(60)


def _produce(bootstrap: str, topic: str, values: list[bytes], pause: float = 0, **conf: object) -> None:
    from confluent_kafka import Producer

    errors: list[object] = []
    p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 0, **conf})
    for v in values:
        p.produce(topic, key=v[:8], value=v, partition=0,
                  on_delivery=lambda err, msg: errors.append(err) if err else None)
        p.flush(60)  # one batch per record: each append is its own ledger entry
        time.sleep(pause)  # pacing, not a criterion: appends further apart than segment.ms=1
    assert not errors, errors


def test_segment_configs_roll_ledgers(target) -> None:
    """segment.bytes set at creation, segment.ms altered on a topic whose partition is open: both roll
    (ledgers here, segment files on Apache Kafka)."""
    b = target.module_broker()

    def ledger_counts(b, topic: str, partitions: int) -> dict[int, int]:
        if target.is_kop:
            from tests.support.inspect import ledger_counts as counts

            return counts(b, topic, partitions)
        return {p: len(list((b.log_dir / f"{topic}-{p}").glob("*.log"))) for p in range(partitions)}

    by_size = target.topic("segbytes")
    create_topic(b.bootstrap, by_size, config={"segment.bytes": str(1 << 20)})
    # 9 batches of 300 KiB: the 9th is durable in a third ledger when the produce returns (a roll after the
    # 8th alone may still be under way)
    _produce(b.bootstrap, by_size, [bytes([i]) * (300 << 10) for i in range(9)])
    assert ledger_counts(b, by_size, 1)[0] >= 3

    by_age = target.topic("segms")
    create_topic(b.bootstrap, by_age)
    _produce(b.bootstrap, by_age, [b"first"])
    assert ledger_counts(b, by_age, 1)[0] == 1
    _alter(_admin(b.bootstrap), by_age, {"segment.ms": "1"})
    _produce(b.bootstrap, by_age, [b"a", b"b", b"c"], pause=0.01)
    assert ledger_counts(b, by_age, 1)[0] >= 3


def _fetch_all(bootstrap: str, topic: str, n: int) -> tuple[list[dict], list[tuple[bytes, bytes]]]:
    """Raw Fetch: the stored batch headers, and the records through kop.protocol's decoder."""
    from kop.protocol.records import decode_records, iter_batches
    from tests.support.wire import Negotiated, batch_headers

    headers: list[dict] = []
    records: list[tuple[bytes, bytes]] = []
    offset = 0
    with Negotiated(bootstrap) as wire:
        while len(records) < n:
            part = wire.fetch(topic, 0, offset)
            assert part.error_code == 0, part.error_code
            assert part.records, f"no records at {offset}"
            complete = batch_headers(part.records)  # Kafka may end an answer with a partial batch
            headers += complete
            whole = bytes(part.records)[:sum(12 + h["length"] for h in complete)]
            for hdr, batch in iter_batches(whole):
                for r in decode_records(batch):
                    records.append((r.key, r.value))
                offset = hdr.base_offset + hdr.last_offset_delta + 1
    return headers, records


def test_compression_type_recompresses(target) -> None:
    """compression.type=lz4 turns an uncompressed producer's batches into lz4 ones with identical records;
    compression.type=uncompressed turns gzip batches into uncompressed ones."""
    b = target.module_broker()
    values = [b"value-%06d-" % i + b"x" * 200 for i in range(300)]
    for topic_codec, producer_codec, stored in (("lz4", "none", 3), ("uncompressed", "gzip", 0), ("producer", "snappy", 2)):
        topic = target.topic(f"comp-{topic_codec}")
        create_topic(b.bootstrap, topic, config={"compression.type": topic_codec})
        from confluent_kafka import Producer

        p = Producer({"bootstrap.servers": b.bootstrap, "linger.ms": 50, "compression.type": producer_codec})
        for v in values:
            p.produce(topic, key=v[:12], value=v, partition=0)
        assert p.flush(60) == 0
        headers, records = _fetch_all(b.bootstrap, topic, len(values))
        assert {h["compression"] for h in headers} == {stored}, (topic_codec, headers[:2])
        assert records == [(v[:12], v) for v in values]


def test_recompression_cost(target, record_property) -> None:
    """Not a criterion (no timed assertion): the time a 20 000-record produce takes into an lz4 topic from an
    uncompressed producer, against a `producer` topic, for the report."""
    from confluent_kafka import Producer

    b = target.module_broker()
    values = [b"value-%08d-" % i + b"y" * 500 for i in range(20000)]
    took = {}
    for codec in ("producer", "lz4"):
        topic = target.topic(f"cost-{codec}")
        create_topic(b.bootstrap, topic, config={"compression.type": codec})
        p = Producer({"bootstrap.servers": b.bootstrap, "linger.ms": 5, "compression.type": "none"})
        t0 = time.perf_counter()
        for v in values:
            while True:
                try:
                    p.produce(topic, value=v, partition=0)
                    break
                except BufferError:
                    p.poll(0.05)
        assert p.flush(120) == 0
        took[codec] = time.perf_counter() - t0
        _, records = _fetch_all(b.bootstrap, topic, 10)
        assert records[0][1] == values[0]
    record_property("produce_seconds", took)
    print(f"recompression cost on {target.kind}: {took}")
