"""SUBSCRIBE/FLOW/MESSAGE/ACK/REDELIVER/SEEK/GET_LAST_MESSAGE_ID/UNSUBSCRIBE (kop/pulsar/consume.py,
subscription.py) with the real `pulsar-client` against `kop standalone`: Kafka-produced records read by Pulsar
consumers with every mapped field and PIP-415's message ids; Exclusive, Shared and Failover; individual,
cumulative and negative acks; seek by id and by time; readers; regex subscriptions; and a durable subscription
that survives `kill -9` of the broker."""

from __future__ import annotations

import re
import time
import uuid

import pulsar
import pytest

from kop.pulsar.convert import ORDERING_KEY_HEADER
from tests.support.admin import ok, topic_url
from tests.support.broker import KopBroker
from tests.support.clients import Rec, create_topic, produce_confluent, produce_kafka_python

RECEIVE_MS = 30000  # a guard against hangs, not a timing assertion


def name() -> str:
    return f"c-{uuid.uuid4().hex[:10]}"


def produce(client: pulsar.Client, topic: str, n: int, **kw: object) -> list[pulsar.MessageId]:
    producer = client.create_producer(topic, **kw)
    ids = [producer.send(f"m{i}".encode()) for i in range(n)]
    producer.close()
    return ids


def receive_all(consumer: pulsar.Consumer, n: int, ack: bool = True) -> list[pulsar.Message]:
    out = []
    for _ in range(n):
        m = consumer.receive(RECEIVE_MS)
        out.append(m)
        if ack:
            consumer.acknowledge(m)
    return out


def nothing_more(consumer: pulsar.Consumer, wait_ms: int = 1500) -> bool:
    try:
        m = consumer.receive(wait_ms)
    except pulsar.Timeout:
        return True
    raise AssertionError(f"unexpected message {m.data()!r} {m.message_id()}")


# ---------------------------------------------------------------------------------------------- interop
# kafka-python with every codec; confluent-kafka (librdkafka) where its compressed bytes differ from the Python
# clients' (raw snappy, not the xerial framing; streaming zstd frames): its gzip and lz4 are the same formats
# (tests/e2e/test_clients_roundtrip.py says more).
INTEROP_CASES = [*((produce_kafka_python, codec) for codec in ("none", "gzip", "snappy", "lz4", "zstd")),
                 (produce_confluent, "snappy"), (produce_confluent, "zstd")]


@pytest.mark.parametrize(("producer_fn", "codec"), INTEROP_CASES,
                         ids=[f"{'confluent' if fn is produce_confluent else 'kafka-python'}-{codec}"
                              for fn, codec in INTEROP_CASES])
def test_kafka_records_read_by_a_pulsar_consumer(broker: KopBroker, client: pulsar.Client, producer_fn, codec: str) -> None:
    topic = name()
    create_topic(broker.bootstrap, topic, partitions=1)
    base = 1_700_000_000_000
    recs = [Rec(0, None if i % 4 == 0 else f"key-{i}".encode(), None if i % 5 == 3 and i % 4 else f"v{i}".encode(),
                (("h", f"x{i}".encode()), ("idx", str(i).encode())), base + i) for i in range(40)]
    producer_fn(broker.bootstrap, topic, recs, codec)
    consumer = client.subscribe(topic, "s", initial_position=pulsar.InitialPosition.Earliest)
    got = receive_all(consumer, 40)
    for offset, (m, r) in enumerate(zip(got, recs, strict=True)):
        if r.key is None:
            assert m.partition_key() == ""
        else:
            assert m.partition_key() == r.key.decode() and m.ordering_key() == r.key.decode()
        assert m.event_timestamp() == r.timestamp
        assert m.properties() == {k: v.decode() for k, v in r.headers}
        assert m.has_null_value() == (r.value is None)
        assert m.data() == (r.value or b"")
        mid = m.message_id()
        admin = ok(topic_url(broker.admin_url, f"{topic}-partition-0") + f"/getMessageIdByIndex?index={offset}")
        assert (mid.ledger_id(), mid.entry_id(), mid.partition()) == (admin["ledgerId"], admin["entryId"], 0)
        index = ok(topic_url(broker.admin_url, f"{topic}-partition-0")
                   + f"/getIndexByMessageId?ledgerId={mid.ledger_id()}&entryId={mid.entry_id()}")
        assert index["firstIndex"] + max(mid.batch_index(), 0) == offset  # -1: a one-record entry
    assert nothing_more(consumer)


