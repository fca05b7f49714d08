"""Spark's batch Kafka source against our broker (issue 4), and the audit job.

* A 3-partition topic of 100 000 JSON events produced through at least 5 ledger rollovers per partition
  (managedLedgerMaxEntriesPerLedger=5, one batch per partition per flush of 3 000 records) reads back from
  Spark exactly as produced: offsets 0..n-1 per partition, every value and timestamp.
* Reads that start at JSON offsets inside ledgers (and inside batches) and reads bounded by timestamps
  (startingTimestamp / endingTimestamp, startingOffsetsByTimestamp) return exactly the expected rows.
* `kop pipeline audit --json` (the command, in its own process) reports no gaps and no duplicates on it.
* After DeleteRecords, an audit from offset 0 reports exactly the offsets below the new log start as
  missing; on a compacted topic every hole is reported as a compaction gap, not as data loss.

One broker serves the whole module, and one SparkSession (tests/e2e/conftest.py) all the Spark modules (a
JVM start costs seconds; the big topic is produced once).
"""

from __future__ import annotations

import json
import subprocess
import sys
import time

import pytest

from tests.support.broker import KopBroker
from tests.support.clients import STALL_TIMEOUT, create_topic
from tests.support.inspect import ledger_counts, managed_ledger
from tests.support.spark import Event, EventProducer

PARTITIONS = 3
RECORDS = 100_000
CHUNK = 3_000  # records per flush: 1 000 per partition, one batch (ledger entry) each
ENTRIES_PER_LEDGER = 5
KEYS = 50
BASE_TS = int(time.time() * 1000) - 3_600_000


def ts_of(partition: int, offset: int) -> int:
    """Timestamps rise with the offset in each partition (10 ms apart) and differ between partitions."""
    return BASE_TS + 10 * offset + partition


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory):
    b = KopBroker(tmp_path_factory.mktemp("kop-spark-batch"), {
        "managedLedgerMaxEntriesPerLedger": ENTRIES_PER_LEDGER,
        "managedLedgerMinLedgerRolloverTimeMinutes": 0,
        "logCleanerIntervalMs": 200,
    })
    b.start()
    yield b
    b.stop()


@pytest.fixture(scope="module")
def big_topic(broker: KopBroker) -> tuple[str, dict[int, list[Event]]]:
    """100 000 events, record i to partition i % 3; returns the delivered events per partition."""
    topic = "spark-big"
    create_topic(broker.bootstrap, topic, PARTITIONS)
    producer = EventProducer(broker.bootstrap)
    for start in range(0, RECORDS, CHUNK):
        rows = []
        for i in range(start, min(start + CHUNK, RECORDS)):
            p, o = i % PARTITIONS, i // PARTITIONS
            rows.append((p, f"k-{i % KEYS}", i % 1000, ts_of(p, o)))
        producer.produce(topic, rows)
    per: dict[int, list[Event]] = {p: [] for p in range(PARTITIONS)}
    for e in producer.delivered:
        per[e.partition].append(e)
    for p, events in per.items():
        events.sort(key=lambda e: e.offset)
        assert [e.offset for e in events] == list(range(len(events))), f"partition {p}: producer saw a gap"
        assert [e.timestamp for e in events] == [ts_of(p, o) for o in range(len(events))]
    return topic, per


def read(spark, bootstrap: str, topic: str, **options: str) -> dict[int, list[tuple[int, bytes, int]]]:
    """Spark batch read -> {partition: [(offset, value, timestamp ms)]} sorted by offset."""
    from pyspark.sql import functions as F

    reader = spark.read.format("kafka").option("kafka.bootstrap.servers", bootstrap).option("subscribe", topic)
    for k, v in options.items():
        reader = reader.option(k, v)
    df = reader.load().select("partition", "offset", "value", F.unix_millis("timestamp").alias("ts"))
    out: dict[int, list[tuple[int, bytes, int]]] = {p: [] for p in range(PARTITIONS)}
    for r in df.collect():
        out[r["partition"]].append((r["offset"], bytes(r["value"]), r["ts"]))
    for rows in out.values():
        rows.sort()
    return out


def expected_rows(per: dict[int, list[Event]], ranges: dict[int, tuple[int, int]]) -> dict[int, list[tuple[int, bytes, int]]]:
    return {p: [(e.offset, e.value, e.timestamp) for e in per[p][s:e]] for p, (s, e) in ranges.items()}


