"""What a Pulsar client reads back, as Apache Pulsar answers it (issue #22, "Wrong answers").

A Pulsar-side module (tests/e2e/conftest.py): the same assertions run on Apache Pulsar standalone (`pulsar`),
which proves them right, and on our broker, both on Pulsar's defaults: a producer auto-creates a non-partitioned topic.

What is checked, each with `pulsar-client` (the C++ client underneath):
- a consumed message's ``producer_name()`` is the name of the producer that sent it, batched or not, named by the
  application or by the broker;
- a message sent with a partition key and a different ordering key comes back with each of them (batched and not),
  and one with a single key comes back with that key as its partition key;
- a second Exclusive producer is refused ProducerFenced (Pulsar 4's answer), a Shared one next to an Exclusive one
  ProducerBusy, and an ExclusiveWithFencing producer fences the Exclusive one out (its next send fails);
- a WaitForExclusive producer waits while another holds the topic (its create blocks, the connection keeps serving
  the holder's sends) and takes the topic when the holder closes; waiters take it in the order they came, and one
  that goes away while it waits (its client closed) is skipped without a trace (persistent and non-persistent
  topics); an ExclusiveWithFencing producer fails the waiters' creates with ProducerFenced;
- an Avro producer whose record differs from the topic's schema only by the record's name is let in (Pulsar's Avro
  compatibility check resolves records by fields, not by their full name).
"""

from __future__ import annotations

import contextlib
import json
import time
import urllib.request
from concurrent.futures import Future, ThreadPoolExecutor

import pulsar
import pytest
from pulsar.schema import AvroSchema, Integer, Record, String

PULSAR_SIDE_TARGETS = ("pulsar", "kop", "kop-bk")

RECEIVE_MS = 30_000  # a generous bound for one receive under load; never a measured quantity


@pytest.fixture
def client(pulsar_service_url: str):
    c = pulsar.Client(pulsar_service_url, operation_timeout_seconds=60,
                      logger=pulsar.ConsoleLogger(pulsar.LoggerLevel.Error))
    yield c
    with contextlib.suppress(pulsar.AlreadyClosed):  # a fenced-out producer makes the client's close say so
        c.close()


def topic_name(target, hint: str) -> str:
    return f"persistent://public/default/{target.topic(hint)}"


def test_producer_name_is_given_back(target, client):
    topic = topic_name(target, "pname")
    consumer = client.subscribe(topic, "s", initial_position=pulsar.InitialPosition.Earliest)
    named = client.create_producer(topic, producer_name="named-producer", batching_enabled=False)
    named.send(b"unbatched")
    named.close()
    batched = client.create_producer(topic, producer_name="batching-producer", batching_enabled=True,
                                     batching_max_messages=3, batching_max_publish_delay_ms=60_000)
    for i in range(3):
        batched.send_async(f"b{i}".encode(), None)
    batched.flush()
    batched.close()
    anonymous = client.create_producer(topic, batching_enabled=False)
    generated = anonymous.producer_name()
    anonymous.send(b"anonymous")
    anonymous.close()
    got = []
    for _ in range(5):
        msg = consumer.receive(RECEIVE_MS)
        consumer.acknowledge(msg)
        got.append((msg.data(), msg.producer_name()))
    assert got == [(b"unbatched", "named-producer"), (b"b0", "batching-producer"), (b"b1", "batching-producer"),
                   (b"b2", "batching-producer"), (b"anonymous", generated)]
    assert generated  # the broker named it
    consumer.close()


