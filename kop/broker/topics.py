"""Topics and partitions: their metadata in the metadata store, and one PartitionLog per partition.

A topic's record (partition count, topic id, per-topic configs) is a small JSON value at
`/kop/topics/<tenant>/<namespace>/<topic>`, written with compare-and-set so that two creators cannot both
win. Partition logs are opened lazily on first use and kept open; each is one managed ledger named in
Pulsar's layout (`tenant/ns/persistent/<topic>-partition-<i>`).
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

from kop.broker.names import OFFSETS_TOPIC, TopicName, parse_topic_name
from kop.broker.topic_config import validate_topic_configs
from kop.config import BrokerConfig
from kop.offset.api import PartitionLog
from kop.storage.api import MetadataStore, NodeExistsError

log = logging.getLogger(__name__)

TOPICS_ROOT = "/kop/topics"


class StorageService(Protocol):
    """What the broker needs from the storage stack (kop.offset's storage service)."""

    metadata_store: MetadataStore

    async def open_log(self, name: str) -> PartitionLog: ...

    async def delete_log(self, name: str) -> None: ...

    async def close(self) -> None: ...


class TopicError(Exception):
    """Carries the Kafka error name to answer with."""

    def __init__(self, error: str, message: str) -> None:
        super().__init__(message)
        self.error = error
        self.message = message


@dataclass(slots=True)
class Topic:
    name: TopicName
    partitions: int
    topic_id: bytes
    configs: dict[str, str]
    created_ms: int
    version: int = 0  # metadata-store version of the record
    internal: bool = False
    logs: dict[int, PartitionLog] = field(default_factory=dict)
    opening: dict[int, asyncio.Future[PartitionLog]] = field(default_factory=dict)
    deleted: bool = False

    def to_json(self) -> bytes:
        return json.dumps(
            {
                "partitions": self.partitions,
                "topicId": self.topic_id.hex(),
                "configs": self.configs,
                "created": self.created_ms,
                "internal": self.internal,
            },
            sort_keys=True,
        ).encode()

    @classmethod
    def from_json(cls, name: TopicName, data: bytes, version: int) -> Topic:
        d: dict[str, Any] = json.loads(data)
        return cls(
            name=name,
            partitions=int(d["partitions"]),
            topic_id=bytes.fromhex(d["topicId"]),
            configs=dict(d.get("configs", {})),
            created_ms=int(d.get("created", 0)),
            version=version,
            internal=bool(d.get("internal", False)),
        )


class TopicManager:
    def __init__(self, config: BrokerConfig, storage: StorageService) -> None:
        self.config = config
        self.storage = storage
        self.store = storage.metadata_store
        self._topics: dict[str, Topic] = {}  # canonical name -> Topic
        self._by_id: dict[bytes, Topic] = {}
        self._lock = asyncio.Lock()
        self.generation = 0  # bumped on every topic change (metadata caches key on it)
        # Called (awaited) after a topic is deleted; the group coordinator drops the topic's offsets.
        self.deletion_listeners: list[Callable[[Topic], Awaitable[None]]] = []

    # ------------------------------------------------------------------ names
    def parse(self, name: str) -> TopicName:
        if name == OFFSETS_TOPIC:
            return self.offsets_topic
        return parse_topic_name(name, self.config.kafkaTenant, self.config.kafkaNamespace)

    def kafka_name(self, t: TopicName) -> str:
        if t == self.offsets_topic:
            return OFFSETS_TOPIC
        return t.kafka_name(self.config.kafkaTenant, self.config.kafkaNamespace)

    @property
    def offsets_topic(self) -> TopicName:
        """__consumer_offsets lives in the metadata namespace, as in KoP, and is shown under its Kafka name."""
        return TopicName(self.config.kafkaMetadataTenant, self.config.kafkaMetadataNamespace, OFFSETS_TOPIC)

    @staticmethod
    def _path(t: TopicName) -> str:
        return f"{TOPICS_ROOT}/{t.tenant}/{t.namespace}/{t.local}"

    # ------------------------------------------------------------------ load
    async def load(self) -> None:
        """Read every topic record (called once at start-up)."""
        for tenant in await self.store.children(TOPICS_ROOT):
            for ns in await self.store.children(f"{TOPICS_ROOT}/{tenant}"):
                for local in await self.store.children(f"{TOPICS_ROOT}/{tenant}/{ns}"):
                    tn = TopicName(tenant, ns, local)
                    got = await self.store.get(self._path(tn))
                    if got is None:
                        continue
                    topic = Topic.from_json(tn, got[0], got[1].version)
                    self._remember(topic)
        log.info("loaded %d topics", len(self._topics))

    def _remember(self, topic: Topic) -> None:
        self._topics[topic.name.canonical] = topic
        self._by_id[topic.topic_id] = topic
        self.generation += 1

    # ------------------------------------------------------------------ queries
    def get(self, name: TopicName) -> Topic | None:
        return self._topics.get(name.canonical)

    def get_by_id(self, topic_id: bytes) -> Topic | None:
        return self._by_id.get(topic_id)

    def all(self) -> list[Topic]:
        return list(self._topics.values())

    # ------------------------------------------------------------------ changes
    async def create(
        self,
        name: TopicName,
        partitions: int,
        configs: dict[str, str] | None = None,
        *,
        validate_only: bool = False,
        internal: bool = False,
    ) -> Topic:
        configs = dict(configs or {})
        if partitions < 1:
            raise TopicError("INVALID_PARTITIONS", "Number of partitions must be larger than 0.")
        if partitions > 100000:
            raise TopicError("INVALID_PARTITIONS", "Number of partitions must not exceed 100000.")
        try:
            validate_topic_configs(configs)
        except ValueError as e:
            raise TopicError("INVALID_CONFIG", str(e)) from None
        async with self._lock:
            if name.canonical in self._topics:
                raise TopicError("TOPIC_ALREADY_EXISTS", f"Topic '{self.kafka_name(name)}' already exists.")
            topic = Topic(
                name=name,
                partitions=partitions,
                topic_id=uuid.uuid4().bytes,
                configs=configs,
                created_ms=int(time.time() * 1000),
                internal=internal,
            )
            if validate_only:
                return topic
            try:
                stat = await self.store.put(self._path(name), topic.to_json(), expected_version=-1)
            except NodeExistsError:
                raise TopicError("TOPIC_ALREADY_EXISTS", f"Topic '{self.kafka_name(name)}' already exists.") from None
            topic.version = stat.version
            self._remember(topic)
            log.info("created topic %s with %d partitions", name.canonical, partitions)
            return topic

    async def add_partitions(self, topic: Topic, count: int, validate_only: bool = False) -> None:
        if count <= topic.partitions:
            raise TopicError(
                "INVALID_PARTITIONS",
                f"Topic currently has {topic.partitions} partitions, {count} would not be an increase.",
            )
        if count > 100000:
            raise TopicError("INVALID_PARTITIONS", "Number of partitions must not exceed 100000.")
        if validate_only:
            return
        await self._update(topic, partitions=count)

    async def set_configs(self, topic: Topic, configs: dict[str, str], validate_only: bool = False) -> None:
        try:
            validate_topic_configs(configs)
        except ValueError as e:
            raise TopicError("INVALID_CONFIG", str(e)) from None
        if not validate_only:
            await self._update(topic, configs=dict(configs))

    async def _update(self, topic: Topic, **changes: Any) -> None:
        async with self._lock:
            old = (topic.partitions, topic.configs)
            for k, v in changes.items():
                setattr(topic, k, v)
            try:
                stat = await self.store.put(self._path(topic.name), topic.to_json(), expected_version=topic.version)
            except Exception:
                topic.partitions, topic.configs = old
                raise
            topic.version = stat.version
            self.generation += 1

    async def delete(self, topic: Topic) -> None:
        async with self._lock:
            if topic.deleted:
                return
            topic.deleted = True
            self._topics.pop(topic.name.canonical, None)
            self._by_id.pop(topic.topic_id, None)
            self.generation += 1
        # Close what is open, then remove every partition's managed ledger and finally the topic record.
        for pending in list(topic.opening.values()):
            try:
                await pending
            except Exception:
                pass
        for plog in list(topic.logs.values()):
            try:
                await plog.close()
            except Exception:
                log.exception("closing %s during delete", plog.name)
        topic.logs.clear()
        for p in range(topic.partitions):
            try:
                await self.storage.delete_log(topic.name.ledger_name(p))
            except Exception:
                log.exception("deleting ledger of %s partition %d", topic.name.canonical, p)
        try:
            await self.store.delete(self._path(topic.name))
        except Exception:
            log.exception("deleting topic record %s", topic.name.canonical)
        log.info("deleted topic %s", topic.name.canonical)
        for listener in list(self.deletion_listeners):
            try:
                await listener(topic)
            except Exception:
                log.exception("topic deletion listener failed for %s", topic.name.canonical)

    # ------------------------------------------------------------------ partition logs
    async def partition_log(self, topic: Topic, partition: int) -> PartitionLog:
        plog = topic.logs.get(partition)
        if plog is not None:
            return plog
        if topic.deleted:
            raise TopicError("UNKNOWN_TOPIC_OR_PARTITION", "topic was deleted")
        pending = topic.opening.get(partition)
        if pending is None:
            pending = asyncio.get_running_loop().create_future()
            topic.opening[partition] = pending
            try:
                plog = await self.storage.open_log(topic.name.ledger_name(partition))
                if topic.deleted:
                    await plog.close()
                    raise TopicError("UNKNOWN_TOPIC_OR_PARTITION", "topic was deleted")
                topic.logs[partition] = plog
                pending.set_result(plog)
            except BaseException as e:
                pending.set_exception(e)
                pending.exception()  # mark retrieved
                raise
            finally:
                topic.opening.pop(partition, None)
            return plog
        return await pending

    async def close(self) -> None:
        for topic in list(self._topics.values()):
            for plog in list(topic.logs.values()):
                try:
                    await plog.close()
                except Exception:
                    log.exception("closing %s", plog.name)
            topic.logs.clear()
