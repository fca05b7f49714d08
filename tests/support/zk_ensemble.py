"""A ZooKeeper ensemble of three local servers (a quorum config, QuorumPeerMain) with the bookies of
tests/support/bookkeeper.py on it, for faults that kill one member (tests/chaos). Same jars, same
self-stopping JVMs as the single ZooKeeper there.

    bk = ZooKeeperEnsembleCluster(base_dir).start()
    bk.zk_connect                # "127.0.0.1:<p1>,127.0.0.1:<p2>,127.0.0.1:<p3>" (kazoo, metadataStoreUrl)
    bk.metadata_service_uri      # "zk+hierarchical://127.0.0.1:<p1>;...;.../ledgers" (BookKeeper's separator)
    bk.kill_member(0); bk.start_member(0)

Ready means every running member answers `srvr` as leader or follower (a quorum is formed).
"""

from __future__ import annotations

import signal
import socket
import subprocess
from pathlib import Path

from .bookkeeper import ZOOKEEPER_JVM_OPTS, BookKeeperCluster, _java, _spawn, _stop
from .net import free_port, wait_until

QUORUM_MAIN = "org.apache.zookeeper.server.quorum.QuorumPeerMain"


class ZooKeeperEnsembleCluster(BookKeeperCluster):
    members = 3

    def __init__(self, base_dir: Path, bookies: int = 4) -> None:
        # (client, quorum, election) ports per member: chosen before the base class writes the bookies' confs
        self.member_ports = [(free_port(), free_port(), free_port()) for _ in range(self.members)]
        self.member_procs: list[subprocess.Popen | None] = [None] * self.members
        super().__init__(base_dir, bookies)
        for b in self.bookies:  # BookKeeper separates the servers of a metadata service URI with ';'
            b.conf_path.write_text(b.conf_path.read_text().replace(self.zk_connect, self._bk_servers))

    @property
    def zk_connect(self) -> str:
        return ",".join(f"127.0.0.1:{c}" for c, _, _ in self.member_ports)

    @property
    def _bk_servers(self) -> str:
        return ";".join(f"127.0.0.1:{c}" for c, _, _ in self.member_ports)

    @property
    def metadata_service_uri(self) -> str:
        return f"zk+hierarchical://{self._bk_servers}/ledgers"

    def _member_dir(self, i: int) -> Path:
        d = self.zk_dir / f"member-{i}"
        (d / "data").mkdir(parents=True, exist_ok=True)
        (d / "data" / "myid").write_text(f"{i + 1}\n")
        return d

    def _spawn_member(self, i: int) -> None:
        d = self._member_dir(i)
        client, _, _ = self.member_ports[i]
        servers = "".join(f"server.{k + 1}=127.0.0.1:{q}:{e}\n" for k, (_, q, e) in enumerate(self.member_ports))
        cfg = d / "zoo.cfg"
        cfg.write_text(
            "tickTime=500\ninitLimit=20\nsyncLimit=10\nmaxSessionTimeout=30000\n"
            f"dataDir={d / 'data'}\nclientPort={client}\nclientPortAddress=127.0.0.1\n"
            "admin.enableServer=false\nmaxClientCnxns=0\n4lw.commands.whitelist=ruok,stat,srvr,mntr\n"
            f"forceSync=no\n{servers}"
        )
        self.member_procs[i] = _spawn(_java(QUORUM_MAIN, [str(cfg)], ZOOKEEPER_JVM_OPTS), d / "zookeeper.log")

    def _wait_member(self, i: int, timeout: float) -> None:
        wait_until(f"ZooKeeper member {i} in a quorum", lambda: self._mode(i) in ("leader", "follower"), timeout,
                   self.member_procs[i], self.zk_dir / f"member-{i}" / "zookeeper.log")

    def _running(self, i: int) -> bool:
        p = self.member_procs[i]
        return p is not None and p.poll() is None

    def start_member(self, i: int, timeout: float = 60) -> None:
        """(Re)start member i on its ports and data; waits until it has joined the quorum."""
        if not self._running(i):
            self._spawn_member(i)
        self._wait_member(i, timeout)

    def start_zookeeper(self, timeout: float = 60) -> None:
        """Every member not running (each waits for a quorum: all are started before any is waited for)."""
        for i in range(self.members):
            if not self._running(i):
                self._spawn_member(i)
        for i in range(self.members):
            self._wait_member(i, timeout)
        self.zk_proc = self.member_procs[0]

    def _mode(self, i: int) -> str | None:
        try:
            with socket.create_connection(("127.0.0.1", self.member_ports[i][0]), timeout=2) as s:
                s.sendall(b"srvr")
                data = b""
                while chunk := s.recv(4096):
                    data += chunk
        except OSError:
            return None
        for line in data.decode(errors="replace").splitlines():
            if line.startswith("Mode:"):
                return line.split(":", 1)[1].strip()
        return None

    def kill_member(self, i: int) -> None:
        _stop(self.member_procs[i], signal.SIGKILL)

    def ensure_members_up(self) -> None:
        for i in range(self.members):
            if not self._running(i):
                self.start_member(i)

    def stop(self) -> None:
        super().stop()
        for p in self.member_procs:
            _stop(p)
