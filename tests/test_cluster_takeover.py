"""Takeover between two brokers sharing ZooKeeper and the 4 bookies of tests/support/bookkeeper.py (E/Qw/Qa
3/3/2, a 4 s ZooKeeper session), with real clients:

* SIGKILL of the broker that owns a partition of the topic and coordinates the consumer group, while a
  kafka-python producer (acks=all, bootstrap = both brokers) produces and a kafka-python group consumer
  consumes and commits: the survivor takes the partitions and the group over; every acknowledged record
  is read back at the offset its acknowledgement gave; the consumer read every acknowledged record,
  re-read only records after its last commit before the kill, and its last commit is what the survivor
  returns - also to Kafka's own kafka-consumer-groups (Java admin client).
* SIGSTOP of the owner until its session expired and the other broker took over and accepted writes,
  then SIGCONT: a produce sent to the old owner is not acknowledged, its last ledger was fenced by the
  new owner's recovery (a bookie answers a further add with EFENCED, and the ledger is closed in
  BookKeeper's metadata), and the new owner serves exactly the acknowledged records.
* Graceful moves: a broker that joins gets its share of the bundles from the running one (which closes
  the logs and deletes its owner nodes), and a broker stopped with SIGTERM hands its bundles back at
  once; records, offsets and a group's committed offsets go along both times.
"""

from __future__ import annotations

import os
import signal
import socket
import struct
import threading
import time
import uuid

from kop.managed_ledger.protobuf import ManagedLedgerInfo
from kop.storage.bookkeeper import LedgerMetadata, ledger_path
from kop.storage.bookkeeper.protocol import EFENCED, decode_response, encode_add, master_key
from tests.support.admin import batch
from tests.support.clients import create_topic
from tests.support.cluster import (
    broker_id,
    coordinator_of,
    eventually,
    leader_of,
    metadata,
    start_brokers,
    stop_brokers,
)
from tests.support.wire import Negotiated

PARTITIONS = 2


class Producer(threading.Thread):
    """Sends records round-robin over the partitions (acks=all) until stopped; keeps every acknowledged
    (partition, offset, value) and the index of the first record sent after `mark()`."""

    def __init__(self, bootstrap: str, topic: str) -> None:
        super().__init__(daemon=True)
        from kafka import KafkaProducer

        self.topic = topic
        self.producer = KafkaProducer(bootstrap_servers=bootstrap, acks="all", linger_ms=5, retries=1_000_000,
                                      request_timeout_ms=10_000, retry_backoff_ms=200,
                                      max_in_flight_requests_per_connection=1, metadata_max_age_ms=5_000)
        self.acked: list[tuple[int, int, bytes]] = []
        self.failed = 0
        self.stop_flag = threading.Event()
        self.lock = threading.Lock()
        self.marked_at = None

    def mark(self) -> None:
        with self.lock:
            self.marked_at = len(self.acked)

    def acked_after_mark(self) -> int:
        with self.lock:
            return 0 if self.marked_at is None else len(self.acked) - self.marked_at

    def run(self) -> None:
        i = 0
        while not self.stop_flag.is_set():
            futures = []
            for _ in range(10):
                value = f"rec-{i}".encode()
                futures.append((value, self.producer.send(self.topic, value=value, partition=i % PARTITIONS)))
                i += 1
            for value, f in futures:
                try:
                    md = f.get(timeout=120)
                except Exception:
                    self.failed += 1
                    continue
                with self.lock:
                    self.acked.append((md.partition, md.offset, value))
            time.sleep(0.02)
        self.producer.close(timeout=10)


class GroupConsumer(threading.Thread):
    """A group member that polls and commits the positions it reached after every third poll; keeps what
    it consumed and each successful commit (with whether it came after the mark)."""

    def __init__(self, bootstrap: str, topic: str, group: str) -> None:
        super().__init__(daemon=True)
        from kafka import KafkaConsumer

        self.topic = topic
        self.consumer = KafkaConsumer(topic, bootstrap_servers=bootstrap, group_id=group, enable_auto_commit=False,
                                      auto_offset_reset="earliest", session_timeout_ms=6000,
                                      heartbeat_interval_ms=1000, request_timeout_ms=15_000,
                                      metadata_max_age_ms=5_000)
        self.consumed: list[tuple[int, int, bytes]] = []
        self.commits: list[tuple[bool, dict[int, int]]] = []  # (after mark, {partition: offset})
        self.stop_flag = threading.Event()
        self.marked = False
        self.lock = threading.Lock()

    def run(self) -> None:
        from kafka.structs import OffsetAndMetadata

        polls = 0
        while not self.stop_flag.is_set():
            try:
                for tp, msgs in self.consumer.poll(timeout_ms=500).items():
                    with self.lock:
                        self.consumed.extend((tp.partition, m.offset, m.value) for m in msgs)
                polls += 1
                positions = {tp.partition: self.consumer.position(tp) for tp in self.consumer.assignment()}
                if not positions or polls % 3:
                    continue  # commit every third poll: a takeover then re-delivers what came after it
                from kafka import TopicPartition

                self.consumer.commit({TopicPartition(self.topic, p): OffsetAndMetadata(o, "", -1)
                                      for p, o in positions.items()})
                with self.lock:
                    self.commits.append((self.marked, positions))
            except Exception:
                time.sleep(0.2)  # coordinator moving, rebalancing: the next poll carries on
        self.consumer.close(autocommit=False)

    def consumed_after_mark(self, acked: set[tuple[int, int]]) -> bool:
        with self.lock:
            return any((p, o) in acked for p, o, _ in self.consumed)