def test_mixed_producers_share_one_offset_sequence(broker: KopBroker, client: pulsar.Client) -> None:
    """kafka-python, pulsar-client (batched, with ordering and partition keys, event times, properties) and
    confluent-kafka write one partition in turn: Kafka consumers see offsets 0..N-1 with the right key,
    timestamp and headers, and a Pulsar consumer reads the same N messages in the same order."""
    from tests.support.clients import consume_kafka_python

    topic = name()
    create_topic(broker.bootstrap, topic, partitions=1)
    base = 1_700_000_000_000
    produce_kafka_python(broker.bootstrap, topic, [Rec(0, b"k0", b"kafka0", (("h", b"1"),), base)], "none")
    producer = client.create_producer(topic, batching_enabled=True, batching_max_messages=10,
                                      batching_max_publish_delay_ms=1000)
    for i in range(10):
        kw: dict = {"properties": {"i": str(i)}, "event_timestamp": base + 100 + i}
        if i % 2:
            kw["ordering_key"] = f"ok{i}"
        if i % 3:
            kw["partition_key"] = f"pk{i}"
        producer.send_async(f"pulsar{i}".encode(), None, **kw)
    producer.flush()
    produce_confluent(broker.bootstrap, topic, [Rec(0, None, b"kafka1", (), base + 200)], "none")
    got = consume_kafka_python(broker.bootstrap, topic, {0: 12})
    assert [g.offset for g in got] == list(range(12))
    assert [g.value for g in got] == [b"kafka0"] + [f"pulsar{i}".encode() for i in range(10)] + [b"kafka1"]
    for i, g in enumerate(got[1:11]):
        # the partition key, else the ordering key; an ordering key that is not the key rides in a header (#22)
        want = f"pk{i}" if i % 3 else (f"ok{i}" if i % 2 else None)
        assert g.key == (want.encode() if want else None)
        apart = ((ORDERING_KEY_HEADER, f"ok{i}".encode()),) if i % 2 and i % 3 else ()
        assert g.timestamp == base + 100 + i and g.headers == (("i", str(i).encode()), *apart)
    consumer = client.subscribe(topic, "mixed", initial_position=pulsar.InitialPosition.Earliest)
    assert [m.data() for m in receive_all(consumer, 12)] == [g.value or b"" for g in got]


def test_a_kafka_created_partitioned_topic_consumed_by_pulsar(broker: KopBroker, client: pulsar.Client) -> None:
    topic = name()
    create_topic(broker.bootstrap, topic, partitions=4)
    recs = [Rec(i % 4, f"k{i}".encode(), f"v{i}".encode(), (), 1_700_000_000_000 + i) for i in range(40)]
    produce_kafka_python(broker.bootstrap, topic, recs, "none")
    consumer = client.subscribe(f"persistent://public/default/{topic}", "all",
                                initial_position=pulsar.InitialPosition.Earliest)
    got = receive_all(consumer, 40)
    assert sorted(m.data() for m in got) == sorted(r.value for r in recs)
    for m in got:
        i = int(m.data()[1:])
        assert m.message_id().partition() == i % 4
        assert m.topic_name() == f"persistent://public/default/{topic}-partition-{i % 4}"
    assert nothing_more(consumer)


# ---------------------------------------------------------------------------------------------- types
def test_exclusive_admits_one_consumer(client: pulsar.Client) -> None:
    topic = name()
    first = client.subscribe(topic, "ex")
    with pytest.raises(pulsar.ConsumerBusy):
        client.subscribe(topic, "ex")
    with pytest.raises(pulsar.ConsumerBusy):  # a different type while the exclusive one is connected
        client.subscribe(topic, "ex", consumer_type=pulsar.ConsumerType.Shared)
    first.close()
    client.subscribe(topic, "ex").close()


