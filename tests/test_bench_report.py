"""The pure parts of the benchmark (bench/report.py, bench/chart.py, the output parsers of bench/tools.py and
the scenario filter of bench/scenarios.py, the py-spy summary of bench/profile.py) on canned numbers, so `make test` keeps `make bench`'s report code
working. Nothing here starts a broker or measures time."""

from __future__ import annotations

import json
import math

import pytest

from bench import chart, report
from bench import profile as prof
from bench.scenarios import (
    BK_MATCHED_SCENARIO,
    BK_SCENARIO,
    all_names,
    matches,
    parse_patterns,
    producer_matrix,
)
from bench.tools import BenchError, parse_consumer, parse_e2e, parse_producer


def _m(scenario: str, broker: str, rnd: int, **metrics: float) -> dict:
    return {"scenario": scenario, "broker": broker, "round": rnd, "metrics": metrics}


CANNED = [
    _m("p-1k-16p-all-none", "kafka", 1, p_mbps=40.0, p_p99_ms=100.0, c_fetch_mbps=80.0, rss_mib=400.0),
    _m("p-1k-16p-all-none", "kafka", 2, p_mbps=50.0, p_p99_ms=120.0, c_fetch_mbps=90.0, rss_mib=410.0),
    _m("p-1k-16p-all-none", "kafka", 3, p_mbps=45.0, p_p99_ms=500.0, c_fetch_mbps=85.0, rss_mib=405.0),
    _m("p-1k-16p-all-none", "kop", 1, p_mbps=60.0, p_p99_ms=90.0, c_fetch_mbps=40.0, rss_mib=60.0),
    _m("p-1k-16p-all-none", "kop", 2, p_mbps=30.0, p_p99_ms=80.0, c_fetch_mbps=42.5, rss_mib=61.0),
    _m("p-1k-16p-all-none", "kop", 3, p_mbps=54.0, p_p99_ms=70.0, c_fetch_mbps=41.0, rss_mib=62.0),
    _m("p-1k-16p-all-none", "kop-bk", 1, p_mbps=9.0, p_p99_ms=300.0, c_fetch_mbps=20.0),
    _m("e2e-1k-acks1", "kafka", 1, e2e_avg_ms=2.0, e2e_p99_ms=10.0),
    _m("e2e-1k-acks1", "kop", 1, e2e_avg_ms=1.0, e2e_p99_ms=12.0),
    _m("scale-offset-search", "kafka", 1, search_ms_1000=1.0, search_ms_10000=1.1, search_ms_100000=1.2),
    _m("scale-offset-search", "kop", 1, search_ms_1000=0.4, search_ms_10000=0.45, search_ms_100000=0.5,
       search_ms_10000000=0.7),
    _m("scale-1000-connections", "kafka", 1, conn_s=0.8, conn_errors=0.0),
    _m("scale-1000-connections", "kop", 1, conn_s=0.3, conn_errors=0.0),
]


def test_medians_and_ratios_follow_the_metric_direction():
    s = report.summarize(CANNED)
    assert s["p-1k-16p-all-none"]["kafka"]["p_mbps"] == 45.0  # median of 40, 50, 45
    assert s["p-1k-16p-all-none"]["kop"]["p_p99_ms"] == 80.0  # the 500 ms outlier of Kafka does not count
    assert s["p-1k-16p-all-none"]["kafka"]["p_p99_ms"] == 120.0
    rows = {(r["scenario"], r["metric"]): r for r in report.rows(s)}
    mbps = rows[("p-1k-16p-all-none", "p_mbps")]
    assert mbps["ratio"] == pytest.approx(54.0 / 45.0)
    assert mbps["ratio_bk"] == pytest.approx(9.0 / 45.0)
    assert report.is_good("p_mbps", mbps["ratio"]) is True
    assert report.is_good("p_mbps", mbps["ratio_bk"]) is False
    assert report.is_good("p_p99_ms", rows[("p-1k-16p-all-none", "p_p99_ms")]["ratio"]) is True  # 80/120
    assert report.is_good("e2e_p99_ms", rows[("e2e-1k-acks1", "e2e_p99_ms")]["ratio"]) is False  # 12/10
    # 0 errors on Kafka's side: no ratio (not a division by zero), and only ours measured: no ratio either
    assert rows[("scale-1000-connections", "conn_errors")]["ratio"] is None
    assert rows[("scale-offset-search", "search_ms_10000000")]["ratio"] is None
    assert rows[("scale-offset-search", "search_ms_10000000")]["kop"] == 0.7


