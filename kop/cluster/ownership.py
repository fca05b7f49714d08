"""Who serves which partition: broker membership and namespace-bundle ownership in ZooKeeper.

Two implementations of one small interface (`Ownership`):

* `LocalOwnership` - embedded mode (and a lone broker without ZooKeeper): this broker is the only one and
  owns everything. Nothing asks ZooKeeper; TopicManager does not even consult it (its fast path is
  unchanged).
* `ZooKeeperOwnership` - cluster mode (BookKeeper + ZooKeeper storage). The layout, close to Pulsar's:

      /loadbalance/brokers/<host>:<port>         ephemeral, one per live broker (Pulsar's path; the name is
                                                 the broker's first advertised Kafka listener), JSON
                                                 {"brokerId", "listeners": {name: "host:port"}, "webServiceUrl"}
      /kop/brokers/ids/<kafkaBrokerId>           ephemeral, same JSON: claims the id (Kafka's /brokers/ids)
      /namespace/<tenant>/<ns>/0x..._0x...       ephemeral, the owner of one bundle (Pulsar's path), same JSON

  The two broker nodes are created in one ZooKeeper multi, so a second broker with the same
  kafkaBrokerId cannot start (BrokerIdInUseError) while the first lives. A bundle without an owner node is
  acquired by the live broker that rendezvous hashing picks (kop/cluster/bundles.py); an owner keeps its
  bundles while its session lives (sticky), except that with loadBalancerEnabled (default) it unloads -
  closes the logs, then deletes the node - the bundles the choice gives to a broker that joined, so a
  cluster started one broker at a time still spreads out (only the joiner's share moves). When a broker's session ends (crash, SIGKILL, expiry) its
  ephemeral nodes vanish, every survivor recomputes the choice over the remaining brokers, and the
  chosen one creates the node - ZooKeeper's create is the arbiter if two brokers disagree for a moment.

Session states (ZooKeeperMetadataStore's listener): "suspended" (connection lost, the session may still be
alive) stops serving at once - TopicManager.paused makes every partition answer NOT_LEADER_OR_FOLLOWER
and the coordinator NOT_COORDINATOR, and Metadata / FindCoordinator on this broker name no owner for its
own bundles (LEADER_NOT_AVAILABLE / COORDINATOR_NOT_AVAILABLE) - because another broker may take the
bundles as soon as the session expires; "connected" again within the session resumes; "lost" (expired) releases every bundle without
writing anything (another broker may already be writing) and registers again with the new session.

Serving also needs a valid session lease (kop/cluster/lease.py, `serving`): a recent ZooKeeper answer
proving the session alive, at most 2/3 of the session timeout old on the monotonic clock, so a broker woken
from a pause (SIGSTOP) refuses requests already waiting on its sockets before kazoo reports anything; a
renewal read is sent every lease/4 and at once when a request finds the lease lapsed.

Takeover safety does not rest on timing: a new owner opens a partition's managed ledger with BookKeeper
recovery, which fences the previous owner's ledger on the bookies before anything is read or written, and
the managed-ledger info is only ever changed with compare-and-set. A late write of the old owner is
refused by the bookies (fenced) or by the CAS (BadVersion).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from kop.cluster.bundles import Bundle, bundle_for, bundles_of, choose_owner
from kop.cluster.lease import SessionLease
from kop.config import ConfigError
from kop.storage.api import NodeExistsError, NoSuchNodeError, StorageError
from kop.topics.names import TopicName

if TYPE_CHECKING:
    from kop.config import BrokerConfig
    from kop.storage.zookeeper import ZooKeeperMetadataStore
    from kop.topics.manager import TopicManager

log = logging.getLogger(__name__)

BROKERS_ROOT = "/loadbalance/brokers"
BROKER_IDS_ROOT = "/kop/brokers/ids"
NAMESPACE_ROOT = "/namespace"


class BrokerIdInUseError(ConfigError):
    """Another live broker registered the same kafkaBrokerId (or the same advertised address)."""


@dataclass(frozen=True, slots=True)
class BrokerInfo:
    """A broker as the others see it: its id, advertised Kafka listeners and admin web URL."""

    broker_id: int
    listeners: tuple[tuple[str, str, int], ...]  # (listener name, host, port), advertised
    web_url: str | None = None

    def address(self, listener_name: str) -> tuple[str, int]:
        """Host and port for clients of `listener_name` (KoP's multi-listener rule: same name, else the
        first listener)."""
        for name, host, port in self.listeners:
            if name == listener_name:
                return host, port
        _, host, port = self.listeners[0]
        return host, port

    @property
    def key(self) -> str:
        """The /loadbalance/brokers child name: the first advertised listener's host:port."""
        _, host, port = self.listeners[0]
        return f"{host}:{port}"

    def to_json(self) -> bytes:
        return json.dumps({
            "brokerId": self.broker_id,
            "listeners": {name: f"{host}:{port}" for name, host, port in self.listeners},
            "webServiceUrl": self.web_url,
        }).encode()

    @classmethod
    def from_json(cls, data: bytes) -> BrokerInfo:
        d = json.loads(data)
        listeners = []
        for name, addr in d["listeners"].items():
            host, _, port = str(addr).rpartition(":")
            listeners.append((name, host, int(port)))
        return cls(int(d["brokerId"]), tuple(listeners), d.get("webServiceUrl"))


