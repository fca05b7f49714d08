"""PulsarProtocolHandler: the `pulsar` protocol-handler plugin - Pulsar's binary protocol over the same topics.

It serves `pulsar-client` on `brokerServicePort` (6650; 0 = ephemeral) in the broker process, over the topics,
partition logs and offsets of the Kafka handler: `persistent://public/default/t` is Kafka's `t`, and its partitions
are `t-partition-N`, or it is a non-partitioned topic, one partition under its own name (kop/pulsar/lookup.py); `non-persistent://` topics are an in-memory fan-out beside them (kop/pulsar/nonpersistent.py).
One stored format for both protocols - Kafka record batches - converted at the edge
(kop/pulsar/convert.py): a SEND becomes one Kafka batch of N records (N offsets), a stored batch goes out as one
Pulsar batch entry of N messages. Message ids are (ledger, entry, partition, batch index = offset - base offset),
the ids PIP-415's getMessageIdByIndex names.

What the handler shares across connections: the subscriptions of each partition (kop/pulsar/subscription.py) and
the producers per partition (names must be unique). Connections live in kop/pulsar/connection.py; each command
family in its own module (session, lookup, produce, consume, consumer_stats, schemas), served through the explicit
table of kop/pulsar/commands_table.py. Accepting, the connection limits and the request-bytes bound are the
broker's, shared with the Kafka handler (kop/net/acceptor.py: one count over both protocols).

As a plugin (kop/protocol_handler.py) it uses the broker's services through BrokerServices (kop/services.py) and
provides two, which the admin REST drives: the subscriptions of its partitions and the Pulsar schema versions
(`provides()`: the broker's one schema store, kop/schemas/versions.py, which the Confluent registry shares). This module is the top of kop/pulsar/: it imports the rest, and nothing there imports it at run
time (tests/test_pulsar_imports.py keeps kop/pulsar/ free of import cycles).
"""

from __future__ import annotations

import asyncio
import logging
import socket
import ssl
from collections.abc import Mapping

from kop.aio import PeriodicTask
from kop.cluster import listeners as named_listeners
from kop.cluster.bundles import Bundle
from kop.config import BrokerConfig, ConfigError
from kop.managed_ledger.cursor import CursorStore
from kop.net.acceptor import Acceptor, Counted
from kop.net.shared import listen_or_inherit, shared_sockets
from kop.net.tls import server_context
from kop.protocol_handler import ProtocolHandler
from kop.pulsar import backlog_quota, message_ttl
from kop.pulsar.commands_table import COMMANDS
from kop.pulsar.connection import CommandHandler, PulsarConnection
from kop.pulsar.lookup import LISTENER, LISTENER_TLS
from kop.pulsar.nonpersistent import NonPersistentAdmin, NonPersistentTopics, PartitionedTopics
from kop.pulsar.subscription import PartitionState
from kop.pulsar.subscriptions import SubscriptionsAdmin
from kop.schemas.versions import SchemaRegistry
from kop.security.authn import Authenticators
from kop.services import BrokerServices, ProvidedServices
from kop.topics.manager import Topic, TopicError

log = logging.getLogger(__name__)


