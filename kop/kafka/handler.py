"""KafkaProtocolHandler: the `kafka` protocol-handler plugin (listeners, connections, shared state).

Holds what every Kafka connection shares: the dispatch table, the advertised nodes per listener, the
producer-id expiration chore (over the partition seam's producer tables, kop/topics/partition.py), and
request counters. `broker_nodes` and `leader_node` answer
"which brokers exist" and "who leads this partition" for Metadata, FindCoordinator and DescribeCluster:
this broker alone, or - in cluster mode - the live brokers and each partition's owner from
kop/cluster/ownership.py, at the endpoint of the listener the request came in on. Serving starts in `start()` and ends in
`stop()`, which stops accepting, lets in-flight requests finish (bounded by a timeout) and closes.

Each listener has its security protocol (kop/kafka/listeners.py): TLS listeners are served with their
SSLContext, SASL listeners give each connection a SaslSession (kop/kafka/sasl.py) over the broker's
mechanisms, whose SCRAM credentials live in the metadata store and whose OAUTHBEARER keys are fetched
before the first listener accepts. ApiVersions lists SaslHandshake/SaslAuthenticate only on SASL listeners,
where they work.

Accepting, the connection limits (maxConnections, maxConnectionsPerIp[Overrides], with Kafka's behaviour) and
the broker-wide request-bytes bound (queuedMaxRequestBytes) are the broker's, shared with every other
protocol handler: kop/net/acceptor.py, whose one count spans the Kafka and Pulsar listeners.
"""

from __future__ import annotations

import asyncio
import logging
import socket
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING

from kop.aio import PeriodicTask
from kop.cluster.ownership import ZooKeeperOwnership
from kop.config import BrokerConfig, Listener
from kop.coordinator.share.coordinator import ShareCoordinator
from kop.coordinator.share.dlq import DeadLetterQueue
from kop.coordinator.share.persister import SharePersister
from kop.coordinator.share.store import ShareStateStore
from kop.kafka.apis import Api, build_table
from kop.kafka.apis.metadata import TopicEntryCache
from kop.kafka.fetch_sessions import FetchSessionCache
from kop.kafka.listeners import ListenerSecurity, SaslMechanisms, listener_security, principal_mapper
from kop.metrics import BrokerMetrics
from kop.net.acceptor import Acceptor
from kop.net.shared import listen_or_inherit, shared_sockets
from kop.protocol import api_info
from kop.protocol.errors import ErrorCode
from kop.protocol.messages import ApiVersionsResponse
from kop.protocol_handler import ProtocolHandler
from kop.services import BrokerServices
from kop.topics.features import SHARE_VERSION

if TYPE_CHECKING:
    from kop.cluster.bundles import Bundle
    from kop.kafka.connection import KafkaConnection, _Pending
    from kop.kafka.sasl import SaslSession
    from kop.topics.names import TopicName

log = logging.getLogger(__name__)

SASL_KEYS = (17, 36)  # SaslHandshake, SaslAuthenticate: advertised on SASL listeners only
# How often producers idle for producerIdExpirationMs are forgotten (Kafka's default check interval).
PRODUCER_ID_EXPIRATION_CHECK_MS = 600_000


@dataclass(frozen=True, slots=True)
class Node:
    node_id: int
    host: str
    port: int