@dataclass(frozen=True, slots=True)
class OwnerInfo:
    """What `owner_of` answers: the owner's broker id, Kafka listener and admin web URL."""

    broker_id: int
    host: str
    port: int
    web_url: str | None

    @property
    def listener(self) -> str:
        return f"{self.host}:{self.port}"


class Ownership:
    """This broker's view of who owns what. Subclasses: LocalOwnership, ZooKeeperOwnership."""

    clustered = False
    local: BrokerInfo
    # +1 each time the broker serves again after not serving (ZooKeeper session suspended or lost): timers
    # that must not count time the broker was not serving (group sessions, transactions) compare it.
    serving_epoch = 0

    def __init__(self) -> None:
        # Awaited, in order, when this broker gains / loses a bundle (abandon: lost with the session, so
        # nothing may be written on the way out).
        self.on_acquired: list[Callable[[Bundle], Awaitable[None]]] = []
        self.on_released: list[Callable[[Bundle, bool], Awaitable[None]]] = []

    async def start(self, local: BrokerInfo) -> None:
        self.local = local

    async def stop(self) -> None:
        return None

    @property
    def serving(self) -> bool:
        return True

    def owns(self, name: TopicName, partition: int) -> bool:
        return True

    def owner_cached(self, name: TopicName, partition: int) -> BrokerInfo | None:
        return self.local

    def live_brokers(self) -> list[BrokerInfo]:
        return [self.local]

    @property
    def controller_id(self) -> int:
        """The broker clients are told is the controller: the lowest live id (any live broker can serve
        what a controller does here). -1, Kafka's "no controller", while none is live: a Metadata request can
        arrive before this broker has registered itself in ZooKeeper."""
        return min((b.broker_id for b in self.live_brokers()), default=-1)

    async def wait_owned(self, keys: list[tuple[TopicName, int]], timeout: float) -> None:
        """Return once every partition in `keys` has an owner, or after `timeout` seconds."""
        return None

    async def owner_of(self, topic: str | TopicName, partition: int, wait: float = 1.0) -> OwnerInfo | None:
        """The owner of one partition (acquisition is triggered and awaited up to `wait` seconds when the
        partition has none): broker id, Kafka listener (the first advertised one) and admin web URL."""
        tn = self._topic_name(topic)
        if self.owner_cached(tn, partition) is None:
            await self.wait_owned([(tn, partition)], wait)
        info = self.owner_cached(tn, partition)
        if info is None:
            return None
        _, host, port = info.listeners[0]
        return OwnerInfo(info.broker_id, host, port, info.web_url)

    def _topic_name(self, topic: str | TopicName) -> TopicName:
        if isinstance(topic, TopicName):
            return topic
        return self.topics.parse(topic)  # type: ignore[attr-defined]


