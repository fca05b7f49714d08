"""`kop pipeline audit --table`: which offsets of a topic are in its Iceberg table, which are missing, per partition.

The table's newest kop snapshot summary (kop.kafka.offsets, kop.pipeline.iceberg_schema) says up to which offset
the job has read each partition: its "covered" end. The audit then reads the topic with Spark's batch Kafka
source over [log start, covered end) - read_committed by default, as the job reads - and compares offsets:

* missing: a record the topic has inside the covered range and the table does not (data loss, a problem);
* duplicate: an offset the table holds more than once (a problem);
* archived: table rows below the topic's log start, i.e. records retention or DeleteRecords removed from the
  topic since; the table is the archive, so they are expected, not a problem;
* pending: offsets past the covered end, which the job has not read yet (not a problem).

Offsets the reader never returns - transaction markers, records of aborted transactions, holes left by compaction
- are not records of the topic, so they are never "missing". Exit status 0 when nothing is missing or duplicated.

An upsert table (a compacted topic's, kop.pipeline.tables) keeps one row per (partition, key), so it is audited
by key, not by offset (audit_upsert): the topic's records over [log start, covered end) are folded by key - the
key's last record by offset, a tombstone (null value) meaning "no row" - and each key's row must be that record:

* missing: a key whose latest record is a value, and the table has no row for it (a problem);
* wrong: a row whose offset is not its key's latest, or whose value, timestamp or headers differ from that
  record's (the value: kafka_value's bytes; in a typed table, the Confluent schema id - the decoded fields are
  not compared with the record, which would need the registry's schemas) (a problem);
* undeleted: a row of a key whose latest record is a tombstone (a problem);
* extra: a row at or past the log start whose key has no record in the covered range (a problem: the topic
  does not have that key there; e.g. compaction removed a tombstone the job never read);
* duplicate: rows beyond the first of a (partition, key) (a problem);
* archived: a row below the log start whose key has no record in the range: retention or DeleteRecords removed
  it from the topic, the table keeps it until a tombstone (not a problem);
* pending, as above.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING

from kop.pipeline import iceberg_schema as schema
from kop.pipeline.kafka_meta import READ_COMMITTED, PipelineError, snapshot_topic

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession


@dataclass
class TablePartition:
    partition: int
    log_start: int
    log_end: int  # what the reader reads up to: the last stable offset under read_committed
    covered: int  # the table's covered end (kop.kafka.offsets), 0 when the job never read the partition
    table_rows: int = 0
    topic_records: int = 0  # the topic's records in [log start, covered)
    missing: int = 0
    duplicates: int = 0  # rows beyond the first of an offset
    archived: int = 0
    missing_ranges: list[tuple[int, int]] = field(default_factory=list)  # inclusive, at most max_gap_ranges

    @property
    def pending(self) -> int:
        return max(0, self.log_end - max(self.covered, self.log_start))


@dataclass
class TableAuditReport:
    topic: str
    table: str
    bootstrap: str
    isolation_level: str
    snapshot_id: int | None
    partitions: list[TablePartition]

    @property
    def ok(self) -> bool:
        return all(p.missing == 0 and p.duplicates == 0 for p in self.partitions)

    def to_json(self) -> str:
        doc = asdict(self)
        doc["ok"] = self.ok
        for p, src in zip(doc["partitions"], self.partitions, strict=True):
            p["pending"] = src.pending
        return json.dumps(doc, indent=2)

    def format_table(self) -> str:
        head = ("partition", "log start", "log end", "covered", "table rows", "topic records", "missing",
                "dup rows", "archived", "pending")
        rows = [(p.partition, p.log_start, p.log_end, p.covered, p.table_rows, p.topic_records, p.missing,
                 p.duplicates, p.archived, p.pending) for p in self.partitions]
        widths = [max(len(h), *(len(str(r[i])) for r in rows)) if rows else len(h) for i, h in enumerate(head)]
        lines = [f"audit of table {self.table} against topic {self.topic!r} at {self.bootstrap} "
                 f"({self.isolation_level}, snapshot {self.snapshot_id})", "",
                 "  ".join(h.rjust(w) for h, w in zip(head, widths, strict=True))]
        lines += ["  ".join(str(v).rjust(w) for v, w in zip(r, widths, strict=True)) for r in rows]
        gaps = [f"  partition {p.partition}: offsets {a}..{b} ({b - a + 1}) are in the topic, not in the table"
                for p in self.partitions for a, b in p.missing_ranges]
        if gaps:
            lines += ["", "missing:", *gaps]
        missing = sum(p.missing for p in self.partitions)
        dups = sum(p.duplicates for p in self.partitions)
        verdict = "OK" if self.ok else "PROBLEMS FOUND"
        lines += ["", f"{verdict}: {sum(p.table_rows for p in self.partitions)} table rows; missing {missing}, "
                      f"duplicate rows {dups}, archived {sum(p.archived for p in self.partitions)}, "
                      f"pending {sum(p.pending for p in self.partitions)}"]
        return "\n".join(lines)


def audit_table(spark: SparkSession, bootstrap: str, topic: str, table: str,
                isolation_level: str = READ_COMMITTED, max_gap_ranges: int = 1000,
                ) -> TableAuditReport | UpsertAuditReport:
    """Compare the table's (kafka_partition, kafka_offset) with the topic's records over the covered range; an
    upsert table's rows with the topic folded by key over that range (audit_upsert)."""
    from pyspark import StorageLevel
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    from kop.pipeline.audit import read_range
    from kop.pipeline.tables import kop_summary, load_table

    snap = snapshot_topic(bootstrap, topic)
    jtable = load_table(spark, table)
    summary = kop_summary(jtable)
    if summary.get(schema.SUMMARY_TOPIC, topic) != topic:
        raise PipelineError(f"table {table} holds topic {summary[schema.SUMMARY_TOPIC]!r}, not {topic!r}")
    covered = schema.decode_offsets(summary.get(schema.SUMMARY_OFFSETS))
    committed = isolation_level == READ_COMMITTED
    parts = {p: TablePartition(p, snap.log_start[p], snap.end(p, committed), covered.get(p, 0))
             for p in snap.partitions}
    ranges = {p: (t.log_start, max(t.log_start, min(t.covered, t.log_end))) for p, t in parts.items()}
    if jtable.properties().get(schema.TABLE_MODE_PROPERTY) == schema.UPSERT:
        current = jtable.currentSnapshot()
        return audit_upsert(spark, UpsertAuditReport(
            topic, table, bootstrap, isolation_level, int(current.snapshotId()) if current is not None else None,
            [UpsertPartition(t.partition, t.log_start, t.log_end, t.covered) for t in parts.values()]),
            ranges, max_gap_ranges)

    rows = spark.table(table).select(F.col("kafka_partition").alias("partition"),
                                     F.col("kafka_offset").alias("offset")).persist(StorageLevel.MEMORY_AND_DISK)
    topic_rows = read_range(spark, bootstrap, topic, ranges, {"kafka.isolation.level": isolation_level}) \
        .select("partition", "offset").persist(StorageLevel.MEMORY_AND_DISK)
    try:
        starts = F.create_map(*[x for p, t in parts.items() for x in (F.lit(p), F.lit(t.log_start))])
        for r in rows.groupBy("partition").agg(
                F.count(F.lit(1)).alias("n"), F.countDistinct("offset").alias("distinct"),
                F.sum(F.when(F.col("offset") < starts[F.col("partition")], 1).otherwise(0)).alias("archived"),
        ).collect():
            t = parts.get(int(r["partition"]))
            if t is not None:
                t.table_rows, t.duplicates, t.archived = int(r["n"]), int(r["n"]) - int(r["distinct"]), int(
                    r["archived"] or 0)
        for r in topic_rows.groupBy("partition").count().collect():
            parts[int(r["partition"])].topic_records = int(r["count"])
        missing = topic_rows.join(rows.distinct(), ["partition", "offset"], "left_anti")
        # consecutive missing offsets share offset - row_number: one group per range
        w = Window.partitionBy("partition").orderBy("offset")
        runs = (missing.withColumn("run", F.col("offset") - F.row_number().over(w))
                .groupBy("partition", "run").agg(F.min("offset").alias("a"), F.max("offset").alias("b"),
                                                 F.count(F.lit(1)).alias("n"))
                .orderBy("partition", "a"))
        for r in runs.collect():
            t = parts[int(r["partition"])]
            t.missing += int(r["n"])
            if len(t.missing_ranges) < max_gap_ranges:
                t.missing_ranges.append((int(r["a"]), int(r["b"])))
    finally:
        rows.unpersist()
        topic_rows.unpersist()
    current = jtable.currentSnapshot()
    return TableAuditReport(topic, table, bootstrap, isolation_level,
                            int(current.snapshotId()) if current is not None else None, list(parts.values()))