def _read_all(bootstrap: str, topic: str) -> dict[tuple[int, int], bytes]:
    """Every record of the topic, read without a group from the current leaders."""
    from kafka import KafkaConsumer, TopicPartition

    c = KafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False, auto_offset_reset="earliest",
                      request_timeout_ms=15_000)
    try:
        tps = [TopicPartition(topic, p) for p in range(PARTITIONS)]
        c.assign(tps)
        c.seek_to_beginning()
        ends = c.end_offsets(tps)
        out: dict[tuple[int, int], bytes] = {}
        deadline = time.monotonic() + 120
        while any(c.position(tp) < ends[tp] for tp in tps):
            for tp, msgs in c.poll(timeout_ms=500).items():
                out.update({(tp.partition, m.offset): m.value for m in msgs})
            assert time.monotonic() < deadline, "reading the topic back stalled"
        return out
    finally:
        c.close()


def _committed(bootstrap: str, topic: str, group: str) -> dict[int, int | None]:
    from kafka import KafkaConsumer, TopicPartition

    c = KafkaConsumer(bootstrap_servers=bootstrap, group_id=group, enable_auto_commit=False)
    try:
        return {p: c.committed(TopicPartition(topic, p)) for p in range(PARTITIONS)}
    finally:
        c.close()


def test_sigkill_of_the_owner_during_produce_and_group_consumption(cluster, tmp_path_factory, java_tools):
    brokers = start_brokers(tmp_path_factory, cluster, 2)
    try:
        topic = "takeover-" + uuid.uuid4().hex[:6]
        create_topic(brokers[0].bootstrap, topic, PARTITIONS)
        victim = leader_of(brokers, topic, 0)
        group = next(g for g in (f"takeover-group-{i}" for i in range(200)) if coordinator_of(brokers, g) is victim)
        survivor = next(b for b in brokers if b is not victim)
        bootstrap = ",".join(b.bootstrap for b in brokers)

        producer = Producer(bootstrap, topic)
        consumer = GroupConsumer(bootstrap, topic, group)
        producer.start()
        consumer.start()
        eventually("acks and commits before the kill",
                   lambda: len(producer.acked) >= 100 and len(consumer.commits) >= 3, timeout=120)
        consumer.marked = True
        producer.mark()
        victim.kill()  # SIGKILL: its ZooKeeper nodes stay until its session expires

        eventually("a new leader for every partition", lambda: all(
            metadata(survivor.bootstrap, [topic]).leaders[(topic, p)][0] == broker_id(survivor)
            for p in range(PARTITIONS)), timeout=120)
        eventually("acks after the kill", lambda: producer.acked_after_mark() >= 100, timeout=120)
        producer.stop_flag.set()
        producer.join(180)
        assert not producer.is_alive()
        acked = {(p, o): v for p, o, v in producer.acked}
        eventually("the group consumed every acknowledged record",
                   lambda: set(acked) <= {(p, o) for p, o, _ in list(consumer.consumed)}, timeout=120)
        eventually("a commit after the kill covering everything", lambda: any(
            after and all(c.get(p, 0) > max(o for (q, o) in acked if q == p) for p in range(PARTITIONS))
            for after, c in list(consumer.commits)), timeout=120)
        consumer.stop_flag.set()
        consumer.join(60)
        assert not consumer.is_alive()

        # Every acknowledged record is in the log at the offset its acknowledgement gave.
        log = _read_all(survivor.bootstrap, topic)
        missing = {k: v for k, v in acked.items() if log.get(k) != v}
        assert not missing, f"{len(missing)} acknowledged records not at their offsets: {sorted(missing)[:10]}"
        assert producer.acked_after_mark() >= 100  # the producer carried on after the takeover

        # The group read everything; it re-read only records after its last commit before the kill.
        last_before = {}
        for after, c in consumer.commits:
            if not after:
                last_before.update(c)
        seen: dict[tuple[int, int], int] = {}
        for p, o, v in consumer.consumed:
            assert log[(p, o)] == v
            seen[(p, o)] = seen.get((p, o), 0) + 1
        for (p, o), n in seen.items():
            if n > 1:
                assert o >= last_before.get(p, 0), f"partition {p} offset {o} re-read but committed before the kill"
        # No commit lost: the survivor returns the group's last commit.
        last = {}
        for _, c in consumer.commits:
            last.update(c)
        assert _committed(survivor.bootstrap, topic, group) == last
        # A Java client (Kafka 4.x's admin client in kafka-consumer-groups) finds the new coordinator too,
        # given both brokers (the dead one first), and reads the same committed offsets.
        described = java_tools.run("kafka-consumer-groups", "--bootstrap-server",
                                   f"{victim.bootstrap},{survivor.bootstrap}", "--describe", "--group", group,
                                   check=True)
        rows = [line.split() for line in described.lines if line.split()[:2] == [group, topic]]
        assert {int(r[2]): int(r[3]) for r in rows} == last, described.stdout
    finally:
        stop_brokers(brokers)


