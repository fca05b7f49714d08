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

CPU per scenario: utime + stime of the broker process (/proc/<pid>/stat, every thread; for Kafka the JVM), read
before and after, so "where the time goes" starts with how much of the run the broker itself computed.
"""

from __future__ import annotations

import os
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


_TICK = os.sysconf("SC_CLK_TCK")


def cpu_seconds(pid: int | None, tid: int | None = None) -> float | None:
    """utime + stime of a process (all its threads), or of one thread of it when tid is given."""
    if pid is None:
        return None
    path = f"/proc/{pid}/stat" if tid is None else f"/proc/{pid}/task/{tid}/stat"
    try:
        text = Path(path).read_text()
    except OSError:
        return None
    fields = text[text.rindex(")") + 2:].split()  # the command name may hold spaces; fields 3.. follow ")"
    return (int(fields[11]) + int(fields[12])) / _TICK  # fields 14 and 15 of proc(5): utime, stime
