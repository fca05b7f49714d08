"""Kafka's own load tools, run against either broker, and parsers of their output.

* kafka-producer-perf-test (org.apache.kafka.tools.ProducerPerformance): its last line is the summary;
* kafka-consumer-perf-test (org.apache.kafka.tools.ConsumerPerformance): a CSV line (with --show-detailed-stats
  off) whose columns are start, end, MB, MB/s, records, records/s, rebalance ms, fetch ms, fetch MB/s, fetch
  records/s;
* kafka-e2e-latency (org.apache.kafka.tools.EndToEndLatency): "Avg latency: X ms" and
  "Percentiles: 50th = a, 99th = b, 99.9th = c" (whole milliseconds).

The parsers are pure functions (tests/test_bench_report.py feeds them canned output). Every run checks its
records arrived (the topic's end offsets / the consumer's count): a fast broker that loses records must not win.
"""

from __future__ import annotations

import os
import re
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from bench.scenarios import E2EScenario, ProducerScenario  # noqa: E402
from tests.support.clients import create_topic, end_offsets  # noqa: E402
from tests.support.java import JavaTools  # noqa: E402

TOOL_JVM = ["-Xms512m", "-Xmx512m"]  # the load generators get a fixed heap, the same on both sides

PRODUCER_RE = re.compile(
    r"(?P<records>\d+) records sent, (?P<rps>[\d.]+) records/sec \((?P<mbps>[\d.]+) MB/sec\), "
    r"(?P<avg>[\d.]+) ms avg latency, (?P<max>[\d.]+) ms max latency, (?P<p50>\d+) ms 50th, "
    r"(?P<p95>\d+) ms 95th, (?P<p99>\d+) ms 99th, (?P<p999>\d+) ms 99.9th"
)
E2E_AVG_RE = re.compile(r"Avg latency: ([\d.]+) ms")
E2E_PCT_RE = re.compile(r"Percentiles: 50th = (\d+), 99th = (\d+), 99.9th = (\d+)")


class BenchError(RuntimeError):
    """A tool failed or records went missing: the run is invalid, not slow."""


def parse_producer(stdout: str) -> dict[str, float]:
    """The summary line of ProducerPerformance -> p_* metrics."""
    lines = [ln for ln in stdout.strip().splitlines() if PRODUCER_RE.search(ln)]
    if not lines:
        raise BenchError(f"no producer summary line in:\n{stdout[-2000:]}")
    m = PRODUCER_RE.search(lines[-1])
    g = {k: float(v) for k, v in m.groupdict().items()}
    return {"p_records": g["records"], "p_rps": g["rps"], "p_mbps": g["mbps"], "p_avg_ms": g["avg"],
            "p_p50_ms": g["p50"], "p_p99_ms": g["p99"], "p_p999_ms": g["p999"], "p_max_ms": g["max"]}


def parse_consumer(stdout: str) -> dict[str, float]:
    """The CSV result line of ConsumerPerformance -> c_* metrics."""
    lines = [ln for ln in stdout.strip().splitlines() if ln[:1].isdigit() and ln.count(",") >= 9]
    if not lines:
        raise BenchError(f"no consumer result line in:\n{stdout[-2000:]}")
    f = [x.strip() for x in lines[-1].split(",")]
    return {"c_records": float(f[4]), "c_mbps": float(f[3]), "c_rps": float(f[5]), "c_join_ms": float(f[6]),
            "c_fetch_mbps": float(f[8]), "c_fetch_rps": float(f[9])}


def parse_e2e(stdout: str) -> dict[str, float]:
    avg, pct = E2E_AVG_RE.search(stdout), E2E_PCT_RE.search(stdout)
    if not avg or not pct:
        raise BenchError(f"no EndToEndLatency summary in:\n{stdout[-2000:]}")
    return {"e2e_avg_ms": float(avg.group(1)), "e2e_p50_ms": float(pct.group(1)),
            "e2e_p99_ms": float(pct.group(2)), "e2e_p999_ms": float(pct.group(3))}


def producer_args(bootstrap: str, topic: str, records: int, record_size: int, acks: str, compression: str,
                  linger_ms: int = 5, batch_size: int = 65536) -> list[str]:
    return [
        "--bootstrap-server", bootstrap, "--topic", topic, "--num-records", str(records),
        "--record-size", str(record_size), "--throughput", "-1",
        "--command-property", f"acks={acks}", f"linger.ms={linger_ms}", f"batch.size={batch_size}",
        f"compression.type={compression}",
    ]


def run_producer(tools: JavaTools, bootstrap: str, topic: str, records: int, record_size: int, acks: str,
                 compression: str, partitions: int, **kw) -> dict[str, float]:
    """Create the topic, write back dirty pages (so one broker's writeback does not land in the other's run),
    run the tool, check every record is in the log."""
    create_topic(bootstrap, topic, partitions)
    os.sync()
    t0 = time.monotonic()
    r = tools.run("kafka-producer-perf-test",
                  *producer_args(bootstrap, topic, records, record_size, acks, compression, **kw),
                  jvm_opts=TOOL_JVM, timeout=1800)
    wall = time.monotonic() - t0
    if r.rc != 0:
        raise BenchError(f"producer perf test on {bootstrap} failed (rc {r.rc}):\n{r.stdout[-2000:]}\n{r.stderr[-2000:]}")
    res = parse_producer(r.stdout)
    stored = sum(end_offsets(bootstrap, topic, partitions).values())
    if stored != records:
        raise BenchError(f"{bootstrap} {topic}: the log holds {stored} records after sending {records}")
    res["p_wall_s"] = round(wall, 2)
    return res


def run_consumer(tools: JavaTools, bootstrap: str, topic: str, records: int) -> dict[str, float]:
    """kafka-consumer-perf-test over the records just written, through a new consumer group (FindCoordinator,
    JoinGroup, SyncGroup, then Fetch); c_fetch_* is the fetch-only rate after the join."""
    r = tools.run("kafka-consumer-perf-test", "--bootstrap-server", bootstrap, "--topic", topic,
                  "--messages", str(records), "--timeout", "60000", jvm_opts=TOOL_JVM, timeout=1800)
    if r.rc != 0:
        raise BenchError(f"consumer perf test on {bootstrap} failed (rc {r.rc}):\n{r.stdout[-2000:]}\n{r.stderr[-2000:]}")
    res = parse_consumer(r.stdout)
    if int(res["c_records"]) != records:
        raise BenchError(f"{bootstrap} {topic}: consumer perf test read {res['c_records']:.0f} of {records} records")
    return res


def run_producer_scenario(tools: JavaTools, sc: ProducerScenario, bootstrap: str, topic: str,
                          records: int) -> dict[str, float]:
    res = run_producer(tools, bootstrap, topic, records, sc.record_size, sc.acks, sc.compression, sc.partitions)
    res.update(run_consumer(tools, bootstrap, topic, records))
    return res


def run_e2e(tools: JavaTools, sc: E2EScenario, bootstrap: str, topic: str, records: int) -> dict[str, float]:
    create_topic(bootstrap, topic, 1)
    r = tools.run("kafka-e2e-latency", "--bootstrap-server", bootstrap, "--topic", topic,
                  "--num-records", str(records), "--producer-acks", sc.acks, "--record-size", str(sc.record_size),
                  jvm_opts=TOOL_JVM, timeout=1800)
    if r.rc != 0:
        raise BenchError(f"e2e latency on {bootstrap} failed (rc {r.rc}):\n{r.stdout[-2000:]}\n{r.stderr[-2000:]}")
    return parse_e2e(r.stdout)
