"""`kop pipeline tables` (issue 26): a topic as an Iceberg table, exactly once, read back by Spark, PyIceberg, DuckDB.

One broker for the module, and the Spark modules' one SparkSession (tests/e2e/conftest.py). The topic (2
partitions) gets Avro records from confluent-kafka's AvroSerializer registered at the broker's own registry, with
keys and headers, and a transaction aborted in the middle; then a second, compatible schema version (one more field) and more records, and a third. The job runs
four times with --available-now and small micro-batches (maxOffsetsPerTrigger):

1. over the v1 records; then the checkpoint's last commit-log entry is removed: the state a job killed after its
   Iceberg commit and before Spark's own commit leaves behind;
2. restarted with the same writer object (in-memory state): the batch Spark runs again must not be written
   again, and the v2 records' new schema id makes the table gain the new column mid-run;
3. `kop pipeline tables` as a command (a new process), over records of a third version that drops `note` (the
   column stays, null for them) and adds `channel`, and records of a pulsar-client producer with Pulsar's Avro
   schema (the same definition: the topic's Pulsar schema is the registry's subject), in steps of 10, killed with SIGKILL as soon as it logs its
   first written batch - before Spark's commit of that batch, as the log of the next run shows ("already in");
4. a fresh writer (state read back from the table's snapshot summary) finishes.

Then the table's rows equal the committed records, each once (partition, offset, key, headers, decoded value,
timestamp), through Spark SQL, PyIceberg and DuckDB (iceberg_scan; the extension loaded offline from the
duckdb-extension-* packages, kop.pipeline.duckdb_read); the snapshot summary's offsets cover every
partition's records; `audit --table` finds no gap, and after rows are deleted from the table it shows exactly
them as missing.

test_compacted_topic_as_upsert_table: a compacted topic's table is an upsert table (one row per key, tombstones
delete), equal to the topic folded by key (Spark SQL and DuckDB) after the command is killed with SIGKILL three
times mid-run and the broker restarted once; `audit --table` finds it right, then finds three planted wrong rows.
test_spark_reads_a_non_partitioned_pulsar_topic (issue 22): Spark's kafka source on a topic a Pulsar producer
auto-created non-partitioned: one partition, continuous offsets.
"""

from __future__ import annotations

import json
import os
import queue
import signal
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from kop.pipeline import iceberg_schema as schema
from kop.pipeline.table_audit import audit_table
from kop.pipeline.tables import TablesConfig, TableWriter, kop_summary, load_table, start_tables
from tests.support.broker import KopBroker
from tests.support.clients import STALL_TIMEOUT, create_topic

TOPIC = "spark-tables"
TABLE = "kop.kafka.spark_tables"
V1 = {"type": "record", "name": "Order", "fields": [
    {"name": "customer", "type": "string"}, {"name": "cents", "type": "long"}]}
V2 = {"type": "record", "name": "Order", "fields": [
    {"name": "customer", "type": "string"}, {"name": "cents", "type": "long"},
    {"name": "note", "type": ["null", "string"], "default": None}]}
V3 = {"type": "record", "name": "Order", "fields": [  # drops note (it has a default: its column stays, null), adds channel
    {"name": "customer", "type": "string"}, {"name": "cents", "type": "long"},
    {"name": "channel", "type": ["null", "string"], "default": None}]}
QUERY_DEADLINE = 5 * STALL_TIMEOUT  # liveness only


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory):
    # Pulsar's default kind of auto-created topic, named here, not taken from the test broker's default
    b = KopBroker(tmp_path_factory.mktemp("kop-spark-tables"), {"allowAutoTopicCreationType": "non-partitioned"})
    b.start()
    yield b
    b.stop()


