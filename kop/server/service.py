"""The broker service: storage, topics, producer ids, the group coordinator, ownership, the admin server and
the protocol handlers, wired together with one lifecycle.

It implements BrokerServices (kop/services.py), what the handlers and the admin server may use; runs the
background chores (retention and the log cleaner of kop/topics/chores.py, as periodic tasks); and shuts
down in the order that loses nothing: stop accepting, let in-flight requests finish, close the logs, close
storage.

`ownership` says which broker serves which partition (kop/cluster/ownership.py): LocalOwnership - this
broker, always - on the embedded storage; ZooKeeperOwnership in cluster mode (BookKeeper + ZooKeeper
storage), where brokers register in ZooKeeper and own namespace bundles. In cluster mode start-up serves
the Kafka listeners before registering (the registration carries the bound ports), and ownership changes
drive the group coordinator: an acquired bundle's __consumer_offsets partitions are loaded, a released
bundle's are unloaded and its logs closed. Chores (retention, log cleaner) only touch owned partitions.
"""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import Callable
from typing import Any

from kop.admin.server import AdminServer
from kop.aio import PeriodicTask
from kop.cluster.bundles import Bundle
from kop.cluster.ownership import BrokerInfo, LocalOwnership, Ownership, ZooKeeperOwnership
from kop.config import BrokerConfig, ConfigError
from kop.coordinator import GroupCoordinator
from kop.coordinator.share.store import SHARE_STATE_TOPIC
from kop.coordinator.transactions import TransactionCoordinator
from kop.metrics import BrokerMetrics
from kop.net.acceptor import Acceptor
from kop.offset.storage import LogStorage
from kop.protocol_handler import ProtocolHandler, load_handlers
from kop.schemas.api import TopicSchemaIds
from kop.schemas.registry import ConfluentRegistry
from kop.schemas.versions import SchemaRegistry
from kop.security.acl import Authorizer
from kop.security.metadata_stores import MetadataAclStore, MetadataScramCredentialStore
from kop.security.sasl.scram import ScramCredentialStore
from kop.services import PulsarNonPersistent, PulsarSchemas, PulsarSubscriptions
from kop.topics.broker_configs import BrokerConfigs
from kop.topics.chores import LogCleaner, apply_retention
from kop.topics.features import Features
from kop.topics.manager import Topic, TopicManager
from kop.topics.names import OFFSETS_TOPIC, TRANSACTION_STATE_TOPIC
from kop.topics.producer_ids import ProducerIdAllocator

log = logging.getLogger(__name__)

CLUSTER_ID_PATH = "/kop/cluster-id"
# How often the ACLs' change counter in the metadata store is read: an ACL created through another broker is
# enforced here within this many seconds (docs/security.md).
ACL_RELOAD_INTERVAL = 1.0
_INTERNAL_TOPICS = frozenset({OFFSETS_TOPIC, TRANSACTION_STATE_TOPIC, SHARE_STATE_TOPIC})


