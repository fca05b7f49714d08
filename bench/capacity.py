"""The capacity scenarios (issue 27): a light Go load generator (bench/loadgen, franz-go) against Apache Kafka and
against ours with 1, 2 ... N worker processes, recording the broker's CPU per MB produced and per MB consumed.

Why a separate generator: the perf tools of the other scenarios are JVMs that use several times our broker's CPU
on a 2-core machine, so their ratios partly measure the generator. bench/loadgen costs far less per record (one
shared value buffer, recycled records, 1 MiB batches, no group), and prints its own CPU (getrusage), so each
row says how much of the machine the generator took.

    cap-1k-16p    1 KiB records over 16 partitions, acks=all, produced then consumed back (no group)
    cap-100b-16p  100 B records, 16 partitions
    cap-1k-64p / cap-100b-64p: the same over 64 partitions

CPU of a broker = utime + stime of its whole process tree (/proc: the supervisor, every worker, and - through the
supervisor's cutime/cstime - any worker that exited and was reaped meanwhile; for Kafka its JVM), read before
and after each phase. psutil would do the same walk; /proc keeps the bench free of another dependency.
The binary is built on first use into .cache/loadgen (scripts/setup builds it too); a change of the Go sources
rebuilds it (a stamp holds their hash).
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import time
from pathlib import Path
from typing import Any

from bench.scenarios import CapacityScenario

ROOT = Path(__file__).resolve().parents[1]
SRC = ROOT / "bench" / "loadgen"
OUT_DIR = ROOT / ".cache" / "loadgen"
BINARY = OUT_DIR / "loadgen"
_TICK = os.sysconf("SC_CLK_TCK")


class LoadgenError(RuntimeError):
    """The generator could not be built or its run failed: the measurement is invalid, not slow."""


def _sources_hash() -> str:
    h = hashlib.sha256()
    for name in ("go.mod", "go.sum", "main.go"):
        h.update(name.encode() + b"\0" + (SRC / name).read_bytes())
    return h.hexdigest()


def binary() -> Path:
    """The generator's binary, built when missing or when its sources changed. The Go modules come from the
    module cache that scripts/setup filled (GOFLAGS=-mod=readonly: go.sum is the pin, nothing is resolved anew)."""
    stamp = OUT_DIR / ".sources"
    want = _sources_hash()
    if BINARY.exists() and stamp.exists() and stamp.read_text() == want:
        return BINARY
    if subprocess.run(["which", "go"], capture_output=True).returncode != 0:
        raise LoadgenError("go is not on PATH: the capacity benchmark builds bench/loadgen with it (scripts/setup)")
    OUT_DIR.mkdir(parents=True, exist_ok=True)
    tmp = OUT_DIR / f"loadgen.tmp.{os.getpid()}"
    env = dict(os.environ, GOFLAGS="-mod=readonly -buildvcs=false", CGO_ENABLED="0")
    r = subprocess.run(["go", "build", "-trimpath", "-o", str(tmp), "."], cwd=SRC, env=env,
                       capture_output=True, text=True)
    if r.returncode != 0:
        raise LoadgenError(f"go build of bench/loadgen failed (run scripts/setup to fetch its modules):\n{r.stderr}")
    tmp.replace(BINARY)  # atomic: a concurrent user sees the old binary or the new one, never half of one
    stamp.write_text(want)
    return BINARY


# Clients the generator runs at once (`-clients`). One idempotent franz-go producer keeps one request in flight
# per broker connection, so with one client a run measured the request round trip (our 1-worker broker and
# Kafka both sat below half a core while "at capacity"); 4 connections keep either broker busy on 2 cores
# without making the generator the heavier process.
GENERATOR_CLIENTS = 4


def run_loadgen(bootstrap: str, topic: str, records: int, size: int, partitions: int, mode: str = "both",
                timeout_s: float = 600, clients: int = GENERATOR_CLIENTS) -> dict:
    """One generator run; its JSON line as a dict (records, bytes, produce_s, consume_s, consumed, cpu_s ...)."""
    cmd = [str(binary()), "-brokers", bootstrap, "-topic", topic, "-records", str(records), "-size", str(size),
           "-partitions", str(partitions), "-mode", mode, "-timeout", f"{int(timeout_s)}s",
           "-clients", str(min(clients, partitions))]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout_s + 60)
    if r.returncode != 0:
        raise LoadgenError(f"loadgen {mode} on {bootstrap} {topic} failed ({r.returncode}): {r.stderr[-2000:]}")
    return json.loads(r.stdout.strip().splitlines()[-1])


def _stat(pid: int) -> list[str] | None:
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return text[text.rindex(")") + 2:].split()  # fields 3.. of proc(5); the name in () may hold spaces


def tree_cpu_seconds(pid: int | None) -> float | None:
    """utime + stime of a process and all its live descendants, plus the CPU of the children it has reaped
    (cutime + cstime: a worker restarted during the run still counts)."""
    if pid is None:
        return None
    root = _stat(pid)
    if root is None:
        return None
    children: dict[int, list[int]] = {}
    stats: dict[int, list[str]] = {pid: root}
    for entry in os.listdir("/proc"):
        if entry.isdigit() and int(entry) != pid:
            f = _stat(int(entry))
            if f is not None:
                stats[int(entry)] = f
                children.setdefault(int(f[1]), []).append(int(entry))  # field 4: ppid
    total, todo = (int(root[13]) + int(root[14])) / _TICK, [pid]  # fields 16, 17: cutime, cstime
    while todo:
        p = todo.pop()
        total += (int(stats[p][11]) + int(stats[p][12])) / _TICK  # fields 14, 15: utime, stime
        todo += children.get(p, [])
    return total




def worker_counts(cpus: int | None = None) -> list[int]:
    """1, 2 and the machine's cores (N), each once: the brokers kop (1 worker), kop-w2, kop-wN."""
    n = cpus or os.cpu_count() or 1
    return sorted({1, 2, n})