@pytest.mark.parametrize("batching", [False, True])
def test_partition_and_ordering_keys_come_back_apart(target, client, batching):
    topic = topic_name(target, f"keys-{int(batching)}")
    consumer = client.subscribe(topic, "s", initial_position=pulsar.InitialPosition.Earliest)
    producer = client.create_producer(topic, batching_enabled=batching, batching_max_messages=4,
                                      batching_max_publish_delay_ms=60_000)
    sent = [("pk-1", "ok-1"), ("same", "same"), ("pk-only", None), ("pk-2", "ok-2")]
    for i, (pk, ok) in enumerate(sent):
        kwargs = {"partition_key": pk}
        if ok is not None:
            kwargs["ordering_key"] = ok
        producer.send_async(f"m{i}".encode(), None, **kwargs)
    producer.flush()
    producer.close()
    got = []
    for _ in sent:
        msg = consumer.receive(RECEIVE_MS)
        consumer.acknowledge(msg)
        got.append((msg.data(), msg.partition_key(), msg.ordering_key() if ok_wanted(msg) else None))
    assert got == [(b"m0", "pk-1", "ok-1"), (b"m1", "same", "same"), (b"m2", "pk-only", None),
                   (b"m3", "pk-2", "ok-2")]
    consumer.close()


def ok_wanted(msg: pulsar.Message) -> bool:
    """Whether the message's ordering key is compared: not for the one sent with a partition key only (where Pulsar
    gives none and we give the partition key back as its ordering key too - docs/pulsar.md)."""
    return msg.data() != b"m2"


def test_second_exclusive_producer_is_fenced(target, client):
    topic = topic_name(target, "excl")
    first = client.create_producer(topic, access_mode=pulsar.ProducerAccessMode.Exclusive, batching_enabled=False)
    first.send(b"first")
    with pytest.raises(pulsar.ProducerFenced):
        client.create_producer(topic, access_mode=pulsar.ProducerAccessMode.Exclusive)
    with pytest.raises(pulsar.ProducerBusy):
        client.create_producer(topic, access_mode=pulsar.ProducerAccessMode.Shared)
    # ExclusiveWithFencing takes the topic: the Exclusive producer is fenced out
    fencing = client.create_producer(topic, access_mode=pulsar.ProducerAccessMode.ExclusiveWithFencing,
                                     batching_enabled=False)
    fencing.send(b"fencing")
    with pytest.raises(pulsar.ProducerFenced):
        first.send(b"after fenced")
    with pytest.raises(pulsar.AlreadyClosed):  # the client closed it when it learnt it was fenced
        first.close()
    fencing.close()
    consumer = client.subscribe(topic, "s", initial_position=pulsar.InitialPosition.Earliest)
    got = [consumer.receive(RECEIVE_MS).data() for _ in range(2)]
    assert got == [b"first", b"fencing"]
    consumer.close()


class Point(Record):
    _sorted_fields = True
    x = Integer()
    label = String()


class Place(Record):  # Point's fields under another record name
    _sorted_fields = True
    x = Integer()
    label = String()


def test_avro_record_name_does_not_count(target, client):
    topic = topic_name(target, "avro-name")
    first = client.create_producer(topic, schema=AvroSchema(Point), batching_enabled=False)
    first.send(Point(x=1, label="a"))
    first.close()
    renamed = client.create_producer(topic, schema=AvroSchema(Place), batching_enabled=False)
    renamed.send(Place(x=2, label="b"))
    renamed.close()
    consumer = client.subscribe(topic, "s", schema=AvroSchema(Place),
                                initial_position=pulsar.InitialPosition.Earliest)
    got = []
    for _ in range(2):
        msg = consumer.receive(RECEIVE_MS)
        got.append((msg.value().x, msg.value().label))
    assert got == [(1, "a"), (2, "b")]
    consumer.close()



def _waiting_publishers(admin_url: str, local: str) -> int:
    url = f"{admin_url}/admin/v2/{local}/stats"
    with urllib.request.urlopen(url, timeout=60) as resp:
        return json.load(resp)["waitingPublishers"]


def _await_waiting(admin_url: str, local: str, n: int) -> None:
    """Until the topic's stats count ``n`` queued WaitForExclusive producers (their create calls block, so the
    stats are how a test learns that a PRODUCER got its producer_ready=false answer); bounded, never a measure."""
    deadline = time.monotonic() + RECEIVE_MS / 1000
    while (seen := _waiting_publishers(admin_url, local)) != n and time.monotonic() < deadline:
        time.sleep(0.05)
    assert seen == n


