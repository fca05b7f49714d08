"""Topics and partitions: their metadata in the metadata store, and one PartitionLog per partition.

A topic's record (partition count, topic id, per-topic configs) is a small JSON value at
`/kop/topics/<tenant>/<namespace>/<topic>`, written with compare-and-set so that two creators cannot both
win. Partition logs are opened lazily on first use and kept open; each is one managed ledger named in
Pulsar's layout (`tenant/ns/persistent/<topic>-partition-<i>`; a non-partitioned topic's one partition is
`tenant/ns/persistent/<topic>`, Topic.partitioned).

Cluster mode (several brokers on one ZooKeeper; kop/cluster/ownership.py): `ownership` is set and
`partition_log` is the chokepoint of ownership - a partition whose bundle this broker does not own (or
any partition while the ZooKeeper connection is suspended: `paused`) raises TopicError
NOT_LEADER_OR_FOLLOWER, and logs of released bundles are closed (`release_bundle`). Topic records are
shared: `watch()` follows ZooKeeper so that topics created, deleted or altered on another broker show up
here (a miss is also re-read: `refresh`). In embedded mode `ownership` is None and the fast path of
`partition_log` is one dict lookup and one attribute test, as before.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import json
import logging
import time
import uuid
from collections.abc import Awaitable, Callable, Coroutine
from dataclasses import dataclass, field
from typing import Any

from kop.aio import SingleFlight, describe_task, describe_threads, run_to_end
from kop.config import BrokerConfig
from kop.offset.api import PartitionLog
from kop.offset.storage import LogStorage
from kop.storage.api import NodeExistsError, StorageError
from kop.topics.names import OFFSETS_TOPIC, TRANSACTION_STATE_TOPIC, TopicName, parse_topic_name
from kop.topics.namespaces import Namespaces
from kop.topics.partition import Partition, ProducerTables, RegisteredSchemaIds
from kop.topics.scope import NameScope
from kop.topics.topic_config import ledger_config, validate_topic_configs
from kop.topics.write_rules import KEY_VALIDATION, VALUE_VALIDATION

log = logging.getLogger(__name__)

TOPICS_ROOT = "/kop/topics"
# A topic being deleted with more partitions than this has its stored logs listed once (_stored_partitions).
LIST_LOGS_ABOVE_PARTITIONS = 64
#: a topic deletion still running after this long logs where it waits
SLOW_DELETE_SECONDS = 10


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
    opening: SingleFlight[int, PartitionLog] = field(default_factory=SingleFlight)  # partition logs being opened
    deleted: bool = False
    # set in the stored record before any log is removed: a broker that stops or dies mid-deletion finishes
    # it at its next start instead of bringing back a topic with some partitions' data gone
    deleting: bool = False
    # Pulsar's two topic kinds. A non-partitioned topic has one partition (Kafka's partition 0) stored under the
    # topic's own name; Pulsar clients see it without a `-partition-N` suffix and with partition -1 in message
    # ids. Records written before the kind existed have no "partitioned" key: they were all partitioned.
    partitioned: bool = True

    def ledger_name(self, partition: int) -> str:
        """Managed-ledger name of `partition` (0 of a non-partitioned topic: the topic's own name)."""
        return self.name.ledger_name(partition if self.partitioned else None)

    def pulsar_names(self) -> list[str]:
        """The topic names Pulsar lists for this topic: each partition's, or the topic's own when non-partitioned."""
        if not self.partitioned:
            return [self.name.canonical]
        return [f"{self.name.canonical}-partition-{p}" for p in range(self.partitions)]

    def pulsar_partition(self, partition: int) -> int:
        """The partition index a Pulsar message id carries: -1 for a non-partitioned topic, as Pulsar's."""
        return partition if self.partitioned else -1

    def to_json(self) -> bytes:
        record: dict[str, Any] = {
            "partitions": self.partitions,
            "topicId": self.topic_id.hex(),
            "configs": self.configs,
            "created": self.created_ms,
            "internal": self.internal,
        }
        if self.deleting:
            record["deleting"] = True
        if not self.partitioned:  # absent means partitioned, so older records read the same
            record["partitioned"] = False
        return json.dumps(record, sort_keys=True).encode()

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
            deleting=bool(d.get("deleting", False)),
            partitioned=bool(d.get("partitioned", True)),
        )


