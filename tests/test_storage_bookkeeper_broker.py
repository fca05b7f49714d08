"""The broker on BookKeeper + ZooKeeper storage: `kop standalone --override metadataStoreUrl=zk:...` against
the real ZooKeeper and 4 bookies of tests/support/bookkeeper.py (E=3, Qw=3, Qa=2, the defaults).

* A kafka-python producer (acks=all) and consumer round-trip records byte for byte; a consumer group
  commits its offsets (the group coordinator's __consumer_offsets is a managed ledger on bookies too). The
  broker is then stopped, its local data directory deleted, and started again: the records and the
  committed offsets are still there, because they live in the bookies and ZooKeeper - where BookKeeper's
  layout and Pulsar's /managed-ledgers layout are checked directly.
* A bookie of the partition's current ledger is SIGKILLed while an acks=all producer is producing (issue 7):
  the producer goes on without a single failed delivery, every acknowledged record is read back at its
  offset, the ledger's metadata in ZooKeeper gained a second ensemble without the dead bookie, and
  BookKeeper's own shell reads an entry written after that change - our entry format around the very
  record batch a Fetch returns.
* A bookie lost for good: BookKeeper's own `bookkeeper shell recover` re-replicates its copies of our
  closed ledgers (their metadata is BookKeeper's format), and the broker reads every record back through
  the rewritten ensembles.

(The broker-core client suite of tests/e2e/ runs on this storage too: the `kop-bk` target.)
"""

from __future__ import annotations

import random
import re
import shutil
import time
import uuid

import pytest

from kop.managed_ledger.protobuf import ManagedLedgerInfo
from kop.storage.bookkeeper import LedgerMetadata, ledger_path
from tests.support.bookkeeper import BookKeeperCluster
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