class PulsarProtocolHandler(ProtocolHandler):
    name = "pulsar"

    def __init__(self) -> None:
        self.config: BrokerConfig
        self.service: BrokerServices
        self.connections: set[PulsarConnection] = set()
        self.listening = False
        self._sockets: list[socket.socket] = []
        self._accept_tasks: list[asyncio.Task[None]] = []
        self.port = 0
        self.tls_port = 0  # brokerServicePortTls, once bound
        self._tls_context: ssl.SSLContext | None = None
        self.net = Acceptor(BrokerConfig())  # start() takes the broker's, shared with the Kafka handler
        self.authentication = False
        self.authenticators = Authenticators()  # Pulsar's providers and anonymousUserRole (initialize())
        self.request_bytes = self.net.request_bytes
        self.partitions: dict[str, PartitionState] = {}  # ledger name -> subscriptions and producers
        self.non_persistent = NonPersistentTopics()  # non-persistent://... topics served now (in memory)
        self.non_persistent_partitioned: PartitionedTopics  # their partition counts, in the metadata store (start())
        self.cursors: CursorStore
        self.schemas: SchemaRegistry  # the broker's (start()); provided with the subscriptions (provides())
        self.subscriptions: SubscriptionsAdmin
        self.commands: Mapping[int, CommandHandler] = COMMANDS  # what serves each command type
        self._quota: PeriodicTask | None = None  # backlogQuotaCheckIntervalInSeconds, while started
        self._ttl: PeriodicTask | None = None  # the same interval (kop/pulsar/message_ttl.py)
        self.draining = False

    # ------------------------------------------------------------------ plugin API
    def accept(self, protocol: str) -> bool:
        return protocol.lower() == "pulsar"

    def initialize(self, config: BrokerConfig) -> None:
        self.config = config
        self.net = Acceptor(config)
        self.request_bytes = self.net.request_bytes
        # authenticationEnabled: every CONNECT must pass a provider of authenticationProviders, or be
        # anonymousUserRole's (kop/pulsar/session.py, kop/security/authn.py); a bad key or htpasswd file stops
        # start-up here.
        self.authentication = config.authenticationEnabled
        # brokerServicePortTls: read the certificate and key now, so that a bad file stops start-up early.
        self._tls_context = server_context(config, client_certs=True) if config.brokerServicePortTls >= 0 else None
        self.authenticators = Authenticators.from_config(config) if config.authenticationEnabled else Authenticators()
        try:
            self.named_listeners = named_listeners.parse(config.advertisedListeners, config.internalListenerName)
        except named_listeners.ListenerError as e:
            raise ConfigError(str(e)) from None

    async def start(self, services: BrokerServices) -> None:
        self.service = services
        self.cursors = CursorStore(services.topics.store)
        self.schemas = services.schema_versions  # the broker's one store (kop/schemas/versions.py)
        self.subscriptions = SubscriptionsAdmin(self)
        self.non_persistent_partitioned = PartitionedTopics(services.topics.store)
        # unacknowledged entries outlive retention
        services.topics.retention_floors.append(self.subscriptions.backlog_floor)
        self._quota = PeriodicTask("backlog-quota", self.config.backlogQuotaCheckIntervalInSeconds,
                                   lambda: backlog_quota.check(self.config, list(self.partitions.values())), log)
        self._quota.start()
        self._ttl = PeriodicTask("message-ttl", self.config.backlogQuotaCheckIntervalInSeconds, lambda: message_ttl.expire(
            services.topics.namespaces, list(self.partitions.values())), log)  # namespaces' messageTTL
        self._ttl.start()
        self.net = services.net
        self.net.add_connections(self.connections)
        self.request_bytes = self.net.request_bytes
        self._sockets = listen_or_inherit("pulsar", LISTENER, self.config.bindAddress or None,
                                          self.config.brokerServicePort)  # a node's worker: kop/net/shared.py
        self.port = self._sockets[0].getsockname()[1]
        self.listening = True
        for sock in self._sockets:
            self._accept_tasks.append(self.net.serve(sock, lambda: PulsarConnection(self), "pulsar-accept"))
        for name, sock in shared_sockets("pulsar"):  # a worker of a node: the node's ports too (kop/net/shared.py)
            tls = self._tls_context if name == LISTENER_TLS else None
            self._accept_tasks.append(self.net.serve(sock, lambda: PulsarConnection(self), "pulsar-accept-node",
                                                     ssl=tls))
        if self._tls_context is not None:
            tls_socks = listen_or_inherit("pulsar", LISTENER_TLS, self.config.bindAddress or None,
                                          self.config.brokerServicePortTls)
            self._sockets += tls_socks
            self.tls_port = tls_socks[0].getsockname()[1]
            for sock in tls_socks:
                self._accept_tasks.append(self.net.serve(sock, lambda: PulsarConnection(self), "pulsar-accept-tls",
                                                         ssl=self._tls_context))

    def listeners(self) -> list[str]:
        if not self.listening:
            return []
        bind = self.config.bindAddress or "0.0.0.0"
        out = [f"pulsar://{bind}:{self.port}"]
        if self.tls_port:
            out.append(f"pulsar+ssl://{bind}:{self.tls_port}")
        return out

    async def stop(self, timeout: float) -> None:
        self.draining = True
        if self._quota is not None:
            await self._quota.stop()
        if self._ttl is not None:
            await self._ttl.stop()
        for t in self._accept_tasks:
            t.cancel()
        await asyncio.gather(*self._accept_tasks, return_exceptions=True)
        await self.net.cancel_handshakes()
        for sock in self._sockets:
            sock.close()
        for conn in list(self.connections):  # consumers leave their subscriptions (their state is saved) ...
            conn.close()
        for state in list(self.partitions.values()):  # ... and every cursor is written before storage closes
            await state.close()
        self.listening = False

    def provides(self) -> ProvidedServices:
        """The admin REST's way in (kop/services.py): subscriptions (kop/admin/subscriptions.py), the schema
        registry (kop/admin/schemas.py) and the non-persistent topics (kop/admin/non_persistent.py)."""
        return ProvidedServices(pulsar_subscriptions=self.subscriptions, pulsar_schemas=self.schemas,
                                pulsar_non_persistent=NonPersistentAdmin(self.non_persistent,
                                                                         self.non_persistent_partitioned))

    def bound_port(self, listener_name: str) -> int | None:
        if not self.listening:
            return None
        if listener_name == LISTENER_TLS:
            return self.tls_port or None
        return self.port if listener_name == LISTENER else None

    def advertised_addresses(self) -> list[tuple[str, str, int]]:
        if not self.listening:
            return []
        host, _, port = self.service_url.removeprefix("pulsar://").rpartition(":")
        # Without a listener name a lookup answers the internal listener's addresses, when there are named ones.
        plain = self.named_listeners.internal_address(named_listeners.PLAIN) or (host, int(port))
        out = [(LISTENER, *plain)]
        tls = self.named_listeners.internal_address(named_listeners.TLS)
        if tls is not None or self.tls_port:
            out.append((LISTENER_TLS, *(tls or (host, self.tls_port))))
        return out + self.named_listeners.entries()

    async def ownership_changed(self, bundle: Bundle, owned: bool) -> None:
        """A bundle released: the non-persistent topics no longer owned let their clients go (they look them up
        again); the persistent partitions are released through partition_log_released."""
        if not owned:
            owns = self.service.topics.owns_name
            self.non_persistent.disown(lambda t: owns(t.name, max(t.partition, 0)))

    def connection_closed(self, conn: Counted) -> None:
        """A connection accepted by the acceptor closed: free its slot."""
        self.net.connection_closed(conn)

    def partition_log_released(self, ledger_name: str) -> None:
        state = self.partitions.pop(ledger_name, None)
        if state is not None:
            state.abandon()

    def partition_log_deleted(self, ledger_name: str) -> None:
        self.partition_log_released(ledger_name)

    # ------------------------------------------------------------------ shared helpers
    @property
    def service_url(self) -> str:
        """This broker's pulsar:// address as clients reach it (LOOKUP answers it)."""
        host = self.config.advertisedAddress
        if not host:
            bind = self.config.bindAddress
            host = "127.0.0.1" if bind in ("", "0.0.0.0", "::") else bind
        return f"pulsar://{host}:{self.port}"

    @property
    def service_url_tls(self) -> str | None:
        """This broker's pulsar+ssl:// address (brokerServicePortTls), None without a TLS port."""
        if not self.tls_port:
            return None
        return self.service_url.replace("pulsar://", "pulsar+ssl://").rsplit(":", 1)[0] + f":{self.tls_port}"

    async def partition_state(self, topic: Topic, partition: int) -> PartitionState:
        """The producers and subscriptions of one partition (its log opened on first use)."""
        ledger = topic.ledger_name(partition)
        state = self.partitions.get(ledger)
        if state is not None:
            return state
        seam = await self.service.topics.partition(topic, partition)
        state = self.partitions.get(ledger)
        if state is not None and state.plog is seam.log:
            return state
        if topic.logs.get(partition) is not seam.log:
            # Let go while this call awaited its opening (its bundle released; issue #24): the release told no state
            # of it, so one made now would serve its clients from a closed log, and nothing would tell them to go.
            raise TopicError("NOT_LEADER_OR_FOLLOWER", "the partition was released while it opened; retry")
        if state is not None:
            state.abandon()  # over an older log of the partition: its clients look the partition up again
        state = self.partitions[ledger] = PartitionState(self, ledger, seam)
        return state