class TopicManager:
    def __init__(self, config: BrokerConfig, storage: LogStorage) -> None:
        self.config = config
        self.storage = storage
        self.store = storage.metadata_store
        self._topics: dict[str, Topic] = {}  # canonical name -> Topic
        self._by_id: dict[bytes, Topic] = {}
        self._lock = asyncio.Lock()
        self._deletions: dict[bytes, asyncio.Task[None]] = {}  # topic id -> its deletion under way
        self._marked: dict[bytes, asyncio.Future[None]] = {}  # topic id -> set once its record says `deleting`
        self.generation = 0  # bumped on every topic change (metadata caches key on it)
        # Called (awaited) after a topic is deleted; the group coordinator drops the topic's offsets.
        self.deletion_listeners: list[Callable[[Topic], Awaitable[None]]] = []
        # Retention keeps what these name (the lowest offset a Pulsar subscription has not acknowledged, None:
        # nothing to keep); the pulsar handler adds one. Kafka consumer groups hold nothing back.
        self.retention_floors: list[Callable[[Topic, int], Awaitable[int | None]]] = []
        # Cluster mode: kop.cluster.ownership.ZooKeeperOwnership (None: this broker owns everything).
        self.ownership: Any = None
        self._paused = False  # cluster mode, not registered or the ZooKeeper connection suspended
        # Called when a partition log is let go (released bundle, deleted topic): per-partition caches
        # keyed on the ledger name (idempotent-producer state) must not outlive the log.
        self.log_release_listeners: list[Callable[[str], None]] = []
        self._watch_stops: dict[str, Callable[[], None]] = {}
        self._deleting: dict[str, bytes] = {}  # canonical name -> id of a topic this broker is deleting
        self._background: set[asyncio.Future[object]] = set()  # watch follow-ups (referenced until done)
        # The default scope of Kafka names (kafkaTenant/kafkaNamespace); tenant logins get their own
        # (kop.topics.scope, kafkaEnableMultiTenantMetadata).
        self.names = NameScope(self, config.kafkaTenant, config.kafkaNamespace)
        # The partitions' producer-state tables, for producer-id expiration; a released log's goes with it.
        self.producer_tables = ProducerTables()
        self.log_release_listeners.append(self.producer_tables.forget)
        # The schema store (kop/schemas/, set by the composition root): the ids a Kafka record may name on a
        # topic with confluent.*.schema.validation. None: such configs are refused (_validate_configs).
        self.schema_ids: RegisteredSchemaIds | None = None
        # Tenants and namespaces (kop/topics/namespaces.py): loaded after the topics, which may name some
        self.namespaces = Namespaces(config, self.store)
        self.namespaces.clustered = lambda: self.ownership is not None
        self.namespaces.has_topics = lambda tenant, ns: any(
            (t.name.tenant, t.name.namespace) == (tenant, ns) for t in self._topics.values())
        self.deletion_listeners.append(lambda t: self.namespaces.drop_topic(t.name))  # its topic-level policies

    def _spawn(self, coro: Coroutine[object, object, object]) -> None:
        task = asyncio.ensure_future(coro)
        self._background.add(task)
        task.add_done_callback(self._background.discard)

    # ------------------------------------------------------------------ names
    def parse(self, name: str) -> TopicName:
        if name == OFFSETS_TOPIC:
            return self.offsets_topic
        if name == TRANSACTION_STATE_TOPIC:
            return self.transaction_state_topic
        return parse_topic_name(name, self.config.kafkaTenant, self.config.kafkaNamespace)

    def kafka_name(self, t: TopicName) -> str:
        if t == self.offsets_topic:
            return OFFSETS_TOPIC
        if t == self.transaction_state_topic:
            return TRANSACTION_STATE_TOPIC
        return t.kafka_name(self.config.kafkaTenant, self.config.kafkaNamespace)

    @property
    def offsets_topic(self) -> TopicName:
        """__consumer_offsets lives in the metadata namespace, as in KoP, and is shown under its Kafka name."""
        return TopicName(self.config.kafkaMetadataTenant, self.config.kafkaMetadataNamespace, OFFSETS_TOPIC)

    @property
    def transaction_state_topic(self) -> TopicName:
        """__transaction_state: the transaction coordinator's topic, beside __consumer_offsets."""
        return TopicName(self.config.kafkaMetadataTenant, self.config.kafkaMetadataNamespace, TRANSACTION_STATE_TOPIC)

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
                    if topic.deleting:  # this broker (or another) stopped in the middle of deleting it
                        log.info("finishing the deletion of topic %s", tn.canonical)
                        self.start_delete(topic)
                        continue
                    self._remember(topic)
        log.info("loaded %d topics", len(self._topics))
        await self.namespaces.load({(t.name.tenant, t.name.namespace) for t in self._topics.values()})

    def _remember(self, topic: Topic) -> None:
        self._topics[topic.name.canonical] = topic
        self._by_id[topic.topic_id] = topic
        self.generation += 1
        if self.ownership is not None:
            self._spawn(self.ownership.watch_namespace(f"{topic.name.tenant}/{topic.name.namespace}"))
            if self._watch_stops:
                self._spawn(self._watch_topic(topic.name))

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
        partitioned: bool = True,
    ) -> Topic:
        """Create a topic; `partitioned=False` makes a Pulsar non-partitioned topic (one partition, see Topic)."""
        configs = dict(configs or {})
        if not partitioned and partitions != 1:
            raise TopicError("INVALID_PARTITIONS", "A non-partitioned topic has exactly one partition.")
        if partitions < 1:
            raise TopicError("INVALID_PARTITIONS", "Number of partitions must be larger than 0.")
        if partitions > 100000:
            raise TopicError("INVALID_PARTITIONS", "Number of partitions must not exceed 100000.")
        self._validate_configs(configs)
        async with self._lock:
            if name.canonical in self._topics:
                raise TopicError("TOPIC_ALREADY_EXISTS", f"Topic '{self.kafka_name(name)}' already exists.")
            if name.canonical in self._deleting:  # its old logs are still being removed (ZooKeeper-era Kafka's words)
                raise TopicError("TOPIC_ALREADY_EXISTS", f"Topic '{self.kafka_name(name)}' is marked for deletion.")
            topic = Topic(
                name=name,
                partitions=partitions,
                topic_id=uuid.uuid4().bytes,
                configs=configs,
                created_ms=int(time.time() * 1000),
                internal=internal,
                partitioned=partitioned,
            )
            if validate_only:
                return topic
            # a Kafka client may name any namespace; the Pulsar side checks existence before it gets here
            await self.namespaces.ensure(name.tenant, name.namespace)
            try:
                # shielded: a caller cancelled after the record landed (a client that timed out and closed its
                # connection) must not leave a stored topic this broker does not know - every later create then
                # hit NodeExistsError and the topic stayed invisible (the fuzz suite's health check found it)
                await asyncio.shield(self._store_new(topic))
            except NodeExistsError:
                await self.refresh(name)  # created by another broker, or by an earlier interrupted create: learn it
                raise TopicError("TOPIC_ALREADY_EXISTS", f"Topic '{self.kafka_name(name)}' already exists.") from None
            log.info("created topic %s with %d partitions%s", name.canonical, partitions,
                     "" if partitioned else " (non-partitioned)")
            return topic

    async def _store_new(self, topic: Topic) -> None:
        stat = await self.store.put(self._path(topic.name), topic.to_json(), expected_version=-1)
        topic.version = stat.version
        self._remember(topic)

    async def add_partitions(self, topic: Topic, count: int, validate_only: bool = False) -> None:
        if not topic.partitioned:  # Pulsar cannot turn a non-partitioned topic into a partitioned one either
            raise TopicError("INVALID_PARTITIONS", f"Topic '{self.kafka_name(topic.name)}' is a non-partitioned "
                             "Pulsar topic: its partition count cannot change.")
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
        self._validate_configs(configs)
        if not validate_only:
            await self._update(topic, configs=dict(configs))

    def _validate_configs(self, configs: dict[str, str]) -> None:
        """Kafka's checks (topic_config.py), then this broker's: schema-id validation needs a schema store to
        read ids from, so without one it is refused when set rather than by every later Produce."""
        try:
            validate_topic_configs(configs)
        except ValueError as e:
            raise TopicError("INVALID_CONFIG", str(e)) from None
        if self.schema_ids is None:
            for name in (KEY_VALIDATION, VALUE_VALIDATION):
                if configs.get(name, "").strip().lower() == "true":
                    raise TopicError("INVALID_CONFIG", f"{name}=true needs a schema registry, and this broker has "
                                     "none")

    async def _update(self, topic: Topic, **changes: Any) -> None:
        """Change the topic in memory and in the store. Runs to its end when its request is cancelled (its
        connection closed; kop.aio.run_to_end): stopped at the store's write, the change stayed in memory with the
        topic's version behind the stored one, and every later change of the topic was refused (BadVersion)."""
        await run_to_end(self._store_update(topic, changes))

    async def _store_update(self, topic: Topic, changes: dict[str, object]) -> None:
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
        if "configs" in changes:
            new = ledger_config(topic.configs, self.storage.managed_ledger_config)
            for plog in list(topic.logs.values()):  # segment.bytes / segment.ms apply to open ledgers too
                plog.reconfigure(new)

    async def delete(self, topic: Topic) -> None:
        """Delete `topic` and wait for it. The work runs in a task of its own (start_delete), so a caller that
        gives up - a DeleteTopics past its timeout, a connection that closed - never leaves a half-deleted
        topic behind: once started, a deletion finishes."""
        await asyncio.shield(self.start_delete(topic))

    def start_delete(self, topic: Topic) -> asyncio.Task[None]:
        """The deletion of `topic`, started now or joined if it is already under way."""
        task = self._deletions.get(topic.topic_id)
        if task is None:
            self._marked[topic.topic_id] = asyncio.get_running_loop().create_future()
            task = asyncio.create_task(self._delete(topic), name=f"delete-topic {topic.name.canonical}")
            self._deletions[topic.topic_id] = task
            task.add_done_callback(functools.partial(self._deletion_done, topic.topic_id))
        return task

    async def deletion_recorded(self, topic: Topic) -> None:
        """Wait until the deletion of `topic` is written in its record (or over): from then on a crash does not
        undo it, so a DeleteTopics may answer "still in progress" without the deletion being lost."""
        marked = self._marked.get(topic.topic_id)
        if marked is not None:
            await asyncio.shield(marked)

    def _deletion_done(self, topic_id: bytes, task: asyncio.Task[None]) -> None:
        self._deletions.pop(topic_id, None)
        self._set_marked(topic_id)
        if not task.cancelled() and task.exception() is not None:  # retrieved here: no caller may be waiting
            log.error("deleting a topic failed", exc_info=task.exception())

    def _set_marked(self, topic_id: bytes) -> None:
        marked = self._marked.pop(topic_id, None)
        if marked is not None and not marked.done():
            marked.set_result(None)

    def _log_slow_delete(self, topic: Topic) -> None:
        """A deletion still running after SLOW_DELETE_SECONDS: log where it waits, since nothing else would
        say why a DeleteTopics timed out."""
        task = self._deletions.get(topic.topic_id)
        if task is not None and not task.done():
            log.warning("deleting topic %s takes more than %d s; it waits in:\n%s\n%s", topic.name.canonical,
                        SLOW_DELETE_SECONDS, describe_task(task), describe_threads())

    async def _delete(self, topic: Topic) -> None:
        slow = asyncio.get_running_loop().call_later(SLOW_DELETE_SECONDS, self._log_slow_delete, topic)
        try:
            await self._delete_now(topic)
        finally:
            slow.cancel()

    async def _delete_now(self, topic: Topic) -> None:
        async with self._lock:
            if topic.deleted:
                return
            topic.deleted = True
            self._topics.pop(topic.name.canonical, None)
            self._by_id.pop(topic.topic_id, None)
            self.generation += 1
            self._deleting[topic.name.canonical] = topic.topic_id  # refresh() must not bring it back
            await self._mark_deleting(topic)
        self._set_marked(topic.topic_id)
        # Close what is open, then remove every partition's managed ledger and finally the topic record.
        await topic.opening.wait_all()
        for plog in list(topic.logs.values()):
            try:
                await plog.close()
            except Exception:
                log.exception("closing %s during delete", plog.name)
        topic.logs.clear()
        for p in await self._stored_partitions(topic):
            try:
                await self.storage.delete_log(topic.ledger_name(p))
            except Exception:
                log.exception("deleting ledger of %s partition %d", topic.name.canonical, p)
        try:
            await self.store.delete(self._path(topic.name))
        except Exception:
            log.exception("deleting topic record %s", topic.name.canonical)
        if self._deleting.get(topic.name.canonical) == topic.topic_id:
            del self._deleting[topic.name.canonical]
        log.info("deleted topic %s", topic.name.canonical)
        await self._notify_deleted(topic)

    async def _mark_deleting(self, topic: Topic) -> None:
        """Write the deletion into the topic's record before anything is removed (Topic.deleting)."""
        if topic.deleting:
            return
        topic.deleting = True
        try:
            got = await self.store.get(self._path(topic.name))
            if got is None or not got[0] or Topic.from_json(topic.name, got[0], 0).topic_id != topic.topic_id:
                return  # already gone, or another broker's topic of the same name
            await self.store.put(self._path(topic.name), topic.to_json(), expected_version=got[1].version)
        except Exception:  # the deletion goes on; only a stop before its end would not resume it
            log.exception("marking topic %s as being deleted", topic.name.canonical)

    async def _stored_partitions(self, topic: Topic) -> list[int]:
        """The partitions of a topic being deleted that may have a stored log. A log exists only once a
        partition was opened, so a topic of many partitions (up to 100000) usually has few: asking the store
        partition by partition (one metadata read each) made a DeleteTopics of tens of thousands of
        partitions wait seconds to minutes. Above a few partitions one listing of the stored logs says
        which exist."""
        if topic.partitions <= LIST_LOGS_ABOVE_PARTITIONS:
            return list(range(topic.partitions))
        try:
            stored = set(await self.storage.list_logs())
        except Exception:
            log.exception("listing stored logs to delete %s; deleting partition by partition", topic.name.canonical)
            return list(range(topic.partitions))
        return [p for p in range(topic.partitions) if topic.ledger_name(p) in stored]

    @property
    def paused(self) -> bool:
        """Cluster mode: serve nothing now - the ZooKeeper session is suspended or lost, the broker is not
        registered yet, or its session lease has lapsed (kop/cluster/lease.py: no proof that the session is
        alive, e.g. just woken from SIGSTOP). Consulted before anything is answered from memory (open logs,
        loaded coordinator state). Always False in embedded mode."""
        return self._paused or (self.ownership is not None and not self.ownership.serving)

    @paused.setter
    def paused(self, value: bool) -> None:
        self._paused = value

    # ------------------------------------------------------------------ partition logs
    def owns(self, topic: Topic, partition: int) -> bool:
        """Whether this broker serves `partition` of `topic` now (always, without cluster mode)."""
        return self.owns_name(topic.name, partition)

    def owns_name(self, name: TopicName, partition: int) -> bool:
        """owns() by name: a Pulsar lookup asks it of a topic its client has yet to create."""
        return self.ownership is None or self.ownership.owns(name, partition)

    def _check_owned(self, topic: Topic, partition: int) -> None:
        if self.ownership is not None and not self.ownership.owns(topic.name, partition):
            raise TopicError("NOT_LEADER_OR_FOLLOWER",
                             f"This broker is not the owner of {self.kafka_name(topic.name)}-{partition}"
                             + (" (not serving: its ZooKeeper session is in doubt)" if self.paused else ""))

    async def partition(self, topic: Topic, partition: int) -> Partition:
        """The partition seam (kop/topics/partition.py) over the open log of `partition`: every append goes
        through it. Raises TopicError as partition_log() does."""
        return Partition(topic, partition, await self.partition_log(topic, partition), self.config,
                         self.producer_tables, self.schema_ids)

    async def partition_log(self, topic: Topic, partition: int) -> PartitionLog:
        plog = topic.logs.get(partition)
        if plog is not None and plog.fenced:
            # Its managed ledger fenced itself: the metadata changed under it. Another broker that took the
            # partition also takes its bundle (release_bundle drops the log); anything else - a write of ours
            # whose answer was lost - would leave the partition refusing every write until a restart.
            # Pulsar closes a fenced topic and opens it again on the next lookup; so does this, below, when
            # this broker still owns the partition (the opening recovers the last ledger).
            del topic.logs[partition]  # before any await: one caller lets it go, the others open the new one
            log.warning("partition %s: its managed ledger was fenced; opening it again", plog.name)
            await self._let_go(plog, abandon=True)
            plog = None
        if plog is not None and not self.paused:
            return plog
        if topic.deleted:
            raise TopicError("UNKNOWN_TOPIC_OR_PARTITION", "topic was deleted")
        self._check_owned(topic, partition)
        if plog is not None:
            return plog

        async def open_log() -> PartitionLog:
            try:
                plog = await self.storage.open_log(topic.ledger_name(partition),
                                                  ledger_config(topic.configs, self.storage.managed_ledger_config))
            except StorageError as e:  # a full or read-only disk: KAFKA_STORAGE_ERROR, not a closed connection
                raise TopicError("KAFKA_STORAGE_ERROR", f"cannot open the partition: {e}") from e
            if topic.deleted:
                await plog.close()
                raise TopicError("UNKNOWN_TOPIC_OR_PARTITION", "topic was deleted")
            if self.ownership is not None and not self.ownership.owns(topic.name, partition):
                await self._let_go(plog, abandon=self.paused)  # released while it was opening
                self._check_owned(topic, partition)
            topic.logs[partition] = plog
            return plog

        return await topic.opening.run(partition, open_log)

    async def _let_go(self, plog: PartitionLog, abandon: bool) -> None:
        for listener in list(self.log_release_listeners):
            listener(plog.name)
        try:
            if abandon:
                plog.abandon()
            else:
                await plog.close()
        except Exception:
            log.exception("closing %s", plog.name)

    async def release_bundle(self, bundle: Any, abandon: bool) -> None:
        """Close (abandon: drop without writing) the open logs of the partitions in `bundle` - it was
        released, so another broker owns them or soon will."""
        assert self.ownership is not None
        for topic in list(self._topics.values()):
            if f"{topic.name.tenant}/{topic.name.namespace}" != bundle.namespace:
                continue
            for p in list(topic.logs):
                if self.ownership.bundle_of(topic.name, p) == bundle:
                    await self._let_go(topic.logs.pop(p), abandon)

    # ------------------------------------------------------------------ cluster mode: shared topic records
    async def refresh(self, name: TopicName) -> Topic | None:
        """Re-read one topic record from the metadata store (cluster mode: another broker may have
        created, altered or deleted it) and update the cache; returns the current topic."""
        got = await self.store.get(self._path(name))
        cached = self._topics.get(name.canonical)
        if got is None or not got[0]:
            if cached is not None:
                await self._deleted_elsewhere(cached)
            return None
        stored = Topic.from_json(name, got[0], got[1].version)
        if self._deleting.get(name.canonical) == stored.topic_id:
            return None  # being deleted here: its record goes last
        if stored.deleting:  # being deleted by another broker
            if cached is not None:
                await self._deleted_elsewhere(cached)
            return None
        if cached is not None and cached.topic_id == stored.topic_id:
            if stored.version > cached.version:
                cached.partitions, cached.configs, cached.version = stored.partitions, stored.configs, stored.version
                self.generation += 1
            return cached
        if cached is not None:  # deleted and created again under the same name
            await self._deleted_elsewhere(cached)
        self._remember(stored)
        log.info("learned topic %s (%d partitions) from the metadata store", name.canonical, stored.partitions)
        return stored

    async def _deleted_elsewhere(self, topic: Topic) -> None:
        if topic.deleted:
            return
        topic.deleted = True
        if self._topics.get(topic.name.canonical) is topic:
            del self._topics[topic.name.canonical]
        self._by_id.pop(topic.topic_id, None)
        self.generation += 1
        for p in list(topic.logs):
            await self._let_go(topic.logs.pop(p), abandon=False)
        log.info("topic %s was deleted by another broker", topic.name.canonical)
        await self._notify_deleted(topic)

    async def _notify_deleted(self, topic: Topic) -> None:
        """Tell the deletion listeners (the group coordinator drops the topic's offsets); one failing
        listener must not keep the others from hearing it."""
        for listener in list(self.deletion_listeners):
            try:
                await listener(topic)
            except Exception:
                log.exception("topic deletion listener failed for %s", topic.name.canonical)

    async def watch(self) -> None:
        """Follow /kop/topics in ZooKeeper (cluster mode): new tenants, namespaces and topics, topic
        deletions (child lists) and alterations (one data watch per topic)."""
        store: Any = self.store
        if not await store.exists(TOPICS_ROOT):
            with contextlib.suppress(NodeExistsError):
                await store.put(TOPICS_ROOT, b"", expected_version=-1)
        await self._watch_level(TOPICS_ROOT, 0)
        for topic in list(self._topics.values()):
            await self._watch_topic(topic.name)

    async def _watch_level(self, path: str, depth: int) -> None:
        if path in self._watch_stops:
            return
        self._watch_stops[path] = lambda: None
        store: Any = self.store

        def changed(names: list[str]) -> None:
            self._spawn(self._level_changed(path, depth, names))

        self._watch_stops[path] = await store.watch_children_async(path, changed)

    async def _level_changed(self, path: str, depth: int, names: list[str]) -> None:
        try:
            if depth < 2:
                for n in names:
                    await self._watch_level(f"{path}/{n}", depth + 1)
                return
            _, _, tenant, ns = path.rsplit("/", 3)
            present = {TopicName(tenant, ns, n) for n in names}
            for tn in present:
                if tn.canonical not in self._topics:
                    await self.refresh(tn)
            for topic in list(self._topics.values()):
                if (topic.name.tenant, topic.name.namespace) == (tenant, ns) and topic.name not in present:
                    await self.refresh(topic.name)
        except Exception:
            log.exception("following topic changes under %s failed", path)

    async def _watch_topic(self, name: TopicName) -> None:
        path = self._path(name)
        if path in self._watch_stops:
            return
        self._watch_stops[path] = lambda: None
        store: Any = self.store

        def changed(value: bytes | None, stat: Any) -> None:
            if value is None:
                self._watch_stops.pop(path, lambda: None)()
                return
            cached = self._topics.get(name.canonical)
            if cached is None or stat.version > cached.version:
                self._spawn(self.refresh(name))

        self._watch_stops[path] = await store.watch_data_async(path, changed)

    async def close(self) -> None:
        for stop in list(self._watch_stops.values()):
            stop()
        self._watch_stops.clear()
        if self._marked:  # a deletion already answered is recorded before it stops: the next start finishes it
            await asyncio.wait([asyncio.shield(f) for f in self._marked.values()], timeout=SLOW_DELETE_SECONDS)
        for task in list(self._deletions.values()):
            task.cancel()
        if self._deletions:
            await asyncio.wait(list(self._deletions.values()))
        for topic in list(self._topics.values()):
            for plog in list(topic.logs.values()):
                try:
                    await plog.close()
                except Exception:
                    log.exception("closing %s", plog.name)
            topic.logs.clear()
