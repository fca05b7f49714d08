"""Several of our brokers sharing one ZooKeeper chroot and the bookies of tests/support/bookkeeper.py
(cluster mode: kop/cluster/ownership.py), and what tests need around them.

    brokers = start_brokers(tmp_path_factory, shared_cluster(), 2, offsetsTopicNumPartitions=4)
    md = metadata(brokers[0].bootstrap, ["t"])          # brokers, controller, leader per partition
    proxy = ZooKeeperProxy(cluster.zk_port)             # a broker behind it loses ZooKeeper on proxy.cut()

Brokers get consecutive kafkaBrokerIds from 1, a short ZooKeeper session (SESSION_MS) so that takeovers
happen within seconds, and E/Qw/Qa 3/3/2. `stop_brokers` stops (SIGTERM) what is still running and purges
the chroot and its ledgers from the shared cluster.
"""

from __future__ import annotations

import signal
import socket
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .bookkeeper import BookKeeperCluster, KopBookKeeperBroker
from .wire import Negotiated

SESSION_MS = 4000


def start_brokers(tmp_path_factory: Any, cluster: BookKeeperCluster, count: int, *,
                  chroot: str | None = None, per_broker: dict[int, dict[str, object]] | None = None,
                  first_id: int = 1, settled_ids: list[int] | None = None,
                  **overrides: object) -> list[KopBookKeeperBroker]:
    """`count` brokers (ids first_id..) on one chroot (a fresh one unless given), started one after the
    other; then waits until the bundles sit where the rendezvous choice over `settled_ids` (default: the
    ids started here) puts them."""
    chroot = chroot or f"/kop-cluster-{uuid.uuid4().hex[:10]}"
    brokers = []
    try:
        for i in range(first_id, first_id + count):
            settings: dict[str, object] = {
                "kafkaBrokerId": i,
                "metadataStoreSessionTimeoutMillis": SESSION_MS,
                "groupInitialRebalanceDelayMs": 0,
                "offsetsTopicNumPartitions": 4,
                **overrides,
                **(per_broker or {}).get(i, {}),
            }
            b = KopBookKeeperBroker(Path(tmp_path_factory.mktemp(f"kop-{i}")), cluster, settings, chroot=chroot)
            brokers.append(b)
            b.start()
        if str(overrides.get("loadBalancerEnabled", "true")).lower() == "true":
            wait_settled(cluster, chroot, settled_ids or list(range(first_id, first_id + count)))
    except BaseException:
        stop_brokers(brokers)
        raise
    return brokers


def wait_settled(cluster: BookKeeperCluster, chroot: str, broker_ids: list[int],
                 namespaces: tuple[str, ...] = ("public/default", "public/__kafka")) -> None:
    """Wait until every bundle of `namespaces` is owned by the broker the rendezvous choice picks among
    `broker_ids` (brokers hand bundles to the ones that joined after them in the background)."""
    import json

    from kazoo.exceptions import NoNodeError

    from kop.cluster.bundles import bundles_of, choose_owner

    zk = cluster.zk()

    def settled() -> bool:
        for ns in namespaces:
            for b in bundles_of(ns, 4):
                try:
                    data, _ = zk.get(f"{chroot}/namespace/{ns}/{b.range_name}")
                except NoNodeError:
                    return False
                if json.loads(data)["brokerId"] != choose_owner(b, broker_ids):
                    return False
        return True

    eventually("bundles placed on every broker", settled, timeout=120)


def stop_brokers(brokers: list[KopBookKeeperBroker]) -> None:
    for b in brokers:
        if b.proc is not None and b.proc.poll() is None:
            try:
                b.proc.send_signal(signal.SIGCONT)  # a paused broker must be able to stop
            except OSError:
                pass
        b.stop()
    if brokers:
        try:
            brokers[0].purge()
        except Exception:
            pass


def eventually(what: str, check: Callable[[], Any], timeout: float = 60, interval: float = 0.2) -> Any:
    """Poll `check` until it returns something truthy (returned); AssertionError after `timeout`. A
    bound on waiting for the cluster to converge, not a timed assertion: the tests assert on state."""
    deadline = time.monotonic() + timeout
    last: Any = None
    while True:
        try:
            last = check()
            if last:
                return last
        except (OSError, AssertionError) as e:
            last = e
        if time.monotonic() > deadline:
            raise AssertionError(f"{what}: not reached after {timeout:.0f}s (last: {last!r})")
        time.sleep(interval)


# ---- wire helpers -----------------------------------------------------------------------------------------


@dataclass
class Metadata:
    brokers: dict[int, tuple[str, int]]
    controller: int
    leaders: dict[tuple[str, int], tuple[int, int]]  # (topic, partition) -> (leader id, error code)
    topic_errors: dict[str, int]


