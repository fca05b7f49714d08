"""Pulsar clients end to end (issue 13): `pulsar-client` (PyPI) and Pulsar's own Java client and admin client.

A Pulsar-side module (tests/e2e/conftest.py): it runs on the targets in PULSAR_SIDE_TARGETS - `pulsar`, a real
Apache Pulsar standalone shared by the session, which proves these tests right, and our broker on both
storage backends (`kop`, `kop-bk`), which must give the same answers.

Both run on Pulsar's defaults, so a client's producer or consumer auto-creates a non-partitioned topic (Pulsar's
`allowAutoTopicCreationType=non-partitioned`): the C++ client's single-topic operations - seek by message id,
readers - take the topic's own name. The regex subscription mixes in a partitioned topic created over the admin
REST, as a Pulsar user would (partitioned topics in depth: tests/e2e/test_pulsar_java_matrix.py).

What is checked, on messages each test writes to its own topic: batched and unbatched produce with every
compression codec (contents, keys, properties, event times, batch indexes in the message ids); Exclusive
(a second consumer is refused), Shared (both consumers get messages, none twice), Failover (one active consumer
gets everything; the other takes over what was not acknowledged), Key_Shared (a key never spans consumers, per-key
order kept); negative acks redelivered with a growing redelivery count; seek by message id and by publish time;
readers (inclusive and exclusive start, `latest`); regex subscriptions; the Java client both ways with the Python
one. (Pulsar's Java admin client: tests/e2e/test_pulsar_admin_java.py.)
"""

from __future__ import annotations

import re
import uuid

import pulsar
import pytest

from tests.support.admin import create_partitioned_topic
from tests.support.pulsar_java import PulsarJava

PULSAR_SIDE_TARGETS = ("pulsar", "kop", "kop-bk")

NAMESPACE = "public/default"
RECEIVE_MS = 30_000  # a generous bound for one receive under load; never a measured quantity
EVENT_BASE = 1_600_000_000_000
POLL_MS = 100  # one consumer's turn when the test polls several


@pytest.fixture
def client(pulsar_service_url: str):
    c = pulsar.Client(pulsar_service_url, operation_timeout_seconds=60,
                      logger=pulsar.ConsoleLogger(pulsar.LoggerLevel.Warn))
    yield c
    c.close()


def topic_name(target, hint: str) -> str:
    return f"persistent://{NAMESPACE}/{target.topic(hint)}"


def produce(client: pulsar.Client, topic: str, n: int, start: int = 0, batched: bool = False,
            compression: pulsar.CompressionType = pulsar.CompressionType.NONE) -> list[pulsar.MessageId]:
    """n messages "m-<i>" (a compressible body), key "k-<i % 4>", properties and event time derived from i."""
    producer = client.create_producer(topic, batching_enabled=batched, batching_max_messages=5,
                                      batching_max_publish_delay_ms=100, compression_type=compression)
    ids: list[pulsar.MessageId | None] = [None] * n

    def done(i: int):
        def cb(res: pulsar.Result, msg_id: pulsar.MessageId) -> None:
            assert res == pulsar.Result.Ok, res
            ids[i] = msg_id
        return cb

    for i in range(start, start + n):
        kwargs = dict(properties={"idx": str(i), "origin": "python"}, partition_key=f"k-{i % 4}",
                      event_timestamp=EVENT_BASE + i)
        if batched:
            producer.send_async(body(i), done(i - start), **kwargs)
        else:
            ids[i - start] = producer.send(body(i), **kwargs)
    producer.flush()
    producer.close()
    assert all(ids), ids
    return ids  # type: ignore[return-value]


def body(i: int) -> bytes:
    return f"m-{i}-".encode() + b"abcdefgh" * 32


def index_of(msg: pulsar.Message) -> int:
    return int(msg.properties()["idx"])


def check_fields(msg: pulsar.Message, i: int) -> None:
    assert msg.data() == body(i)
    assert msg.partition_key() == f"k-{i % 4}"
    assert msg.properties() == {"idx": str(i), "origin": "python"}
    assert msg.event_timestamp() == EVENT_BASE + i
    assert msg.publish_timestamp() > 0


def receive_n(consumer: pulsar.Consumer, n: int, ack: bool = True) -> list[pulsar.Message]:
    got = []
    for _ in range(n):
        m = consumer.receive(RECEIVE_MS)
        if ack:
            consumer.acknowledge(m)
        got.append(m)
    return got


