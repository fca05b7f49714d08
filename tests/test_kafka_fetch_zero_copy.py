"""Zero-copy Fetch (issue 27): with the embedded storage and localStoreVerifyChecksums=false, a plain-TCP
connection gets the bodies of large stored batches straight from the ledger files (os.sendfile,
kop/kafka/sendfile.py), the base offset and the rest of each batch header from memory.

Real clients (confluent-kafka, kafka-python, and kafka-python's protocol classes on the wire) read exactly what
was produced through that path: several partitions in one answer, the byte limits, read_committed with an
aborted transaction, a compacted topic, ledgers rolled every few entries (so one answer spans several ledger
files). The TLS listener of the same broker keeps the copy path; a ledger file truncated under the broker
answers KAFKA_STORAGE_ERROR, never other bytes. `kop_server_fetch_sendfile_bytes` proves which path served:
without it these tests would pass on the copy path too. With the default localStoreVerifyChecksums=true (a
second broker, the last test) the same path checks each entry's CRC first: a flipped byte is refused. Only ours
(the path is ours: the reference has no such switch).
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.x509.oid import NameOID

from kop.kafka.apis.common import LEADER_EPOCH
from kop.protocol.records import build_batch
from kop.storage.local.ledgers import check_ledger_file
from tests.support.admin import Scrape
from tests.support.broker import KopBroker
from tests.support.certs import CertAuthority, name
from tests.support.clients import (
    assert_consumed_exactly,
    by_partition,
    consume_confluent,
    consume_kafka_python,
    create_topic,
    end_offsets,
    make_records,
    produce_confluent,
)
from tests.support.inspect import managed_ledger
from tests.support.net import free_port
from tests.support.wire import Negotiated

KAFKA_STORAGE_ERROR = 56
SENT = "kop_server_fetch_sendfile_bytes_total"


class Zc:
    def __init__(self, broker: KopBroker, ssl_port: int, ca: Path) -> None:
        self.broker = broker
        self.ssl_bootstrap = f"127.0.0.1:{ssl_port}"
        self.ca = str(ca)

    def sent(self) -> float:
        return Scrape(self.broker.admin_url).total(SENT)


@pytest.fixture(scope="module")
def zc(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Zc]:
    d = tmp_path_factory.mktemp("zero-copy")
    ca = CertAuthority()
    (d / "ca.pem").write_bytes(ca.cert.public_bytes(serialization.Encoding.PEM))
    cert = ca.issue(name((NameOID.COMMON_NAME, "broker")), ips=["127.0.0.1"])
    (d / "b.pem").write_bytes(cert.cert_pem)
    (d / "b.key").write_bytes(cert.key_pem)
    port, ssl_port = free_port(), free_port()
    broker = KopBroker(d / "broker", {
        "kafkaListeners": f"PLAINTEXT://127.0.0.1:{port},SSL://127.0.0.1:{ssl_port}",
        "tlsCertificateFilePath": d / "b.pem", "tlsKeyFilePath": d / "b.key",
        "localStoreVerifyChecksums": "false", "localStoreFsyncPolicy": "none",
        "managedLedgerMaxEntriesPerLedger": 4, "managedLedgerMinLedgerRolloverTimeMinutes": 0,
        "logCleanerIntervalMs": 200, "messagingProtocols": "kafka",
    }, port=port)
    broker.start()
    yield Zc(broker, ssl_port, d / "ca.pem")
    broker.stop()
    assert "Traceback" not in broker.log_path.read_text(errors="replace")


def _big_records(n: int, partitions: int, tag: str) -> list:
    """make_records' records with 1 KiB more value each, so that batches are tens of KiB (zero copy applies
    to entries of 32 KiB or more on average)."""
    pad = os.urandom(512).hex().encode()
    out = []
    for r in make_records(n, partitions, int(time.time() * 1000), tag):
        out.append(type(r)(r.partition, r.key, (r.value or b"") + pad, r.headers, r.timestamp))
    return out


def test_clients_read_exactly_what_was_produced_from_the_files(zc: Zc) -> None:
    """Three partitions in many ledgers of 4 entries: confluent-kafka and kafka-python consumers read every record
    as produced, and most of the bytes went out by sendfile."""
    b = zc.broker
    topic = "zc-clients"
    create_topic(b.bootstrap, topic, 3)
    records = _big_records(3000, 3, "zc")
    produce_confluent(b.bootstrap, topic, records, "none", **{"linger.ms": 50, "batch.size": 64 * 1024})
    ends = end_offsets(b.bootstrap, topic, 3)
    assert ends == {p: 1000 for p in range(3)}
    assert len(managed_ledger(b, topic, 0).ledgers) > 2  # one answer spans several ledger files
    payload = sum(len(r.value) for r in records)
    before = zc.sent()
    assert_consumed_exactly(consume_confluent(b.bootstrap, topic, ends), by_partition(records, 3))
    middle = zc.sent()
    assert middle - before > 0.9 * payload
    assert_consumed_exactly(consume_kafka_python(b.bootstrap, topic, ends), by_partition(records, 3))
    assert zc.sent() - middle > 0.9 * payload


def test_tls_listener_keeps_the_copy_path(zc: Zc) -> None:
    from kafka import KafkaConsumer, TopicPartition

    b = zc.broker
    topic = "zc-tls"
    create_topic(b.bootstrap, topic, 1)
    records = _big_records(400, 1, "tls")
    produce_confluent(b.bootstrap, topic, records, "none", **{"linger.ms": 50, "batch.size": 64 * 1024})
    before = zc.sent()
    consumer = KafkaConsumer(bootstrap_servers=zc.ssl_bootstrap, security_protocol="SSL", ssl_cafile=zc.ca,
                             enable_auto_commit=False, consumer_timeout_ms=30000)
    try:
        tp = TopicPartition(topic, 0)
        consumer.assign([tp])
        consumer.seek(tp, 0)
        got = []
        while len(got) < len(records):
            batch = consumer.poll(timeout_ms=5000)
            assert batch, f"the TLS consumer stalled at {len(got)} records"
            got += [m for ms in batch.values() for m in ms]
    finally:
        consumer.close()
    assert [(m.offset, m.key, m.value) for m in got] == [(i, r.key, r.value) for i, r in enumerate(records)]
    assert zc.sent() == before


def _batch(tag: str, n: int, size: int, keys: list[bytes] | None = None) -> bytes:
    return build_batch([(keys[i] if keys else b"k%d" % i, (tag.encode() + b"%06d" % i) * (size // 10 + 1))
                        for i in range(n)])


def _split(records: bytes) -> list[bytes]:
    out, pos, mv = [], 0, memoryview(records or b"")
    while pos + 12 <= len(mv):
        length = int.from_bytes(mv[pos + 8 : pos + 12], "big")
        assert pos + 12 + length <= len(mv), "a partial batch"
        out.append(bytes(mv[pos : pos + 12 + length]))
        pos += 12 + length
    assert pos == len(mv)
    return out


def _same_batch(sent: bytes, got: bytes, base_offset: int) -> None:
    assert len(got) == len(sent)
    assert int.from_bytes(got[:8], "big", signed=True) == base_offset
    assert got[8:12] == sent[8:12]
    assert int.from_bytes(got[12:16], "big", signed=True) == LEADER_EPOCH
    assert got[16:] == sent[16:]  # magic, CRC and everything it covers, as produced


def _fetch(c: Negotiated, topic: str, parts: dict[int, tuple[int, int]], max_bytes: int, isolation: int = 0):
    from kafka.protocol.consumer import FetchRequest

    FT = FetchRequest.FetchTopic
    req = FetchRequest(
        replica_id=-1, max_wait_ms=0, min_bytes=0, max_bytes=max_bytes, isolation_level=isolation, session_id=0,
        session_epoch=-1, forgotten_topics_data=[], rack_id="",
        topics=[FT(topic=topic, partitions=[
            FT.FetchPartition(partition=p, current_leader_epoch=-1, fetch_offset=off, log_start_offset=-1,
                              partition_max_bytes=pmax) for p, (off, pmax) in parts.items()])],
    )
    (t,) = c.send(req, 12).responses
    return {p.partition_index: p for p in t.partitions}


def test_limits_and_several_partitions_in_one_answer(zc: Zc) -> None:
    """Batches of ~40 KiB in two partitions: whole batches as produced, byte for byte, the base offsets the log's;
    the first batch even when over the limits; the response limit shared in partition order."""
    b = zc.broker
    topic = "zc-limits"
    create_topic(b.bootstrap, topic, 2)
    sent: dict[int, list[bytes]] = {0: [], 1: []}
    with Negotiated(b.bootstrap) as c:
        for part in (0, 1):
            for i in range(6):
                batch = _batch(f"p{part}b{i}", 10, 4000)
                assert c.produce(topic, part, batch).error_code == 0
                sent[part].append(batch)
        one = len(sent[0][0])
        assert all(len(x) == one for x in sent[0] + sent[1]) and one > 32 << 10
        before = zc.sent()
        ps = _fetch(c, topic, {0: (0, 1 << 24), 1: (0, 1 << 24)}, 1 << 24)
        for part in (0, 1):
            got = _split(ps[part].records)
            assert len(got) == 6
            for i, (s, g) in enumerate(zip(sent[part], got, strict=True)):
                _same_batch(s, g, 10 * i)
        assert zc.sent() - before > 10 * one  # the bodies came from the files
        # A partition limit below one batch: the first batch alone; 2.5 batches: two whole ones.
        assert [len(x) for x in _split(_fetch(c, topic, {0: (0, 10)}, 1 << 24)[0].records)] == [one]
        got = _split(_fetch(c, topic, {1: (20, 2 * one + one // 2)}, 1 << 24)[1].records)
        assert len(got) == 2
        _same_batch(sent[1][2], got[0], 20)
        _same_batch(sent[1][3], got[1], 30)
        # A fetch inside a batch returns that whole batch.
        _same_batch(sent[0][4], _split(_fetch(c, topic, {0: (45, 1 << 24)}, 1 << 24)[0].records)[0], 40)
        # The response limit is shared in partition order: 5.5 batches = 5 of the first, none of the second.
        ps = _fetch(c, topic, {0: (0, 1 << 24), 1: (0, 1 << 24)}, 5 * one + one // 2)
        assert len(_split(ps[0].records)) == 5
        assert _split(ps[1].records) == [] and ps[1].high_watermark == 60


def test_read_committed_skips_an_aborted_transaction(zc: Zc) -> None:
    from confluent_kafka import Consumer, Producer, TopicPartition

    b = zc.broker
    topic = "zc-txn"
    create_topic(b.bootstrap, topic, 2)
    producer = Producer({"bootstrap.servers": b.bootstrap, "transactional.id": "zc-txn", "linger.ms": 50,
                         "batch.size": 1 << 20})
    producer.init_transactions(60)
    values = {}
    for t, commit in enumerate((True, False, True)):
        producer.begin_transaction()
        for i in range(120):
            v = b"t%d-%03d-" % (t, i) + b"x" * 2000
            producer.produce(topic, key=b"k%d" % i, value=v, partition=i % 2)
            values.setdefault(commit, []).append(v)
        producer.flush(60)
        (producer.commit_transaction if commit else producer.abort_transaction)(60)
    ends = end_offsets(b.bootstrap, topic, 2)

    def consume(isolation: str) -> list[bytes]:
        c = Consumer({"bootstrap.servers": b.bootstrap, "group.id": f"zc-{isolation}", "isolation.level": isolation,
                      "enable.auto.commit": False})
        got: list[bytes] = []
        try:
            c.assign([TopicPartition(topic, p, 0) for p in (0, 1)])
            deadline = time.monotonic() + 60
            while time.monotonic() < deadline:
                positions = [tp.offset for tp in c.position([TopicPartition(topic, p) for p in (0, 1)])]
                if positions == [ends[0], ends[1]]:
                    break
                for m in c.consume(1000, timeout=0.5):
                    assert not m.error(), m.error()
                    got.append(m.value())
        finally:
            c.close()
        return got

    before = zc.sent()
    assert sorted(consume("read_committed")) == sorted(values[True])
    assert zc.sent() - before > 0.9 * sum(map(len, values[True]))
    assert sorted(consume("read_uncommitted")) == sorted(values[True] + values[False])


def test_compacted_topic(zc: Zc) -> None:
    """After compaction the first batch is gone (every key overwritten): a fetch from 0 starts at the next
    surviving batch, and the survivors come from the files as produced."""
    from kafka.admin import KafkaAdminClient, NewTopic

    b = zc.broker
    topic = "zc-compacted"
    admin = KafkaAdminClient(bootstrap_servers=b.bootstrap)
    try:
        admin.create_topics([NewTopic(topic, 1, 1, topic_configs={
            "cleanup.policy": "compact", "min.cleanable.dirty.ratio": "0.01", "max.compaction.lag.ms": "1000"})])
    finally:
        admin.close()
    keys = [[b"a%d" % j for j in range(10)]] * 2 + [[b"b%d-%d" % (i, j) for j in range(10)] for i in range(4)]
    sent = [_batch(f"c{i}", 10, 6000, k) for i, k in enumerate(keys)]
    with Negotiated(b.bootstrap) as c:
        for batch in sent:
            assert c.produce(topic, 0, batch).error_code == 0
        deadline = time.monotonic() + 60
        while int(managed_ledger(b, topic, 0).properties.get("kop.compactedOffset") or -1) < 59:
            assert time.monotonic() < deadline, "the cleaner did not compact the topic"
            time.sleep(0.2)
        before = zc.sent()
        got = _split(_fetch(c, topic, {0: (0, 1 << 24)}, 1 << 24)[0].records)
        assert len(got) == 5
        for i, g in enumerate(got):
            _same_batch(sent[i + 1], g, 10 * (i + 1))
        assert zc.sent() - before > 4 * len(sent[1])


def _ledger_files(broker: KopBroker, topic: str) -> list[Path]:
    """The files of partition 0's sealed ledgers, oldest first, as its managed ledger lists them. (The tests took
    the lowest-numbered ledger file made after the topic was created. In a CI run that file read as fewer than 4
    entries, an IndexError, while the topic's two ledgers, 100 and 101, held 4 each: ids 0 to 99 are the
    internal topics' ledgers, which the broker may still be opening, or the topic's first ledger was made with
    the topic and the file taken was the second one, being sealed.)"""
    view = managed_ledger(broker, topic, 0)
    return [broker.data_dir / "ledgers" / f"{lv.ledger_id}.log" for lv in view.ledgers if lv.entries]


def test_a_truncated_ledger_file_answers_a_storage_error(zc: Zc) -> None:
    b = zc.broker
    topic = "zc-truncated"
    create_topic(b.bootstrap, topic, 1)
    with Negotiated(b.bootstrap) as c:
        for i in range(10):
            assert c.produce(topic, 0, _batch(f"t{i}", 10, 4000)).error_code == 0
        first = _ledger_files(b, topic)[0]
        assert first.with_suffix(".idx").exists()  # sealed: 4 entries, offsets 0..39
        with Negotiated(b.bootstrap) as warm:  # the ledger's file is open in the broker
            assert _fetch(warm, topic, {0: (0, 1 << 24)}, 1 << 24)[0].error_code == 0
        os.truncate(first, first.stat().st_size // 2)
        p = _fetch(c, topic, {0: (0, 1 << 24)}, 1 << 24)[0]
        assert p.error_code == KAFKA_STORAGE_ERROR and _split(p.records) == []
        # The later ledgers are intact and still served from their files.
        p = _fetch(c, topic, {0: (40, 1 << 24)}, 1 << 24)[0]
        assert p.error_code == 0 and len(_split(p.records)) == 6


@pytest.fixture(scope="module")
def verified(tmp_path_factory: pytest.TempPathFactory) -> Iterator[KopBroker]:
    """A broker with the default localStoreVerifyChecksums=true, ledgers of 4 entries."""
    broker = KopBroker(tmp_path_factory.mktemp("zero-copy-verified") / "broker", {
        "localStoreFsyncPolicy": "none", "managedLedgerMaxEntriesPerLedger": 4,
        "managedLedgerMinLedgerRolloverTimeMinutes": 0, "messagingProtocols": "kafka",
    })
    broker.start()
    yield broker
    broker.stop()
    assert "Traceback" not in broker.log_path.read_text(errors="replace")


def test_checked_entries_go_from_the_files_and_a_flipped_byte_is_refused(verified: KopBroker) -> None:
    """The default configuration: batches come back as produced, sent from the ledger files after the store
    checked each entry's CRC. A byte flipped, under the running broker, in the body of a stored batch (the part
    sendfile would send) answers KAFKA_STORAGE_ERROR for that batch; the batches before it are served in the
    answer that meets it, the ones after it from their own offset."""
    b = verified
    topic = "zc-verified"
    create_topic(b.bootstrap, topic, 1)
    with Negotiated(b.bootstrap) as c:
        sent = [_batch(f"v{i}", 10, 5000) for i in range(8)]  # ~40 KB: zero copy from 32 KiB
        for batch in sent:
            assert c.produce(topic, 0, batch).error_code == 0
        before = Scrape(b.admin_url).total(SENT)
        got = _split(_fetch(c, topic, {0: (0, 1 << 24)}, 1 << 24)[0].records)
        assert len(got) == 8
        for i, g in enumerate(got):
            _same_batch(sent[i], g, 10 * i)
        assert Scrape(b.admin_url).total(SENT) - before > 7 * len(sent[0])

        first = _ledger_files(b, topic)[0]
        chk = check_ledger_file(str(first))  # sealed: 4 entries, offsets 0..39
        middle = (chk.starts[2] + chk.starts[3]) // 2  # entry 2 (offsets 20..29), past its 512-byte head
        with open(first, "r+b") as f:
            f.seek(middle)
            byte = f.read(1)
            f.seek(middle)
            f.write(bytes([byte[0] ^ 0x10]))
        p = _fetch(c, topic, {0: (0, 1 << 24)}, 1 << 24)[0]
        assert p.error_code == 0 and [len(x) for x in _split(p.records)] == [len(sent[0]), len(sent[1])]
        p = _fetch(c, topic, {0: (20, 1 << 24)}, 1 << 24)[0]
        assert p.error_code == KAFKA_STORAGE_ERROR and _split(p.records) == []
        p = _fetch(c, topic, {0: (30, 1 << 24)}, 1 << 24)[0]
        got = _split(p.records)
        assert p.error_code == 0 and len(got) == 5
        _same_batch(sent[3], got[0], 30)