def _bookie_add(bookie: str, ledger_id: int, entry_id: int, lac: int, length: int) -> int:
    """One raw ADD (v2 protocol, the empty password's master key) to a bookie; returns its rc."""
    payload = b"late write of the old owner"
    frame = encode_add(master_key(b""), ledger_id, entry_id, lac, length + len(payload), [payload], len(payload))
    host, port = bookie.rsplit(":", 1)
    with socket.create_connection((host, int(port)), timeout=30) as s:
        s.sendall(frame + payload)
        size = struct.unpack(">I", s.recv(4, socket.MSG_WAITALL))[0]
        body = s.recv(size, socket.MSG_WAITALL)
    _, rc, lid, eid, _ = decode_response(memoryview(body))
    assert (lid, eid) == (ledger_id, entry_id)
    return rc


def test_a_frozen_owner_is_fenced_after_takeover(cluster, tmp_path_factory):
    # No hand-back when the frozen broker returns: broker 1 (started first) owns everything throughout.
    brokers = start_brokers(tmp_path_factory, cluster, 2, loadBalancerEnabled="false")
    try:
        topic = "fenced-" + uuid.uuid4().hex[:6]
        create_topic(brokers[0].bootstrap, topic, 1)
        old = leader_of(brokers, topic, 0)
        new = next(b for b in brokers if b is not old)
        acked: dict[int, bytes] = {}
        with Negotiated(old.bootstrap) as w:
            for i in range(20):
                value = f"before-{i}".encode()
                r = w.produce(topic, 0, batch([value]))
                assert r.error_code == 0
                acked[r.base_offset] = value
        zk = cluster.zk()
        ml_path = f"{old.chroot}/managed-ledgers/public/default/persistent/{topic}-partition-0"
        old_ledger = ManagedLedgerInfo.decode(zk.get(ml_path)[0]).ledgers[-1].ledger_id
        assert not LedgerMetadata.decode(zk.get(ledger_path(old_ledger))[0]).is_closed  # still being written

        os.kill(old.pid, signal.SIGSTOP)
        try:
            eventually("the other broker leads the partition", lambda: metadata(new.bootstrap, [topic]).leaders[
                (topic, 0)][0] == broker_id(new), timeout=120)
            with Negotiated(new.bootstrap) as w:
                for i in range(20):
                    value = f"after-{i}".encode()
                    r = eventually("a produce to the new owner", lambda w=w, v=value: (
                        r := w.produce(topic, 0, batch([v]))).error_code == 0 and r)
                    acked[r.base_offset] = value
        finally:
            os.kill(old.pid, signal.SIGCONT)

        # (a) The old owner does not acknowledge a write, whether it already knows it lost the partition
        # (NOT_LEADER_OR_FOLLOWER) or not yet (its ledger is fenced: KAFKA_STORAGE_ERROR).
        with Negotiated(old.bootstrap) as w:
            r = w.produce(topic, 0, batch([b"late"]))
        assert r.error_code != 0, "the old owner acknowledged a write after the takeover"
        # (b) Its ledger was fenced and sealed by the new owner's recovery: bookies refuse a further add.
        md = LedgerMetadata.decode(zk.get(ledger_path(old_ledger))[0])
        assert md.is_closed and md.last_entry_id == 19
        for bookie in md.last_ensemble:
            assert _bookie_add(bookie, old_ledger, md.last_entry_id + 1, md.last_entry_id, md.length) == EFENCED
        # (c) The new owner serves exactly the acknowledged records, at their offsets.
        with Negotiated(new.bootstrap) as w:
            got = w.fetch(topic, 0, 0, max_bytes=1 << 20)
            assert got.error_code == 0 and got.high_watermark == 40
        from kafka import KafkaConsumer, TopicPartition

        c = KafkaConsumer(bootstrap_servers=new.bootstrap, enable_auto_commit=False, auto_offset_reset="earliest")
        try:
            tp = TopicPartition(topic, 0)
            c.assign([tp])
            records: dict[int, bytes] = {}
            while len(records) < 40:
                for m in c.poll(timeout_ms=1000).get(tp, []):
                    records[m.offset] = m.value
        finally:
            c.close()
        assert records == acked
        # The old owner comes back as a live broker without the partition: it keeps refusing it.
        eventually("the old owner registered again", lambda: metadata(new.bootstrap, None).brokers.keys() == {1, 2})
        with Negotiated(old.bootstrap) as w:
            assert eventually("NOT_LEADER_OR_FOLLOWER from the old owner", lambda: w.produce(
                topic, 0, batch([b"late"])).error_code == 6)
        with Negotiated(new.bootstrap) as w:
            assert w.fetch(topic, 0, 0).high_watermark == 40
    finally:
        stop_brokers(brokers)


