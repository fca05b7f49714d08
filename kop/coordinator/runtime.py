"""The coordinator runtime: the life of a coordinator's internal-topic partitions, shared by the group
coordinator (__consumer_offsets) and the transaction coordinator (__transaction_state).

Kafka 4.x gives both coordinators one runtime (its CoordinatorRuntime); so does this module. A coordinator
keeps its state as records in a compacted internal topic and serves the ids whose partition this broker
owns (abs(hashCode(id)) % N). What is the same for both, and lives here:

* the topic: created at start when missing (compacted, internal); a partition count that differs from the
  configured one is kept (changing it would move ids to other partitions and lose their state, kop#795);
* ownership of its partitions: each partition is NOT OWNED, LOADING, LOADED or FAILED. `start` loads the
  partitions this broker owns; in cluster mode `load_partition` / `unload_partition` follow the bundles;
* loading: a partition is read from its log start offset to its high watermark and every batch handed to
  the coordinator's replay (`Shard.begin_load`), LOAD_CONCURRENCY partitions at a time; then it is LOADED and
  the coordinator told (`PartitionLoad.loaded`);
* load epochs: every load and unload of a partition starts a new epoch of it; a load that finds its epoch
  gone (the partition was unloaded, or unloaded and loaded again, while it awaited the log) stops without
  replaying anything more, so two loads never interleave in one partition's state;
* failed loads: a load that raises leaves the partition FAILED and its partial state dropped
  (`Shard.drop`); its ids get COORDINATOR_NOT_AVAILABLE, and a request LOAD_RETRY_S after the failure starts
  another load (a passing storage or metadata-store outage must not need a restart); `failed_partitions`
  reports them (/ready);
* the answer for an id (`error`): 0 when its partition is LOADED here, COORDINATOR_LOAD_IN_PROGRESS while it
  loads, NOT_COORDINATOR when another broker owns it (or, cluster mode, while the ZooKeeper session is
  suspended), COORDINATOR_NOT_AVAILABLE when the runtime is stopped or not started or the load failed;
* unloading: the partition's state is dropped (`Shard.drop`; it stays in the log for the next owner);
* appends: `append` is the one way a coordinator writes its internal topic - the batch goes to the
  partition it was loaded from, refused when the partition is not loaded here (NOT_COORDINATOR) or when the
  batch exceeds the topic's max.message.bytes (RecordTooLarge).
"""

from __future__ import annotations

import asyncio
import contextlib
import enum
import logging
import time
from collections.abc import Iterable, Sequence
from typing import Protocol

from kop.config import BrokerConfig
from kop.coordinator.records import partition_for
from kop.offset.api import FetchedBatch
from kop.protocol.errors import ErrorCode
from kop.protocol.records import NewRecord, build_batch
from kop.topics.manager import Topic, TopicError, TopicManager
from kop.topics.names import TopicName
from kop.topics.partition import Partition, Writer
from kop.topics.write_rules import AppendRefused

log = logging.getLogger(__name__)

E = ErrorCode

# The leader epoch stamped into coordinator batches and the coordinator epoch of transaction markers: the
# constant epoch the broker reports for all its partitions (kop.kafka.apis.common.LEADER_EPOCH).
LEADER_EPOCH = 0
COORDINATOR_EPOCH = 0
LOAD_READ_BYTES = 1 << 20
LOAD_CONCURRENCY = 16
LOAD_RETRY_S = 2.0  # a failed load is tried again (on the next request for one of its ids) this long after

Record = tuple[bytes, bytes | None]  # (key, value or None for a tombstone)


class CoordinatorError(Exception):
    """A coordinator request or write refused with Kafka's error `error`."""

    def __init__(self, error: int, message: str = "") -> None:
        super().__init__(message or ErrorCode(error).name)
        self.error = error


class RecordTooLarge(Exception):
    """A coordinator batch larger than its internal topic's max.message.bytes (e.g. huge member metadata)."""


class PartitionState(enum.Enum):
    LOADING = "loading"
    LOADED = "loaded"
    FAILED = "failed"