class AvroOrders:
    """Produces Avro orders with keys and headers and records what the broker committed, per (partition, offset)."""

    def __init__(self, broker: KopBroker) -> None:
        from confluent_kafka import Producer
        from confluent_kafka.schema_registry import SchemaRegistryClient

        self.registry = SchemaRegistryClient({"url": broker.admin_url})
        self.bootstrap = broker.bootstrap
        self.producer = Producer({"bootstrap.servers": broker.bootstrap, "acks": "all", "linger.ms": 20})
        self.committed: dict[tuple[int, int], dict] = {}
        self.sent: dict[str, dict] = {}  # the Pulsar producer's, by key
        self.n = 0

    def serializer(self, version: dict):
        from confluent_kafka.schema_registry.avro import AvroSerializer

        return AvroSerializer(self.registry, json.dumps(version))

    def produce(self, version: dict, count: int, extra: dict | None = None) -> None:
        from confluent_kafka.serialization import MessageField, SerializationContext

        serialize, ctx, errors = self.serializer(version), SerializationContext(TOPIC, MessageField.VALUE), []
        for _ in range(count):
            i, self.n = self.n, self.n + 1
            value = {"customer": f"c-{i % 7}", "cents": i * 31 + 1, **(extra or {})}
            value = {f["name"]: value.get(f["name"]) for f in version["fields"]}
            ts, key, headers = 1_700_000_000_000 + i * 3_600_000, f"k-{i}", [("seq", str(i).encode())]

            def on_delivery(err, msg, value=value, ts=ts, key=key, headers=headers) -> None:
                if err is not None:
                    errors.append(str(err))
                else:
                    self.committed[(msg.partition(), msg.offset())] = {
                        "key": key, "ts": ts, "headers": headers, "note": None, "channel": None, **value}

            self.producer.produce(TOPIC, value=serialize(value, ctx), key=key.encode(), partition=i % 2,
                                  timestamp=ts, headers=headers, on_delivery=on_delivery)
            self.producer.poll(0)
        assert self.producer.flush(STALL_TIMEOUT) == 0 and not errors, errors

    def pulsar(self, broker: KopBroker, version: dict, count: int, extra: dict) -> None:
        """`count` orders from a pulsar-client producer with Pulsar's Avro schema `version` (the topic's Pulsar
        schema is the registry's `<topic>-value`: Kafka consumers get Confluent's prefix), the key as the partition
        key, a property; every other one without an event time, so that Kafka's view has the publish time. Where
        they landed (partition, offset) and what a Kafka consumer sees of them is read back from the topic."""
        import time

        import pulsar
        from pulsar.schema import AvroSchema

        ends = self._ends()
        before = int(time.time() * 1000)
        client = pulsar.Client(broker.pulsar_url)
        try:
            producer = client.create_producer(TOPIC, schema=AvroSchema(None, schema_definition=version),
                                              producer_name="pulsar-orders")
            for j in range(count):
                i, self.n = self.n, self.n + 1
                value = {"customer": f"c-{i % 7}", "cents": i * 31 + 1, **extra}
                event = {"event_timestamp": 1_700_000_000_000 + i * 3_600_000} if j % 2 == 0 else {}
                producer.send({f["name"]: value.get(f["name"]) for f in version["fields"]}, partition_key=f"k-{i}",
                              properties={"seq": str(i)}, **event)
                self.sent[f"k-{i}"] = {"key": f"k-{i}", "note": None, "channel": None, **value, **event}
        finally:
            client.close()
        after = int(time.time() * 1000)
        for (p, o), rec in self._read_from(ends, count).items():
            sent = self.sent[rec["key"]]
            assert rec["headers"] == [("seq", rec["key"].removeprefix("k-").encode())]  # the property
            if "event_timestamp" in sent:
                assert rec["ts"] == sent["event_timestamp"]
            else:  # no event time: Kafka's view of a Pulsar message has its publish time, set by the broker
                assert before <= rec["ts"] <= after
            self.committed[(p, o)] = {**{k: v for k, v in sent.items() if k != "event_timestamp"}, **rec}

    def _ends(self) -> dict[int, int]:
        from confluent_kafka import Consumer, TopicPartition

        c = Consumer({"bootstrap.servers": self.bootstrap, "group.id": "ends"})
        try:
            return {p: c.get_watermark_offsets(TopicPartition(TOPIC, p), timeout=STALL_TIMEOUT)[1] for p in (0, 1)}
        finally:
            c.close()

    def _read_from(self, ends: dict[int, int], count: int) -> dict[tuple[int, int], dict]:
        """The next `count` records after `ends`, as a Kafka consumer sees them: key, timestamp, headers."""
        from confluent_kafka import Consumer, TopicPartition

        c = Consumer({"bootstrap.servers": self.bootstrap, "group.id": "pulsar-view", "enable.auto.commit": False})
        out: dict[tuple[int, int], dict] = {}
        try:
            c.assign([TopicPartition(TOPIC, p, o) for p, o in ends.items()])
            while len(out) < count:
                msg = c.poll(STALL_TIMEOUT)
                assert msg is not None and msg.error() is None, msg and msg.error()
                assert msg.value()[:1] == b"\x00"  # Confluent's prefix: the Pulsar schema version's registry id
                out[(msg.partition(), msg.offset())] = {"key": msg.key().decode(), "ts": msg.timestamp()[1],
                                                        "headers": [(k, bytes(v)) for k, v in msg.headers() or []]}
        finally:
            c.close()
        return out

    def aborted(self, count: int) -> None:
        """A transaction of `count` v1 records, aborted: read_committed never returns them."""
        from confluent_kafka import Producer
        from confluent_kafka.serialization import MessageField, SerializationContext

        p = Producer({"bootstrap.servers": self.bootstrap, "transactional.id": f"tx-{TOPIC}"})
        p.init_transactions(STALL_TIMEOUT)
        p.begin_transaction()
        serialize, ctx = self.serializer(V1), SerializationContext(TOPIC, MessageField.VALUE)
        for i in range(count):
            p.produce(TOPIC, value=serialize({"customer": "aborted", "cents": -1}, ctx), key=b"aborted",
                      partition=i % 2)
        p.flush(STALL_TIMEOUT)
        p.abort_transaction(STALL_TIMEOUT)


