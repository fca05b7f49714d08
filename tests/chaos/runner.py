"""The chaos suite's runner: trials of load + one fault + heal + read-back + check, and the table.

    python -m tests.chaos.runner --trials 3                  # the full matrix (`make chaos`)
    python -m tests.chaos.runner --trials 1 --faults broker-kill,bookie-kill --load 3

A trial: fresh topics; the workloads of tests/chaos/workloads.py start; `load` seconds later the fault of
tests/chaos/nemesis.py is applied, held, healed; the run waits (bounded) until every workload has had an
acknowledgement after the heal (the stall), keeps the load `load / 2` seconds more, stops the workloads, reads
the logs back and hands the merged history to the checker. Trials of the ensemble fault run on a cluster of
their own (three ZooKeeper members); the others share one cluster, healed between trials.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path

from tests.support.clients import create_topic

from .checker import ANOMALIES, History, Report, check
from .nemesis import FAULTS, ChaosCluster, Fault, wait_serving
from .workloads import GroupConsumer, IdempotentProducer, PulsarWorkload, Remote, TransactionalCopier, now

PARTITIONS = 4
PULSAR_PARTITIONS = 2
RECOVERY_BOUND_S = 120  # how long to wait for every workload to be acknowledged after a heal
STARTUP_BOUND_S = 60  # how long to wait for every workload's first acknowledgement before the fault


# Pulsar duplicates are counted apart, in the table's "known" column (the short test allows them), from when
# they were a known gap: de-duplication forgot the sequence ids appended after its cursor's last write when a
# partition changed owners, so a producer's resend of records the old owner had stored was stored again. The
# new owner now replays the entries after the snapshot (kop/pulsar/dedup.py), and a SEND read just after a
# failed append is no longer stored behind it (the managed ledger's failure hook, issue #24's `bookie-quorum`).
# The column was 0 in the full matrices of 2026-11-29 and 2026-11-30 (27 trials each); a trial prints the
# first ones it counts.


@dataclass
class TrialResult:
    fault: str
    trial: int
    report: Report
    errors: list[str] = field(default_factory=list)
    known: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)  # the workloads' recoveries ("... session ended at <t>: ...")
    healed: float | None = None  # when the fault was healed (the workloads' clock, time.monotonic)

    def clean(self) -> bool:
        return not self.report.anomalies() and not self.report.stuck


def split_known(fault: str, report: Report) -> list[str]:
    """Move the Pulsar duplicates out of report.duplicated (the known gap above); returns them."""
    known = [d for d in report.duplicated if d.startswith("pulsar-")]
    report.duplicated = [d for d in report.duplicated if d not in known]
    return known


def workloads_for(cc: ChaosCluster) -> list[Remote]:
    """The four workloads on fresh topics, each in a process of its own (workloads.Remote says why)."""
    tag = uuid.uuid4().hex[:6]
    source, sink, ptopic = f"chaos-{tag}", f"chaos-{tag}-out", f"chaos-{tag}-pulsar"
    create_topic(cc.bootstrap, source, PARTITIONS)
    create_topic(cc.bootstrap, sink, PARTITIONS)
    create_topic(cc.bootstrap, ptopic, PULSAR_PARTITIONS)
    return [Remote(IdempotentProducer, cc.bootstrap, source, PARTITIONS),
            Remote(GroupConsumer, cc.bootstrap, source, f"chaos-group-{tag}"),
            Remote(TransactionalCopier, cc.bootstrap, source, sink, PARTITIONS),
            Remote(PulsarWorkload, cc.pulsar_url, ptopic, PULSAR_PARTITIONS, cc.bootstrap,
                   str(cc.base / f"pulsar-client-{tag}.log") if os.environ.get("KOP_CHAOS_KEEP") else None)]


def _wait_started(ws: list[Remote]) -> None:
    """Until every workload has had its first acknowledgement (bounded): the fault is to meet running clients,
    not processes still starting - on a loaded machine a workload's process took longer than the load time to
    start, and a Pulsar subscribe made during a lost ack quorum timed out (its workload died)."""
    deadline = now() + STARTUP_BOUND_S
    while not all(w.last_ack() > 0 for w in ws) and now() < deadline:
        time.sleep(0.1)


def _recovered(ws: list[Remote], healed: float) -> bool:
    return all(w.last_ack() >= healed for w in ws)


def run_trial(cc: ChaosCluster, fault: Fault, trial: int, load_s: float) -> TrialResult:
    ws = workloads_for(cc)
    healed = None
    try:
        for w in ws:
            w.start()
        _wait_started(ws)
        time.sleep(load_s)
        ctx = fault.apply(cc, trial)
        try:
            time.sleep(fault.hold(cc))
        finally:
            fault.heal(cc, ctx)
            healed = now()
            cc.heal()
            wait_serving(cc)
        deadline = now() + RECOVERY_BOUND_S
        while not _recovered(ws, healed) and now() < deadline:
            time.sleep(0.2)
        time.sleep(load_s / 2)
    finally:
        for w in ws:
            w.stop()
    history = History()
    for w in ws:
        w.collect()
        history.extend(w.history)
    notes = [e for w in ws for e in w.errors if "session ended" in e or e.startswith("txn status")]
    errors = [e for w in ws for e in w.errors if e not in notes]
    report = check(history, healed)
    return TrialResult(fault.name, trial, report, errors, split_known(fault.name, report), notes, healed)


def wall(at: float | None) -> str:
    """A time of the workloads' clock (time.monotonic) with the wall-clock time it was, as the broker logs have it."""
    if at is None:
        return "-"
    return f"{at:.1f} ({time.strftime('%H:%M:%S', time.localtime(time.time() - (now() - at)))})"