class PartitionLoad(Protocol):
    """One load of one partition, given by the coordinator: replays its batches in log order, then is told
    the partition is loaded (it may now write) and answers a line for the log ("12 groups")."""

    def replay(self, batch: FetchedBatch) -> None: ...

    def loaded(self) -> str: ...


class Shard(Protocol):
    """What a coordinator gives the runtime: a replay for each load, and dropping a partition's state."""

    def begin_load(self, partition: int) -> PartitionLoad: ...

    def drop(self, partition: int) -> None: ...


class CoordinatorRuntime:
    """The partitions of one internal topic on this broker (see the module docstring)."""

    def __init__(self, name: str, config: BrokerConfig, topics: TopicManager, topic_name: TopicName,
                 num_partitions: int, config_key: str, shard: Shard, *,
                 load_concurrency: int = LOAD_CONCURRENCY) -> None:
        self.name = name  # "group coordinator", for the log
        self.config = config
        self.topics = topics
        self.topic_name = topic_name
        self.config_key = config_key  # the config naming the partition count, for the log
        self.shard = shard
        self.topic: Topic | None = None
        self.num_partitions = num_partitions
        self.retry_s = LOAD_RETRY_S
        self._state: dict[int, PartitionState] = {}
        self._epoch: dict[int, int] = {}
        self._failed_at: dict[int, float] = {}  # when each FAILED load failed (monotonic)
        self._partitions: dict[int, Partition] = {}  # the loaded partitions' seams: every append goes there
        self._tasks: set[asyncio.Task[None]] = set()  # every task of the runtime
        self._loads: set[asyncio.Task[None]] = set()  # the running loads among them
        self._gate = asyncio.Semaphore(load_concurrency)
        self._stopped = False

    # ================================================================== life cycle
    async def start(self) -> None:
        """Create the topic when missing and start loading the partitions this broker owns."""
        self.topic = await self._ensure_topic()
        self.num_partitions = self.topic.partitions
        owned = [p for p in range(self.num_partitions) if self.topics.owns(self.topic, p)]
        for p in owned:
            self.load_partition(p, quiet=True)
        if owned:
            started = time.monotonic()
            summary = asyncio.create_task(self._log_loaded(owned, started), name=f"{self.topic_name}-loaded")
            self._track(summary)

    async def _log_loaded(self, partitions: list[int], started: float) -> None:
        await self.wait_loaded()
        done = [p for p in partitions if self._state.get(p) is PartitionState.LOADED]
        log.info("%s loaded %d of %d partitions of %s in %.0f ms", self.name, len(done), len(partitions),
                 self.topic_name, (time.monotonic() - started) * 1000)

    async def _ensure_topic(self) -> Topic:
        tn = self.topic_name
        topic = self.topics.get(tn)
        if topic is None:
            try:
                topic = await self.topics.create(tn, self.num_partitions, {"cleanup.policy": "compact"},
                                                 internal=True)
            except TopicError as e:
                if e.error != "TOPIC_ALREADY_EXISTS":
                    raise
                topic = self.topics.get(tn)
                assert topic is not None
        elif topic.partitions != self.num_partitions:
            log.warning("%s has %d partitions, %s says %d: keeping %d (the id -> partition mapping must not "
                        "change)", tn, topic.partitions, self.config_key, self.num_partitions, topic.partitions)
        return topic

    async def wait_loaded(self) -> None:
        """Until no partition is LOADING (each loaded or failed), or the runtime stops."""
        while self.loading and not self._stopped:
            if self._loads:
                await asyncio.wait(list(self._loads))
            else:
                await asyncio.sleep(0.01)

    async def stop(self) -> None:
        """Stop loading: the running loads are cancelled; every id is COORDINATOR_NOT_AVAILABLE from now."""
        self._stopped = True
        tasks = list(self._tasks)
        for t in tasks:
            t.cancel()
        for t in tasks:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await t
        self._tasks.clear()

    @property
    def stopped(self) -> bool:
        return self._stopped

    @property
    def available(self) -> bool:
        """Started and not stopped."""
        return not self._stopped and self.topic is not None

    # ================================================================== ownership
    def load_partition(self, p: int, *, quiet: bool = False) -> None:
        """This broker owns partition `p` now: load it in the background (its ids get
        COORDINATOR_LOAD_IN_PROGRESS until then). Nothing happens when it is loaded or loading already."""
        if self.topic is None or self._stopped or self._state.get(p) in (PartitionState.LOADED,
                                                                          PartitionState.LOADING):
            return
        self._state[p] = PartitionState.LOADING
        self._failed_at.pop(p, None)
        epoch = self._next_epoch(p)
        task = asyncio.create_task(self._load(p, epoch, quiet), name=f"{self.topic_name}-load-{p}")
        self._track(task)
        self._loads.add(task)
        task.add_done_callback(self._loads.discard)

    def unload_partition(self, p: int) -> None:
        """Another broker owns partition `p` now: forget its state (it stays in the log for the next owner);
        a load of it still running stops."""
        self._state.pop(p, None)
        self._failed_at.pop(p, None)
        self._partitions.pop(p, None)
        self._next_epoch(p)
        self.shard.drop(p)
        log.info("%s unloaded %s partition %d", self.name, self.topic_name, p)

    def _next_epoch(self, p: int) -> int:
        epoch = self._epoch.get(p, 0) + 1
        self._epoch[p] = epoch
        return epoch

    def epoch(self, p: int) -> int:
        """The load epoch of partition `p`: changes on every load and unload of it."""
        return self._epoch.get(p, 0)

    def _track(self, task: asyncio.Task[None]) -> None:
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _load(self, p: int, epoch: int, quiet: bool) -> None:
        async with self._gate:
            if self._epoch.get(p) != epoch or self._stopped:
                return
            started = time.monotonic()
            try:
                summary = await self._replay(p, epoch)
            except asyncio.CancelledError:
                raise
            except Exception:
                if self._epoch.get(p) != epoch:
                    return
                log.exception("%s: loading %s partition %d failed; its ids get COORDINATOR_NOT_AVAILABLE (a "
                              "request after %.1f s loads it again)", self.name, self.topic_name, p, self.retry_s)
                self._state[p] = PartitionState.FAILED
                self._failed_at[p] = time.monotonic()
                self._partitions.pop(p, None)
                self.shard.drop(p)  # what the failed load replayed: the next load replays from the start
                return
            if summary is None:
                return
            (log.debug if quiet else log.info)("%s loaded %s partition %d (%s) in %.0f ms", self.name,
                                               self.topic_name, p, summary, (time.monotonic() - started) * 1000)

    async def _replay(self, p: int, epoch: int) -> str | None:
        """Read partition `p` to its end into a new load of the shard; None when the epoch ended meanwhile
        (nothing was replayed after it ended)."""
        assert self.topic is not None
        seam = await self.topics.partition(self.topic, p)
        plog = seam.log
        if self._epoch.get(p) != epoch:
            return None
        load = self.shard.begin_load(p)
        offset, end = plog.log_start_offset, plog.high_watermark
        while offset < end:
            res = await plog.read(offset, LOAD_READ_BYTES)
            if self._epoch.get(p) != epoch:
                return None
            if not res.batches:
                break
            for fb in res.batches:
                load.replay(fb)
            offset = res.next_offset
        self._state[p] = PartitionState.LOADED
        self._partitions[p] = seam
        return load.loaded()

    # ================================================================== answers
    def partition_of(self, key: str) -> int:
        """Kafka's placement: abs(hashCode(key)) % the topic's partition count."""
        return partition_for(key, self.num_partitions)

    def error(self, p: int) -> int:
        """0 when this broker serves the ids of partition `p` now, else the error to answer them with."""
        if self._stopped or self.topic is None:
            return E.COORDINATOR_NOT_AVAILABLE
        state = self._state.get(p)
        if state is PartitionState.LOADED:
            return E.NOT_COORDINATOR if self.topics.paused else 0
        if not self.topics.owns(self.topic, p):
            return E.NOT_COORDINATOR  # cluster mode: another broker coordinates these ids
        if state is PartitionState.FAILED:
            # A load can fail for a passing reason (bookies briefly unavailable, the ZooKeeper session
            # suspended while the partition opened); the partition is still ours, so a request after
            # retry_s starts another load. Until then its clients are told to retry.
            if time.monotonic() - self._failed_at.get(p, 0.0) >= self.retry_s:
                self.load_partition(p)
                return E.COORDINATOR_LOAD_IN_PROGRESS
            return E.COORDINATOR_NOT_AVAILABLE
        return E.COORDINATOR_LOAD_IN_PROGRESS

    def is_loaded(self, p: int) -> bool:
        return self._state.get(p) is PartitionState.LOADED

    def loaded_partitions(self) -> list[int]:
        return sorted(p for p, s in self._state.items() if s is PartitionState.LOADED)

    @property
    def loading(self) -> bool:
        """Whether some partition is still loading (list requests answer COORDINATOR_LOAD_IN_PROGRESS)."""
        return any(s is PartitionState.LOADING for s in self._state.values())

    def failed_partitions(self) -> list[int]:
        """Partitions whose load failed (tried again on request; /ready reports them)."""
        return sorted(p for p, s in self._state.items() if s is PartitionState.FAILED)

    # ================================================================== writes
    @staticmethod
    def build(records: Iterable[Record], now_ms: int,
              producer: tuple[int, int] | None = None) -> tuple[bytes, int]:
        """(batch, last offset delta) of records stamped `now_ms`; producer: (id, epoch) of a transaction
        whose records go in one transactional batch of it (TxnOffsetCommit)."""
        items = [NewRecord(k, v, (), now_ms) for k, v in records]
        if producer is None:
            batch = build_batch(items, partition_leader_epoch=LEADER_EPOCH)
        else:
            batch = build_batch(items, partition_leader_epoch=LEADER_EPOCH, producer_id=producer[0],
                                producer_epoch=producer[1], base_sequence=0, is_transactional=True)
        return batch, len(items) - 1

    async def write(self, p: int, records: Sequence[Record], now_ms: int,
                    producer: tuple[int, int] | None = None) -> int:
        """Build one batch of `records` and append it to partition `p`; its base offset once durable."""
        batch, _ = self.build(records, now_ms, producer)
        return await self.append(p, batch)

    async def append(self, p: int, batch: bytes) -> int:
        """THE internal-topic append of both coordinators: one batch into partition `p` through the partition
        seam (kop/topics/partition.py, which owns the size rule); appends of a partition are stored and
        acknowledged in the order they start; its base offset once durable. Raises
        CoordinatorError(NOT_COORDINATOR) when `p` is not loaded here, RecordTooLarge for a batch over the
        topic's max.message.bytes, and what the partition log raises."""
        seam = self._partitions.get(p)
        if seam is None or self.topic is None:  # unloaded (cluster mode: its bundle moved), or never loaded
            raise CoordinatorError(E.NOT_COORDINATOR, f"{self.topic_name} partition {p} is not loaded here")
        try:
            return await seam.append(batch, Writer.COORDINATOR)
        except AppendRefused as e:
            if e.error == "MESSAGE_TOO_LARGE":
                raise RecordTooLarge(f"{self.topic_name} partition {p}: {e.message}") from None
            raise


def append_error(exc: BaseException) -> int:
    """Kafka's mapping of a failed coordinator write to the error a client can act on."""
    if isinstance(exc, RecordTooLarge):
        return E.UNKNOWN_SERVER_ERROR
    return E.NOT_COORDINATOR  # a storage failure: the client rediscovers the coordinator and retries


__all__ = [
    "COORDINATOR_EPOCH",
    "LEADER_EPOCH",
    "CoordinatorError",
    "CoordinatorRuntime",
    "PartitionLoad",
    "PartitionState",
    "Record",
    "RecordTooLarge",
    "Shard",
    "append_error",
]