def run_available_now(spark, cfg: TablesConfig, writer: TableWriter) -> None:
    query = start_tables(spark, cfg, writer)
    assert query.awaitTermination(QUERY_DEADLINE), "the available-now query did not finish"
    assert query.exception() is None, query.exception()


def forget_last_commit(checkpoint: Path) -> int:
    """Remove the newest entry of Spark's commit log: Spark then runs that batch again at the next start."""
    last = max(int(p.name) for p in (checkpoint / "commits").iterdir() if p.name.isdigit())
    (checkpoint / "commits" / str(last)).unlink()
    (checkpoint / "commits" / f".{last}.crc").unlink(missing_ok=True)
    return last


def kill_mid_run(cfg: TablesConfig, until: str | None = None, per_trigger: int = 10) -> str:
    """`kop pipeline tables` as a command, killed (SIGKILL) as soon as it logs a line containing `until` (default:
    its first written batch of the topic); returns what it logged. The command runs in a process group of its own
    and the whole group is killed: the job is the Python driver and Spark's JVM, its child, which would otherwise
    run on (until it notices its parent is gone) next to the job started after it."""
    topic = cfg.topics[0]
    until = until or f" records of {topic} -> "
    cmd = [sys.executable, "-m", "kop.cli", "pipeline", "tables", "--bootstrap-server", cfg.bootstrap, "--topic", topic,
           "--warehouse", cfg.warehouse, "--checkpoint", cfg.checkpoint, "--catalog", cfg.catalog,
           "--max-offsets-per-trigger", str(per_trigger), "--available-now"]
    cmd += ["--schema-registry", cfg.schema_registry] if cfg.schema_registry else []
    proc = subprocess.Popen(cmd, stderr=subprocess.PIPE, stdout=subprocess.DEVNULL, text=True, start_new_session=True)
    lines: queue.Queue[str | None] = queue.Queue()

    def pump() -> None:
        for line in proc.stderr or []:
            lines.put(line)
        lines.put(None)  # the command ended

    threading.Thread(target=pump, daemon=True).start()
    seen: list[str] = []
    try:
        while not any(until in line for line in seen):
            line = lines.get(timeout=QUERY_DEADLINE)
            assert line is not None, f"the command ended ({proc.wait()}) before {until!r}:\n{''.join(seen[-40:])}"
            seen.append(line)
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(STALL_TIMEOUT)
    return "".join(seen)