def test_goals_name_the_scenarios_that_miss():
    misses = report.goals(report.summarize(CANNED))
    assert any(m.startswith("p-1k-16p-all-none: consumer MB/s") for m in misses)  # 41 / 85
    assert any(m.startswith("e2e-1k-acks1: e2e p99") for m in misses)
    assert not any("producer MB/s" in m for m in misses)  # 54 / 45 meets the goal


def test_the_bookkeeper_goal_is_checked_on_the_bk_rows():
    """Issue 27: BookKeeper mode >= 0.7x Kafka on produce, on each BookKeeper row (E3 and the matched E1)."""
    canned = [_m("bk-p-1k-16p-all-none", "kafka", 1, p_mbps=100.0), _m("bk-p-1k-16p-all-none", "kop-bk", 1, p_mbps=69.0),
              _m("bk-e1-p-1k-16p-all-none", "kafka", 1, p_mbps=100.0),
              _m("bk-e1-p-1k-16p-all-none", "kop-bk", 1, p_mbps=70.0)]
    misses = report.goals(report.summarize(canned))
    assert misses == ["bk-p-1k-16p-all-none: ours on BookKeeper, producer MB/s ratio 0.69 (goal 0.7x)"]


def test_tables_show_medians_ratios_and_bookkeeper_columns():
    s = report.summarize(CANNED)
    md = report.markdown_table(s)
    assert "kop on BookKeeper" in md
    line = next(ln for ln in md.splitlines() if "| producer MB/s |" in ln)
    assert "45.00" in line and "54.00" in line and "1.20" in line and "**0.20**" in line
    e2e = next(ln for ln in md.splitlines() if "e2e p99 latency" in ln)
    assert "**1.20**" in e2e  # a miss is bold
    text = report.text_table(s)
    assert "p-1k-16p-all-none" in text and "1.20" in text
    without_bk = report.markdown_table(report.summarize([m for m in CANNED if m["broker"] != "kop-bk"]))
    assert "BookKeeper" not in without_bk


def test_json_has_no_nan_tokens():
    s = report.summarize(CANNED + [_m("e2e-1k-acks1", "kafka", 2, e2e_avg_ms=float("nan"))])
    text = report.to_json({"summary": s, "rows": report.rows(s)})
    back = json.loads(text)  # NaN would be invalid JSON for strict readers
    assert "NaN" not in text
    assert back["summary"]["e2e-1k-acks1"]["kafka"]["e2e_avg_ms"] == 2.0  # the NaN round is ignored by the median
    assert math.isnan(report.median([float("nan")]))


def test_docs_section_replaces_only_the_generated_block(tmp_path):
    s = report.summarize(CANNED)
    doc = tmp_path / "benchmarks.md"
    doc.write_text(f"# Benchmarks\nhand-written intro\n\n{report.BEGIN}\nold numbers\n{report.END}\nhand-written tail\n")
    result = {
        "when": "2026-01-01 00:00 UTC", "command": "python bench/run.py", "wall_min": 12.0, "summary": s,
        "settings": {"rounds": 3, "scale_rounds": 1, "producer_mb": 200, "max_records": 600000, "e2e_records": 5000},
        "machine": {"cpu": "cpu", "cpus": 2, "mem_gib": 8, "kernel": "6", "python": "3.11", "java": "java 17",
                    "kafka": "4.2.0", "kop_commit": "abc", "loadavg_1m_before": 0.5, "loadavg_1m_after": 1.0},
        "notes": ["a note"],
    }
    report.write_docs(doc, report.docs_section(result, report.markdown_table(s), ["benchmarks.png"]))
    text = doc.read_text()
    assert "old numbers" not in text
    assert text.startswith("# Benchmarks\nhand-written intro") and text.rstrip().endswith("hand-written tail")
    assert "![benchmarks.png](benchmarks.png)" in text and "* a note" in text and "load average before the run: 0.5" in text
    assert text.count(report.BEGIN) == 1


def test_charts_are_drawn_as_png(tmp_path):
    s = report.summarize(CANNED)
    ratio_png = chart.ratio_chart(s, tmp_path / "r.png", "canned")
    curve_png = chart.offset_search_chart(s, tmp_path / "o.png", "canned")
    for p in (ratio_png, curve_png):
        assert p is not None and p.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and p.stat().st_size > 5000
    assert chart.offset_search_chart(report.summarize(CANNED[:3]), tmp_path / "none.png", "x") is None
    assert not (tmp_path / "none.png").exists()


