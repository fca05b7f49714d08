"""Pulsar's own Java client (Maven Central, the reference's version) end to end (issue 13): the matrix pulsar-client
covers in test_pulsar_clients.py, driven through tests/support/pulsar_java.py - one JVM per broker for the whole
module, every step of a test a command to it, because a JVM start is the expensive part on a small machine.

A Pulsar-side module (tests/e2e/conftest.py): `pulsar`, a real Apache Pulsar standalone, proves these
tests right; our broker on both storage backends (`kop`, `kop-bk`) must give the same answers. Both run on Pulsar's
defaults: a producer or consumer auto-creates a non-partitioned topic (message ids and consumer events carry
partition -1), except the three-partition topic below, created explicitly.

What is checked, each test on topics of its own:
* batched and unbatched produce with every compression codec, consumed with values, keys, properties, event
  times and message ids (batch indexes for batched messages);
* WaitForExclusive producers: the second is created only once the first closed, messages in order;
* Exclusive (a second consumer is refused with ConsumerBusy), Shared (two consumers split the messages, none
  twice), Failover (one active consumer, ACTIVE_CONSUMER_CHANGE events, the other takes over what was not
  acknowledged), Key_Shared (a key never spans consumers, per-key order kept);
* individual and cumulative acks (what was acknowledged is not delivered to the next consumer), negative acks
  redelivered with a growing redelivery count, ack-timeout redelivery;
* seek by message id and by publish time, readers from the earliest, the latest and a message id (exclusive and
  inclusive);
* a regex subscription (topicsPattern) that reads the matching topics and picks up one created after it
  subscribed;
* a three-partition topic consumed from all partitions - created by Kafka's CreateTopics (kafka-python's admin
  client) and written by kafka-python as well on ours; created by Pulsar's admin API on Apache Pulsar, which has
  no Kafka listener.

Where ours differs on purpose: a message's publish time (check_publish_time says why).
"""

from __future__ import annotations

import time
import uuid

import pytest

from tests.support.pulsar_java import PulsarJava, PulsarJavaSession

PULSAR_SIDE_TARGETS = ("pulsar", "kop", "kop-bk")

NAMESPACE = "public/default"
EVENT_BASE = 1_700_000_000_000  # PulsarJava's event time of message i is EVENT_BASE + i
CODECS = ("NONE", "LZ4", "ZLIB", "ZSTD", "SNAPPY")
GAP_MS = 500  # how long a drain waits for one more message before it turns to the other consumer
WAIT_S = 60  # a bound that keeps a broken broker from hanging a test; never a measured quantity


@pytest.fixture(scope="module")
def java_sessions():
    """The module's JVMs, one per broker (see `java`)."""
    sessions: dict[str, PulsarJavaSession] = {}
    yield sessions
    for s in sessions.values():
        s.close()


@pytest.fixture
def java(pulsar_broker, java_sessions):
    """The JVM that talks to this test's broker: one per broker for the whole module, as the brokers are shared
    (a JVM start is most of a short test's time), a new one after a test whose command failed (PulsarJava exits
    then). Each test starts with no consumer or reader open."""
    s = java_sessions.get(pulsar_broker.service_url)
    if s is None or not s.alive():
        s = java_sessions[pulsar_broker.service_url] = PulsarJava(pulsar_broker.service_url,
                                                                   pulsar_broker.admin_url).session()
    s.begin()
    yield s
    if s.alive():
        s("close-all")


def topic_name(target, hint: str) -> str:
    return f"persistent://{NAMESPACE}/{target.topic(hint)}"


def idx(m: dict) -> int:
    return int(m["properties"]["idx"])


def check_fields(m: dict, i: int, keys: int = 3) -> None:
    """A message PulsarJava produced as number i (see its `produce` command)."""
    assert m["value"] == f"java-{i}"
    assert m["key"] == f"key-{i % keys}"
    assert m["properties"] == {"idx": str(i)}
    assert m["eventTime"] == EVENT_BASE + i
    assert m["publishTime"] > 0


