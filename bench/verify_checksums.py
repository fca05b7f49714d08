"""The cost of verifying each ledger entry's CRC on the fetch path (localStoreVerifyChecksums), A/B.

    python bench/verify_checksums.py [--records 1000000] [--record-size 200] [--rounds 3]
    python bench/verify_checksums.py --micro      # the ledger read path alone, in-process (~10 s)

One broker and one data set: kafka-producer-perf-test writes the records once (64 KiB batches, so each ledger
entry is a ~64 KiB batch, as a throughput producer makes them). Then, per round, the broker is restarted with
verification on and off in turn (the order alternates per round) and kafka-consumer-perf-test reads
everything from the start through a new group. Measured per read: the tool's fetch MB/s and the broker's
CPU seconds (utime + stime) while the consumer ran. Reads are served from the page cache, the case where
the CRC is the largest share of a fetch (from disk, the read itself dominates). Medians; the ratio on/off
goes to docs/benchmarks.md.

`--micro` isolates what verification adds: the local store's read path (read_up_to in 1 MiB fetches, as a
Fetch reads, page cache only) over ~200 MB of 64 KiB entries, on and off, alternating, best of 5 passes.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.brokers import KOP_COMMON, cpu_seconds  # noqa: E402
from bench.tools import run_consumer, run_producer  # noqa: E402
from tests.support.broker import KopBroker  # noqa: E402
from tests.support.java import JavaTools  # noqa: E402


def micro(passes: int = 5) -> None:
    from kop.storage.local.ledgers import LocalLedgerStore

    async def run(directory: str) -> None:
        store = LocalLedgerStore(directory, fsync="none")
        lh = await store.create_ledger()
        entry = bytes(range(256)) * 256  # 64 KiB
        n = 3200
        for _ in range(n):
            lh.append_nowait(entry)
        await lh.close()
        best: dict[bool, float] = {True: float("inf"), False: float("inf")}
        rh = await store.open_ledger(lh.ledger_id)
        for i in range(passes * 2):
            store.verify_reads = verify = i % 2 == 0
            t0 = time.perf_counter()
            first = 0
            while first < n:
                got = await rh.read_up_to(first, n - 1, 1 << 20)
                first += len(got)
            best[verify] = min(best[verify], time.perf_counter() - t0)
        await store.close()
        gb = n * len(entry) / 1e9
        for v in (False, True):
            print(f"micro verify={'on' if v else 'off'}: {best[v] / gb:.3f} s per GB read ({gb / best[v]:.2f} GB/s)")
        print(f"micro on/off time: {best[True] / best[False]:.2f}x")

    with tempfile.TemporaryDirectory(prefix="kop-verify-micro-") as d:
        asyncio.run(run(d))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--records", type=int, default=1_000_000)
    ap.add_argument("--record-size", type=int, default=200)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--micro", action="store_true", help="only the in-process read-path measurement")
    args = ap.parse_args()
    if args.micro:
        micro()
        return 0
    tools = JavaTools()
    results: dict[bool, list[tuple[float, float, float]]] = {True: [], False: []}
    with tempfile.TemporaryDirectory(prefix="kop-verify-bench-") as work:
        broker = KopBroker(Path(work) / "kop", {**KOP_COMMON, "localStoreFsyncPolicy": "none"})
        broker.start()
        try:
            run_producer(tools, broker.bootstrap, "verify", args.records, args.record_size, "1", "none", 1)
            for r in range(args.rounds):
                for verify in ((True, False) if r % 2 == 0 else (False, True)):
                    broker.stop()
                    broker.overrides["localStoreVerifyChecksums"] = str(verify).lower()
                    broker.start()
                    cpu0, t0 = cpu_seconds(broker.pid), time.monotonic()
                    res = run_consumer(tools, broker.bootstrap, "verify", args.records)
                    cpu = (cpu_seconds(broker.pid) or 0) - (cpu0 or 0)
                    wall = time.monotonic() - t0
                    results[verify].append((res["c_fetch_mbps"], cpu, wall))
                    print(f"round {r} verify={verify}: fetch {res['c_fetch_mbps']:.1f} MB/s, broker CPU {cpu:.2f} s, "
                          f"wall {wall:.1f} s", flush=True)
        finally:
            broker.stop()
    med = {v: [statistics.median(x[i] for x in results[v]) for i in range(3)] for v in results}
    print("\n| verification | fetch MB/s | broker CPU s | wall s |\n|---|---:|---:|---:|")
    for v in (False, True):
        print(f"| {'on' if v else 'off'} | {med[v][0]:.1f} | {med[v][1]:.2f} | {med[v][2]:.1f} |")
    print(f"\non/off: fetch MB/s {med[True][0] / med[False][0]:.3f}x, broker CPU {med[True][1] / med[False][1]:.3f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