def table(results: list[TrialResult]) -> str:
    """One row per fault: trials, acked, each anomaly's count, max / median stall after heal, stuck."""
    head = ["fault", "trials", "acked", "lost", "duplicated", "wrong offsets", "reordered", "backward commits",
            "stale reads", "aborted reads", "undelivered", "max stall s", "median stall s", "stuck", "known"]
    rows = [head]
    for name in dict.fromkeys(r.fault for r in results):
        rs = [r for r in results if r.fault == name]
        stalls = [s for r in rs for s in r.report.stalls.values() if s is not None]
        counts = [str(sum(len(getattr(r.report, a)) for r in rs)) for a in ANOMALIES]
        rows.append([name, str(len(rs)), str(sum(r.report.acked for r in rs)), *counts,
                     f"{max(stalls):.1f}" if stalls else "-", f"{statistics.median(stalls):.1f}" if stalls else "-",
                     str(sum(len(r.report.stuck) for r in rs)), str(sum(len(r.known) for r in rs))])
    widths = [max(len(row[i]) for row in rows) for i in range(len(head))]
    lines = ["| " + " | ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)) + " |" for row in rows]
    lines.insert(1, "|" + "|".join("-" * (w + 2) for w in widths) + "|")
    return "\n".join(lines)


SLOW_STALL_S = 10.0  # a stall this long prints the workloads' recoveries with the trial's line


def run_matrix(faults: list[Fault], trials: int, load_s: float, brokers: int) -> list[TrialResult]:
    from tests.support.bookkeeper import shared_cluster
    from tests.support.zk_ensemble import ZooKeeperEnsembleCluster

    results: list[TrialResult] = []
    plain, ensemble = [f for f in faults if not f.ensemble], [f for f in faults if f.ensemble]
    if plain:
        cc = ChaosCluster(shared_cluster(), brokers).start()
        try:
            for f in plain:
                for t in range(trials):
                    results.append(_logged(run_trial(cc, f, t, load_s)))
        finally:
            cc.stop()
    if ensemble:
        bk = ZooKeeperEnsembleCluster(Path(tempfile.mkdtemp(prefix="kop-zk-ensemble-"))).start()
        try:
            cc = ChaosCluster(bk, brokers).start()
            try:
                for f in ensemble:
                    for t in range(trials):
                        results.append(_logged(run_trial(cc, f, t, load_s)))
            finally:
                cc.stop()
        finally:
            bk.stop()
    return results


def shortened(anomalies: dict[str, list[str]]) -> dict[str, str]:
    """Each anomaly's count and its first few records (a tail of thousands undelivered made lines of 100 kB)."""
    return {a: f"{len(v)}: {v[:3]}{' ...' if len(v) > 3 else ''}" for a, v in anomalies.items()}


def _logged(r: TrialResult) -> TrialResult:
    stalls = {w: None if s is None else round(s, 2) for w, s in r.report.stalls.items()}
    print(f"{r.fault} #{r.trial}: healed at {wall(r.healed)}, acked {r.report.acked}, "
          f"anomalies {shortened(r.report.anomalies()) or 'none'}, "
          f"stalls {stalls}{', errors ' + str(r.errors) if r.errors else ''}"
          f"{', known ' + shortened({'k': r.known})['k'] if r.known else ''}", flush=True)
    if any(s is None or s > SLOW_STALL_S for s in r.report.stalls.values()):  # how the slow ones recovered
        print("  notes:", *r.notes[-20:], sep="\n    ", flush=True)
    return r


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--trials", type=int, default=3)
    ap.add_argument("--faults", default="", help="comma-separated fault names (default: all)")
    ap.add_argument("--load", type=float, default=5.0, help="seconds of load before each fault")
    ap.add_argument("--brokers", type=int, default=3)
    ap.add_argument("--json", type=Path, help="write every trial's counts here")
    args = ap.parse_args(argv)
    wanted = {n for n in args.faults.split(",") if n}
    unknown = wanted - {f.name for f in FAULTS}
    if unknown:
        ap.error(f"unknown faults {sorted(unknown)}; known: {[f.name for f in FAULTS]}")
    faults = [f for f in FAULTS if not wanted or f.name in wanted]
    results = run_matrix(faults, args.trials, args.load, args.brokers)
    print(table(results))
    if args.json:
        args.json.write_text(json.dumps([{"fault": r.fault, "trial": r.trial, "acked": r.report.acked,
                                          **{a: getattr(r.report, a) for a in ANOMALIES},
                                          "stalls": r.report.stalls, "errors": r.errors} for r in results], indent=1))
    return 0 if all(r.clean() for r in results) else 1


if __name__ == "__main__":
    sys.exit(main())