def check_publish_time(target, m: dict) -> None:
    """Apache Pulsar keeps the publish time the client set (now; the event times here are from 2023). Ours differs
    on purpose: one stored format for both protocols with seed 004's mapping, where a message's Kafka timestamp is
    its event time (else its publish time) and comes back as both event time and the entry's publish time (the
    first message's, in a batch) - so a seek by time on ours goes by event times where Pulsar goes by when it
    stored the message."""
    if target.is_kop:
        assert EVENT_BASE <= m["publishTime"] <= m["eventTime"], m
    else:
        assert m["publishTime"] > EVENT_BASE + 86_400_000, m


def drain(java, names: list[str], total: int) -> dict[str, list[dict]]:
    """Receive (and acknowledge) from several consumers in turn until `total` messages arrived: each turn takes
    what a consumer has until it waited GAP_MS for the next one."""
    got: dict[str, list[dict]] = {n: [] for n in names}
    deadline = time.monotonic() + WAIT_S
    while sum(len(v) for v in got.values()) < total:
        assert time.monotonic() < deadline, f"{sum(len(v) for v in got.values())} of {total} messages: {got}"
        for n in names:
            got[n] += java(f"receive {n} {total} timeoutMs={GAP_MS} partial=true")
    return got


def wait_events(java, name: str, want: str) -> list[str]:
    """The ACTIVE_CONSUMER_CHANGE events consumer `name` saw, once the last is `want` (the client hands them to
    the listener on another thread than the messages, so they may trail the messages a little)."""
    deadline = time.monotonic() + WAIT_S
    while True:
        events = java(f"events {name}")
        if events and events[-1] == want or time.monotonic() > deadline:
            return events
        time.sleep(0.1)


# ---- produce: batched and unbatched x compression ---------------------------------------------------------


def test_produce_each_codec_batched_and_unbatched(target, java):
    for codec in CODECS:
        topic = topic_name(target, f"codec-{codec.lower()}")
        plain = java(f"produce {topic} 5 false {codec}")
        batched = java(f"produce {topic} 10 true {codec} start=5 batch=4")
        got = java(f"consume {topic} s Exclusive 15")
        # ids "ledger:entry:partition" unbatched, "ledger:entry:partition:batchIndex" batched (4 a batch at most)
        assert all(len(i.split(":")) == 3 for i in plain), (codec, plain)
        assert len({i for i in plain}) == 5
        assert all(len(i.split(":")) == 4 for i in batched), (codec, batched)
        entries = {tuple(i.split(":")[:2]) for i in batched}
        assert 3 <= len(entries) < 10, (codec, batched)
        assert [idx(m) for m in got] == list(range(15)), codec
        for i, m in enumerate(got):
            check_fields(m, i)
            check_publish_time(target, m)
            assert m["redeliveryCount"] == 0
        assert [m["id"] for m in got] == plain + batched, codec


def test_wait_for_exclusive_producers_take_turns(target, java):
    """ProducerAccessMode.WaitForExclusive: the first producer takes the free topic at once; a second one's
    createAsync completes only after the first closes (the broker answers it PRODUCER_SUCCESS not ready, then
    ready when it gets the topic), and the messages of both are stored in the order they were sent."""
    topic = topic_name(target, "wait-excl")
    java(f"producer p1 {topic} access=WaitForExclusive")
    java("send p1 first-1")
    java(f"producer p2 {topic} access=WaitForExclusive wait=false")
    java("send p1 first-2")  # answered after the broker's answer to p2's PRODUCER, on the same connection
    assert java("producer-ready p2") is False  # waiting in line while p1 holds the topic
    assert java(f"try producer p3 {topic} access=Exclusive") == {"exception": "ProducerFencedException",
                                                                  "status": 0}
    java("close p1")
    assert java("await-producer p2") is True
    java("send p2 second-1")
    java("close p2")
    got = java(f"consume {topic} s Exclusive 3")
    assert [m["value"] for m in got] == ["first-1", "first-2", "second-1"]


# ---- subscription types -------------------------------------------------------------------------------------


def test_exclusive_refuses_a_second_consumer(target, java):
    topic = topic_name(target, "exclusive")
    java(f"produce {topic} 4 false NONE")
    java(f"subscribe ex1 {topic} ex Exclusive")
    assert java(f"try subscribe ex2 {topic} ex Exclusive") == {"exception": "ConsumerBusyException", "status": 0}
    got = java("receive ex1 4")
    assert [idx(m) for m in got] == list(range(4))
    # another subscription on the same topic is free to have its own exclusive consumer
    java(f"subscribe other {topic} ex-other Exclusive")
    assert [idx(m) for m in java("receive other 4")] == list(range(4))


