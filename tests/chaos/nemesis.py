"""The chaos suite's cluster and nemesis: ZooKeeper and bookies (tests/support/bookkeeper.py, or the
three-member ensemble of tests/support/zk_ensemble.py) and our brokers as real processes, with the network
cuts made on loopback without root - TCP forwarders (tests/support/cluster.py `ZooKeeperProxy`, a plain
forwarder whatever its name) that the test cuts, as Jepsen cuts links with iptables:

- each broker reaches ZooKeeper (its metadata store and its BookKeeper metadata client alike) only through
  a forwarder of its own: cutting it partitions that broker from ZooKeeper;
- each broker advertises a forwarder as its Kafka listener (kafkaAdvertisedListeners), so every Kafka client
  connection but the bootstrap one goes through it: cutting it partitions the broker from its Kafka clients.

Not made: a broker cut from some bookies. A broker reaches a bookie at the address its bookie id names
(127.0.0.1:<port>, or for a custom id the address in the bookie's registration): one address for every
broker, taken from the bookie's own registration, with no per-broker override. A forwarder in front of a
bookie would cut it from all brokers at once (a bookie kill, as far as brokers see, minus the process).
Nor a broker cut from its Pulsar clients: the Pulsar LOOKUP answer names the broker's bound port, with no
advertised-port setting to point clients at a forwarder.
"""

from __future__ import annotations

import os
import shutil
import signal
import tempfile
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tests.support.bookkeeper import BookKeeperCluster, KopBookKeeperBroker
from tests.support.cluster import SESSION_MS, ZooKeeperProxy, eventually, wait_settled
from tests.support.net import free_port, port_open


class ChaosCluster:
    """`brokers` of ours on `bk` (a BookKeeperCluster already started), each behind its two forwarders."""

    def __init__(self, bk: BookKeeperCluster, brokers: int = 2, session_ms: int = SESSION_MS) -> None:
        self.bk = bk
        self.count = brokers
        self.session_ms = session_ms
        self.base = Path(tempfile.mkdtemp(prefix="kop-chaos-"))
        self.chroot = f"/kop-chaos-{uuid.uuid4().hex[:8]}"
        self.brokers: list[KopBookKeeperBroker] = []
        self.zk_proxies: list[ZooKeeperProxy] = []
        self.client_proxies: list[ZooKeeperProxy] = []
        self.ensemble = hasattr(bk, "members")

    @property
    def bootstrap(self) -> str:
        """The brokers' client forwarders: a cut one refuses bootstrap connections too."""
        return ",".join(f"127.0.0.1:{p.port}" for p in self.client_proxies)

    @property
    def pulsar_url(self) -> str:
        return "pulsar://" + ",".join(f"127.0.0.1:{b.pulsar_port}" for b in self.brokers)

    def start(self) -> ChaosCluster:
        for i in range(1, self.count + 1):
            port = free_port()
            client_proxy = ZooKeeperProxy(port)
            settings: dict[str, object] = {
                "kafkaBrokerId": i,
                "metadataStoreSessionTimeoutMillis": self.session_ms,
                "groupInitialRebalanceDelayMs": 0,
                "offsetsTopicNumPartitions": 4,
                "kafkaAdvertisedListeners": f"PLAINTEXT://127.0.0.1:{client_proxy.port}",
                # Pulsar producers resend what was in flight when a connection dropped: without this,
                # duplicates are Pulsar's contract (at least once), and the checker would count them.
                "brokerDeduplicationEnabled": "true",
            }
            if not self.ensemble:  # one ZooKeeper: reached through this broker's own forwarder
                zk = ZooKeeperProxy(self.bk.zk_port)
                self.zk_proxies.append(zk)
                settings["metadataStoreUrl"] = f"zk:{zk.connect}{self.chroot}"
                settings["bookkeeperMetadataServiceUri"] = f"zk+hierarchical://{zk.connect}/ledgers"
            self.client_proxies.append(client_proxy)
            b = KopBookKeeperBroker(self.base / f"kop-{i}", self.bk, settings, chroot=self.chroot, port=port)
            self.brokers.append(b)
            b.start()
        zk_retrying(lambda: wait_settled(self.bk, self.chroot, list(range(1, self.count + 1))))
        return self

    def heal(self) -> None:
        """Whatever a fault left: every proxy passing, every process running (bookies registered)."""
        for p in self.zk_proxies + self.client_proxies:
            p.restore()
        if hasattr(self.bk, "ensure_members_up"):
            self.bk.ensure_members_up()
        elif self.bk.zk_proc is None or self.bk.zk_proc.poll() is not None:
            self.bk.start_zookeeper()
        for b in self.brokers:
            if b.proc is not None and b.alive():
                os.kill(b.pid or 0, signal.SIGCONT)
            else:
                b.start()
        zk_retrying(self.bk.ensure_all_up)

    def stop(self) -> None:
        for b in self.brokers:
            if b.alive():
                os.kill(b.pid or 0, signal.SIGCONT)
            b.stop()
        for p in self.zk_proxies + self.client_proxies:
            p.close()
        try:
            if self.brokers:
                self.brokers[0].purge()
        except Exception:
            pass
        if not os.environ.get("KOP_CHAOS_KEEP"):  # KOP_CHAOS_KEEP=1: the brokers' logs stay, for a post-mortem
            shutil.rmtree(self.base, ignore_errors=True)
        else:
            print("KEPT", self.base, flush=True)


