"""BrokerServices: the broker's shared services as its plugins see them.

A protocol handler (kop/protocol_handler.py) and the admin HTTP server get this, not the broker service
itself: they sit below the composition root (kop/server/), so they name what they use through this
interface and never import the class that builds it. `kop.server.service.BrokerService` implements it.

Every service is declared here with its type; one that may be absent is Optional and its users test it for
None (never `getattr(service, name, None)`). Services a protocol handler brings (the pulsar handler's
subscriptions and schema registry, which the admin REST drives) are declared by the handler as a
ProvidedServices (ProtocolHandler.provides) and registered by the composition root once the handler started;
until then, and in a broker without that handler, they are None.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol

from kop.cluster.ownership import Ownership
from kop.config import BrokerConfig
from kop.coordinator import GroupCoordinator
from kop.coordinator.transactions import TransactionCoordinator
from kop.metrics import BrokerMetrics
from kop.net.acceptor import Acceptor
from kop.offset.storage import LogStorage
from kop.protocol.errors import ErrorCode
from kop.schemas.api import TopicSchemaIds
from kop.schemas.registry import ConfluentRegistry
from kop.schemas.versions import SchemaRegistry
from kop.security.acl import Authorizer
from kop.security.sasl.scram import ScramCredentialStore
from kop.topics.broker_configs import BrokerConfigs
from kop.topics.features import Features
from kop.topics.manager import Topic, TopicManager
from kop.topics.names import TopicName
from kop.topics.producer_ids import ProducerIdAllocator


class SubscriptionError(Exception):
    """A subscription operation refused: the HTTP status Pulsar's admin answers and its reason."""

    def __init__(self, status: int, reason: str) -> None:
        super().__init__(reason)
        self.status = status
        self.reason = reason


class PulsarSubscriptions(Protocol):
    """The Pulsar subscriptions (managed cursors) of one partition, as the admin REST drives them.

    The pulsar handler implements it (kop/pulsar/subscriptions.py) and provides it (ProvidedServices); the
    composition root sets `BrokerServices.pulsar_subscriptions` to it; the admin server names only this interface. Offsets are Kafka offsets of the partition;
    positions are (ledger id, entry id). Each call raises SubscriptionError for what Pulsar refuses."""

    async def names(self, topic: Topic, partition: int) -> list[str]: ...

    async def stats(self, topic: Topic, partition: int) -> dict[str, dict[str, Any]]: ...

    async def create(self, topic: Topic, partition: int, name: str, ledger_id: int, entry_id: int) -> None: ...

    async def delete(self, topic: Topic, partition: int, name: str, force: bool) -> None: ...

    async def reset_to_time(self, topic: Topic, partition: int, name: str, timestamp_ms: int) -> None: ...

    async def reset_to_position(self, topic: Topic, partition: int, name: str, ledger_id: int, entry_id: int,
                                excluded: bool) -> None: ...

    async def skip(self, topic: Topic, partition: int, name: str, count: int) -> None: ...

    async def skip_all(self, topic: Topic, partition: int, name: str) -> None: ...

    async def expire(self, topic: Topic, partition: int, name: str, seconds: int) -> None: ...

    async def peek(self, topic: Topic, partition: int, name: str, n: int) -> tuple[dict[str, str], bytes]: ...

    def traffic(self, topic: Topic, partition: int) -> dict[str, int]:
        """msgInCounter, bytesInCounter, msgOutCounter, bytesOutCounter of Pulsar producers and consumers."""
        ...

    def connected(self, topic: Topic, partition: int) -> int:
        """Pulsar producers and consumers connected to the partition now (a topic deletion without force)."""
        ...

    def unload(self, topic: Topic, partition: int) -> None:
        """Pulsar's topic unload: the partition's producers and consumers are told to reconnect."""
        ...

    async def served(self) -> list[dict[str, Any]]:
        """Per subscription of each partition served now (metrics): namespace, topic, subscription (None
        for a partition without any), msgBacklog, unackedMessages, consumers, msg/bytes in and out counters."""
        ...

    async def trigger_compaction(self, topic: Topic, partition: int) -> None:
        """Start Pulsar's topic compaction of the partition (kop/pulsar/compacted.py); 409 while one runs."""
        ...

    async def compaction_status(self, topic: Topic, partition: int) -> dict[str, str]:
        """Pulsar's LongRunningProcessStatus of the partition's compaction: status, lastError."""
        ...