PRODUCER_OUT = """\
100000 records sent, 20000.0 records/sec (19.53 MB/sec), 12.5 ms avg latency, 300.0 ms max latency.
200000 records sent, 41238.1 records/sec (40.27 MB/sec), 15.31 ms avg latency, 412.00 ms max latency, 9 ms 50th, 40 ms 95th, 120 ms 99th, 300 ms 99.9th.
"""
CONSUMER_OUT = """\
start.time, end.time, data.consumed.in.MB, MB.sec, data.consumed.in.nMsg, nMsg.sec, rebalance.time.ms, fetch.time.ms, fetch.MB.sec, fetch.nMsg.sec
2026-11-21 10:00:00:000, 2026-11-21 10:00:05:000, 195.3125, 39.0625, 200000, 40000.0, 1500, 3500, 55.8036, 57142.857
"""
E2E_OUT = "0\t41.8\n1000\t0.51\nAvg latency: 1.1310 ms\nPercentiles: 50th = 0, 99th = 7, 99.9th = 30\n"


def test_tool_output_parsers():
    p = parse_producer(PRODUCER_OUT)
    assert p["p_records"] == 200000 and p["p_mbps"] == 40.27 and p["p_p99_ms"] == 120 and p["p_p999_ms"] == 300
    c = parse_consumer(CONSUMER_OUT)
    assert c["c_records"] == 200000 and c["c_fetch_mbps"] == pytest.approx(55.8036) and c["c_join_ms"] == 1500
    e = parse_e2e(E2E_OUT)
    assert e == {"e2e_avg_ms": 1.131, "e2e_p50_ms": 0.0, "e2e_p99_ms": 7.0, "e2e_p999_ms": 30.0}
    for parse in (parse_producer, parse_consumer, parse_e2e):
        with pytest.raises(BenchError):
            parse("ERROR something went wrong\n")


def test_scenario_matrix_and_filter():
    names = [s.name for s in producer_matrix()]
    assert len(names) == 16 == len(set(names))
    assert "p-100b-1p-all-lz4" in names and BK_SCENARIO.name == "bk-p-1k-16p-all-none"
    assert producer_matrix()[0].records(200, 600_000) == 195_312  # 200 MB of 1 KiB records
    assert [s for s in producer_matrix() if s.size_name == "100b"][0].records(200, 600_000) == 600_000  # capped
    pats = parse_patterns("p-1k-*, scale-*")
    assert matches("p-1k-1p-1-none", pats) and matches("scale-10k-partitions", pats)
    assert not matches("p-100b-1p-1-none", pats) and not matches("bk-p-1k-16p-all-none", pats)
    assert all(matches(n, None) for n in all_names())
    with pytest.raises(SystemExit):
        parse_patterns("no-such-scenario")


def test_the_two_bookkeeper_rows():
    """Issue 27: the E3/Qw3/Qa2 row keeps its name; the matched-durability row (one bookie, E1/Qw1/Qa1) sits
    beside it, and 'bk-*' (the smoke run's pattern) selects both."""
    from bench.brokers import BENCH_BOOKIE, BK_LAYOUTS

    assert BK_MATCHED_SCENARIO.name == "bk-e1-p-1k-16p-all-none"
    assert {n for n in all_names() if matches(n, parse_patterns("bk-*"))} == {BK_SCENARIO.name,
                                                                              BK_MATCHED_SCENARIO.name}
    assert (BK_MATCHED_SCENARIO.record_size, BK_MATCHED_SCENARIO.partitions, BK_MATCHED_SCENARIO.acks) == (
        BK_SCENARIO.record_size, BK_SCENARIO.partitions, BK_SCENARIO.acks)
    assert BK_LAYOUTS[BK_SCENARIO.bk_copies] == (4, 3, 2)  # bookies, ensemble = write quorum, ack quorum
    assert BK_LAYOUTS[BK_MATCHED_SCENARIO.bk_copies] == (1, 1, 1)
    # Kafka's promise (page cache, no fsync per write) on the bookies: the journal written, not fsynced
    from tests.support.bookkeeper import Bookie

    settings = dict(line.split("=", 1) for line in _bookie_conf(Bookie, BENCH_BOOKIE).splitlines())
    assert settings["journalSyncData"] == "false" and settings.get("journalWriteData", "true") == "true"


def _bookie_conf(bookie_cls, extra: dict) -> str:
    import tempfile
    from pathlib import Path

    with tempfile.TemporaryDirectory() as d:
        return bookie_cls(0, Path(d), "127.0.0.1:1", extra).conf_path.read_text()