def assert_rows(got: dict[int, list[tuple[int, bytes, int]]], want: dict[int, list[tuple[int, bytes, int]]]) -> None:
    for p in want:
        g, w = got[p], want[p]
        if g != w:
            offsets_g, offsets_w = [r[0] for r in g], [r[0] for r in w]
            first_bad = next((i for i, (a, b) in enumerate(zip(g, w, strict=False)) if a != b), min(len(g), len(w)))
            raise AssertionError(
                f"partition {p}: {len(g)} rows (offsets {offsets_g[:1]}..{offsets_g[-1:]}), want {len(w)} "
                f"({offsets_w[:1]}..{offsets_w[-1:]}); first difference at row {first_bad}: "
                f"got {g[first_bad:first_bad + 2]} want {w[first_bad:first_bad + 2]}"
            )


def test_batch_read_returns_exactly_the_produced_records(broker, spark, big_topic) -> None:
    topic, per = big_topic
    ledgers = ledger_counts(broker, topic, PARTITIONS)
    assert all(n >= 6 for n in ledgers.values()), f"want >= 5 ledger rollovers per partition, ledgers: {ledgers}"

    got = read(spark, broker.bootstrap, topic, startingOffsets="earliest", endingOffsets="latest")
    assert_rows(got, expected_rows(per, {p: (0, len(per[p])) for p in per}))
    assert sum(len(r) for r in got.values()) == RECORDS


def test_batch_read_from_json_offsets_inside_ledgers(broker, spark, big_topic) -> None:
    topic, per = big_topic
    # 1 000 offsets per ledger entry, 5 000 per ledger: none of these is an entry or a ledger boundary.
    starts = {0: 12_345, 1: 2_501, 2: 27_777}
    ends = {0: 12_345 + 1_500, 1: len(per[1]), 2: 30_001}
    got = read(
        spark, broker.bootstrap, topic,
        startingOffsets=json.dumps({topic: {str(p): o for p, o in starts.items()}}),
        endingOffsets=json.dumps({topic: {"0": ends[0], "1": -1, "2": ends[2]}}),
    )
    assert_rows(got, expected_rows(per, {p: (starts[p], ends[p]) for p in starts}))


def first_at_or_after(per: dict[int, list[Event]], p: int, ts: int) -> int:
    return next((e.offset for e in per[p] if e.timestamp >= ts), len(per[p]))


def test_batch_read_by_timestamps(broker, spark, big_topic) -> None:
    topic, per = big_topic
    # A global start that is exactly partition 0's timestamp of offset 4 321 (and between records of the other
    # partitions), a global end inside a later ledger.
    start_ts, end_ts = ts_of(0, 4_321), ts_of(1, 19_000) + 5
    want = {p: (first_at_or_after(per, p, start_ts), first_at_or_after(per, p, end_ts)) for p in per}
    assert want[0][0] == 4_321 and want[1][0] == 4_321 and want[2][0] == 4_321
    got = read(spark, broker.bootstrap, topic, startingTimestamp=str(start_ts), endingTimestamp=str(end_ts))
    assert_rows(got, expected_rows(per, want))

    # Per partition (startingOffsetsByTimestamp), to the end.
    by_part = {0: ts_of(0, 100) + 1, 1: ts_of(1, 33_000), 2: ts_of(2, 7)}
    want = {p: (first_at_or_after(per, p, t), len(per[p])) for p, t in by_part.items()}
    assert want == {0: (101, len(per[0])), 1: (33_000, len(per[1])), 2: (7, len(per[2]))}
    got = read(spark, broker.bootstrap, topic,
               startingOffsetsByTimestamp=json.dumps({topic: {str(p): t for p, t in by_part.items()}}))
    assert_rows(got, expected_rows(per, want))


def test_audit_command_reports_no_gaps_and_no_duplicates(broker, big_topic) -> None:
    topic, per = big_topic
    proc = subprocess.run(
        [sys.executable, "-m", "kop.cli", "pipeline", "audit", "--bootstrap-server", broker.bootstrap,
         "--topic", topic, "--json"],
        capture_output=True, text=True, timeout=STALL_TIMEOUT * 3,
    )
    assert proc.returncode == 0, f"kop pipeline audit exited {proc.returncode}\n{proc.stdout}\n{proc.stderr[-4000:]}"
    report = json.loads(proc.stdout)
    assert report["ok"] is True and report["compacted"] is False
    assert report["gaps"] == [] and report["gaps_total"] == 0
    assert report["totals"]["records"] == RECORDS
    for part in report["partitions"]:
        n = len(per[part["partition"]])
        assert (part["from_offset"], part["to_offset"], part["records"]) == (0, n, n), part
        assert (part["first_offset"], part["last_offset"]) == (0, n - 1), part
        assert part["missing"] == part["compaction_gap_offsets"] == 0, part
        assert part["duplicate_offsets"] == part["duplicate_records"] == 0, part


