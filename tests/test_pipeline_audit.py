"""kop.pipeline.audit's report: how holes are classified and what the operator reads (no Spark here; the
Spark side runs against our broker in tests/e2e/test_spark_batch.py and test_spark_streaming.py)."""

from __future__ import annotations

import json

from kop.pipeline.audit import (
    GAP_BELOW_LOG_START,
    GAP_COMPACTION,
    GAP_MISSING,
    AuditReport,
    Gap,
    PartitionAudit,
    _split,
)


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
