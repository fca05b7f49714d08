"""The brokers under test, and peak RSS per scenario.

* kafka  - Apache Kafka 4.x single-node KRaft from the cached Maven jars (tests/support/kafka_server.py), heap
           as bin/kafka-server-start.sh sets it (1 GiB);
* kop    - ours, embedded storage, localStoreFsyncPolicy=none (Kafka's default: no fsync per write);
* kop-bk - ours on a real ZooKeeper + 4 bookies (tests/support/bookkeeper.py), E3/Qw3/Qa2. Its acks=all means
           two bookies acknowledged the entry (each in its journal); Kafka with RF=1 and acks=all means one
           broker has it in page cache - not the same durability, said beside every BookKeeper figure.

Both of ours and Kafka get the same group settings (initial rebalance delay 0, 5 __consumer_offsets
partitions as the Kafka fixture has), so consumer group joins compare like with like.

Peak RSS per scenario: writing "5" to /proc/<pid>/clear_refs resets the kernel's VmHWM (Linux >= 4.0), so
reset before a scenario and read after it gives that scenario's peak, not the whole run's.
"""

from __future__ import annotations

import uuid
from pathlib import Path

from tests.support.broker import KopBroker
from tests.support.kafka_server import KafkaServer
from tests.support.net import read_vm_hwm_kib

KOP_COMMON = {"defaultNumPartitions": 1, "groupInitialRebalanceDelayMs": 0, "offsetsTopicNumPartitions": 5}


def kafka_broker(work: Path) -> KafkaServer:
    return KafkaServer(work / "kafka", heap="1g")


def kop_broker(work: Path, fsync: str = "none") -> KopBroker:
    return KopBroker(work / "kop", {**KOP_COMMON, "localStoreFsyncPolicy": fsync})


def kop_bk_broker(work: Path):
    """(cluster, broker): a fresh ZooKeeper + 4 bookies and our broker on them (caller starts both)."""
    from tests.support.bookkeeper import BookKeeperCluster

    cluster = BookKeeperCluster(work / "bookkeeper")
    return cluster, lambda: KopBroker(work / "kop-bk", {
        **KOP_COMMON,
        "metadataStoreUrl": f"zk:{cluster.zk_connect}/kop-bench-{uuid.uuid4().hex[:8]}",
        "bookkeeperMetadataServiceUri": cluster.metadata_service_uri,
        "managedLedgerDefaultEnsembleSize": 3,
        "managedLedgerDefaultWriteQuorum": 3,
        "managedLedgerDefaultAckQuorum": 2,
    })


def reset_peak_rss(pid: int | None) -> bool:
    if pid is None:
        return False
    try:
        Path(f"/proc/{pid}/clear_refs").write_text("5")
        return True
    except OSError:
        return False


def peak_rss_mib(pid: int | None) -> float | None:
    kib = read_vm_hwm_kib(pid) if pid is not None else None
    return None if kib is None else kib / 1024