def test_shared_spreads_messages_and_failover_moves_unacked_to_the_next(client: pulsar.Client) -> None:
    topic = name()
    a = client.subscribe(topic, "sh", consumer_type=pulsar.ConsumerType.Shared, receiver_queue_size=5)
    b = client.subscribe(topic, "sh", consumer_type=pulsar.ConsumerType.Shared, receiver_queue_size=5)
    produce(client, topic, 40)
    seen: dict[bytes, str] = {}
    while len(seen) < 40:
        for who, cons in (("a", a), ("b", b)):
            try:
                m = cons.receive(200)
            except pulsar.Timeout:
                continue
            assert m.data() not in seen
            seen[m.data()] = who
            cons.acknowledge(m)
    assert set(seen.values()) == {"a", "b"}  # both got some
    a.close()
    b.close()

    topic = name()
    f1 = client.subscribe(topic, "fo", consumer_type=pulsar.ConsumerType.Failover, consumer_name="c1")
    f2 = client.subscribe(topic, "fo", consumer_type=pulsar.ConsumerType.Failover, consumer_name="c2")
    produce(client, topic, 10)
    got = receive_all(f1, 10, ack=False)  # c1 sorts first: it is the active consumer
    assert [m.data() for m in got] == [f"m{i}".encode() for i in range(10)]
    for m in got[:4]:
        f1.acknowledge(m)
    assert nothing_more(f2, 1000)
    f1.close()  # the unacknowledged m4..m9 go to c2
    assert [m.data() for m in receive_all(f2, 6)] == [f"m{i}".encode() for i in range(4, 10)]
    assert nothing_more(f2)


# ---------------------------------------------------------------------------------------------- acks
def test_acks_individual_and_cumulative_survive_a_resubscribe(client: pulsar.Client) -> None:
    topic = name()
    consumer = client.subscribe(topic, "acks", initial_position=pulsar.InitialPosition.Earliest)
    produce(client, topic, 10)
    got = receive_all(consumer, 10, ack=False)
    for i in (0, 1, 3, 6):
        consumer.acknowledge(got[i])
    consumer.close()
    consumer = client.subscribe(topic, "acks")
    again = receive_all(consumer, 6, ack=False)
    assert [m.data() for m in again] == [f"m{i}".encode() for i in (2, 4, 5, 7, 8, 9)]
    consumer.acknowledge_cumulative(again[3])  # up to m7
    consumer.close()
    consumer = client.subscribe(topic, "acks")
    assert [m.data() for m in receive_all(consumer, 2)] == [b"m8", b"m9"]
    assert nothing_more(consumer)


def test_negative_acks_are_redelivered_with_a_count(client: pulsar.Client) -> None:
    topic = name()
    consumer = client.subscribe(topic, "nack", consumer_type=pulsar.ConsumerType.Shared,
                                negative_ack_redelivery_delay_ms=100,
                                initial_position=pulsar.InitialPosition.Earliest)
    produce(client, topic, 3)
    first = receive_all(consumer, 3, ack=False)
    consumer.acknowledge(first[0])
    consumer.acknowledge(first[2])
    consumer.negative_acknowledge(first[1])
    m = consumer.receive(RECEIVE_MS)
    assert m.data() == b"m1" and m.redelivery_count() == 1
    consumer.negative_acknowledge(m)
    m = consumer.receive(RECEIVE_MS)
    assert m.data() == b"m1" and m.redelivery_count() == 2
    consumer.acknowledge(m)
    assert nothing_more(consumer)


