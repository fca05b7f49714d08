"""The supervisor of a node of several worker processes: `kop standalone` with numWorkers > 1.

What it does, in order:

1. Opens the embedded storage once, alone: the start-up damage check and the garbage collection of
   unreferenced ledgers run here, while no worker writes (a worker never collects: a ledger another worker
   has just created would look unreferenced). Then it holds the ledger directory's lock for the node's life,
   so a second node or broker on the same data dir is refused, as for one process.
2. Binds the node's ports - each Kafka listener, Pulsar's brokerServicePort[Tls] - and hands the listening sockets
   to every worker (kop/net/shared.py): a client bootstraps on them whichever worker is up. It binds each
   worker's own ports too and keeps them: a restarted worker listens where clients knew it (the same numbers
   again after a node restart, when they are free).
3. Serves the node's admin HTTP address itself (kop/node/admin.py: /metrics of all workers, labelled by worker;
   the rest forwarded to a worker).
4. Starts worker i = `kop standalone` with the same arguments and KOP_NODE_WORKER=i/N (kop/node/worker.py),
   and starts it again whenever it exits without being asked to (a crash, kill -9): at once when it had run
   10 s, else after a back-off doubling from 0.5 s to 10 s. Workers die with the supervisor (PDEATHSIG).
5. SIGTERM / SIGINT: SIGTERM to every worker, each stops gracefully (ledgers sealed); a worker still running
   after brokerShutdownTimeoutMs + 30 s, or a second signal, gets SIGKILL. Workers run in sessions of
   their own, so a terminal's Ctrl-C (SIGINT to the whole foreground group) reaches the supervisor only,
   and each worker is told once.
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import fcntl
import json
import logging
import os
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

from kop.cluster import listeners as named_listeners
from kop.cluster.workers import WORKERS_ROOT
from kop.config import BrokerConfig
from kop.net.acceptor import listen
from kop.net.shared import ENV as SHARED_ENV
from kop.node.admin import NodeAdmin
from kop.node.worker import ENV as WORKER_ENV
from kop.offset.storage import LEDGERS_DIR, METADATA_FILE
from kop.server.storage import open_embedded_storage
from kop.storage.api import StorageError
from kop.storage.local.metadata import SqliteMetadataStore

log = logging.getLogger("kop.node")

PORTS_ROOT = "/kop/node/ports"  # each worker's own port numbers, kept for the node's next run
_WORKER_MAIN = "import sys; from kop.cli import main; sys.exit(main())"
_PR_SET_PDEATHSIG = 1
STEADY_SECONDS = 10.0  # a worker that ran this long is restarted at once


def _die_with_parent() -> None:
    """Popen preexec_fn: the worker gets SIGKILL when the supervisor dies (Linux), so no orphan keeps
    writing the partitions of a node that a new supervisor may start again."""
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)


@dataclass
class Worker:
    index: int
    proc: subprocess.Popen[bytes] | None = None
    started: float = 0.0
    backoff: float = 0.5
    restart_at: float = 0.0
    restarts: int = 0
    exits: list[int] = field(default_factory=list)
    own: list[list[object]] = field(default_factory=list)  # [kind, listener name, fd] of its own ports


class Supervisor:
    def __init__(self, config: BrokerConfig, data_dir: Path, argv: list[str], workers: int) -> None:
        self.config = config
        self.data_dir = data_dir
        self.argv = argv
        self.workers = [Worker(i) for i in range(workers)]
        self.sockets: list[socket.socket] = []
        self.spec: list[list[object]] = []  # [kind, listener name, fd] of every shared socket
        self.metadata: SqliteMetadataStore | None = None
        self.admin: NodeAdmin | None = None
        self.stopping = False
        self._lock_fd = -1

    # ------------------------------------------------------------------ start
    async def prepare(self) -> None:
        """Steps 1-3 of the module docstring."""
        self.data_dir.mkdir(parents=True, exist_ok=True)
        storage = await open_embedded_storage(self.data_dir, self.config)  # damage check + garbage collection
        await storage.close()
        self._lock_fd = os.open(self.data_dir / LEDGERS_DIR / "LOCK", os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(self._lock_fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as e:
            raise StorageError(f"ledger directory {self.data_dir / LEDGERS_DIR} is in use by another process") from e
        self.metadata = SqliteMetadataStore(self.data_dir, durable=self.config.localStoreFsyncPolicy == "always",
                                            filename=METADATA_FILE)
        for name in await self.metadata.children(WORKERS_ROOT) if await self.metadata.exists(WORKERS_ROOT) else []:
            await self.metadata.delete(f"{WORKERS_ROOT}/{name}")  # a previous run's (their pids may be reused)
        for lst in self.config.listeners:
            self._share("kafka", lst.name, listen(lst.host or None, lst.port))
        if "pulsar" in [p.lower() for p in self.config.protocols]:
            bind = self.config.bindAddress or None
            self._share("pulsar", named_listeners.PLAIN, listen(bind, self.config.brokerServicePort))
            if self.config.brokerServicePortTls >= 0:
                self._share("pulsar", named_listeners.TLS, listen(bind, self.config.brokerServicePortTls))
        await self._bind_own_ports()
        if self.config.webServicePort >= 0:
            self.admin = NodeAdmin(self.config.webServiceBindAddress or None, self.config.webServicePort,
                                   self.worker_urls, len(self.workers))
            await self.admin.start()
            log.info("node admin HTTP at %s", self.admin.url)

    async def _bind_own_ports(self) -> None:
        """Bind each worker's own ports (kop/net/shared.py `listen_or_inherit`): the numbers of the node's
        previous run (/kop/node/ports/<i>) where they are free, so that clients that knew the workers' addresses
        reach them again after a node restart; new ephemeral ones otherwise."""
        assert self.metadata is not None
        wanted = [("kafka", lst.name, lst.host or None) for lst in self.config.listeners]
        if "pulsar" in [p.lower() for p in self.config.protocols]:
            wanted.append(("pulsar", named_listeners.PLAIN, self.config.bindAddress or None))
            if self.config.brokerServicePortTls >= 0:
                wanted.append(("pulsar", named_listeners.TLS, self.config.bindAddress or None))
        for w in self.workers:
            path = f"{PORTS_ROOT}/{w.index}"
            got = await self.metadata.get(path)
            before: dict[str, int] = json.loads(got[0]) if got is not None and got[0] else {}
            ports: dict[str, int] = {}
            for kind, name, host in wanted:
                key = f"{kind}:{name}"
                try:
                    socks = listen(host, before.get(key, 0))
                except OSError as e:
                    log.warning("worker %d's %s port %d of the previous run is taken (%s): a new one", w.index,
                                key, before.get(key, 0), e)
                    socks = listen(host, 0)
                self.sockets += socks
                w.own += [[kind + "-own", name, s.fileno()] for s in socks]
                ports[key] = socks[0].getsockname()[1]
            await self.metadata.put(path, json.dumps(ports).encode())

    def _share(self, kind: str, name: str, socks: list[socket.socket]) -> None:
        self.sockets += socks
        for s in socks:
            self.spec.append([kind, name, s.fileno()])
            host, port = s.getsockname()[:2]
            log.info("node %s listener %s on %s:%d (shared by every worker)", kind, name, host, port)

    async def registrations(self) -> dict[int, dict[str, object]]:
        """The live workers' registrations (kop/cluster/workers.py), by index."""
        assert self.metadata is not None
        out: dict[int, dict[str, object]] = {}
        for w in self.workers:
            got = await self.metadata.get(f"{WORKERS_ROOT}/{w.index}")
            if got is None or w.proc is None or w.proc.poll() is not None:
                continue
            with contextlib.suppress(ValueError):
                reg = json.loads(got[0])
                if reg.get("pid") == w.proc.pid:
                    out[w.index] = reg
        return out

    async def worker_urls(self) -> dict[int, str]:
        return {i: str(r["webServiceUrl"]) for i, r in (await self.registrations()).items() if r.get("webServiceUrl")}

    # ------------------------------------------------------------------ workers
    def spawn(self, w: Worker) -> None:
        env = dict(os.environ)
        env[WORKER_ENV] = f"{w.index}/{len(self.workers)}"
        env[SHARED_ENV] = json.dumps(self.spec + w.own)
        fds = [int(str(x[2])) for x in self.spec + w.own]
        w.proc = subprocess.Popen([sys.executable, "-c", _WORKER_MAIN, *self.argv], env=env, pass_fds=fds,
                                  start_new_session=True, preexec_fn=_die_with_parent)
        w.started = time.monotonic()
        log.info("worker %d started (pid %d)", w.index, w.proc.pid)

    def check(self, now: float) -> None:
        """Restart the workers that exited (module docstring, step 4)."""
        for w in self.workers:
            if w.proc is None:
                if now >= w.restart_at:
                    self.spawn(w)
                continue
            code = w.proc.poll()
            if code is None:
                continue
            ran = now - w.started
            w.exits.append(code)
            w.proc = None
            w.backoff = 0.5 if ran >= STEADY_SECONDS else min(w.backoff * 2, 10.0)
            w.restart_at = now if ran >= STEADY_SECONDS else now + w.backoff
            w.restarts += 1
            log.warning("worker %d exited with status %d after %.1f s; starting it again%s", w.index, code, ran,
                        "" if w.restart_at <= now else f" in {w.backoff:.1f} s")

    async def wait_ready(self, stop: asyncio.Event) -> None:
        """Log once every worker has registered (and, with an admin server, answers /ready with 200)."""
        while not stop.is_set():
            regs = await self.registrations()
            ok = len(regs) == len(self.workers)
            if ok and self.admin is not None:
                ok = not await self.admin.not_ready()
            if ok:
                log.info("kop standalone node ready: %d workers (broker ids %s), data dir %s", len(self.workers),
                         [int(str(r["brokerId"])) for _, r in sorted(regs.items())], self.data_dir.resolve())
                if self.admin is not None:  # last, so that tools reading the log find the node's, not a worker's
                    log.info("node admin HTTP listening on %s", self.admin.url)
                return
            await asyncio.sleep(0.2)

    async def stop_workers(self, again: asyncio.Event) -> int:
        """Step 5 of the module docstring; 0 when every worker stopped by itself, else 1."""
        self.stopping = True
        for w in self.workers:
            if w.proc is not None and w.proc.poll() is None:
                w.proc.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + self.config.brokerShutdownTimeoutMs / 1000 + 30
        forced = False
        while any(w.proc is not None and w.proc.poll() is None for w in self.workers):
            if again.is_set() or time.monotonic() > deadline:
                forced = True
                for w in self.workers:
                    if w.proc is not None and w.proc.poll() is None:
                        log.warning("worker %d did not stop: SIGKILL", w.index)
                        w.proc.kill()
            await asyncio.sleep(0.1)
        return 1 if forced else 0

    async def close(self) -> None:
        if self.admin is not None:
            await self.admin.stop()
        for s in self.sockets:
            s.close()
        if self.metadata is not None:
            await self.metadata.close()
        if self._lock_fd >= 0:
            os.close(self._lock_fd)


async def serve_node(config: BrokerConfig, data_dir: Path, argv: list[str], workers: int) -> int:
    """Run the node until SIGTERM / SIGINT; the exit status."""
    stop, again = asyncio.Event(), asyncio.Event()
    loop = asyncio.get_running_loop()

    def on_signal() -> None:
        (again if stop.is_set() else stop).set()

    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, on_signal)
    node = Supervisor(config, data_dir, argv, workers)
    try:
        await node.prepare()
        node.check(time.monotonic())  # starts every worker
        ready = asyncio.create_task(node.wait_ready(stop))
        while not stop.is_set():
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), 0.2)
            if not stop.is_set():
                node.check(time.monotonic())
        ready.cancel()
        log.info("shutting down %d workers", workers)
        code = await node.stop_workers(again)
        log.info("node stopped")
        return code
    finally:
        await node.close()