def table_rows(spark) -> dict[tuple[int, int], dict]:
    rows = spark.sql(f"SELECT kafka_partition p, kafka_offset o, CAST(kafka_key AS STRING) key, "
                     f"unix_millis(kafka_timestamp) ts, kafka_headers h, customer, cents, note, channel, "
                     f"kafka_raw_value "
                     f"FROM {TABLE}").collect()
    out: dict[tuple[int, int], dict] = {}
    for r in rows:
        assert (r["p"], r["o"]) not in out, f"offset {r['o']} of partition {r['p']} is in the table twice"
        assert r["kafka_raw_value"] is None, "a record did not decode"
        out[(r["p"], r["o"])] = {"key": r["key"], "ts": r["ts"], "headers": [(h["key"], bytes(h["value"]))
                                 for h in r["h"]], "note": r["note"], "channel": r["channel"], "customer": r["customer"],
                                 "cents": r["cents"]}
    return out


def test_topic_to_table_exactly_once_across_restarts(broker: KopBroker, spark, tmp_path: Path) -> None:
    create_topic(broker.bootstrap, TOPIC, 2)
    orders = AvroOrders(broker)
    orders.produce(V1, 30)
    orders.aborted(6)
    orders.produce(V1, 30)
    ckpt = tmp_path / "checkpoint"
    cfg = TablesConfig(bootstrap=broker.bootstrap, topics=[TOPIC], warehouse=str(tmp_path / "warehouse"),
                       checkpoint=str(ckpt), max_offsets_per_trigger=40, compact_every=2, available_now=True,
                       schema_registry=broker.admin_url)
    writer = TableWriter(cfg)
    run_available_now(spark, cfg, writer)  # 1
    redo = forget_last_commit(ckpt)
    orders.produce(V2, 30, {"note": "v2"})
    run_available_now(spark, cfg, writer)  # 2: batch `redo` again (skipped), then the v2 records
    assert writer.tables[TOPIC].last_batch is not None and writer.tables[TOPIC].last_batch > redo
    assert "note" in spark.table(TABLE).columns
    redo = writer.tables[TOPIC].last_batch
    orders.produce(V3, 40, {"channel": "web"})
    orders.pulsar(broker, V3, 10, {"channel": "pulsar"})
    kill_mid_run(cfg)  # 3: the command (a new process, V3 lacks note), killed with SIGKILL after its first batch
    run_available_now(spark, cfg, TableWriter(cfg))  # 4: a fresh writer reads the summary back and finishes

    got = table_rows(spark)
    assert got == orders.committed  # every committed record once, no aborted one, values decoded
    summary = kop_summary(load_table(spark, TABLE))
    ends = {p: max(o for q, o in orders.committed if q == p) + 1 for p in (0, 1)}
    assert schema.decode_offsets(summary[schema.SUMMARY_OFFSETS]) == ends
    assert summary[schema.SUMMARY_TOPIC] == TOPIC and int(summary[schema.SUMMARY_BATCH_ID]) > redo
    history = spark.sql(f"SELECT operation FROM {TABLE}.snapshots").collect()
    assert "replace" in {r["operation"] for r in history}  # --compact-every 2 compacted the small files

    check_pyiceberg(tmp_path / "warehouse", orders.committed)
    check_duckdb(tmp_path / "warehouse", orders.committed)
    check_audit(broker, spark, orders.committed)


def check_pyiceberg(warehouse: Path, committed: dict[tuple[int, int], dict]) -> None:
    """PyIceberg reads the Hadoop catalog's table straight from its newest metadata file."""
    from pyiceberg.table import StaticTable

    metadata = warehouse / "kafka" / "spark_tables" / "metadata"
    version = (metadata / "version-hint.text").read_text().strip()
    table = StaticTable.from_metadata(str(metadata / f"v{version}.metadata.json"))
    rows = table.scan(selected_fields=("kafka_partition", "kafka_offset", "customer", "cents", "note")).to_arrow()
    got = {(r["kafka_partition"], r["kafka_offset"]): (r["customer"], r["cents"], r["note"]) for r in rows.to_pylist()}
    assert len(got) == rows.num_rows
    assert got == {k: (v["customer"], v["cents"], v["note"]) for k, v in committed.items()}
    assert str(table.spec().fields[0].transform) == "day"