@pytest.mark.parametrize("kind", ["persistent", "non-persistent"])
def test_wait_for_exclusive_producers_take_turns(target, client, pulsar_broker, kind):
    local = f"{kind}/public/default/{target.topic('wait-excl')}"  # what the stats URL names
    topic = local.replace("/", "://", 1)
    admin = pulsar_broker.admin_url
    # subscribed first: a non-persistent topic keeps nothing for a subscription made later
    consumer = client.subscribe(topic, "s", initial_position=pulsar.InitialPosition.Earliest)
    mode = pulsar.ProducerAccessMode.WaitForExclusive
    leaving = pulsar.Client(pulsar_broker.service_url, operation_timeout_seconds=60,
                            logger=pulsar.ConsoleLogger(pulsar.LoggerLevel.Error))
    pool = ThreadPoolExecutor(3)
    try:
        holder = client.create_producer(topic, access_mode=pulsar.ProducerAccessMode.Exclusive,
                                        batching_enabled=False)
        holder.send(b"holder-1")

        def wait_turn(c: pulsar.Client, name: str) -> Future:
            return pool.submit(c.create_producer, topic, producer_name=name, access_mode=mode,
                               batching_enabled=False)

        first = wait_turn(client, "w1")
        _await_waiting(admin, local, 1)
        wait_turn(leaving, "w-gone")
        _await_waiting(admin, local, 2)
        second = wait_turn(client, "w2")
        _await_waiting(admin, local, 3)
        # the connection keeps serving the holder while its waiters wait; nobody got the topic yet
        holder.send(b"holder-2")
        with pytest.raises(pulsar.ProducerBusy):  # a Shared producer may not overtake the waiters
            client.create_producer(topic)
        assert not first.done() and not second.done()
        leaving.close()  # the middle waiter goes away while it waits
        if target.is_kop:  # ours drops it at once; Pulsar counts it until its turn comes, then closes it
            _await_waiting(admin, local, 2)
        holder.close()
        w1 = first.result(RECEIVE_MS / 1000)
        w1.send(b"w1")
        assert not second.done()
        w1.close()
        w2 = second.result(RECEIVE_MS / 1000)  # the one that went is skipped
        w2.send(b"w2")
        w2.close()
        assert _waiting_publishers(admin, local) == 0
        got = [consumer.receive(RECEIVE_MS).data() for _ in range(4)]
        assert got == [b"holder-1", b"holder-2", b"w1", b"w2"]
        consumer.close()
    finally:
        pool.shutdown(wait=False, cancel_futures=True)
        with contextlib.suppress(pulsar.AlreadyClosed):
            leaving.close()


def test_fencing_producer_refuses_the_waiters(target, client, pulsar_broker):
    local = f"persistent/public/default/{target.topic('wait-fenced')}"
    topic = local.replace("/", "://", 1)
    pool = ThreadPoolExecutor(1)
    try:
        holder = client.create_producer(topic, access_mode=pulsar.ProducerAccessMode.Exclusive,
                                        batching_enabled=False)
        waiter = pool.submit(client.create_producer, topic, access_mode=pulsar.ProducerAccessMode.WaitForExclusive,
                             batching_enabled=False)
        _await_waiting(pulsar_broker.admin_url, local, 1)
        fencing = client.create_producer(topic, access_mode=pulsar.ProducerAccessMode.ExclusiveWithFencing,
                                         batching_enabled=False)
        with pytest.raises(pulsar.ProducerFenced):
            waiter.result(RECEIVE_MS / 1000)
        assert _waiting_publishers(pulsar_broker.admin_url, local) == 0
        fencing.send(b"fencing")
        fencing.close()
        with pytest.raises(pulsar.ProducerFenced):
            holder.send(b"after fenced")
    finally:
        pool.shutdown(wait=False, cancel_futures=True)