def broker_name(workers: int) -> str:
    return "kop" if workers == 1 else f"kop-w{workers}"


def measure_capacity(bootstrap: str, pid: int | None, topic: str, sc: CapacityScenario, n: int) -> dict[str, float]:
    """Create the topic, produce n records with the generator, then consume them back; the broker tree's CPU
    is read around each phase. Raises LoadgenError when fewer records come back than were acknowledged."""
    from tests.support.clients import create_topic

    create_topic(bootstrap, topic, sc.partitions)
    mb = n * sc.record_size / 1e6
    c0 = tree_cpu_seconds(pid)
    p = run_loadgen(bootstrap, topic, n, sc.record_size, sc.partitions, "produce")
    c1 = tree_cpu_seconds(pid)
    c = run_loadgen(bootstrap, topic, n, sc.record_size, sc.partitions, "consume")
    c2 = tree_cpu_seconds(pid)
    if c["consumed"] < n:
        raise LoadgenError(f"{bootstrap} {topic}: consumed {c['consumed']} of {n} acknowledged records")
    out = {"cap_p_mbps": p["produce_mb_per_s"], "cap_p_rps": p["produce_records_per_s"],
           "cap_c_mbps": c["consume_mb_per_s"], "cap_c_rps": c["consume_records_per_s"],
           "gen_p_cpu_ms_per_mb": p["produce_cpu_s"] * 1000 / mb, "gen_c_cpu_ms_per_mb": c["consume_cpu_s"] * 1000 / mb}
    if None not in (c0, c1, c2):
        assert c0 is not None and c1 is not None and c2 is not None
        out |= {"cap_p_cpu_ms_per_mb": (c1 - c0) * 1000 / mb, "cap_c_cpu_ms_per_mb": (c2 - c1) * 1000 / mb,
                "cap_p_cores": (c1 - c0) / p["produce_s"], "cap_c_cores": (c2 - c1) / c["consume_s"],
                "cpu_s": c2 - c0}
    return out


def start_worker_brokers(work: Path, fsync: str, counts: list[int]) -> dict[str, Any]:
    """Ours as a node of k workers for each k > 1 in counts (the 1-worker broker is the bench's `kop`)."""
    from bench.brokers import KOP_COMMON
    from tests.support.broker import KopBroker

    out: dict[str, Any] = {}
    for k in counts:
        if k > 1:
            b = KopBroker(work / f"kop-w{k}", {**KOP_COMMON, "localStoreFsyncPolicy": fsync, "numWorkers": k})
            b.start(timeout=120)
            out[broker_name(k)] = b
    return out


def run_phase(bench, scenarios: list[CapacityScenario], a, work: Path) -> None:
    """The capacity phase: Kafka and ours (the bench's running brokers) plus ours as nodes of 2 ... N workers
    (started here, stopped at the end), each scenario against each broker per round, the order rotated every
    round as the other phases do; measurements go to bench.measurements (medians by bench/report.py)."""
    counts = worker_counts()
    print(f"bench: capacity phase, ours with {', '.join(map(str, counts))} worker(s)", flush=True)
    extra: dict[str, Any] = {}
    try:
        extra = start_worker_brokers(work, a.kop_fsync, counts)
        brokers = {"kafka": bench.brokers["kafka"], "kop": bench.brokers["kop"], **extra}
        for b in brokers.values():  # untimed: Kafka's JIT and our workers' first-connection paths
            topic = f"cap-warmup-{bench.stamp}-{os.urandom(3).hex()}"
            measure_capacity(b.bootstrap, None, topic, CapacityScenario("1k", 16), 20_000)
        for rnd in range(1, a.rounds + 1):
            for sc in scenarios:
                n = sc.records(a.producer_mb, a.max_records)
                for name in bench.order(list(brokers), rnd):
                    _one(bench, brokers[name], name, sc, rnd, n)
    except Exception as e:  # noqa: BLE001 - a node that does not start must not throw away the run
        bench.errors.append(f"capacity phase: {str(e).splitlines()[0][:300]}")
    finally:
        for b in extra.values():
            b.stop()


def _one(bench, b, name: str, sc: CapacityScenario, rnd: int, n: int) -> None:
    t0 = time.monotonic()
    try:
        metrics = measure_capacity(b.bootstrap, b.pid, f"{sc.name}-{rnd}-{bench.stamp}", sc, n)
    except Exception as e:  # noqa: BLE001 - one failed run must not throw away the others
        msg = f"{sc.name} on {name}, round {rnd}: {str(e).splitlines()[0][:300]}"
        print(f"  FAILED {msg}", flush=True)
        bench.errors.append(msg)
        return
    bench.measurements.append({"scenario": sc.name, "broker": name, "round": rnd, "metrics": metrics,
                               "wall_s": round(time.monotonic() - t0, 1)})
    shown = ", ".join(f"{k}={metrics[k]:,.2f}" for k in ("cap_p_mbps", "cap_c_mbps", "cap_p_cpu_ms_per_mb",
                                                          "cap_c_cpu_ms_per_mb") if k in metrics)
    print(f"  round {rnd} {sc.name:24s} {name:6s} {shown}  ({time.monotonic() - t0:.0f} s)", flush=True)
