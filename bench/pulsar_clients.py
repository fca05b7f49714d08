#!/usr/bin/env python3
"""pulsar-client against our broker and Apache Pulsar standalone, side by side; and what the Kafka <-> Pulsar
conversion costs our broker.

    python bench/pulsar_clients.py                        # both phases, 5 rounds (~15 min on 2 cores)
    python bench/run.py --pulsar [options]                # the same, through the bench CLI
    python bench/pulsar_clients.py --quick                # smoke run: 1 round, small counts
    python bench/pulsar_clients.py --phases side --rounds 7 --sizes 100,1024
    python bench/pulsar_clients.py --phases side --producers 2 --e2e 0   # produce from 2 processes at once
    python bench/pulsar_clients.py --profile              # + one untimed round of each scenario on ours under py-spy
    python bench/pulsar_clients.py --report bench/results/pulsar-<time>.json   # its markdown tables

Phase "side" (ours vs Apache Pulsar, the broker order rotated each round, medians and ratios ours / Pulsar):
each scenario (message size, compression) runs, per broker, on a fresh topic (auto-created: non-partitioned on both,
Pulsar's default since 2026-11-29): a durable Exclusive subscription is created and its consumer closed, so the backlog is kept;
a batched producer (1000 messages or 128 KiB per batch, 5 ms delay, up to 20 000 pending) sends `--mb` MB with
send_async and flushes (produce throughput); a consumer resubscribes and reads them all with batch_receive (up to
1000 per call), acknowledging cumulatively per call (consume throughput: on ours this includes Kafka -> Pulsar
conversion at dispatch, since ours stores Kafka batches); then `--e2e` unbatched messages, each sent and awaited,
are received by the same consumer (end-to-end latency: send -> receive, one clock, this process). The broker's
CPU seconds (utime + stime of its process, every thread; Pulsar's JVM has its bookie inside) are read around each
phase, so each ratio comes with the CPU each broker spent per MB.

`--producers N` (default 1, so runs stay comparable with the earlier ones) produces from N processes at once
instead: one pulsar-client Python send_async loop tops out near 35k msg/s on this machine whichever broker it
talks to, so with one producer the produce cells measure the client, not the broker. Each process has its own
Client and the producer above on the same topic (the same on both brokers), sends its share of
the messages and flushes; all start behind a barrier once connected, and produce throughput is all messages over
the wall time from the first send to the last acknowledgement (the broker CPU is read around that window).
Consume and e2e are unchanged. N is in the JSON's settings and in the produce rows' labels.

Phase "convert" (ours only, Apache Pulsar's same-protocol figures beside it): per size, one topic written by a
Kafka producer (confluent-kafka, linger 5 ms, 64 KiB batches: stored as sent, no conversion) and one written by
the Pulsar producer above (each batch converted Pulsar -> Kafka at SEND); each topic is then read once by a Kafka
consumer (confluent-kafka, assigned from the start: stored batches go out as they are) and once by a Pulsar
consumer (each batch converted Kafka -> Pulsar at dispatch). The broker CPU per MB of each of the 6 phases gives
the conversion's price: Pulsar produce - Kafka produce is what Pulsar -> Kafka costs (plus the difference of the
two protocols' framing), Pulsar consume - Kafka consume what Kafka -> Pulsar costs.

Brokers: ours is `kop standalone` (tests/support/broker.py) with localStoreFsyncPolicy=none; Apache Pulsar standalone,
the tests' reference (5.0.1 since 2026-11-30, on the Java 21+ tests/support/pulsar_server.py picks), from the cached
Maven jars (RocksDB metadata, one bookie in the same JVM) with the heap, direct memory and GC that Pulsar's bin/pulsar-daemon uses by default (conf/pulsar_env.sh:
-Xms2g -Xmx2g -XX:MaxDirectMemorySize=4g -XX:+UseZGC -XX:+PerfDisableSharedMem -XX:+AlwaysPreTouch), not the
tests' smaller one. Neither fsyncs per write (see docs/benchmarks.md).

Every run checks what it measured: the consumers must receive exactly the number of messages produced.
Outputs: the table (terminal) and bench/results/pulsar-<time>.json; `--report <json>` prints its markdown tables,
which docs/benchmarks.md's Pulsar section takes as they are.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import math
import multiprocessing as mp
import os
import statistics
import sys
import tempfile
import threading
import time
import traceback
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

import pulsar  # noqa: E402

from bench import brokers as B  # noqa: E402
from bench import profile as prof  # noqa: E402
from kop.pulsar import convert  # noqa: E402
from tests.support.broker import KopBroker  # noqa: E402
from tests.support.pulsar_server import SERVER_JVM_OPTS, PulsarServer  # noqa: E402

RESULTS_DIR = ROOT / "bench" / "results"

# Apache Pulsar's own defaults for a broker JVM (conf/pulsar_env.sh of the 4.0 distribution)
PULSAR_DEFAULT_JVM = ["-Xms2g", "-Xmx2g", "-XX:MaxDirectMemorySize=4g", "-XX:+UseZGC", "-XX:+PerfDisableSharedMem",
                      "-XX:+AlwaysPreTouch"]
COMPRESSION = {"none": pulsar.CompressionType.NONE, "lz4": pulsar.CompressionType.LZ4}
KAFKA_COMPRESSION = {"none": "none", "lz4": "lz4"}
RECEIVE_TIMEOUT_MS = 60_000

# metric -> (label, higher is better); the headline ones carry the goals
METRICS: dict[str, tuple[str, bool]] = {
    "produce_mps": ("produce msg/s", True),
    "produce_mbps": ("produce MB/s", True),
    "consume_mps": ("consume msg/s", True),
    "consume_mbps": ("consume MB/s", True),
    "e2e_p50_ms": ("e2e p50 ms", False),
    "e2e_p99_ms": ("e2e p99 ms", False),
    "produce_cpu_ms_per_mb": ("broker CPU ms/MB, produce", False),
    "consume_cpu_ms_per_mb": ("broker CPU ms/MB, consume", False),
    "e2e_cpu_ms_per_msg": ("broker CPU ms/msg, e2e", False),
}
GOALS = {"produce_mps": 1.0, "consume_mps": 1.0, "e2e_p99_ms": 1.0}


class BenchPulsar(PulsarServer):
    """Apache Pulsar standalone with bin/pulsar's default JVM settings instead of the tests' small heap, and its
    embedded bookie told not to fsync its journal per write (the bookie reads its settings from the same
    standalone.conf; BookKeeper's default is to fsync), as ours runs with localStoreFsyncPolicy=none."""

    quick_start = False  # both JITs, as bin/pulsar runs it

    def __init__(self, base_dir: Path, extra: dict[str, str] | None = None) -> None:
        super().__init__(base_dir, {"journalSyncData": "false", **(extra or {})})

    def command(self) -> list[str]:
        cmd = super().command()
        keep = [o for o in SERVER_JVM_OPTS if not o.startswith(("-Xms", "-Xmx", "-XX:MaxDirectMemorySize", "-XX:+Use"))]
        first = cmd.index(SERVER_JVM_OPTS[0])
        return [cmd[0], *PULSAR_DEFAULT_JVM, *keep, *cmd[first + len(SERVER_JVM_OPTS):]]


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(prog="bench/pulsar_clients.py", description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="smoke run: 1 round, 2 MB, 200 e2e messages")
    ap.add_argument("--rounds", type=int, help="rounds (default 5; quick 1)")
    ap.add_argument("--mb", type=float, help="MB per produce run (default 20; quick 2)")
    ap.add_argument("--max-messages", type=int, default=200_000, help="cap on messages per run (default 200,000)")
    ap.add_argument("--e2e", type=int, help="messages of the e2e latency run (default 2000; quick 200)")
    ap.add_argument("--sizes", default="100,1024", help="message sizes in bytes (default 100,1024)")
    ap.add_argument("--lz4-sizes", default="1024", help="sizes also run with LZ4 batches (default 1024; '' = none)")
    ap.add_argument("--phases", default="side,convert", help="side (ours vs Pulsar), convert (conversion cost)")
    ap.add_argument("--brokers", default="kop,pulsar", help="which brokers (default kop,pulsar)")
    ap.add_argument("--pulsar-conf", action="append", default=[], metavar="KEY=VALUE",
                    help="an Apache Pulsar broker setting for this run (repeatable), e.g. "
                         "managedLedgerNewEntriesCheckDelayInMillis=0")
    ap.add_argument("--producers", type=int, default=1,
                    help="producer processes at once in the produce phase (default 1: one client's limit)")
    ap.add_argument("--profile", action="store_true", help="one extra untimed round per scenario on ours under py-spy")
    ap.add_argument("--out", help="JSON result path (default bench/results/pulsar-<time>.json)")
    a = ap.parse_args(argv)
    q = a.quick
    for k, v in {"rounds": 1 if q else 5, "mb": 2 if q else 20, "e2e": 200 if q else 2000}.items():
        if getattr(a, k) is None:
            setattr(a, k, v)
    a.sizes = [int(s) for s in a.sizes.split(",") if s]
    a.lz4_sizes = [int(s) for s in a.lz4_sizes.split(",") if s]
    a.phases = [p for p in a.phases.split(",") if p]
    a.brokers = [b for b in a.brokers.split(",") if b]
    a.pulsar_conf = dict(kv.split("=", 1) for kv in a.pulsar_conf)
    return a


def scenarios(a: argparse.Namespace) -> list[tuple[str, int, str]]:
    """(name, size, compression) of the side-by-side scenarios."""
    out = [(f"pc-{size}b-none", size, "none") for size in a.sizes]
    out += [(f"pc-{size}b-lz4", size, "lz4") for size in a.lz4_sizes]
    return out


def count_for(a: argparse.Namespace, size: int) -> int:
    return max(1, min(a.max_messages, int(a.mb * 1e6 / size)))


# ---- the pulsar-client side ------------------------------------------------------------------------------


class Phases:
    """Times phases and the broker CPU they cost: `with ph("produce"): ...` records <name>_s and <name>_cpu_s."""

    def __init__(self, pid: int | None) -> None:
        self.pid = pid
        self.values: dict[str, float] = {}

    def __call__(self, name: str) -> Phases:
        self._name = name
        return self

    def __enter__(self) -> None:
        self._cpu0 = B.cpu_seconds(self.pid)
        self._t0 = time.perf_counter()

    def __exit__(self, *exc: object) -> None:
        self.values[f"{self._name}_s"] = time.perf_counter() - self._t0
        cpu1 = B.cpu_seconds(self.pid)
        if self._cpu0 is not None and cpu1 is not None:
            self.values[f"{self._name}_cpu_s"] = cpu1 - self._cpu0


def new_client(url: str) -> pulsar.Client:
    """A client that logs warnings and errors only (its INFO lines would drown the bench's output)."""
    return pulsar.Client(url, operation_timeout_seconds=60, logger=pulsar.ConsoleLogger(pulsar.LoggerLevel.Warn))


def pulsar_produce(client: pulsar.Client, topic: str, n: int, size: int, compression: str,
                   ready: Callable[[], object] | None = None) -> tuple[float, float]:
    """Send n messages batched and flush; `ready` is called once the producer is connected (a barrier). Returns
    the monotonic clock (system-wide on Linux, so comparable across processes) at the first send and after the
    flush, i.e. the last acknowledgement."""
    producer = client.create_producer(
        topic, batching_enabled=True, batching_max_messages=1000, batching_max_allowed_size_in_bytes=128 * 1024,
        batching_max_publish_delay_ms=5, block_if_queue_full=True, max_pending_messages=20_000,
        compression_type=COMPRESSION[compression])
    payload = b"x" * size
    failed: list[str] = []

    def sent(res: pulsar.Result, _mid: object) -> None:
        if res != pulsar.Result.Ok:
            failed.append(str(res))

    if ready is not None:
        ready()
    t0 = time.monotonic()
    for _ in range(n):
        producer.send_async(payload, sent)
    producer.flush()
    t1 = time.monotonic()
    producer.close()
    if failed:
        raise RuntimeError(f"{len(failed)} sends failed: {failed[0]}")
    return t0, t1


def _producer_process(url: str, topic: str, n: int, size: int, compression: str, barrier: Any, results: Any) -> None:
    """One of --producers' processes: its own client and producer; puts (first send, last ack) or an error."""
    client = new_client(url)
    try:
        results.put(pulsar_produce(client, topic, n, size, compression, ready=lambda: barrier.wait(120)))
    except Exception as e:  # noqa: BLE001 - the parent reports it
        barrier.abort()
        results.put(f"{type(e).__name__}: {e}")
    finally:
        client.close()


def produce_parallel(url: str, topic: str, n: int, size: int, compression: str, producers: int,
                     ph: Phases) -> float:
    """n messages from `producers` processes at once (see the module docstring); returns the seconds from the
    first send to the last acknowledgement. Spawned, not forked: this process already runs the C++ client's
    threads."""
    ctx = mp.get_context("spawn")
    barrier, results = ctx.Barrier(producers + 1), ctx.Queue()
    procs = [ctx.Process(target=_producer_process, daemon=True,
                         args=(url, topic, n // producers + (i < n % producers), size, compression, barrier, results))
             for i in range(producers)]
    for p in procs:
        p.start()
    try:
        try:
            barrier.wait(180)  # every producer connected
        except threading.BrokenBarrierError:
            raise RuntimeError(f"a producer did not start: {results.get(timeout=10)}") from None
        with ph("produce"):
            got = [results.get(timeout=600) for _ in procs]
    finally:
        for p in procs:
            p.join(30)
            if p.is_alive():
                p.kill()
    failed = [g for g in got if isinstance(g, str)]
    if failed:
        raise RuntimeError(f"{len(failed)} of {producers} producers failed: {failed[0]}")
    return max(t1 for _, t1 in got) - min(t0 for t0, _ in got)


def subscribe(client: pulsar.Client, topic: str) -> pulsar.Consumer:
    return client.subscribe(topic, "bench", initial_position=pulsar.InitialPosition.Earliest,
                            receiver_queue_size=5000,
                            batch_receive_policy=pulsar.ConsumerBatchReceivePolicy(1000, 10 * 1024 * 1024, 100))


def pulsar_consume(consumer: pulsar.Consumer, n: int) -> None:
    """Receive n messages in batch_receive calls, acknowledging cumulatively per call."""
    got = 0
    deadline = time.monotonic() + RECEIVE_TIMEOUT_MS / 1000
    while got < n:
        msgs = consumer.batch_receive()
        if not msgs:
            if time.monotonic() > deadline:
                raise RuntimeError(f"consumer stalled at {got} of {n} messages")
            continue
        deadline = time.monotonic() + RECEIVE_TIMEOUT_MS / 1000
        got += len(msgs)
        consumer.acknowledge_cumulative(msgs[-1])
    if got != n:
        raise RuntimeError(f"consumer received {got} messages, {n} were produced")


def client_round(url: str, pid: int | None, n: int, size: int, compression: str, e2e: int,
                 producers: int = 1) -> dict[str, float]:
    """One scenario on one broker: produce, consume, e2e (see the module docstring). Metrics as in METRICS."""
    ph = Phases(pid)
    client = new_client(url)
    try:
        topic = f"bench-{uuid.uuid4().hex[:10]}"
        subscribe(client, topic).close()  # the durable subscription keeps the backlog; nobody reads during produce
        if producers == 1:  # as before --producers, so the earlier runs stay comparable
            with ph("produce"):
                pulsar_produce(client, topic, n, size, compression)
        else:
            span = produce_parallel(url, topic, n, size, compression, producers, ph)
            ph.values["produce_s"] = span
        consumer = subscribe(client, topic)
        with ph("consume"):
            pulsar_consume(consumer, n)
        single = client.create_producer(topic, batching_enabled=False)
        payload = b"y" * size
        latencies = []
        with ph("e2e"):
            for _ in range(e2e):
                t0 = time.perf_counter()
                single.send(payload)
                msg = consumer.receive(RECEIVE_TIMEOUT_MS)
                latencies.append((time.perf_counter() - t0) * 1000)
                consumer.acknowledge(msg)
    finally:
        client.close()
    v = ph.values
    mb = n * size / 1e6
    latencies.sort()
    out = {
        "produce_mps": n / v["produce_s"], "produce_mbps": mb / v["produce_s"],
        "consume_mps": n / v["consume_s"], "consume_mbps": mb / v["consume_s"],
        "e2e_p50_ms": statistics.median(latencies) if latencies else float("nan"),
        "e2e_p99_ms": percentile(latencies, 0.99),
    }
    if "produce_cpu_s" in v:
        out["produce_cpu_ms_per_mb"] = v["produce_cpu_s"] * 1000 / mb
        out["consume_cpu_ms_per_mb"] = v["consume_cpu_s"] * 1000 / mb
        if e2e:
            out["e2e_cpu_ms_per_msg"] = v["e2e_cpu_s"] * 1000 / e2e
    return out


def percentile(sorted_values: list[float], q: float) -> float:
    """The nearest-rank percentile of an ascending list (nan when empty)."""
    if not sorted_values:
        return float("nan")
    return sorted_values[max(0, min(len(sorted_values) - 1, int(len(sorted_values) * q + 0.999999) - 1))]


# ---- the conversion phase: Kafka clients on our broker -----------------------------------------------------


def kafka_produce(bootstrap: str, topic: str, n: int, size: int) -> None:
    from confluent_kafka import Producer

    p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5, "batch.size": 65536, "acks": "1",
                  "compression.type": "none", "queue.buffering.max.messages": 200_000})
    payload = b"x" * size
    errors: list[str] = []

    def report(err: object, _msg: object) -> None:
        if err is not None:
            errors.append(str(err))

    for _ in range(n):
        while True:
            try:
                p.produce(topic, payload, on_delivery=report)
                break
            except BufferError:
                p.poll(0.05)
        p.poll(0)
    left = p.flush(60)
    if left or errors:
        raise RuntimeError(f"Kafka producer: {left} not delivered, {len(errors)} errors {errors[:1]}")


def kafka_consume(bootstrap: str, topic: str, n: int) -> None:
    from confluent_kafka import Consumer, TopicPartition

    c = Consumer({"bootstrap.servers": bootstrap, "group.id": f"bench-{uuid.uuid4().hex[:8]}",
                  "enable.auto.commit": False, "fetch.max.bytes": 52428800,
                  "max.partition.fetch.bytes": 1048576})
    try:
        c.assign([TopicPartition(topic, 0, 0)])
        got = 0
        deadline = time.monotonic() + RECEIVE_TIMEOUT_MS / 1000
        while got < n:
            msgs = c.consume(10_000, 0.5)
            for m in msgs:
                if m.error() is not None:
                    raise RuntimeError(f"Kafka consumer: {m.error()}")
            if msgs:
                got += len(msgs)
                deadline = time.monotonic() + RECEIVE_TIMEOUT_MS / 1000
            elif time.monotonic() > deadline:
                raise RuntimeError(f"Kafka consumer stalled at {got} of {n}")
        if got != n:
            raise RuntimeError(f"Kafka consumer received {got} records, {n} were produced")
    finally:
        c.close()


def convert_round(broker: KopBroker, n: int, size: int) -> dict[str, float]:
    """The 6 phases of the conversion matrix on our broker (see the module docstring): broker CPU ms per MB
    and MB/s of each."""
    ph = Phases(broker.pid)
    mb = n * size / 1e6
    client = new_client(broker.pulsar_url)
    try:
        tk, tp = f"conv-k-{uuid.uuid4().hex[:10]}", f"conv-p-{uuid.uuid4().hex[:10]}"
        with ph("kafka_produce"):
            kafka_produce(broker.bootstrap, tk, n, size)
        subscribe(client, tp).close()
        with ph("pulsar_produce"):
            pulsar_produce(client, tp, n, size, "none")
        for label, topic in (("kafka_made", tk), ("pulsar_made", tp)):
            with ph(f"{label}_kafka_consume"):
                kafka_consume(broker.bootstrap, topic, n)
            consumer = subscribe(client, topic)
            with ph(f"{label}_pulsar_consume"):
                pulsar_consume(consumer, n)
            consumer.close()
    finally:
        client.close()
    out: dict[str, float] = {}
    for key in ("kafka_produce", "pulsar_produce", "kafka_made_kafka_consume", "kafka_made_pulsar_consume",
                "pulsar_made_kafka_consume", "pulsar_made_pulsar_consume"):
        out[f"{key}_mbps"] = mb / ph.values[f"{key}_s"]
        if f"{key}_cpu_s" in ph.values:
            out[f"{key}_cpu_ms_per_mb"] = ph.values[f"{key}_cpu_s"] * 1000 / mb
    return out


# ---- summary ----------------------------------------------------------------------------------------------


def summarize(measurements: list[dict[str, Any]]) -> dict[str, dict[str, dict[str, dict[str, Any]]]]:
    """scenario -> broker -> metric -> {median, min, max, rounds}."""
    grouped: dict[str, dict[str, dict[str, list[float]]]] = {}
    for m in measurements:
        per = grouped.setdefault(m["scenario"], {}).setdefault(m["broker"], {})
        for k, v in m["metrics"].items():
            per.setdefault(k, []).append(v)
    return {sc: {b: {k: {"median": statistics.median(vs), "min": min(vs), "max": max(vs), "rounds": vs}
                     for k, vs in ms.items()} for b, ms in bs.items()} for sc, bs in grouped.items()}


def ratio_rows(summary: dict) -> list[dict[str, Any]]:
    """One row per (scenario, metric) measured on both brokers: medians, ratio ours / Pulsar, per-round ratios
    (rounds paired by index: they ran back to back), and whether the goal (GOALS) is met."""
    rows = []
    for sc, bs in summary.items():
        if "kop" not in bs or "pulsar" not in bs:
            continue
        for metric in METRICS:
            ours, ref = bs["kop"].get(metric), bs["pulsar"].get(metric)
            if ours is None or ref is None or math.isnan(ours["median"]) or math.isnan(ref["median"]):
                continue  # not measured (e2e latency with --e2e 0)
            ratio = ours["median"] / ref["median"] if ref["median"] else None
            paired = [o / r for o, r in zip(ours["rounds"], ref["rounds"], strict=False) if r]
            goal = GOALS.get(metric)
            met = None
            if goal is not None and ratio is not None:
                met = ratio >= goal if METRICS[metric][1] else ratio <= goal
            rows.append({"scenario": sc, "metric": metric, "kop": ours["median"], "pulsar": ref["median"],
                         "ratio": ratio, "round_ratios": paired, "goal_met": met})
    return rows


def metric_label(metric: str, producers: int = 1) -> str:
    """A metric's label; the produce ones say how many producer processes sent when more than one."""
    text = METRICS[metric][0]
    return f"{text} ({producers} producers)" if producers > 1 and metric.startswith("produce") else text


def text_table(summary: dict, producers: int = 1) -> str:
    lines = [f"{'scenario':16s} {'metric':28s} {'Pulsar':>10s} {'ours':>10s} {'ours/P':>7s}  per-round ratios"]
    for r in ratio_rows(summary):
        flag = " MISS" if r["goal_met"] is False else ""
        rr = ", ".join(f"{x:.2f}" for x in r["round_ratios"])
        ratio = "-" if r["ratio"] is None else f"{r['ratio']:.2f}"
        lines.append(f"{r['scenario']:16s} {metric_label(r['metric'], producers):28s} {r['pulsar']:10.2f} {r['kop']:10.2f} "
                     f"{ratio:>7s}  [{rr}]{flag}")
    for sc, bs in summary.items():
        if not sc.startswith("convert-"):
            continue
        for b, ms in bs.items():
            for k, v in ms.items():
                lines.append(f"{sc:16s} {k:40s} {b:6s} median {v['median']:9.2f}  "
                             f"(min {v['min']:.2f}, max {v['max']:.2f})")
    return "\n".join(lines)


CONVERT_PHASES = [
    ("kafka_produce", "Kafka producer writes (stored as sent)"),
    ("pulsar_produce", "Pulsar producer writes (Pulsar -> Kafka at SEND)"),
    ("kafka_made_kafka_consume", "Kafka-written, read by a Kafka consumer (as stored)"),
    ("kafka_made_pulsar_consume", "Kafka-written, read by a Pulsar consumer (Kafka -> Pulsar at dispatch)"),
    ("pulsar_made_kafka_consume", "Pulsar-written, read by a Kafka consumer (as stored)"),
    ("pulsar_made_pulsar_consume", "Pulsar-written, read by a Pulsar consumer (Kafka -> Pulsar at dispatch)"),
]


def markdown(summary: dict, producers: int = 1) -> str:
    """The side-by-side table and the conversion table as markdown (docs/benchmarks.md takes them as they are)."""
    out = ["| scenario | metric | Apache Pulsar | ours | ours / Pulsar | per-round ratios (min-max) |",
           "|---|---|---:|---:|---:|---|"]
    for r in ratio_rows(summary):
        ratio = "-" if r["ratio"] is None else f"{r['ratio']:.2f}"
        if r["goal_met"] is False:
            ratio = f"**{ratio}**"
        spread = (f"{min(r['round_ratios']):.2f}-{max(r['round_ratios']):.2f}" if r["round_ratios"] else "-")
        out.append(f"| {r['scenario']} | {metric_label(r['metric'], producers)} | {r['pulsar']:,.2f} | {r['kop']:,.2f} | "
                   f"{ratio} | {spread} |")
    sizes = sorted((sc for sc in summary if sc.startswith("convert-")), key=lambda sc: int(sc[8:-1]))
    if sizes:
        out += ["", "| our broker's CPU, ms per MB (median; min-max) | " + " | ".join(
            f"{sc[8:]} messages" for sc in sizes) + " |", "|---|" + "---:|" * len(sizes)]
        for key, label in CONVERT_PHASES:
            cells = []
            for sc in sizes:
                v = summary[sc].get("kop", {}).get(f"{key}_cpu_ms_per_mb")
                cells.append("-" if v is None else f"{v['median']:.1f} ({v['min']:.1f}-{v['max']:.1f})")
            out.append(f"| {label} | " + " | ".join(cells) + " |")
    return "\n".join(out)


# ---- the run ----------------------------------------------------------------------------------------------


def run_measured(measurements: list, errors: list, scenario: str, broker: str, rnd: int,
                 fn: Callable[[], dict[str, float]]) -> None:
    t0 = time.monotonic()
    try:
        metrics = fn()
    except Exception as e:  # noqa: BLE001 - one failed run must not throw away the others
        msg = f"{scenario} on {broker}, round {rnd}: {str(e).splitlines()[0][:300]}"
        print(f"  FAILED {msg}", flush=True)
        traceback.print_exc(limit=3)
        errors.append(msg)
        return
    measurements.append({"scenario": scenario, "broker": broker, "round": rnd, "metrics": metrics})
    shown = ", ".join(f"{k}={v:,.2f}" for k, v in metrics.items() if k in METRICS or k.endswith("cpu_ms_per_mb"))
    print(f"  round {rnd} {scenario:16s} {broker:6s} {shown}  ({time.monotonic() - t0:.0f} s)", flush=True)


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if args[:1] == ["--report"]:  # the markdown tables of a saved result
        saved = json.loads(Path(args[1]).read_text())
        print(markdown(summarize(saved["measurements"]), saved["settings"].get("producers", 1)))
        return 0
    a = parse_args(args)
    work = Path(tempfile.mkdtemp(prefix="kop-bench-pulsar-"))
    started = time.monotonic()
    load_before = os.getloadavg()[0]
    print(f"bench: work dir {work}; load average {load_before:.2f}", flush=True)
    # Our broker runs this tree's code: whether its conversion loops are the C ones changes the Pulsar-side numbers.
    loops = "c" if convert._native is not None else "python"
    print(f"bench: Kafka <-> Pulsar conversion loops: {loops}"
          + ("" if loops == "c" else " (kop.pulsar._native not built: python setup.py build_ext --inplace)"), flush=True)
    brokers: dict[str, Any] = {}
    if "kop" in a.brokers:
        brokers["kop"] = KopBroker(work / "kop", {**B.KOP_COMMON, "localStoreFsyncPolicy": "none"})
    if "pulsar" in a.brokers and "side" in a.phases:
        brokers["pulsar"] = BenchPulsar(work / "pulsar", a.pulsar_conf)
    measurements: list[dict] = []
    errors: list[str] = []
    profiles: dict[str, Any] = {}
    try:
        for b in brokers.values():
            b.start()
        names = list(brokers)
        url = {n: (b.pulsar_url if n == "kop" else b.service_url) for n, b in brokers.items()}
        print("bench: warm-up (JIT, first-connection paths)", flush=True)
        for n in names:
            client_round(url[n], brokers[n].pid, min(20_000, count_for(a, 100)), 100, "none", 50, a.producers)
        for rnd in range(1, a.rounds + 1):
            k = (rnd - 1) % len(names)
            order = names[k:] + names[:k]
            if "side" in a.phases:
                for sc, size, comp in scenarios(a):
                    for n in order:
                        run_measured(measurements, errors, sc, n, rnd, lambda n=n, size=size, comp=comp: client_round(
                            url[n], brokers[n].pid, count_for(a, size), size, comp, a.e2e, a.producers))
            if "convert" in a.phases and "kop" in brokers:
                for size in a.sizes:
                    run_measured(measurements, errors, f"convert-{size}b", "kop", rnd,
                                 lambda size=size: convert_round(brokers["kop"], count_for(a, size), size))
        if a.profile and "kop" in brokers:
            if not prof.PySpy.available():
                errors.append("--profile: py-spy is not installed (pip install 'kop[bench]')")
            for sc, size, comp in scenarios(a) if prof.PySpy.available() else []:
                out = RESULTS_DIR / f"{sc}.folded"
                with prof.PySpy(brokers["kop"].pid, out):
                    client_round(url["kop"], brokers["kop"].pid, count_for(a, size), size, comp, a.e2e)
                p = prof.parse_folded(out.read_text())
                profiles[sc] = {"file": str(out.relative_to(ROOT)), "lines": prof.summary_lines(p)}
                print(f"  profile {sc} -> {out.relative_to(ROOT)}", flush=True)
                for line in profiles[sc]["lines"]:
                    print(f"    {line}")
    finally:
        for b in brokers.values():
            b.stop()
        import shutil

        shutil.rmtree(work, ignore_errors=True)
    summary = summarize(measurements)
    print("\n" + text_table(summary, a.producers) + "\n")
    for r in ratio_rows(summary):
        if r["goal_met"] is False:
            print(f"goal missed: {r['scenario']} {metric_label(r['metric'], a.producers)} ratio {r['ratio']:.2f}")
    result = {
        "when": dt.datetime.now(dt.UTC).strftime("%Y-%m-%d %H:%M UTC"),
        "command": "python bench/pulsar_clients.py " + " ".join(args),
        "settings": {k: v for k, v in vars(a).items()}, "conversion_loops": loops,
        "pulsar_jvm": PULSAR_DEFAULT_JVM,
        "loadavg_1m": [round(load_before, 2), round(os.getloadavg()[0], 2)],
        "wall_min": (time.monotonic() - started) / 60,
        "measurements": measurements, "summary": summary, "rows": ratio_rows(summary),
        "profiles": profiles, "errors": errors,
    }
    RESULTS_DIR.mkdir(parents=True, exist_ok=True)
    out = Path(a.out) if a.out else RESULTS_DIR / f"pulsar-{dt.datetime.now().strftime('%Y%m%d-%H%M%S')}.json"
    out.write_text(json.dumps(result, indent=1, default=str))
    print(f"bench: wrote {out} ({result['wall_min']:.1f} min; load average {load_before:.2f} -> "
          f"{os.getloadavg()[0]:.2f})")
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main())