def test_shared_splits_messages_between_consumers(target, java):
    topic = topic_name(target, "shared")
    # small receiver queues: neither consumer can take every message while the other has room
    for name in ("sh1", "sh2"):
        java(f"subscribe {name} {topic} sh Shared queue=4")
    java(f"produce {topic} 20 false NONE")
    got = drain(java, ["sh1", "sh2"], 20)
    assert sorted(idx(m) for v in got.values() for m in v) == list(range(20))  # none lost, none twice
    assert got["sh1"] and got["sh2"], got


def test_failover_one_active_consumer_then_takeover(target, java):
    topic = topic_name(target, "failover")
    for name in ("fa", "fb"):
        java(f"subscribe {name} {topic} fo Failover consumer={name}")
    java(f"produce {topic} 10 false NONE")
    # which consumer the broker made active: the one that gets messages (Apache Pulsar starts dispatching to a
    # newly chosen active consumer a second later - activeConsumerFailoverDelayTimeMillis)
    first = {"fa": [], "fb": []}
    deadline = time.monotonic() + WAIT_S
    while not first["fa"] and not first["fb"] and time.monotonic() < deadline:
        for n in first:
            first[n] += java(f"receive {n} 10 ack=false timeoutMs={GAP_MS} partial=true")
    active = "fa" if first["fa"] else "fb"
    standby = "fb" if active == "fa" else "fa"
    first[active] += java(f"receive {active} {10 - len(first[active])} ack=false")
    # the active consumer gets everything, in order; the other nothing, and each was told which it is
    assert [idx(m) for m in first[active]] == list(range(10))
    assert first[standby] == []
    # (P = -1: the consumer created a non-partitioned topic)
    assert wait_events(java, active, "active:-1")[-1] == "active:-1"
    assert wait_events(java, standby, "inactive:-1")[-1] == "inactive:-1"
    for m in first[active][:5]:
        java(f"ack {active} {m['id']}")
    java(f"close {active}")  # the other consumer becomes active and gets what was not acknowledged
    rest = java(f"receive {standby} 5")
    assert [idx(m) for m in rest] == list(range(5, 10))
    assert wait_events(java, standby, "active:-1")[-1] == "active:-1"


def test_key_shared_keeps_each_key_on_one_consumer_in_order(target, java):
    topic = topic_name(target, "keyshared")
    for name in ("k1", "k2"):
        java(f"subscribe {name} {topic} ks Key_Shared")
    # unbatched: a batch is dispatched whole, so a Key_Shared producer would need key-based batching. 24 keys:
    # each consumer owns about half the hash space, so both get keys (all 24 on one: odds below one in 10^5)
    java(f"produce {topic} 48 false NONE keys=24")
    got = drain(java, ["k1", "k2"], 48)
    assert got["k1"] and got["k2"], got
    owner: dict[str, str] = {}
    for name, msgs in got.items():
        for m in msgs:
            assert owner.setdefault(m["key"], name) == name, f"key {m['key']} on both consumers"
        for key in {m["key"] for m in msgs}:
            order = [idx(m) for m in msgs if m["key"] == key]
            assert order == sorted(order), f"key {key} out of order: {order}"
    assert sorted(idx(m) for v in got.values() for m in v) == list(range(48))


# ---- acks, negative acks, ack timeout -----------------------------------------------------------------------


def test_individual_and_cumulative_acks(target, java):
    shared = topic_name(target, "ack-individual")
    java(f"produce {shared} 6 false NONE")
    java(f"subscribe a {shared} acks Shared")
    got = java("receive a 6 ack=false")
    for m in got[::2]:  # 0, 2, 4
        java(f"ack a {m['id']}")
    java("close a")  # the acks go out before the consumer closes
    java(f"subscribe a2 {shared} acks Shared")
    assert sorted(idx(m) for m in java("receive a2 3")) == [1, 3, 5]

    exclusive = topic_name(target, "ack-cumulative")
    java(f"produce {exclusive} 6 true LZ4 batch=2")
    java(f"subscribe c {exclusive} cum Exclusive")
    got = java("receive c 6 ack=false")
    assert got[3]["id"].endswith(":1")  # batches of two: 3 ends the batch it shares with 2
    java(f"ack-cumulative c {got[3]['id']}")  # 0..3, whole batches
    java("close c")
    java(f"subscribe c2 {exclusive} cum Exclusive")
    assert [idx(m) for m in java("receive c2 2")] == [4, 5]


