"""Spark Structured Streaming (kop.pipeline.stream) against our broker (issue 4).

* Exactly once across a restart: a query with failOnDataLoss=true and maxOffsetsPerTrigger=300 runs at
  least 10 micro-batches while a producer keeps writing (the producer tops the backlog up whenever it drops
  below two batches, so the two interleave however fast the machine is); it is stopped (possibly in the
  middle of a batch), more records arrive, it restarts from its checkpoint, runs more batches under the
  producer and catches up. Then the Parquet sink and the kafka sink (deduplicated by (batch_id, key), replays
  being identical) both hold every input record's contribution exactly once: per key, the record count,
  the amount and the XOR of the records' xxhash64(topic, partition, offset) equal what was produced - a
  record counted twice or not at all changes the XOR.
* Retention while stopped: two queries (failOnDataLoss false / true) consume a topic and stop; more records
  arrive in new ledgers and retention (retention.ms=1) deletes the early ledgers, past both queries'
  positions. Restarted, the false one continues from the log start offset (its sinks gain exactly the
  records from the log start on); the true one fails with Spark's data-loss error rather than hanging, and
  its sinks gain nothing.
* The audit job reports no gaps and no duplicates on these topics (and, from offset 0, exactly the offsets
  below the log start as missing after retention).
* Avro values (issue 25): records written by confluent-kafka's AvroSerializer in two schema versions,
  registered with its SchemaRegistryClient at the broker's own registry (its admin URL), plus values that
  cannot be decoded, summed by `kop pipeline stream --value-format avro`: exact per-key sums, the old
  version resolved to the latest, the undecodable values counted as invalid, and a clean audit.

One broker serves the module, and the Spark modules' one SparkSession (tests/e2e/conftest.py) its queries; they use
`availableNow` where a test needs a query to end by itself, and liveness deadlines (never durations) everywhere
else.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from kop.pipeline.kafka_meta import snapshot_topic
from kop.pipeline.stream import BatchWriter, StreamConfig, dedupe_sink_rows, start_stream, totals_by_key
from tests.support.broker import KopBroker
from tests.support.clients import STALL_TIMEOUT, create_topic
from tests.support.inspect import ledger_counts
from tests.support.spark import Event, EventProducer, expected_totals

MAX_OFFSETS = 300  # per micro-batch, over 3 partitions
CHUNK = 150  # records per producer flush (50 per partition)
KEYS = 13
QUERY_DEADLINE = 5 * STALL_TIMEOUT  # liveness only: a healthy run is far quicker


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory):
    b = KopBroker(tmp_path_factory.mktemp("kop-spark-streaming"), {
        "managedLedgerMaxEntriesPerLedger": 5,
        "managedLedgerMinLedgerRolloverTimeMinutes": 0,
        "retentionCheckIntervalMs": 200,
    })
    b.start()
    yield b
    b.stop()


class Feeder:
    """Produces CHUNK events at a time, round-robin over the partitions, amounts and keys from a counter."""

    def __init__(self, producer: EventProducer, topic: str, partitions: int) -> None:
        self.producer, self.topic, self.partitions, self.n = producer, topic, partitions, 0

    def chunk(self, size: int = CHUNK) -> None:
        rows = [(i % self.partitions, f"user-{i % KEYS}", (i * 7919) % 1000 + 1, int(time.time() * 1000))
                for i in range(self.n, self.n + size)]
        self.producer.produce(self.topic, rows)
        self.n += size


def end_offsets_of(progress, topic: str) -> dict[int, int]:
    """The end offsets of a progress report's Kafka source, {partition: offset}."""
    if progress is None or not progress.sources:
        return {}
    end = progress.sources[0].endOffset
    data = json.loads(end) if isinstance(end, str) else end
    return {int(p): int(o) for p, o in (data or {}).get(topic, {}).items()}


def batches_with_input(query) -> set[int]:
    return {p.batchId for p in query.recentProgress if p.numInputRows > 0}


def check_alive(query) -> None:
    exc = query.exception()
    assert exc is None, f"query {query.name} failed: {exc}"
    assert query.isActive, f"query {query.name} stopped by itself"


def run_while_producing(query, feeder: Feeder, min_batches: int) -> set[int]:
    """Keep the producer writing (backlog topped up below two micro-batches) until `query` has completed
    `min_batches` micro-batches with input. Returns their batch ids."""
    deadline = time.monotonic() + QUERY_DEADLINE
    while True:
        check_alive(query)
        done = batches_with_input(query)
        if len(done) >= min_batches:
            return done
        consumed = sum(end_offsets_of(query.lastProgress, feeder.topic).values())
        if feeder.n - consumed < 2 * MAX_OFFSETS:
            feeder.chunk()
        else:
            time.sleep(0.1)
        assert time.monotonic() < deadline, f"only {len(done)} micro-batches with input in {QUERY_DEADLINE}s"


