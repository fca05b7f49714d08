"""The coordinator runtime (kop/coordinator/runtime.py): the life of a coordinator's internal-topic
partitions, shared by the group and the transaction coordinators. Each test is one clause of its spec,
run against a small in-memory topic layer (FakeTopics: partition logs whose reads can be held or made to
fail, ownership that a test moves)."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Coroutine
from typing import Any

import pytest

from kop.config import BrokerConfig
from kop.coordinator.runtime import (
    LEADER_EPOCH,
    CoordinatorError,
    CoordinatorRuntime,
    PartitionState,
    RecordTooLarge,
    append_error,
)
from kop.offset.api import FetchedBatch, ReadResult
from kop.protocol.errors import ErrorCode as E
from kop.protocol.records import decode_records, parse_batch_header
from kop.topics.manager import Topic, TopicError
from kop.topics.names import TopicName
from kop.topics.partition import Partition, ProducerTables

N = 4
NAME = TopicName("public", "__kafka", "__internal")


class FakeLog:
    """A partition log of whole batches: offsets are batch numbers (one record per batch is enough here)."""

    def __init__(self) -> None:
        self.batches: list[bytes] = []
        self.gate: asyncio.Event | None = None  # set: reads wait for it
        self.fail_reads = 0  # this many reads raise
        self.reads = 0

    @property
    def log_start_offset(self) -> int:
        return 0

    @property
    def high_watermark(self) -> int:
        return len(self.batches)

    async def read(self, offset: int, max_bytes: int) -> ReadResult:
        self.reads += 1
        if self.gate is not None:
            await self.gate.wait()
        if self.fail_reads:
            self.fail_reads -= 1
            raise OSError("injected: the ledger is away")
        out = [FetchedBatch(i, i, memoryview(b), None) for i, b in enumerate(self.batches[offset:offset + 2], offset)]
        return ReadResult(out, offset + len(out), None)

    def append_nowait(self, batch: bytes, last_offset_delta: int, max_timestamp: int,
                      on_failed: object = None) -> asyncio.Future[int]:
        """What the partition seam (kop/topics/partition.py) appends with (stored at once: never fails)."""
        self.batches.append(bytes(batch))
        done: asyncio.Future[int] = asyncio.get_running_loop().create_future()
        done.set_result(len(self.batches) - 1)
        return done

    async def ensure_snapshot(self) -> None:
        """The seam snapshots the producer state before a transactional batch; nothing to keep here."""


class FakeTopics:
    def __init__(self, partitions: int = N, owned: set[int] | None = None) -> None:
        self.topic: Topic | None = None
        self.partitions = partitions
        self.owned = set(range(partitions)) if owned is None else owned
        self.paused = False
        self.logs = {p: FakeLog() for p in range(partitions)}
        self.open_failures: set[int] = set()
        self.created = 0

    def get(self, name: Any) -> Topic | None:
        return self.topic

    async def create(self, name: Any, partitions: int, configs: dict[str, str], internal: bool = False) -> Topic:
        self.created += 1
        self.topic = Topic(name, partitions, b"\0" * 16, dict(configs), 0, internal=internal)
        return self.topic

    def owns(self, topic: Topic, partition: int) -> bool:
        return partition in self.owned

    async def partition_log(self, topic: Topic, partition: int) -> FakeLog:
        if partition in self.open_failures:
            self.open_failures.discard(partition)
            raise OSError("injected: opening the ledger failed")
        return self.logs[partition]

    async def partition(self, topic: Topic, partition: int) -> Partition:
        """The real partition seam over the fake log: its size rule is what the runtime's writes meet."""
        return Partition(topic, partition, await self.partition_log(topic, partition), BrokerConfig(),
                         ProducerTables())


class Load:
    def __init__(self, shard: RecordingShard, partition: int) -> None:
        self.shard = shard
        self.partition = partition

    def replay(self, batch: FetchedBatch) -> None:
        for r in decode_records(batch.batch):
            self.shard.state.setdefault(self.partition, []).append((r.key, r.value))

    def loaded(self) -> str:
        self.shard.loaded.append(self.partition)
        return f"{len(self.shard.state.get(self.partition, []))} records"


class RecordingShard:
    """A coordinator's side: the replayed records per partition, and what was loaded and dropped."""

    def __init__(self) -> None:
        self.state: dict[int, list[tuple[bytes | None, bytes | None]]] = {}
        self.loaded: list[int] = []
        self.dropped: list[int] = []

    def begin_load(self, partition: int) -> Load:
        return Load(self, partition)

    def drop(self, partition: int) -> None:
        self.dropped.append(partition)
        self.state.pop(partition, None)