class PulsarSchemas(Protocol):
    """The Pulsar schema versions as the admin REST reads them (kop/schemas/versions.py implements it; its methods
    raise kop.schemas.versions.SchemaRestError for what Pulsar refuses). The broker's one store, the one the
    Confluent registry (kop/schemas/registry.py) reads `<topic>-value` subjects from."""

    async def rest_schema(self, name: TopicName, version: int | None) -> dict[str, Any] | None:
        """Pulsar's GetSchemaResponse body (version, type, timestamp, data, properties) of a version (None: the
        latest); None when the topic has no such version."""
        ...

    async def rest_schemas(self, name: TopicName) -> list[dict[str, Any]]:
        """Every live version's GetSchemaResponse body, oldest first."""
        ...

    async def rest_post(self, name: TopicName, payload: Any) -> int:
        """Register a PostSchemaPayload (parsed JSON); its version (SchemaRestError when refused)."""
        ...

    async def rest_delete(self, name: TopicName, force: bool = False) -> int:
        """Delete the schema; the tombstone's version (`force`: every version gone, -1)."""
        ...

    async def rest_compatibility(self, name: TopicName, payload: Any) -> dict[str, Any]:
        """Pulsar's IsCompatibilityResponse body for a PostSchemaPayload (SchemaRestError when refused)."""
        ...

    async def rest_version(self, name: TopicName, payload: Any) -> int:
        """The live version equal to a PostSchemaPayload's schema, -1 for none."""
        ...


class PulsarNonPersistent(Protocol):
    """Pulsar's non-persistent topics as the admin REST drives them (kop/pulsar/nonpersistent.py NonPersistentAdmin):
    the ones served now, their stats, and the partitioned topics' partition counts."""

    def served(self, tenant: str, namespace: str) -> list[str]: ...

    def stats(self, name: TopicName, partition: int | None) -> dict[str, object] | None: ...

    async def partitions(self, name: TopicName) -> int: ...

    async def create_partitioned(self, name: TopicName, partitions: int) -> bool: ...

    async def delete_partitioned(self, name: TopicName) -> bool: ...

    async def partitioned_names(self, tenant: str, namespace: str) -> list[str]: ...


class TransactionVerifier(Protocol):
    """What a partition leader asks the transaction coordinator (KIP-890 part 1): before the first
    transactional batch of a transaction on a partition is appended, whether the partition is in the
    producer's transaction. The transaction coordinator sets `BrokerServices.transactions` to one of these
    when it runs; while it is None, produce accepts transactional batches unverified."""

    async def verify_partition(self, transactional_id: str, producer_id: int, producer_epoch: int,
                               topic: str, partition: int) -> ErrorCode:
        """NONE when the partition is in the ongoing transaction of (producer_id, producer_epoch);
        otherwise the error produce answers (Kafka: INVALID_TXN_STATE / TRANSACTION_ABORTABLE for a
        partition not in the transaction, PRODUCER_FENCED / INVALID_PRODUCER_EPOCH for a stale epoch,
        NOT_ENOUGH_REPLICAS for a coordinator that cannot answer now - the producer retries)."""
        ...


@dataclass(frozen=True, slots=True)
class ProvidedServices:
    """The services a protocol handler adds to the broker's (ProtocolHandler.provides, asked after its start()):
    one field per service another part of the broker may use, typed by its interface; None: not provided. The
    composition root sets the BrokerServices attribute of the same name, and refuses two handlers providing one
    service."""

    pulsar_subscriptions: PulsarSubscriptions | None = None
    pulsar_schemas: PulsarSchemas | None = None
    pulsar_non_persistent: PulsarNonPersistent | None = None


class BrokerServices(Protocol):
    """Every service of the broker a handler or the admin server may use (kop.server.service.BrokerService)."""

    config: BrokerConfig
    topics: TopicManager
    broker_configs: BrokerConfigs  # dynamic broker configs (Kafka's KIP-226), in the metadata store
    features: Features  # the finalized features (ApiVersions, UpdateFeatures), in the metadata store
    producer_ids: ProducerIdAllocator
    coordinator: GroupCoordinator
    transactions: TransactionCoordinator  # the transaction coordinator; a TransactionVerifier for produce
    ownership: Ownership  # who serves which partition (this broker alone outside cluster mode)
    metrics: BrokerMetrics
    net: Acceptor  # connection limits and the request-bytes bound, shared by every protocol handler
    storage: LogStorage  # the partition logs' stores (readiness probes, damage reports)
    cluster_id: str
    started_ms: int  # wall-clock start time (DescribeCluster, /admin/v2/brokers)
    ready: bool  # topics loaded and every listener accepting (/ready)
    stopped: bool
    # Provided by a protocol handler (ProvidedServices): the pulsar handler's, None without it or before it started.
    pulsar_subscriptions: PulsarSubscriptions | None
    pulsar_schemas: PulsarSchemas | None
    pulsar_non_persistent: PulsarNonPersistent | None
    authorizer: Authorizer | None  # Kafka's ACLs (authorizationEnabled); None: nothing is checked
    scram_store: ScramCredentialStore  # SCRAM users, in the metadata store (shared by a cluster's brokers)
    # the Confluent ids of topics' schemas (kop/schemas/): the Pulsar handler adds and strips Confluent's prefix
    schema_ids: TopicSchemaIds
    # the topics' Pulsar schema versions (kop/schemas/versions.py): the one store behind both protocols' schemas,
    # built by the composition root; the pulsar handler serves and provides it
    schema_versions: SchemaRegistry
    # Confluent Schema Registry's model over it (subjects, ids, levels, modes): the admin REST's /subjects, ...
    schema_registry: ConfluentRegistry
