"""The broker's log cleaner (LogCleaner.run / compact_now, kop/topics/chores.py): which partitions a pass compacts.

In-process broker service over real embedded storage (no listeners): topics are created through the topic
manager, batches appended to their partition logs, and cleaner passes run with an explicit clock.
"""

from __future__ import annotations

import asyncio

import pytest

from kop.config import BrokerConfig
from kop.managed_ledger import ManagedLedgerConfig
from kop.offset import open_embedded_storage
from kop.protocol.records import NewRecord, build_batch
from kop.server.service import BrokerService
from kop.topics.manager import TopicError
from kop.topics.topic_config import InvalidConfig, validate_topic_configs


async def service(path) -> BrokerService:
    cfg = BrokerConfig.from_strings({"managedLedgerMinLedgerRolloverTimeMinutes": "0"})
    st = await open_embedded_storage(path, fsync="none",
                                     managed_ledger_config=ManagedLedgerConfig(max_entries_per_ledger=4))
    svc = BrokerService(cfg, st)
    await svc.topics.load()
    return svc


async def topic_with(svc, name, configs, batches=20, keys=3):
    topic = await svc.topics.create(svc.topics.parse(name), 1, configs)
    plog = await svc.topics.partition_log(topic, 0)
    for i in range(batches):
        b = build_batch([NewRecord(b"k%d" % (i % keys), b"v%d" % i, (), 1_000 + i)])
        await plog.append(b, 0, 1_000 + i)
    while plog.ml.rolling_over:
        await asyncio.sleep(0.001)
    return topic, plog


async def test_cleaner_compacts_by_dirty_ratio_policy_and_lag(tmp_path):
    svc = await service(tmp_path)
    try:
        _, compacted = await topic_with(svc, "c", {"cleanup.policy": "compact"})
        both_topic, both = await topic_with(svc, "cd", {"cleanup.policy": "compact,delete"})
        _, plain = await topic_with(svc, "d", {})
        _, lagging = await topic_with(svc, "lag", {"cleanup.policy": "compact", "max.compaction.lag.ms": "1000",
                                                   "min.cleanable.dirty.ratio": "1"}, batches=3)
        results = await svc.cleaner.run(now_ms=1)
        assert sorted(r.name.rsplit("/", 1)[1] for r in results) == ["c-partition-0", "cd-partition-0"]
        assert compacted.high_watermark == 20 and compacted.ml.number_of_entries < 20
        assert plain.ml.number_of_entries == 20
        # nothing new: no pass
        assert await svc.cleaner.run(now_ms=2) == []
        # new dirt: one more closed ledger of 4 entries next to the 3 clean ones - ratio 4/7, above the
        # default 0.5 but below 0.9
        await svc.topics.set_configs(both_topic, {"cleanup.policy": "compact,delete",
                                                  "min.cleanable.dirty.ratio": "0.9"})
        b = build_batch([NewRecord(b"k0", b"new", (), 5_000)])
        for plog in (compacted, both):
            for _ in range(4):
                await plog.append(b, 0, 5_000)
            while plog.ml.rolling_over:
                await asyncio.sleep(0.001)
            state = await plog.cleaning_state()
            assert 0.5 < state.dirty_ratio < 0.9, state
        assert [r.name for r in await svc.cleaner.run(now_ms=3)] == [compacted.name]
        # the lagging topic's current ledger (3 entries, never full) is rolled and cleaned once its first
        # entry is older than max.compaction.lag.ms
        assert lagging.ml.number_of_entries == 3
        first_ts = (await lagging.cleaning_state()).current_first_timestamp
        assert [r.name for r in await svc.cleaner.run(now_ms=first_ts + 999)] == []
        ran = await svc.cleaner.run(now_ms=first_ts + 1_000)
        assert [r.name for r in ran] == [lagging.name] and lagging.ml.number_of_entries == 3
        assert (await lagging.cleaning_state()).current_entries == 0
    finally:
        await svc.topics.close()
        await svc.storage.close()