def make(topics: FakeTopics | None = None, **config: str) -> tuple[CoordinatorRuntime, FakeTopics, RecordingShard]:
    topics = topics or FakeTopics()
    shard = RecordingShard()
    cfg = BrokerConfig.from_strings(config)
    rt = CoordinatorRuntime("test coordinator", cfg, topics, NAME, N, "testNumPartitions", shard)
    return rt, topics, shard


def run(body: Callable[[], Coroutine[Any, Any, None]]) -> None:
    asyncio.run(body())


async def settle() -> None:
    for _ in range(20):
        await asyncio.sleep(0)


async def seed(topics: FakeTopics, partition: int, *records: tuple[bytes, bytes | None]) -> None:
    for k, v in records:
        batch, delta = CoordinatorRuntime.build([(k, v)], 1000)
        await topics.logs[partition].append_nowait(batch, delta, 1000)


# ====================================================================== the topic
def test_start_creates_the_compacted_internal_topic_with_the_configured_partition_count() -> None:
    async def body() -> None:
        rt, topics, _ = make()
        await rt.start()
        assert topics.created == 1 and topics.topic is not None
        assert topics.topic.partitions == N and topics.topic.internal
        assert topics.topic.configs == {"cleanup.policy": "compact"}
        await rt.stop()
    run(body)


def test_an_existing_topic_keeps_its_partition_count() -> None:
    async def body() -> None:
        topics = FakeTopics(partitions=6)
        topics.topic = Topic(NAME, 6, b"\0" * 16, {"cleanup.policy": "compact"}, 0, internal=True)
        rt, _, _ = make(topics)
        await rt.start()
        assert topics.created == 0 and rt.num_partitions == 6  # the id -> partition mapping must not change
        assert all(rt.partition_of(f"g{i}") < 6 for i in range(100))
        await rt.stop()
    run(body)


def test_a_topic_created_meanwhile_by_another_broker_is_used() -> None:
    async def body() -> None:
        topics = FakeTopics()
        real_create = topics.create

        async def create(*a: Any, **kw: Any) -> Topic:
            await real_create(*a, **kw)
            raise TopicError("TOPIC_ALREADY_EXISTS", "raced")

        topics.create = create
        rt, _, _ = make(topics)
        await rt.start()
        assert rt.topic is topics.topic
        await rt.stop()
    run(body)


# ====================================================================== loading
def test_start_loads_the_owned_partitions_by_replaying_them_in_order() -> None:
    async def body() -> None:
        topics = FakeTopics(owned={0, 2})
        await seed(topics, 0, (b"a", b"1"), (b"b", b"2"), (b"a", None))
        rt, _, shard = make(topics)
        await rt.start()
        await rt.wait_loaded()
        assert shard.state[0] == [(b"a", b"1"), (b"b", b"2"), (b"a", None)]  # every batch, tombstones too
        assert sorted(shard.loaded) == [0, 2]
        assert rt.loaded_partitions() == [0, 2]
        assert not rt.loading
        await rt.stop()
    run(body)


def test_ids_of_a_loading_partition_get_load_in_progress_then_are_served() -> None:
    async def body() -> None:
        topics = FakeTopics()
        await seed(topics, 1, (b"k", b"v"))
        topics.logs[1].gate = asyncio.Event()
        rt, _, _ = make(topics)
        assert rt.error(1) == E.COORDINATOR_NOT_AVAILABLE  # not started
        await rt.start()
        await settle()
        assert rt.error(1) == E.COORDINATOR_LOAD_IN_PROGRESS and rt.loading
        assert rt.error(0) == 0  # an empty partition is loaded at once
        topics.logs[1].gate.set()
        await rt.wait_loaded()
        assert rt.error(1) == 0 and rt._state[1] is PartitionState.LOADED
        await rt.stop()
        assert rt.error(1) == E.COORDINATOR_NOT_AVAILABLE  # stopped
    run(body)


def test_ids_of_a_partition_another_broker_owns_get_not_coordinator() -> None:
    async def body() -> None:
        rt, topics, _ = make(FakeTopics(owned={0}))
        await rt.start()
        await rt.wait_loaded()
        assert rt.error(0) == 0
        assert rt.error(3) == E.NOT_COORDINATOR
        topics.paused = True  # cluster mode, ZooKeeper session suspended: serve nothing
        assert rt.error(0) == E.NOT_COORDINATOR
        await rt.stop()
    run(body)


