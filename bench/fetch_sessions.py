"""Fetch sessions (KIP-227) side by side: a Java consumer tailing many partitions while a producer writes.

    python bench/fetch_sessions.py [--partitions 1000] [--records 200000] [--rate 20000] [--rounds 3]

Three brokers start once: Apache Kafka 4.x, ours with fetch sessions (the default) and ours with them off
(maxIncrementalFetchSessionCacheSlots=0). Each round, on each broker in turn (order rotated per round): a
fresh topic of N partitions, kafka-consumer-perf-test subscribed to it and fetching (it has joined its group
before anything is written), then kafka-producer-perf-test at a fixed rate (100 B records, acks=1); the
round ends when the consumer has read every record. Measured from the producer's start: wall time, broker
CPU (utime + stime of the process), and on ours the Fetch requests served (the request counter of
/metrics) and CPU per Fetch - the broker CPU includes the produce path, the same work on both of ours.

Why this scenario: a tailing consumer of many partitions fetches as soon as anything is new, so most
partitions of each fetch have nothing - exactly what an incremental fetch leaves out of the request and the
answer. A consumer reading a backlog gets most of it in a few large fetches and shows no difference.
"""

from __future__ import annotations

import argparse
import re
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.brokers import KOP_COMMON, cpu_seconds, kafka_broker  # noqa: E402
from bench.tools import TOOL_JVM, producer_args  # noqa: E402
from tests.support.broker import KopBroker  # noqa: E402
from tests.support.clients import create_topic  # noqa: E402
from tests.support.java import JavaTools, java_command  # noqa: E402

_FETCH_COUNT = re.compile(r'kop_server_request_latency_seconds_count\{api="Fetch"[^}]*\} (\S+)')


def _fetches(broker) -> float | None:
    admin = getattr(broker, "admin_url", None)
    if admin is None:
        return None
    text = urllib.request.urlopen(admin + "/metrics", timeout=10).read().decode()
    return sum(float(m[1]) for m in _FETCH_COUNT.finditer(text))


def one_round(tools: JavaTools, broker, topic: str, partitions: int, records: int, rate: int) -> dict[str, float]:
    create_topic(broker.bootstrap, topic, partitions)
    consumer = subprocess.Popen(
        java_command(tools.main_class("kafka-consumer-perf-test"),
                     ["--bootstrap-server", broker.bootstrap, "--topic", topic, "--messages", str(records),
                      "--timeout", "120000"], TOOL_JVM),
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        time.sleep(6)  # JVM start, group join: the consumer is fetching the empty partitions
        cpu0, fetch0, t0 = cpu_seconds(broker.pid), _fetches(broker), time.monotonic()
        args = producer_args(broker.bootstrap, topic, records, 100, "1", "none")
        args[args.index("--throughput") + 1] = str(rate)
        produced = tools.run("kafka-producer-perf-test", *args, jvm_opts=TOOL_JVM, timeout=600)
        if produced.rc != 0:
            raise RuntimeError(f"producer failed: {produced.stderr[-2000:]}")
        _, err = consumer.communicate(timeout=300)
        if consumer.returncode != 0:
            raise RuntimeError(f"consumer failed: {err[-2000:]}")
        out = {"wall_s": time.monotonic() - t0, "cpu_s": (cpu_seconds(broker.pid) or 0) - (cpu0 or 0)}
        if fetch0 is not None:
            out["fetches"] = (_fetches(broker) or 0) - fetch0
            out["cpu_ms_per_fetch"] = out["cpu_s"] * 1000 / max(out["fetches"], 1)
        return out
    finally:
        if consumer.poll() is None:
            consumer.kill()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--partitions", type=int, default=1000)
    ap.add_argument("--records", type=int, default=200_000)
    ap.add_argument("--rate", type=int, default=20_000, help="records/s the producer is held to")
    ap.add_argument("--rounds", type=int, default=3)
    a = ap.parse_args()
    tools = JavaTools()
    work = Path(tempfile.mkdtemp(prefix="kop-bench-sessions-"))
    brokers = {
        "kafka": kafka_broker(work),
        "kop": KopBroker(work / "kop", {**KOP_COMMON, "localStoreFsyncPolicy": "none"}),
        "kop, sessions off": KopBroker(work / "kop-nosessions", {**KOP_COMMON, "localStoreFsyncPolicy": "none",
                                                                 "maxIncrementalFetchSessionCacheSlots": 0}),
    }
    results: dict[str, list[dict[str, float]]] = {name: [] for name in brokers}
    try:
        for b in brokers.values():
            b.start()
        names = list(brokers)
        for r in range(a.rounds):
            for name in names[r % len(names):] + names[:r % len(names)]:
                res = one_round(tools, brokers[name], f"tail-{r}", a.partitions, a.records, a.rate)
                results[name].append(res)
                print(f"round {r} {name}: " + ", ".join(f"{k} {v:.2f}" for k, v in res.items()), flush=True)
    finally:
        for b in brokers.values():
            b.stop()
    print(f"\n{a.partitions} partitions, {a.records} records at {a.rate}/s, medians of {a.rounds} rounds")
    print("| broker | wall s | broker CPU s | CPU / Kafka's | Fetch requests | CPU ms per Fetch |")
    print("|---|---:|---:|---:|---:|---:|")
    kafka_cpu = statistics.median(x["cpu_s"] for x in results["kafka"])
    for name, rows in results.items():
        def med(key: str, rows=rows) -> str:
            vals = [x[key] for x in rows if key in x]
            return f"{statistics.median(vals):.2f}" if vals else "-"
        cpu = statistics.median(x["cpu_s"] for x in rows)
        print(f"| {name} | {med('wall_s')} | {cpu:.2f} | {cpu / kafka_cpu:.2f} | {med('fetches').split('.')[0]} "
              f"| {med('cpu_ms_per_fetch')} |")


if __name__ == "__main__":
    main()
