"""The partition side of transactions against a real broker, with hand-written requests (our codec,
tests/support/txn_wire.py): transactional Produce, WriteTxnMarkers commit/abort, Fetch and ListOffsets
with READ_COMMITTED vs READ_UNCOMMITTED, real consumers (kafka-python, confluent-kafka) reading the
raw-written transactions, restart recovery, and bad input."""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import pytest

from kop.protocol.records import build_batch
from tests.support.broker import KopBroker
from tests.support.txn_wire import RawClient, batches_of, txn_batch

NONE, INVALID_RECORD, INVALID_PRODUCER_EPOCH, INVALID_TXN_STATE = 0, 87, 47, 48
TRANSACTIONAL_ID_AUTHORIZATION_FAILED, UNKNOWN_TOPIC_OR_PARTITION = 53, 3
LATEST = -1


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[KopBroker]:
    b = KopBroker(tmp_path_factory.mktemp("kop-txn-partition"), {
        "defaultNumPartitions": "1",
        "transactionPartitionVerificationEnable": "false",  # raw transactions no coordinator knows of
    }).start()
    yield b
    b.stop()


@pytest.fixture
def raw(broker: KopBroker) -> Iterator[RawClient]:
    c = RawClient(broker.bootstrap)
    yield c
    c.close()


def new_topic(raw: RawClient) -> str:
    name = f"txn-{uuid.uuid4().hex[:8]}"
    r = raw.produce(name, 0, build_batch([(b"k", b"plain-0")]))  # auto-created with one partition
    assert r.error_code == NONE and r.base_offset == 0
    return name


def write_scenario(raw: RawClient, topic: str) -> dict[str, int]:
    """offset 0 plain-0 | 1-2 committed (A) | 3-4 aborted (B) | 5 plain-1 | 6 COMMIT A | 7 ABORT B |
    8 open (C)."""
    a, ea = raw.init_producer_id()
    b, eb = raw.init_producer_id()
    c, ec = raw.init_producer_id()
    assert raw.produce(topic, 0, txn_batch(a, ea, 0, [b"committed-1", b"committed-2"]), "tx-a").base_offset == 1
    assert raw.produce(topic, 0, txn_batch(b, eb, 0, [b"aborted-1", b"aborted-2"]), "tx-b").base_offset == 3
    assert raw.produce(topic, 0, build_batch([(b"k", b"plain-1")])).base_offset == 5
    # before any marker: read_committed stops at the first open transaction
    part = raw.fetch(topic, 0, 0, committed=True)
    assert (part.high_watermark, part.last_stable_offset) == (6, 1)
    assert [v for _, _, vs in batches_of(part.records) for v in vs] == [b"plain-0"]
    assert raw.list_offset(topic, 0, LATEST, committed=True).offset == 1
    assert raw.list_offset(topic, 0, LATEST, committed=False).offset == 6
    assert raw.marker(topic, [0], a, ea, commit=True) == [NONE]
    assert raw.marker(topic, [0], b, eb, commit=False) == [NONE]
    assert raw.produce(topic, 0, txn_batch(c, ec, 0, [b"open-1"]), "tx-c").base_offset == 8
    return {"a": a, "b": b, "c": c, "ec": ec}


def test_fetch_read_committed_vs_read_uncommitted(raw: RawClient) -> None:
    topic = new_topic(raw)
    ids = write_scenario(raw, topic)
    ru = raw.fetch(topic, 0, 0, committed=False)
    assert (ru.high_watermark, ru.last_stable_offset) == (9, 8)
    assert ru.aborted_transactions is None
    got = batches_of(ru.records)
    assert [off for off, _, _ in got] == [0, 1, 3, 5, 6, 7, 8]  # markers are returned, each took an offset
    assert [h.is_control for _, h, _ in got] == [False, False, False, False, True, True, False]
    assert [h.producer_id for _, h, _ in got][4:6] == [ids["a"], ids["b"]]

    rc = raw.fetch(topic, 0, 0, committed=True)
    assert (rc.high_watermark, rc.last_stable_offset) == (9, 8)
    assert [off for off, _, _ in batches_of(rc.records)] == [0, 1, 3, 5, 6, 7]  # stops at the LSO
    assert [(t.producer_id, t.first_offset) for t in rc.aborted_transactions] == [(ids["b"], 3)]
    # a fetch starting after the aborted transaction does not carry it; one inside it does
    assert raw.fetch(topic, 0, 8, committed=True).aborted_transactions == []
    assert [t.first_offset for t in raw.fetch(topic, 0, 4, committed=True).aborted_transactions] == [3]
    assert raw.list_offset(topic, 0, LATEST, committed=True).offset == 8
    assert raw.list_offset(topic, 0, LATEST, committed=False).offset == 9