def test_loads_run_at_most_load_concurrency_at_a_time() -> None:
    async def body() -> None:
        topics = FakeTopics()
        gate = asyncio.Event()
        for p in range(N):
            await seed(topics, p, (b"k", b"v"))
            topics.logs[p].gate = gate
        shard = RecordingShard()
        rt = CoordinatorRuntime("t", BrokerConfig.from_strings({}), topics, NAME, N, "k", shard,
                                load_concurrency=2)
        await rt.start()
        await settle()
        assert sum(log.reads for log in topics.logs.values()) == 2
        gate.set()
        await rt.wait_loaded()
        assert rt.loaded_partitions() == list(range(N))
        await rt.stop()
    run(body)


def test_loading_a_loaded_or_loading_partition_again_does_nothing() -> None:
    async def body() -> None:
        rt, topics, shard = make()
        await seed(topics, 0, (b"k", b"v"))
        await rt.start()
        await rt.wait_loaded()
        epoch = rt.epoch(0)
        rt.load_partition(0)
        await rt.wait_loaded()
        assert shard.loaded.count(0) == 1 and rt.epoch(0) == epoch
        await rt.stop()
    run(body)


# ====================================================================== failed loads
def test_a_failed_load_answers_not_available_drops_what_it_replayed_and_is_retried_on_request() -> None:
    async def body() -> None:
        topics = FakeTopics()
        await seed(topics, 2, (b"a", b"1"), (b"b", b"2"), (b"c", b"3"))
        topics.logs[2].fail_reads = 0
        rt, _, shard = make(topics)
        real_read = topics.logs[2].read
        calls = 0

        async def read(offset: int, max_bytes: int) -> ReadResult:
            nonlocal calls
            calls += 1
            if calls == 2:  # the second read fails: the first one's batches were replayed
                raise OSError("injected")
            return await real_read(offset, max_bytes)

        topics.logs[2].read = read
        await rt.start()
        await rt.wait_loaded()
        assert rt.failed_partitions() == [2]
        assert 2 in shard.dropped and 2 not in shard.state  # the partial replay is gone
        assert rt.error(2) == E.COORDINATOR_NOT_AVAILABLE  # before retry_s: clients retry
        with pytest.raises(CoordinatorError):
            await rt.write(2, [(b"k", b"v")], 1)  # a failed partition takes no writes
        rt.retry_s = 0.0
        assert rt.error(2) == E.COORDINATOR_LOAD_IN_PROGRESS  # asked again: another load
        await rt.wait_loaded()
        assert rt.error(2) == 0 and rt.failed_partitions() == []
        assert shard.state[2] == [(b"a", b"1"), (b"b", b"2"), (b"c", b"3")]  # replayed once, from the start
        await rt.stop()
    run(body)


def test_a_partition_whose_log_cannot_be_opened_fails_too() -> None:
    async def body() -> None:
        topics = FakeTopics()
        topics.open_failures.add(1)
        rt, _, _ = make(topics)
        await rt.start()
        await rt.wait_loaded()
        assert rt.failed_partitions() == [1]
        rt.retry_s = 0.0
        assert rt.error(1) == E.COORDINATOR_LOAD_IN_PROGRESS
        await rt.wait_loaded()
        assert rt.error(1) == 0
        await rt.stop()
    run(body)


def test_a_failed_partition_another_broker_took_answers_not_coordinator() -> None:
    async def body() -> None:
        topics = FakeTopics()
        topics.open_failures.add(1)
        rt, _, _ = make(topics)
        await rt.start()
        await rt.wait_loaded()
        topics.owned.discard(1)
        rt.retry_s = 0.0
        assert rt.error(1) == E.NOT_COORDINATOR and rt.failed_partitions() == [1]
        rt.unload_partition(1)
        assert rt.failed_partitions() == []
        await rt.stop()
    run(body)


# ====================================================================== unloading and epochs
def test_unload_drops_the_partition_and_refuses_its_writes() -> None:
    async def body() -> None:
        rt, topics, shard = make()
        await seed(topics, 0, (b"k", b"v"))
        await rt.start()
        await rt.wait_loaded()
        assert await rt.write(0, [(b"k2", b"v2")], 5) == 1
        topics.owned.discard(0)
        rt.unload_partition(0)
        assert shard.dropped == [0] and 0 not in shard.state
        assert rt.error(0) == E.NOT_COORDINATOR
        with pytest.raises(CoordinatorError) as e:
            await rt.write(0, [(b"k3", b"v3")], 6)
        assert e.value.error == E.NOT_COORDINATOR and append_error(e.value) == E.NOT_COORDINATOR
        assert len(topics.logs[0].batches) == 2
        await rt.stop()
    run(body)


