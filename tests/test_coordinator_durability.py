"""The group coordinator's state in __consumer_offsets: compaction, reload and offset expiration.

An in-process broker (BrokerService with the Kafka handler on an ephemeral port, real embedded storage) so
that the test can drive the broker's own compaction pass (LogCleaner.compact_now) and the coordinator's
expiration pass with a clock it controls; clients are real (kafka-python over TCP) where the scenario is a
client's. "Restart" is a new broker process state over the same data directory.

* 10 000 commits of one group on 4 partitions, then a compaction pass: the group's __consumer_offsets
  partition keeps exactly one record per (group, topic, partition) and the group metadata record, its
  size follows the live keys, and a restarted broker loads the latest offsets (and metadata strings).
* Offsets of Empty groups expire offsets.retention.minutes after the group became Empty (a simple group's
  after their commit; a Stable group's only for topics nobody subscribes to), as tombstones in the log:
  the expired offsets and groups stay gone after a restart.
"""

from __future__ import annotations

import asyncio
import struct
from pathlib import Path
from typing import Any

from kop.config import BrokerConfig
from kop.coordinator.coordinator import JoinRequest
from kop.coordinator.records import (
    GroupMetadataKey,
    OffsetCommitKey,
    decode_key,
    decode_offset_commit_value,
)
from kop.kafka.handler import KafkaProtocolHandler
from kop.protocol.records import decode_records
from kop.server.service import BrokerService
from kop.server.storage import open_embedded_storage
from kop.topics.manager import Topic
from tests.support.midway import HeldWrite

GROUP = "compacted-group"
TOPIC = "t"


async def start_broker(path: Path, **overrides: str) -> tuple[BrokerService, str]:
    cfg = BrokerConfig.from_strings({
        "kafkaListeners": "PLAINTEXT://127.0.0.1:0", "webServicePort": "-1", "groupInitialRebalanceDelayMs": "0",
        "localStoreFsyncPolicy": "none", "logCleanerEnabled": "false", **overrides,
    })
    storage = await open_embedded_storage(path, cfg)
    svc = BrokerService(cfg, storage)
    handler = KafkaProtocolHandler()
    handler.initialize(cfg)
    await svc.start([handler])
    await svc.coordinator.wait_loaded()
    bootstrap = handler.listeners()[0].split("://", 1)[1]
    return svc, bootstrap


async def offsets_partition_records(svc: BrokerService, group: str) -> list[tuple[bytes, bytes | None]]:
    """Every (key, value) of the group's __consumer_offsets partition, in log order."""
    topic = svc.topics.get(svc.topics.offsets_topic)
    assert topic is not None
    plog = await svc.topics.partition_log(topic, svc.coordinator.partition_of(group))
    out: list[tuple[bytes, bytes | None]] = []
    offset = plog.log_start_offset
    while offset < plog.high_watermark:
        res = await plog.read(offset, 1 << 20)
        if not res.batches:
            break
        for fb in res.batches:
            out += [(r.key, r.value) for r in decode_records(fb.batch)]
        offset = res.next_offset
    return out