class KafkaProtocolHandler(ProtocolHandler):
    name = "kafka"

    def __init__(self) -> None:
        self.config: BrokerConfig
        self.service: BrokerServices
        self.apis: dict[int, Api] = build_table()
        self.connections: set[KafkaConnection] = set()
        self._sockets: list[socket.socket] = []  # listening sockets
        self._accept_tasks: list[asyncio.Task[None]] = []
        self.draining = False
        # The broker's acceptor (limits, request-bytes bound); start() takes the one shared by every handler.
        self.net = Acceptor(BrokerConfig())
        self.request_bytes = self.net.request_bytes
        # Replaced by the broker service's metrics in start(); a private one keeps a bare handler usable.
        self.metrics = BrokerMetrics()
        self._bound: list[Listener] = []
        # Encoded Metadata topic entries (kop.kafka.apis.metadata: keyed by everything they depend on).
        self.metadata_cache = TopicEntryCache()
        self.fetch_sessions = FetchSessionCache(0)  # sized from the config in initialize()
        self._chores: list[PeriodicTask] = []  # idle connections, producer-id expiration
        self._security: dict[str, ListenerSecurity] = {}
        self.principal_mapper = principal_mapper(BrokerConfig())
        self.sasl_mechanisms: SaslMechanisms | None = None
        self.share = self._share_coordinator(BrokerConfig())  # KIP-932 share groups (kop/coordinator/share)

    def _share_coordinator(self, config: BrokerConfig) -> ShareCoordinator:
        """Share groups use the consumer groups' session and heartbeat settings (Kafka's group.share.* have the
        same defaults); the topics are read from the broker's services once started."""
        def metadata() -> dict[str, tuple[bytes, int]]:
            topics = self.service.topics
            return {topics.kafka_name(t.name): (t.topic_id, t.partitions) for t in topics.all()}

        return ShareCoordinator(metadata, config.groupConsumerSessionTimeoutMs, config.groupConsumerHeartbeatIntervalMs)

    # ------------------------------------------------------------------ plugin API
    def accept(self, protocol: str) -> bool:
        return protocol.lower() == "kafka"

    def initialize(self, config: BrokerConfig) -> None:
        self.config = config
        self.fetch_sessions = FetchSessionCache(config.maxIncrementalFetchSessionCacheSlots)
        self.net = Acceptor(config)  # a bare handler's own; start() uses the broker's
        self.request_bytes = self.net.request_bytes
        # TLS files, mapping rules and SASL credentials are read now, so that a bad one stops start-up early.
        self._security = listener_security(config)
        self.principal_mapper = principal_mapper(config)
        self.share = self._share_coordinator(config)
        if any(s.sasl for s in self._security.values()):
            self.sasl_mechanisms = SaslMechanisms(config, None)

    async def start(self, services: BrokerServices) -> None:
        from kop.kafka.connection import KafkaConnection  # connection.py imports this module

        self.service = services
        self.metrics = services.metrics
        dlq = DeadLetterQueue(services.topics, lambda: services.features.level(SHARE_VERSION))  # KIP-1191
        # __share_group_state when present; membership in __consumer_offsets, configs in the metadata store
        store = ShareStateStore(self.config, services.topics)
        await self.share.start(store, dlq, services.coordinator, services.storage.metadata_store,
                               SharePersister(store, services.ownership, self.config.kafkaBrokerId))
        self.metrics.active_connections = lambda: len(self.connections)
        self.metrics.fetch_sessions = lambda: len(self.fetch_sessions)
        self.metrics.incremental_fetches = lambda: self.fetch_sessions.incremental_fetches
        self.net = services.net
        self.net.add_connections(self.connections)
        self.request_bytes = self.net.request_bytes
        from kop.protocol import precompile

        precompile(list(self.apis))  # generate every served codec now, not on each first request
        await self._start_authentication(services)
        for lst in self.config.listeners:
            socks = listen_or_inherit("kafka", lst.name, lst.host or None, lst.port)  # a node's worker: kop/net/shared.py
            self._sockets += socks
            self._bound.append(Listener(lst.name, lst.host, socks[0].getsockname()[1]))
            tls = self.security_of(lst.name).ssl_context
            for sock in socks:
                factory = lambda name=lst.name: KafkaConnection(self, name)  # noqa: E731
                self._accept_tasks.append(self.net.serve(sock, factory, "kafka-accept", ssl=tls))
        for name, sock in shared_sockets("kafka"):  # a worker of a node: the node's port too (kop/net/shared.py)
            factory = lambda name=name: KafkaConnection(self, name)  # noqa: E731
            self._accept_tasks.append(self.net.serve(sock, factory, "kafka-accept-node",
                                                     ssl=self.security_of(name).ssl_context))
        if self.config.connectionMaxIdleMs > 0:
            limit = self.config.connectionMaxIdleMs / 1000
            self._chores.append(PeriodicTask("kafka-idle", min(limit / 2, 30), self._close_idle, log))
        if self.config.producerIdExpirationMs > 0:
            # Kafka checks every producer.id.expiration.check.interval.ms (10 minutes by default).
            every = min(self.config.producerIdExpirationMs, PRODUCER_ID_EXPIRATION_CHECK_MS) / 1000
            self._chores.append(PeriodicTask("producer-id-expiration", every, self._expire_producer_ids, log))
        for chore in self._chores:
            chore.start()

    async def _start_authentication(self, services: BrokerServices) -> None:
        """SCRAM credentials from the cluster's metadata store; the OAUTHBEARER JWKS fetched (or start fails)."""
        mechanisms = self.sasl_mechanisms
        if mechanisms is None:
            return
        if any(m.startswith("SCRAM-") for m in mechanisms.enabled):
            from kop.security.metadata_stores import MetadataScramCredentialStore

            mechanisms.set_scram_store(MetadataScramCredentialStore(services.storage.metadata_store))
        await mechanisms.start()

    def security_of(self, listener_name: str) -> ListenerSecurity:
        """The protocol and TLS context of a listener (PLAINTEXT for a name the config does not know)."""
        found = self._security.get(listener_name)
        return found if found is not None else ListenerSecurity(listener_name, "PLAINTEXT", None)

    def sasl_session(self) -> SaslSession:
        """A new connection's SASL state machine (SASL listeners)."""
        from kop.kafka.sasl import SaslSession

        assert self.sasl_mechanisms is not None
        return SaslSession(self.sasl_mechanisms, self.config.connectionsMaxReauthMs)

    def listeners(self) -> list[str]:
        return [str(b) for b in self._bound]

    async def stop(self, timeout: float) -> None:
        self.draining = True
        self.share.stop()  # long-polling share fetches answer now
        for chore in self._chores:
            await chore.stop()
        for t in self._accept_tasks:
            t.cancel()
        await asyncio.gather(*self._accept_tasks, return_exceptions=True)
        await self.net.cancel_handshakes()
        for sock in self._sockets:
            sock.close()
        conns = list(self.connections)
        await asyncio.gather(*(c.drain_and_close(timeout) for c in conns), return_exceptions=True)
        await self.share.close()
        if self.sasl_mechanisms is not None:
            await self.sasl_mechanisms.stop()

    async def ownership_changed(self, bundle: Bundle, owned: bool) -> None:
        """Cluster mode: share groups follow the bundle (kop/coordinator/share/coordinator.py `bundle_moved`)."""
        own = self.service.ownership
        if not isinstance(own, ZooKeeperOwnership):
            return
        topics, coordinator = self.service.topics, self.service.coordinator

        def topic_of(topic_id: bytes) -> TopicName | None:
            t = topics.get_by_id(topic_id)
            return t.name if t is not None else None

        self.share.bundle_moved(owned, lambda name, p: own.bundle_of(name, p) == bundle, topic_of,
                                lambda gid: coordinator.partition_error(gid) == 0)

    def connection_closed(self, conn: KafkaConnection) -> None:
        """A connection accepted by the acceptor closed: free its slot; end the share sessions it opened."""
        self.net.connection_closed(conn)
        self.share.connection_closed(conn)

    def bound_port(self, listener_name: str) -> int | None:
        return next((b.port for b in self._bound if b.name == listener_name), None)

    # ------------------------------------------------------------------ shared helpers
    def node_for(self, listener_name: str) -> Node:
        """This broker as clients on `listener_name` must reach it (its advertised listener)."""
        adv = self.config.advertised_listeners
        chosen = next((a for a in adv if a.name == listener_name), adv[0])
        port = chosen.port
        if port == 0:  # listening on an ephemeral port (tests): advertise the real one
            port = self.bound_port(chosen.name) or port
        return Node(self.config.kafkaBrokerId, chosen.host, port)

    def broker_nodes(self, listener_name: str) -> list[Node]:
        """Every live broker as clients on `listener_name` reach it (just this one outside cluster mode)."""
        me = self.node_for(listener_name)
        own = self.service.ownership
        if not own.clustered:
            return [me]
        nodes = {me.node_id: me}
        for b in own.live_brokers():
            if b.broker_id != me.node_id:
                host, port = b.address(listener_name)
                nodes[b.broker_id] = Node(b.broker_id, host, port)
        return [nodes[k] for k in sorted(nodes)]

    def leader_node(self, topic_name: TopicName, partition: int, listener_name: str) -> Node | None:
        """The broker serving one partition (its owner), None while it has none."""
        own = self.service.ownership
        if not own.clustered:
            return self.node_for(listener_name)
        info = own.owner_cached(topic_name, partition)
        if info is None:
            return None
        if info.broker_id == self.config.kafkaBrokerId:
            return self.node_for(listener_name)
        host, port = info.address(listener_name)
        return Node(info.broker_id, host, port)

    def api_name(self, key: int) -> str:
        try:
            return api_info(key).name
        except KeyError:
            return f"api#{key}"

    def api_versions_body(self, error: str | None = None, sasl: bool = False) -> ApiVersionsResponse:
        """The dispatch table; SaslHandshake and SaslAuthenticate only for a SASL listener (`sasl`)."""
        R = ApiVersionsResponse
        return R(
            error_code=ErrorCode[error] if error else 0,
            api_keys=[
                R.ApiVersion(api_key=a.key, min_version=a.min_version, max_version=a.max_version)
                for a in sorted(self.apis.values(), key=lambda a: a.key)
                if sasl or a.key not in SASL_KEYS
            ],
            throttle_time_ms=0,
        )

    def record_request(self, conn: KafkaConnection, pending: _Pending, now: float) -> None:
        """A request was answered (`now`: its response was handed to the socket): latency and queue-time
        metrics, and the slow-request log line."""
        self.metrics.request_done(conn, pending, now)

    def expire_producer_ids(self, now_ms: int | None = None) -> None:
        """Forget the idempotence state of producers that wrote nothing for producerIdExpirationMs (Kafka's
        producer.id.expiration.ms): their next batch with a sequence other than 0 gets UNKNOWN_PRODUCER_ID,
        and memory follows the producers that are still writing."""
        now = int(time.time() * 1000) if now_ms is None else now_ms
        self.service.topics.producer_tables.expire(now - self.config.producerIdExpirationMs)

    async def _expire_producer_ids(self) -> None:
        self.expire_producer_ids()

    async def _close_idle(self) -> None:
        limit = self.config.connectionMaxIdleMs / 1000
        now = time.monotonic()
        for c in list(self.connections):
            if c.in_flight == 0 and now - c.last_active > limit:
                c.abort(f"idle for more than {self.config.connectionMaxIdleMs} ms", error=False)

