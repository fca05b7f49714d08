#!/usr/bin/env python3
"""Transactions side by side (issue 15): transactional producer throughput and read_committed consumer
throughput, ours against Apache Kafka 4.x, with Kafka's own perf tools.

    python bench/transactions.py                     # 3 rounds, ~3 min on the shared 2-core machine
    python bench/transactions.py --rounds 5 --brokers kop,kafka
    python bench/transactions.py --report bench/results/transactions-*.json   # pool saved runs, no brokers

Both brokers start once (bench/brokers.py: ours embedded with localStoreFsyncPolicy=none, Kafka single-node
KRaft). Once per broker, untimed: a "mixed" topic written by a confluent-kafka transactional producer -
transactions of --txn-records records of 1 KiB, every --abort-every-th one aborted - then read back once with
a read_committed confluent-kafka consumer that must see exactly the committed records and none of the aborted
ones (a fast broker that leaks aborted data must not win). Then every round, on each broker in turn (the order
swapped each round):

* txn-produce: kafka-producer-perf-test --transactional-id --transaction-duration-ms 100 on a fresh topic of
  one partition (1 KiB records, acks=all as transactions require, linger.ms=5, batch.size=64 KiB), then
  kafka-consumer-perf-test with isolation.level=read_committed over it, which must read every record;
* rc-consume: kafka-consumer-perf-test, isolation.level=read_committed, over the mixed topic (through a new
  group; it must read the committed count);
* ru-consume: the same with read_uncommitted (every record, aborted ones too): the reference point for what
  reading through the LSO and filtering aborted transactions costs.

Metrics: the producer's records/s, MB/s and p99; the consumers' fetch-phase MB/s and records/s (after the
group join; MB are the bytes of the records delivered, so rc moves fewer MB than ru over the same topic);
the broker's CPU seconds per run (/proc/<pid>/stat). The table gives medians, the min-max spread over rounds,
and the ratio ours / Kafka of the medians.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from bench import brokers as B  # noqa: E402
from bench.tools import TOOL_JVM, BenchError, parse_consumer, parse_producer, producer_args  # noqa: E402
from tests.support.clients import create_topic  # noqa: E402
from tests.support.java import JavaTools  # noqa: E402

RECORD_SIZE = 1024
# metric -> (label, higher is better)
METRICS = {
    "p_rps": ("producer records/s", True),
    "p_mbps": ("producer MB/s", True),
    "p_p99_ms": ("producer p99 ms", False),
    "c_fetch_mbps": ("consumer fetch MB/s", True),
    "c_fetch_rps": ("consumer fetch records/s", True),
    "cpu_s": ("broker CPU s", False),
}
SCENARIOS = {
    "txn-produce": ("p_rps", "p_mbps", "p_p99_ms", "c_fetch_mbps", "cpu_s"),
    "rc-consume": ("c_fetch_mbps", "c_fetch_rps", "cpu_s"),
    "ru-consume": ("c_fetch_mbps", "c_fetch_rps", "cpu_s"),
}


def consume(tools: JavaTools, bootstrap: str, topic: str, records: int, isolation: str) -> dict[str, float]:
    """kafka-consumer-perf-test over the topic from the start through a new group; it must read `records`."""
    r = tools.run("kafka-consumer-perf-test", "--bootstrap-server", bootstrap, "--topic", topic,
                  "--messages", str(records), "--timeout", "60000",
                  "--command-property", f"isolation.level={isolation}", jvm_opts=TOOL_JVM, timeout=1800)
    if r.rc != 0:
        raise BenchError(f"consumer perf test on {bootstrap} failed (rc {r.rc}):\n{r.stdout[-2000:]}\n{r.stderr[-2000:]}")
    res = parse_consumer(r.stdout)
    if int(res["c_records"]) != records:
        raise BenchError(f"{bootstrap} {topic} {isolation}: read {res['c_records']:.0f} of {records} records")
    return res


def txn_produce(tools: JavaTools, bootstrap: str, topic: str, records: int, duration_ms: int) -> dict[str, float]:
    """The transactional producer perf test, then a read_committed read that must find every record: the run
    only counts if every transaction was committed and its records are readable."""
    create_topic(bootstrap, topic, 1)
    args = producer_args(bootstrap, topic, records, RECORD_SIZE, "all", "none")
    r = tools.run("kafka-producer-perf-test", *args, "--transactional-id", f"{topic}-txn",
                  "--transaction-duration-ms", str(duration_ms), jvm_opts=TOOL_JVM, timeout=1800)
    if r.rc != 0:
        raise BenchError(f"producer perf test on {bootstrap} failed (rc {r.rc}):\n{r.stdout[-2000:]}\n{r.stderr[-2000:]}")
    res = parse_producer(r.stdout)
    res.update(consume(tools, bootstrap, topic, records, "read_committed"))
    return res


def write_mixed(bootstrap: str, topic: str, transactions: int, txn_records: int, abort_every: int) -> tuple[int, int]:
    """The mixed topic: `transactions` transactions, every abort_every-th aborted. Each value starts with b"c"
    (committed) or b"a" (aborted) so check_mixed can tell them apart. Returns (committed, total) records."""
    from confluent_kafka import Producer

    create_topic(bootstrap, topic, 1)
    p = Producer({"bootstrap.servers": bootstrap, "transactional.id": f"{topic}-writer", "linger.ms": 5,
                  "batch.size": 65536})
    p.init_transactions(60)
    committed = 0
    for t in range(transactions):
        abort = abort_every > 0 and t % abort_every == abort_every - 1
        value = (b"a" if abort else b"c") * RECORD_SIZE
        p.begin_transaction()
        for _ in range(txn_records):
            while True:
                try:
                    p.produce(topic, value)
                    break
                except BufferError:
                    p.poll(0.05)
        if abort:
            p.flush(60)  # abort_transaction purges what is still queued: the aborted records must be in the log
            p.abort_transaction(60)
        else:
            p.commit_transaction(60)
            committed += txn_records
    p.flush(60)
    return committed, transactions * txn_records


def check_mixed(bootstrap: str, topic: str, committed: int) -> None:
    """A read_committed confluent-kafka consumer sees exactly the committed records, no aborted one."""
    from confluent_kafka import Consumer, KafkaError

    c = Consumer({"bootstrap.servers": bootstrap, "group.id": f"{topic}-check", "auto.offset.reset": "earliest",
                  "enable.auto.commit": False, "isolation.level": "read_committed", "enable.partition.eof": True})
    c.subscribe([topic])
    seen = aborted = 0
    deadline = time.monotonic() + 300
    try:
        while time.monotonic() < deadline:
            msgs = c.consume(1000, 1.0)
            if any(m.error() is not None and m.error().code() == KafkaError._PARTITION_EOF for m in msgs):
                seen += sum(1 for m in msgs if m.error() is None)
                aborted += sum(1 for m in msgs if m.error() is None and m.value()[:1] == b"a")
                break
            for m in msgs:
                if m.error() is not None:
                    raise BenchError(f"{bootstrap} {topic}: {m.error()}")
                seen += 1
                aborted += m.value()[:1] == b"a"
    finally:
        c.close()
    if seen != committed or aborted:
        raise BenchError(f"{bootstrap} {topic}: read_committed saw {seen} records ({aborted} aborted), "
                         f"expected {committed} committed")


def summarize(runs: dict[str, dict[str, list[dict[str, float]]]]) -> list[dict]:
    """runs[broker][scenario] = one metrics dict per round -> rows of (scenario, metric, median per broker,
    min-max per broker, ratio kop / kafka of the medians)."""
    rows = []
    for scenario, metrics in SCENARIOS.items():
        for metric in metrics:
            row: dict = {"scenario": scenario, "metric": metric, "label": METRICS[metric][0],
                         "higher_better": METRICS[metric][1], "median": {}, "spread": {}}
            for broker, by in runs.items():
                vals = [m[metric] for m in by.get(scenario, []) if metric in m]
                if vals:
                    row["median"][broker] = statistics.median(vals)
                    row["spread"][broker] = (min(vals), max(vals))
            k, o = row["median"].get("kafka"), row["median"].get("kop")
            row["ratio"] = o / k if k and o is not None else None
            rows.append(row)
    return rows


def markdown(rows: list[dict]) -> str:
    def num(v: float) -> str:
        return f"{v:,.0f}" if abs(v) >= 100 else f"{v:.2f}"

    out = ["| scenario | metric | Kafka median (min-max) | ours median (min-max) | ours / Kafka | better |",
           "|---|---|---:|---:|---:|---|"]
    for r in rows:
        cells = []
        for b in ("kafka", "kop"):
            if b in r["median"]:
                lo, hi = r["spread"][b]
                cells.append(f"{num(r['median'][b])} ({num(lo)}-{num(hi)})")
            else:
                cells.append("-")
        ratio = "-" if r["ratio"] is None else f"{r['ratio']:.2f}x"
        out.append(f"| {r['scenario']} | {r['label']} | {cells[0]} | {cells[1]} | {ratio} | "
                   f"{'higher' if r['higher_better'] else 'lower'} |")
    return "\n".join(out)


def run_round(tools: JavaTools, broker, rnd: int, a: argparse.Namespace, mixed: tuple[str, int, int]) -> dict:
    """One round of the three scenarios on one broker -> {scenario: metrics}."""
    out: dict[str, dict[str, float]] = {}
    topic, committed, total = mixed
    steps = [("txn-produce", lambda: txn_produce(tools, broker.bootstrap, f"txn-produce-{rnd}-{a.stamp}",
                                                 a.records, a.duration_ms)),
             ("rc-consume", lambda: consume(tools, broker.bootstrap, topic, committed, "read_committed")),
             ("ru-consume", lambda: consume(tools, broker.bootstrap, topic, total, "read_uncommitted"))]
    for name, fn in steps:
        cpu0 = B.cpu_seconds(broker.pid)
        res = fn()
        cpu1 = B.cpu_seconds(broker.pid)
        if cpu0 is not None and cpu1 is not None:
            res["cpu_s"] = cpu1 - cpu0
        out[name] = res
    return out


def pooled(paths: list[Path]) -> dict:
    """--report: the rounds of several saved runs as one (each run restarted both brokers, so its rounds are
    as independent as those of one run), with the table over all of them."""
    runs: dict[str, dict[str, list[dict[str, float]]]] = {}
    for path in paths:
        for broker, by in json.loads(path.read_text())["runs"].items():
            for scenario, rounds in by.items():
                runs.setdefault(broker, {}).setdefault(scenario, []).extend(rounds)
    rounds = max((len(r) for by in runs.values() for r in by.values()), default=0)
    print(f"{len(paths)} runs, {rounds} rounds per scenario and broker, medians (min-max)")
    rows = summarize(runs)
    print(markdown(rows))
    return {"runs": runs, "rows": rows}


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--brokers", default="kop,kafka", help="comma separated: kop, kafka")
    ap.add_argument("--records", type=int, default=100_000, help="records of the transactional producer run")
    ap.add_argument("--duration-ms", type=int, default=100, help="--transaction-duration-ms of the producer")
    ap.add_argument("--transactions", type=int, default=200, help="transactions in the mixed topic")
    ap.add_argument("--txn-records", type=int, default=1000, help="records per transaction of the mixed topic")
    ap.add_argument("--abort-every", type=int, default=4, help="every n-th transaction of the mixed topic aborts")
    ap.add_argument("--out", type=Path, help="the JSON result (default bench/results/transactions-<time>.json)")
    ap.add_argument("--report", type=Path, nargs="+", metavar="JSON", help="pool saved runs into one table")
    a = ap.parse_args(argv)
    if a.report:
        return pooled(a.report)
    a.stamp = int(time.time())
    tools = JavaTools()
    work = Path(tempfile.mkdtemp(prefix="kop-bench-txn-"))
    names = [b.strip() for b in a.brokers.split(",") if b.strip()]
    brokers = {n: (B.kop_broker(work) if n == "kop" else B.kafka_broker(work)) for n in names}
    runs: dict[str, dict[str, list[dict[str, float]]]] = {n: {} for n in names}
    mixed: dict[str, tuple[str, int, int]] = {}
    load = [round(os.getloadavg()[0], 2)]
    try:
        for n, b in brokers.items():
            b.start()
            topic = f"mixed-{a.stamp}"
            t0 = time.monotonic()
            committed, total = write_mixed(b.bootstrap, topic, a.transactions, a.txn_records, a.abort_every)
            check_mixed(b.bootstrap, topic, committed)
            mixed[n] = (topic, committed, total)
            print(f"{n}: mixed topic {committed} committed of {total} records written and checked in "
                  f"{time.monotonic() - t0:.0f} s", flush=True)
        for r in range(a.rounds):
            for n in names[r % len(names):] + names[:r % len(names)]:
                res = run_round(tools, brokers[n], r, a, mixed[n])
                for sc, m in res.items():
                    runs[n].setdefault(sc, []).append(m)
                    shown = ", ".join(f"{k}={m[k]:,.2f}" for k in SCENARIOS[sc] if k in m)
                    print(f"round {r} {n:6} {sc:12} {shown}", flush=True)
    finally:
        for b in brokers.values():
            b.stop()
        shutil.rmtree(work, ignore_errors=True)
    load.append(round(os.getloadavg()[0], 2))
    rows = summarize(runs)
    print(f"\nmedians of {a.rounds} rounds; load average {load[0]} before, {load[1]} after")
    print(markdown(rows))
    result = {"when": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), "argv": argv if argv is not None
              else sys.argv[1:], "load": load, "runs": runs, "rows": rows,
              "mixed": {n: {"committed": c, "total": t} for n, (_, c, t) in mixed.items()}}
    out = a.out or ROOT / "bench" / "results" / f"transactions-{time.strftime('%Y%m%d-%H%M%S')}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=1))
    print(f"written to {out}")
    return result


if __name__ == "__main__":
    main()