async def test_cleaner_runs_when_a_tombstone_horizon_is_due(tmp_path):
    svc = await service(tmp_path)
    try:
        topic, plog = await topic_with(svc, "t", {"cleanup.policy": "compact", "delete.retention.ms": "100"})
        await plog.append(build_batch([NewRecord(b"k1", None, (), 9_000)]), 0, 9_000)
        results = await svc.cleaner.compact_now("t", now_ms=10_000)  # keeps the tombstone, horizon 10 100
        assert results[0].tombstones_kept == 1
        assert await svc.cleaner.run(now_ms=10_099) == []
        results = await svc.cleaner.run(now_ms=10_100)
        assert [r.tombstones_dropped for r in results] == [1]
        assert (await plog.cleaning_state()).delete_horizon is None
    finally:
        await svc.topics.close()
        await svc.storage.close()


async def test_compact_now_refuses_unknown_and_non_compacted_topics(tmp_path):
    svc = await service(tmp_path)
    try:
        await topic_with(svc, "plain", {}, batches=1)
        with pytest.raises(TopicError) as e:
            await svc.cleaner.compact_now("nope")
        assert e.value.error == "UNKNOWN_TOPIC_OR_PARTITION"
        with pytest.raises(TopicError) as e:
            await svc.cleaner.compact_now("plain")
        assert e.value.error == "INVALID_CONFIG"
        await topic_with(svc, "c", {"cleanup.policy": "compact"}, batches=1)
        with pytest.raises(TopicError):
            await svc.cleaner.compact_now("c", partition=3)
    finally:
        await svc.topics.close()
        await svc.storage.close()


def test_compaction_topic_configs_are_validated():
    validate_topic_configs({"cleanup.policy": "compact,delete", "delete.retention.ms": "0",
                            "min.cleanable.dirty.ratio": "0.25", "max.compaction.lag.ms": "60000"})
    for bad in ({"min.cleanable.dirty.ratio": "1.5"}, {"min.cleanable.dirty.ratio": "x"},
                {"delete.retention.ms": "-1"}, {"max.compaction.lag.ms": "0"}):
        with pytest.raises(InvalidConfig):
            validate_topic_configs(bad)
    with pytest.raises(Exception, match="logCleanerIntervalMs"):
        BrokerConfig.from_strings({"logCleanerIntervalMs": "1"})
    assert BrokerConfig.from_strings({"logCleanerEnabled": "false"}).logCleanerEnabled is False


async def test_cleaner_never_brings_aborted_data_back(tmp_path):
    """A compacted topic with an aborted transaction writing the same key as a committed record: the
    cleaner's pass keeps the committed value (the aborted one neither survives nor shadows it) and the
    marker, and stops at an open transaction."""
    from kop.protocol.records import decode_records, parse_batch_header

    svc = await service(tmp_path)
    try:
        topic = await svc.topics.create(svc.topics.parse("tx-compact"), 1, {"cleanup.policy": "compact"})
        plog = await svc.topics.partition_log(topic, 0)
        await plog.ensure_snapshot()  # what produce does before a partition's first transactional batch
        await plog.append(build_batch([NewRecord(b"K", b"committed", (), 1_000)]), 0, 1_000)  # 0
        await plog.append(build_batch([NewRecord(b"K", b"aborted", (), 1_001)], producer_id=5, producer_epoch=0,
                                      base_sequence=0, is_transactional=True), 0, 1_001)  # 1
        assert await plog.write_txn_marker(5, 0, False, 0) == 2
        for i in range(8):  # filler: closed ledgers to clean
            await plog.append(build_batch([NewRecord(b"f%d" % i, b"x", (), 2_000 + i)]), 0, 2_000 + i)
        while plog.ml.rolling_over:
            await asyncio.sleep(0.001)
        results = await svc.cleaner.run(now_ms=1)
        assert [r.compacted for r in results] == [True]
        values, markers = {}, []
        for fb in (await plog.read(0, 1 << 20)).batches:
            if parse_batch_header(fb.batch).is_control:
                markers.append(fb.base_offset)
                continue
            for r in decode_records(fb.batch):
                values[fb.base_offset + r.offset_delta] = r.value
        assert values[0] == b"committed" and 1 not in values
        assert markers == [2]
    finally:
        await svc.stop()
