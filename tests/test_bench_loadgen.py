"""The capacity benchmark's Go load generator (bench/loadgen, bench/capacity.py) against one broker of ours: it
builds (cached under .cache/loadgen), produces and consumes a few thousand records, and its JSON counts must equal
what kafka-python reads back. It measures nothing: no speed is asserted, only counts and that the broker's
process-tree CPU reading works."""

from __future__ import annotations

import os
import resource
from collections import Counter

import pytest

from bench import capacity
from tests.support.broker import KopBroker
from tests.support.clients import consume_kafka_python, create_topic, end_offsets

RECORDS, SIZE, PARTITIONS = 3000, 100, 16


@pytest.fixture(scope="module")
def broker(tmp_path_factory):
    b = KopBroker(tmp_path_factory.mktemp("loadgen"), {"defaultNumPartitions": 1})
    b.start()
    yield b
    b.stop()


def test_loadgen_counts_match_kafka_python(broker):
    topic = "loadgen-counts"
    create_topic(broker.bootstrap, topic, PARTITIONS)
    out = capacity.run_loadgen(broker.bootstrap, topic, RECORDS, SIZE, PARTITIONS)
    assert (out["records"], out["bytes"], out["clients"]) == (RECORDS, RECORDS * SIZE, capacity.GENERATOR_CLIENTS)
    assert (out["consumed"], out["consumed_bytes"]) == (RECORDS, RECORDS * SIZE)
    assert out["cpu_s"] > 0

    ends = end_offsets(broker.bootstrap, topic, PARTITIONS)
    got = consume_kafka_python(broker.bootstrap, topic, ends)
    assert len(got) == out["consumed"] == sum(ends.values())
    assert {len(g.value or b"") for g in got} == {SIZE}
    # round-robin over the partitions: each holds RECORDS / PARTITIONS records (3000 / 16 = 187 or 188)
    per = Counter(g.partition for g in got)
    assert set(per) == set(range(PARTITIONS))
    assert max(per.values()) - min(per.values()) <= 1


def test_measure_capacity_reads_the_broker_tree_cpu(broker):
    sc = capacity.CapacityScenario("100b", 16)
    m = capacity.measure_capacity(broker.bootstrap, broker.pid, "loadgen-capacity", sc, 2000)
    for k in ("cap_p_mbps", "cap_c_mbps", "cap_p_cpu_ms_per_mb", "cap_c_cpu_ms_per_mb", "gen_p_cpu_ms_per_mb"):
        assert m[k] >= 0, k
    assert m["cpu_s"] > 0  # the broker did compute something for 2 000 records written and read


def test_tree_cpu_counts_this_process():
    own = sum(getattr(resource.getrusage(resource.RUSAGE_SELF), f) for f in ("ru_utime", "ru_stime"))
    tree = capacity.tree_cpu_seconds(os.getpid())
    assert tree is not None and tree >= own - 0.05  # clock ticks round down; the tree holds at least us
    assert capacity.tree_cpu_seconds(2**22 + 1) is None  # no such process (above the default pid_max)


def test_worker_counts_are_1_2_and_the_cores():
    assert capacity.worker_counts(2) == [1, 2]
    assert capacity.worker_counts(16) == [1, 2, 16]
    assert [capacity.broker_name(k) for k in (1, 2)] == ["kop", "kop-w2"]


def _m(scenario: str, broker: str, rnd: int, **metrics: float) -> dict:
    return {"scenario": scenario, "broker": broker, "round": rnd, "metrics": metrics}


def test_capacity_table_and_expected_curve_on_canned_numbers():
    from bench import report

    summary = report.summarize([
        _m("cap-1k-16p", "kafka", 1, cap_p_mbps=100.0, cap_p_cpu_ms_per_mb=4.0, cap_c_cpu_ms_per_mb=2.0),
        _m("cap-1k-16p", "kop", 1, cap_p_mbps=50.0, cap_p_cpu_ms_per_mb=8.0, cap_c_cpu_ms_per_mb=4.0),
        _m("cap-1k-16p", "kop-w2", 1, cap_p_mbps=90.0, cap_p_cpu_ms_per_mb=10.0, cap_c_cpu_ms_per_mb=5.0),
        _m("p-1k-16p-all-none", "kafka", 1, p_mbps=1.0),
    ])
    assert report.capacity_brokers(summary) == ["kafka", "kop", "kop-w2"]
    table = report.capacity_table(summary).splitlines()
    assert "| Apache Kafka | kop 1 worker | kop 2 workers | 1w / Kafka | 2w / Kafka | 2w / 1w |" in table[0]
    produce = next(line for line in table if "produce MB/s" in line)
    assert produce.endswith("| 100.0 | 50.0 | 90.0 | **0.50** | **0.90** | 1.80 |")  # bold = misses the goal
    curve = report.expected_curve(summary).splitlines()
    assert "ours (kop-w2)" in curve[0]
    # 1000 / 10 ms per MB = 100 MB/s per core for ours, 250 for Kafka; 4 cores: 400 / 1,000
    produce_row = next(line for line in curve if "| produce |" in line)
    assert "| 400 / 1,000 |" in produce_row and "| 100 / 250 |" in produce_row
    assert report.capacity_table(report.summarize([_m("p-1k-16p-all-none", "kop", 1, p_mbps=1.0)])) == ""
