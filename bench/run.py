#!/usr/bin/env python3
"""Side-by-side benchmark: our broker vs Apache Kafka 4.x on the same machine, with Kafka's own tools.

    make bench                                   # = python bench/run.py: everything, 3 rounds (~40 min, 2 cores)
    python bench/run.py --quick                  # smoke run: 1 round, small counts, docs untouched
    python bench/run.py --scenarios 'p-1k-*,e2e-*' --rounds 5
    python bench/run.py --list                   # scenario names
    python bench/run.py --pulsar [options]       # pulsar-client vs Apache Pulsar instead (bench/pulsar_clients.py)

Phases (each scenario's runs alternate between the brokers, the order swapped every round, medians over
rounds, ratio ours / Kafka; bench/scenarios.py names the scenarios):
1. producer matrix: kafka-producer-perf-test over {1 KiB, 100 B} x {1, 16 partitions} x {acks=1, all} x
   {none, lz4}, each followed by kafka-consumer-perf-test over the same records; then EndToEndLatency runs;
   then the share-group scenarios (bench/share.py): kafka-share-consumer-perf-test --threads 3 over a fresh
   1-partition topic, and produce -> share-consumer delivery latency (bench/java/ShareLatency.java);
2. BookKeeper rows: p-1k-16p-all-none against Kafka, ours embedded and ours on ZooKeeper + 4 bookies
   (E3/Qw3/Qa2); then against Kafka and ours on ZooKeeper + 1 bookie (E1/Qw1/Qa1, Kafka's RF=1 durability);
2a. capacity (bench/capacity.py): the light Go generator bench/loadgen (franz-go) produces then consumes
   {1 KiB, 100 B} x {16, 64 partitions} against Kafka and ours as nodes of 1, 2 and N (= cores) workers; the
   brokers' process-tree CPU per MB produced and consumed, and the generator's own CPU;
3. scale scenarios (bench/scale.py): random-offset fetch over 10^3..10^7 records, 1 000 connections,
   10 000 partitions.
Every run also records the CPU seconds of the broker process (/proc/<pid>/stat; Kafka's JVM, our broker, and
in BookKeeper mode the bookies' JVMs separately) and of the load generator (the perf tools' JVMs and this
process), so a ratio comes with the broker's CPU per MB beside it.
4. --profile: after phase 1, one extra, untimed round of each scenario that missed its goal (or of the given
   patterns) against our broker under py-spy (bench/profile.py), written to bench/results/<scenario>.folded and
   summarised under "Where the time goes"; these rounds are not in the medians.
Outputs: the ratio table (terminal), bench/results/bench-<time>.json, and (full runs) the generated section of
docs/benchmarks.md with docs/benchmarks.png and docs/benchmarks-offset-search.png.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import platform
import resource
import shlex
import subprocess
import sys
import tempfile
import time
import traceback
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from bench import brokers as B  # noqa: E402
from bench import capacity, chart, report, scale  # noqa: E402
from bench import profile as prof  # noqa: E402
from bench.scenarios import (  # noqa: E402
    BK_SCENARIOS,
    CAPACITY_SCENARIOS,
    SCALE_SCENARIOS,
    SHARE_LATENCY_SCENARIOS,
    SHARE_SCENARIOS,
    all_names,
    e2e_scenarios,
    matches,
    parse_patterns,
    producer_matrix,
)
from bench.share import run_share_consume, run_share_e2e  # noqa: E402
from bench.tools import run_e2e, run_producer, run_producer_scenario  # noqa: E402
from tests.support.java import JavaTools, kafka_version  # noqa: E402

RESULTS_DIR = ROOT / "bench" / "results"
DOCS = ROOT / "docs" / "benchmarks.md"
CHART = ROOT / "docs" / "benchmarks.png"
SEARCH_CHART = ROOT / "docs" / "benchmarks-offset-search.png"


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="smoke run: 1 round, small counts, docs untouched")
    ap.add_argument("--scenarios", help="comma-separated shell patterns of scenario names (default: all)")
    ap.add_argument("--list", action="store_true", help="print the scenario names and exit")
    ap.add_argument("--rounds", type=int, help="rounds of the producer/e2e/BookKeeper scenarios (default 3)")
    ap.add_argument("--scale-rounds", type=int, default=1, help="rounds of the scale scenarios (default 1)")
    ap.add_argument("--producer-mb", type=float, help="MB per producer run (default 200; quick 5)")
    ap.add_argument("--max-records", type=int, help="cap on records per producer run (default 1,000,000; quick 50,000)")
    ap.add_argument("--e2e-records", type=int, help="records per EndToEndLatency run (default 5,000; quick 500)")
    ap.add_argument("--search-max", type=int, help="largest offset-search topic on ours (default 10^7; quick 10^5)")
    ap.add_argument("--kafka-search-max", type=int, help="largest offset-search topic on Kafka (default = --search-max)")
    ap.add_argument("--search-samples", type=int, help="random offsets per topic (default 200; quick 20)")
    ap.add_argument("--connections", type=int, help="concurrent connections (default 1000; quick 200)")
    ap.add_argument("--partition-topics", type=int, help="topics of 100 partitions (default 100; quick 10)")
    ap.add_argument("--kop-fsync", default="none", help="our localStoreFsyncPolicy (default none = Kafka's default)")
    ap.add_argument("--kop-set", action="append", default=[], metavar="KEY=VALUE",
                    help="a broker config of ours for every phase, over the bench's (repeatable); e.g. "
                         "localStoreVerifyChecksums=false, Kafka's own setting (its broker checks no CRC when it "
                         "serves a fetch), under which our fetches go out by sendfile")
    ap.add_argument("--docs", action="store_true", help="rewrite docs/benchmarks.md and the charts even with --quick")
    ap.add_argument("--no-docs", action="store_true", help="do not rewrite docs/benchmarks.md or the charts")
    ap.add_argument("--keep", action="store_true", help="keep the brokers' data directories")
    ap.add_argument("--report", metavar="JSON", help="rewrite docs/benchmarks.md and the charts from a saved "
                    "bench/results/bench-*.json (no runs)")
    ap.add_argument("--profile", nargs="?", const="missed", metavar="PATTERNS",
                    help="one extra untimed round under py-spy of each producer/e2e scenario that misses its goal "
                         "(or of the comma-separated patterns given), summarised in docs/benchmarks.md")
    a = ap.parse_args(argv)
    q = a.quick
    defaults = {"rounds": 1 if q else 3, "producer_mb": 5 if q else 200, "max_records": 50_000 if q else 1_000_000,
                "e2e_records": 500 if q else 5000, "search_max": 100_000 if q else 10_000_000,
                "search_samples": 20 if q else 200, "connections": 200 if q else 1000,
                "partition_topics": 10 if q else 100}
    for k, v in defaults.items():
        if getattr(a, k) is None:
            setattr(a, k, v)
    if a.kafka_search_max is None:
        a.kafka_search_max = a.search_max
    a.write_docs = (a.docs or not q) and not a.no_docs
    return a


def machine_info() -> dict:
    def first(path: str, prefix: str) -> str:
        try:
            for line in Path(path).read_text().splitlines():
                if line.startswith(prefix):
                    return line.split(":", 1)[1].strip()
        except OSError:
            pass
        return "?"

    mem = first("/proc/meminfo", "MemTotal")
    java = subprocess.run(["java", "-version"], capture_output=True, text=True).stderr.splitlines()
    commit = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"], capture_output=True, text=True)
    dirty = subprocess.run(["git", "-C", str(ROOT), "status", "--porcelain", "--", "kop"], capture_output=True, text=True)
    return {
        "cpu": first("/proc/cpuinfo", "model name"), "cpus": os.cpu_count(),
        "mem_gib": round(int(mem.split()[0]) / 1024 / 1024, 1) if mem != "?" else "?",
        "kernel": platform.release(), "python": platform.python_version(), "java": java[0] if java else "?",
        "kafka": kafka_version(),
        "kop_commit": (commit.stdout.strip() or "?") + (" (kop/ modified)" if dirty.stdout.strip() else ""),
        "loadavg_1m_before": round(os.getloadavg()[0], 2),
    }


class Bench:
    """Runs scenarios against named brokers and collects measurements (one per scenario, broker, round)."""

    def __init__(self, a: argparse.Namespace, work: Path) -> None:
        self.a = a
        self.work = work
        self.tools = JavaTools()
        self.brokers: dict[str, object] = {}
        self.measurements: list[dict] = []
        self.errors: list[str] = []
        self.stamp = int(time.time())
        self.side_pids: dict[str, list[int]] = {}  # broker -> pids of its helpers (the bookies of kop-bk)
        self.profiles: dict[str, dict] = {}

    @staticmethod
    def load_cpu() -> float:
        """CPU seconds of this process and its reaped children: the perf tools' JVMs (subprocess.run waits for
        them) and the in-process clients of the scale scenarios - the load generator. The brokers are children
        too but are reaped only when stopped, after the last measurement."""
        total = 0.0
        for who in (resource.RUSAGE_SELF, resource.RUSAGE_CHILDREN):
            r = resource.getrusage(who)
            total += r.ru_utime + r.ru_stime
        return total

    def measure(self, scenario: str, broker: str, rnd: int, fn, mb: float | None = None,
                records: int | None = None) -> None:
        """One timed run; mb (data written, then read once) or records (e2e) give the CPU per unit of work."""
        b = self.brokers[broker]
        B.reset_peak_rss(b.pid)
        side = self.side_pids.get(broker, [])
        cpu0, load0 = B.cpu_seconds(b.pid), self.load_cpu()
        side0 = [B.cpu_seconds(p) for p in side]
        t0 = time.monotonic()
        try:
            metrics = fn(b.bootstrap, f"{scenario}-{rnd}-{self.stamp}")
        except Exception as e:  # noqa: BLE001 - one failed scenario must not throw away a 40-minute run
            msg = f"{scenario} on {broker}, round {rnd}: {str(e).splitlines()[0][:300]}"
            print(f"  FAILED {msg}", flush=True)
            traceback.print_exc(limit=3)
            self.errors.append(msg)
            return
        wall = time.monotonic() - t0
        rss = B.peak_rss_mib(b.pid)
        if rss is not None:
            metrics["rss_mib"] = rss
        cpu1 = B.cpu_seconds(b.pid)
        if cpu0 is not None and cpu1 is not None:
            cpu = cpu1 - cpu0
            metrics["cpu_s"] = cpu
            metrics["cpu_per_wall"] = cpu / wall if wall > 0 else float("nan")
            if mb:
                metrics["cpu_ms_per_mb"] = cpu * 1000 / mb
            if records:
                metrics["cpu_ms_per_1k"] = cpu * 1000 / (records / 1000)
        metrics["load_cpu_s"] = self.load_cpu() - load0
        side1 = [B.cpu_seconds(p) for p in side]
        if side and None not in side0 and None not in side1:
            metrics["side_cpu_s"] = sum(side1) - sum(side0)
        self.measurements.append({"scenario": scenario, "broker": broker, "round": rnd, "metrics": metrics,
                                  "wall_s": round(time.monotonic() - t0, 1)})
        shown = ", ".join(f"{k}={v:,.2f}" for k, v in metrics.items()
                          if k in report.METRICS and (report.METRICS[k].headline or k == "cpu_s"))
        print(f"  round {rnd} {scenario:24s} {broker:6s} {shown}  ({time.monotonic() - t0:.0f} s)", flush=True)

    def profile(self, scenario: str, fn) -> None:
        """One untimed round against our broker under py-spy (not in self.measurements: not in the medians)."""
        b = self.brokers["kop"]
        out = RESULTS_DIR / f"{scenario}.folded"
        cpu0, main0 = B.cpu_seconds(b.pid), B.cpu_seconds(b.pid, b.pid)
        t0 = time.monotonic()
        try:
            with prof.PySpy(b.pid, out):
                fn(b.bootstrap, f"{scenario}-profile-{self.stamp}")
        except Exception as e:  # noqa: BLE001 - a failed profile must not throw away the run
            msg = f"profile of {scenario}: {str(e).splitlines()[0][:300]}"
            print(f"  FAILED {msg}", flush=True)
            self.errors.append(msg)
            return
        wall = time.monotonic() - t0
        cpu1, main1 = B.cpu_seconds(b.pid), B.cpu_seconds(b.pid, b.pid)
        p = prof.parse_folded(out.read_text())
        entry = {"file": str(out.relative_to(ROOT)), "wall_s": wall, "samples": p.main_total,
                 "busy_share": p.busy_share, "lines": prof.summary_lines(p)}
        if None not in (cpu0, cpu1, main0, main1):
            entry["cpu_s"] = cpu1 - cpu0
            entry["main_cpu_share"] = (main1 - main0) / wall
        self.profiles[scenario] = entry
        print(f"  profile {scenario}: {wall:.0f} s, main thread CPU "
              f"{entry.get('main_cpu_share', float('nan')):.0%} of wall, Python busy "
              f"{(p.busy_share or 0):.0%} of samples -> {entry['file']}", flush=True)

    @staticmethod
    def order(names: list[str], rnd: int) -> list[str]:
        """Alternate which broker goes first: rotate the list by the round number."""
        k = (rnd - 1) % len(names)
        return names[k:] + names[:k]


BK_SETUP_NOTE = ("Bookies as Apache Pulsar ships them (DbLedgerStorage, numAddWorkerThreads=0), journalSyncData=false; "
                 "one untimed warm-up run of the scenario before the rounds (fresh JVMs).")


def bk_phase(bench: Bench, sc, notes: list[str]) -> None:
    """One BookKeeper-mode row: a fresh ZooKeeper + bookies and our broker on them (bench/brokers.py), the
    scenario's rounds against Kafka (and, on the E3 row, ours on embedded storage), then everything of it
    stopped, so that its JVMs do not share the 2 cores with the next phase."""
    a = bench.a
    e3 = sc.bk_copies == 3
    layout = "E3/Qw3/Qa2 on 4 bookies" if e3 else "E1/Qw1/Qa1 on 1 bookie"
    print(f"bench: starting ZooKeeper + bookies for the BookKeeper-mode broker ({layout})", flush=True)
    cluster = kop_bk = None
    try:
        cluster, make = B.kop_bk_broker(bench.work, sc.bk_copies)
        cluster.start()
        kop_bk = make()
        kop_bk.start()
    except Exception as e:  # noqa: BLE001 - the other phases still run
        bench.errors.append(f"BookKeeper mode ({layout}) did not start: {str(e).splitlines()[0][:300]}")
    else:
        bench.brokers["kop-bk"] = kop_bk
        bench.side_pids["kop-bk"] = [bk.proc.pid for bk in cluster.bookies if bk.proc is not None]
        n = sc.records(a.producer_mb, a.max_records)
        # The bookies' JVMs are new here, where Kafka's has run every phase before: one untimed run of the
        # scenario (produce, then consume) compiles their write and read paths first. Without it the JIT
        # compiler was the bookies' busiest thread, a third of their CPU in the first 100 MB (issue 27's
        # profile), and the first round paid for it (its bookies used a third more CPU than the next two).
        print(f"bench: warm-up of the BookKeeper-mode broker and its bookies ({layout})", flush=True)
        try:
            run_producer_scenario(bench.tools, sc, kop_bk.bootstrap, f"warmup-{sc.name}-{bench.stamp}",
                                  min(n, 100_000))
        except Exception as e:  # noqa: BLE001 - reported; the timed runs say whether the broker works
            bench.errors.append(f"warm-up of {sc.name}: {str(e).splitlines()[0][:300]}")
        names = ["kafka", "kop", "kop-bk"] if e3 else ["kafka", "kop-bk"]
        for rnd in range(1, a.rounds + 1):
            for name in bench.order(names, rnd):
                bench.measure(sc.name, name, rnd, lambda bs, topic: run_producer_scenario(
                    bench.tools, sc, bs, topic, n), mb=n * sc.record_size / 1e6)
        del bench.brokers["kop-bk"]
    finally:
        if kop_bk is not None:
            kop_bk.stop()
        if cluster is not None:
            cluster.stop()
    if e3:
        notes.append("BookKeeper row bk-p-*: ours with E3/Qw3/Qa2 on 4 local bookies (acks=all = 2 bookies have "
                     "the entry in their journal, in page cache) vs Kafka with RF=1 (acks=all = the one broker "
                     "has it in page cache): three copies against one; the bookies' 5 JVMs share the same 2 cores. "
                     + BK_SETUP_NOTE)
    else:
        notes.append("BookKeeper row bk-e1-p-*: ours with E1/Qw1/Qa1 on 1 local bookie, journalSyncData=false "
                     "(acks=all = the bookie wrote the entry to its journal, in page cache; fsync in the "
                     "background) vs Kafka with RF=1 (in page cache, no fsync per write): the same durability. "
                     + BK_SETUP_NOTE)


def share_round(bench: Bench, shares: list, share_e2es: list, rnd: int) -> None:
    """One round of the share-group scenarios (bench/share.py) on both brokers, the order rotated."""
    a = bench.a
    for sc in shares:
        n = sc.records(a.producer_mb, a.max_records)
        for name in bench.order(["kafka", "kop"], rnd):
            bench.measure(sc.name, name, rnd, lambda bs, topic, sc=sc, n=n: run_share_consume(
                bench.tools, sc, bs, topic, n), mb=n * sc.record_size / 1e6)
    for sc in share_e2es:
        for name in bench.order(["kafka", "kop"], rnd):
            bench.measure(sc.name, name, rnd, lambda bs, topic, sc=sc: run_share_e2e(
                bench.tools, sc, bs, topic, a.e2e_records), records=a.e2e_records)


def publish(result: dict, write_docs: bool, stamp: str) -> None:
    """The charts, and (write_docs) the generated section of docs/benchmarks.md, from a result."""
    summary, machine = result["summary"], result["machine"]
    title = f"kop / Apache Kafka {machine['kafka']}, {result['when']}, {machine['cpus']} CPUs"
    chart_dir = ROOT / "docs" if write_docs else RESULTS_DIR
    c1 = chart.ratio_chart(summary, chart_dir / (CHART.name if write_docs else f"bench-{stamp}.png"), title)
    c2 = chart.offset_search_chart(summary, chart_dir / (SEARCH_CHART.name if write_docs
                                                        else f"bench-{stamp}-offset-search.png"), title)
    for c in (c1, c2):
        if c is not None:
            print(f"bench: drew {c.relative_to(ROOT)}")
    if write_docs:
        charts = [c.name for c in (c1, c2) if c is not None]
        report.write_docs(DOCS, report.docs_section(result, report.markdown_table(summary), charts))
        print(f"bench: updated {DOCS.relative_to(ROOT)}")


def republish(path: Path) -> int:
    """--report: redraw the charts and rewrite docs/benchmarks.md from a saved result (no broker runs), e.g.
    after changing how the report is written; the numbers are the saved ones."""
    result = json.loads(path.read_text())
    result["summary"] = report.summarize(result["measurements"])
    result["rows"] = report.rows(result["summary"])
    print(report.text_table(result["summary"]))
    for line in report.where_time_goes(result["summary"], result.get("profiles"), result["measurements"]):
        print(line)
    publish(result, True, path.stem.removeprefix("bench-"))
    return 0


def apply_kop_set(pairs: list[str], into: dict) -> None:
    """--kop-set's KEY=VALUE pairs into `into`, the one dict every phase's brokers of ours start from
    (bench/brokers.py KOP_COMMON: the capacity nodes, the Pulsar phase and the tools' brokers read it too).
    A malformed pair stops the run before any broker starts."""
    for kv in pairs:
        key, sep, value = kv.partition("=")
        if not sep or not key.strip():
            raise SystemExit(f"--kop-set {kv!r}: expected KEY=VALUE")
        into[key.strip()] = value


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if args[:1] == ["--pulsar"]:  # the Pulsar-side comparison has its own brokers, phases and options
        from bench import pulsar_clients

        return pulsar_clients.main(args[1:])
    a = parse_args(argv)
    if a.list:
        print("\n".join(all_names()))
        return 0
    if a.report:
        return republish(Path(a.report))
    apply_kop_set(a.kop_set, B.KOP_COMMON)
    pats = parse_patterns(a.scenarios)
    producers = [s for s in producer_matrix() if matches(s.name, pats)]
    e2es = [s for s in e2e_scenarios() if matches(s.name, pats)]
    bks = [s for s in BK_SCENARIOS if matches(s.name, pats)]
    scales = [s for s in SCALE_SCENARIOS if matches(s, pats)]
    caps = [s for s in CAPACITY_SCENARIOS if matches(s.name, pats)]
    shares = [s for s in SHARE_SCENARIOS if matches(s.name, pats)]
    share_e2es = [s for s in SHARE_LATENCY_SCENARIOS if matches(s.name, pats)]
    command = "python bench/run.py" + ("" if not (argv if argv is not None else sys.argv[1:])
                                       else " " + shlex.join(argv if argv is not None else sys.argv[1:]))
    machine = machine_info()
    started = time.monotonic()
    work = Path(tempfile.mkdtemp(prefix="kop-bench-"))
    print(f"bench: work dir {work}; load average {machine['loadavg_1m_before']}", flush=True)
    bench = Bench(a, work)
    kafka, kop = B.kafka_broker(work), B.kop_broker(work, a.kop_fsync)
    bench.brokers = {"kafka": kafka, "kop": kop}
    notes: list[str] = []
    try:
        kafka.start()
        kop.start()
        if producers or e2es or bks or caps or shares or share_e2es:
            print("bench: warm-up (JIT of the tools and of Kafka, first-connection paths of ours)", flush=True)
            for b in bench.brokers.values():
                run_producer(bench.tools, b.bootstrap, f"warmup-{bench.stamp}", min(a.max_records, 50_000), 100,
                             "all", "none", 1)

        # 1. producer matrix and e2e latency
        for rnd in range(1, a.rounds + 1):
            for sc in producers:
                n = sc.records(a.producer_mb, a.max_records)
                for name in bench.order(["kafka", "kop"], rnd):
                    bench.measure(sc.name, name, rnd, lambda bs, topic, sc=sc, n=n: run_producer_scenario(
                        bench.tools, sc, bs, topic, n), mb=n * sc.record_size / 1e6)
            for sc in e2es:
                for name in bench.order(["kafka", "kop"], rnd):
                    bench.measure(sc.name, name, rnd, lambda bs, topic, sc=sc: run_e2e(
                        bench.tools, sc, bs, topic, a.e2e_records), records=a.e2e_records)
            share_round(bench, shares, share_e2es, rnd)

        # 4 (run here, while the phase-1 brokers are up). profiles of the scenarios that missed
        if a.profile and (producers or e2es):
            if not prof.PySpy.available():
                bench.errors.append("--profile: py-spy is not installed (pip install 'kop[bench]')")
            else:
                summary1 = report.summarize(bench.measurements)
                wanted = (report.missed_scenarios(summary1) if a.profile == "missed"
                          else [s for s in summary1 if matches(s, parse_patterns(a.profile))])
                print(f"bench: profiling {len(wanted)} scenario(s) on ours under py-spy (untimed): "
                      f"{', '.join(wanted) or 'none'}", flush=True)
                for sc in producers:
                    if sc.name in wanted:
                        n = sc.records(a.producer_mb, a.max_records)
                        bench.profile(sc.name, lambda bs, topic, sc=sc, n=n: run_producer_scenario(
                            bench.tools, sc, bs, topic, n))
                for sc in e2es:
                    if sc.name in wanted:
                        bench.profile(sc.name, lambda bs, topic, sc=sc: run_e2e(
                            bench.tools, sc, bs, topic, a.e2e_records))

        # 2a. capacity: the light Go generator against Kafka and ours with 1, 2 ... N workers (bench/capacity.py)
        if caps:
            capacity.run_phase(bench, caps, a, work)

        # 2. the BookKeeper-mode rows: E3/Qw3/Qa2 on 4 bookies, then E1/Qw1/Qa1 on one (matched durability)
        for sc in bks:
            bk_phase(bench, sc, notes)

        # 3. scale scenarios
        sizes = [n for n in report.SEARCH_SIZES if n <= a.search_max]
        for rnd in range(1, a.scale_rounds + 1):
            for sc in scales:
                for name in bench.order(["kafka", "kop"], rnd):
                    if sc == "scale-offset-search":
                        mine = [n for n in sizes if name != "kafka" or n <= a.kafka_search_max]

                        def fn(bs, topic, mine=mine):
                            built = scale.build_search_topics(bench.tools, bs, topic, mine)
                            res = scale.offset_search(bs, topic, mine, a.search_samples)
                            res["search_build_s"] = built
                            return res
                    elif sc == "scale-1000-connections":
                        def fn(bs, topic):
                            return scale.connections(bs, topic, a.connections)
                    else:
                        def fn(bs, topic):
                            return scale.many_partitions(bs, topic, topics=a.partition_topics,
                                                         read_topics=max(1, a.partition_topics // 5))
                    bench.measure(sc, name, rnd, fn)
        if "scale-offset-search" in scales and a.kafka_search_max < a.search_max:
            notes.append(f"Offset search: Kafka ran up to {a.kafka_search_max:,} records, ours up to "
                         f"{a.search_max:,} (time).")
    finally:
        for b in (kop, kafka):
            b.stop()
        if not a.keep:
            subprocess.run(["rm", "-rf", str(work)], check=False)

    machine["loadavg_1m_after"] = round(os.getloadavg()[0], 2)
    summary = report.summarize(bench.measurements)
    print("\n" + report.text_table(summary) + "\n")
    if report.capacity_table(summary):
        print(report.capacity_table(summary) + "\n\n" + report.expected_curve(summary) + "\n")
    for miss in report.goals(summary):
        print(f"goal missed: {miss}")
    for line in report.where_time_goes(summary, bench.profiles, bench.measurements):
        print(line)
    notes += [f"FAILED: {e}" for e in bench.errors]
    result = {
        "when": dt.datetime.now(dt.UTC).strftime("%Y-%m-%d %H:%M UTC"),
        "command": command,
        "settings": {k: v for k, v in vars(a).items() if k not in ("list",)},
        "machine": machine,
        "wall_min": (time.monotonic() - started) / 60,
        "measurements": bench.measurements,
        "summary": summary,
        "rows": report.rows(summary),
        "profiles": bench.profiles,
        "notes": notes,
    }
    RESULTS_DIR.mkdir(parents=True, exist_ok=True)
    stamp = dt.datetime.now().strftime("%Y%m%d-%H%M%S")
    out = RESULTS_DIR / f"bench-{stamp}.json"
    out.write_text(report.to_json(result))
    print(f"bench: wrote {out.relative_to(ROOT)} ({result['wall_min']:.1f} min)")
    publish(result, a.write_docs, stamp)
    return 1 if bench.errors else 0


if __name__ == "__main__":
    sys.exit(main())