def test_negative_acks_and_ack_timeout_redeliver_with_a_count(target, java):
    topic = topic_name(target, "nack")
    java(f"produce {topic} 3 false NONE")
    java(f"subscribe n {topic} nk Shared nackDelayMs=200")
    got = java("receive n 3 ack=false")
    assert [m["redeliveryCount"] for m in got] == [0, 0, 0]
    java(f"ack n {got[0]['id']}")
    java(f"ack n {got[2]['id']}")
    java(f"nack n {got[1]['id']}")
    [again] = java("receive n 1 ack=false")
    assert (idx(again), again["redeliveryCount"], again["id"]) == (1, 1, got[1]["id"])
    check_fields(again, 1)
    java(f"nack n {again['id']}")
    [third] = java("receive n 1 ack=false")
    assert (idx(third), third["redeliveryCount"]) == (1, 2)
    java(f"ack n {third['id']}")
    java("close n")
    # everything acknowledged: a new consumer of the subscription gets only what is produced next
    java(f"subscribe n2 {topic} nk Shared")
    java(f"produce {topic} 1 false NONE start=3")
    assert [idx(m) for m in java("receive n2 1")] == [3]

    # ack timeout (the client's minimum is one second): what was not acknowledged in time comes back
    timed = topic_name(target, "ack-timeout")
    java(f"produce {timed} 2 false NONE")
    java(f"subscribe t {timed} at Shared ackTimeoutMs=1000")
    got = java("receive t 2 ack=false")
    java(f"ack t {got[0]['id']}")
    [late] = java("receive t 1")
    assert (idx(late), late["redeliveryCount"], late["id"]) == (1, 1, got[1]["id"])


# ---- seek and readers ---------------------------------------------------------------------------------------


def test_seek_by_message_id_and_by_publish_time(target, java):
    topic = topic_name(target, "seek")
    # distinct publish times, each after the previous message was stored: Apache Pulsar seeks by the time its
    # broker stored an entry (broker entry metadata) rather than the client's publish time, and a message sent
    # before the previous one was stored could be stored after the next one's publish time
    ids = java(f"produce {topic} 10 false NONE gapMs=5")
    java(f"subscribe s {topic} sk Exclusive")
    got = java("receive s 10")
    java(f"seek s {ids[6]}")
    after_id = java("receive s 3")
    assert [idx(m) for m in after_id] == [7, 8, 9]
    assert [m["id"] for m in after_id] == ids[7:]

    # the first message published at or after ts is the next one (on ours "published" is the event time: see
    # check_publish_time; the messages' publish times tell each broker's order either way)
    ts = got[3]["publishTime"]
    first = min(i for i, m in enumerate(got) if m["publishTime"] >= ts)  # publish times may tie
    java(f"seek-time s {ts}")
    after_ts = java(f"receive s {10 - first}")
    assert [idx(m) for m in after_ts] == list(range(first, 10))
    for m in after_ts:
        check_fields(m, idx(m))

    java(f"subscribe incl {topic} sk-incl Exclusive inclusive=true")
    java("receive incl 10")
    java(f"seek incl {ids[6]}")
    assert [idx(m) for m in java("receive incl 4")] == [6, 7, 8, 9]


def test_readers(target, java):
    topic = topic_name(target, "reader")
    ids = java(f"produce {topic} 8 false NONE")
    java(f"reader r {topic} earliest")
    got = java("read r 8")
    assert [idx(m) for m in got] == list(range(8))
    for i, m in enumerate(got):
        check_fields(m, i)
        assert m["id"] == ids[i]
    assert java("has-available r") is False

    # from a message id: the Java client allows it on a non-partitioned topic or one partition (on a partitioned
    # topic "The partitioned topic startMessageId is illegal", whichever broker)
    java(f"reader after {topic} {ids[4]}")
    assert [idx(m) for m in java("read after 1")] == [5]
    java(f"reader from {topic} {ids[4]} inclusive=true")
    assert [idx(m) for m in java("read from 1")] == [4]

    java(f"reader latest {topic} latest")
    assert java("has-available latest") is False
    java(f"produce {topic} 2 false NONE start=8")
    assert [idx(m) for m in java("read latest 2")] == [8, 9]


