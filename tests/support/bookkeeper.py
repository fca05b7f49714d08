"""A real ZooKeeper and real bookies as plain processes on loopback ports, from the Maven jars that
scripts/setup fetched into .cache/bookkeeper-libs/ (tools/java/bookkeeper/pom.xml). Nothing is mocked.

    cluster = shared_cluster()          # started once per test process, stopped at exit
    cluster.zk_connect                  # "127.0.0.1:<port>"
    cluster.metadata_service_uri        # "zk+hierarchical://127.0.0.1:<port>/ledgers"
    cluster.kill_bookie(i); cluster.start_bookie(i)
    cluster.shell("listledgers")        # BookKeeper's own shell (BookieShell) against this cluster
    KopBookKeeperBroker(dir, cluster)   # our broker on it: own ZooKeeper chroot, E/Qw/Qa 3/3/2 (e2e `kop-bk`)

Layout (docs/bookkeeper.md, Tests: the parallel-safe way; LocalBookKeeper hard-codes port 2181): ZooKeeper via
``ZooKeeperServerMain`` on a free port; ``/ledgers``, ``/ledgers/available`` and
``/ledgers/available/readonly`` created before any bookie starts (bookies do not create them); then each
bookie via ``org.apache.bookkeeper.server.Main --conf bk_<i>.conf`` on its own free port. Ready when every
bookie is registered under /ledgers/available.

Self-stopping: every JVM (ZooKeeper, bookies, the shell) gets the parent-death signal of
tests/support/proc.py (``die_with_parent``: PR_SET_PDEATHSIG = SIGKILL), so it dies with the test process
even when that is killed (SIGKILL included) and no atexit handler runs; in a new session, so a test's SIGINT
does not reach it. Every wait is bounded.

Four bookies by default, so that an ensemble of 3 can replace a failed one.
"""

from __future__ import annotations

import atexit
import logging
import os
import queue
import shutil
import signal
import subprocess
import tempfile
import threading
import time
import uuid
from concurrent.futures import Future
from pathlib import Path

from .broker import KopBroker
from .java import LOG4J2_CONFIG, REPO_ROOT, java_executable
from .net import free_port, port_open, tail, wait_until
from .proc import die_with_parent

_shared_lock = threading.RLock()

BOOKKEEPER_LIBS = Path(os.environ.get("KOP_BOOKKEEPER_LIBS", REPO_ROOT / ".cache" / "bookkeeper-libs"))

# As BookKeeper's bin/common.sh runs a bookie on Java >= 9, with small heaps for tests. SerialGC: 2-core
# CI machines run five of these JVMs; parallel GC threads would only fight each other.
_ADD_OPENS = [
    "-Dio.netty.tryReflectionSetAccessible=true",
    "--add-opens", "java.base/java.nio=ALL-UNNAMED",
    "--add-opens", "java.base/jdk.internal.misc=ALL-UNNAMED",
    "--add-opens", "java.base/java.io=ALL-UNNAMED",
    "--add-opens", "java.base/java.util.zip=ALL-UNNAMED",
]
BOOKIE_JVM_OPTS = ["-Xms64m", "-Xmx256m", "-XX:MaxDirectMemorySize=256m", "-XX:+UseSerialGC", *_ADD_OPENS]
ZOOKEEPER_JVM_OPTS = ["-Xms32m", "-Xmx128m", "-XX:+UseSerialGC"]
SHELL_JVM_OPTS = ["-Xmx256m", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1", *_ADD_OPENS]

ZK_MAIN = "org.apache.zookeeper.server.ZooKeeperServerMain"
BOOKIE_MAIN = "org.apache.bookkeeper.server.Main"
SHELL_MAIN = "org.apache.bookkeeper.bookie.BookieShell"
# The shell prints its results through its logger at INFO: this config sends them to stdout.
SHELL_LOG4J2_CONFIG = REPO_ROOT / "tools" / "java" / "bookkeeper" / "log4j2-shell.properties"


class BookKeeperLibsMissing(RuntimeError):
    """The BookKeeper jars are not where scripts/setup puts them. Never a reason to skip: run `make test`."""


def check_bookkeeper_libs() -> Path:
    if not (BOOKKEEPER_LIBS / ".complete").exists() or not any(BOOKKEEPER_LIBS.glob("bookkeeper-server-*.jar")):
        raise BookKeeperLibsMissing(
            f"BookKeeper/ZooKeeper jars not found in {BOOKKEEPER_LIBS} - run scripts/setup (make test does it)"
        )
    return BOOKKEEPER_LIBS


def _java(main_class: str, args: list[str], jvm_opts: list[str], log_config: Path = LOG4J2_CONFIG) -> list[str]:
    return [
        java_executable(), *jvm_opts, f"-Dlog4j2.configurationFile={log_config}",
        "-cp", f"{check_bookkeeper_libs()}/*", main_class, *args,
    ]


class _Spawner:
    """Starts every JVM from one long-lived thread. Why: the kernel sends the parent-death signal when
    the *thread* that forked the child ends, not the process; a JVM started from a short-lived thread
    (asyncio.to_thread, a thread pool being shut down) would be killed with that thread."""

    def __init__(self) -> None:
        self._requests: queue.Queue = queue.Queue()
        threading.Thread(target=self._run, name="kop-jvm-spawner", daemon=True).start()

    def _run(self) -> None:
        while True:
            cmd, log_path, done = self._requests.get()
            try:
                with open(log_path, "ab") as log:
                    done.set_result(subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=log,
                                                     stderr=subprocess.STDOUT, start_new_session=True,
                                                     preexec_fn=die_with_parent))
            except BaseException as e:
                done.set_exception(e)

    def spawn(self, cmd: list[str], log_path: Path) -> subprocess.Popen:
        done: Future[subprocess.Popen] = Future()
        self._requests.put((cmd, log_path, done))
        return done.result(timeout=60)


