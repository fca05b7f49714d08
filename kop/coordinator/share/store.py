"""Durable share-partition state: `__share_group_state`, Kafka's share coordinator topic, written and loaded
through the coordinator runtime both other coordinators use (kop/coordinator/runtime.py), in Kafka's record
formats (records.py).

Each share-partition's state goes to the partition of its coordinator key (group:topicId:partition, as Kafka
places it) as a ShareSnapshot record after each change that Kafka persists (initialization, acknowledgements,
releases, lock time-outs, offset resets); a deleted state gets a tombstone. Loading replays snapshots (and
Kafka's ShareUpdate records over them) into `states`, which the share coordinator takes a share-partition
from on first use after a restart.

The topic is created on first use of share groups (brokers that never see one do not carry it) and loaded at
start when it exists. Its 50 partitions are Kafka's share.coordinator.state.topic.num.partitions default; it
lives in the default tenant and namespace under its Kafka name. In cluster mode this broker loads the partitions
whose bundles it owns (kop/coordinator/share/coordinator.py `bundle_moved`) and is the share coordinator of
their keys: share-partition leaders elsewhere read and write them through it (kop/coordinator/share/persister.py).
"""

from __future__ import annotations

import asyncio
import logging

from kop.config import BrokerConfig
from kop.coordinator.runtime import CoordinatorRuntime
from kop.coordinator.share import records as srec
from kop.offset.api import FetchedBatch
from kop.protocol.records import decode_records, parse_batch_header
from kop.topics.manager import TopicManager
from kop.topics.names import TopicName

log = logging.getLogger(__name__)

SHARE_STATE_TOPIC = "__share_group_state"
NUM_PARTITIONS = 50
Key = tuple[str, bytes, int]


class _Load:
    def __init__(self, store: ShareStateStore, partition: int) -> None:
        self.store = store
        self.partition = partition
        self.count = 0

    def replay(self, fb: FetchedBatch) -> None:
        if parse_batch_header(fb.batch).is_control:
            return
        for r in decode_records(fb.batch):
            if r.key is None:
                continue
            kind, gid, tid, p = srec.decode_key(r.key)
            key = (gid, tid, p)
            if r.value is None:
                self.store.states.pop(key, None)
                continue
            state = srec.decode_value(kind, r.value)
            base = self.store.states.get(key)
            if kind == srec.UPDATE and base is not None:
                state = srec.apply_update(base, state)
            self.store.states[key] = state
            self.count += 1

    def loaded(self) -> str:
        return f"{self.count} share-partition states"


class ShareStateStore:
    def __init__(self, config: BrokerConfig, topics: TopicManager) -> None:
        self.topics = topics
        self.topic_name = TopicName(config.kafkaTenant, config.kafkaNamespace, SHARE_STATE_TOPIC)
        self.states: dict[Key, srec.ShareState] = {}
        self.runtime = CoordinatorRuntime("share coordinator", config, topics, self.topic_name, NUM_PARTITIONS,
                                          "share.coordinator.state.topic.num.partitions", self)
        self._start: asyncio.Task[None] | None = None

    # the runtime's Shard
    def begin_load(self, partition: int) -> _Load:
        return _Load(self, partition)

    def drop(self, partition: int) -> None:
        for key in [k for k in self.states if self.partition_of(k) == partition]:
            del self.states[key]

    def partition_of(self, key: Key) -> int:
        """The __share_group_state partition of a share-partition (Kafka's placement of group:topicId:partition)."""
        return self.runtime.partition_of(srec.coordinator_key(*key))

    async def start_if_present(self) -> None:
        """At broker start: load the topic when an earlier run created it."""
        if self.topics.get(self.topic_name) is not None:
            await self.ready()

    async def ready(self) -> None:
        """Started (the topic created when missing) and loaded; once, whoever asks first."""
        if self._start is None:
            self._start = asyncio.ensure_future(self.runtime.start())
        await asyncio.shield(self._start)
        await self.runtime.wait_loaded()

    async def write(self, key: Key, state: srec.ShareState | None, now_ms: int) -> None:
        """A snapshot of `key`'s state, or its tombstone (None), once durable."""
        raw_key = srec.encode_key(srec.SNAPSHOT, *key)
        value = None if state is None else srec.encode_snapshot(state, now_ms)
        await self.runtime.write(self.partition_of(key), [(raw_key, value)], now_ms)
        if state is None:
            self.states.pop(key, None)
        else:
            self.states[key] = state

    async def stop(self) -> None:
        if self._start is not None:
            await self.runtime.stop()
