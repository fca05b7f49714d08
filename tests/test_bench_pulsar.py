"""bench/pulsar_clients.py keeps working: one tiny round against our broker through bench/run.py's `--pulsar`
entry (both phases: the pulsar-client scenarios, produced from 2 processes at once, and the conversion matrix with
Kafka clients), the summary on canned numbers, and the Apache Pulsar command line the bench uses. Nothing here
asserts a time or a rate."""

from __future__ import annotations

import json
import math
from pathlib import Path

from bench import pulsar_clients as pc
from bench import run


def test_a_tiny_run_measures_every_scenario_on_our_broker(tmp_path: Path) -> None:
    out = tmp_path / "result.json"
    code = run.main(["--pulsar", "--quick", "--brokers", "kop", "--mb", "0.05", "--e2e", "20", "--sizes", "100",
                     "--lz4-sizes", "100", "--producers", "2", "--out", str(out)])
    result = json.loads(out.read_text())
    assert code == 0, result["errors"]
    assert result["settings"]["producers"] == 2  # and the consumers got exactly what the 2 processes sent
    by_scenario = {m["scenario"]: m["metrics"] for m in result["measurements"]}
    assert set(by_scenario) == {"pc-100b-none", "pc-100b-lz4", "convert-100b"}
    for name in ("pc-100b-none", "pc-100b-lz4"):
        metrics = by_scenario[name]
        for key in ("produce_mps", "consume_mps", "e2e_p50_ms", "e2e_p99_ms", "consume_cpu_ms_per_mb"):
            assert metrics[key] >= 0 and not math.isnan(metrics[key]), (name, key)
        assert metrics["e2e_p50_ms"] <= metrics["e2e_p99_ms"]
    conversion = by_scenario["convert-100b"]
    for phase in ("kafka_produce", "pulsar_produce", "kafka_made_kafka_consume", "kafka_made_pulsar_consume",
                  "pulsar_made_kafka_consume", "pulsar_made_pulsar_consume"):
        assert conversion[f"{phase}_mbps"] > 0 and f"{phase}_cpu_ms_per_mb" in conversion
    assert result["rows"] == []  # one broker: no ratios


def _m(scenario: str, broker: str, rnd: int, **metrics: float) -> dict:
    return {"scenario": scenario, "broker": broker, "round": rnd, "metrics": metrics}


def test_ratios_are_ours_over_pulsar_with_goals_by_direction() -> None:
    canned = [
        _m("pc-100b-none", "kop", 1, produce_mps=90.0, e2e_p99_ms=2.0),
        _m("pc-100b-none", "pulsar", 1, produce_mps=100.0, e2e_p99_ms=4.0),
        _m("pc-100b-none", "kop", 2, produce_mps=130.0, e2e_p99_ms=9.0),
        _m("pc-100b-none", "pulsar", 2, produce_mps=100.0, e2e_p99_ms=3.0),
        _m("pc-100b-none", "kop", 3, produce_mps=120.0, e2e_p99_ms=3.0),
        _m("pc-100b-none", "pulsar", 3, produce_mps=110.0, e2e_p99_ms=5.0),
        _m("convert-100b", "kop", 1, kafka_produce_cpu_ms_per_mb=2.0),
    ]
    summary = pc.summarize(canned)
    assert summary["pc-100b-none"]["kop"]["produce_mps"]["median"] == 120.0
    assert summary["pc-100b-none"]["kop"]["produce_mps"]["min"] == 90.0
    rows = {r["metric"]: r for r in pc.ratio_rows(summary)}
    assert rows["produce_mps"]["ratio"] == 120.0 / 100.0 and rows["produce_mps"]["goal_met"] is True
    assert rows["produce_mps"]["round_ratios"] == [0.9, 1.3, 120.0 / 110.0]
    assert rows["e2e_p99_ms"]["ratio"] == 3.0 / 4.0 and rows["e2e_p99_ms"]["goal_met"] is True
    summary["pc-100b-none"]["kop"]["e2e_p99_ms"]["median"] = 5.0
    assert {r["metric"]: r for r in pc.ratio_rows(summary)}["e2e_p99_ms"]["goal_met"] is False  # lower is better
    table = pc.text_table(summary)
    assert "produce msg/s" in table and "MISS" in table and "kafka_produce_cpu_ms_per_mb" in table
    md = pc.markdown(summary)
    assert "| pc-100b-none | e2e p99 ms | 4.00 | 5.00 | **1.25** | 0.50-3.00 |" in md
    assert "| Kafka producer writes (stored as sent) | 2.0 (2.0-2.0) |" in md
    assert "| pc-100b-none | produce msg/s (3 producers) | 100.00 | 120.00 | 1.20 |" in pc.markdown(summary, 3)
    assert pc.percentile([1.0, 2.0, 3.0, 4.0], 0.99) == 4.0 and pc.percentile([5.0], 0.5) == 5.0
    assert math.isnan(pc.percentile([], 0.99))


def test_apache_pulsar_runs_with_its_own_default_jvm_and_no_journal_fsync(tmp_path: Path) -> None:
    server = pc.BenchPulsar(tmp_path)
    cmd = server.command()
    jvm = cmd[1:cmd.index("-cp")]
    for option in pc.PULSAR_DEFAULT_JVM:
        assert option in jvm
    assert not any(o in jvm for o in ("-Xmx768m", "-Xms256m", "-XX:+UseG1GC"))  # the tests' smaller settings
    assert "-XX:TieredStopAtLevel=1" not in jvm  # both JITs in the bench: the tests' quick start is theirs only
    assert "-XX:TieredStopAtLevel=1" in pc.PulsarServer(tmp_path / "t").command()
    assert "--add-opens" in jvm
    assert server.config()["journalSyncData"] == "false"