def test_real_consumers_skip_aborted_records(raw: RawClient, broker: KopBroker) -> None:
    """kafka-python and confluent-kafka filter with the aborted transactions and markers we return."""
    topic = new_topic(raw)
    ids = write_scenario(raw, topic)
    assert raw.marker(topic, [0], ids["c"], ids["ec"], commit=False) == [NONE]  # C aborted too: LSO = HW
    committed = [b"plain-0", b"committed-1", b"committed-2", b"plain-1"]
    everything = [b"plain-0", b"committed-1", b"committed-2", b"aborted-1", b"aborted-2", b"plain-1", b"open-1"]

    from kafka import KafkaConsumer, TopicPartition

    for level, want in (("read_committed", committed), ("read_uncommitted", everything)):
        consumer = KafkaConsumer(bootstrap_servers=broker.bootstrap, isolation_level=level,
                                 auto_offset_reset="earliest", enable_auto_commit=False, group_id=None)
        try:
            consumer.assign([TopicPartition(topic, 0)])
            got: list[bytes] = []
            for _ in range(50):
                for recs in consumer.poll(timeout_ms=500).values():
                    got += [r.value for r in recs]
                if consumer.position(TopicPartition(topic, 0)) >= 10:  # past the last marker
                    break
            assert got == want, level
        finally:
            consumer.close()

    from confluent_kafka import Consumer
    from confluent_kafka import TopicPartition as CTP

    for level, want in (("read_committed", committed), ("read_uncommitted", everything)):
        c = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": f"g-{uuid.uuid4().hex[:6]}",
                      "isolation.level": level, "auto.offset.reset": "earliest", "enable.auto.commit": False})
        try:
            c.assign([CTP(topic, 0, 0)])
            got = []
            for _ in range(60):
                m = c.poll(0.5)
                if m is not None and m.error() is None:
                    got.append(m.value())
                if len(got) >= len(want) and c.position([CTP(topic, 0)])[0].offset >= 10:
                    break
            assert got == want, level
        finally:
            c.close()


@pytest.mark.parametrize("how", ["restart", "kill -9"])
def test_restart_recovers_open_transactions_and_the_aborted_index(raw: RawClient, broker: KopBroker,
                                                                  how: str) -> None:
    """A clean restart (snapshot at close) and a kill -9 (the snapshot taken before the partition's first
    transaction, then replay) both bring back the open transaction and the aborted index."""
    topic = new_topic(raw)
    ids = write_scenario(raw, topic)
    raw.close()
    if how == "restart":
        broker.restart()
    else:
        broker.kill()
        broker.start()
    raw2 = RawClient(broker.bootstrap)
    try:
        rc = raw2.fetch(topic, 0, 0, committed=True)
        assert (rc.high_watermark, rc.last_stable_offset) == (9, 8)  # C is still open after the restart
        assert [(t.producer_id, t.first_offset) for t in rc.aborted_transactions] == [(ids["b"], 3)]
        assert raw2.list_offset(topic, 0, LATEST, committed=True).offset == 8
        assert raw2.marker(topic, [0], ids["c"], ids["ec"], commit=True) == [NONE]
        rc = raw2.fetch(topic, 0, 0, committed=True)
        assert rc.last_stable_offset == rc.high_watermark == 10
        assert [v for _, h, vs in batches_of(rc.records) if not h.is_control for v in vs][-1] == b"open-1"
    finally:
        raw2.close()


def test_bad_input(raw: RawClient) -> None:
    topic = new_topic(raw)
    pid, epoch = raw.init_producer_id()
    # a transactional batch needs the request's transactional id
    r = raw.produce(topic, 0, txn_batch(pid, epoch, 0, [b"x"]), transactional_id=None)
    assert r.error_code == TRANSACTIONAL_ID_AUTHORIZATION_FAILED
    assert raw.produce(topic, 0, txn_batch(pid, epoch, 0, [b"x"]), "tx").error_code == NONE
    # a non-transactional batch of a producer inside its transaction
    r = raw.produce(topic, 0, txn_batch(pid, epoch, 1, [b"y"], transactional=False), "tx")
    assert r.error_code == INVALID_TXN_STATE
    # clients may not write control batches, well-formed or not
    for key in (b"\x00\x00\x00\x00", b"\x01"):
        bad = build_batch([(key, b"\x00\x00\x00\x00\x00\x00")], producer_id=pid, producer_epoch=epoch,
                          is_transactional=True, is_control=True)
        assert raw.produce(topic, 0, bad, "tx").error_code == INVALID_RECORD
    # the coordinator fenced the producer (epoch + 1): a marker with the old epoch is refused, then the
    # zombie's writes are too
    assert raw.marker(topic, [0], pid, epoch + 1, commit=False) == [NONE]
    assert raw.marker(topic, [0], pid, epoch, commit=False) == [INVALID_PRODUCER_EPOCH]
    r = raw.produce(topic, 0, txn_batch(pid, epoch, 1, [b"zombie"]), "tx")
    assert r.error_code == INVALID_PRODUCER_EPOCH
    # a marker for a producer this partition never saw is written and takes an offset
    hw = raw.fetch(topic, 0, 0, committed=False).high_watermark
    assert raw.marker(topic, [0], 987654, 0, commit=True) == [NONE]
    assert raw.fetch(topic, 0, 0, committed=False).high_watermark == hw + 1
    assert raw.marker("no-such-topic-xyz", [0], pid, epoch, commit=True) == [UNKNOWN_TOPIC_OR_PARTITION]
    assert raw.marker(topic, [5], pid, epoch, commit=True) == [UNKNOWN_TOPIC_OR_PARTITION]
    rc = raw.fetch(topic, 0, 0, committed=True)
    assert [(t.producer_id, t.first_offset) for t in rc.aborted_transactions] == [(pid, 1)]