# ---- regex subscriptions ------------------------------------------------------------------------------------


def test_regex_subscription_picks_up_topics(target, java):
    tag = uuid.uuid4().hex[:8]
    a, b = (f"persistent://{NAMESPACE}/rx-{tag}-{s}" for s in ("a", "b"))
    other = f"persistent://{NAMESPACE}/other-{tag}-a"
    java(f"produce {a} 3 false NONE")
    java(f"produce {other} 3 false NONE start=20")
    java(f"subscribe rx persistent://{NAMESPACE}/rx-{tag}-.* rx Shared pattern=true discoveryS=1")
    got = java("receive rx 3")
    assert sorted(idx(m) for m in got) == [0, 1, 2]
    assert {m["topic"] for m in got} == {a}  # non-partitioned: the topic's own name
    # a matching topic created after the subscription is found (by the periodic check or a topic-list watcher)
    java(f"produce {b} 3 false NONE start=10")
    got = java("receive rx 3")
    assert sorted(idx(m) for m in got) == [10, 11, 12]
    assert {m["topic"] for m in got} == {b}
    for m in got:
        check_fields(m, idx(m))
    assert java(f"receive rx 1 timeoutMs={GAP_MS} partial=true") == []  # nothing from the topic that does not match


# ---- a topic created by Kafka's CreateTopics ----------------------------------------------------------------


def test_partitioned_topic_from_kafka_create_topics(target, pulsar_broker, java):
    name = target.topic("kafka-created")
    topic = f"persistent://{NAMESPACE}/{name}"
    if target.is_kop:
        create_with_kafka(pulsar_broker.handle.bootstrap, name, partitions=3)
    else:  # Apache Pulsar has no Kafka listener: the same topic through its admin API
        java(f"create-partitioned-topic {topic} 3")
    assert java(f"partitioned-metadata {topic}") == 3
    java(f"subscribe p {topic} ps Shared")
    java(f"produce {topic} 30 false NONE keys=10")  # keys spread the messages over the partitions
    got = java("receive p 30")
    assert sorted(idx(m) for m in got) == list(range(30))
    assert {m["topic"] for m in got} == {f"{topic}-partition-{p}" for p in range(3)}
    for m in got:
        check_fields(m, idx(m), keys=10)
    # a key always goes to one partition, and per partition the order is kept
    partition_of: dict[str, str] = {}
    for m in got:
        assert partition_of.setdefault(m["key"], m["topic"]) == m["topic"]
    for p in range(3):
        order = [idx(m) for m in got if m["topic"] == f"{topic}-partition-{p}"]
        assert order == sorted(order)
    if target.is_kop:
        # and Kafka's records on every partition reach the same Java consumer, with their fields mapped
        produce_with_kafka(pulsar_broker.handle.bootstrap, name, partitions=3)
        got = java("receive p 6")
        assert sorted(m["value"] for m in got) == [f"kafka-{i}" for i in range(6)]
        for m in got:
            i = int(m["value"].removeprefix("kafka-"))
            assert m["topic"] == f"{topic}-partition-{i % 3}"
            assert (m["key"], m["properties"], m["eventTime"]) == (f"kkey-{i}", {"h": str(i)}, EVENT_BASE + i)


def create_with_kafka(bootstrap: str, topic: str, partitions: int) -> None:
    """CreateTopics through kafka-python's admin client."""
    from kafka.admin import KafkaAdminClient, NewTopic

    admin = KafkaAdminClient(bootstrap_servers=bootstrap, request_timeout_ms=60_000)
    try:
        admin.create_topics([NewTopic(topic, num_partitions=partitions, replication_factor=1)])
    finally:
        admin.close()


def produce_with_kafka(bootstrap: str, topic: str, partitions: int) -> None:
    from kafka import KafkaProducer

    producer = KafkaProducer(bootstrap_servers=bootstrap, acks="all")
    try:
        futures = [producer.send(topic, key=f"kkey-{i}".encode(), value=f"kafka-{i}".encode(),
                                 headers=[("h", str(i).encode())], partition=i % partitions,
                                 timestamp_ms=EVENT_BASE + i) for i in range(6)]
        producer.flush(60)
        for f in futures:
            f.get(60)
    finally:
        producer.close(10)
