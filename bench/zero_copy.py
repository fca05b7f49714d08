"""The zero-copy Fetch path (issue 27), A/B on one machine: broker CPU per MB consumed with the light Go generator.

    python bench/zero_copy.py [--rounds 3] [--mb 200] [--sizes 1k,100b] [--partitions 16]
    python bench/zero_copy.py --quick        # smoke: 1 round, 20 MB
    python bench/zero_copy.py --micro        # the store's read + the socket send alone, per entry size
    python bench/zero_copy.py --perf-tool lz4 # kafka-consumer-perf-test instead of the Go generator

Three arms of the same code, one broker each (ours, 1 worker, fsync none as the main bench), started in turn:
`verify` - localStoreVerifyChecksums=true (the default: every fetched entry is read and its CRC checked, so
no zero copy), `copy` - checksums off and fetchZeroCopy=false (read into the process and written, the path
before issue 27), `sendfile` - checksums off, fetchZeroCopy=true (the bodies of large entries go from the
ledger files with os.sendfile). Per round and arm: bench/loadgen produces N records over P partitions of a
fresh topic, then 4 clients consume them back; the broker's CPU (utime + stime, /proc) is read around the
consume phase. Medians of rounds per arm, and each arm / copy. The arms' order rotates per round, so that
a machine that gets busier during a run does not favour one arm.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import socket
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.brokers import KOP_COMMON  # noqa: E402
from bench.capacity import measure_capacity  # noqa: E402
from bench.scenarios import CapacityScenario  # noqa: E402
from tests.support.broker import KopBroker  # noqa: E402

ARMS = {
    "verify": {"localStoreVerifyChecksums": "true", "fetchZeroCopy": "true"},
    "copy": {"localStoreVerifyChecksums": "false", "fetchZeroCopy": "false"},
    "sendfile": {"localStoreVerifyChecksums": "false", "fetchZeroCopy": "true"},
}


def _drain(sock: socket.socket) -> None:
    buf = bytearray(1 << 20)
    while sock.recv_into(buf):
        pass


def _send_copy(sock: socket.socket, entries: list) -> None:
    """The copy path's pattern: the range read with one pread, per entry 8 bytes + a view, one sendmsg."""
    parts: list = []
    for e in entries:
        parts += [b"\0" * 8, e[8:]]
    _sendmsg_all(sock, parts)


def _sendmsg_all(sock: socket.socket, parts: list) -> None:
    view = [memoryview(p) for p in parts]
    while view:
        n = sock.sendmsg(view[:1024])
        while view and n >= len(view[0]):
            n -= len(view[0])
            view.pop(0)
        if view and n:
            view[0] = view[0][n:]


def _send_spans(sock: socket.socket, entries: list) -> None:
    """The zero-copy pattern (a batch stored with its base offset): per entry its head read (read_spans) and one
    sendfile of the whole entry, corked."""
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_CORK, 1)
    fd = sock.fileno()
    for e in entries:
        if e.rest is None:
            _sendmsg_all(sock, [e.head])
            continue
        off, left = e.rest.offset - len(e.head), e.rest.length + len(e.head)
        while left:
            n = os.sendfile(fd, e.rest.file.fd, off, left)
            off, left = off + n, left - n
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_CORK, 0)


