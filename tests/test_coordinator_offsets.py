"""The offsets side of the group coordinator (kop/coordinator/offsets.py, OffsetManager), apart from group
membership as Kafka's OffsetMetadataManager is: commit, fetch, delete, expire, transactional (pending)
commits and their markers, and replaying the same records at load. Its writes go to a FakeLog (what
__consumer_offsets would hold: one entry per batch, offsets counted per record)."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Coroutine
from typing import Any

from kop.config import BrokerConfig
from kop.coordinator import records as rec
from kop.coordinator.offsets import OffsetAndMetadata, OffsetManager
from kop.coordinator.runtime import CoordinatorError, CoordinatorRuntime, Record, RecordTooLarge
from kop.offset.producer_state import SequenceError
from kop.protocol.errors import ErrorCode as E
from kop.protocol.records import build_batch

N = 5


class FakeLog:
    def __init__(self) -> None:
        self.writes: list[tuple[str, list[Record], tuple[int, int] | None, int]] = []  # (group, records, producer, base)
        self.next_offset = 100
        self.fail: BaseException | None = None

    async def write(self, group_id: str, records: list[Record], producer: tuple[int, int] | None) -> int:
        await asyncio.sleep(0)
        if self.fail is not None:
            raise self.fail
        base = self.next_offset
        self.next_offset += len(records)
        self.writes.append((group_id, list(records), producer, base))
        return base


class Clock:
    def __init__(self) -> None:
        self.ms = 1_000_000

    def __call__(self) -> int:
        return self.ms


def make(**config: str) -> tuple[OffsetManager, FakeLog, Clock]:
    log = FakeLog()
    clock = Clock()
    cfg = BrokerConfig.from_strings(config)
    return OffsetManager(cfg, log.write, lambda g: rec.partition_for(g, N), clock), log, clock


def run(body: Callable[[], Coroutine[Any, Any, None]]) -> None:
    asyncio.run(body())


def replay_log(into: OffsetManager, log: FakeLog) -> None:
    """Load: replay what was written, as the group coordinator's load does (transactional batches to
    replay_transactional, the rest record by record)."""
    for _group, records, producer, base in log.writes:
        if producer is not None:
            batch = CoordinatorRuntime.build(records, 0, producer)[0]
            into.replay_transactional(rec.partition_for(_group, N), producer[0], False, batch, base)
            continue
        for i, (k, v) in enumerate(records):
            key = rec.decode_key(k)
            assert isinstance(key, rec.OffsetCommitKey)
            into.replay(key, v, base + i)


def marker(commit: bool, producer_id: int) -> bytes:
    key = (0).to_bytes(2, "big") + (1 if commit else 0).to_bytes(2, "big")
    return build_batch([(key, b"\0\0\0\0\0\0")], producer_id=producer_id, producer_epoch=0, is_control=True,
                       is_transactional=True)


# ====================================================================== commit and fetch
def test_a_commit_is_visible_once_durable_and_fetch_answers_minus_one_without_one() -> None:
    async def body() -> None:
        om, log, clock = make()
        pending = asyncio.ensure_future(om.commit("g", [("t", 0, 42, 3, "meta"), ("t", 1, 7, -1, None)]))
        await asyncio.sleep(0)
        assert om.fetch("g", [("t", [0])]) == [("t", 0, -1, -1, "", 0)]  # not durable yet: not visible
        assert await pending == {("t", 0): 0, ("t", 1): 0}
        assert om.fetch("g", [("t", [0, 1, 2])]) == [
            ("t", 0, 42, 3, "meta", 0), ("t", 1, 7, -1, "", 0), ("t", 2, -1, -1, "", 0)]
        assert om.fetch("g", None) == [("t", 0, 42, 3, "meta", 0), ("t", 1, 7, -1, "", 0)]
        assert om.fetch(None, [("t", [0])]) == [("t", 0, -1, -1, "", 0)]  # a group without commits to show
        [(group, records, producer, base)] = log.writes  # one batch, in Kafka's record layout
        assert group == "g" and producer is None and base == 100
        v = rec.decode_offset_commit_value(records[0][1] or b"")
        assert (v.offset, v.leader_epoch, v.metadata, v.commit_timestamp) == (42, 3, "meta", clock.ms)
        assert om.committed("g")[("t", 0)].record_offset == 100
        assert om.committed_offsets() == {("g", "t", 0): 42, ("g", "t", 1): 7}
    run(body)


def test_metadata_over_the_limit_is_refused_per_partition() -> None:
    async def body() -> None:
        om, log, _ = make(offsetMetadataMaxSize="4")
        assert await om.commit("g", [("t", 0, 1, -1, "12345"), ("t", 1, 2, -1, "1234")]) == {
            ("t", 0): E.OFFSET_METADATA_TOO_LARGE, ("t", 1): 0}
        assert list(om.committed("g")) == [("t", 1)]
        assert await om.commit("h", [("t", 0, 1, -1, "12345")]) == {("t", 0): E.OFFSET_METADATA_TOO_LARGE}
        assert len(log.writes) == 1 and not om.has_offsets("h")  # nothing to write: nothing written
    run(body)


def test_a_failed_write_changes_nothing_and_answers_the_retriable_error() -> None:
    async def body() -> None:
        om, log, _ = make()
        log.fail = CoordinatorError(E.NOT_COORDINATOR)
        assert await om.commit("g", [("t", 0, 1, -1, None)]) == {("t", 0): E.NOT_COORDINATOR}
        log.fail = RecordTooLarge("big")
        assert await om.commit("g", [("t", 0, 1, -1, None)]) == {("t", 0): E.UNKNOWN_SERVER_ERROR}
        assert not om.has_offsets("g")
    run(body)


def test_a_retention_time_gives_the_commit_an_expire_timestamp() -> None:
    async def body() -> None:
        om, _, clock = make()
        await om.commit("g", [("t", 0, 1, -1, None)], retention_ms=5000)
        assert om.committed("g")[("t", 0)].expire_timestamp == clock.ms + 5000
        await om.commit("g", [("t", 0, 2, -1, None)])
        assert om.committed("g")[("t", 0)].expire_timestamp == -1
    run(body)


def test_a_commit_writes_its_topics_id_as_kafka_4_4_does_and_a_replay_keeps_it() -> None:
    async def body() -> None:
        ids = {"t": bytes(range(16)), "u": None}  # u: a name without a topic (no id known)
        log, clock = FakeLog(), Clock()
        om = OffsetManager(BrokerConfig.from_strings({}), log.write, lambda g: rec.partition_for(g, N), clock,
                           ids.get)
        await om.commit("g", [("t", 0, 1, -1, None), ("u", 0, 2, -1, None)])
        await om.commit("g", [("t", 1, 3, -1, None)], retention_ms=100)  # value v1: no tags, so no id
        await om.txn_commit("g", 7, 0, [("t", 2, 4, -1, None)])
        written = {}
        for _, records, _, _ in log.writes:
            for k, v in records:
                key = rec.decode_key(k)
                assert isinstance(key, rec.OffsetCommitKey)
                written[(key.topic, key.partition)] = rec.decode_offset_commit_value(v or b"").topic_id
        assert written == {("t", 0): ids["t"], ("u", 0): rec.ZERO_UUID, ("t", 1): rec.ZERO_UUID, ("t", 2): ids["t"]}
        assert om.committed("g")[("t", 0)].topic_id == ids["t"]
        loaded, _, _ = make()
        replay_log(loaded, log)
        assert loaded.offsets == om.offsets
    run(body)


# ====================================================================== delete
def test_delete_writes_tombstones_then_forgets() -> None:
    async def body() -> None:
        om, log, _ = make()
        await om.commit("g", [("t", 0, 1, -1, None), ("t", 1, 2, -1, None)])
        assert await om.delete("g", [("t", 0)]) == 0
        assert log.writes[-1][1] == [(rec.offset_commit_key("g", "t", 0), None)]
        assert list(om.committed("g")) == [("t", 1)]
        assert await om.delete("g", []) == 0 and len(log.writes) == 2  # nothing to delete: nothing written
        log.fail = OSError("storage")
        assert await om.delete("g", [("t", 1)]) == E.NOT_COORDINATOR
        assert list(om.committed("g")) == [("t", 1)]  # the tombstone is not durable: the offset stays
        log.fail = None
        await om.delete("g", [("t", 1)])
        assert not om.has_offsets("g") and "g" not in om.offsets
    run(body)


def test_a_deleted_topics_offsets_go_in_the_groups_served_here() -> None:
    async def body() -> None:
        om, log, _ = make()
        await om.commit("a", [("gone", 0, 1, -1, None), ("kept", 0, 1, -1, None)])
        await om.commit("b", [("gone", 3, 1, -1, None)])
        await om.delete_topic("gone", lambda gid: gid != "b")
        assert list(om.committed("a")) == [("kept", 0)]
        assert list(om.committed("b")) == [("gone", 3)]  # b's partition is not loaded here
    run(body)


# ====================================================================== expire
def test_expired_offsets_by_the_rule_the_group_gives() -> None:
    async def body() -> None:
        om, _, clock = make()
        await om.commit("g", [("old", 0, 1, -1, None)])
        clock.ms += 1000
        await om.commit("g", [("new", 0, 1, -1, None), ("sub", 0, 1, -1, None)])
        await om.commit("g", [("ttl", 0, 1, -1, None)], retention_ms=10)
        clock.ms += 500
        by_commit = lambda o: o.commit_timestamp  # noqa: E731
        subscribed = "sub".__eq__
        expired, all_gone = om.expired("g", clock.ms, 1200, by_commit, subscribed)
        assert sorted(expired) == [("old", 0), ("ttl", 0)] and not all_gone  # ttl: its own expire timestamp
        assert om.expired("g", clock.ms, 1200, None, subscribed) == ([], False)  # the group's do not expire now
        expired, all_gone = om.expired("g", clock.ms + 10_000, 1200, by_commit, lambda t: False)
        assert len(expired) == 4 and all_gone
        # from when the group became Empty, not from the commit
        assert om.expired("g", clock.ms, 1200, lambda o: clock.ms - 100, subscribed) == ([("ttl", 0)], False)
        assert om.expired("none", clock.ms, 1, None, subscribed) == ([], True)
    run(body)


# ====================================================================== transactional commits
def test_a_transactional_commit_is_pending_until_the_commit_marker() -> None:
    async def body() -> None:
        om, log, _ = make()
        p = rec.partition_for("g", N)
        assert await om.txn_commit("g", 7, 1, [("t", 0, 50, -1, None)]) == {("t", 0): 0}
        assert log.writes[-1][2] == (7, 1)  # a transactional batch of the producer
        assert om.fetch("g", [("t", [0])]) == [("t", 0, -1, -1, "", 0)]  # invisible
        assert om.has_pending and om.has_pending_offset("g", "t", 0) and not om.has_pending_offset("g", "t", 1)
        assert om.complete_transaction((p + 1) % N, 7, True) == []  # another partition's marker
        assert om.complete_transaction(p, 7, True) == ["g"]
        assert om.fetch("g", [("t", [0])]) == [("t", 0, 50, -1, "", 0)]
        assert not om.has_pending and om.pending == {}
    run(body)


def test_an_abort_marker_drops_the_pending_offsets() -> None:
    async def body() -> None:
        om, _, _ = make()
        await om.commit("g", [("t", 0, 10, -1, None)])
        await om.txn_commit("g", 7, 1, [("t", 0, 50, -1, None)])
        assert om.complete_transaction(rec.partition_for("g", N), 7, False) == []
        assert om.committed("g")[("t", 0)].offset == 10 and not om.has_pending
    run(body)


def test_a_plain_commit_written_after_the_transactional_one_stays() -> None:
    async def body() -> None:
        om, _, _ = make()
        await om.txn_commit("g", 7, 1, [("t", 0, 50, -1, None), ("t", 1, 60, -1, None)])
        await om.commit("g", [("t", 0, 99, -1, None)])  # a newer record than the transaction's
        om.complete_transaction(rec.partition_for("g", N), 7, True)
        assert om.committed("g")[("t", 0)].offset == 99
        assert om.committed("g")[("t", 1)].offset == 60
    run(body)


def test_a_fenced_producer_gets_invalid_producer_epoch() -> None:
    async def body() -> None:
        om, log, _ = make()
        log.fail = SequenceError("INVALID_PRODUCER_EPOCH", "fenced")
        assert await om.txn_commit("g", 7, 1, [("t", 0, 1, -1, None)]) == {("t", 0): E.INVALID_PRODUCER_EPOCH}
        log.fail = OSError("storage")
        assert await om.txn_commit("g", 7, 1, [("t", 0, 1, -1, None)]) == {("t", 0): E.NOT_COORDINATOR}
        assert not om.has_pending
    run(body)


# ====================================================================== load and unload
def test_replaying_the_records_gives_the_same_offsets() -> None:
    async def body() -> None:
        om, log, _ = make()
        await om.commit("g", [("t", 0, 1, 2, "m"), ("t", 1, 5, -1, None)])
        await om.commit("g", [("t", 2, 3, -1, None)], retention_ms=100)  # value v1: no leader epoch (Kafka's)
        await om.delete("g", [("t", 1)])
        await om.commit("h", [("u", 0, 9, -1, None)])
        loaded, _, _ = make()
        replay_log(loaded, log)
        assert loaded.offsets == om.offsets
    run(body)


def test_replayed_transactional_offsets_wait_for_their_marker() -> None:
    async def body() -> None:
        om, log, _ = make()
        await om.txn_commit("g", 7, 1, [("t", 0, 50, -1, None)])
        loaded, _, _ = make()
        replay_log(loaded, log)
        assert loaded.has_pending_offset("g", "t", 0) and not loaded.has_offsets("g")
        p = rec.partition_for("g", N)
        assert loaded.replay_transactional(p, 7, True, marker(True, 7), 200) == ["g"]
        assert loaded.committed("g")[("t", 0)] == OffsetAndMetadata(50, -1, "", 1_000_000, -1, 100)
    run(body)


def test_dropping_a_partition_forgets_its_groups_committed_and_pending_offsets() -> None:
    async def body() -> None:
        om, _, _ = make()
        groups = [f"g{i}" for i in range(20)]
        for g in groups:
            await om.commit(g, [("t", 0, 1, -1, None)])
            await om.txn_commit(g, 7, 1, [("t", 1, 1, -1, None)])
        om.drop_partition(3)
        here = [g for g in groups if rec.partition_for(g, N) == 3]
        assert here and not any(om.has_offsets(g) or om.has_pending_offset(g, "t", 1) for g in here)
        assert all(om.has_offsets(g) and om.has_pending_offset(g, "t", 1) for g in groups if g not in here)
    run(body)
