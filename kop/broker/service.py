"""The broker service: storage, topics, producer ids and the protocol handlers, with one lifecycle.

It owns everything the protocol handlers share, runs the background chores (retention, the log cleaner), and
shuts down in
the order that loses nothing: stop accepting, let in-flight requests finish, close the logs, close storage.

`ownership` says which broker serves which partition (kop/cluster/ownership.py): LocalOwnership - this
broker, always - on the embedded storage; ZooKeeperOwnership in cluster mode (BookKeeper + ZooKeeper
storage), where brokers register in ZooKeeper and own namespace bundles. In cluster mode start-up serves
the Kafka listeners before registering (the registration carries the bound ports), and ownership changes
drive the group coordinator: an acquired bundle's __consumer_offsets partitions are loaded, a released
bundle's are unloaded and its logs closed. Chores (retention, log cleaner) only touch owned partitions.
"""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from collections.abc import Callable
from typing import Any

from kop.admin.metrics import BrokerMetrics
from kop.broker.producer_ids import ProducerIdAllocator
from kop.broker.protocol_handler import ProtocolHandler, load_handlers
from kop.broker.topic_config import effective
from kop.broker.topics import StorageService, TopicManager
from kop.cluster.bundles import Bundle
from kop.cluster.ownership import BrokerInfo, LocalOwnership, Ownership, ZooKeeperOwnership
from kop.config import BrokerConfig
from kop.coordinator import GroupCoordinator

log = logging.getLogger(__name__)

CLUSTER_ID_PATH = "/kop/cluster-id"