def test_a_load_whose_partition_was_unloaded_meanwhile_replays_nothing_more() -> None:
    async def body() -> None:
        topics = FakeTopics()
        await seed(topics, 0, (b"a", b"1"), (b"b", b"2"), (b"c", b"3"))
        topics.logs[0].gate = asyncio.Event()
        rt, _, shard = make(topics)
        await rt.start()
        await settle()
        rt.unload_partition(0)
        topics.logs[0].gate.set()
        await rt.wait_loaded()
        await settle()
        assert 0 not in shard.state and 0 not in shard.loaded and not rt.is_loaded(0)
        await rt.stop()
    run(body)


def test_unload_then_load_while_the_first_load_waits_gives_one_clean_load() -> None:
    """The first load's epoch ended at the unload: it stops, and only the second one's replay counts (the
    copies before the runtime let both replay into the same state)."""
    async def body() -> None:
        topics = FakeTopics()
        await seed(topics, 0, (b"a", b"1"), (b"b", b"2"), (b"c", b"3"))
        gate = topics.logs[0].gate = asyncio.Event()
        rt, _, shard = make(topics)
        await rt.start()
        await settle()
        first = rt.epoch(0)
        rt.unload_partition(0)
        rt.load_partition(0)
        assert rt.epoch(0) == first + 2
        gate.set()
        await rt.wait_loaded()
        await settle()
        assert shard.state[0] == [(b"a", b"1"), (b"b", b"2"), (b"c", b"3")]
        assert shard.loaded == [p for p in shard.loaded if p != 0] + [0] and shard.loaded.count(0) == 1
        await rt.stop()
    run(body)


def test_stop_cancels_running_loads() -> None:
    async def body() -> None:
        topics = FakeTopics()
        await seed(topics, 0, (b"a", b"1"))
        topics.logs[0].gate = asyncio.Event()
        rt, _, shard = make(topics)
        await rt.start()
        await settle()
        await rt.stop()
        assert 0 not in shard.loaded and not rt.available
        await rt.wait_loaded()  # returns: stopped
    run(body)


# ====================================================================== appends
def test_write_appends_one_batch_of_the_records_to_the_loaded_partition() -> None:
    async def body() -> None:
        rt, topics, _ = make()
        await rt.start()
        await rt.wait_loaded()
        assert await rt.write(3, [(b"k1", b"v1"), (b"k2", None)], 1234) == 0
        [stored] = topics.logs[3].batches
        hdr = parse_batch_header(stored)
        assert hdr.partition_leader_epoch == LEADER_EPOCH and not hdr.is_transactional
        assert [(r.key, r.value) for r in decode_records(stored)] == [(b"k1", b"v1"), (b"k2", None)]
        await rt.stop()
    run(body)


def test_a_producers_records_go_in_one_transactional_batch() -> None:
    async def body() -> None:
        rt, topics, _ = make()
        await rt.start()
        await rt.wait_loaded()
        await rt.write(1, [(b"k", b"v")], 1, producer=(42, 3))
        hdr = parse_batch_header(topics.logs[1].batches[0])
        assert hdr.is_transactional and hdr.producer_id == 42 and hdr.producer_epoch == 3
        await rt.stop()
    run(body)


def test_a_batch_over_max_message_bytes_is_refused() -> None:
    async def body() -> None:
        rt, topics, _ = make()
        await rt.start()
        await rt.wait_loaded()
        assert topics.topic is not None
        topics.topic.configs["max.message.bytes"] = "200"
        with pytest.raises(RecordTooLarge) as e:
            await rt.write(0, [(b"k", b"x" * 500)], 1)
        assert append_error(e.value) == E.UNKNOWN_SERVER_ERROR
        assert topics.logs[0].batches == []
        await rt.stop()
    run(body)


def test_appends_started_in_order_are_stored_in_that_order() -> None:
    async def body() -> None:
        rt, topics, _ = make()
        await rt.start()
        await rt.wait_loaded()
        futs = [asyncio.ensure_future(rt.write(0, [(b"k", str(i).encode())], i)) for i in range(5)]
        assert await asyncio.gather(*futs) == [0, 1, 2, 3, 4]
        assert [decode_records(b)[0].value for b in topics.logs[0].batches] == [b"0", b"1", b"2", b"3", b"4"]
        await rt.stop()
    run(body)