def duckdb_scan(table_dir: Path, columns: str) -> list[dict]:
    """`SELECT columns FROM iceberg_scan(table_dir)` in DuckDB, its iceberg extension loaded offline
    (kop.pipeline.duckdb_read)."""
    from kop.pipeline.duckdb_read import connect

    con = connect()
    try:
        rel = con.sql(f"SELECT {columns} FROM iceberg_scan('{table_dir}')")
        return [dict(zip(rel.columns, row, strict=True)) for row in rel.fetchall()]
    finally:
        con.close()


def check_duckdb(warehouse: Path, committed: dict[tuple[int, int], dict]) -> None:
    """DuckDB's iceberg_scan reads the same rows: offsets, keys, timestamps, headers and decoded values."""
    rows = duckdb_scan(warehouse / "kafka" / "spark_tables",
                       "kafka_partition p, kafka_offset o, kafka_key::VARCHAR \"key\", epoch_ms(kafka_timestamp) ts, "
                       "kafka_headers h, customer, cents, note, channel")
    got = {(r["p"], r["o"]): {"key": r["key"], "ts": r["ts"], "headers": [(h["key"], h["value"]) for h in r["h"]],
                              **{c: r[c] for c in ("customer", "cents", "note", "channel")}} for r in rows}
    assert len(got) == len(rows)
    assert got == committed


def check_audit(broker: KopBroker, spark, committed: dict[tuple[int, int], dict]) -> None:
    report = audit_table(spark, broker.bootstrap, TOPIC, TABLE)
    assert report.ok, report.format_table()
    assert sum(p.table_rows for p in report.partitions) == len(committed)
    assert all(p.missing == 0 and p.pending == 0 for p in report.partitions), report.format_table()
    gone = sorted(o for p, o in committed if p == 0)[5:8]
    spark.sql(f"DELETE FROM {TABLE} WHERE kafka_partition = 0 AND kafka_offset IN ({', '.join(map(str, gone))})")
    report = audit_table(spark, broker.bootstrap, TOPIC, TABLE)
    assert not report.ok
    p0 = report.partitions[0]
    assert p0.missing == 3 and report.partitions[1].missing == 0, report.format_table()
    assert gone == [5, 6, 7] and p0.missing_ranges == [(5, 7)]  # the first 30 records: 15 per partition
    assert "partition 0: offsets 5..7 (3) are in the topic, not in the table" in report.format_table()



UPSERT_TOPIC = "spark-upsert"
# a catalog of its own: a session's catalog keeps the warehouse it was first used with (the other test's)
UPSERT_CATALOG = "kopupsert"
UPSERT_TABLE = f"{UPSERT_CATALOG}.kafka.spark_upsert"


def produce_keyed(bootstrap: str, rows: list[tuple[str, str | None]]) -> None:
    """(key, value or None for a tombstone) to the upsert topic; key k-N always to partition N % 2."""
    from confluent_kafka import Producer

    producer, errors = Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 5}), []
    for key, value in rows:
        producer.produce(UPSERT_TOPIC, key=key.encode(), value=None if value is None else value.encode(),
                         partition=int(key.split("-")[1]) % 2,
                         on_delivery=lambda err, _msg: errors.append(str(err)) if err is not None else None)
    assert producer.flush(STALL_TIMEOUT) == 0 and not errors, errors


def fold_topic(bootstrap: str, topic: str, partitions: int) -> tuple[dict[tuple[int, str], tuple[int, str]],
                                                                       dict[int, int]]:
    """The topic read from the start with a Kafka consumer and folded: (partition, key) -> (offset, value) of the
    key's last record, a tombstone removing the key; and the end offset of each partition."""
    from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition

    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"fold-{topic}", "enable.auto.commit": False})
    try:
        ends = {p: consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=STALL_TIMEOUT)[1]
                for p in range(partitions)}
        consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in range(partitions)])
        folded: dict[tuple[int, str], tuple[int, str]] = {}
        at = dict.fromkeys(ends, -1)
        while any(at[p] + 1 < ends[p] for p in ends):
            msg = consumer.poll(STALL_TIMEOUT)
            assert msg is not None, f"no record within {STALL_TIMEOUT} s; read up to {at}, ends {ends}"
            assert msg.error() is None, msg.error()
            p, key = msg.partition(), msg.key().decode()
            at[p] = msg.offset()
            if msg.value() is None:
                folded.pop((p, key), None)
            else:
                folded[(p, key)] = (msg.offset(), msg.value().decode())
        return folded, ends
    finally:
        consumer.close()