def _bk_broker(kop_broker, cluster: BookKeeperCluster, chroot: str, **overrides):
    """`kop standalone` on the shared ZooKeeper (under `chroot`) and bookies, with E=3, Qw=3, Qa=2."""
    return kop_broker(metadataStoreUrl=f"zk:{cluster.zk_connect}{chroot}",
                      bookkeeperMetadataServiceUri=cluster.metadata_service_uri,
                      managedLedgerDefaultEnsembleSize=3, managedLedgerDefaultWriteQuorum=3,
                      managedLedgerDefaultAckQuorum=2, **overrides)


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
    broker = _bk_broker(
        kop_broker, cluster, chroot,
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
    from kop.config import BrokerConfig, ConfigError
    from kop.server.storage import bookkeeper_metadata_service_uri

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


# ---- a bookie killed under an acks=all producer ----------------------------------------------------------------

ACKED_BEFORE_KILL = 2000
PRODUCED_AFTER_KILL = 3000
MAX_UNACKED = 500  # keeps the run going until the kill instead of queueing everything up front


def _current_ledger(zk, chroot: str, topic: str) -> int:
    """The ledger the broker is appending to: the last of the partition's managed-ledger info."""
    info = ManagedLedgerInfo.decode(zk.get(f"{chroot}/managed-ledgers/public/default/persistent/"
                                           f"{topic}-partition-0")[0])
    return info.ledgers[-1].ledger_id


def _stored_batches(bootstrap: str, topic: str, end: int) -> dict[int, bytes]:
    """Every record batch of partition 0 as the broker serves it (raw Fetch), by base offset."""
    from tests.support.wire import Negotiated, batch_headers

    out: dict[int, bytes] = {}
    offset = 0
    with Negotiated(bootstrap) as wire:
        while offset < end:
            part = wire.fetch(topic, 0, offset, max_bytes=1 << 20)
            headers = batch_headers(part.records)
            assert part.error_code == 0 and headers, f"raw Fetch at {offset}: error {part.error_code}"
            pos = 0
            for h in headers:
                out[h["base_offset"]] = bytes(part.records[pos : pos + 12 + h["length"]])
                pos += 12 + h["length"]
            offset = headers[-1]["base_offset"] + headers[-1]["last_offset_delta"] + 1
    return out


def _shell_entry(cluster: BookKeeperCluster, ledger_id: int, entry_id: int) -> bytes:
    """One entry's payload as BookKeeper's shell reads it (`readledger`, hex dump entry formatter)."""
    read = cluster.shell("-entryformat", "hex", "readledger", "-ledgerid", ledger_id, "-firstentryid", entry_id,
                         "-lastentryid", entry_id, "-msg")
    assert read.returncode == 0, read.stdout[-3000:] + read.stderr[-3000:]
    assert re.search(rf"Lid={ledger_id}, Eid={entry_id},", read.stdout), read.stdout[-3000:]
    # commons-io HexDump lines: "<8 hex digits offset> <up to 16 hex bytes> <ascii>"
    dump = bytearray()
    for line in read.stdout.splitlines():
        m = re.match(r"^([0-9A-Fa-f]{8}) ((?:[0-9A-Fa-f]{2} ){1,16})", line)
        if m:
            assert int(m[1], 16) == len(dump), f"hex dump out of order at {line!r}"
            dump += bytes.fromhex(m[2])
    assert dump, f"the shell printed no hex dump:\n{read.stdout[-3000:]}"
    return bytes(dump)


def test_a_bookie_killed_under_an_acks_all_producer_loses_nothing(cluster, kop_broker):
    """Issue 7: E=3/Qw=3/Qa=2, a bookie of the current ledger's ensemble SIGKILLed mid-produce."""
    from confluent_kafka import Producer

    from kop.offset.entry_format import BROKER_ENTRY_METADATA_MAGIC, parse_entry
    from tests.support.clients import STALL_TIMEOUT, consume_confluent, end_offsets

    chroot = f"/kop-bookie-kill-{uuid.uuid4().hex[:10]}"
    broker = _bk_broker(kop_broker, cluster, chroot, offsetsTopicNumPartitions=1)
    topic = "bk-bookie-kill"
    create_topic(broker.bootstrap, topic, 1)
    zk = cluster.zk()

    acked: dict[int, bytes] = {}  # offset -> value
    failed: list[str] = []

    def on_delivery(err, msg) -> None:
        if err is None:
            assert msg.offset() not in acked, f"offset {msg.offset()} acknowledged twice"
            acked[msg.offset()] = msg.value()
        else:
            failed.append(f"{msg.value()!r}: {err}")

    producer = Producer({"bootstrap.servers": broker.bootstrap, "acks": "all", "enable.idempotence": True,
                         "linger.ms": 5, "batch.size": 4096, "message.timeout.ms": 300000})
    victim = None
    ledger_id = -1
    killed_at = -1
    i = 0
    deadline = time.monotonic() + STALL_TIMEOUT
    try:
        while killed_at < 0 or i < killed_at + PRODUCED_AFTER_KILL:
            if i - len(acked) - len(failed) >= MAX_UNACKED:
                producer.poll(0.005)
            else:
                try:
                    producer.produce(topic, value=b"bk-kill-%08d" % i, key=b"%d" % i, partition=0,
                                     on_delivery=on_delivery)
                    i += 1
                except BufferError:
                    producer.poll(0.01)
                producer.poll(0)
            if killed_at < 0 and len(acked) >= ACKED_BEFORE_KILL:
                ledger_id = _current_ledger(zk, chroot, topic)
                md = LedgerMetadata.decode(zk.get(ledger_path(ledger_id))[0])
                assert len(md.segments) == 1 and not md.is_closed, md
                victim = random.choice(md.last_ensemble)
                cluster.kill_bookie(cluster.bookie_by_id(victim).index)  # SIGKILL
                killed_at = i
                assert killed_at > len(acked) + len(failed), "nothing was in flight when the bookie died"
            assert time.monotonic() < deadline, f"{len(acked)} acknowledgements after {STALL_TIMEOUT}s ({i} produced)"
        assert producer.flush(STALL_TIMEOUT) == 0, "records still queued"
        del producer

        # The producer went on: nothing failed, everything was acknowledged, also what came after the kill.
        assert not failed, f"{len(failed)} deliveries failed, e.g. {failed[:3]}"
        assert len(acked) == i
        after_kill = [o for o, v in acked.items() if int(v[8:]) >= killed_at]
        assert len(after_kill) == PRODUCED_AFTER_KILL

        # Every acknowledged record is at its offset, byte for byte, and the log has no gap.
        end = end_offsets(broker.bootstrap, topic, 1)[0]
        assert end == i == max(acked) + 1
        got = consume_confluent(broker.bootstrap, topic, {0: end})
        assert [g.offset for g in got] == list(range(end))
        lost = [(g.offset, acked[g.offset], g.value) for g in got if g.value != acked[g.offset]]
        assert not lost, f"{len(lost)} acknowledged records differ, e.g. {lost[:3]}"

        # The ledger the bookie was killed under: a second ensemble, from some entry on, without it.
        assert _current_ledger(zk, chroot, topic) == ledger_id, "the partition rolled over to a new ledger"
        md = LedgerMetadata.decode(zk.get(ledger_path(ledger_id))[0])
        assert len(md.segments) == 2, md.segments
        first, changed = md.segments
        assert victim in first.ensemble and victim not in changed.ensemble, md.segments
        assert len(set(changed.ensemble)) == 3 and changed.first_entry_id > 0, md.segments
        batches = _stored_batches(broker.bootstrap, topic, end)

        # BookKeeper's shell reads the last entry (written to the second ensemble) of the sealed ledger.
        broker.stop()  # a graceful stop closes the ledger: CLOSED in ZooKeeper at its last entry
        md = LedgerMetadata.decode(zk.get(ledger_path(ledger_id))[0])
        assert md.is_closed and md.last_entry_id >= md.segments[-1].first_entry_id, md
        entry = _shell_entry(cluster, ledger_id, md.last_entry_id)
        assert int.from_bytes(entry[:2], "big") == BROKER_ENTRY_METADATA_MAGIC, entry[:16].hex()
        _, index, batch_at = parse_entry(entry)
        assert index == end - 1  # the entry's broker entry metadata: the offset of its last record
        batch = entry[batch_at:]
        # Stored as the producer sent it; a Fetch only fills in the base offset (index - last offset delta).
        base_offset = index - int.from_bytes(batch[23:27], "big", signed=True)
        assert batch[8:] == batches[base_offset][8:], "the entry's record batch is not the one the broker serves"
        assert acked[end - 1] in batch  # uncompressed: the last acknowledged value is in it
    finally:
        cluster.ensure_all_up()  # the killed bookie back, for the tests that follow


# ---- BookKeeper's own recovery re-replicates our ledgers ------------------------------------------------------


def _bookie_read(bookie: str, ledger_id: int, entry_id: int) -> bytes | None:
    """One raw READ (v2 protocol) from one bookie: the entry's payload, verified against its CRC32C
    digest, or None when that bookie has no such entry."""
    import socket
    import struct

    from kop.storage.bookkeeper.protocol import (
        ENOENTRY,
        ENOLEDGER,
        EOK,
        decode_entry,
        decode_response,
        encode_read,
    )

    host, port = bookie.rsplit(":", 1)
    with socket.create_connection((host, int(port)), timeout=30) as s:
        s.sendall(encode_read(ledger_id, entry_id))
        size = struct.unpack(">I", s.recv(4, socket.MSG_WAITALL))[0]
        body = s.recv(size, socket.MSG_WAITALL)
    _, rc, lid, eid, rest = decode_response(memoryview(body))
    assert (lid, eid) == (ledger_id, entry_id)
    if rc in (ENOENTRY, ENOLEDGER):
        return None
    assert rc == EOK, f"bookie {bookie}: rc {rc} reading {ledger_id}/{entry_id}"
    return bytes(decode_entry(rest, ledger_id, entry_id).payload)


def test_bookkeepers_own_recover_command_re_replicates_our_ledgers(cluster, kop_broker):
    """The broker does not re-replicate a dead bookie's copies itself; BookKeeper's recovery does, on our
    ledgers, because their metadata is BookKeeper's own (docs/cluster.md). A closed ledger whose ensemble
    leaves out one bookie W loses a bookie of its ensemble; `bookkeeper shell recover` copies its entries
    to W and rewrites the ensembles in ZooKeeper; W then serves every entry, and the broker reads every
    record back through the new ensembles."""
    chroot = f"/kop-recover-{uuid.uuid4().hex[:10]}"
    broker = _bk_broker(
        kop_broker, cluster, chroot,
        managedLedgerMaxEntriesPerLedger=3,  # several ledgers, so their ensembles differ
        managedLedgerMinLedgerRolloverTimeMinutes=0,
        offsetsTopicNumPartitions=1,
    )
    topic = "bk-recover"
    create_topic(broker.bootstrap, topic, 1)
    records = make_records(400, 1, base_ts=int(time.time() * 1000) - 60_000)
    for i in range(0, len(records), 40):  # at least 10 batches (entries): several ledgers
        produce_kafka_python(broker.bootstrap, topic, records[i : i + 40], "none")
    before = _stored_batches(broker.bootstrap, topic, len(records))
    broker.stop()  # closes the partition's ledgers

    zk = cluster.zk()
    info = ManagedLedgerInfo.decode(zk.get(f"{chroot}/managed-ledgers/public/default/persistent/"
                                           f"{topic}-partition-0")[0])
    ledgers = {li.ledger_id: LedgerMetadata.decode(zk.get(ledger_path(li.ledger_id))[0]) for li in info.ledgers}
    assert len(ledgers) >= 3 and all(md.is_closed for md in ledgers.values()), ledgers
    target = next(lid for lid, md in ledgers.items() if md.last_entry_id >= 0)
    (w,) = {b.bookie_id for b in cluster.bookies} - ledgers[target].bookies()
    victim, survivor = sorted(ledgers[target].bookies())[:2]
    entries = range(ledgers[target].last_entry_id + 1)
    stored = {e: _bookie_read(survivor, target, e) for e in entries}
    assert all(stored.values())
    assert all(_bookie_read(w, target, e) is None for e in entries)  # W has no copy yet

    cluster.kill_bookie(cluster.bookie_by_id(victim).index)
    # One ledger at a time (-ledger): the shared cluster also holds other tests' ledgers, some of them left
    # unrecoverable on purpose. An operator recovering a dead bookie names no ledger.
    for lid in sorted(lid for lid, md in ledgers.items() if victim in md.bookies()):
        run = cluster.shell("recover", "-force", "-ledger", lid, victim, timeout=180)
        assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]

    # Every ledger that had the victim now has another bookie in its place; the others are untouched.
    for lid, old in ledgers.items():
        md = LedgerMetadata.decode(zk.get(ledger_path(lid))[0])
        assert victim not in md.bookies() and len(md.bookies()) == 3, (lid, md)
        assert md.is_closed and md.last_entry_id == old.last_entry_id
        if victim not in old.bookies():
            assert md.segments == old.segments
    # W now holds the target's entries, the same bytes (digest-checked) the survivor holds.
    assert {e: _bookie_read(w, target, e) for e in entries} == stored

    # The broker (3 bookies left, the recovered ensembles) serves every record as before.
    broker.start()
    from tests.support.clients import end_offsets

    # A client's first Metadata makes the restarted broker take the partition's bundle again (the raw
    # fetches below do not ask for Metadata).
    assert end_offsets(broker.bootstrap, topic, 1) == {0: len(records)}
    assert _stored_batches(broker.bootstrap, topic, len(records)) == before
    broker.stop()
