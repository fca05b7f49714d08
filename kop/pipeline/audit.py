"""`kop pipeline audit`: read a topic (or an offset range of it) with Spark's batch Kafka source and report,
per partition, the first and last offset, the record count, the gaps and the duplicates.

Operators run it after a migration to answer "did every record arrive, once, at the offset it should have?".
On a broker with continuous offsets, a partition read over [start, end) must show every offset exactly
once; anything else is one of:

* below-log-start - offsets under the partition's log start offset: deleted by retention or DeleteRecords.
  Only seen when asked to start below the log start (`--from-offsets '{"0": 0}'`), and then reported as
  missing: the operator asked for them and they are gone.
* compaction      - holes inside the retained log of a topic whose cleanup.policy includes `compact`: the
  log cleaner removed records superseded by a later one with the same key. Expected, not data loss.
* missing         - holes inside the retained log of a topic that is not compacted: data loss.
* control         - transaction markers: each COMMIT or ABORT takes one offset per partition of the
  transaction (a control batch) that no consumer ever returns. Not data.
* aborted         - records of aborted transactions, which read_committed consumers (and so the audit, by
  default) never see. Not data loss. Reading read_uncommitted, they are records like any other, and the
  report counts them (aborted_read).

The last two come from the broker itself, not from Spark: when Spark's read leaves holes, the job asks the
broker which offsets of the range are markers and which are aborted records (kafka_meta.scan_transactions:
raw Fetch requests, batch headers only, the aborted-transaction lists of READ_COMMITTED fetches - Kafka's
own rules, so it works against Apache Kafka too), and only the holes left after that are classified by the
rules above. A topic read without holes costs no scan.

Isolation level: read_committed by default (`--isolation-level`, or the Spark option kafka.isolation.level):
it is what transactional pipelines consume, and on a topic without transactions it reads exactly what
read_uncommitted reads. Reading read_committed, "latest" is the last stable offset (an open transaction
holds it back) and an aborted record that Spark returns anyway is a problem (aborted_read, not OK).

Duplicates come in two kinds: the same offset returned twice (a broker bug; Spark's reader would not hide
it), and duplicate records - identical key, value and timestamp in one partition, what a retried
non-idempotent producer or a migration that replayed a range leaves behind.

How the range is pinned: the job first asks the broker (kafka_meta.snapshot_topic) for each partition's log
start and end, resolves --from-offsets / --to-offsets against them, and passes Spark those explicit numbers
(startingOffsets / endingOffsets JSON, `assign` of every partition). So the expected range and what Spark
reads are the same by construction, and records produced during the audit are not half-counted. Spark reads
with failOnDataLoss=false, so that a range starting below the log start is read from the log start on
instead of failing the job; the offsets it could not read are what the audit reports.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any

from kop.pipeline.kafka_meta import (
    ABORTED,
    CONTROL,
    ISOLATION_LEVELS,
    READ_COMMITTED,
    PipelineError,
    resolve_range,
    scan_transactions,
    snapshot_topic,
)

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

GAP_BELOW_LOG_START = "below-log-start"
GAP_COMPACTION = "compaction"
GAP_MISSING = "missing"
GAP_CONTROL = CONTROL
GAP_ABORTED = ABORTED
_GAP_TEXT = {
    GAP_CONTROL: "transaction markers (control batches): not data",
    GAP_ABORTED: "records of aborted transactions, hidden by read_committed: not data loss",
    GAP_BELOW_LOG_START: "below the log start offset (deleted by retention or DeleteRecords): missing",
    GAP_COMPACTION: "compaction gap (cleanup.policy=compact): not data loss",
    GAP_MISSING: "MISSING inside the retained log: data loss",
}


@dataclass(frozen=True, slots=True)
class Gap:
    """Offsets first..last (inclusive) of one partition were not read."""

    partition: int
    first: int
    last: int
    kind: str

    @property
    def count(self) -> int:
        return self.last - self.first + 1


@dataclass(slots=True)
class PartitionAudit:
    partition: int
    log_start: int  # at the end of the audit (it only moves up)
    log_end: int  # the high watermark when the audit started
    from_offset: int
    to_offset: int  # exclusive
    records: int = 0
    first_offset: int | None = None
    last_offset: int | None = None
    missing_below_log_start: int = 0
    missing_in_log: int = 0
    compaction_gap_offsets: int = 0
    control_offsets: int = 0  # transaction markers in the range
    aborted_offsets: int = 0  # records of aborted transactions not read (read_committed hides them)
    aborted_read: int = 0  # records of aborted transactions read (read_uncommitted: expected; else a problem)
    gap_ranges: int = 0
    duplicate_offsets: int = 0
    duplicate_records: int = 0

    @property
    def expected(self) -> int:
        return self.to_offset - self.from_offset

    @property
    def missing(self) -> int:
        return self.missing_below_log_start + self.missing_in_log


@dataclass(slots=True)
class AuditReport:
    topic: str
    bootstrap: str
    cleanup_policy: str
    partitions: list[PartitionAudit]
    gaps: list[Gap] = field(default_factory=list)  # the first `max_gap_ranges`, by partition and offset
    gaps_total: int = 0
    isolation_level: str = READ_COMMITTED

    @property
    def compacted(self) -> bool:
        return "compact" in self.cleanup_policy.replace(" ", "").split(",")

    @property
    def ok(self) -> bool:
        """No data loss, no duplicates, and reading read_committed no aborted record (compaction gaps, markers
        and hidden aborted records are fine)."""
        hidden = self.isolation_level == READ_COMMITTED
        return all(
            p.missing == 0 and p.duplicate_offsets == 0 and p.duplicate_records == 0 and not (hidden and p.aborted_read)
            for p in self.partitions
        )

    def totals(self) -> dict[str, int]:
        keys = ("records", "missing", "missing_below_log_start", "missing_in_log", "compaction_gap_offsets",
                "control_offsets", "aborted_offsets", "aborted_read", "gap_ranges", "duplicate_offsets", "duplicate_records", "expected")
        return {k: sum(getattr(p, k) for p in self.partitions) for k in keys}

    def to_dict(self) -> dict[str, Any]:
        return {
            "topic": self.topic,
            "bootstrap": self.bootstrap,
            "cleanup_policy": self.cleanup_policy,
            "compacted": self.compacted,
            "isolation_level": self.isolation_level,
            "ok": self.ok,
            "totals": self.totals(),
            "partitions": [
                {**asdict(p), "expected": p.expected, "missing": p.missing} for p in self.partitions
            ],
            "gaps": [{**asdict(g), "count": g.count} for g in self.gaps],
            "gaps_listed": len(self.gaps),
            "gaps_total": self.gaps_total,
        }

    def to_json(self, indent: int | None = 2) -> str:
        return json.dumps(self.to_dict(), indent=indent)

    def format_table(self) -> str:
        cols = ("partition", "log start", "log end", "audited range", "records", "first", "last", "missing",
                "compaction gaps", "txn markers",
                "aborted hidden" if self.isolation_level == READ_COMMITTED else "aborted read", "dup offsets",
                "dup records")
        rows = [
            (
                str(p.partition), str(p.log_start), str(p.log_end), f"[{p.from_offset}, {p.to_offset})",
                str(p.records), "-" if p.first_offset is None else str(p.first_offset),
                "-" if p.last_offset is None else str(p.last_offset), str(p.missing),
                str(p.compaction_gap_offsets), str(p.control_offsets),
                str(p.aborted_read if self.isolation_level != READ_COMMITTED else p.aborted_offsets),
                str(p.duplicate_offsets), str(p.duplicate_records),
            )
            for p in self.partitions
        ]
        widths = [max(len(c), *(len(r[i]) for r in rows)) if rows else len(c) for i, c in enumerate(cols)]
        lines = [f"audit of topic {self.topic!r} at {self.bootstrap} (cleanup.policy={self.cleanup_policy}, "
                 f"{self.isolation_level})", ""]
        lines.append("  ".join(c.rjust(w) for c, w in zip(cols, widths, strict=True)))
        lines += ["  ".join(v.rjust(w) for v, w in zip(r, widths, strict=True)) for r in rows]
        t = self.totals()
        lines.append("")
        if self.gaps:
            shown = "" if len(self.gaps) == self.gaps_total else f" (first {len(self.gaps)} of {self.gaps_total})"
            lines.append(f"gaps{shown}:")
            for g in self.gaps:
                span = f"{g.first}" if g.first == g.last else f"{g.first}..{g.last}"
                lines.append(f"  partition {g.partition}: offsets {span} ({g.count}) {_GAP_TEXT[g.kind]}")
            lines.append("")
        verdict = "OK" if self.ok else "PROBLEMS FOUND"
        lines.append(
            f"{verdict}: {t['records']} records of {t['expected']} offsets audited; missing {t['missing']} "
            f"(below log start {t['missing_below_log_start']}, inside the log {t['missing_in_log']}), "
            f"compaction gaps {t['compaction_gap_offsets']}, transaction markers {t['control_offsets']}, "
            + (f"aborted records hidden {t['aborted_offsets']}"
               + (f", ABORTED RECORDS READ {t['aborted_read']}" if t["aborted_read"] else "")
               if self.isolation_level == READ_COMMITTED else f"aborted records read {t['aborted_read']}")
            + f", duplicate offsets {t['duplicate_offsets']}, duplicate records {t['duplicate_records']}"
        )
        return "\n".join(lines)


def _split(partition: int, first: int, last: int, log_start: int, compacted: bool) -> list[Gap]:
    """Cut a hole at the log start offset: what lies below it was deleted, what lies above is compaction
    (compacted topic) or data loss."""
    out = []
    if first < log_start:
        out.append(Gap(partition, first, min(last, log_start - 1), GAP_BELOW_LOG_START))
    if last >= log_start:
        out.append(Gap(partition, max(first, log_start), last, GAP_COMPACTION if compacted else GAP_MISSING))
    return out


def read_range(
    spark: SparkSession, bootstrap: str, topic: str, ranges: dict[int, tuple[int, int]],
    options: dict[str, str] | None = None,
) -> DataFrame:
    """Spark's batch Kafka source over explicit [start, end) offsets of every partition of `topic`."""
    assign = json.dumps({topic: sorted(ranges)})
    starting = json.dumps({topic: {str(p): s for p, (s, _) in ranges.items()}})
    ending = json.dumps({topic: {str(p): e for p, (_, e) in ranges.items()}})
    reader = (
        spark.read.format("kafka")
        .option("kafka.bootstrap.servers", bootstrap)
        .option("assign", assign)
        .option("startingOffsets", starting)
        .option("endingOffsets", ending)
        .option("failOnDataLoss", "false")
    )
    for k, v in (options or {}).items():
        reader = reader.option(k, v)
    return reader.load()