def test_compacted_topic_as_upsert_table(broker: KopBroker, spark, tmp_path: Path) -> None:
    """A compacted topic's table (mode chosen from its cleanup.policy) equals the topic folded by key, after
    updates and tombstones in batches of several records per key, the job killed with SIGKILL three times (after
    a MERGE and before Spark's commit; at the start of a batch; after a MERGE again) and the broker restarted once.
    Spark SQL and DuckDB read it back; `audit --table` says it is right, then finds three planted wrong rows."""
    create_topic(broker.bootstrap, UPSERT_TOPIC, 2, {"cleanup.policy": "compact"})
    # 8 keys, 3 versions each; k-1 deleted; k-2 deleted then set again; k-3 set, deleted, set, deleted
    first = [(f"k-{k}", f"v{v}-{k}") for v in range(3) for k in range(8)]
    first += [("k-1", None), ("k-2", None), ("k-2", "again-2"), ("k-3", None), ("k-3", "x-3"), ("k-3", None)]
    produce_keyed(broker.bootstrap, first)
    cfg = TablesConfig(bootstrap=broker.bootstrap, topics=[UPSERT_TOPIC], warehouse=str(tmp_path / "warehouse"),
                       checkpoint=str(tmp_path / "checkpoint"), max_offsets_per_trigger=25, available_now=True,
                       catalog=UPSERT_CATALOG)
    kill_mid_run(cfg, per_trigger=25)  # 1: after its first MERGE, before Spark's commit of that batch
    # k-1 comes back, k-4 and k-2 go, k-5 changes twice, a new key k-9
    produce_keyed(broker.bootstrap, [("k-1", "back-1"), ("k-4", None), ("k-5", "w1-5"), ("k-2", None),
                                     ("k-5", "w2-5"), ("k-9", "new-9")])
    kill_mid_run(cfg, f"{UPSERT_TOPIC} -> {schema.UPSERT} table", 25)  # 2: as its first batch starts
    broker.stop()
    broker.start()
    produce_keyed(broker.bootstrap, [("k-6", "z-6"), ("k-10", "new-10"), ("k-7", None), ("k-7", "z-7")])
    kill_mid_run(cfg, per_trigger=5)  # 3: after a MERGE again, now on the restarted broker
    writer = TableWriter(cfg)  # a fresh writer: its state comes from the table's snapshot summary
    run_available_now(spark, cfg, writer)
    assert writer.tables[UPSERT_TOPIC].upsert

    rows = spark.sql(f"SELECT kafka_partition p, CAST(kafka_key AS STRING) k, kafka_offset o, "
                     f"CAST(kafka_value AS STRING) v FROM {UPSERT_TABLE}").collect()
    got = {(r["p"], r["k"]): (r["o"], r["v"]) for r in rows}
    assert len(got) == len(rows), "a key has two rows"
    folded, ends = fold_topic(broker.bootstrap, UPSERT_TOPIC, 2)
    assert got == folded
    assert {k for _, k in got} == {"k-0", "k-1", "k-5", "k-6", "k-7", "k-9", "k-10"}
    assert got[(1, "k-5")][1] == "w2-5" and got[(1, "k-1")][1] == "back-1" and got[(1, "k-7")][1] == "z-7"
    ducked = duckdb_scan(tmp_path / "warehouse" / "kafka" / "spark_upsert",
                         "kafka_partition p, kafka_key::VARCHAR k, kafka_offset o, kafka_value::VARCHAR v")
    assert {(r["p"], r["k"]): (r["o"], r["v"]) for r in ducked} == folded and len(ducked) == len(folded)
    jtable = load_table(spark, UPSERT_TABLE)
    assert jtable.properties().get(schema.TABLE_MODE_PROPERTY) == schema.UPSERT
    assert schema.decode_offsets(kop_summary(jtable)[schema.SUMMARY_OFFSETS]) == ends
    check_upsert_audit(broker, spark, folded)