@pytest.mark.parametrize("explicit", [True, False], ids=["named-dlq", "default-dlq"])
def test_dead_letter_topics_as_the_client_implements_them(client: pulsar.Client, explicit: bool) -> None:
    """The client moves a message to its dead-letter topic after max_redeliver_count redeliveries (it counts on
    the broker's redelivery_count); the default name is `<topic>-<subscription>-DLQ` (the producer auto-created
    a non-partitioned topic, Pulsar's default kind; a partitioned topic's is its partition's name)."""
    topic = name()
    dlq = f"persistent://public/default/{topic}-dead" if explicit else \
        f"persistent://public/default/{topic}-s-DLQ"
    policy = pulsar.ConsumerDeadLetterPolicy(max_redeliver_count=2, dead_letter_topic=dlq if explicit else None)
    consumer = client.subscribe(topic, "s", consumer_type=pulsar.ConsumerType.Shared, dead_letter_policy=policy,
                                negative_ack_redelivery_delay_ms=100, initial_position=pulsar.InitialPosition.Earliest)
    dead = client.subscribe(dlq, "d", initial_position=pulsar.InitialPosition.Earliest)
    ids = produce(client, topic, 1)
    for count in range(3):
        m = consumer.receive(RECEIVE_MS)
        assert m.redelivery_count() == count
        consumer.negative_acknowledge(m)
    m = dead.receive(RECEIVE_MS)
    assert m.data() == b"m0"
    assert m.properties()["ORIGIN_MESSAGE_ID"] == str(ids[0])
    assert nothing_more(consumer)


def test_exclusive_redelivery_rewinds(client: pulsar.Client) -> None:
    topic = name()
    consumer = client.subscribe(topic, "rw", initial_position=pulsar.InitialPosition.Earliest)
    produce(client, topic, 5)
    got = receive_all(consumer, 5, ack=False)
    consumer.acknowledge(got[0])
    consumer.redeliver_unacknowledged_messages()
    assert [m.data() for m in receive_all(consumer, 4)] == [b"m1", b"m2", b"m3", b"m4"]


# ---------------------------------------------------------------------------------------------- seek
def test_seek_by_message_id_and_by_time(client: pulsar.Client) -> None:
    topic = name()
    # A non-partitioned topic (the consumer auto-creates Pulsar's default kind): the C++ client seeks it by id
    # (its multi-topic consumer of a partitioned one refuses), and by time.
    part = f"persistent://public/default/{topic}"
    consumer = client.subscribe(part, "seek", initial_position=pulsar.InitialPosition.Earliest)
    whole = client.subscribe(topic, "seek-whole", initial_position=pulsar.InitialPosition.Earliest)
    producer = client.create_producer(topic)
    ids = [producer.send(f"m{i}".encode()) for i in range(3)]
    time.sleep(0.05)  # publish times are milliseconds: keep the second group strictly later
    middle = int(time.time() * 1000)
    time.sleep(0.05)
    ids += [producer.send(f"m{i}".encode()) for i in range(3, 6)]
    receive_all(consumer, 6)
    consumer.seek(ids[1])  # the client then skips m1 itself: the next is m2, as on Pulsar
    assert [m.data() for m in receive_all(consumer, 4)] == [b"m2", b"m3", b"m4", b"m5"]
    consumer.seek(middle)
    assert [m.data() for m in receive_all(consumer, 3)] == [b"m3", b"m4", b"m5"]
    consumer.seek(pulsar.MessageId.earliest)
    assert receive_all(consumer, 1)[0].data() == b"m0"
    receive_all(whole, 6)
    whole.seek(middle)
    assert [m.data() for m in receive_all(whole, 3)] == [b"m3", b"m4", b"m5"]
    assert nothing_more(whole)


def test_get_last_message_id(client: pulsar.Client) -> None:
    topic = name()
    part = f"persistent://public/default/{topic}"  # non-partitioned (a multi-topic consumer would not ask)
    consumer = client.subscribe(part, "last")
    empty = consumer.get_last_message_id()
    assert (empty.ledger_id(), empty.entry_id()) == (-1, -1)
    producer = client.create_producer(topic, batching_enabled=True, batching_max_messages=4,
                                      batching_max_publish_delay_ms=1000)
    ids: list[pulsar.MessageId] = []
    for i in range(4):
        producer.send_async(f"b{i}".encode(), lambda res, mid: ids.append(mid))
    producer.flush()
    last = consumer.get_last_message_id()
    newest = max(ids, key=lambda m: (m.ledger_id(), m.entry_id(), m.batch_index()))
    assert (last.ledger_id(), last.entry_id(), last.batch_index(), last.partition()) == (
        newest.ledger_id(), newest.entry_id(), 3, -1)
    single = client.create_producer(topic).send(b"alone")
    last = consumer.get_last_message_id()
    assert (last.ledger_id(), last.entry_id(), last.batch_index()) == (single.ledger_id(), single.entry_id(), -1)