def metadata(bootstrap: str, topics: list[str] | None) -> Metadata:
    from kafka.protocol.metadata import MetadataRequest

    with Negotiated(bootstrap) as w:
        req_topics = None if topics is None else [MetadataRequest.MetadataRequestTopic(name=t) for t in topics]
        r = w.call(MetadataRequest(topics=req_topics, allow_auto_topic_creation=False), cap=12)
    leaders = {}
    errors = {}
    for t in r.topics:
        errors[t.name] = t.error_code
        for p in t.partitions:
            leaders[(t.name, p.partition_index)] = (p.leader_id, p.error_code)
    return Metadata({b.node_id: (b.host, b.port) for b in r.brokers}, r.controller_id, leaders, errors)


def find_coordinator(bootstrap: str, group: str) -> tuple[int, int, str, int]:
    """(error code, node id, host, port) of FindCoordinator v3 for a group."""
    from kafka.protocol.metadata import FindCoordinatorRequest

    with Negotiated(bootstrap) as w:
        r = w.call(FindCoordinatorRequest(key=group, key_type=0), cap=3)
    return r.error_code, r.node_id, r.host, r.port


def leader_of(brokers: list[KopBookKeeperBroker], topic: str, partition: int) -> KopBookKeeperBroker:
    """The broker Metadata names as the partition's leader (asked of the first live broker)."""
    live = next(b for b in brokers if b.alive())
    md = eventually(f"a leader for {topic}-{partition}",
                    lambda: (m := metadata(live.bootstrap, [topic])).leaders.get((topic, partition), (-1,))[0] >= 0
                    and m)
    leader_id = md.leaders[(topic, partition)][0]
    return next(b for b in brokers if int(b.overrides["kafkaBrokerId"]) == leader_id)


def broker_id(b: KopBookKeeperBroker) -> int:
    return int(b.overrides["kafkaBrokerId"])


def coordinator_of(brokers: list[KopBookKeeperBroker], group: str) -> KopBookKeeperBroker:
    live = next(b for b in brokers if b.alive())
    err, node, _, _ = eventually(f"a coordinator for {group}",
                                 lambda: (r := find_coordinator(live.bootstrap, group))[0] == 0 and r)
    return next(b for b in brokers if broker_id(b) == node)


# ---- a ZooKeeper connection that can be cut ------------------------------------------------------------------


class ZooKeeperProxy:
    """A TCP forwarder to ZooKeeper on a loopback port. cut() drops every connection and refuses new ones
    (what a network partition looks like to the client: its session lives on in ZooKeeper until it
    expires); restore() lets connections through again; freeze() silences the open connections without
    closing them."""

    def __init__(self, target_port: int, target_host: str = "127.0.0.1") -> None:
        self.target = (target_host, target_port)
        self._server = socket.create_server(("127.0.0.1", 0))
        self.port = self._server.getsockname()[1]
        self._cut = False
        self._conns: list[socket.socket] = []
        self._lock = threading.Lock()
        self._closed = False
        self._frozen: set[socket.socket] = set()
        threading.Thread(target=self._accept, name="zk-proxy", daemon=True).start()

    @property
    def connect(self) -> str:
        return f"127.0.0.1:{self.port}"

    def _accept(self) -> None:
        while not self._closed:
            try:
                client, _ = self._server.accept()
            except OSError:
                return
            if self._cut:
                client.close()
                continue
            try:
                upstream = socket.create_connection(self.target, timeout=5)
                upstream.settimeout(None)
            except OSError:
                client.close()
                continue
            with self._lock:
                self._conns += [client, upstream]
            for a, b in ((client, upstream), (upstream, client)):
                threading.Thread(target=self._pump, args=(a, b), daemon=True).start()

    def _pump(self, src: socket.socket, dst: socket.socket) -> None:
        try:
            while True:
                data = src.recv(65536)
                if src in self._frozen:  # swallowed; an end closing is not passed on either
                    if not data:
                        return
                    continue
                if not data or self._cut:
                    break
                dst.sendall(data)
        except OSError:
            pass
        for s in (src, dst):
            try:
                s.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            s.close()

    def cut(self) -> None:
        self._cut = True
        with self._lock:
            conns, self._conns = self._conns, []
        for s in conns:
            try:
                s.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            s.close()

    def freeze(self) -> None:
        """The connections open now go silent both ways but stay open, and ZooKeeper closing its end is not
        passed on (a black-holed network, not a refused one): the client notices only when its own read
        timeout fires. New connections pass as before."""
        with self._lock:
            self._frozen = set(self._conns)

    def restore(self) -> None:
        self._cut = False

    def close(self) -> None:
        self._closed = True
        self.cut()
        self._server.close()
