"""bench/share.py (issue 23's share-group bench): its parsers on the output Kafka 4.4's
kafka-share-consumer-perf-test and bench/java/ShareLatency.java really print, the scenario names `make bench`
runs, and both scenarios at tiny sizes against our broker (3 share consumers of one group on one partition:
every record delivered once, each consumer getting some, the group left without lag), so the plumbing cannot
rot. Nothing is timed: the tests assert what was read, never how fast."""

from __future__ import annotations

import pytest

from bench import report, run
from bench import share as S
from bench.scenarios import SHARE_LATENCY_SCENARIOS, SHARE_SCENARIOS, ShareLatencyScenario, ShareScenario
from bench.tools import BenchError
from tests.support.java import JavaTools

# kafka-share-consumer-perf-test --threads 3 --show-consumer-stats --show-detailed-stats, Kafka 4.4.0: the
# progress lines miss their line break (the tool prints "\n" only after the index), then one line per consumer,
# then the group's line.
PERF_OUT = """start.time, end.time, data.consumed.in.MB, MB.sec, nMsg.sec, data.consumed.in.nMsg, fetch.time.ms
2026-11-29 17:39:43:301, 2026-11-29 17:39:44:978, 0.0010, 0.0006, 0.5963, 1, 1677 for share consumer 32026-11-29 \
17:39:43:286, 2026-11-29 17:39:44:975, 0.0010, 0.0006, 0.5921, 1, 1689 for share consumer 2


Share consumer 1 having client id perf-share-consumer-client-1 consumption metrics- 2026-11-29 17:39:36:879, \
2026-11-29 17:39:45:869, 1.0488, 0.1167, 119.4661, 1074, 8990
Share consumer 2 having client id perf-share-consumer-client-2 consumption metrics- 2026-11-29 17:39:36:879, \
2026-11-29 17:39:45:869, 0.9443, 0.1050, 107.5640, 967, 8990
Share consumer 3 having client id perf-share-consumer-client-3 consumption metrics- 2026-11-29 17:39:36:879, \
2026-11-29 17:39:45:869, 0.9365, 0.1042, 106.6741, 0, 8990
2026-11-29 17:39:36:879, 2026-11-29 17:39:45:932, 2.9297, 0.3236, 331.3819, 3000, 9053
"""
LATENCY_OUT = ("SHARE-LATENCY records=100 avg_ms=60.466 p50_ms=52.345 p99_ms=165.741 p999_ms=168.539 "
               "max_ms=168.539 redelivered=2 consumers_used=3 per_consumer=40/31/29\n")


def test_share_perf_parser_takes_the_group_line_the_fetch_phase_and_the_consumers_that_read():
    res = S.parse_share_perf(PERF_OUT)
    assert res == {"sh_records": 3000.0, "sh_mbps": 0.3236, "sh_rps": 331.3819, "sh_ms": 9053.0,
                   "sh_consumers_used": 2.0, "sh_join_ms": 8096.0, "sh_fetch_mbps": pytest.approx(2.9287 / 0.957),
                   "sh_fetch_rps": pytest.approx(2999 / 0.957)}
    # The fetch phase runs from the earliest first progress line (consumer 2's, 17:39:44:975, 1 record) to the
    # group's end (17:39:45:932); without progress lines there is none.
    plain = S.parse_share_perf("\n".join(line for line in PERF_OUT.splitlines() if "for share consumer" not in line))
    assert "sh_fetch_mbps" not in plain and plain["sh_mbps"] == 0.3236
    with pytest.raises(BenchError, match="no share consumer perf result line"):
        S.parse_share_perf(PERF_OUT.rsplit("\n", 2)[0])  # the group's line missing: no figure from a consumer's


def test_share_latency_and_lag_parsers():
    assert S.parse_share_latency(LATENCY_OUT) == {
        "she2e_records": 100.0, "she2e_avg_ms": 60.466, "she2e_p50_ms": 52.345, "she2e_p99_ms": 165.741,
        "she2e_p999_ms": 168.539, "she2e_max_ms": 168.539, "she2e_redelivered": 2.0, "she2e_consumers_used": 3.0}
    with pytest.raises(BenchError):
        S.parse_share_latency("Exception in thread main\n")
    described = ("\nGROUP  TOPIC  PARTITION  START-OFFSET  LAG\ng1     t1     0          3000          0\n"
                 "g10    t1     0          5             7\n")
    assert S.parse_share_lag(described, "g1") == [0] and S.parse_share_lag(described, "g10") == [7]
    with pytest.raises(BenchError, match="no lag"):
        S.parse_share_lag("g1     t1     0          -             -\n", "g1")


def test_make_bench_runs_the_share_scenarios_and_the_report_has_their_rows():
    names = [s.name for s in SHARE_SCENARIOS] + [s.name for s in SHARE_LATENCY_SCENARIOS]
    assert names == ["share-1k-1p-3c", "share-100b-1p-3c", "share-e2e-1k-3c"]
    assert set(names) <= set(run.all_names())
    summary = report.summarize([
        {"scenario": "share-1k-1p-3c", "broker": b, "round": 1, "metrics": {"sh_fetch_mbps": v, "sh_consumers_used": 3.0}}
        for b, v in (("kafka", 40.0), ("kop", 20.0))] + [
        {"scenario": "share-e2e-1k-3c", "broker": b, "round": 1, "metrics": {"she2e_p99_ms": v}}
        for b, v in (("kafka", 4.0), ("kop", 2.0))])
    table = report.markdown_table(summary)
    assert ("| share-1k-1p-3c | share consumers MB/s (3 consumers, from the first delivery) | higher | 40.00 | 20.00 "
            "| **0.50** |") in table
    assert "| share-e2e-1k-3c | share e2e p99 latency ms | lower | 4.00 | 2.00 | 0.50 |" in table


def test_tiny_share_runs_against_our_broker(kop_broker):
    broker = kop_broker(groupInitialRebalanceDelayMs=0)
    tools = JavaTools()
    res = S.run_share_consume(tools, ShareScenario("1k"), broker.bootstrap, "share-tiny", 2500)
    # Every record delivered exactly once (the run checks it, and that the group has no lag left), to
    # consumers of the three. 2 500 records are more than a share-partition's 2 000 in-flight records: the three
    # consumers' first fetches fill that window (the run once lost the records past it, archived undelivered).
    assert res["p_records"] == res["sh_records"] == 2500
    assert res["sh_consumers_used"] >= 2
    lat = S.run_share_e2e(tools, ShareLatencyScenario("1k"), broker.bootstrap, "share-tiny-e2e", 20)
    assert lat["she2e_records"] == 20 and lat["she2e_consumers_used"] >= 1
    assert 0 < lat["she2e_p50_ms"] <= lat["she2e_p99_ms"] <= lat["she2e_p999_ms"]