def wait_caught_up(query, topic: str, ends: dict[int, int]) -> None:
    deadline = time.monotonic() + QUERY_DEADLINE
    while end_offsets_of(query.lastProgress, topic) != ends:
        check_alive(query)
        assert time.monotonic() < deadline, f"query at {end_offsets_of(query.lastProgress, topic)}, want {ends}"
        time.sleep(0.2)


def parquet_rows(spark, path: str) -> list[dict]:
    rows = [r.asDict() for r in spark.read.parquet(path).collect()] if Path(path).exists() else []
    idents = [(r["batch_id"], r["key"]) for r in rows]
    assert len(idents) == len(set(idents)), "two Parquet rows for one (batch_id, key)"
    return rows


def sink_rows(spark, bootstrap: str, topic: str) -> tuple[int, dict[tuple[int, str | None], dict]]:
    """(raw row count, rows deduplicated by (batch_id, key)) of the kafka sink's topic."""
    df = (spark.read.format("kafka").option("kafka.bootstrap.servers", bootstrap).option("subscribe", topic)
          .option("startingOffsets", "earliest").option("endingOffsets", "latest").load())
    raw = [json.loads(bytes(r["value"])) for r in df.select("value").collect()]
    return len(raw), dedupe_sink_rows(raw)


SUMMED = ("records", "amount", "invalid", "checksum")


def assert_sinks_hold_exactly(spark, bootstrap: str, cfg: StreamConfig, events: list[Event]) -> list[dict]:
    """Both sinks agree row for row, and their per-key totals equal those of `events`."""
    want = expected_totals(spark, events)
    pq = parquet_rows(spark, cfg.parquet_path)
    raw_count, sink = sink_rows(spark, bootstrap, cfg.output_topic)
    assert raw_count >= len(sink)
    pq_by_id = {(r["batch_id"], r["key"]): {k: r[k] for k in SUMMED} for r in pq}
    sink_by_id = {ident: {k: r[k] for k in SUMMED} for ident, r in sink.items()}
    assert pq_by_id == sink_by_id, "the Parquet sink and the kafka sink differ"
    assert totals_by_key(pq) == want, "Parquet totals differ from the produced records"
    assert totals_by_key(sink.values()) == want, "kafka sink totals differ from the produced records"
    return pq


def test_streaming_exactly_once_across_stop_and_restart(broker: KopBroker, spark, tmp_path: Path) -> None:
    topic, out = "spark-events", "spark-aggregates"
    create_topic(broker.bootstrap, topic, 3)
    create_topic(broker.bootstrap, out, 1)
    cfg = StreamConfig(
        bootstrap=broker.bootstrap, topics=[topic], output_topic=out, parquet_path=str(tmp_path / "parquet"),
        checkpoint=str(tmp_path / "checkpoint"), starting_offsets="earliest", max_offsets_per_trigger=MAX_OFFSETS,
        fail_on_data_loss=True, query_name="exactly_once",
    )
    producer = EventProducer(broker.bootstrap)
    feeder = Feeder(producer, topic, 3)

    writer = BatchWriter(cfg)  # stopped as `kop pipeline stream` stops on SIGTERM (writer.stopping first)
    first = start_stream(spark, cfg, writer)
    try:
        done_first = run_while_producing(first, feeder, min_batches=10)
    finally:
        writer.stopping = True
        first.stop()
    assert first.exception() is None
    feeder.chunk()
    feeder.chunk()  # arrives while the query is stopped

    second = start_stream(spark, cfg)
    try:
        done_second = run_while_producing(second, feeder, min_batches=3)
        wait_caught_up(second, topic, producer.end_offsets(topic))
    finally:
        second.stop()
    assert second.exception() is None
    assert min(done_second) >= max(done_first), "the restarted query did not continue the batch ids"

    ledgers = ledger_counts(broker, topic, 3)
    assert all(n >= 2 for n in ledgers.values()), f"the input never rolled a ledger: {ledgers}"
    pq = assert_sinks_hold_exactly(spark, broker.bootstrap, cfg, producer.delivered)
    assert len({r["batch_id"] for r in pq}) >= 13

    from kop.pipeline.audit import audit_topic

    for t, n in ((topic, feeder.n), (out, None)):
        report = audit_topic(spark, broker.bootstrap, t)
        assert report.ok and report.gaps_total == 0, report.format_table()
        if n is not None:
            assert report.totals()["records"] == n


