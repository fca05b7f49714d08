"""bench/transactions.py: its summary on canned numbers, and the whole bench at tiny sizes against our broker
(the transactional perf producer, the mixed topic of committed and aborted transactions and its check, the
read_committed and read_uncommitted perf consumers), so the scenarios cannot rot. Nothing is timed: the test
asserts what the runs read and wrote, never how fast."""

from __future__ import annotations

import json

import pytest

from bench import transactions as T
from bench.tools import BenchError


def test_summary_gives_medians_spread_and_ratios():
    runs = {
        "kafka": {"txn-produce": [{"p_rps": 100.0, "p_p99_ms": 10.0}, {"p_rps": 300.0, "p_p99_ms": 30.0},
                                  {"p_rps": 200.0, "p_p99_ms": 20.0}],
                  "rc-consume": [{"c_fetch_mbps": 50.0}]},
        "kop": {"txn-produce": [{"p_rps": 150.0, "p_p99_ms": 5.0}, {"p_rps": 250.0, "p_p99_ms": 15.0},
                                {"p_rps": 400.0, "p_p99_ms": 40.0}],
                "rc-consume": [{"c_fetch_mbps": 25.0}]},
    }
    rows = {(r["scenario"], r["metric"]): r for r in T.summarize(runs)}
    rps = rows[("txn-produce", "p_rps")]
    assert rps["median"] == {"kafka": 200.0, "kop": 250.0} and rps["spread"]["kop"] == (150.0, 400.0)
    assert rps["ratio"] == pytest.approx(1.25) and rps["higher_better"]
    assert rows[("txn-produce", "p_p99_ms")]["ratio"] == pytest.approx(0.75)
    assert rows[("rc-consume", "c_fetch_mbps")]["ratio"] == pytest.approx(0.5)
    assert rows[("ru-consume", "c_fetch_mbps")]["ratio"] is None  # no runs: no ratio, not a zero
    table = T.markdown(T.summarize(runs))
    assert "| txn-produce | producer records/s | 200 (100-300) | 250 (150-400) | 1.25x | higher |" in table
    assert "| ru-consume | consumer fetch MB/s | - | - | - | higher |" in table


def test_report_pools_the_rounds_of_saved_runs(tmp_path):
    one, two = tmp_path / "1.json", tmp_path / "2.json"
    one.write_text(json.dumps({"runs": {"kafka": {"rc-consume": [{"c_fetch_mbps": 10.0}]},
                                        "kop": {"rc-consume": [{"c_fetch_mbps": 20.0}]}}}))
    two.write_text(json.dumps({"runs": {"kafka": {"rc-consume": [{"c_fetch_mbps": 30.0}, {"c_fetch_mbps": 50.0}]},
                                        "kop": {"rc-consume": [{"c_fetch_mbps": 5.0}, {"c_fetch_mbps": 40.0}]}}}))
    res = T.main(["--report", str(one), str(two)])
    row = next(r for r in res["rows"] if (r["scenario"], r["metric"]) == ("rc-consume", "c_fetch_mbps"))
    assert row["median"] == {"kafka": 30.0, "kop": 20.0} and row["spread"]["kop"] == (5.0, 40.0)
    assert row["ratio"] == pytest.approx(2 / 3)


def test_tiny_run_against_our_broker(tmp_path):
    out = tmp_path / "txn.json"
    T.main(["--rounds", "1", "--brokers", "kop", "--records", "2000", "--transactions", "6", "--txn-records", "40",
            "--abort-every", "3", "--out", str(out)])
    result = json.loads(out.read_text())
    assert result["mixed"] == {"kop": {"committed": 160, "total": 240}}
    kop = result["runs"]["kop"]
    assert kop["txn-produce"][0]["p_records"] == 2000 and kop["txn-produce"][0]["c_records"] == 2000
    assert kop["rc-consume"][0]["c_records"] == 160  # the aborted third is not delivered
    assert kop["ru-consume"][0]["c_records"] == 240  # read_uncommitted gets it all
    assert all(r["ratio"] is None for r in result["rows"])  # one broker: medians, no ratios


def test_the_mixed_topic_check_fails_on_a_wrong_count(kop_broker):
    broker = kop_broker()
    committed, total = T.write_mixed(broker.bootstrap, "short", 2, 10, 2)
    assert (committed, total) == (10, 20)
    T.check_mixed(broker.bootstrap, "short", committed)
    with pytest.raises(BenchError, match="expected 11 committed"):
        T.check_mixed(broker.bootstrap, "short", 11)