def micro(sizes: list[int], total_mb: int = 100, passes: int = 3) -> None:
    """The store's read and the socket send alone, in-process: CPU of the sending thread (time.thread_time: its
    syscalls and the loopback delivery they run) per MB, for entries of each size, copy path vs spans."""
    from kop.storage.local.ledgers import LocalLedgerStore

    async def run(directory: str, size: int) -> dict[str, float]:
        store = LocalLedgerStore(directory, fsync="none", verify_reads=False)
        lh = await store.create_ledger()
        entry = os.urandom(size)
        n = max(1, total_mb * 1_000_000 // size)
        for _ in range(n):
            lh.append_nowait(entry)
        await lh.close()
        lf = (await store.open_ledger(lh.ledger_id))._lf  # noqa: SLF001 - the bench measures the file layer
        best = {"copy": float("inf"), "spans": float("inf")}
        for i in range(passes * 2):
            arm = "copy" if i % 2 == 0 else "spans"
            with socket.socket() as server:
                server.bind(("127.0.0.1", 0))
                server.listen(1)
                a = socket.create_connection(server.getsockname())
                b, _ = server.accept()
            reader = threading.Thread(target=_drain, args=(b,))
            reader.start()
            t0 = time.thread_time()
            first = 0
            while first < n:
                if arm == "copy":
                    got = lf.read_range(first, n - 1, 1 << 20, False)
                    _send_copy(a, got)
                else:
                    spans = lf.read_spans(first, n - 1, 1 << 20, 0, 512)
                    got = spans if spans is not None else []
                    _send_spans(a, got)
                first += len(got)
            best[arm] = min(best[arm], time.thread_time() - t0)
            a.close()
            reader.join()
            b.close()
        await store.close()
        mb = n * size / 1e6
        return {arm: t * 1000 / mb for arm, t in best.items()}

    import kop.storage.local.ledgers as ledgers

    ledgers.SPAN_MIN_ENTRY = 0  # measure spans at every size
    print("entry bytes | sender CPU ms/MB: copy | spans | spans / copy")
    for size in sizes:
        with tempfile.TemporaryDirectory(prefix="kop-zc-micro-") as d:
            got = asyncio.run(run(d, size))
        print(f"{size:>11} | {got['copy']:.3f} | {got['spans']:.3f} | {got['spans'] / got['copy']:.2f}", flush=True)


def perf_tool(rounds: int, mb: float, codec: str) -> None:
    """The perf-tool consumer row (p-1k-1p-1-<codec>'s consumer): kafka-producer-perf-test writes 1 KiB records to
    one partition once (the main bench's settings), then per round the broker restarts as each arm in turn and
    kafka-consumer-perf-test reads everything through a new group; the broker's CPU while it reads."""
    from bench.brokers import cpu_seconds
    from bench.tools import run_consumer, run_producer
    from tests.support.java import JavaTools

    tools = JavaTools()
    n = int(mb * 1_000_000 / 1024)
    results: dict[str, list[tuple[float, float]]] = {arm: [] for arm in ARMS}
    with tempfile.TemporaryDirectory(prefix="kop-zc-perf-") as work:
        broker = KopBroker(Path(work) / "kop", {**KOP_COMMON, "localStoreFsyncPolicy": "none", **ARMS["copy"]})
        broker.start(120)
        try:
            run_producer(tools, broker.bootstrap, "zc", n, 1024, "1", codec, 1)
            for rnd in range(rounds):
                arms = list(ARMS)[rnd % len(ARMS):] + list(ARMS)[:rnd % len(ARMS)]
                for arm in arms:
                    broker.stop()
                    broker.overrides.update(ARMS[arm])
                    broker.start(120)
                    cpu0 = cpu_seconds(broker.pid) or 0.0
                    res = run_consumer(tools, broker.bootstrap, "zc", n)
                    cpu = (cpu_seconds(broker.pid) or 0.0) - cpu0
                    results[arm].append((res["c_fetch_mbps"], cpu * 1000 / mb))
                    print(f"round {rnd + 1} {arm}: fetch {res['c_fetch_mbps']:.1f} MB/s, broker {cpu * 1000 / mb:.3f} "
                          f"CPU ms/MB (whole consumer run, group join included)", flush=True)
        finally:
            broker.stop()
    base = statistics.median(x[1] for x in results["copy"])
    print(f"\nmedians, 1 KiB records, 1 partition, {codec} | fetch MB/s | broker CPU ms/MB | CPU / copy arm")
    for arm, rs in results.items():
        cpu = statistics.median(x[1] for x in rs)
        print(f"{arm:>9} | {statistics.median(x[0] for x in rs):.1f} | {cpu:.3f} | {cpu / base:.2f}")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--mb", type=float, default=200, help="MB produced (and consumed) per run")
    ap.add_argument("--sizes", default="1k,100b", help="record sizes: 1k, 100b")
    ap.add_argument("--partitions", type=int, default=16)
    ap.add_argument("--quick", action="store_true", help="1 round of 20 MB")
    ap.add_argument("--perf-tool", metavar="CODEC", help="the perf-tool consumer row instead (none or lz4)")
    ap.add_argument("--micro", action="store_true", help="only the in-process read+send per entry size (~20 s)")
    a = ap.parse_args(argv)
    if a.perf_tool:
        perf_tool(a.rounds, a.mb, a.perf_tool)
        return 0
    if a.micro:
        micro([1 << 10, 4 << 10, 8 << 10, 16 << 10, 64 << 10, 256 << 10, 1 << 20], 20 if a.quick else 100)
        return 0
    if a.quick:
        a.rounds, a.mb = 1, 20
    results: dict[tuple[str, str], list[dict[str, float]]] = {}
    with tempfile.TemporaryDirectory(prefix="kop-zc-") as tmp:
        brokers = {arm: KopBroker(Path(tmp) / arm, {**KOP_COMMON, "localStoreFsyncPolicy": "none", **cfg})
                   for arm, cfg in ARMS.items()}
        for rnd in range(a.rounds):
            arms = list(ARMS)[rnd % len(ARMS):] + list(ARMS)[:rnd % len(ARMS)]
            for size in a.sizes.split(","):
                sc = CapacityScenario(size, a.partitions)
                n = sc.records(a.mb, 10_000_000)
                for arm in arms:
                    b = brokers[arm].start(120)
                    try:
                        got = measure_capacity(b.bootstrap, b.pid, f"zc-{size}-{rnd}-{os.urandom(3).hex()}", sc, n)
                    finally:
                        b.stop()
                    results.setdefault((size, arm), []).append(got)
                    print(f"round {rnd + 1} {sc.name} {arm}: consume {got['cap_c_mbps']:.0f} MB/s, broker "
                          f"{got.get('cap_c_cpu_ms_per_mb', float('nan')):.3f} CPU ms/MB consumed", flush=True)
    print("\nmedians | CPU ms per MB consumed | consume MB/s | CPU / copy arm")
    for size in a.sizes.split(","):
        base = statistics.median(r["cap_c_cpu_ms_per_mb"] for r in results[(size, "copy")])
        for arm in ARMS:
            rs = results[(size, arm)]
            cpu = statistics.median(r["cap_c_cpu_ms_per_mb"] for r in rs)
            mbps = statistics.median(r["cap_c_mbps"] for r in rs)
            print(f"{size:>5} {arm:>9} | {cpu:.3f} | {mbps:.0f} | {cpu / base:.2f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
