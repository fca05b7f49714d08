"""Readiness that tells the truth (issue #12), with real mechanisms: a metadata store on a read-only bind mount
stops start-up with a clear message (exit status 1: the configuration is fine, the machine's storage is
not - the same status as any other "cannot start"), and a data directory on a small tmpfs that fills up
while the broker runs makes /ready answer 503 with the reason and Produce answer KAFKA_STORAGE_ERROR while
reads keep working; once space returns, /ready is 200 again, produce works, and every acknowledged record
is read back at its offset. (Root ignores file permissions, so mounts, not chmod; the tests run as root.)
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import time
import urllib.error
import urllib.request

from kop.storage.local.ledgers import LocalLedgerStore
from tests.support.broker import KopBroker
from tests.support.clients import create_topic
from tests.support.wire import Negotiated

TOPIC = "fill"


def _sh(cmd: str) -> None:
    subprocess.run(cmd, shell=True, check=True, capture_output=True, timeout=60)


def _ready(broker: KopBroker) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(f"{broker.admin_url}/ready", timeout=30) as r:
            return r.status, r.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode()


def _wait_ready(broker: KopBroker, status: int, timeout: float = 60) -> str:
    deadline = time.monotonic() + timeout
    while True:
        got, body = _ready(broker)
        if got == status:
            return body
        if time.monotonic() > deadline:
            raise AssertionError(f"/ready stayed {got}: {body}\n{broker.log_tail()}")
        time.sleep(0.3)


def test_read_only_metadata_store_refuses_start(tmp_path):
    broker = KopBroker(tmp_path / "kop")
    broker.start()
    broker.stop()
    db = broker.data_dir / "metadata.db"
    _sh(f"mount --bind {db} {db} && mount -o remount,ro,bind {db}")
    try:
        r = subprocess.run(broker.command(), capture_output=True, text=True, timeout=120)
    finally:
        _sh(f"umount {db}")
    assert r.returncode == 1, r.stderr
    assert f"kop: cannot start: metadata store {db} cannot be written: attempt to write a readonly database" \
        in r.stderr, r.stderr
    assert "Traceback" not in r.stderr


def test_read_only_data_dir_refuses_start(tmp_path):
    broker = KopBroker(tmp_path / "kop")
    broker.start()
    broker.stop()
    d = broker.data_dir
    _sh(f"mount --bind {d} {d} && mount -o remount,ro,bind {d}")
    try:
        r = subprocess.run(broker.command(), capture_output=True, text=True, timeout=120)
    finally:
        _sh(f"umount {d}")
    assert r.returncode == 1, r.stderr
    assert f"kop: cannot start: ledger directory {d / 'ledgers'} cannot be written: Read-only file system" \
        in r.stderr, r.stderr


def _fill(path) -> None:
    """Write zeros until the file system is full."""
    block = b"\0" * (64 << 10)
    with open(path, "wb", buffering=0) as f:
        with contextlib.suppress(OSError):
            while True:
                f.write(block)
        with contextlib.suppress(OSError):
            while True:  # the last few bytes
                f.write(b"\0" * 512)


def test_full_disk_while_running(tmp_path):
    from kafka import KafkaConsumer, KafkaProducer, TopicPartition
    from kafka.errors import KafkaStorageError

    broker = KopBroker(tmp_path / "kop", {"allowAutoTopicCreation": "false", "offsetsTopicNumPartitions": 1})
    broker.data_dir.mkdir(parents=True)
    _sh(f"mount -t tmpfs -o size=24m tmpfs {broker.data_dir}")
    filler = broker.data_dir / "filler"
    try:
        broker.start()
        _wait_ready(broker, 200)
        create_topic(broker.bootstrap, TOPIC, 1)
        producer = KafkaProducer(bootstrap_servers=broker.bootstrap, acks="all", linger_ms=0, retries=0,
                                 request_timeout_ms=30000)
        acked: dict[int, bytes] = {}

        def send(value: bytes) -> bool:
            try:
                acked[producer.send(TOPIC, value, partition=0).get(timeout=60).offset] = value
                return True
            except KafkaStorageError:
                return False

        for i in range(20):
            assert send(b"before-%d" % i)
        _fill(filler)
        failed = [send(b"full-%d-" % i + b"x" * 4000) for i in range(10)]
        assert not any(failed[2:]), failed  # at most what still fit in the last blocks is acknowledged
        body = _wait_ready(broker, 503)
        assert "cannot be written" in body, body
        # Reads keep working while the disk is full.
        consumer = KafkaConsumer(bootstrap_servers=broker.bootstrap, enable_auto_commit=False,
                                 auto_offset_reset="none", consumer_timeout_ms=10000)
        tp = TopicPartition(TOPIC, 0)
        consumer.assign([tp])
        consumer.seek(tp, 0)
        got = {}
        for m in consumer:  # until every acknowledged record is back (the timeout only guards against a hang)
            if m.offset in acked:
                got[m.offset] = m.value
            if len(got) == len(acked):
                break
        assert got == acked
        consumer.close()

        os.unlink(filler)
        _wait_ready(broker, 200)
        for i in range(20):
            assert send(b"after-%d" % i)
        producer.close()
        broker.restart()  # and nothing acknowledged is lost across a restart either
        consumer = KafkaConsumer(bootstrap_servers=broker.bootstrap, enable_auto_commit=False,
                                 auto_offset_reset="none", consumer_timeout_ms=10000)
        consumer.assign([tp])
        consumer.seek(tp, 0)
        got = {}
        for m in consumer:
            got[m.offset] = m.value
            if len(got) >= len(acked) and max(got) >= max(acked):
                break
        consumer.close()
        assert {o: got.get(o) for o in acked} == acked
        log = broker.log_path.read_text(errors="replace")
        assert "write failed" in log
    finally:
        with contextlib.suppress(Exception):
            broker.stop()
        with contextlib.suppress(FileNotFoundError):
            os.unlink(filler)
        _sh(f"umount {broker.data_dir}")


def test_full_data_dir_refuses_start(tmp_path):
    broker = KopBroker(tmp_path / "kop")
    broker.data_dir.mkdir(parents=True)
    _sh(f"mount -t tmpfs -o size=4m tmpfs {broker.data_dir}")
    try:
        broker.start()
        broker.stop()
        _fill(broker.data_dir / "filler")
        r = subprocess.run(broker.command(), capture_output=True, text=True, timeout=120)
    finally:
        _sh(f"umount {broker.data_dir}")
    assert r.returncode == 1, r.stderr
    assert "kop: cannot start: ledger directory" in r.stderr and "No space left on device" in r.stderr, r.stderr


def test_probe_writable_names_the_directory(tmp_path):
    store = LocalLedgerStore(tmp_path / "ledgers")
    try:
        assert store.probe_writable() is None
        assert not (tmp_path / "ledgers" / ".write-probe").exists()
    finally:
        store.abandon()


def test_a_consumer_offsets_partition_that_fails_to_load_is_not_ready(tmp_path):
    """A damaged entry in __consumer_offsets (a real flipped byte) makes its partition's load fail: /ready
    says so instead of 200, while the data topics are served."""
    from kafka import KafkaConsumer, KafkaProducer, OffsetAndMetadata, TopicPartition

    broker = KopBroker(tmp_path / "kop", {"offsetsTopicNumPartitions": 1, "allowAutoTopicCreation": "false"})
    broker.start()
    try:
        create_topic(broker.bootstrap, TOPIC, 1)
        producer = KafkaProducer(bootstrap_servers=broker.bootstrap, acks="all")
        producer.send(TOPIC, b"v", partition=0).get(timeout=60)
        producer.close()
        consumer = KafkaConsumer(bootstrap_servers=broker.bootstrap, group_id="g", enable_auto_commit=False)
        tp = TopicPartition(TOPIC, 0)
        consumer.assign([tp])
        for i in range(3):
            consumer.commit({tp: OffsetAndMetadata(i, None, -1)})
        consumer.close()
        _wait_ready(broker, 200)
    finally:
        broker.stop()
    _flip_a_byte_of_the_first_entry(broker, "__consumer_offsets")
    broker.start()
    try:
        body = _wait_ready(broker, 503)
        assert "__consumer_offsets partition(s) [0] failed to load" in body, body
        with Negotiated(broker.bootstrap) as c:  # the data topic is still served
            assert c.fetch(TOPIC, 0, 0).error_code == 0
    finally:
        broker.stop()


def test_a_transaction_state_partition_that_fails_to_load_is_not_ready(tmp_path):
    """The same for __transaction_state: a damaged entry makes its partition's load fail, and /ready names it."""
    from confluent_kafka import Producer

    broker = KopBroker(tmp_path / "kop", {"transactionStateLogNumPartitions": 1, "allowAutoTopicCreation": "false"})
    broker.start()
    try:
        create_topic(broker.bootstrap, TOPIC, 1)
        producer = Producer({"bootstrap.servers": broker.bootstrap, "transactional.id": "tx-ready"})
        producer.init_transactions(30)
        producer.begin_transaction()
        producer.produce(TOPIC, b"v", partition=0)
        producer.commit_transaction(30)
        _wait_ready(broker, 200)
    finally:
        broker.stop()
    _flip_a_byte_of_the_first_entry(broker, "__transaction_state")
    broker.start()
    try:
        body = _wait_ready(broker, 503)
        assert "__transaction_state partition(s) [0] failed to load" in body, body
    finally:
        broker.stop()


def _flip_a_byte_of_the_first_entry(broker: KopBroker, internal_topic: str) -> None:
    """A real flipped byte inside the first entry of the internal topic's (only) partition."""
    from kop.offset.inspect import inspect_managed_ledger, list_managed_ledgers
    from kop.storage.local.ledgers import HEADER_SIZE

    (name,) = [n for n in list_managed_ledgers(broker.data_dir) if internal_topic in n]
    view = inspect_managed_ledger(broker.data_dir, name)
    first = next(lv.ledger_id for lv in view.ledgers if lv.entries)
    with open(broker.data_dir / "ledgers" / f"{first}.log", "r+b") as f:
        f.seek(HEADER_SIZE + 30)
        b = f.read(1)
        f.seek(HEADER_SIZE + 30)
        f.write(bytes([b[0] ^ 0xFF]))