# ---------------------------------------------------------------------------------------------- readers, regex
def test_readers_from_earliest_and_from_an_id(client: pulsar.Client) -> None:
    topic = name()
    ids = produce(client, topic, 5)
    part = f"persistent://public/default/{topic}"  # non-partitioned: the C++ client's reader takes it whole
    reader = client.create_reader(part, pulsar.MessageId.earliest)
    assert [reader.read_next(RECEIVE_MS).data() for _ in range(5)] == [f"m{i}".encode() for i in range(5)]
    assert not reader.has_message_available()
    reader.close()
    reader = client.create_reader(part, ids[2])
    assert reader.read_next(RECEIVE_MS).data() == b"m3"
    reader.close()
    reader = client.create_reader(part, ids[2], start_message_id_inclusive=True)
    assert reader.read_next(RECEIVE_MS).data() == b"m2"
    assert reader.has_message_available()
    reader.close()
    latest = client.create_reader(part, pulsar.MessageId.latest)
    produce(client, topic, 1)
    assert latest.read_next(RECEIVE_MS).data() == b"m0"
    latest.close()


def test_regex_subscription(broker: KopBroker, client: pulsar.Client) -> None:
    stem = f"rx{uuid.uuid4().hex[:6]}"
    for t in ("a", "b"):
        create_topic(broker.bootstrap, f"{stem}-{t}", partitions=2)
    create_topic(broker.bootstrap, f"other-{stem}", partitions=1)
    consumer = client.subscribe(re.compile(f"persistent://public/default/{stem}-.*"), "rx",
                                initial_position=pulsar.InitialPosition.Earliest)
    for t in ("a", "b", "other"):
        producer = client.create_producer(f"{stem}-{t}" if t != "other" else f"other-{stem}")
        for i in range(3):
            producer.send(f"{t}{i}".encode())
    got = sorted(m.data() for m in receive_all(consumer, 6))
    assert got == sorted(f"{t}{i}".encode() for t in ("a", "b") for i in range(3))
    assert nothing_more(consumer)


def test_unsubscribe_forgets_the_cursor(client: pulsar.Client) -> None:
    topic = name()
    consumer = client.subscribe(topic, "gone", initial_position=pulsar.InitialPosition.Earliest)
    produce(client, topic, 3)
    receive_all(consumer, 3)
    consumer.unsubscribe()
    consumer = client.subscribe(topic, "gone", initial_position=pulsar.InitialPosition.Earliest)
    assert [m.data() for m in receive_all(consumer, 3)] == [b"m0", b"m1", b"m2"]  # a new subscription