class BrokerService:
    def __init__(self, config: BrokerConfig, storage: StorageService) -> None:
        self.config = config
        self.storage = storage
        self.topics = TopicManager(config, storage)
        self.producer_ids = ProducerIdAllocator(storage.metadata_store, config.kafkaBrokerId)
        # The group coordinator: a client of the topics, keeping its state in __consumer_offsets.
        self.coordinator = GroupCoordinator(config, self.topics)
        self.handlers: list[ProtocolHandler] = []
        self.cluster_id = ""
        self.started_ms = 0
        self._tasks: list[asyncio.Task[Any]] = []
        self._stopping = False
        self.on_stop: list[Callable[[], Any]] = []
        self.metrics = BrokerMetrics(config.metricsMaxTopicLabels, config.metricsMaxGroupLabels,
                                     config.slowRequestThresholdMs)
        self.metrics.open_logs = lambda: getattr(storage, "open_logs", {})
        self.metrics.topic_exists = lambda name: self.topics.get(self.topics.parse(name)) is not None
        self.admin: Any = None  # kop.admin.server.AdminServer when webServicePort >= 0
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
            self.topics.log_release_listeners.append(self._forget_partition_state)

    @property
    def clustered(self) -> bool:
        return self.ownership.clustered

    async def start(self, handlers: list[ProtocolHandler] | None = None) -> None:
        if self.config.webServicePort >= 0:
            # First, so /health answers (and /ready says 503) while topics load.
            from kop.admin.server import AdminServer

            self.admin = AdminServer(self)
            await self.admin.start()
            log.info("admin HTTP listening on %s (bound to %s)", self.admin.url,
                     self.config.webServiceBindAddress or "*")
        self.cluster_id = await self._cluster_id()
        await self.topics.load()
        self.handlers = handlers if handlers is not None else load_handlers(self.config)
        if self.clustered:
            await self.topics.watch()
            for h in self.handlers:
                await h.start(self)
            await self.ownership.start(self._local_broker())  # BrokerIdInUseError: a duplicate id
            await self.coordinator.start()
        else:
            await self.coordinator.start()  # creates __consumer_offsets if needed; loads it in the background
            for h in self.handlers:
                await h.start(self)
            self.ownership.local = self._local_broker()
        self._tasks.append(asyncio.create_task(self._retention_loop(), name="retention"))
        if self.config.logCleanerEnabled:
            self._tasks.append(asyncio.create_task(self._cleaner_loop(), name="log-cleaner"))
        self.started_ms = int(time.time() * 1000)
        for h in self.handlers:
            for lst in h.listeners():
                log.info("%s handler listening on %s", h.name, lst)
        self.ready = True

    def _local_broker(self) -> BrokerInfo:
        """This broker as registered for the others: id, advertised Kafka listeners (bound ports when the
        config says 0), admin web URL."""
        kafka = next((h for h in self.handlers if hasattr(h, "node_for")), None)
        listeners = []
        for a in self.config.advertised_listeners:
            port = a.port
            if kafka is not None and getattr(kafka, "servers", None):
                port = kafka.node_for(a.name).port
            listeners.append((a.name, a.host, port))
        web_url = None
        if self.admin is not None:
            web_url = self.admin.url
            if self.config.webServiceBindAddress in ("", "0.0.0.0", "::"):
                web_url = f"http://{listeners[0][1]}:{self.admin.port}"
        return BrokerInfo(self.config.kafkaBrokerId, tuple(listeners), web_url)

    # ---------------------------------------------------------------------------------- ownership
    def web_owner_url(self, topic: Any, partition: int | None = None) -> str | None:
        """The admin web URL of the broker owning `topic` (a Topic; partition 0 for a partitioned name
        without a partition) when it is another broker - the admin API redirects there (307) - else
        None: this broker owns it, its owner is unknown, or the owner has no admin server."""
        if not self.clustered:
            return None
        owner = self.ownership.owner_cached(topic.name, partition or 0)
        if owner is None or owner.broker_id == self.config.kafkaBrokerId:
            return None
        return owner.web_url

    def _offsets_partitions_in(self, bundle: Bundle) -> list[int]:
        topic = self.coordinator.topic
        if topic is None or topic.name != self.topics.offsets_topic:
            return []
        own: Any = self.ownership
        return [p for p in range(topic.partitions) if own.bundle_of(topic.name, p) == bundle]

    async def _bundle_acquired(self, bundle: Bundle) -> None:
        for p in self._offsets_partitions_in(bundle):
            self.coordinator.load_partition(p)

    async def _bundle_released(self, bundle: Bundle, abandon: bool) -> None:
        for p in self._offsets_partitions_in(bundle):
            self.coordinator.unload_partition(p)
        await self.topics.release_bundle(bundle, abandon)

    def _forget_partition_state(self, ledger_name: str) -> None:
        for h in self.handlers:
            forget = getattr(h, "forget_producer_state", None)
            if forget is not None:
                forget(ledger_name)

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

    async def _retention_loop(self) -> None:
        interval = self.config.retentionCheckIntervalMs / 1000
        while True:
            await asyncio.sleep(interval)
            try:
                await self.apply_retention()
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("retention pass failed")

    async def apply_retention(self) -> int:
        deleted = 0
        for topic in self.topics.all():
            retention_ms = int(effective(topic.configs, "retention.ms", self.config))
            retention_bytes = int(effective(topic.configs, "retention.bytes", self.config))
            if retention_ms < 0 and retention_bytes < 0:
                continue
            if "delete" not in effective(topic.configs, "cleanup.policy", self.config):
                continue
            for p in range(topic.partitions):
                if not self.topics.owns(topic, p):
                    continue  # cluster mode: its owner applies retention
                # Only open logs are trimmed: a partition never opened since start-up is opened here, since
                # retention must not depend on whether somebody read the partition recently.
                plog = await self.topics.partition_log(topic, p)
                deleted += await plog.apply_retention(retention_ms, retention_bytes)
        if deleted:
            log.info("retention deleted %d ledgers", deleted)
        return deleted

    # ---------------------------------------------------------------------------------- log cleaner

    async def _cleaner_loop(self) -> None:
        interval = self.config.logCleanerIntervalMs / 1000
        while True:
            await asyncio.sleep(interval)
            try:
                await self.run_cleaner()
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("log cleaner pass failed")

    async def run_cleaner(self, now_ms: int | None = None) -> list[Any]:
        """One pass of the log cleaner over every partition of every topic whose cleanup.policy contains
        compact ("compact,delete" topics get retention as well). A partition is compacted
        (kop/offset/compaction.py) when:

        * its dirty ratio - bytes of closed ledgers not cleaned yet / bytes of all closed ledgers - exceeds
          min.cleanable.dirty.ratio (Kafka's rule; the current ledger, like Kafka's active segment, is
          never cleaned), or
        * the earliest tombstone delete horizon is due (so tombstones go even without new writes), or
        * its current ledger's first entry is older than max.compaction.lag.ms: the ledger is rolled
          first and cleaned (Kafka rolls the active segment of compacted topics at
          min(segment.ms, max.compaction.lag.ms); here the cleaner does it on its next pass),
        and, with min.compaction.lag.ms set, the newest record the pass would clean is at least that old
        (a pass cleans all closed ledgers at once, so it waits for the newest of them).

        Partitions are cleaned one after the other, each pass yielding to the event loop regularly.
        Returns the CompactionResults of the passes run."""
        results: list[Any] = []
        for topic in self.topics.all():
            if topic.deleted or "compact" not in effective(topic.configs, "cleanup.policy", self.config):
                continue
            min_ratio = float(effective(topic.configs, "min.cleanable.dirty.ratio", self.config))
            delete_retention = int(effective(topic.configs, "delete.retention.ms", self.config))
            max_lag = int(effective(topic.configs, "max.compaction.lag.ms", self.config))
            min_lag = int(effective(topic.configs, "min.compaction.lag.ms", self.config))
            for p in range(topic.partitions):
                if topic.deleted or self._stopping:
                    break
                if not self.topics.owns(topic, p):
                    continue  # cluster mode: its owner cleans it
                plog = await self.topics.partition_log(topic, p)
                if not hasattr(plog, "cleaning_state"):
                    continue
                now = int(time.time() * 1000) if now_ms is None else now_ms
                state = await plog.cleaning_state()
                first = state.current_first_timestamp
                roll = first is not None and now - first >= max_lag
                horizon_due = state.delete_horizon is not None and now >= state.delete_horizon
                if min_lag > 0 and (roll or horizon_due or state.dirty_ratio > min_ratio):
                    # min.compaction.lag.ms: a pass cleans every closed ledger at once, so it waits until the
                    # newest record it would clean is that old (the current ledger is left out while its
                    # newest record is younger).
                    if roll and now - await _newest_entry_time(plog, current=True) < min_lag:
                        roll = False
                    newest = await _newest_entry_time(plog, current=roll)
                    if newest is not None and now - newest < min_lag:
                        continue
                if roll or horizon_due or state.dirty_ratio > min_ratio:
                    results.append(await plog.compact(delete_retention, roll_current=roll, now_ms=now_ms))
        return results

    async def compact_now(self, topic: Any, partition: int | None = None, *, roll_current: bool = True,
                          now_ms: int | None = None) -> list[Any]:
        """Compact one partition (or all of them) of a compacted topic now, whatever its dirty ratio
        (tests, admin, the group coordinator's compaction pass). `topic` is a Topic or a Kafka topic name.
        roll_current (default): roll the current ledger first, so that everything written so far is
        cleaned. Raises TopicError for an unknown topic or one whose cleanup.policy has no compact."""
        from kop.broker.topics import Topic, TopicError

        t = topic if isinstance(topic, Topic) else self.topics.get(self.topics.parse(topic))
        if t is None or t.deleted:
            raise TopicError("UNKNOWN_TOPIC_OR_PARTITION", f"Topic {topic} does not exist")
        if "compact" not in effective(t.configs, "cleanup.policy", self.config):
            raise TopicError("INVALID_CONFIG", f"Topic {topic} has no cleanup.policy=compact")
        delete_retention = int(effective(t.configs, "delete.retention.ms", self.config))
        parts = range(t.partitions) if partition is None else [partition]
        results = []
        for p in parts:
            if not 0 <= p < t.partitions:
                raise TopicError("UNKNOWN_TOPIC_OR_PARTITION", f"Partition {p} does not exist")
            plog = await self.topics.partition_log(t, p)
            results.append(await plog.compact(delete_retention, roll_current=roll_current, now_ms=now_ms))
        return results

    async def stop(self) -> None:
        if self._stopping:
            return
        self._stopping = True
        self.ready = False
        timeout = self.config.brokerShutdownTimeoutMs / 1000
        for t in self._tasks:
            t.cancel()
        for t in self._tasks:
            try:
                await t
            except (asyncio.CancelledError, Exception):
                pass
        # Parked JoinGroup/SyncGroup requests are answered NOT_COORDINATOR first, so draining does not wait.
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


async def _newest_entry_time(plog: Any, current: bool) -> Any:
    """Broker time of the newest entry a cleaner pass would compact (of the current ledger too when it is
    to be rolled first); None when there is none."""
    ml = plog.ml
    cur = ml.current_ledger_id
    for li in reversed(ml.ledgers()):
        if not li.entries or (li.ledger_id == cur and not current):
            continue
        return (await plog._probe(li.ledger_id, li.entries - 1)).broker_timestamp
    return None