# what audit_upsert calls each (partition, key) of the fold joined with the table; PROBLEMS fail the audit
OK, MISSING, WRONG, UNDELETED, EXTRA, ARCHIVED, GONE = "ok", "missing", "wrong", "undeleted", "extra", "archived", "gone"
PROBLEMS = (MISSING, WRONG, UNDELETED, EXTRA)
_EXPLAIN = {MISSING: "its latest record (offset {t}) is a value; the table has no row",
            WRONG: "the row (offset {o}) does not hold its latest record (offset {t}): offset, value, timestamp "
                   "or headers differ",
            UNDELETED: "its latest record (offset {t}) is a tombstone; the table has a row (offset {o})",
            EXTRA: "the row (offset {o}) has no record of its key in the topic's covered range"}


@dataclass
class UpsertPartition:
    partition: int
    log_start: int
    log_end: int
    covered: int
    keys: int = 0  # keys whose latest record in [log start, covered) is a value: the rows the table should have
    table_rows: int = 0
    missing: int = 0
    wrong: int = 0
    undeleted: int = 0
    extra: int = 0
    duplicates: int = 0
    archived: int = 0

    @property
    def pending(self) -> int:
        return max(0, self.log_end - max(self.covered, self.log_start))

    @property
    def problems(self) -> int:
        return self.missing + self.wrong + self.undeleted + self.extra + self.duplicates


