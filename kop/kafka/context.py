"""RequestContext: what one Kafka API handler may touch, and the per-partition resolution they share.

Every module of kop/kafka/apis/ serves `handle(ctx, req)`: `ctx` names the request header, the connection
it came in on, and the broker services a handler uses (topics, the group coordinator, ownership, config,
metrics) - so a signature says what a handler touches instead of reaching through
`conn.handler.service.topics`. One context is made per request; it holds two references and computes the
rest on access, so the hot path pays one small allocation.

`partition_log` is the resolution Produce, Fetch, ListOffsets, OffsetForLeaderEpoch and DeleteRecords
share: the topic looked up, the partition index in range, the client's current leader epoch checked
against ours (KIP-320), the partition log opened (which checks ownership in cluster mode); a failure is
a PartitionError carrying Kafka's error code.

`names` is the connection's scope of Kafka names (kop/topics/scope.py): where short topic names, group ids
and transactional ids live - kafkaTenant/kafkaNamespace, or a tenant login's own namespace. API modules
resolve what a client names through it (lookup_topic, find_topic and authorization do so already) and give
the coordinators broker-global names and ids (`names.global_name`, `names.global_id`), so a module never
computes a tenant itself. The default scope is the TopicManager's, so the common case costs one attribute
test and no allocation.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from kop.kafka.apis.common import LEADER_EPOCH, lookup_topic
from kop.kafka.authorize import may_auto_create
from kop.protocol.errors import ErrorCode
from kop.topics.manager import Topic, TopicError

if TYPE_CHECKING:
    from kop.config import BrokerConfig
    from kop.coordinator import GroupCoordinator
    from kop.kafka.connection import KafkaConnection
    from kop.kafka.handler import KafkaProtocolHandler
    from kop.metrics import BrokerMetrics
    from kop.offset.api import PartitionLog
    from kop.protocol import RequestHeader
    from kop.security.principal import KafkaPrincipal
    from kop.services import BrokerServices
    from kop.topics.manager import TopicManager
    from kop.topics.partition import Partition
    from kop.topics.scope import NameScope


class PartitionError(Exception):
    """One partition of a request cannot be served; `code` is Kafka's answer for it."""

    def __init__(self, code: ErrorCode, message: str | None = None) -> None:
        super().__init__(message or code.name)
        self.code = code
        self.message = message


class RequestContext:
    __slots__ = ("conn", "header")

    def __init__(self, conn: KafkaConnection, header: RequestHeader) -> None:
        self.conn = conn
        self.header = header

    @property
    def version(self) -> int:
        return self.header.api_version

    @property
    def handler(self) -> KafkaProtocolHandler:
        return self.conn.handler

    @property
    def services(self) -> BrokerServices:
        return self.conn.handler.service

    @property
    def topics(self) -> TopicManager:
        return self.conn.handler.service.topics

    @property
    def coordinator(self) -> GroupCoordinator:
        return self.conn.handler.service.coordinator

    @property
    def config(self) -> BrokerConfig:
        return self.conn.handler.config

    @property
    def metrics(self) -> BrokerMetrics:
        return self.conn.handler.metrics

    @property
    def listener_name(self) -> str:
        return self.conn.listener_name

    @property
    def principal(self) -> KafkaPrincipal:
        """Who sent the request, as ACLs name it (User:ANONYMOUS until the listener authenticates)."""
        return self.conn.principal

    @property
    def names(self) -> NameScope:
        """How this connection spells topics, groups and transactional ids (module docstring)."""
        names = self.conn.names
        return names if names is not None else self.conn.handler.service.topics.names

    async def lookup_topic(self, name: str | None, auto_create: bool = False) -> Topic | None:
        """kop/kafka/apis/common.py's lookup: None when absent (and not auto-created); TopicError for an
        invalid name. Auto-creation also needs CREATE on the cluster or the topic when ACLs are enforced."""
        if auto_create and name and getattr(self.conn.handler.service, "authorizer", None) is not None:
            auto_create = may_auto_create(self, name)
        return await lookup_topic(self.conn.handler, name, auto_create, self.conn.names)

    async def find_topic(self, name: str | None) -> Topic | None:
        """The topic, or None when it is absent or its name is invalid: the partitions of such a topic are
        each answered UNKNOWN_TOPIC_OR_PARTITION, as Kafka does."""
        try:
            return await lookup_topic(self.conn.handler, name, False, self.conn.names)
        except TopicError:
            return None

    async def partition(self, topic: Topic, partition: int) -> Partition:
        """The partition seam of `partition` (kop/topics/partition.py): what Produce and WriteTxnMarkers append
        through. Raises PartitionError as partition_log() does."""
        try:
            return await self.conn.handler.service.topics.partition(topic, partition)
        except TopicError as e:
            raise PartitionError(ErrorCode[e.error], e.message) from None

    async def partition_log(self, topic: Topic | None, partition: int,
                            current_leader_epoch: int | None = None) -> PartitionLog:
        """The log of `partition` of `topic` (None: the topic was not found). `current_leader_epoch`: the
        client's, checked against LEADER_EPOCH when given (-1 means unknown and passes, as in Kafka).
        Raises PartitionError with Kafka's code: UNKNOWN_TOPIC_OR_PARTITION, UNKNOWN_LEADER_EPOCH (the client
        knows a newer epoch), FENCED_LEADER_EPOCH (an older one), NOT_LEADER_OR_FOLLOWER (cluster mode:
        another broker owns it), or the topic manager's error when the topic went away meanwhile."""
        if topic is None or not 0 <= partition < topic.partitions:
            raise PartitionError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)
        if current_leader_epoch is not None:
            if current_leader_epoch > LEADER_EPOCH:
                raise PartitionError(ErrorCode.UNKNOWN_LEADER_EPOCH)
            if 0 <= current_leader_epoch < LEADER_EPOCH:
                raise PartitionError(ErrorCode.FENCED_LEADER_EPOCH)
        try:
            return await self.conn.handler.service.topics.partition_log(topic, partition)
        except TopicError as e:
            raise PartitionError(ErrorCode[e.error], e.message) from None