def test_retention_while_stopped(broker: KopBroker, spark, tmp_path: Path) -> None:
    from kafka.admin import ConfigResource, ConfigResourceType, KafkaAdminClient
    from pyspark.errors import StreamingQueryException

    from kop.pipeline.audit import GAP_BELOW_LOG_START, audit_topic

    topic = "spark-retention"
    create_topic(broker.bootstrap, topic, 1)
    producer = EventProducer(broker.bootstrap)
    feeder = Feeder(producer, topic, 1)

    def config(name: str, fail_on_data_loss: bool) -> StreamConfig:
        create_topic(broker.bootstrap, f"{topic}-{name}-out", 1)
        return StreamConfig(
            bootstrap=broker.bootstrap, topics=[topic], output_topic=f"{topic}-{name}-out",
            parquet_path=str(tmp_path / name / "parquet"), checkpoint=str(tmp_path / name / "checkpoint"),
            starting_offsets="earliest", max_offsets_per_trigger=500, fail_on_data_loss=fail_on_data_loss,
            available_now=True, query_name=f"retention_{name}",
        )

    lenient, strict = config("lenient", False), config("strict", True)
    for _ in range(8):
        feeder.chunk(125)  # 1 000 records, 8 ledger entries
    part1 = list(producer.delivered)
    for cfg in (lenient, strict):
        q = start_stream(spark, cfg)
        assert q.awaitTermination(QUERY_DEADLINE), f"{cfg.query_name} did not finish"
        assert q.exception() is None
        assert_sinks_hold_exactly(spark, broker.bootstrap, cfg, part1)
    stopped_at = len(part1)

    # While both queries are stopped: more records in new ledgers, then retention deletes the early ones.
    for _ in range(8):
        feeder.chunk(125)
    admin = KafkaAdminClient(bootstrap_servers=broker.bootstrap)

    def set_retention(ms: str) -> None:
        admin.alter_configs([ConfigResource(ConfigResourceType.TOPIC, topic, {"retention.ms": ms})])

    try:
        set_retention("1")
        deadline = time.monotonic() + STALL_TIMEOUT
        while snapshot_topic(broker.bootstrap, topic).log_start[0] <= stopped_at:
            assert time.monotonic() < deadline, "retention did not move the log start past the queries"
            time.sleep(0.2)
        set_retention("-1")
        # A retention pass already under way may still delete: wait for five equal readings 0.5 s apart.
        last, same = None, 0
        while same < 5:
            log_start = snapshot_topic(broker.bootstrap, topic).log_start[0]
            same, last = (same + 1 if log_start == last else 1), log_start
            assert time.monotonic() < deadline, "the log start offset kept moving after retention was switched off"
            time.sleep(0.5)
    finally:
        admin.close()
    log_start = last
    feeder.chunk(200)  # and some records after retention
    end = producer.end_offsets(topic)[0]
    assert stopped_at < log_start <= end - 200

    # failOnDataLoss=false: continues from the log start offset.
    q = start_stream(spark, lenient)
    assert q.awaitTermination(QUERY_DEADLINE), "the failOnDataLoss=false query did not finish"
    assert q.exception() is None
    kept = part1 + [e for e in producer.delivered if e.offset >= log_start]
    assert_sinks_hold_exactly(spark, broker.bootstrap, lenient, kept)

    # failOnDataLoss=true: Spark's data-loss error, not a hang (a hang ends in Spark's poll timeout instead).
    q = start_stream(spark, strict)
    with pytest.raises(StreamingQueryException) as failure:
        assert not q.awaitTermination(QUERY_DEADLINE), "the failOnDataLoss=true query finished without an error"
        raise AssertionError(f"the failOnDataLoss=true query still runs after {QUERY_DEADLINE}s: it hangs")
    message = str(failure.value)
    assert "Some data may have been lost because they are not available in Kafka any more" in message, message[:3000]
    # Spark 4.0 says it on the driver, naming the range it could not read: KAFKA_DATA_LOSS.COULD_NOT_READ_OFFSET_RANGE
    assert f"Could not read records in offset [{stopped_at}, " in message, message[:3000]
    assert_sinks_hold_exactly(spark, broker.bootstrap, strict, part1)  # nothing written by the failed run

    # The audit: nothing missing from the log start on; from offset 0, exactly the offsets below it.
    report = audit_topic(spark, broker.bootstrap, topic)
    assert report.ok and report.gaps_total == 0 and report.totals()["records"] == end - log_start
    report = audit_topic(spark, broker.bootstrap, topic, from_offsets={0: 0})
    (p,) = report.partitions
    assert (p.missing, p.missing_below_log_start, p.records) == (log_start, log_start, end - log_start)
    assert [(g.first, g.last, g.kind) for g in report.gaps] == [(0, log_start - 1, GAP_BELOW_LOG_START)]