@dataclass
class UpsertAuditReport:
    """`audit --table` of an upsert table: its rows against the topic folded by key (module docstring)."""

    topic: str
    table: str
    bootstrap: str
    isolation_level: str
    snapshot_id: int | None
    partitions: list[UpsertPartition]
    listed: list[str] = field(default_factory=list)  # the first problem keys, explained

    @property
    def ok(self) -> bool:
        return all(p.problems == 0 for p in self.partitions)

    def to_json(self) -> str:
        doc = asdict(self)
        doc["ok"], doc["mode"] = self.ok, schema.UPSERT
        for p, src in zip(doc["partitions"], self.partitions, strict=True):
            p["pending"] = src.pending
        return json.dumps(doc, indent=2)

    def format_table(self) -> str:
        head = ("partition", "log start", "log end", "covered", "keys", "table rows", "missing", "wrong",
                "undeleted", "extra", "dup rows", "archived", "pending")
        rows = [(p.partition, p.log_start, p.log_end, p.covered, p.keys, p.table_rows, p.missing, p.wrong,
                 p.undeleted, p.extra, p.duplicates, p.archived, p.pending) for p in self.partitions]
        widths = [max(len(h), *(len(str(r[i])) for r in rows)) if rows else len(h) for i, h in enumerate(head)]
        lines = [f"audit of upsert table {self.table} against topic {self.topic!r} folded by key at {self.bootstrap} "
                 f"({self.isolation_level}, snapshot {self.snapshot_id})", "",
                 "  ".join(h.rjust(w) for h, w in zip(head, widths, strict=True))]
        lines += ["  ".join(str(v).rjust(w) for v, w in zip(r, widths, strict=True)) for r in rows]
        if self.listed:
            lines += ["", "problems:", *(f"  {line}" for line in self.listed)]
        verdict = "OK" if self.ok else "PROBLEMS FOUND"
        lines += ["", f"{verdict}: {sum(p.table_rows for p in self.partitions)} table rows for "
                      f"{sum(p.keys for p in self.partitions)} keys; "
                      + ", ".join(f"{k} {sum(getattr(p, k) for p in self.partitions)}"
                                  for k in ("missing", "wrong", "undeleted", "extra", "duplicates", "archived",
                                            "pending"))]
        return "\n".join(lines)


