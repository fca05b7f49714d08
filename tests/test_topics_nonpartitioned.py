"""Pulsar's two topic kinds in the topic layer (kop/topics/manager.py Topic.partitioned): names, ledger names, the
stored record, and the data a broker wrote before the kind existed (every topic partitioned), read the same."""

from __future__ import annotations

from pathlib import Path

import pytest

from kop.config import BrokerConfig, ConfigError
from kop.offset.storage import open_embedded_storage
from kop.topics.manager import Topic, TopicError, TopicManager
from kop.topics.names import TopicName

NAME = TopicName("public", "default", "old")
# A topic record exactly as the broker wrote it before non-partitioned topics (commit e2d5eac's Topic.to_json)
OLD_RECORD = (b'{"configs": {"retention.ms": "1000"}, "created": 1700000000000, "internal": false, "partitions": 2, '
              b'"topicId": "000102030405060708090a0b0c0d0e0f"}')


def test_ledger_names_of_both_kinds() -> None:
    assert NAME.ledger_name(1) == "public/default/persistent/old-partition-1"
    assert NAME.ledger_name(None) == "public/default/persistent/old"  # Pulsar stores a non-partitioned topic so
    np = Topic(NAME, 1, b"\0" * 16, {}, 0, partitioned=False)
    assert np.ledger_name(0) == "public/default/persistent/old"
    assert np.pulsar_names() == ["persistent://public/default/old"]
    assert np.pulsar_partition(0) == -1


def test_a_record_without_the_kind_is_a_partitioned_topic_and_partitioned_records_are_unchanged() -> None:
    topic = Topic.from_json(NAME, OLD_RECORD, 3)
    assert topic.partitioned and topic.partitions == 2
    assert topic.ledger_name(1) == "public/default/persistent/old-partition-1"
    assert topic.pulsar_names() == ["persistent://public/default/old-partition-0",
                                    "persistent://public/default/old-partition-1"]
    assert topic.pulsar_partition(1) == 1
    assert topic.to_json() == OLD_RECORD  # an older broker reads what this one writes for a partitioned topic


def test_the_kind_round_trips() -> None:
    np = Topic(NAME, 1, b"\1" * 16, {}, 5, partitioned=False)
    back = Topic.from_json(NAME, np.to_json(), 1)
    assert not back.partitioned and back.partitions == 1


def test_allow_auto_topic_creation_type() -> None:
    assert BrokerConfig().allowAutoTopicCreationType == "non-partitioned"  # Pulsar's default
    assert BrokerConfig.load(overrides={"allowAutoTopicCreationType": "partitioned"}).allowAutoTopicCreationType \
        == "partitioned"
    with pytest.raises(ConfigError):
        BrokerConfig.load(overrides={"allowAutoTopicCreationType": "sometimes"})


async def _manager(data_dir: Path) -> TopicManager:
    manager = TopicManager(BrokerConfig(), await open_embedded_storage(data_dir, fsync="none"))
    await manager.load()
    return manager


async def test_a_data_dir_of_the_previous_format_reads_the_same(tmp_path: Path) -> None:
    """The old record and its partitions' ledgers (`old-partition-N`) load as before; a non-partitioned topic
    created beside it keeps its kind and its unsuffixed ledger across a restart, and its partition count is fixed."""
    storage = await open_embedded_storage(tmp_path, fsync="none")
    await storage.metadata_store.put("/kop/topics/public/default/old", OLD_RECORD, expected_version=-1)
    await storage.close()

    manager = await _manager(tmp_path)
    old = manager.get(NAME)
    assert old is not None and old.partitioned and old.partitions == 2
    assert (await manager.partition_log(old, 1)).name == "public/default/persistent/old-partition-1"
    np = await manager.create(TopicName("public", "default", "np"), 1, partitioned=False)
    assert (await manager.partition_log(np, 0)).name == "public/default/persistent/np"
    with pytest.raises(TopicError) as refused:
        await manager.add_partitions(np, 3)
    assert refused.value.error == "INVALID_PARTITIONS"
    with pytest.raises(TopicError):
        await manager.create(TopicName("public", "default", "np3"), 3, partitioned=False)
    await manager.close()
    await manager.storage.close()

    again = await _manager(tmp_path)
    reloaded = again.get(TopicName("public", "default", "np"))
    assert reloaded is not None and not reloaded.partitioned
    assert "public/default/persistent/np" in await again.storage.list_logs()
    again_old = again.get(NAME)
    assert again_old is not None and again_old.partitioned
    await again.close()
    await again.storage.close()
