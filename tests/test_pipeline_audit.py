"""kop.pipeline.audit's report: how holes are classified and what the operator reads (no Spark here; the
Spark side runs against our broker in tests/e2e/test_spark_batch.py and test_spark_streaming.py, and on
topics with transactions against our broker and Apache Kafka in tests/e2e/test_transactions_spark.py)."""

from __future__ import annotations

import json

import pytest

from kop.pipeline.audit import (
    GAP_ABORTED,
    GAP_BELOW_LOG_START,
    GAP_COMPACTION,
    GAP_CONTROL,
    GAP_MISSING,
    AuditReport,
    Gap,
    PartitionAudit,
    _split,
    isolation_of,
)
from kop.pipeline.kafka_meta import PipelineError


def test_a_hole_is_cut_at_the_log_start() -> None:
    assert _split(0, 0, 9, 5, compacted=False) == [Gap(0, 0, 4, GAP_BELOW_LOG_START), Gap(0, 5, 9, GAP_MISSING)]
    assert _split(0, 0, 4, 5, compacted=True) == [Gap(0, 0, 4, GAP_BELOW_LOG_START)]
    assert _split(1, 5, 9, 5, compacted=True) == [Gap(1, 5, 9, GAP_COMPACTION)]
    assert Gap(0, 3, 3, GAP_MISSING).count == 1


def report(**overrides) -> AuditReport:
    p = PartitionAudit(0, log_start=1234, log_end=3000, from_offset=0, to_offset=3000, records=1766,
                       first_offset=1234, last_offset=2999, missing_below_log_start=1234, gap_ranges=1)
    for k, v in overrides.items():
        setattr(p, k, v)
    r = AuditReport("orders", "127.0.0.1:9092", "delete", [p], gaps=[Gap(0, 0, 1233, GAP_BELOW_LOG_START)])
    r.gaps_total = 1
    return r


def test_missing_offsets_make_the_report_fail() -> None:
    r = report()
    assert not r.ok
    d = json.loads(r.to_json())
    assert d["ok"] is False and d["totals"]["missing"] == 1234 and d["totals"]["expected"] == 3000
    assert d["partitions"][0]["missing"] == 1234 and d["partitions"][0]["expected"] == 3000
    assert d["gaps"] == [{"partition": 0, "first": 0, "last": 1233, "kind": GAP_BELOW_LOG_START, "count": 1234}]
    table = r.format_table()
    assert "partition 0: offsets 0..1233 (1234) below the log start offset" in table
    assert table.splitlines()[-1].startswith("PROBLEMS FOUND: 1766 records of 3000 offsets audited; missing 1234")


def test_compaction_gaps_alone_are_ok_and_duplicates_are_not() -> None:
    clean = report(log_start=0, records=40, first_offset=3, missing_below_log_start=0, compaction_gap_offsets=2960)
    clean.cleanup_policy, clean.gaps = "compact", [Gap(0, 0, 2, GAP_COMPACTION)]
    assert clean.ok and clean.compacted
    assert "compaction gap (cleanup.policy=compact): not data loss" in clean.format_table()
    assert clean.format_table().splitlines()[-1].startswith("OK: ")
    assert not report(missing_below_log_start=0, duplicate_records=1).ok
    assert not report(missing_below_log_start=0, duplicate_offsets=1).ok


def test_empty_partitions_print_dashes() -> None:
    r = AuditReport("t", "b", "delete", [PartitionAudit(0, 0, 0, 0, 0)])
    assert r.ok
    row = r.format_table().splitlines()[3].split()
    assert row[:7] == ["0", "0", "0", "[0,", "0)", "0", "-"]


def txn_report(isolation: str, **overrides) -> AuditReport:
    """[0, 60): 35 records, 5 markers, 20 aborted records (hidden under read_committed)."""
    p = PartitionAudit(0, log_start=0, log_end=70, from_offset=0, to_offset=60, records=35, first_offset=0,
                       last_offset=58, control_offsets=5, aborted_offsets=20, gap_ranges=7)
    for k, v in overrides.items():
        setattr(p, k, v)
    gaps = [Gap(0, 15, 15, GAP_CONTROL), Gap(0, 16, 25, GAP_ABORTED), Gap(0, 26, 26, GAP_CONTROL)]
    r = AuditReport("payments", "127.0.0.1:9092", "delete", [p], gaps=gaps, isolation_level=isolation)
    r.gaps_total = 7
    return r


def test_markers_and_hidden_aborted_records_are_not_data_loss() -> None:
    r = txn_report("read_committed")
    assert r.ok
    d = json.loads(r.to_json())
    assert d["isolation_level"] == "read_committed" and d["ok"] is True
    assert (d["totals"]["control_offsets"], d["totals"]["aborted_offsets"], d["totals"]["missing"]) == (5, 20, 0)
    assert d["gaps"][1] == {"partition": 0, "first": 16, "last": 25, "kind": GAP_ABORTED, "count": 10}
    table = r.format_table()
    assert "(cleanup.policy=delete, read_committed)" in table
    assert "partition 0: offsets 15 (1) transaction markers (control batches): not data" in table
    assert "offsets 16..25 (10) records of aborted transactions, hidden by read_committed: not data loss" in table
    assert "txn markers  aborted hidden" in table
    assert table.splitlines()[-1] == (
        "OK: 35 records of 60 offsets audited; missing 0 (below log start 0, inside the log 0), compaction gaps 0, "
        "transaction markers 5, aborted records hidden 20, duplicate offsets 0, duplicate records 0")


def test_aborted_records_read_are_a_problem_only_under_read_committed() -> None:
    leaked = txn_report("read_committed", aborted_offsets=19, aborted_read=1)
    assert not leaked.ok
    assert "ABORTED RECORDS READ 1" in leaked.format_table().splitlines()[-1]
    loose = txn_report("read_uncommitted", aborted_offsets=0, aborted_read=20, records=55)
    assert loose.ok
    assert "aborted records read 20," in loose.format_table().splitlines()[-1]
    assert "txn markers  aborted read" in loose.format_table()
    # A marker or aborted record does not hide real data loss next to it.
    assert not txn_report("read_committed", missing_in_log=1).ok


def test_isolation_level_from_the_argument_or_the_spark_option() -> None:
    assert isolation_of(None, {}) == "read_committed"
    assert isolation_of(None, {"kafka.isolation.level": "read_uncommitted"}) == "read_uncommitted"
    assert isolation_of("read_uncommitted", {"kafka.isolation.level": "READ_UNCOMMITTED"}) == "read_uncommitted"
    with pytest.raises(PipelineError, match="contradicts the option kafka.isolation.level=read_uncommitted"):
        isolation_of("read_committed", {"kafka.isolation.level": "read_uncommitted"})
    with pytest.raises(PipelineError, match="use one of read_committed, read_uncommitted"):
        isolation_of("serializable", {})