def test_batch_helpers_of_the_scale_scenarios():
    from bench.wire import first_batch_base_offset, last_offset_in, record_batch

    batch = record_batch(10, 100)
    two = batch + batch[:40]  # a whole batch then a partial one (a Fetch answer may end mid-batch)
    assert first_batch_base_offset(two) == 0
    assert last_offset_in(two) == 9  # the partial trailing batch is ignored
    assert first_batch_base_offset(b"") is None and last_offset_in(None) is None


CPU = [  # broker CPU per run: ours computes a fraction of Kafka's, yet misses producer MB/s
    _m("p-1k-1p-all-lz4", "kafka", 1, p_mbps=50.0, c_fetch_mbps=100.0, cpu_s=4.0, cpu_ms_per_mb=20.0,
       cpu_per_wall=0.8, load_cpu_s=9.0),
    _m("p-1k-1p-all-lz4", "kop", 1, p_mbps=41.0, c_fetch_mbps=110.0, cpu_s=1.0, cpu_ms_per_mb=5.0,
       cpu_per_wall=0.2, load_cpu_s=9.5),
    _m("e2e-1k-acks1", "kafka", 1, e2e_avg_ms=1.0, e2e_p99_ms=4.0, cpu_s=5.5, cpu_ms_per_1k=1100.0,
       cpu_per_wall=0.6),
    _m("e2e-1k-acks1", "kop", 1, e2e_avg_ms=1.3, e2e_p99_ms=4.0, cpu_s=1.5, cpu_ms_per_1k=300.0,
       cpu_per_wall=0.3),
    _m("p-1k-16p-1-none", "kafka", 1, p_mbps=50.0, c_fetch_mbps=100.0, cpu_s=4.0),
    _m("p-1k-16p-1-none", "kop", 1, p_mbps=60.0, c_fetch_mbps=120.0, cpu_s=1.0),
]

FOLDED = """thread (824): MainThread;_run_module_as_main (<frozen runpy>);<module> (kop/cli.py);run_broker (kop/cli.py);run (uvloop/__init__.py);Runner.run (asyncio/runners.py) 60
thread (824): MainThread;<module> (kop/cli.py);run_broker (kop/cli.py);run (uvloop/__init__.py);Runner.run (asyncio/runners.py);KafkaConnection._on_frame (kop/kafka/connection.py);handle (kop/kafka/apis/produce.py);crc32c (kop/x.py) 25
thread (824): MainThread;<module> (kop/cli.py);run_broker (kop/cli.py);run (uvloop/__init__.py);Runner.run (asyncio/runners.py);KafkaConnection._on_frame (kop/kafka/connection.py);handle (kop/kafka/apis/fetch.py) 10
thread (824): MainThread;handle (kop/kafka/apis/produce.py);handle (kop/kafka/apis/produce.py) 5
thread (831): kop-ledger-io_0;Thread._bootstrap (threading.py);Thread.run (threading.py);_worker (concurrent/futures/thread.py) 90
thread (831): kop-ledger-io_0;Thread._bootstrap (threading.py);Thread.run (threading.py);_worker (concurrent/futures/thread.py);_pwritev_all (local/ledgers.py) 10
not a folded line
"""


def test_cpu_metrics_are_in_the_table_and_the_verdict_follows_them():
    s = report.summarize(CPU)
    md = report.markdown_table(s)
    assert "broker CPU ms per MB" in md and "broker CPU ms per 1 000 records" in md and "load generator CPU" in md
    assert "cores busy" not in md  # cpu_per_wall: JSON only
    assert report.missed_scenarios(s) == ["p-1k-1p-all-lz4", "e2e-1k-acks1"]  # e2e: the average misses
    lines = report.where_time_goes(s)
    p, e = lines
    assert p.startswith("* **p-1k-1p-all-lz4** - misses: producer MB/s 0.82.")
    assert "ours 1.00 s vs Kafka 4.00 s (0.25x) = 5.0 vs 20.0 ms per MB" in p and "0.20 vs 0.80 cores" in p
    assert "not broker work" in p  # a quarter of Kafka's CPU, idle 80% of the time
    assert "e2e avg latency ms 1.30" in e and "300.0 vs 1,100.0 ms per 1 000 records" in e
    assert "Per record our broker computed 0.30 ms (23% of our 1.30 ms average round trip)" in e
    # the same CPU figures, but the profiled round found the main thread saturated: the broker is the bottleneck
    busy = report.where_time_goes(s, {"p-1k-1p-all-lz4": {"file": "f", "wall_s": 5.0, "main_cpu_share": 0.9,
                                                           "lines": []}})
    assert "broker-bound" in busy[0] and "not broker work" not in busy[0]
    rounds = report.where_time_goes(report.summarize(CANNED), measurements=CANNED)
    assert "(rounds: ours 40.00, 42.50, 41.00; Kafka 80.00, 90.00, 85.00)" in rounds[0]