@dataclass
class Fault:
    """apply(cluster, trial) breaks something and returns what heal needs; held for `hold(cluster)` s."""

    name: str
    apply: Callable[[ChaosCluster, int], Any]
    heal: Callable[[ChaosCluster, Any], None]
    hold: Callable[[ChaosCluster], float]
    ensemble: bool = False  # needs the three-member ZooKeeper ensemble


def _past_session(cc: ChaosCluster) -> float:
    return cc.session_ms / 1000 * 1.5 + 1


def _victim(cc: ChaosCluster, trial: int) -> KopBookKeeperBroker:
    return cc.brokers[trial % len(cc.brokers)]


def _kill_broker(cc: ChaosCluster, trial: int) -> KopBookKeeperBroker:
    b = _victim(cc, trial)
    b.kill()
    return b


def _pause_broker(cc: ChaosCluster, trial: int) -> KopBookKeeperBroker:
    b = _victim(cc, trial)
    os.kill(b.pid or 0, signal.SIGSTOP)
    return b


def _cont(cc: ChaosCluster, b: KopBookKeeperBroker) -> None:
    os.kill(b.pid or 0, signal.SIGCONT)


def _kill_bookies(n: int) -> Callable[[ChaosCluster, int], list[int]]:
    def apply(cc: ChaosCluster, trial: int) -> list[int]:
        victims = [(trial + k) % len(cc.bk.bookies) for k in range(n)]
        for i in victims:
            cc.bk.kill_bookie(i)
        return victims
    return apply


def _start_bookies(cc: ChaosCluster, victims: list[int]) -> None:
    for i in victims:
        zk_retrying(lambda i=i: cc.bk.start_bookie(i))


def zk_retrying(action: Callable[[], Any], timeout: float = 120) -> Any:
    """`action` again while the harness's own ZooKeeper client answers ConnectionLoss (it too is starved on
    a loaded machine, or reconnecting after a ZooKeeper fault): a bound on the heal, not a measurement."""
    from kazoo.exceptions import KazooException

    deadline = time.monotonic() + timeout
    while True:
        try:
            return action()
        except KazooException:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.5)


def _kill_zookeeper(cc: ChaosCluster, trial: int) -> None:
    assert cc.bk.zk_proc is not None
    cc.bk.zk_proc.kill()
    cc.bk.zk_proc.wait(30)


def _kill_all(cc: ChaosCluster, trial: int) -> None:
    for b in cc.brokers:
        b.kill()


def _start_all(cc: ChaosCluster, _: Any) -> None:
    for b in cc.brokers:
        b.start()


def _cut(which: str) -> Callable[[ChaosCluster, int], ZooKeeperProxy]:
    def apply(cc: ChaosCluster, trial: int) -> ZooKeeperProxy:
        proxy = getattr(cc, which)[trial % len(cc.brokers)]
        proxy.cut()
        return proxy
    return apply


def _kill_member(cc: ChaosCluster, trial: int) -> int:
    i = trial % 3
    cc.bk.kill_member(i)  # type: ignore[attr-defined]
    return i


FAULTS: list[Fault] = [
    Fault("broker-kill", _kill_broker, lambda cc, b: b.start(), lambda cc: 1.0),
    Fault("broker-pause", _pause_broker, _cont, _past_session),
    Fault("bookie-kill", _kill_bookies(1), _start_bookies, lambda cc: 2.0),
    Fault("bookie-quorum", _kill_bookies(2), _start_bookies, lambda cc: 3.0),
    Fault("zookeeper-kill", _kill_zookeeper, lambda cc, _: cc.bk.start_zookeeper(), lambda cc: 2.0),
    Fault("all-brokers-kill", _kill_all, _start_all, lambda cc: 1.0),
    Fault("partition-broker-zookeeper", _cut("zk_proxies"), lambda cc, p: p.restore(), _past_session),
    Fault("partition-broker-clients", _cut("client_proxies"), lambda cc, p: p.restore(), lambda cc: 3.0),
    Fault("zookeeper-member-kill", _kill_member, lambda cc, i: cc.bk.start_member(i),  # type: ignore[attr-defined]
          lambda cc: 3.0, ensemble=True),
]


def wait_serving(cc: ChaosCluster, timeout: float = 120) -> None:
    """Every broker accepting connections again (a bound on the restart, not a measurement)."""
    eventually("brokers listening", lambda: all(port_open("127.0.0.1", b.port) for b in cc.brokers), timeout)


def sleep(seconds: float) -> None:
    time.sleep(seconds)