def commit_10000(bootstrap: str) -> None:
    from kafka import KafkaConsumer, OffsetAndMetadata, TopicPartition

    c = KafkaConsumer(bootstrap_servers=bootstrap, group_id=GROUP, enable_auto_commit=False,
                      session_timeout_ms=30000)
    try:
        while not c.partitions_for_topic(TOPIC):
            pass
        c.subscribe([TOPIC])
        while len(c.assignment()) < 4:
            c.poll(timeout_ms=100)
        for i in range(10_000):
            c.commit({TopicPartition(TOPIC, i % 4): OffsetAndMetadata(i // 4 + 1, f"commit-{i}", -1)})
    finally:
        c.close(autocommit=False)


def committed_over_the_wire(bootstrap: str) -> dict[int, tuple[int, str]]:
    from kafka import KafkaConsumer, TopicPartition

    c = KafkaConsumer(bootstrap_servers=bootstrap, group_id=GROUP, enable_auto_commit=False)
    try:
        out = {}
        for p in range(4):
            om = c.committed(TopicPartition(TOPIC, p), metadata=True)
            out[p] = (om.offset, om.metadata)
        return out
    finally:
        c.close(autocommit=False)


def test_ten_thousand_commits_compact_to_the_live_keys_and_reload(tmp_path: Path) -> None:
    async def main() -> None:
        svc, bootstrap = await start_broker(tmp_path)
        try:
            await svc.topics.create(svc.topics.parse(TOPIC), 4)
            await asyncio.to_thread(commit_10000, bootstrap)
            before = await offsets_partition_records(svc, GROUP)
            commits = [k for k, _ in before if isinstance(decode_key(k), OffsetCommitKey)]
            assert len(commits) == 10_000
            topic = svc.topics.get(svc.topics.offsets_topic)
            plog = await svc.topics.partition_log(topic, svc.coordinator.partition_of(GROUP))
            size_before = plog.size_bytes

            (result,) = await svc.cleaner.compact_now("__consumer_offsets", svc.coordinator.partition_of(GROUP))
            assert result.compacted, result

            after = await offsets_partition_records(svc, GROUP)
            keys = [decode_key(k) for k, _ in after]
            assert sorted(map(repr, keys)) == sorted(
                [repr(OffsetCommitKey(GROUP, TOPIC, p)) for p in range(4)] + [repr(GroupMetadataKey(GROUP))]), keys
            assert all(v is not None for _, v in after)
            latest = {decode_key(k).partition: decode_offset_commit_value(v)  # type: ignore[union-attr]
                      for k, v in after if isinstance(decode_key(k), OffsetCommitKey)}
            assert {p: (v.offset, v.metadata) for p, v in latest.items()} == {
                p: (2500, f"commit-{9996 + p}") for p in range(4)}
            assert plog.size_bytes < size_before / 100, (plog.size_bytes, size_before)
            assert plog.high_watermark == len(before)  # offsets are never renumbered
        finally:
            await svc.stop()

        svc, bootstrap = await start_broker(tmp_path)
        try:
            err, rows = svc.coordinator.fetch_offsets(GROUP, [(TOPIC, [0, 1, 2, 3])])
            assert err == 0 and [(r[2], r[4]) for r in rows] == [(2500, f"commit-{9996 + p}") for p in range(4)]
            got = await asyncio.to_thread(committed_over_the_wire, bootstrap)
            assert got == {p: (2500, f"commit-{9996 + p}") for p in range(4)}
            listed = {g.group_id: g for g in svc.coordinator.list_groups()[1]}
            assert listed[GROUP].state == "Empty" and listed[GROUP].protocol_type == "consumer"
        finally:
            await svc.stop()

    asyncio.run(main())


def subscription(*topics: str) -> bytes:
    """A ConsumerProtocolSubscription v0."""
    body = struct.pack(">hi", 0, len(topics))
    for t in topics:
        body += struct.pack(">h", len(t)) + t.encode()
    return body + struct.pack(">i", -1)


async def join_and_sync(svc: BrokerService, group: str, topics: tuple[str, ...]) -> tuple[str, int]:
    c = svc.coordinator
    j = await c.join_group(JoinRequest(group, "", None, "consumer", [("range", subscription(*topics))], 30000, 30000,
                                       "test-client", "/127.0.0.1", 3))
    assert j.error == 0, j
    s = await c.sync_group(group, j.generation_id, j.member_id, None, None, None, [(j.member_id, b"")])
    assert s.error == 0, s
    return j.member_id, j.generation_id


async def commit(svc: BrokerService, group: str, gen: int, member: str, topic: str, partition: int,
                 offset: int) -> None:
    res = await svc.coordinator.commit_offsets(group, gen, member, None, -1, 8, [(topic, partition, offset, -1, "")])
    assert res == {(topic, partition): 0}, res


def test_offsets_of_empty_groups_expire_with_tombstones(tmp_path: Path) -> None:
    now = [1_000_000_000.0]

    async def main() -> None:
        svc, _ = await start_broker(tmp_path, offsetsRetentionMinutes="1")
        c = svc.coordinator
        c.clock = lambda: now[0]
        try:
            await commit(svc, "simple", -1, "", "a", 0, 5)  # outside group management
            member, gen = await join_and_sync(svc, "stable", ("a",))
            await commit(svc, "stable", gen, member, "a", 2, 9)
            await commit(svc, "stable", gen, member, "b", 0, 3)  # a topic nobody subscribes to
            member, gen = await join_and_sync(svc, "emptied", ("a",))
            await commit(svc, "emptied", gen, member, "a", 1, 7)
            now[0] += 30  # the group empties 30 s after its commit: its retention starts then
            assert c.leave_group("emptied", [(member, None, None)]) == (0, [(member, None, 0)])

            now[0] += 59  # 89 s after the commits, 59 s after "emptied" emptied
            assert await c.expire_offsets() == 3  # simple: offset + group; stable: the offset of "b"
            assert c.fetch_offsets("simple", [("a", [0])])[1][0][2] == -1
            assert c.fetch_offsets("emptied", [("a", [1])])[1][0][2] == 7
            assert c.fetch_offsets("stable", [("a", [2]), ("b", [0])])[1] == [
                ("a", 2, 9, -1, "", 0), ("b", 0, -1, -1, "", 0)]
            now[0] += 2
            assert await c.expire_offsets() == 2  # emptied: offset + group
            groups = {g.group_id: g.state for g in c.list_groups()[1]}
            assert groups == {"stable": "Stable"}
            assert await c.expire_offsets() == 0

            tombstones = {}
            for group in ("simple", "emptied", "stable"):
                for k, v in await offsets_partition_records(svc, group):
                    key = decode_key(k)
                    if getattr(key, "group", None) == group:
                        tombstones[repr(key)] = v is None  # the last record of each key wins
            assert tombstones == {
                repr(OffsetCommitKey("simple", "a", 0)): True, repr(GroupMetadataKey("simple")): True,
                repr(OffsetCommitKey("emptied", "a", 1)): True, repr(GroupMetadataKey("emptied")): True,
                repr(OffsetCommitKey("stable", "a", 2)): False, repr(OffsetCommitKey("stable", "b", 0)): True,
                repr(GroupMetadataKey("stable")): False,
            }
        finally:
            await svc.stop()

        svc, _ = await start_broker(tmp_path, offsetsRetentionMinutes="1")
        try:
            c = svc.coordinator
            assert {g.group_id for g in c.list_groups()[1]} == {"stable"}
            assert c.fetch_offsets("stable", None)[1] == [("a", 2, 9, -1, "", 0)]
            assert c.fetch_offsets("emptied", None)[1] == [] and c.fetch_offsets("simple", None)[1] == []
        finally:
            await svc.stop()

    asyncio.run(main())


async def committed_then_reopened(tmp_path: Path) -> BrokerService:
    """Group "g" commits offset 42 for ("a", 0); then a new broker state over the same data with its topics
    loaded but its coordinator not started - the test decides how the load runs."""
    svc, _ = await start_broker(tmp_path)
    try:
        await commit(svc, "g", -1, "", "a", 0, 42)
    finally:
        await svc.stop()
    cfg = BrokerConfig.from_strings({"kafkaListeners": "PLAINTEXT://127.0.0.1:0", "webServicePort": "-1"})
    svc = BrokerService(cfg, await open_embedded_storage(tmp_path, cfg))
    await svc.topics.load()
    return svc


def test_groups_of_a_partition_still_loading_get_load_in_progress(tmp_path: Path) -> None:
    """Until its __consumer_offsets partition is loaded, a group's requests are answered
    COORDINATOR_LOAD_IN_PROGRESS (Heartbeat: NONE, SyncGroup: REBALANCE_IN_PROGRESS, as Kafka answers them),
    and the loaded state is then the durable one."""
    async def main() -> None:
        svc = await committed_then_reopened(tmp_path)
        try:
            await svc.coordinator.start()  # loading runs as a task: nothing of it has run yet
            c = svc.coordinator
            assert c.partition_error("g") == 14  # COORDINATOR_LOAD_IN_PROGRESS
            assert c.fetch_offsets("g", [("a", [0])]) == (14, [])
            assert c.list_groups() == (14, [])
            assert (await c.commit_offsets("g", -1, "", None, -1, 8, [("a", 0, 1, -1, "")])) == {("a", 0): 14}
            j = await c.join_group(JoinRequest("g", "", None, "consumer", [("range", b"")], 30000, 30000, "c", "/h", 5))
            assert j.error == 14
            assert c.heartbeat("g", 1, "m", None) == 0
            assert (await c.sync_group("g", 1, "m", None, None, None, [])).error == 27
            assert c.describe_group("g").error == 14
            await c.wait_loaded()
            assert c.fetch_offsets("g", [("a", [0])]) == (0, [("a", 0, 42, -1, "", 0)])  # the refused commit is not there
        finally:
            await svc.stop()

    asyncio.run(main())


def test_a_failed_load_is_tried_again_when_the_group_is_asked_for(tmp_path: Path, monkeypatch) -> None:
    """A __consumer_offsets partition whose load failed (here: its first read raises, as when bookies are
    briefly away) answers COORDINATOR_NOT_AVAILABLE - clients retry - and a request after LOAD_RETRY_S starts
    another load, which brings the group's committed offsets back without a restart."""
    async def main() -> None:
        svc = await committed_then_reopened(tmp_path)
        try:
            c = svc.coordinator
            real_partition_log = svc.topics.partition_log
            failing = {c.partition_of("g")}

            async def partition_log(topic: Topic, p: int) -> Any:
                if topic.name == svc.topics.offsets_topic and p in failing:
                    failing.discard(p)
                    raise OSError("injected: the partition's storage is away")
                return await real_partition_log(topic, p)

            monkeypatch.setattr(svc.topics, "partition_log", partition_log)
            await c.start()
            await c.wait_loaded()
            assert c.partition_error("g") == 15  # COORDINATOR_NOT_AVAILABLE: this load failed
            assert c.failed_partitions() == [c.partition_of("g")]
            assert c.fetch_offsets("g", [("a", [0])]) == (15, [])
            c.runtime.retry_s = 0.0
            assert c.partition_error("g") == 14  # asked again: another load runs
            for _ in range(500):
                if c.partition_error("g") == 0:
                    break
                await asyncio.sleep(0.01)
            assert c.fetch_offsets("g", [("a", [0])]) == (0, [("a", 0, 42, -1, "", 0)])
        finally:
            await svc.stop()

    asyncio.run(main())


def test_offset_requests_cancelled_while_their_write_is_pending_still_apply_it(tmp_path: Path) -> None:
    """A client's connection closing cancels its requests' tasks. An OffsetCommit, TxnOffsetCommit or
    OffsetDelete cancelled after its records were appended, before they were durable, still applies them once
    they are: memory agrees with the log (else OffsetFetch answers the older offset until a reload, and a
    transaction's offsets are never committed at its marker)."""
    async def until(cond: Any, what: str) -> None:
        for _ in range(500):
            if cond():
                return
            await asyncio.sleep(0.01)
        raise AssertionError(f"never: {what}")

    async def main() -> None:
        svc, _ = await start_broker(tmp_path)
        c, txns = svc.coordinator, svc.transactions
        await txns.wait_loaded()
        held = HeldWrite(c.runtime.write, issue_first=True)  # appended now, durable when its gate opens
        cancelled_midway = held.cancel_midway

        def fetched() -> int:
            return c.fetch_offsets("g", [(TOPIC, [0])])[1][0][2]

        try:
            c.runtime.write = held  # type: ignore[method-assign]
            await cancelled_midway(c.commit_offsets("g", -1, "", None, -1, 8, [(TOPIC, 0, 5, -1, "")]))
            await until(lambda: fetched() == 5, "the commit applied")
            await cancelled_midway(c.delete_offsets("g", [(TOPIC, [0])]))
            await until(lambda: fetched() == -1, "the tombstone applied")
            r = await txns.init_producer_id("tx", 60000, -1, -1)
            assert await txns.add_offsets("tx", r.producer_id, r.producer_epoch, "g") == 0
            await cancelled_midway(c.txn_commit_offsets("g", r.producer_id, r.producer_epoch, -1, "", None,
                                                        [(TOPIC, 0, 17, -1, "")]))
            await until(lambda: c.has_pending_offset("g", TOPIC, 0), "the transactional commit pending")
            assert (await txns.end_txn("tx", r.producer_id, r.producer_epoch, True))[0] == 0
            await until(lambda: fetched() == 17, "the transaction's offsets committed at its marker")
        finally:
            held.gate.set()
            await svc.stop()
        svc, _ = await start_broker(tmp_path)  # what the log holds is what memory held
        try:
            assert svc.coordinator.fetch_offsets("g", [(TOPIC, [0])])[1][0][2] == 17
        finally:
            await svc.stop()

    asyncio.run(main())