# ---------------------------------------------------------------------------------------------- durability
def test_a_durable_subscription_survives_kill_9(tmp_path) -> None:
    broker = KopBroker(tmp_path / "kop")
    broker.start()
    try:
        topic = name()
        client = pulsar.Client(broker.pulsar_url, operation_timeout_seconds=30)
        consumer = client.subscribe(topic, "durable", consumer_type=pulsar.ConsumerType.Shared,
                                    initial_position=pulsar.InitialPosition.Earliest)
        producer = client.create_producer(topic, batching_enabled=True, batching_max_messages=5,
                                          batching_max_publish_delay_ms=1000)
        for i in range(20):
            producer.send_async(f"m{i}".encode(), None)
        producer.flush()
        got = receive_all(consumer, 20, ack=False)
        acked = {m.data() for i, m in enumerate(got) if i < 5 or i in (7, 11, 12, 13, 14, 19)}
        for m in got:
            if m.data() in acked:
                consumer.acknowledge(m)
        consumer.close()  # its acks are flushed and the cursor persisted before this returns
        client.close()
        broker.kill()
        broker.start()
        client = pulsar.Client(broker.pulsar_url, operation_timeout_seconds=30)
        consumer = client.subscribe(topic, "durable", consumer_type=pulsar.ConsumerType.Shared)
        # An entry (a batch) comes back whole while any of its messages is unacknowledged: without batch-index
        # acks the client acks an entry only when all its messages are; its acked messages are redelivered
        # (at-least-once), the unacknowledged ones are never lost, and fully acked entries stay acknowledged.
        entries: dict[tuple[int, int], set[bytes]] = {}
        for m in got:
            entries.setdefault((m.message_id().ledger_id(), m.message_id().entry_id()), set()).add(m.data())
        want = set().union(*(msgs for msgs in entries.values() if not msgs <= acked))
        assert len(entries) < 20 and want  # batches were formed, and some are not fully acknowledged
        again = {m.data() for m in receive_all(consumer, len(want))}
        assert again == want
        assert {f"m{i}".encode() for i in range(20)} - acked <= again  # nothing unacknowledged lost
        assert nothing_more(consumer)
        # Acked without a clean close, then kill -9: every unacknowledged message still comes back.
        produce(client, topic, 10)  # unbatched: one entry each
        more = receive_all(consumer, 10, ack=False)
        for m in more[:5]:
            consumer.acknowledge(m)
        time.sleep(0.5)
        broker.kill()
        client.close()
        broker.start()
        client = pulsar.Client(broker.pulsar_url, operation_timeout_seconds=30)
        consumer = client.subscribe(topic, "durable", consumer_type=pulsar.ConsumerType.Shared)
        unacked = {m.data() for m in more[5:]}
        back = set()
        while not unacked <= back:
            back.add(consumer.receive(RECEIVE_MS).data())
        client.close()
    finally:
        broker.stop()


# ---------------------------------------------------------------------------------------------- the cursor, raw
def test_mark_delete_moves_only_over_contiguous_acks(broker: KopBroker, client: pulsar.Client) -> None:
    """On the wire: individual acks leave holes, the mark-delete position (GET_LAST_MESSAGE_ID) moves only over
    contiguous acknowledged entries, a cumulative ack on a Shared subscription is ignored (as Pulsar does),
    ACK_RESPONSE answers acks that ask, and a new consumer gets exactly the unacknowledged entry."""
    from kop.pulsar.codec import commands as c
    from tests.support.pulsar_wire import WireClient

    topic = name()
    ids = produce(client, topic, 5)
    part = f"persistent://public/default/{topic}"  # non-partitioned, as the producer created it

    def subscribe(w: WireClient) -> list:
        w.send(c.command(c.SUBSCRIBE, topic=part, subscription="raw", subType=1, consumer_id=1, request_id=1,
                         initialPosition=1))
        w.expect(c.SUCCESS)
        w.send(c.command(c.FLOW, consumer_id=1, messagePermits=100))
        return []

    def mark_delete(w: WireClient) -> tuple[int, int]:
        w.send(c.command(c.GET_LAST_MESSAGE_ID, consumer_id=1, request_id=9))
        got = w.expect(c.GET_LAST_MESSAGE_ID_RESPONSE)
        assert (got.last_message_id.ledgerId, got.last_message_id.entryId) == (ids[4].ledger_id(), ids[4].entry_id())
        md = got.consumer_mark_delete_position
        return md.ledgerId, md.entryId - (1 << 64) if md.entryId >= 1 << 63 else md.entryId  # uint64 on the wire

    def ack(w: WireClient, i: int, ack_type: int = 0) -> None:
        w.send(c.command(c.ACK, consumer_id=1, ack_type=ack_type, request_id=100 + i,
                         message_id=[c.message_id(ids[i].ledger_id(), ids[i].entry_id())]))
        assert w.expect(c.ACK_RESPONSE).request_id == 100 + i

    w = WireClient(broker.pulsar_port)
    w.connect()
    subscribe(w)
    got = [w.expect(c.MESSAGE) for _ in range(5)]
    assert [(m.message_id.ledgerId, m.message_id.entryId) for m in got] == [(i.ledger_id(), i.entry_id()) for i in ids]
    assert mark_delete(w) == (ids[0].ledger_id(), ids[0].entry_id() - 1)  # nothing acknowledged yet
    for i in (0, 1, 3):
        ack(w, i)
    assert mark_delete(w) == (ids[1].ledger_id(), ids[1].entry_id())  # the hole at 2 stops it
    ack(w, 4, ack_type=1)  # cumulative on Shared: ignored
    assert mark_delete(w) == (ids[1].ledger_id(), ids[1].entry_id())
    ack(w, 2)
    assert mark_delete(w) == (ids[3].ledger_id(), ids[3].entry_id())  # over 2 and the already acked 3
    w.send(c.command(c.CLOSE_CONSUMER, consumer_id=1, request_id=50))
    w.expect(c.SUCCESS)
    subscribe(w)
    again = w.expect(c.MESSAGE)
    assert (again.message_id.ledgerId, again.message_id.entryId) == (ids[4].ledger_id(), ids[4].entry_id())
    w.close()


