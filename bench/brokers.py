"""The brokers under test, and peak RSS per scenario.

* kafka  - Apache Kafka 4.x single-node KRaft from the cached Maven jars (tests/support/kafka_server.py), heap
           as bin/kafka-server-start.sh sets it (1 GiB);
* kop    - ours, embedded storage, localStoreFsyncPolicy=none (Kafka's default: no fsync per write);
* kop-bk - ours on a real ZooKeeper + bookies (tests/support/bookkeeper.py), in one of two layouts:
           - E3/Qw3/Qa2 on 4 bookies (bk-p-*): acks=all means two bookies acknowledged the entry (each in its
             journal); Kafka with RF=1 and acks=all means one broker has it in page cache - not the same
             durability, said beside every figure of that row;
           - E1/Qw1/Qa1 on 1 bookie (bk-e1-p-*, the matched-durability row): one copy, as Kafka's RF=1.

The bookies' durability setting, on both layouts: ``journalSyncData=false``. A bookie then acknowledges an add
once the journal's write() of it returned - the entry is in the OS page cache, not on the disk - and fsyncs the
journal in the background (every ``journalPageCacheFlushIntervalMSec``, 1 s by default, and at a journal
roll). Kafka's defaults (``log.flush.interval.messages`` and ``log.flush.interval.ms`` unset) acknowledge a
write once it is in the page cache and fsync only when a segment rolls. Both survive the server process being
killed (the page cache stays), neither survives a power loss of the machine: the same promise per copy, so
E1/Qw1/Qa1 compares like with like with Kafka's RF=1 and E3/Qw3/Qa2 buys three such copies (two before the ack).
BookKeeper's own default, ``journalSyncData=true``, fsyncs before every acknowledgement (grouped over
``journalMaxGroupWaitMSec``): a stronger promise than Kafka's default, not benchmarked here.

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
# bk_server.conf keys of the bench's bookies over the tests' ones (tests/support/bookkeeper.py, which has
# journalSyncData=false): the ledger storage and add threads as Apache Pulsar's conf/bookkeeper.conf ships them.
# Why (issue 27's profile of the bookies, per-thread CPU from /proc; docs/benchmarks.md): with the tests'
# SortedLedgerStorage every entry is copied into a skip list on the Java heap, and the serial GC copies it again
# (the "VM Thread" was 15% of the bookies' CPU while producing); DbLedgerStorage keeps its write cache in direct
# memory (no GC), and numAddWorkerThreads=0 runs an add on the Netty thread that read it instead of handing it
# to an add thread: a fifth less bookie CPU while producing (median of five paired runs, 1% to 28%). Reading back costs the bookies more (the read-ahead
# cache and RocksDB index instead of the skip list), which shows in the row's consumer figures, not its
# producer ones. Neither setting changes what an acknowledgement promises.
BENCH_BOOKIE: dict[str, object] = {
    "ledgerStorageClass": "org.apache.bookkeeper.bookie.storage.ldb.DbLedgerStorage",
    "numAddWorkerThreads": "0",
}


def kafka_broker(work: Path) -> KafkaServer:
    return KafkaServer(work / "kafka", heap="1g", quick_start=False)


def kop_broker(work: Path, fsync: str = "none") -> KopBroker:
    return KopBroker(work / "kop", {**KOP_COMMON, "localStoreFsyncPolicy": fsync})


# copies -> (bookies, ensemble size = write quorum, ack quorum)
BK_LAYOUTS = {3: (4, 3, 2), 1: (1, 1, 1)}


def kop_bk_broker(work: Path, copies: int = 3):
    """(cluster, broker factory): a fresh ZooKeeper + bookies and our broker on them (caller starts both);
    copies 3 = 4 bookies, E3/Qw3/Qa2; copies 1 = one bookie, E1/Qw1/Qa1 (see the module docstring)."""
    from tests.support.bookkeeper import BookKeeperCluster

    bookies, ensemble, ack = BK_LAYOUTS[copies]
    cluster = BookKeeperCluster(work / f"bookkeeper-e{ensemble}", bookies=bookies, bookie_settings=BENCH_BOOKIE)
    return cluster, lambda: KopBroker(work / f"kop-bk-e{ensemble}", {
        **KOP_COMMON,
        "metadataStoreUrl": f"zk:{cluster.zk_connect}/kop-bench-{uuid.uuid4().hex[:8]}",
        "bookkeeperMetadataServiceUri": cluster.metadata_service_uri,
        "managedLedgerDefaultEnsembleSize": ensemble,
        "managedLedgerDefaultWriteQuorum": ensemble,
        "managedLedgerDefaultAckQuorum": ack,
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