def check_upsert_audit(broker: KopBroker, spark, folded: dict[tuple[int, str], tuple[int, str]]) -> None:
    """The audit of the upsert table: clean; then, with a changed value (k-5), a row for a tombstoned key (k-4,
    a copy of k-0's) and a deleted row (k-7), exactly those three problems."""
    from pyspark.sql import functions as F

    from kop.pipeline.table_audit import UpsertAuditReport

    report = audit_table(spark, broker.bootstrap, UPSERT_TOPIC, UPSERT_TABLE)
    assert isinstance(report, UpsertAuditReport) and report.ok, report.format_table()
    assert sum(p.keys for p in report.partitions) == sum(p.table_rows for p in report.partitions) == len(folded)
    assert all(p.problems == p.pending == p.archived == 0 for p in report.partitions), report.format_table()
    spark.sql(f"UPDATE {UPSERT_TABLE} SET kafka_value = CAST('planted' AS BINARY) "
              f"WHERE kafka_key = CAST('k-5' AS BINARY)")
    spark.sql(f"DELETE FROM {UPSERT_TABLE} WHERE kafka_key = CAST('k-7' AS BINARY)")
    (spark.table(UPSERT_TABLE).where(F.col("kafka_key") == F.lit(b"k-0"))
     .withColumn("kafka_key", F.lit(b"k-4")).writeTo(UPSERT_TABLE).append())
    report = audit_table(spark, broker.bootstrap, UPSERT_TOPIC, UPSERT_TABLE)
    assert isinstance(report, UpsertAuditReport) and not report.ok
    print(report.format_table())  # docs/spark.md shows it
    p0, p1 = report.partitions
    assert (p0.undeleted, p0.missing, p0.wrong, p0.extra, p0.duplicates) == (1, 0, 0, 0, 0), report.format_table()
    assert (p1.undeleted, p1.missing, p1.wrong, p1.extra, p1.duplicates) == (0, 1, 1, 0, 0), report.format_table()
    text = report.format_table()
    k5 = folded[(1, "k-5")][0]
    assert f"partition 1 key 'k-5': wrong: the row (offset {k5}) does not hold its latest record (offset {k5})" in text
    assert "partition 1 key 'k-7': missing" in text and "partition 0 key 'k-4': undeleted" in text


def test_spark_reads_a_non_partitioned_pulsar_topic(broker: KopBroker, spark) -> None:
    """A topic a pulsar-client producer auto-created non-partitioned (the module's broker names that kind) is, to
    Spark's kafka source, a topic of one partition, 0, whose offsets run 0..n-1 over batched and single messages."""
    import pulsar

    topic = "spark-non-partitioned"
    client = pulsar.Client(broker.pulsar_url)
    try:
        producer = client.create_producer(f"persistent://public/default/{topic}", batching_enabled=True,
                                          batching_max_messages=4, batching_max_publish_delay_ms=60_000)
        assert client.get_topic_partitions(f"persistent://public/default/{topic}") == [
            f"persistent://public/default/{topic}"]  # no -partition-N: a non-partitioned topic
        for i in range(10):  # batches of 4, 4 and 2 messages
            producer.send_async(f"m-{i}".encode(), None)
        producer.flush()
        single = client.create_producer(f"persistent://public/default/{topic}", batching_enabled=False)
        for i in range(10, 13):  # not batched: one message an entry
            single.send(f"m-{i}".encode())
    finally:
        client.close()
    rows = (spark.read.format("kafka").option("kafka.bootstrap.servers", broker.bootstrap)
            .option("subscribe", topic).option("startingOffsets", "earliest").option("endingOffsets", "latest")
            .load().select("partition", "offset", "value").orderBy("offset").collect())
    assert [(r["partition"], r["offset"], bytes(r["value"])) for r in rows] == [
        (0, i, f"m-{i}".encode()) for i in range(13)]