def audit_upsert(spark: SparkSession, report: UpsertAuditReport, ranges: dict[int, tuple[int, int]],
                 max_listed: int) -> UpsertAuditReport:
    """Fill `report`: the topic's records over `ranges` folded by (partition, key), full-outer-joined with the
    table's rows, each pair classified (module docstring), counted per partition; the first problems listed."""
    from pyspark import StorageLevel
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    from kop.pipeline.audit import read_range
    from kop.pipeline.tables import confluent_prefix

    parts = {p.partition: p for p in report.partitions}
    table = spark.table(report.table)
    if "kafka_value" in table.columns:  # raw values: the bytes; typed: the Confluent schema id the row names
        row_value, record_value = F.col("kafka_value"), F.col("value")
    else:
        prefixed, schema_id = confluent_prefix()
        row_value, record_value = F.col("kafka_schema_id"), F.when(prefixed, schema_id.cast("int"))
    last = Window.partitionBy("partition", "key").orderBy(F.col("offset").desc())
    fold = (read_range(spark, report.bootstrap, report.topic, ranges,
                       {"kafka.isolation.level": report.isolation_level, "includeHeaders": "true"})
            .where(F.col("key").isNotNull()).withColumn("_rank", F.row_number().over(last)).where("_rank = 1")
            .select("partition", "key", F.col("offset").alias("t_offset"), F.col("value").isNull().alias("tomb"),
                    record_value.alias("t_value"), F.col("timestamp").alias("t_ts"), F.col("headers").alias("t_h")))
    rows = table.select(F.col("kafka_partition").alias("partition"), F.col("kafka_key").alias("key"),
                        F.col("kafka_offset").alias("offset"), row_value.alias("value"),
                        F.col("kafka_timestamp").alias("ts"), F.col("kafka_headers").alias("h")
                        ).persist(StorageLevel.MEMORY_AND_DISK)
    try:
        starts = F.create_map(*[x for p, t in parts.items() for x in (F.lit(p), F.lit(t.log_start))])
        same = (F.col("offset") == F.col("t_offset")) & F.col("value").eqNullSafe(F.col("t_value")) \
            & F.col("ts").eqNullSafe(F.col("t_ts")) & F.col("h").eqNullSafe(F.col("t_h"))
        status = (F.when(F.col("t_offset").isNull() & (F.col("offset") < starts[F.col("partition")]), ARCHIVED)
                  .when(F.col("t_offset").isNull(), EXTRA)
                  .when(F.col("offset").isNull(), F.when(F.col("tomb"), GONE).otherwise(MISSING))
                  .when(F.col("tomb"), UNDELETED).when(same, OK).otherwise(WRONG))
        joined = fold.join(rows, ["partition", "key"], "full_outer").withColumn("status", status) \
            .persist(StorageLevel.MEMORY_AND_DISK)
        try:
            _count_upsert(joined, rows, parts)
            listed = (joined.where(F.col("status").isin(*PROBLEMS)).orderBy("partition", "key", "offset")
                      .limit(max_listed).collect())
        finally:
            joined.unpersist()
    finally:
        rows.unpersist()
    report.listed = [f"partition {r['partition']} key {_show_key(r['key'])}: {r['status']}: "
                     + _EXPLAIN[r["status"]].format(o=r["offset"], t=r["t_offset"]) for r in listed]
    return report


def _count_upsert(joined: DataFrame, rows: DataFrame, parts: dict[int, UpsertPartition]) -> None:
    """Per partition: the statuses' counts, the table's rows, and its rows beyond the first of a key."""
    from pyspark.sql import functions as F

    for r in joined.groupBy("partition", "status").count().collect():
        t = parts.get(int(r["partition"]))
        if t is None:
            continue
        if r["status"] in (MISSING, WRONG, UNDELETED, EXTRA, ARCHIVED):
            setattr(t, r["status"], getattr(t, r["status"]) + int(r["count"]))
    for r in joined.where(F.col("t_offset").isNotNull() & ~F.col("tomb")).groupBy("partition").agg(
            F.countDistinct("key").alias("keys")).collect():
        if int(r["partition"]) in parts:
            parts[int(r["partition"])].keys = int(r["keys"])
    for r in rows.groupBy("partition", "key").count().groupBy("partition").agg(
            F.sum("count").alias("n"), F.sum(F.col("count") - 1).alias("dups")).collect():
        t = parts.get(int(r["partition"]))
        if t is not None:
            t.table_rows, t.duplicates = int(r["n"]), int(r["dups"])


def _show_key(key: bytes | bytearray | None) -> str:
    if key is None:
        return "null"
    try:
        return repr(bytes(key).decode())
    except UnicodeDecodeError:
        return "0x" + bytes(key).hex()