def test_a_read_committed_long_poll_wakes_when_the_marker_lands(raw: RawClient, broker: KopBroker) -> None:
    """A fetch waiting at the last stable offset is answered by the marker's append (the LSO moved), not
    by its max wait."""
    import concurrent.futures

    topic = new_topic(raw)
    pid, epoch = raw.init_producer_id()
    assert raw.produce(topic, 0, txn_batch(pid, epoch, 0, [b"late"]), "tx-poll").base_offset == 1
    waiter = RawClient(broker.bootstrap, timeout=120)
    try:
        with concurrent.futures.ThreadPoolExecutor(1) as pool:
            pending = pool.submit(waiter.fetch, topic, 0, 1, True, 12, 60_000, 1)
            assert raw.fetch(topic, 0, 1, committed=True).records in (b"", None)  # nothing stable yet
            assert not pending.done()
            assert raw.marker(topic, [0], pid, epoch, commit=True) == [NONE]
            got = pending.result(timeout=60)
        assert [vs for _, h, vs in batches_of(got.records) if not h.is_control] == [[b"late"]]
        assert got.last_stable_offset == got.high_watermark == 3
    finally:
        waiter.close()


def test_java_consumer_read_committed(raw: RawClient, broker: KopBroker, java_tools) -> None:
    """Kafka's own consumer (its CompletedFetch filter is the reference) on the raw-written transactions:
    read_committed gets the committed records only, read_uncommitted everything. (The aborted records lie
    before plain-1: had any leaked, they would be among the first four.)"""
    topic = new_topic(raw)
    ids = write_scenario(raw, topic)
    assert raw.marker(topic, [0], ids["c"], ids["ec"], commit=False) == [NONE]
    for level, want in (("read_committed", [b"plain-0", b"committed-1", b"committed-2", b"plain-1"]),
                        ("read_uncommitted", [b"plain-0", b"committed-1", b"committed-2", b"aborted-1",
                                              b"aborted-2", b"plain-1", b"open-1"])):
        out = java_tools.run("kafka-console-consumer", "--bootstrap-server", broker.bootstrap, "--topic", topic,
                             "--from-beginning", "--isolation-level", level, "--max-messages", len(want),
                             "--timeout-ms", 60000, "--property", "print.offset=true")
        values = [line.split("\t")[-1].encode() for line in out.stdout.splitlines() if line.startswith("Offset:")]
        assert values == want, (level, out.stdout, out.stderr[-2000:])


def test_list_offsets_by_timestamp_read_committed(raw: RawClient) -> None:
    """Timestamp and max-timestamp lookups of a read_committed client find only records below the LSO."""
    from kop.protocol.records import NewRecord

    topic = f"txn-ts-{uuid.uuid4().hex[:8]}"
    assert raw.produce(topic, 0, build_batch([NewRecord(b"k", b"old", (), 1_000)])).base_offset == 0
    pid, epoch = raw.init_producer_id()
    batch = build_batch([NewRecord(b"k", b"new", (), 5_000)], producer_id=pid, producer_epoch=epoch,
                        base_sequence=0, is_transactional=True)
    assert raw.produce(topic, 0, batch, "tx-ts").base_offset == 1
    for ts, committed, want in ((2_000, False, 1), (2_000, True, -1), (-3, False, 1), (-3, True, -1),
                                (500, True, 0)):
        assert raw.list_offset(topic, 0, ts, committed).offset == want, (ts, committed)
    assert raw.marker(topic, [0], pid, epoch, commit=True) == [NONE]
    assert raw.list_offset(topic, 0, 2_000, True).offset == 1
    # the marker, stamped when written (as Kafka's), is now the newest "record", as in Kafka's segments
    assert raw.list_offset(topic, 0, -3, True).offset == 2