def polls() -> range:
    """Rounds of polling several consumers in turn, POLL_MS each: a consumer that gets no message (Key_Shared
    may give every key to one consumer) costs little; the bound only keeps a broken broker from hanging the test."""
    return range(2 * RECEIVE_MS // POLL_MS)


def ledger_entry(msg_id: pulsar.MessageId) -> tuple[int, int]:
    return msg_id.ledger_id(), msg_id.entry_id()


# ---- produce: batched/unbatched x compression ---------------------------------------------------------------


@pytest.mark.parametrize("compression", ["NONE", "LZ4", "ZLib", "ZSTD", "SNAPPY"])
def test_produce_batched_and_unbatched(target, client, compression):
    topic = topic_name(target, f"codec-{compression.lower()}")
    codec = getattr(pulsar.CompressionType, compression)
    plain = produce(client, topic, 6, start=0, batched=False, compression=codec)
    batched = produce(client, topic, 10, start=6, batched=True, compression=codec)
    # unbatched: one entry each, no batch index; batched (5 per batch at most): shared entries, indexes 0..k
    assert all(i.batch_index() == -1 for i in plain)
    assert len({ledger_entry(i) for i in plain}) == 6
    assert all(i.batch_index() >= 0 for i in batched)
    assert len({ledger_entry(i) for i in batched}) < 10

    consumer = client.subscribe(topic, "s", initial_position=pulsar.InitialPosition.Earliest)
    got = receive_n(consumer, 16)
    assert [index_of(m) for m in got] == list(range(16))
    for i, m in enumerate(got):
        check_fields(m, i)
        assert str(m.message_id()) == str((plain + batched)[i])
    consumer.close()


# ---- subscription types -------------------------------------------------------------------------------------


def test_exclusive_refuses_a_second_consumer(target, client):
    topic = topic_name(target, "exclusive")
    produce(client, topic, 5)
    first = client.subscribe(topic, "ex", consumer_type=pulsar.ConsumerType.Exclusive,
                             initial_position=pulsar.InitialPosition.Earliest)
    with pytest.raises(pulsar.ConsumerBusy):
        client.subscribe(topic, "ex", consumer_type=pulsar.ConsumerType.Exclusive)
    got = receive_n(first, 5)
    assert [index_of(m) for m in got] == list(range(5))
    first.close()


def test_shared_spreads_messages_without_duplicates(target, client):
    topic = topic_name(target, "shared")
    # small receiver queues: neither consumer can take every message while the other has room
    consumers = [client.subscribe(topic, "sh", consumer_type=pulsar.ConsumerType.Shared, receiver_queue_size=4,
                                  initial_position=pulsar.InitialPosition.Earliest) for _ in range(2)]
    produce(client, topic, 20)
    seen: dict[int, list[int]] = {0: [], 1: []}
    for _ in polls():
        if len(seen[0]) + len(seen[1]) == 20:
            break
        for n, c in enumerate(consumers):
            try:
                m = c.receive(POLL_MS)
            except pulsar.Timeout:
                continue
            c.acknowledge(m)
            seen[n].append(index_of(m))
    assert sorted(seen[0] + seen[1]) == list(range(20))
    assert seen[0] and seen[1], seen
    for c in consumers:
        c.close()


def _first_message(consumers: list[pulsar.Consumer]) -> tuple[int, pulsar.Message]:
    """Which consumer the broker made active: the one that gets a message (polled in turn)."""
    for _ in range(120):
        for n, c in enumerate(consumers):
            try:
                return n, c.receive(500)
            except pulsar.Timeout:
                pass
    raise AssertionError("no consumer received anything")


def test_failover_one_active_consumer_then_takeover(target, client):
    topic = topic_name(target, "failover")
    consumers = [client.subscribe(topic, "fo", consumer_type=pulsar.ConsumerType.Failover, consumer_name=name,
                                  initial_position=pulsar.InitialPosition.Earliest) for name in ("a", "b")]
    produce(client, topic, 10)
    active, first = _first_message(consumers)
    got = [first, *receive_n(consumers[active], 9, ack=False)]
    assert [index_of(m) for m in got] == list(range(10))  # the active consumer gets everything, in order
    for m in got[:5]:
        consumers[active].acknowledge(m)
    consumers[active].close()  # flushes the acks; the other consumer becomes active
    standby = consumers[1 - active]
    rest = receive_n(standby, 5)
    assert [index_of(m) for m in rest] == list(range(5, 10))
    standby.close()


def test_key_shared_keeps_each_key_on_one_consumer_in_order(target, client):
    topic = topic_name(target, "keyshared")
    consumers = [client.subscribe(topic, "ks", consumer_type=pulsar.ConsumerType.KeyShared,
                                  initial_position=pulsar.InitialPosition.Earliest) for _ in range(2)]
    produce(client, topic, 24)
    by_consumer: dict[int, list[pulsar.Message]] = {0: [], 1: []}
    for _ in polls():
        if sum(len(v) for v in by_consumer.values()) == 24:
            break
        for n, c in enumerate(consumers):
            try:
                m = c.receive(POLL_MS)
            except pulsar.Timeout:
                continue
            c.acknowledge(m)
            by_consumer[n].append(m)
    owner: dict[str, int] = {}
    for n, msgs in by_consumer.items():
        for m in msgs:
            assert owner.setdefault(m.partition_key(), n) == n, f"key {m.partition_key()} on both consumers"
        for key in {m.partition_key() for m in msgs}:
            idx = [index_of(m) for m in msgs if m.partition_key() == key]
            assert idx == sorted(idx), f"key {key} out of order: {idx}"
    assert sorted(index_of(m) for v in by_consumer.values() for m in v) == list(range(24))
    for c in consumers:
        c.close()


# ---- acks, negative acks, seek ------------------------------------------------------------------------------


def test_negative_ack_redelivers_with_a_growing_count(target, client):
    topic = topic_name(target, "nack")
    produce(client, topic, 3)
    consumer = client.subscribe(topic, "nk", consumer_type=pulsar.ConsumerType.Shared,
                                negative_ack_redelivery_delay_ms=200,
                                initial_position=pulsar.InitialPosition.Earliest)
    got = receive_n(consumer, 3, ack=False)
    assert [m.redelivery_count() for m in got] == [0, 0, 0]
    consumer.acknowledge(got[0])
    consumer.acknowledge(got[2])
    consumer.negative_acknowledge(got[1])
    again = consumer.receive(RECEIVE_MS)
    assert (index_of(again), again.redelivery_count()) == (1, 1)
    assert str(again.message_id()) == str(got[1].message_id())
    check_fields(again, 1)
    consumer.negative_acknowledge(again)
    third = consumer.receive(RECEIVE_MS)
    assert (index_of(third), third.redelivery_count()) == (1, 2)
    consumer.acknowledge(third)
    consumer.close()
    # everything acknowledged: a new consumer on the subscription gets only what is produced next
    consumer = client.subscribe(topic, "nk", consumer_type=pulsar.ConsumerType.Shared)
    produce(client, topic, 1, start=3)
    assert index_of(consumer.receive(RECEIVE_MS)) == 3
    consumer.close()


def test_seek_by_message_id_and_by_publish_time(target, client):
    topic = topic_name(target, "seek")
    ids = produce(client, topic, 10)
    # seek by message id is a single-topic operation in the C++ client (OperationNotSupported on a partitioned
    # topic, whichever broker): the producer auto-created a non-partitioned one
    consumer = client.subscribe(topic, "sk", initial_position=pulsar.InitialPosition.Earliest)
    got = receive_n(consumer, 10)

    # The broker resets the cursor *to* the id (Apache Pulsar logs "Reset subscription to message id L:6"); the
    # client then drops the message with that very id unless the consumer has start_message_id_inclusive.
    consumer.seek(ids[6])
    after_id = receive_n(consumer, 3)
    assert [index_of(m) for m in after_id] == [7, 8, 9]
    assert [str(m.message_id()) for m in after_id] == [str(i) for i in ids[7:]]

    ts = got[3].publish_timestamp()
    first = min(i for i, m in enumerate(got) if m.publish_timestamp() >= ts)  # publish times may tie
    consumer.seek(ts)  # the first message published at or after ts is the next one
    after_ts = receive_n(consumer, 10 - first)
    assert [index_of(m) for m in after_ts] == list(range(first, 10))
    for m in after_ts:
        check_fields(m, index_of(m))
    consumer.close()

    inclusive = client.subscribe(topic, "sk-incl", initial_position=pulsar.InitialPosition.Earliest,
                                 start_message_id_inclusive=True)
    receive_n(inclusive, 10)
    inclusive.seek(ids[6])
    assert [index_of(m) for m in receive_n(inclusive, 4)] == [6, 7, 8, 9]
    inclusive.close()


# ---- readers and regex subscriptions ------------------------------------------------------------------------


def test_readers(target, client):
    topic = topic_name(target, "reader")
    ids = produce(client, topic, 8)

    # a reader of the non-partitioned topic the producer created (the C++ client reads one topic or partition)
    reader = client.create_reader(topic, pulsar.MessageId.earliest)
    got = [reader.read_next(RECEIVE_MS) for _ in range(8)]
    assert [index_of(m) for m in got] == list(range(8))
    for i, m in enumerate(got):
        check_fields(m, i)
    assert not reader.has_message_available()
    reader.close()

    exclusive = client.create_reader(topic, ids[4])
    assert index_of(exclusive.read_next(RECEIVE_MS)) == 5
    exclusive.close()
    inclusive = client.create_reader(topic, ids[4], start_message_id_inclusive=True)
    assert index_of(inclusive.read_next(RECEIVE_MS)) == 4
    inclusive.close()

    latest = client.create_reader(topic, pulsar.MessageId.latest)
    assert not latest.has_message_available()
    produce(client, topic, 2, start=8)
    assert [index_of(latest.read_next(RECEIVE_MS)) for _ in range(2)] == [8, 9]
    latest.close()


def test_regex_subscription(target, client, pulsar_broker):
    tag = uuid.uuid4().hex[:8]
    matching = [f"persistent://{NAMESPACE}/rx-{tag}-{s}" for s in ("a", "b")]
    other = f"persistent://{NAMESPACE}/other-{tag}-a"
    create_partitioned_topic(pulsar_broker.admin_url, matching[0], 1)  # the other two: non-partitioned
    for n, topic in enumerate([*matching, other]):
        produce(client, topic, 3, start=10 * n)
    consumer = client.subscribe(re.compile(f"persistent://{NAMESPACE}/rx-{tag}-.*"), "rx",
                                initial_position=pulsar.InitialPosition.Earliest)
    got = receive_n(consumer, 6)
    assert sorted(index_of(m) for m in got) == [0, 1, 2, 10, 11, 12]
    # a partitioned topic's messages name their partition, a non-partitioned topic's the topic
    assert {m.topic_name() for m in got} == {f"{matching[0]}-partition-0", matching[1]}
    for m in got:
        check_fields(m, index_of(m))
    consumer.close()


# ---- Pulsar's Java client -------------------------------------------------------------------------------------


def test_java_client_round_trip_with_python(target, client, pulsar_broker):
    topic = topic_name(target, "java")
    produce(client, topic, 4, start=0)
    java = PulsarJava(pulsar_broker.service_url, pulsar_broker.admin_url)
    java_ids, consumed = java.run(f"produce {topic} 6 true LZ4", f"consume {topic} jsub Shared 10")
    assert len(java_ids) == 6
    # the Java consumer reads Python's messages with every field, then its own
    for i, m in enumerate(consumed[:4]):
        assert m["value"] == body(i).decode()
        assert (m["key"], m["properties"], m["eventTime"]) == (f"k-{i % 4}", {"idx": str(i), "origin": "python"},
                                                               EVENT_BASE + i)
    assert [m["value"] for m in consumed[4:]] == [f"java-{i}" for i in range(6)]
    assert [m["id"] for m in consumed[4:]] == java_ids
    assert all(m["redeliveryCount"] == 0 for m in consumed)

    # and the Python client reads the Java producer's messages (batched, LZ4) with their fields
    reader = client.create_reader(topic, pulsar.MessageId.earliest)
    got = [reader.read_next(RECEIVE_MS) for _ in range(10)][4:]
    reader.close()
    for i, m in enumerate(got):
        assert m.data() == f"java-{i}".encode()
        assert m.partition_key() == f"key-{i % 3}"
        assert m.properties() == {"idx": str(i)}
        assert m.event_timestamp() == 1_700_000_000_000 + i
        assert m.message_id().batch_index() >= 0
    assert [str(m.message_id()) for m in got] == [f"({i.replace(':', ',')})" for i in java_ids]


def _normalised(data: dict, endpoint) -> dict:
    """A LookupData with the endpoint's own addresses replaced by placeholders: what is left must be equal (the
    broker id is host:port of the web service)."""
    pulsar_url, admin_url = endpoint.service_url, endpoint.admin_url.rstrip("/")
    broker_id = admin_url.removeprefix("http://")
    return {k: v.replace("localhost", "127.0.0.1").replace(pulsar_url, "<pulsar>").replace(admin_url, "<http>")
            .replace(broker_id, "<id>") if isinstance(v, str) else v for k, v in data.items()}


def test_http_service_url_lookup(target, pulsar_broker):
    """A client given the admin port's http:// URL as its service URL looks topics up over HTTP (/lookup/v2/...,
    the partitioned metadata and schema REST) and then produces and consumes; the raw LookupData answered for
    a topic names the pulsar:// and http:// addresses of its broker, field by field as Apache Pulsar's."""
    import json
    import urllib.request

    topic = topic_name(target, "http-lookup")
    http_client = pulsar.Client(pulsar_broker.admin_url, operation_timeout_seconds=60,
                                logger=pulsar.ConsoleLogger(pulsar.LoggerLevel.Warn))
    try:
        consumer = http_client.subscribe(topic, "http-sub", initial_position=pulsar.InitialPosition.Earliest)
        produce(http_client, topic, 3)
        got = receive_n(consumer, 3)
        for i, m in enumerate(sorted(got, key=index_of)):
            check_fields(m, i)
        consumer.close()
        # a regex consumer lists the namespace's topics over HTTP too
        pattern = re.compile(f"{topic}.*")  # names of letters, digits and "-" only: no escaping needed
        regex = http_client.subscribe(pattern, "http-regex", initial_position=pulsar.InitialPosition.Earliest)
        assert sorted(index_of(m) for m in receive_n(regex, 3)) == [0, 1, 2]
        regex.close()
    finally:
        http_client.close()

    local = topic.removeprefix("persistent://")
    url = f"{pulsar_broker.admin_url.rstrip('/')}/lookup/v2/topic/persistent/{local}"
    with urllib.request.urlopen(url, timeout=30) as resp:
        assert resp.status == 200
        data = json.loads(resp.read())
    # no TLS on either broker: Pulsar leaves brokerUrlTls and httpUrlTls out and writes brokerUrlSsl empty;
    # brokerId is Pulsar 5.0's
    assert _normalised(data, pulsar_broker) == {
        "brokerId": "<id>", "brokerUrl": "<pulsar>", "httpUrl": "<http>", "nativeUrl": "<pulsar>",
        "brokerUrlSsl": ""}, data


TOKEN_SECRET = b"0123456789abcdef0123456789abcdef"


def test_http_lookup_authenticates_and_authorizes(tmp_path):
    """Ours only, so not parametrized by target (the reference's auth setup differs; one embedded-storage broker
    suffices): the lookup path needs a valid token (401 without), takes any authenticated role rather than only
    super users, and then needs DESCRIBE as the binary LOOKUP does (403 with Pulsar's message); a super user's
    token lets pulsar-client produce and consume over HTTP."""


    from tests.e2e.conftest import KOP_DEFAULTS
    from tests.support.broker import KopBroker

    (tmp_path / "token.key").write_bytes(TOKEN_SECRET)
    broker = KopBroker(tmp_path / "kop", {
        **KOP_DEFAULTS, "messagingProtocols": "kafka,pulsar", "authenticationEnabled": "true",
        "authenticationProviders": "org.apache.pulsar.broker.authentication.AuthenticationProviderToken",
        "tokenSecretKey": f"file://{tmp_path / 'token.key'}", "superUserRoles": "admin",
        "authorizationEnabled": "true", "saslAllowedMechanisms": "PLAIN"})
    broker.start()
    try:
        _http_lookup_with_tokens(broker.pulsar_service_url, broker.admin_url)
    finally:
        broker.stop()


def _http_lookup_with_tokens(service_url: str, admin_url: str) -> None:
    import json
    import urllib.error
    import urllib.request

    import jwt

    topic = f"persistent://{NAMESPACE}/http-auth-{uuid.uuid4().hex[:8]}"
    url = f"{admin_url.rstrip('/')}/lookup/v2/topic/persistent/{topic.split('://')[1]}"

    def get(role: str | None) -> tuple[int, dict]:
        headers = {} if role is None else {
            "Authorization": f"Bearer {jwt.encode({'sub': role}, TOKEN_SECRET, algorithm='HS256')}"}
        try:
            with urllib.request.urlopen(urllib.request.Request(url, headers=headers), timeout=30) as resp:
                return resp.status, json.loads(resp.read())
        except urllib.error.HTTPError as e:
            return e.code, json.loads(e.read())

    assert get(None)[0] == 401
    assert get("bob") == (403, {"reason": "Client is not authorized to Lookup"})  # no ACLs for bob
    status, data = get("admin")
    assert status == 200 and data["brokerUrl"] == service_url, data

    token = jwt.encode({"sub": "admin"}, TOKEN_SECRET, algorithm="HS256")
    http_client = pulsar.Client(admin_url, authentication=pulsar.AuthenticationToken(token),
                                operation_timeout_seconds=60, logger=pulsar.ConsoleLogger(pulsar.LoggerLevel.Warn))
    try:
        consumer = http_client.subscribe(topic, "auth-sub", initial_position=pulsar.InitialPosition.Earliest)
        produce(http_client, topic, 2)
        assert sorted(index_of(m) for m in receive_n(consumer, 2)) == [0, 1]
        consumer.close()
    finally:
        http_client.close()