def test_folded_profile_parsing_and_summary():
    p = prof.parse_folded(FOLDED)
    assert p.total == 200 and p.threads == {"MainThread": 100, "kop-ledger-io_0": 100}
    assert p.main_total == 100 and p.main_idle == 60 and p.busy_share == pytest.approx(0.4)
    assert p.inclusive["handle (kop/kafka/apis/produce.py)"] == 30  # the recursive stack counts once
    assert p.self_ == {"crc32c (kop/x.py)": 25, "handle (kop/kafka/apis/fetch.py)": 10,
                       "handle (kop/kafka/apis/produce.py)": 5}
    assert p.thread_busy == {"kop-ledger-io_0": 10}
    assert p.top(1, "self") == [("crc32c (kop/x.py)", 25, pytest.approx(25 / 40))]
    lines = prof.summary_lines(p)
    assert lines[0].startswith("main thread: 100 samples, 40 running Python (40% of wall time)")
    assert "kop-ledger-io_0 10%" in lines[1]
    incl = next(ln for ln in lines if ln.startswith("top inclusive"))
    assert "`KafkaConnection._on_frame (kop/kafka/connection.py)` 88%" in incl and "run_broker" not in incl
    assert prof.is_idle("EpollSelector.select (selectors.py)") and not prof.is_idle("crc32c (kop/x.py)")


def test_docs_section_has_where_the_time_goes_with_profiles():
    s = report.summarize(CPU)
    pr = prof.parse_folded(FOLDED)
    profiles = {"p-1k-1p-all-lz4": {"file": "bench/results/p-1k-1p-all-lz4.folded", "wall_s": 9.0, "cpu_s": 1.1,
                                    "main_cpu_share": 0.12, "busy_share": pr.busy_share,
                                    "lines": prof.summary_lines(pr)}}
    result = {
        "when": "w", "command": "c", "wall_min": 1.0, "summary": s, "profiles": profiles, "notes": [],
        "settings": {"rounds": 3, "scale_rounds": 1, "producer_mb": 200, "max_records": 1, "e2e_records": 5000},
        "machine": {"cpu": "cpu", "cpus": 2, "mem_gib": 8, "kernel": "6", "python": "3.11", "java": "j",
                    "kafka": "4.2.0", "kop_commit": "abc", "loadavg_1m_before": 0.5},
    }
    text = report.docs_section(result, report.markdown_table(s), [])
    where = text[text.index("### Where the time goes"):]
    assert "main thread on CPU 12% of wall time" in where and "`crc32c (kop/x.py)` 62%" in where
    assert "p-1k-16p-1-none" not in where  # meets every goal: nothing to explain



def test_kop_set_pairs_go_into_the_config_and_a_bare_key_is_refused():
    """`--kop-set KEY=VALUE` (e.g. localStoreVerifyChecksums=false for the sendfile fetch path) lands in the
    config dict ours start from, later pairs over earlier ones; a pair without '=' stops the run."""
    from bench.run import apply_kop_set, parse_args

    cfg = {"defaultNumPartitions": 1}
    a = parse_args(["--kop-set", "localStoreVerifyChecksums=false", "--kop-set", "fetchZeroCopy=true",
                    "--kop-set", "fetchZeroCopy=false"])
    apply_kop_set(a.kop_set, cfg)
    assert cfg == {"defaultNumPartitions": 1, "localStoreVerifyChecksums": "false", "fetchZeroCopy": "false"}
    with pytest.raises(SystemExit, match="expected KEY=VALUE"):
        apply_kop_set(["localStoreVerifyChecksums"], cfg)
    with pytest.raises(SystemExit, match="expected KEY=VALUE"):
        apply_kop_set(["=x"], cfg)


def test_the_bench_kafka_runs_both_jits_and_the_tests_kafka_the_quick_one(tmp_path) -> None:  # noqa: ANN001
    """The reference in the bench runs as bin/kafka-server-start does; the tests' -XX:TieredStopAtLevel=1 (a
    quicker start) would make it slower than Kafka is."""
    from bench.brokers import kafka_broker
    from tests.support.kafka_server import KafkaServer

    assert "-XX:TieredStopAtLevel=1" not in kafka_broker(tmp_path).jvm_opts
    assert "-XX:TieredStopAtLevel=1" in KafkaServer(tmp_path / "t").jvm_opts