def test_stream_command_from_json_offsets_and_a_query_from_a_timestamp(broker: KopBroker, spark, tmp_path: Path) -> None:
    """`kop pipeline stream` (the command, in its own process) started at JSON offsets inside ledgers and
    batches, and the job started at a timestamp: each aggregates exactly the records from there on."""
    import subprocess
    import sys

    topic = "spark-starts"
    create_topic(broker.bootstrap, topic, 2)
    base = int(time.time() * 1000) - 600_000
    producer = EventProducer(broker.bootstrap)
    for start in range(0, 600, 50):  # 50 per partition per flush: 12 entries, 3 ledgers per partition
        producer.produce(topic, [(p, f"user-{o % KEYS}", o + 1, base + 10 * o + p)
                                 for o in range(start, start + 50) for p in (0, 1)])

    starts = {0: 123, 1: 401}
    out = f"{topic}-cli-out"
    create_topic(broker.bootstrap, out, 1)
    cfg = StreamConfig(bootstrap=broker.bootstrap, topics=[topic], output_topic=out,
                       parquet_path=str(tmp_path / "cli" / "parquet"), checkpoint=str(tmp_path / "cli" / "checkpoint"))
    proc = subprocess.run(
        [sys.executable, "-m", "kop.cli", "pipeline", "stream", "--bootstrap-server", broker.bootstrap,
         "--topic", topic, "--output-topic", out, "--parquet", cfg.parquet_path, "--checkpoint", cfg.checkpoint,
         "--starting-offsets", json.dumps({topic: {str(p): o for p, o in starts.items()}}),
         "--max-offsets-per-trigger", "200", "--available-now"],
        capture_output=True, text=True, timeout=QUERY_DEADLINE,
    )
    assert proc.returncode == 0, f"kop pipeline stream exited {proc.returncode}\n{proc.stderr[-4000:]}"
    assert "batch 0: " in proc.stderr and "batch 2: " in proc.stderr, proc.stderr[-4000:]  # 677 records / 200
    assert_sinks_hold_exactly(spark, broker.bootstrap, cfg,
                              [e for e in producer.delivered if e.offset >= starts[e.partition]])

    at = base + 10 * 333 + 1  # after partition 0's offset 333 (ts ...+3330), at partition 1's offset 333
    cfg = StreamConfig(bootstrap=broker.bootstrap, topics=[topic], output_topic=f"{topic}-ts-out",
                       parquet_path=str(tmp_path / "ts" / "parquet"), checkpoint=str(tmp_path / "ts" / "checkpoint"),
                       starting_timestamp=at, max_offsets_per_trigger=300, available_now=True, query_name="from_ts")
    create_topic(broker.bootstrap, cfg.output_topic, 1)
    q = start_stream(spark, cfg)
    assert q.awaitTermination(QUERY_DEADLINE), "the query from a timestamp did not finish"
    assert q.exception() is None
    kept = [e for e in producer.delivered if e.timestamp >= at]
    assert {(e.partition, min(k.offset for k in kept if k.partition == e.partition)) for e in kept} == {(0, 334), (1, 333)}
    assert_sinks_hold_exactly(spark, broker.bootstrap, cfg, kept)


ORDER_V1 = {"type": "record", "name": "Order", "namespace": "kop.test",
            "fields": [{"name": "key", "type": "string"}, {"name": "amount", "type": "long"}]}
# v2 adds a field with a default (BACKWARD compatible): v1 records are resolved to it by the job.
ORDER_V2 = {**ORDER_V1, "fields": [*ORDER_V1["fields"], {"name": "note", "type": "string", "default": ""}]}