def test_a_topic_deleted_under_pulsar_clients(broker: KopBroker, client: pulsar.Client) -> None:
    """Kafka's DeleteTopics while a Pulsar consumer is connected: the broker closes the consumer (it looks the
    topic up again, which auto-creates it anew, as Pulsar's forced deletion with auto-creation on does) and the
    old subscription's cursor went with the topic; nothing else is disturbed."""
    from kafka.admin import KafkaAdminClient

    topic = name()
    consumer = client.subscribe(topic, "del", initial_position=pulsar.InitialPosition.Earliest)
    produce(client, topic, 3)
    receive_all(consumer, 3)
    admin = KafkaAdminClient(bootstrap_servers=broker.bootstrap)
    try:
        admin.delete_topics([topic])
    finally:
        admin.close()
    producer = client.create_producer(topic)  # creates the topic again
    producer.send(b"after")
    m = consumer.receive(RECEIVE_MS)
    assert m.data() == b"after"
    assert "Traceback" not in broker.log_path.read_text()


def test_permits_bound_what_is_sent(broker: KopBroker, client: pulsar.Client) -> None:
    """FLOW permits count messages: 3 permits bring 3 one-message entries and then nothing until more come; a
    batch entry of 4 messages takes 4 (and may overshoot, as in Pulsar)."""
    from kop.pulsar.codec import commands as c
    from tests.support.pulsar_wire import WireClient

    topic = name()
    produce(client, topic, 5)
    producer = client.create_producer(topic, batching_enabled=True, batching_max_messages=4,
                                      batching_max_publish_delay_ms=1000)
    for i in range(4):
        producer.send_async(f"b{i}".encode(), None)
    producer.flush()
    w = WireClient(broker.pulsar_port)
    w.connect()
    w.send(c.command(c.SUBSCRIBE, topic=f"persistent://public/default/{topic}", subscription="p",
                     subType=0, consumer_id=1, request_id=1, initialPosition=1))
    w.expect(c.SUCCESS)
    w.send(c.command(c.FLOW, consumer_id=1, messagePermits=3))
    got = [w.expect(c.MESSAGE) for _ in range(3)]
    assert silent(w)
    w.send(c.command(c.FLOW, consumer_id=1, messagePermits=3))  # m3, m4 and the batch (4 messages: overshoot)
    got += [w.expect(c.MESSAGE) for _ in range(3)]
    assert len({(m.message_id.ledgerId, m.message_id.entryId) for m in got}) == 6
    w.send(c.command(c.FLOW, consumer_id=1, messagePermits=2))  # -2 + 2 = 0: still nothing to send
    assert silent(w)
    w.close()


def silent(w, wait: float = 1.5) -> bool:  # noqa: ANN001 - a WireClient
    """Nothing arrives for `wait` seconds (a message sent wrongly would make this fail, never the reverse)."""
    w.timeout, saved = wait, w.timeout
    try:
        frame = w.recv()
    except TimeoutError:
        return True
    finally:
        w.timeout = saved
    raise AssertionError(f"unexpected frame {frame}")
