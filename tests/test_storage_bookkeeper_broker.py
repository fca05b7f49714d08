"""The broker on BookKeeper + ZooKeeper storage: `kop standalone --override metadataStoreUrl=zk:...` against
the real ZooKeeper and 4 bookies of tests/support/bookkeeper.py (E=3, Qw=3, Qa=2, the defaults).

A kafka-python producer (acks=all) and consumer round-trip records byte for byte; a consumer group commits
its offsets (the group coordinator's __consumer_offsets is a managed ledger on bookies too). The broker
is then stopped, its local data directory deleted, and started again: the records and the committed
offsets are still there, because they live in the bookies and ZooKeeper - where BookKeeper's layout and
Pulsar's /managed-ledgers layout are checked directly.
"""

from __future__ import annotations

import shutil
import time
import uuid

import pytest

from kop.managed_ledger.protobuf import ManagedLedgerInfo
from kop.storage.bookkeeper import LedgerMetadata, ledger_path
from tests.support.bookkeeper import BookKeeperCluster, shared_cluster
from tests.support.clients import (
    assert_consumed_exactly,
    by_partition,
    consume_kafka_python,
    create_topic,
    make_records,
    produce_kafka_python,
)

PARTITIONS = 2
RECORDS = 3000


@pytest.fixture
def cluster() -> BookKeeperCluster:
    """The process-wide cluster, with all 4 bookies up and registered."""
    c = shared_cluster()
    c.ensure_all_up()
    return c


def _commit_with_group(bootstrap: str, topic: str, group: str, offsets: dict[int, int]) -> None:
    from kafka import KafkaConsumer, TopicPartition
    from kafka.structs import OffsetAndMetadata

    consumer = KafkaConsumer(bootstrap_servers=bootstrap, group_id=group, enable_auto_commit=False)
    try:
        consumer.commit({TopicPartition(topic, p): OffsetAndMetadata(o, "", -1) for p, o in offsets.items()})
    finally:
        consumer.close()


def _committed(bootstrap: str, topic: str, group: str) -> dict[int, int | None]:
    from kafka import KafkaConsumer, TopicPartition

    consumer = KafkaConsumer(bootstrap_servers=bootstrap, group_id=group, enable_auto_commit=False)
    try:
        return {p: consumer.committed(TopicPartition(topic, p)) for p in range(PARTITIONS)}
    finally:
        consumer.close()


def test_kafka_python_round_trip_through_a_broker_on_bookkeeper(cluster, kop_broker):
    chroot = f"/kop-broker-{uuid.uuid4().hex[:10]}"
    broker = kop_broker(
        metadataStoreUrl=f"zk:{cluster.zk_connect}{chroot}",
        bookkeeperMetadataServiceUri=cluster.metadata_service_uri,
        managedLedgerDefaultEnsembleSize=3,
        managedLedgerDefaultWriteQuorum=3,
        managedLedgerDefaultAckQuorum=2,
        managedLedgerMaxEntriesPerLedger=3,  # several ledgers per partition (an entry is a record batch)
        managedLedgerMinLedgerRolloverTimeMinutes=0,
        offsetsTopicNumPartitions=4,
        groupInitialRebalanceDelayMs=0,
    )
    topic = "bk-round-trip"
    create_topic(broker.bootstrap, topic, PARTITIONS)
    records = make_records(RECORDS, PARTITIONS, base_ts=int(time.time() * 1000) - 60_000)
    produce_kafka_python(broker.bootstrap, topic, records, "lz4")
    ends = {p: len(rs) for p, rs in enumerate(by_partition(records, PARTITIONS))}
    assert_consumed_exactly(consume_kafka_python(broker.bootstrap, topic, ends), by_partition(records, PARTITIONS))
    _commit_with_group(broker.bootstrap, topic, "bk-group", {0: 7, 1: 11})

    # The partitions are managed ledgers in ZooKeeper (Pulsar's layout) made of BookKeeper ledgers
    # (BookKeeper's layout): E/Qw/Qa as configured, digest CRC32C, several ledgers per partition.
    zk = cluster.zk()
    base = f"{chroot}/managed-ledgers/public/default/persistent"
    assert {f"{topic}-partition-0", f"{topic}-partition-1"} <= set(zk.get_children(base))
    info = ManagedLedgerInfo.decode(zk.get(f"{base}/{topic}-partition-0")[0])
    assert len(info.ledgers) >= 2
    for li in info.ledgers:
        md = LedgerMetadata.decode(zk.get(ledger_path(li.ledger_id))[0])
        assert (md.ensemble_size, md.write_quorum, md.ack_quorum, md.digest_type) == (3, 3, 2, 3)
        if li.entries is not None:  # a closed ledger of the partition: sealed in BookKeeper at its count
            assert md.is_closed and md.last_entry_id == li.entries - 1

    broker.stop()
    shutil.rmtree(broker.data_dir, ignore_errors=True)  # nothing local is needed: it is all in BK + ZK
    broker.start()
    assert_consumed_exactly(consume_kafka_python(broker.bootstrap, topic, ends), by_partition(records, PARTITIONS))
    assert _committed(broker.bootstrap, topic, "bk-group") == {0: 7, 1: 11}
    more = make_records(200, PARTITIONS, base_ts=int(time.time() * 1000), tag="after-restart")
    produce_kafka_python(broker.bootstrap, topic, more, "none")
    got = consume_kafka_python(broker.bootstrap, topic, {p: ends[p] + 100 for p in ends}, start=ends)
    assert_consumed_exactly(got, by_partition(more, PARTITIONS), start_offsets=[ends[0], ends[1]])


def test_storage_backend_follows_the_config():
    from kop.broker.storage import bookkeeper_metadata_service_uri
    from kop.config import BrokerConfig, ConfigError

    assert BrokerConfig.load().storage_backend == "embedded"
    c = BrokerConfig.load(overrides={"zookeeperServers": "z1:2181,z2:2181"})
    assert c.storage_backend == "bookkeeper"
    assert (c.managedLedgerDefaultEnsembleSize, c.managedLedgerDefaultWriteQuorum,
            c.managedLedgerDefaultAckQuorum) == (3, 3, 2)
    assert bookkeeper_metadata_service_uri(c) == "zk+hierarchical://z1:2181;z2:2181/ledgers"
    c = BrokerConfig.load(overrides={"metadataStoreUrl": "zk:z:2181/kop",
                                     "bookkeeperMetadataServiceUri": "zk+hierarchical://b:2181/ledgers"})
    assert bookkeeper_metadata_service_uri(c) == "zk+hierarchical://b:2181/ledgers"
    assert BrokerConfig.load(overrides={"metadataStoreUrl": "zk:z:2181",
                                        "storageBackend": "embedded"}).storage_backend == "embedded"
    with pytest.raises(ConfigError, match="storageBackend"):
        BrokerConfig.load(overrides={"storageBackend": "bookkeeper"})
    with pytest.raises(ConfigError, match="managedLedgerDefaultEnsembleSize"):
        BrokerConfig.load(overrides={"zookeeperServers": "z:1", "managedLedgerDefaultEnsembleSize": "2"})