def isolation_of(isolation_level: str | None, options: dict[str, str]) -> str:
    """The level the audit reads with: the argument, else the kafka.isolation.level option, else
    read_committed; both given and different is an error, not a silent choice."""
    opt = options.get("kafka.isolation.level")
    level = (isolation_level or opt or READ_COMMITTED).lower()
    if level not in ISOLATION_LEVELS:
        raise PipelineError(f"isolation level {level!r}: use one of {', '.join(ISOLATION_LEVELS)}")
    if opt is not None and opt.lower() != level:
        raise PipelineError(f"--isolation-level {level} contradicts the option kafka.isolation.level={opt}")
    return level


# long: one Spark job whose steps share the persisted DataFrame and fill the same per-partition results
def audit_topic(
    spark: SparkSession,
    bootstrap: str,
    topic: str,
    from_offsets: dict[int, int] | None = None,
    to_offsets: dict[int, int] | None = None,
    max_gap_ranges: int = 1000,
    options: dict[str, str] | None = None,
    isolation_level: str | None = None,
) -> AuditReport:
    """Audit `topic` over [from, to) per partition (default: [log start, log end), the end being the last
    stable offset when reading read_committed). `from_offsets` and `to_offsets` map partition -> offset (-2
    earliest, -1 latest); partitions left out use the defaults. `options` are extra Spark Kafka source options
    (e.g. kafka.* client settings); `isolation_level` read_committed (default) or read_uncommitted."""
    from pyspark import StorageLevel
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    options = dict(options or {})
    level = isolation_of(isolation_level, options)
    options["kafka.isolation.level"] = level
    committed = level == READ_COMMITTED
    before = snapshot_topic(bootstrap, topic)
    ranges = resolve_range(before, from_offsets or {}, to_offsets or {}, committed)
    parts = {
        p: PartitionAudit(p, before.log_start[p], before.log_end[p], start, end) for p, (start, end) in ranges.items()
    }
    df = read_range(spark, bootstrap, topic, ranges, options).select("partition", "offset", "key", "value", "timestamp")
    df = df.persist(StorageLevel.MEMORY_AND_DISK)
    labels: dict[int, list[tuple[int, int, str]]] = {}
    hidden_kinds = (GAP_CONTROL, GAP_ABORTED) if committed else (GAP_CONTROL,)
    try:
        holes_seen = False
        for r in df.groupBy("partition").agg(
            F.count(F.lit(1)).alias("records"),
            F.min("offset").alias("first"),
            F.max("offset").alias("last"),
            F.count_distinct("offset").alias("distinct"),
        ).collect():
            p = parts[r["partition"]]
            p.records, p.first_offset, p.last_offset = r["records"], r["first"], r["last"]
            p.duplicate_offsets = r["records"] - r["distinct"]
            holes_seen |= r["distinct"] < p.expected
        holes_seen |= any(p.records == 0 and p.expected > 0 for p in parts.values())
        for r in (
            df.groupBy("partition", "key", "value", "timestamp").count().where(F.col("count") > 1)
            .groupBy("partition").agg(F.sum(F.col("count") - 1).alias("dups")).collect()
        ):
            parts[r["partition"]].duplicate_records = r["dups"]

        # Which holes are transaction markers or aborted records: asked of the broker, only if there are holes.
        covered = df.select("partition", "offset")
        edges = {p.partition: (p.first_offset, p.last_offset) for p in parts.values()}
        if holes_seen:
            labels = scan_transactions(bootstrap, topic, ranges, before)
        rows = [(p, first, last, kind) for p, rs in labels.items() for first, last, kind in rs]
        if rows:
            marked = spark.createDataFrame(rows, "partition INT, first LONG, last LONG, kind STRING").select(
                "partition", "kind", F.explode(F.sequence("first", "last")).alias("offset"))
            read = covered.distinct().withColumn("read", F.lit(1))
            for r in marked.join(read, ["partition", "offset"], "left").groupBy("partition", "kind").agg(
                F.count(F.lit(1)).alias("n"), F.count("read").alias("n_read")
            ).collect():
                p = parts[r["partition"]]
                if r["kind"] == GAP_CONTROL:
                    p.control_offsets = r["n"] - r["n_read"]
                else:
                    p.aborted_read = r["n_read"]
                    p.aborted_offsets = r["n"] - r["n_read"] if committed else 0
            # The hidden offsets fill their holes, so that what is left is classified by the old rules.
            covered = covered.unionByName(marked.where(F.col("kind").isin(*hidden_kinds)).select("partition", "offset"))
            for r in covered.groupBy("partition").agg(F.min("offset").alias("lo"), F.max("offset").alias("hi")).collect():
                edges[r["partition"]] = (r["lo"], r["hi"])

        # The log start only moves up: the value read after Spark's read explains every hole below it.
        after = snapshot_topic(bootstrap, topic)
        for p in parts.values():
            p.log_start = max(p.log_start, after.log_start.get(p.partition, p.log_start))
        compacted = before.compacted

        # Holes between consecutive offsets, counted (and cut at the log start) in Spark; listed up to a limit.
        w = Window.partitionBy("partition").orderBy("offset")
        holes = (
            covered.select("partition", "offset", F.lag("offset").over(w).alias("prev"))
            .where(F.col("offset") - F.col("prev") > 1)
            .select("partition", (F.col("prev") + 1).alias("first"), (F.col("offset") - 1).alias("last"))
            .persist(StorageLevel.MEMORY_AND_DISK)  # counted, then listed: one window pass, not two
        )
        starts = spark.createDataFrame([(p.partition, p.log_start) for p in parts.values()], "partition INT, log_start LONG")
        below = F.greatest(F.lit(0), F.least(F.col("last"), F.col("log_start") - 1) - F.col("first") + 1)
        size = F.col("last") - F.col("first") + 1
        pieces = F.when((F.col("first") < F.col("log_start")) & (F.col("last") >= F.col("log_start")), 2).otherwise(1)
        for r in holes.join(starts, "partition").groupBy("partition").agg(
            F.sum(pieces).alias("ranges"), F.sum(below).alias("below"), F.sum(size - below).alias("above")
        ).collect():
            p = parts[r["partition"]]
            p.gap_ranges += r["ranges"]
            p.missing_below_log_start += r["below"]
            if compacted:
                p.compaction_gap_offsets += r["above"]
            else:
                p.missing_in_log += r["above"]
        inner = holes.orderBy("partition", "first").limit(max_gap_ranges + 1).collect()
        holes.unpersist()
    finally:
        df.unpersist()

    gaps: list[Gap] = []
    for r in inner:
        gaps += _split(r["partition"], r["first"], r["last"], parts[r["partition"]].log_start, compacted)
    for part, rs in labels.items():
        for first, last, kind in rs:
            if kind in hidden_kinds:
                gaps.append(Gap(part, first, last, kind))
                parts[part].gap_ranges += 1
    for p in parts.values():  # before the first offset read (or hidden) and after the last one
        lo, hi = edges[p.partition]
        lead_end = p.to_offset - 1 if lo is None else lo - 1
        spans = [(p.from_offset, lead_end)]
        if hi is not None:
            spans.append((hi + 1, p.to_offset - 1))
        for first, last in spans:
            if first > last:
                continue
            for g in _split(p.partition, first, last, p.log_start, compacted):
                gaps.append(g)
                p.gap_ranges += 1
                if g.kind == GAP_BELOW_LOG_START:
                    p.missing_below_log_start += g.count
                elif g.kind == GAP_COMPACTION:
                    p.compaction_gap_offsets += g.count
                else:
                    p.missing_in_log += g.count
    gaps.sort(key=lambda g: (g.partition, g.first))
    report = AuditReport(topic, bootstrap, before.cleanup_policy, [parts[p] for p in sorted(parts)],
                         isolation_level=level)
    report.gaps_total = sum(p.gap_ranges for p in report.partitions)
    report.gaps = gaps[:max_gap_ranges]
    return report