class LocalOwnership(Ownership):
    """Embedded mode: the only broker owns every partition."""

    def __init__(self, topics: TopicManager) -> None:
        super().__init__()
        self.topics = topics


class ZooKeeperOwnership(Ownership):
    """Cluster mode; see the module docstring."""

    clustered = True

    def __init__(self, config: BrokerConfig, store: ZooKeeperMetadataStore, topics: TopicManager) -> None:
        super().__init__()
        self.config = config
        self.store = store
        self.topics = topics
        self.bundle_count = config.defaultNumberOfNamespaceBundles
        self._live: dict[str, BrokerInfo] = {}  # /loadbalance/brokers child -> broker
        self._owners: dict[str, dict[str, BrokerInfo]] = {}  # namespace -> range name -> owner
        self._mine: set[Bundle] = set()
        self._namespaces: set[str] = set()  # watched
        self._registered = False
        self._serving = False
        self._stopped = False
        self._kick = asyncio.Event()
        self._changed = asyncio.Event()  # set (and replaced) whenever the owner map changes
        self._session_events: asyncio.Queue[str] = asyncio.Queue()
        self._tasks: list[asyncio.Task[Any]] = []
        self._brokers_lock = asyncio.Lock()
        self._ns_locks: dict[str, asyncio.Lock] = {}
        self._background: set[asyncio.Task[Any]] = set()  # watch follow-ups (referenced until done)
        # Serving also needs a recent proof that the session lives (kop/cluster/lease.py): `serving`.
        self.lease = SessionLease(config.metadataStoreSessionTimeoutMillis / 1000)
        self._renew = asyncio.Event()  # a renewal read is wanted now (the lease was found lapsed)
        self._lapsed = False  # the lease was found lapsed while the session was thought alive (logged once)

    def _spawn(self, coro: Any) -> None:
        task = asyncio.ensure_future(coro)
        self._background.add(task)
        task.add_done_callback(self._background.discard)

    # ------------------------------------------------------------------ lifecycle
    async def start(self, local: BrokerInfo) -> None:
        self.local = local
        self.store.add_session_listener(self._session_events.put_nowait)
        await self._register()
        await self._ensure(BROKERS_ROOT)
        await self.store.watch_children_async(BROKERS_ROOT, self._on_brokers)
        await self._refresh_brokers(await self.store.children(BROKERS_ROOT))
        namespaces = {f"{self.config.kafkaTenant}/{self.config.kafkaNamespace}",
                      f"{self.config.kafkaMetadataTenant}/{self.config.kafkaMetadataNamespace}"}
        namespaces.update(f"{t.name.tenant}/{t.name.namespace}" for t in self.topics.all())
        for ns in sorted(namespaces):
            await self.watch_namespace(ns)
        await self._renew_lease()
        self._serving = True
        self.topics.paused = False
        self._tasks.append(asyncio.create_task(self._session_loop(), name="ownership-session"))
        self._tasks.append(asyncio.create_task(self._lease_loop(), name="ownership-lease"))
        self._tasks.append(asyncio.create_task(self._reconcile_loop(), name="ownership-reconcile"))
        self._kick.set()

    async def stop(self) -> None:
        """Stop acquiring. The bundles are let go when the metadata store closes its session (after the
        logs were closed): the other brokers then take them at once, without waiting for an expiry."""
        self._stopped = True
        self._serving = False
        for t in self._tasks:
            t.cancel()
        for t in self._tasks:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await t
        self._tasks.clear()

    async def release_all(self) -> None:
        """Graceful shutdown: close what this broker owns (sealing ledgers), then delete the ownership
        nodes so that other brokers acquire the bundles now."""
        self._stopped = True
        self._serving = False
        for b in sorted(self._mine, key=str):
            await self._release(b, abandon=False)
            with contextlib.suppress(Exception):
                await self.store.delete(self._bundle_path(b))

    @property
    def serving(self) -> bool:
        """Whether this broker may answer anything that depends on what it owns, now: its session was not
        reported suspended or lost, *and* the lease proves it alive at this instant (the gate every request
        that depends on ownership passes, through owns(), owner_cached() and TopicManager.paused). A lapsed
        lease asks for a renewal read at once; the broker serves again when ZooKeeper answers it."""
        if not self._serving:
            return False
        if self.lease.valid():
            return True
        if not self._lapsed:
            self._lapsed = True
            log.warning("ZooKeeper session lease lapsed (no answer proves the session alive for %.1fs): not "
                        "serving until ZooKeeper answers", self.lease.length)
        self._renew.set()
        return False

    # ------------------------------------------------------------------ registration
    async def _register(self) -> None:
        """Create /kop/brokers/ids/<id> and /loadbalance/brokers/<host:port> in one multi.

        Nodes of the same id *and* advertised address are this broker's previous run (a restart after a
        crash, before its session expired): that process is gone - this one has just bound its Kafka
        listener - so its nodes, bundle owner nodes included, are deleted at once rather than left to
        block everything until the expiry. Nodes of the same id at another address belong to another
        broker: waited for one session timeout (a restarted broker whose address changed), then refused
        with BrokerIdInUseError."""
        me = self.local
        nodes = [(f"{BROKER_IDS_ROOT}/{me.broker_id}", me.to_json()), (f"{BROKERS_ROOT}/{me.key}", me.to_json())]
        deadline = time.monotonic() + self.config.metadataStoreSessionTimeoutMillis / 1000 + 2
        while True:
            try:
                await self.store.create_ephemerals(nodes)
                break
            except NodeExistsError:
                other = await self._read_broker(nodes[0][0]) or await self._read_broker(nodes[1][0])
                if other is not None and (other.broker_id, other.key) == (me.broker_id, me.key):
                    await self._clear_previous_run(nodes[0][0], nodes[1][0])
                    continue
                if other is None:  # vanished meanwhile (or unreadable): try again
                    if time.monotonic() > deadline:
                        raise BrokerIdInUseError(f"cannot register broker {me.broker_id} at {me.key}: "
                                                 f"{nodes[0][0]} or {nodes[1][0]} is taken") from None
                    await asyncio.sleep(0.1)
                    continue
                if time.monotonic() > deadline:
                    raise BrokerIdInUseError(
                        f"kafkaBrokerId={me.broker_id} (advertised {me.key}) is already registered by a live "
                        f"broker: id {other.broker_id} at {other.key} - every broker of a cluster needs its own "
                        f"kafkaBrokerId and advertised listener") from None
                log.info("kafkaBrokerId %d is registered by %s; waiting up to one session timeout for it to "
                         "expire", me.broker_id, other.key)
                await asyncio.sleep(0.5)
        self._registered = True
        self.lease.hold(self.store.session_id)  # the session whose life the lease proves from now on
        log.info("registered broker %d (%s) in %s", me.broker_id, me.key, BROKERS_ROOT)
        # Registered first, so that the other brokers count this one when the bundles below fall free.
        await self._clear_previous_run(*await self._stale_bundle_nodes())

    async def _clear_previous_run(self, *paths: str) -> None:
        """Delete ephemeral nodes a previous process of this broker (same id, same address) left."""
        session = self.store.session_id
        for path in paths:
            with contextlib.suppress(StorageError):
                if await self.store.ephemeral_owner(path) not in (None, session):
                    await self.store.delete(path)
                    log.info("deleted %s, left by this broker's previous run", path)

    async def _stale_bundle_nodes(self) -> list[str]:
        me = self.local
        paths = []
        for tenant in await self.store.children(NAMESPACE_ROOT):
            for ns in await self.store.children(f"{NAMESPACE_ROOT}/{tenant}"):
                for rng in await self.store.children(f"{NAMESPACE_ROOT}/{tenant}/{ns}"):
                    path = f"{NAMESPACE_ROOT}/{tenant}/{ns}/{rng}"
                    owner = await self._read_broker(path)
                    if owner is not None and (owner.broker_id, owner.key) == (me.broker_id, me.key):
                        paths.append(path)
        return paths

    async def _read_broker(self, path: str) -> BrokerInfo | None:
        got = await self.store.get(path)
        if got is None:
            return None
        try:
            return BrokerInfo.from_json(got[0])
        except (ValueError, KeyError):
            log.warning("unreadable broker registration at %s", path)
            return None

    async def _ensure(self, path: str) -> None:
        if not await self.store.exists(path):
            with contextlib.suppress(NodeExistsError):
                await self.store.put(path, b"", expected_version=-1)

    # ------------------------------------------------------------------ live brokers
    def _on_brokers(self, names: list[str]) -> None:
        if not self._stopped:
            self._spawn(self._refresh_brokers(names))

    async def _refresh_brokers(self, names: list[str]) -> None:
        async with self._brokers_lock:
            live = dict(self._live)
            for gone in set(live) - set(names):
                del live[gone]
            for name in names:
                if name not in live:
                    info = await self._read_broker(f"{BROKERS_ROOT}/{name}")
                    if info is not None:
                        live[name] = info
            if set(live) != set(self._live):
                log.info("live brokers: %s", sorted(b.broker_id for b in live.values()))
            self._live = live
        self._kick.set()

    def live_brokers(self) -> list[BrokerInfo]:
        by_id = {b.broker_id: b for b in self._live.values()}
        if self._registered:
            by_id[self.local.broker_id] = self.local
        return sorted(by_id.values(), key=lambda b: b.broker_id)

    # ------------------------------------------------------------------ bundles
    def bundle_of(self, name: TopicName, partition: int) -> Bundle:
        return bundle_for(name.tenant, name.namespace, name.local, partition, self.bundle_count)

    def _bundle_path(self, b: Bundle) -> str:
        return f"{NAMESPACE_ROOT}/{b.namespace}/{b.range_name}"

    def owns(self, name: TopicName, partition: int) -> bool:
        return self.bundle_of(name, partition) in self._mine and self.serving

    def owner_cached(self, name: TopicName, partition: int) -> BrokerInfo | None:
        b = self.bundle_of(name, partition)
        ns = b.namespace
        if ns not in self._namespaces:
            self._spawn(self.watch_namespace(ns))
            return None
        owner = self._owners.get(ns, {}).get(b.range_name)
        if owner is not None and owner.broker_id == self.local.broker_id and not self.serving:
            # Ours, but not served while the session is in doubt (suspended, or expired and not yet
            # re-registered): naming ourselves would send clients to a broker that refuses them, so the
            # answer is "no owner" - LEADER_NOT_AVAILABLE / COORDINATOR_NOT_AVAILABLE, both retriable.
            return None
        return owner

    def mine(self) -> set[Bundle]:
        return set(self._mine)

    async def wait_owned(self, keys: list[tuple[TopicName, int]], timeout: float) -> None:
        deadline = asyncio.get_running_loop().time() + timeout
        while any(self.owner_cached(tn, p) is None for tn, p in keys):
            self._kick.set()
            remaining = deadline - asyncio.get_running_loop().time()
            if remaining <= 0:
                return
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._changed.wait(), remaining)

    def _notify(self) -> None:
        self._changed.set()
        self._changed = asyncio.Event()

    async def watch_namespace(self, ns: str) -> None:
        """Start following the owners of `ns`'s bundles (idempotent): one data watch per bundle node.
        Why not a watch on the namespace's children: a node deleted and created again (a hand-over)
        between two reads leaves the child list unchanged, and the new owner would go unnoticed; a data
        watch sees every new node (its modification zxid changes)."""
        if ns in self._namespaces or self._stopped:
            return
        lock = self._ns_locks.setdefault(ns, asyncio.Lock())
        async with lock:
            if ns in self._namespaces:
                return
            await self._ensure(f"{NAMESPACE_ROOT}/{ns.split('/')[0]}")
            await self._ensure(f"{NAMESPACE_ROOT}/{ns}")
            self._owners.setdefault(ns, {})
            for b in bundles_of(ns, self.bundle_count):
                await self.store.watch_data_async(
                    self._bundle_path(b), self._owner_watcher(b))
            self._namespaces.add(ns)
        self._kick.set()

    def _owner_watcher(self, b: Bundle) -> Callable[[bytes | None, object], None]:
        """The data watcher of bundle `b`'s owner node."""
        return lambda value, stat: self._on_owner(b, value)

    def _on_owner(self, b: Bundle, value: bytes | None) -> None:
        """A bundle's owner node changed (on the event loop, in ZooKeeper's order for that node)."""
        if self._stopped:
            return
        owners = self._owners.setdefault(b.namespace, {})
        if value is None:
            owners.pop(b.range_name, None)
            if b in self._mine:
                self._spawn(self._check_still_mine(b))
        else:
            try:
                info = BrokerInfo.from_json(value)
            except (ValueError, KeyError):
                log.warning("unreadable owner of bundle %s", b)
                return
            mine = b in self._mine and info.broker_id == self.local.broker_id
            owners[b.range_name] = self.local if mine else info
        self._notify()
        self._kick.set()

    async def _check_still_mine(self, b: Bundle) -> None:
        """Our owner node was reported gone. A late report of the time before our own create says so
        too: ask ZooKeeper before letting go."""
        with contextlib.suppress(StorageError):
            if await self.store.ephemeral_owner(self._bundle_path(b)) == self.store.session_id:
                self._owners.setdefault(b.namespace, {})[b.range_name] = self.local
                self._notify()
                return
        if b in self._mine:
            log.warning("ownership node of bundle %s vanished: releasing it", b)
            await self._release(b, abandon=False)

    # ------------------------------------------------------------------ acquisition
    async def _reconcile_loop(self) -> None:
        while True:
            await self._kick.wait()
            self._kick.clear()
            try:
                await self._reconcile()
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("bundle acquisition pass failed; retrying")
                await asyncio.sleep(0.5)
                self._kick.set()

    async def _reconcile(self) -> None:
        """Acquire every unowned bundle that the rendezvous choice gives to this broker; with
        loadBalancerEnabled, hand each owned bundle that the choice now gives to another live broker (one
        that joined) over to it: close its logs (sealing the ledgers) and delete the ownership node."""
        if not self._serving or self._stopped:
            return
        live = {b.broker_id for b in self.live_brokers()}
        for ns in sorted(self._namespaces):
            owners = self._owners.get(ns, {})
            for b in bundles_of(ns, self.bundle_count):
                if b.range_name in owners:
                    continue
                if choose_owner(b, live) == self.local.broker_id and self._serving:
                    await self._acquire(b)
        if not self.config.loadBalancerEnabled:
            return
        for b in sorted(self._mine, key=str):
            chosen = choose_owner(b, live)
            if chosen is not None and chosen != self.local.broker_id and self._serving:
                await self.unload(b, f"broker {chosen} is its place now")

    async def unload(self, b: Bundle, why: str = "") -> None:
        """Gracefully give up one bundle (Pulsar's namespace unload): close its logs, then delete the
        ownership node so that the broker the rendezvous choice picks acquires it."""
        if b not in self._mine:
            return
        log.info("unloading bundle %s%s", b, f": {why}" if why else "")
        await self._release(b, abandon=False)
        with contextlib.suppress(NoSuchNodeError):
            await self.store.delete(self._bundle_path(b))

    async def _acquire(self, b: Bundle) -> None:
        path = self._bundle_path(b)
        try:
            await self.store.create_ephemerals([(path, self.local.to_json())])
        except NodeExistsError:
            info = await self._read_broker(path)
            if info is not None:
                self._owners.setdefault(b.namespace, {})[b.range_name] = info
                self._notify()
            return
        self._owners.setdefault(b.namespace, {})[b.range_name] = self.local
        self._mine.add(b)
        log.info("acquired bundle %s", b)
        for cb in list(self.on_acquired):
            try:
                await cb(b)
            except Exception:
                log.exception("bundle acquisition listener failed for %s", b)
        self._notify()

    async def _release(self, b: Bundle, abandon: bool) -> None:
        if b not in self._mine:
            return
        self._mine.discard(b)
        owners = self._owners.get(b.namespace, {})
        current = owners.get(b.range_name)
        if current is not None and current.broker_id == self.local.broker_id:
            owners.pop(b.range_name, None)
        log.info("released bundle %s%s", b, " (session lost: nothing written)" if abandon else "")
        for cb in list(self.on_released):
            try:
                await cb(b, abandon)
            except Exception:
                log.exception("bundle release listener failed for %s", b)
        self._notify()

    # ------------------------------------------------------------------ session
    async def _session_loop(self) -> None:
        while True:
            state = await self._session_events.get()
            try:
                await self._on_session(state)
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("handling ZooKeeper session state %s failed", state)

    async def _on_session(self, state: str) -> None:
        if self._stopped:
            return
        if state == "suspended":
            if self._serving:
                log.warning("ZooKeeper connection lost: not serving %d bundles until it is back", len(self._mine))
            self._serving = False
            self.topics.paused = True
        elif state == "lost":
            log.warning("ZooKeeper session expired: releasing %d bundles without writing", len(self._mine))
            self._serving = False
            self.topics.paused = True
            self._registered = False
            self.lease.hold(None)
            for b in sorted(self._mine, key=str):
                await self._release(b, abandon=True)
        elif state == "connected":
            if not self._registered:
                while not self._stopped:
                    try:
                        await self._register()
                        break
                    except BrokerIdInUseError:
                        log.error("cannot register again after the session expired; retrying")
                        await asyncio.sleep(1)
                    except StorageError as e:
                        log.warning("registering again failed: %r; retrying", e)
                        await asyncio.sleep(0.5)
                await self._refresh_brokers(await self.store.children(BROKERS_ROOT))
            await self._renew_lease()  # connected again: prove the session now rather than at the next tick
            if not self._serving:
                log.info("ZooKeeper connection back: serving %d bundles", len(self._mine))
                self.serving_epoch += 1
            self._serving = True
            self.topics.paused = False
            self._kick.set()

    # ------------------------------------------------------------------ lease
    async def _lease_loop(self) -> None:
        """Keep the lease fresh: one cheap read every `renew_every` seconds, or at once when a request found
        it lapsed (kazoo's own pings are not observable from here)."""
        while True:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._renew.wait(), self.lease.renew_every)
            self._renew.clear()
            if not await self._renew_lease():
                await asyncio.sleep(0.05)  # no answer (disconnected): do not spin on requests' wake-ups

    async def _renew_lease(self) -> bool:
        """One renewal read; whether it renewed the lease. The time is read *before* the read is sent:
        the answer proves the session alive at that time, not at the time it arrives."""
        sent = self.lease.now()
        try:
            session = await asyncio.wait_for(self.store.ping(), self.lease.length)
        except TimeoutError:
            return False
        if not self.lease.proved(sent, session):
            return False
        if self._lapsed and self.lease.valid():
            self._lapsed = False
            if self._serving:
                log.info("ZooKeeper answered: the session lease is renewed, serving again")
                self.serving_epoch += 1  # the time without a lease was time not serving (group timers)
                self._notify()  # Metadata / FindCoordinator waiting for an owner: this broker is one again
        return True
