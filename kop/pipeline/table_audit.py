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
An upsert table (a compacted topic's, kop.pipeline.tables) is refused: it keeps one row per key, so every
superseded record would count as missing.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING

from kop.pipeline import iceberg_schema as schema
from kop.pipeline.kafka_meta import READ_COMMITTED, PipelineError, snapshot_topic

if TYPE_CHECKING:
    from pyspark.sql import SparkSession


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
                isolation_level: str = READ_COMMITTED, max_gap_ranges: int = 1000) -> TableAuditReport:
    """Compare the table's (kafka_partition, kafka_offset) with the topic's records over the covered range."""
    from pyspark import StorageLevel
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    from kop.pipeline.audit import read_range
    from kop.pipeline.tables import kop_summary, load_table

    snap = snapshot_topic(bootstrap, topic)
    jtable = load_table(spark, table)
    if jtable.properties().get(schema.TABLE_MODE_PROPERTY) == schema.UPSERT:
        raise PipelineError(f"table {table} is an upsert table (one row per key): the audit compares offsets record "
                            f"by record, and an upsert table keeps only each key's latest record")
    summary = kop_summary(jtable)
    if summary.get(schema.SUMMARY_TOPIC, topic) != topic:
        raise PipelineError(f"table {table} holds topic {summary[schema.SUMMARY_TOPIC]!r}, not {topic!r}")
    covered = schema.decode_offsets(summary.get(schema.SUMMARY_OFFSETS))
    committed = isolation_level == READ_COMMITTED
    parts = {p: TablePartition(p, snap.log_start[p], snap.end(p, committed), covered.get(p, 0))
             for p in snap.partitions}
    ranges = {p: (t.log_start, max(t.log_start, min(t.covered, t.log_end))) for p, t in parts.items()}

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