_spawner: _Spawner | None = None


def _spawn(cmd: list[str], log_path: Path) -> subprocess.Popen:
    global _spawner
    with _shared_lock:
        if _spawner is None:
            _spawner = _Spawner()
    return _spawner.spawn(cmd, log_path)


def _stop(proc: subprocess.Popen | None, sig: int = signal.SIGTERM, timeout: float = 20) -> None:
    if proc is None or proc.poll() is not None:
        return
    proc.send_signal(sig)
    try:
        proc.wait(timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(30)


class Bookie:
    def __init__(self, index: int, base: Path, zk_connect: str, extra: dict[str, object] | None = None) -> None:
        self.index = index
        self.dir = base / f"bookie-{index}"
        self.dir.mkdir(parents=True, exist_ok=True)
        self.port = free_port()
        self.conf_path = self.dir / "bk.conf"
        self.log_path = self.dir / "bookie.log"
        self.proc: subprocess.Popen | None = None
        settings = {
            "bookiePort": self.port,
            "advertisedAddress": "127.0.0.1",
            "allowLoopback": "true",
            "metadataServiceUri": f"zk+hierarchical://{zk_connect}/ledgers",
            "journalDirectories": self.dir / "journal",
            "ledgerDirectories": self.dir / "ledgers",
            "ledgerStorageClass": "org.apache.bookkeeper.bookie.SortedLedgerStorage",
            "httpServerEnabled": "false",
            # The journal is written before an add is acknowledged, without fsync: it survives a killed
            # bookie process (the page cache stays), not a power loss - what tests need, at CI speed.
            "journalSyncData": "false",
            # Shared CI disks are often over BookKeeper's 95% default, which turns bookies read-only.
            "diskUsageThreshold": "0.999",
            "diskUsageWarnThreshold": "0.998",
            "diskCheckInterval": "60000",
            "numAddWorkerThreads": "1",
            "numReadWorkerThreads": "1",
            "zkTimeout": "10000",
            **(extra or {}),  # a caller's bk_server.conf keys (the bench's bookies) win over the tests' ones
        }
        self.conf_path.write_text("".join(f"{k}={v}\n" for k, v in settings.items()))

    @property
    def bookie_id(self) -> str:
        return f"127.0.0.1:{self.port}"

    def start(self) -> None:
        assert not self.alive(), f"bookie {self.index} is running"
        self.proc = _spawn(_java(BOOKIE_MAIN, ["--conf", str(self.conf_path)], BOOKIE_JVM_OPTS), self.log_path)

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None


class BookKeeperCluster:
    """ZooKeeper + `bookies` bookies under `base_dir`; see the module docstring."""

    def __init__(self, base_dir: Path, bookies: int = 4, bookie_settings: dict[str, object] | None = None) -> None:
        check_bookkeeper_libs()
        java_executable()
        self.base_dir = Path(base_dir)
        self.base_dir.mkdir(parents=True, exist_ok=True)
        self.zk_port = free_port()
        self.zk_dir = self.base_dir / "zookeeper"
        self.zk_dir.mkdir(exist_ok=True)
        self.zk_log = self.zk_dir / "zookeeper.log"
        self.zk_proc: subprocess.Popen | None = None
        self.bookies = [Bookie(i, self.base_dir, self.zk_connect, bookie_settings) for i in range(bookies)]
        self.shell_conf = self.base_dir / "client.conf"
        self.shell_conf.write_text(f"metadataServiceUri={self.metadata_service_uri}\n")
        self._zk_client = None

    @property
    def zk_connect(self) -> str:
        return f"127.0.0.1:{self.zk_port}"

    @property
    def metadata_service_uri(self) -> str:
        return f"zk+hierarchical://{self.zk_connect}/ledgers"

    # ---- lifecycle

    def start(self, timeout: float = 120) -> BookKeeperCluster:
        started = time.monotonic()
        self.start_zookeeper(timeout)
        zk = self.zk()
        for path in ("/ledgers/available/readonly",):
            zk.ensure_path(path)
        for b in self.bookies:  # all JVMs start concurrently; the waits below are bounded
            b.start()
        self.wait_registered([b.index for b in self.bookies], timeout - (time.monotonic() - started))
        return self

    def start_zookeeper(self, timeout: float = 60) -> None:
        cfg = self.zk_dir / "zoo.cfg"
        cfg.write_text(
            "tickTime=500\n"  # session timeouts are multiples of the tick: expiry tests stay short
            # The cap is 20 ticks (10 s) by default; tests of a ZooKeeper outage shorter than a production
            # session (30 s) ask for one. Clients that do not (the brokers below) get what they had.
            "maxSessionTimeout=30000\n"
            f"dataDir={self.zk_dir / 'data'}\n"
            f"clientPort={self.zk_port}\nclientPortAddress=127.0.0.1\n"
            "admin.enableServer=false\nmaxClientCnxns=0\n"
            "4lw.commands.whitelist=ruok,stat,srvr,mntr\n"
            "forceSync=no\n"
        )
        self.zk_proc = _spawn(_java(ZK_MAIN, [str(cfg)], ZOOKEEPER_JVM_OPTS), self.zk_log)
        wait_until(f"ZooKeeper on {self.zk_connect}", self._zk_ok, timeout, self.zk_proc, self.zk_log)

    def restart_zookeeper(self, kill: bool = True, timeout: float = 60) -> None:
        """SIGKILL (or stop) ZooKeeper and start it again on the same port and data. Sessions survive
        when it is back within their timeout (they are in its transaction log), so bookies stay
        registered; clients see a disconnection and reconnect."""
        _stop(self.zk_proc, signal.SIGKILL if kill else signal.SIGTERM)
        self.start_zookeeper(timeout)

    def _zk_ok(self) -> bool:
        if not port_open("127.0.0.1", self.zk_port):
            return False
        import socket

        try:
            with socket.create_connection(("127.0.0.1", self.zk_port), timeout=2) as s:
                s.sendall(b"ruok")
                return s.recv(4) == b"imok"
        except OSError:
            return False

    def zk(self):  # noqa: ANN201 - a kazoo client, imported lazily
        """A kazoo client of this ZooKeeper for the tests' own checks (started once)."""
        if self._zk_client is None:
            from kazoo.client import KazooClient

            # Its connection warnings (ZooKeeper restarted by a test, stopped at exit) are expected noise.
            quiet = logging.getLogger("tests.support.bookkeeper.kazoo")
            quiet.setLevel(logging.ERROR)
            from kop.storage.zookeeper.metadata import connection_retry

            # The brokers' reconnection policy: back within a second of a restarted ZooKeeper, so its
            # session outlives a test's ZooKeeper outage too.
            client = KazooClient(self.zk_connect, timeout=10, logger=quiet, connection_retry=connection_retry())
            client.start(timeout=30)
            self._zk_client = client
        return self._zk_client

    def available(self) -> list[str]:
        return [c for c in self.zk().get_children("/ledgers/available") if c != "readonly"]

    def wait_registered(self, indexes: list[int], timeout: float = 60) -> None:
        want = {self.bookies[i].bookie_id for i in indexes}
        deadline = time.monotonic() + max(timeout, 1)
        while not want <= set(self.available()):
            for i in indexes:
                b = self.bookies[i]
                if not b.alive():
                    raise RuntimeError(f"bookie {i} exited with {b.proc.returncode if b.proc else None}\n"
                                       f"--- {b.log_path}\n{tail(b.log_path)}")
            if time.monotonic() > deadline:
                logs = "\n".join(f"--- {self.bookies[i].log_path}\n{tail(self.bookies[i].log_path, 30)}"
                                 for i in indexes)
                raise RuntimeError(f"bookies {sorted(want - set(self.available()))} not registered after "
                                   f"{timeout:.0f}s\n{logs}")
            time.sleep(0.1)

    def kill_bookie(self, index: int) -> None:
        """SIGKILL: its connections drop at once; its ZooKeeper registration (ephemeral) lingers until its
        session expires, as with a real crash."""
        _stop(self.bookies[index].proc, signal.SIGKILL)

    def pause_bookie(self, index: int) -> None:
        """SIGSTOP: the bookie keeps its connections open but answers nothing (a hung machine)."""
        proc = self.bookies[index].proc
        assert proc is not None and proc.poll() is None
        proc.send_signal(signal.SIGSTOP)

    def resume_bookie(self, index: int, timeout: float = 60) -> None:
        """SIGCONT, then wait until it is registered again: a pause longer than its ZooKeeper session
        (10 s) expires the session, and the bookie registers anew after it wakes up."""
        proc = self.bookies[index].proc
        if proc is not None and proc.poll() is None:
            proc.send_signal(signal.SIGCONT)
        self.ensure_all_up(timeout)

    def ensure_all_up(self, timeout: float = 60) -> None:
        """Every bookie running and registered (restarting any that died): tests start from a whole
        cluster whatever the previous test did to it."""
        # A bookie can also die while we wait: after a ZooKeeper outage longer than its session, its
        # client opens a new session while the restored old one still holds its registration, and the
        # bookie gives up ("NodeExists ... expired") and exits. That is the previous test's doing too,
        # so it is restarted like any dead bookie, a bounded number of times.
        deadline = time.monotonic() + max(timeout, 1)
        restarts = {b.index: 0 for b in self.bookies}
        want = {b.bookie_id for b in self.bookies}
        while True:
            for b in self.bookies:
                if not b.alive():
                    if restarts[b.index] >= 3:
                        raise RuntimeError(f"bookie {b.index} exited {restarts[b.index]} times after restarts\n"
                                           f"--- {b.log_path}\n{tail(b.log_path)}")
                    restarts[b.index] += 1
                    self._spawn_bookie(b)
            if want <= set(self.available()):
                return
            if time.monotonic() > deadline:
                self.wait_registered([b.index for b in self.bookies], 0)  # raises with the bookies' logs
                return
            time.sleep(0.1)

    def start_bookie(self, index: int, timeout: float = 60) -> None:
        """(Re)start a bookie on its port and directories; waits until it is registered again."""
        b = self.bookies[index]
        if b.alive():
            return
        self._spawn_bookie(b)
        self.wait_registered([index], timeout)

    def _spawn_bookie(self, b: Bookie) -> None:
        # A killed bookie's ephemeral registration may not have expired yet: a restart would fail with
        # NodeExists ("bookie already registered"). Removing it is what the expiry would do.
        zk = self.zk()
        from kazoo.exceptions import NoNodeError

        try:
            zk.delete(f"/ledgers/available/{b.bookie_id}")
        except NoNodeError:
            pass
        b.start()

    def bookie_by_id(self, bookie_id: str) -> Bookie:
        for b in self.bookies:
            if b.bookie_id == bookie_id:
                return b
        raise KeyError(bookie_id)

    def stop(self) -> None:
        if self._zk_client is not None:
            try:
                self._zk_client.stop()
                self._zk_client.close()
            except Exception:
                pass
            self._zk_client = None
        for b in self.bookies:
            _stop(b.proc)
        _stop(self.zk_proc)

    # ---- BookKeeper's own shell

    def shell(self, *args: object, timeout: float = 120) -> subprocess.CompletedProcess:
        """Run `bookkeeper shell <args>` (BookieShell) against this cluster; stdout+stderr captured."""
        cmd = _java(SHELL_MAIN, ["-conf", str(self.shell_conf), *map(str, args)], SHELL_JVM_OPTS,
                    SHELL_LOG4J2_CONFIG)
        return subprocess.run(cmd, stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=timeout,
                              preexec_fn=die_with_parent)


_shared: BookKeeperCluster | None = None


def shared_cluster() -> BookKeeperCluster:
    """The one ZooKeeper + 4 bookies of this test process: started on first use (~10 s of JVM start-up,
    paid once), stopped at exit. Tests that kill a bookie start it again before they finish."""
    global _shared
    with _shared_lock:
        if _shared is None:
            base = Path(tempfile.mkdtemp(prefix="kop-bookkeeper-"))
            cluster = BookKeeperCluster(base)
            try:
                cluster.start()
            except BaseException:
                cluster.stop()
                raise

            def cleanup() -> None:
                cluster.stop()
                shutil.rmtree(base, ignore_errors=True)

            atexit.register(cleanup)
            _shared = cluster
        return _shared


# ---- our broker on this cluster

class KopBookKeeperBroker(KopBroker):
    """Our broker (tests/support/broker.py) with its storage on `cluster`: managed-ledger infos in a
    ZooKeeper chroot of its own, entries on the bookies (E/Qw/Qa 3/3/2 unless overridden). kill() and
    restart() keep the chroot and the ports - the data lives in ZooKeeper and on the bookies, the data
    directory holds nothing of it - so a restarted broker finds its topics again, as a restarted broker
    on the embedded store does from its data directory."""

    def __init__(self, base_dir: Path, cluster: BookKeeperCluster, overrides: dict[str, object] | None = None,
                 chroot: str | None = None, **kwargs: object) -> None:
        self.cluster = cluster
        self.chroot = chroot or f"/kop-{uuid.uuid4().hex[:12]}"
        settings: dict[str, object] = {
            "metadataStoreUrl": f"zk:{cluster.zk_connect}{self.chroot}",
            "bookkeeperMetadataServiceUri": cluster.metadata_service_uri,
            "managedLedgerDefaultEnsembleSize": 3,
            "managedLedgerDefaultWriteQuorum": 3,
            "managedLedgerDefaultAckQuorum": 2,
            # 10 s, what ZooKeeper's cap gave before the cap was raised to 30 s (zoo.cfg above): a killed
            # broker's nodes linger no longer than they did.
            "metadataStoreSessionTimeoutMillis": 10000,
            # A fixed admin port, kept across restarts: the broker's registration in ZooKeeper (which
            # names it) is then the same after a restart, which is how a broker recognises the node its
            # previous, SIGKILLed process left until that session expires.
            "webServicePort": free_port(),
            **(overrides or {}),
        }
        super().__init__(base_dir, settings, **kwargs)  # type: ignore[arg-type]

    def managed_ledger_view(self, name: str):  # noqa: ANN201 - kop.offset.inspect.ManagedLedgerView
        """The managed ledger `name` as kop.offset.inspect shows an embedded one: its info from ZooKeeper
        (read-only, works while the broker runs). The current ledger's entry count is not in the info
        (as on the embedded store, where it comes from scanning the file): left None here."""
        from kazoo.exceptions import NoNodeError

        from kop.managed_ledger.ledger import ML_ROOT
        from kop.managed_ledger.protobuf import ManagedLedgerInfo
        from kop.offset.inspect import LedgerView, ManagedLedgerView

        try:
            value, stat = self.cluster.zk().get(f"{self.chroot}{ML_ROOT}/{name}")
        except NoNodeError:
            return None
        if not value:
            return None
        info = ManagedLedgerInfo.decode(value)
        view = ManagedLedgerView(name, stat.version, properties=dict(info.properties))
        for i, li in enumerate(info.ledgers):
            view.ledgers.append(LedgerView(li.ledger_id, li.entries, li.size, li.timestamp,
                                           current=i == len(info.ledgers) - 1 and li.entries is None))
        return view

    def managed_ledger_names(self) -> list[str]:
        """Names of every managed ledger under the chroot (the nodes with a value, cursors excluded)."""
        from kop.managed_ledger.ledger import ML_ROOT

        zk = self.cluster.zk()
        root = f"{self.chroot}{ML_ROOT}"
        out: list[str] = []

        def walk(path: str, rel: str) -> None:
            if not zk.exists(path):
                return
            value, _ = zk.get(path)
            if rel and value:
                out.append(rel)
                return  # below a managed ledger: its cursors
            for child in sorted(zk.get_children(path)):
                walk(f"{path}/{child}", f"{rel}/{child}" if rel else child)

        walk(root, "")
        return out

    def purge(self) -> None:
        """Delete what this broker stored: the BookKeeper ledgers its managed ledgers reference (their
        metadata; the bookies' garbage collector then drops the data) and its chroot. Called after the
        broker stopped, so that a long suite does not pile up ledgers in the shared cluster."""
        from kazoo.exceptions import NoNodeError

        from kop.storage.bookkeeper import ledger_path

        zk = self.cluster.zk()
        for name in self.managed_ledger_names():
            view = self.managed_ledger_view(name)
            for lv in view.ledgers if view else []:
                try:
                    zk.delete(ledger_path(lv.ledger_id))
                except NoNodeError:
                    pass
        try:
            zk.delete(self.chroot, recursive=True)
        except NoNodeError:
            pass

    def __repr__(self) -> str:
        return f"KopBookKeeperBroker({self.bootstrap}, zk={self.cluster.zk_connect}{self.chroot}, dir={self.base_dir})"
