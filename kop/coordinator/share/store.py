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
from collections.abc import Awaitable, Callable

from kop.config import BrokerConfig
from kop.coordinator.runtime import CoordinatorError, CoordinatorRuntime, append_error
from kop.coordinator.share import records as srec
from kop.coordinator.share import shard
from kop.coordinator.share.shard import Refused
from kop.offset.api import FetchedBatch
from kop.protocol.records import decode_records, parse_batch_header
from kop.topics.manager import TopicManager
from kop.topics.names import TopicName

log = logging.getLogger(__name__)

SHARE_STATE_TOPIC = "__share_group_state"
NUM_PARTITIONS = 50
Key = tuple[str, bytes, int]


class _Keep:
    """A decision to store nothing (store.py `_change`)."""


KEEP = _Keep()
Decision = Refused | srec.ShareState | None | _Keep


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
        self._locks: dict[int, asyncio.Lock] = {}

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

    # the share coordinator's RPCs (shard.py's rules), for the API handlers and the persister's local path
    async def _change(self, key: Key, decide: Callable[[srec.ShareState | None], Decision],
                      now_ms: int) -> Refused | srec.ShareState | None:
        """Decide on the stored state and store what was decided (a state, None: its tombstone, KEEP:
        nothing), one change of a state partition at a time (Kafka's runtime serializes a shard's writes; a
        check then a write here must not interleave). Answers the refusal, or the state stored now."""
        partition = self.partition_of(key)
        lock = self._locks.setdefault(partition, asyncio.Lock())
        async with lock:
            error = self.runtime.error(partition)
            if error:
                return Refused(error, None)
            decided = decide(self.states.get(key))
            if isinstance(decided, Refused):
                return decided
            if decided is KEEP or (decided is None and key not in self.states):
                return self.states.get(key)
            assert not isinstance(decided, _Keep)
            try:
                await self.write(key, decided, now_ms)
            except CoordinatorError as e:  # unloaded meanwhile: the caller asks the new owner
                return Refused(e.error, None)
            except Exception as e:  # noqa: BLE001 - storage failed: Kafka's mapping, the caller retries
                return Refused(append_error(e), None)
            return decided

    def initialize(self, key: Key, state_epoch: int, start_offset: int, now_ms: int
                   ) -> Awaitable[Refused | srec.ShareState | None]:
        return self._change(key, lambda old: shard.initialize(old, key[2], state_epoch, start_offset), now_ms)

    def write_state(self, key: Key, state_epoch: int, leader_epoch: int, start_offset: int,
                    batches: tuple[srec.StateBatch, ...], now_ms: int) -> Awaitable[Refused | srec.ShareState | None]:
        return self._change(key, lambda old: shard.write(old, key[2], state_epoch, leader_epoch, start_offset,
                                                         batches), now_ms)

    async def delete(self, key: Key, now_ms: int) -> Refused | None:
        def decide(old: srec.ShareState | None) -> Decision:
            refused = shard.delete(old, key[2])
            return refused if isinstance(refused, Refused) else None
        got = await self._change(key, decide, now_ms)
        return got if isinstance(got, Refused) else None

    async def read(self, key: Key, leader_epoch: int, now_ms: int) -> Refused | srec.ShareState:
        """ReadShareGroupState: the state, its leader epoch raised to the reader's first when that is newer."""
        def decide(old: srec.ShareState | None) -> Decision:
            got = shard.read(old, key[2], leader_epoch)
            return got if isinstance(got, Refused) else (got[0] if got[1] else KEEP)
        got = await self._change(key, decide, now_ms)
        assert got is not None  # read refuses a missing state
        return got

    def summary(self, key: Key) -> Refused | shard.Summary:
        error = self.runtime.error(self.partition_of(key))
        return Refused(error, None) if error else shard.summary(self.states.get(key), key[2])

    async def stop(self) -> None:
        if self._start is not None:
            await self.runtime.stop()