def test_audit_after_delete_records_reports_offsets_below_log_start_as_missing(broker, spark) -> None:
    from kafka import TopicPartition
    from kafka.admin import KafkaAdminClient

    from kop.pipeline.audit import GAP_BELOW_LOG_START, Gap, audit_topic

    topic, n = "spark-delete-records", 3_000
    create_topic(broker.bootstrap, topic, 2)
    producer = EventProducer(broker.bootstrap)
    for start in range(0, n, 250):
        producer.produce(topic, [(p, f"k-{i % 7}", i, BASE_TS + i) for i in range(start, start + 250) for p in (0, 1)])
    new_start = 1_234  # inside a batch and a ledger
    admin = KafkaAdminClient(bootstrap_servers=broker.bootstrap)
    try:
        res = admin.delete_records({TopicPartition(topic, 0): new_start})
        assert res[TopicPartition(topic, 0)]["low_watermark"] == new_start, res
    finally:
        admin.close()

    report = audit_topic(spark, broker.bootstrap, topic, from_offsets={0: 0, 1: 0})
    p0, p1 = report.partitions
    assert (p0.log_start, p0.from_offset, p0.to_offset) == (new_start, 0, n)
    assert (p0.records, p0.first_offset, p0.last_offset) == (n - new_start, new_start, n - 1)
    assert p0.missing == p0.missing_below_log_start == new_start and p0.missing_in_log == 0
    assert report.gaps == [Gap(0, 0, new_start - 1, GAP_BELOW_LOG_START)]
    assert (p1.records, p1.missing, p1.gap_ranges) == (n, 0, 0)
    assert p0.duplicate_offsets == p0.duplicate_records == p1.duplicate_offsets == p1.duplicate_records == 0
    assert not report.ok
    assert "0..1233 (1234) below the log start offset" in report.format_table()

    # From the log start (the default) nothing is missing.
    clean = audit_topic(spark, broker.bootstrap, topic)
    assert clean.ok and clean.gaps_total == 0 and clean.totals()["records"] == 2 * n - new_start


def test_audit_reports_compaction_gaps_as_such(broker, spark) -> None:
    from kop.pipeline.audit import GAP_COMPACTION, audit_topic

    topic, n, keys = "spark-compacted", 2_000, 40
    create_topic(broker.bootstrap, topic, 1, config={
        "cleanup.policy": "compact", "min.cleanable.dirty.ratio": "0.01", "max.compaction.lag.ms": "1000",
    })
    producer = EventProducer(broker.bootstrap)
    for start in range(0, n, 100):
        producer.produce(topic, [(0, f"k-{i % keys}", i, BASE_TS + i) for i in range(start, start + 100)])
    latest = {e.key: e.offset for e in sorted(producer.delivered, key=lambda e: e.offset)}
    survivors = sorted(latest.values())

    # The broker's cleaner (logCleanerIntervalMs=200; max.compaction.lag.ms rolls the current ledger too).
    deadline = time.monotonic() + STALL_TIMEOUT
    while int(managed_ledger(broker, topic, 0).properties.get("kop.compactedOffset") or -1) < n - 1:
        assert time.monotonic() < deadline, "the log cleaner did not compact the topic"
        time.sleep(0.2)

    report = audit_topic(spark, broker.bootstrap, topic)
    (p,) = report.partitions
    assert report.compacted and report.ok, report.format_table()
    assert (p.log_start, p.from_offset, p.to_offset) == (0, 0, n)
    assert (p.records, p.first_offset, p.last_offset) == (keys, survivors[0], survivors[-1])
    assert p.missing == 0 and p.compaction_gap_offsets == n - keys
    assert all(g.kind == GAP_COMPACTION for g in report.gaps)
    assert sum(g.count for g in report.gaps) == n - keys and len(report.gaps) == report.gaps_total
    holes = {o for g in report.gaps for o in range(g.first, g.last + 1)}
    assert holes == set(range(n)) - set(survivors)
    assert "compaction gap (cleanup.policy=compact): not data loss" in report.format_table()
