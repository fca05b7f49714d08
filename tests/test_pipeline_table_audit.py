"""Sans-IO parts of `kop pipeline audit --table` for upsert tables (the report) and of DuckDB's offline loading.

The audit itself runs on Spark against a broker: tests/e2e/test_spark_tables.py (a clean upsert table, then three
planted wrong rows).
"""

from __future__ import annotations

import json

import pytest

from kop.pipeline.duckdb_read import EXTENSIONS, connect, extension_file
from kop.pipeline.kafka_meta import PipelineError
from kop.pipeline.table_audit import UpsertAuditReport, UpsertPartition


def report(**problems: int) -> UpsertAuditReport:
    return UpsertAuditReport("t", "kop.kafka.t", "127.0.0.1:9092", "read_committed", 7, [
        UpsertPartition(0, 0, 10, 10, keys=3, table_rows=3),
        UpsertPartition(1, 2, 12, 8, keys=4, table_rows=4, **problems)])


def test_a_clean_upsert_report_is_ok_and_pending_counts_past_the_covered_end() -> None:
    r = report(archived=2)
    assert r.ok  # archived rows are the table keeping what retention removed: not a problem
    assert [p.pending for p in r.partitions] == [0, 4]
    text = r.format_table()
    assert text.startswith("audit of upsert table kop.kafka.t against topic 't' folded by key")
    assert text.splitlines()[-1] == ("OK: 7 table rows for 7 keys; missing 0, wrong 0, undeleted 0, extra 0, "
                                     "duplicates 0, archived 2, pending 4")
    doc = json.loads(r.to_json())
    assert doc["ok"] is True and doc["mode"] == "upsert" and doc["partitions"][1]["pending"] == 4


@pytest.mark.parametrize("problem", ["missing", "wrong", "undeleted", "extra", "duplicates"])
def test_each_kind_of_problem_fails_the_upsert_audit(problem: str) -> None:
    r = report(**{problem: 1})
    r.listed = [f"partition 1 key 'k': {problem}"]
    assert not r.ok and r.partitions[1].problems == 1
    text = r.format_table()
    assert "\nproblems:\n  partition 1 key 'k': " in text and text.splitlines()[-1].startswith("PROBLEMS FOUND")
    assert json.loads(r.to_json())["ok"] is False


def test_duckdb_loads_the_iceberg_extension_from_the_installed_package() -> None:
    import duckdb

    con = connect()  # offline: LOAD by path, autoinstall off
    try:
        loaded = dict(con.sql("SELECT extension_name, loaded FROM duckdb_extensions()").fetchall())
        assert all(loaded[name] for name in EXTENSIONS)
        assert con.sql("SELECT count(*) FROM duckdb_functions() WHERE function_name = 'iceberg_scan'").fetchone()[0]
    finally:
        con.close()
    assert extension_file("iceberg", duckdb.__version__).is_file()


def test_a_duckdb_version_without_extension_files_is_an_error_not_a_download() -> None:
    with pytest.raises(PipelineError, match=r"no iceberg extension for duckdb 0\.0\.1 \(it has v"):
        extension_file("iceberg", "0.0.1")