class BrokerService:
    def __init__(self, config: BrokerConfig, storage: LogStorage,
                 ownership: Callable[[TopicManager], Ownership] | None = None) -> None:
        """`ownership`: makes the ownership of a worker of a multi-process node (kop/node/,
        kop/cluster/workers.py); None: local, or ZooKeeper's in cluster mode."""
        self.config = config
        self.storage = storage
        self.topics = TopicManager(config, storage)
        self.broker_configs = BrokerConfigs(config, storage.metadata_store)  # dynamic broker configs, re-read 1/s
        self.features = Features(storage.metadata_store, config.kafkaBrokerId)  # finalized features, re-read 1/s
        self.producer_ids = ProducerIdAllocator(storage.metadata_store, config.kafkaBrokerId)
        # The group coordinator: a client of the topics, keeping its state in __consumer_offsets.
        self.coordinator = GroupCoordinator(config, self.topics)
        # The transaction coordinator: state in __transaction_state; writes markers, completes txn offsets.
        self.transactions = TransactionCoordinator(config, self.topics, self.producer_ids, self.coordinator)
        self.handlers: list[ProtocolHandler] = []
        self.cluster_id = ""
        self.started_ms = 0
        self.cleaner = LogCleaner(self.topics, config)
        self._chores = [PeriodicTask("retention", config.retentionCheckIntervalMs / 1000, self.apply_retention, log)]
        if config.logCleanerEnabled:
            self._chores.append(PeriodicTask("log-cleaner", config.logCleanerIntervalMs / 1000, self.cleaner.run, log))
        self._chores.append(PeriodicTask("broker-configs", 1.0, self.broker_configs.reload, log))
        self._chores.append(PeriodicTask("features", 1.0, self.features.reload, log))
        self._stopping = False
        self.on_stop: list[Callable[[], Any]] = []
        self.metrics = BrokerMetrics(config.metricsMaxTopicLabels, config.metricsMaxGroupLabels,
                                     config.slowRequestThresholdMs)
        self.metrics.open_logs = lambda: storage.open_logs
        self.metrics.topic_exists = lambda name: self.topics.get(self.topics.parse(name)) is not None
        # Connection limits and the request-bytes bound of the broker, over every protocol handler's connections.
        self.net = Acceptor(config)
        self.metrics.request_bytes = lambda: self.net.request_bytes.used
        self.metrics.request_bytes_peak = lambda: self.net.request_bytes.peak
        self.metrics.request_bytes_pauses = lambda: self.net.request_bytes.pauses
        self.metrics.connections_rejected = lambda: self.net.connections_rejected
        self.admin: AdminServer | None = None  # when webServicePort >= 0
        # Services protocol handlers provide (ProtocolHandler.provides), registered once each has started.
        self.pulsar_subscriptions: PulsarSubscriptions | None = None
        self.pulsar_schemas: PulsarSchemas | None = None
        self.pulsar_non_persistent: PulsarNonPersistent | None = None
        self.ready = False  # topics loaded and every listener accepting (the /ready endpoint)
        self.stopped = False
        # Who serves what: this broker alone, or brokers sharing ZooKeeper (cluster mode).
        self.ownership: Ownership = LocalOwnership(self.topics)
        if config.storage_backend == "bookkeeper" and hasattr(storage.metadata_store, "create_ephemerals"):
            self.ownership = ZooKeeperOwnership(config, storage.metadata_store, self.topics)  # type: ignore[arg-type]
            self.topics.ownership = self.ownership
            self.topics.paused = True  # nothing is served before the registration
            self.ownership.on_acquired.append(self._bundle_acquired)
            self.ownership.on_released.append(self._bundle_released)
        elif ownership is not None:  # a worker of a node: a static share of the partitions, never moves
            self.ownership = ownership(self.topics)
            self.topics.ownership = self.ownership
        # SCRAM users and ACLs live in the metadata store, so every broker of a cluster shares them.
        self.scram_store: ScramCredentialStore = MetadataScramCredentialStore(storage.metadata_store)
        self.acl_store = MetadataAclStore(storage.metadata_store)
        self.authorizer: Authorizer | None = None  # None: authorizationEnabled=false, nothing is checked
        self._acl_version = -2
        if config.authorizationEnabled:
            self.authorizer = Authorizer(super_users=Authorizer.parse_super_users(config.superUserRoles),
                                         allow_everyone_if_no_acl_found=config.allowEveryoneIfNoAclFound,
                                         store=self.acl_store, topic_alias=self._acl_topic_alias)
            self._chores.append(PeriodicTask("acl-reload", ACL_RELOAD_INTERVAL, self.reload_acls, log))
        self.topics.log_release_listeners.append(self._partition_log_released)
        self.topics.deletion_listeners.append(self._topic_deleted)
        # The one schema store of both protocols (kop/schemas/): Pulsar's per-topic versions, and Confluent's
        # registry over them (subjects, global ids, levels) - what the pulsar handler, the admin REST and the
        # prefix code all use. A deleted topic's schemas go with it, as in Pulsar.
        self.schema_versions = SchemaRegistry(storage.metadata_store, config.schemaCompatibilityStrategy)
        self.schema_versions.namespace_strategy = self.topics.namespaces.schema_strategy
        self.schema_registry = ConfluentRegistry(storage.metadata_store, self.schema_versions, self.topics.parse,
                                                 self.topics.kafka_name, config.schemaCompatibilityStrategy)
        self.schema_ids: TopicSchemaIds = self.schema_registry
        self.topics.schema_ids = self.schema_ids  # what confluent.*.schema.validation checks Kafka records against
        self.topics.deletion_listeners.append(lambda topic: self.schema_versions.delete(topic.name))

    @property
    def clustered(self) -> bool:
        return self.ownership.clustered

    async def start(self, handlers: list[ProtocolHandler] | None = None) -> None:
        if self.config.webServicePort >= 0 or self.config.webServicePortTls >= 0:
            # First, so /health answers (and /ready says 503) while topics load.
            self.admin = AdminServer(self)
            await self.admin.start()
            if self.config.webServicePort >= 0:
                log.info("admin HTTP listening on %s (bound to %s)", self.admin.url,
                         self.config.webServiceBindAddress or "*")
            if self.admin.tls_url is not None:
                log.info("admin HTTPS listening on %s (bound to %s)", self.admin.tls_url,
                         self.config.webServiceBindAddress or "*")
        self.cluster_id = await self._cluster_id()
        if self.authorizer is not None:
            await self.reload_acls()  # before any listener: no request is answered without the ACLs
        await self.broker_configs.reload()  # the dynamic defaults apply from the first request
        await self.features.reload()
        await self.topics.load()
        self.handlers = handlers if handlers is not None else load_handlers(self.config)
        if self.clustered:
            await self.topics.watch()
            for h in self.handlers:
                await self._start_handler(h)
            await self.ownership.start(self._local_broker())  # BrokerIdInUseError: a duplicate id
            await self.coordinator.start()
            await self.transactions.start()
        else:
            await self.coordinator.start()  # creates __consumer_offsets if needed; loads it in the background
            await self.transactions.start()  # the same for __transaction_state
            for h in self.handlers:
                await self._start_handler(h)
            self.ownership.local = self._local_broker()
        for chore in self._chores:
            chore.start()
        self.started_ms = int(time.time() * 1000)
        for h in self.handlers:
            for lst in h.listeners():
                log.info("%s handler listening on %s", h.name, lst)
        self.ready = True

    async def _start_handler(self, handler: ProtocolHandler) -> None:
        """Start one protocol handler, then register the services it provides (kop/services.py)."""
        await handler.start(self)
        provided = handler.provides()
        if provided.pulsar_subscriptions is not None:
            self._refuse_second(handler, "pulsar_subscriptions", self.pulsar_subscriptions)
            self.pulsar_subscriptions = provided.pulsar_subscriptions
        if provided.pulsar_schemas is not None:
            self._refuse_second(handler, "pulsar_schemas", self.pulsar_schemas)
            self.pulsar_schemas = provided.pulsar_schemas
        if provided.pulsar_non_persistent is not None:
            self._refuse_second(handler, "pulsar_non_persistent", self.pulsar_non_persistent)
            self.pulsar_non_persistent = provided.pulsar_non_persistent

    def _refuse_second(self, handler: ProtocolHandler, service: str, registered: object) -> None:
        if registered is not None:
            raise ConfigError(f"bad value for messagingProtocols: handler {handler.name} provides {service}, "
                              "which another handler already provides")

    def _local_broker(self) -> BrokerInfo:
        """This broker as registered for the others: id, advertised Kafka listeners (bound ports when the
        config says 0), then the addresses other handlers advertise (the pulsar handler's pulsar://), admin
        web URL."""
        listeners = []
        for a in self.config.advertised_listeners:
            port = a.port
            if port == 0:  # listening on an ephemeral port (tests): register the bound one
                port = next((p for h in self.handlers if (p := h.bound_port(a.name)) is not None), 0)
            listeners.append((a.name, a.host, port))
        names = {lst[0] for lst in listeners}
        for h in self.handlers:
            listeners.extend(x for x in h.advertised_addresses() if x[0] not in names)
        web_url = None
        if self.admin is not None:
            plain = self.config.webServicePort >= 0  # else HTTPS only (webServicePortTls)
            web_url = self.admin.url if plain else self.admin.tls_url
            if self.config.webServiceBindAddress in ("", "0.0.0.0", "::"):
                scheme, port = ("http", self.admin.port) if plain else ("https", self.admin.tls_port)
                web_url = f"{scheme}://{listeners[0][1]}:{port}"
        return BrokerInfo(self.config.kafkaBrokerId, tuple(listeners), web_url)

    # ---------------------------------------------------------------------------------- ownership
    def _offsets_partitions_in(self, bundle: Bundle) -> list[int]:
        topic = self.coordinator.topic
        if topic is None or topic.name != self.topics.offsets_topic:
            return []
        own: Any = self.ownership
        return [p for p in range(topic.partitions) if own.bundle_of(topic.name, p) == bundle]

    def _txn_partitions_in(self, bundle: Bundle) -> list[int]:
        topic = self.transactions.topic
        if topic is None:
            return []
        own: Any = self.ownership
        return [p for p in range(topic.partitions) if own.bundle_of(topic.name, p) == bundle]

    async def _bundle_acquired(self, bundle: Bundle) -> None:
        for p in self._offsets_partitions_in(bundle):
            self.coordinator.load_partition(p)
        for p in self._txn_partitions_in(bundle):
            self.transactions.load_partition(p)
        for h in self.handlers:
            await h.ownership_changed(bundle, True)

    async def _bundle_released(self, bundle: Bundle, abandon: bool) -> None:
        for p in self._offsets_partitions_in(bundle):
            self.coordinator.unload_partition(p)
        for p in self._txn_partitions_in(bundle):
            self.transactions.unload_partition(p)
        await self.topics.release_bundle(bundle, abandon)
        for h in self.handlers:
            await h.ownership_changed(bundle, False)

    def _partition_log_released(self, ledger_name: str) -> None:
        for h in self.handlers:
            h.partition_log_released(ledger_name)

    async def _topic_deleted(self, topic: Topic) -> None:
        for p in range(topic.partitions):
            self.topics.producer_tables.forget(topic.ledger_name(p))
            for h in self.handlers:
                h.partition_log_deleted(topic.ledger_name(p))

    async def _cluster_id(self) -> str:
        store = self.storage.metadata_store
        got = await store.get(CLUSTER_ID_PATH)
        if got is not None:
            return got[0].decode()
        # Kafka cluster ids are 22-character url-safe base64 UUIDs.
        import base64

        cid = base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")
        try:
            await store.put(CLUSTER_ID_PATH, cid.encode(), expected_version=-1)
        except Exception:
            got = await store.get(CLUSTER_ID_PATH)
            if got is None:
                raise
            return got[0].decode()
        return cid

    def _acl_topic_alias(self, kafka_name: str) -> str | None:
        """A Kafka-namespace topic's full name for ACLs (kop/security/acl/authorizer.py): what a Pulsar
        namespace grant on the Kafka namespace names. Internal topics have none: a namespace grant is about
        the users' topics."""
        if "/" in kafka_name or kafka_name in _INTERNAL_TOPICS:
            return None
        return f"{self.config.kafkaTenant}/{self.config.kafkaNamespace}/{kafka_name}"

    async def reload_acls(self) -> None:
        """Re-read the ACLs when their change counter moved (another broker, or this one, changed them). The
        counter is read before the bindings, so a change racing the load is seen by the next pass."""
        assert self.authorizer is not None
        version = await self.acl_store.version()
        if version != self._acl_version:
            await self.authorizer.load()
            self._acl_version = version

    async def apply_retention(self) -> int:
        return await apply_retention(self.topics, self.config)

    async def stop(self) -> None:
        if self._stopping:
            return
        self._stopping = True
        self.ready = False
        timeout = self.config.brokerShutdownTimeoutMs / 1000
        self.cleaner.stopping = True
        for chore in self._chores:
            await chore.stop()
        # Parked JoinGroup/SyncGroup requests are answered NOT_COORDINATOR first, so draining does not wait.
        try:
            await self.transactions.stop()
        except Exception:
            log.exception("stopping the transaction coordinator")
        try:
            await self.coordinator.stop()
        except Exception:
            log.exception("stopping the group coordinator")
        for h in self.handlers:
            try:
                await h.stop(timeout)
            except Exception:
                log.exception("stopping %s handler", h.name)
        for cb in self.on_stop:
            cb()
        if self.admin is not None:
            try:
                await self.admin.stop()
            except Exception:
                log.exception("stopping the admin HTTP server")
        self.stopped = True
        if self.clustered:
            await self.ownership.stop()
            # Close the owned logs (sealing their ledgers), then let the bundles go at once.
            await self.ownership.release_all()  # type: ignore[attr-defined]
        await self.topics.close()
        await self.storage.close()
        log.info("broker stopped")