def test_stream_command_avro_values_with_the_brokers_registry(broker: KopBroker, spark, tmp_path: Path) -> None:
    """`kop pipeline stream --value-format avro --schema-registry <admin URL>`: v1 and v2 records from
    confluent-kafka's AvroSerializer (the job starts with v2 as the latest and fetches v1 by id when a batch
    meets it), and three values it cannot decode (no prefix, an id the registry lacks, a truncated body)."""
    import subprocess
    import sys

    from confluent_kafka import Producer
    from confluent_kafka.schema_registry import SchemaRegistryClient
    from confluent_kafka.schema_registry.avro import AvroSerializer
    from confluent_kafka.serialization import MessageField, SerializationContext

    from kop.pipeline.audit import audit_topic

    topic, out = "spark-avro", "spark-avro-out"
    create_topic(broker.bootstrap, topic, 2)
    create_topic(broker.bootstrap, out, 1)
    registry_url = broker.admin_url
    registry = SchemaRegistryClient({"url": registry_url})
    producer = Producer({"bootstrap.servers": broker.bootstrap, "acks": "all", "linger.ms": 50})
    delivered: list[Event] = []
    errors: list[str] = []

    def produce(partition: int, key: str, amount: int, value: bytes) -> None:
        ts = int(time.time() * 1000)

        def on_delivery(err, msg) -> None:
            if err is not None:
                errors.append(str(err))
            else:
                delivered.append(Event(msg.topic(), msg.partition(), msg.offset(), key, amount, ts, value))

        producer.produce(topic, value=value, key=key.encode(), partition=partition, timestamp=ts, on_delivery=on_delivery)
        producer.poll(0)

    ctx = SerializationContext(topic, MessageField.VALUE)
    n = 0
    for schema, extra in ((ORDER_V1, {}), (ORDER_V2, {"note": "v2"})):
        serialize = AvroSerializer(registry, json.dumps(schema))
        for _ in range(120):
            key, amount = f"user-{n % KEYS}", (n * 7919) % 1000 + 1
            produce(n % 2, key, amount, serialize({"key": key, "amount": amount, **extra}, ctx))
            n += 1
        assert producer.flush(STALL_TIMEOUT) == 0
    v1_id = registry.get_version(f"{topic}-value", 1).schema_id
    latest = registry.get_latest_version(f"{topic}-value")
    assert latest.version == 2 and latest.schema_id != v1_id
    good = list(delivered)
    assert {e.value[1:5] for e in good} == {v1_id.to_bytes(4, "big"), latest.schema_id.to_bytes(4, "big")}
    # Undecodable: counted as records of their Kafka key with invalid = 1.
    for value in (b"not avro at all", b"\x00" + (2**31 - 7).to_bytes(4, "big") + good[0].value[5:], good[-1].value[:7]):
        produce(0, "bad", 0, value)
    assert producer.flush(STALL_TIMEOUT) == 0 and not errors, errors

    cfg = StreamConfig(bootstrap=broker.bootstrap, topics=[topic], output_topic=out,
                       parquet_path=str(tmp_path / "parquet"), checkpoint=str(tmp_path / "checkpoint"))
    base = [sys.executable, "-m", "kop.cli", "pipeline", "stream", "--bootstrap-server", broker.bootstrap,
            "--output-topic", out, "--parquet", cfg.parquet_path, "--checkpoint", cfg.checkpoint,
            "--value-format", "avro", "--schema-registry", registry_url]
    # A topic without a registered value schema: a usage error before Spark starts.
    create_topic(broker.bootstrap, "spark-avro-unregistered", 1)
    proc = subprocess.run([*base, "--topic", "spark-avro-unregistered"], capture_output=True, text=True,
                          timeout=QUERY_DEADLINE)
    assert proc.returncode == 2 and "has no subject 'spark-avro-unregistered-value'" in proc.stderr, proc.stderr[-3000:]

    proc = subprocess.run([*base, "--topic", topic, "--starting-offsets", "earliest", "--max-offsets-per-trigger",
                           "100", "--available-now"], capture_output=True, text=True, timeout=QUERY_DEADLINE)
    assert proc.returncode == 0, f"kop pipeline stream exited {proc.returncode}\n{proc.stderr[-4000:]}"
    assert f"schema id {v1_id}: fetched from the registry" in proc.stderr, proc.stderr[-4000:]
    assert "batch 2: " in proc.stderr, proc.stderr[-4000:]  # 243 records / 100 per trigger
    bad = [e for e in delivered if e.key == "bad"]
    want = expected_totals(spark, delivered)
    want["bad"]["invalid"] = len(bad)
    assert totals_by_key(parquet_rows(spark, cfg.parquet_path)) == want
    _, sink = sink_rows(spark, broker.bootstrap, out)
    assert totals_by_key(sink.values()) == want
    assert sum(e.amount for e in good) == sum(t["amount"] for t in want.values())

    report = audit_topic(spark, broker.bootstrap, topic)
    assert report.ok and report.gaps_total == 0 and report.totals()["records"] == len(delivered), report.format_table()