def test_bundles_move_to_a_joining_broker_and_back_on_sigterm(cluster, tmp_path_factory):
    from kop.coordinator.records import partition_for

    (first,) = start_brokers(tmp_path_factory, cluster, 1)
    brokers = [first]
    try:
        topic, partitions = "owned-a", 12  # a fixed name: its partitions fall into bundles of both brokers
        create_topic(first.bootstrap, topic, partitions)
        acked: dict[tuple[int, int], bytes] = {}

        def produce(round_: str) -> None:
            for p in range(partitions):
                owner = leader_of(brokers, topic, p)
                with Negotiated(owner.bootstrap) as w:
                    value = f"{round_}-{p}".encode()
                    r = eventually("a produce to the owner", lambda w=w, p=p, v=value: (
                        r := w.produce(topic, p, batch([v]))).error_code == 0 and r)
                    acked[(p, r.base_offset)] = value

        def read_back() -> dict[tuple[int, int], bytes]:
            out = {}
            for p in range(partitions):
                with Negotiated(leader_of(brokers, topic, p).bootstrap) as w:
                    got = eventually("a fetch from the owner", lambda w=w, p=p: (
                        f := w.fetch(topic, p, 0)).error_code == 0 and f)
                from kafka.record import MemoryRecords

                records = MemoryRecords(got.records)
                while (b := records.next_batch()) is not None:
                    out.update({(p, r.offset): r.value for r in b})
            return out

        produce("alone")
        group = next(g for g in (f"group-{i}" for i in range(50)) if partition_for(g, 4) in (1, 3))  # bundle of 2
        committed = {p: 1 for p in range(partitions)}
        from kafka import KafkaConsumer, TopicPartition
        from kafka.structs import OffsetAndMetadata

        c = KafkaConsumer(bootstrap_servers=first.bootstrap, group_id=group, enable_auto_commit=False)
        c.commit({TopicPartition(topic, p): OffsetAndMetadata(o, "", -1) for p, o in committed.items()})
        c.close()

        brokers += start_brokers(tmp_path_factory, cluster, 1, chroot=first.chroot, first_id=2, settled_ids=[1, 2])
        second = brokers[1]
        leaders = {p: broker_id(leader_of(brokers, topic, p)) for p in range(partitions)}
        assert set(leaders.values()) == {1, 2}
        assert coordinator_of(brokers, group) is second
        assert _committed_n(second.bootstrap, topic, group, partitions) == committed
        produce("shared")
        assert read_back() == acked  # offsets continued on the new owners

        second.stop()  # SIGTERM: seals its ledgers, deletes its owner nodes
        eventually("broker 1 leads everything again", lambda: all(
            v[0] == 1 for k, v in metadata(first.bootstrap, [topic]).leaders.items()), timeout=60)
        brokers = [first]
        assert coordinator_of(brokers, group) is first
        assert _committed_n(first.bootstrap, topic, group, partitions) == committed
        produce("back")
        assert read_back() == acked
        assert sorted(o for (p, o) in acked if p == 0) == [0, 1, 2]
    finally:
        stop_brokers(brokers)


def _committed_n(bootstrap: str, topic: str, group: str, partitions: int) -> dict[int, int | None]:
    from kafka import KafkaConsumer, TopicPartition

    c = KafkaConsumer(bootstrap_servers=bootstrap, group_id=group, enable_auto_commit=False)
    try:
        return {p: c.committed(TopicPartition(topic, p)) for p in range(partitions)}
    finally:
        c.close()
