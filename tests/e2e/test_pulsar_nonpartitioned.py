"""Pulsar's non-partitioned topics (issue 22), beside the partitioned ones, with `pulsar-client` and the admin REST. A
Pulsar-side module (tests/e2e/conftest.py) on `pulsar`, the session's Apache Pulsar standalone (on Pulsar's
default `allowAutoTopicCreationType=non-partitioned`), and on `kop` and `kop-bk`, ours on its own default (the same).
Each test writes its own topic, which the client's producer auto-creates as a non-partitioned topic: partitioned
metadata answers 0, message ids carry partition -1, the topic's name has no `-partition-N` suffix. What is checked:
produce and consume with a zero receiver queue; seek by message id and by publish time; `get_last_message_id`;
readers; the same with Pulsar's Java client; a client over an http:// service URL (HTTP lookup); the admin REST's
create/list/delete of both kinds with Pulsar's status codes, and its 412 for a deletion while clients are connected; a
lookup of a missing name creates nothing, so a partitioned topic of that name can be created next. On our broker only
(no `target`; on each storage backend the run selects): Kafka clients on a non-partitioned topic a Pulsar producer created - one partition, offsets continuous
across both protocols, a consumer group committing.
"""

from __future__ import annotations

import pulsar
import pytest
from kafka import KafkaAdminClient, KafkaConsumer, KafkaProducer, TopicPartition
from kafka.admin import NewPartitions
from kafka.errors import InvalidPartitionsError

from tests.e2e.conftest import targets_for
from tests.support.admin import rest
from tests.support.bookkeeper import KopBookKeeperBroker, shared_cluster
from tests.support.broker import KopBroker
from tests.support.pulsar_java import PulsarJava

PULSAR_SIDE_TARGETS = ("pulsar", "kop", "kop-bk")

RECEIVE_MS = 30_000  # a generous bound for one receive under load; never a measured quantity


def endpoint(target):
    """The module's broker (the session's reference on `pulsar`): Pulsar's default topic kind on every target."""
    return target.pulsar_broker()


@pytest.fixture
def broker(target):
    return endpoint(target)


@pytest.fixture
def client(broker):
    c = pulsar.Client(broker.service_url, operation_timeout_seconds=60,
                      logger=pulsar.ConsoleLogger(pulsar.LoggerLevel.Warn))
    yield c
    c.close()


def admin(broker, method: str, path: str, body: object = None) -> tuple[int, object]:
    return rest(broker.admin_url, method, path, body)


def produce(client: pulsar.Client, topic: str, n: int) -> list[pulsar.MessageId]:
    producer = client.create_producer(topic, batching_enabled=False)
    ids = [producer.send(f"m{i}".encode()) for i in range(n)]
    producer.close()
    return ids


def test_produce_consume_zero_queue_and_last_id(target, client, broker):
    name = target.topic("np")
    topic = f"persistent://public/default/{name}"
    ids = produce(client, topic, 5)
    assert [i.partition() for i in ids] == [-1] * 5
    assert admin(broker, "GET", f"persistent/public/default/{name}/partitions")[1]["partitions"] == 0
    assert client.get_topic_partitions(topic) == [topic]
    consumer = client.subscribe(topic, "s", initial_position=pulsar.InitialPosition.Earliest, receiver_queue_size=0)
    got = [consumer.receive() for _ in range(5)]  # the C++ client takes no timeout with a zero queue
    assert [m.data() for m in got] == [f"m{i}".encode() for i in range(5)]
    assert {m.topic_name() for m in got} == {topic}
    assert [m.message_id().partition() for m in got] == [-1] * 5
    last = consumer.get_last_message_id()
    assert (last.ledger_id(), last.entry_id(), last.partition()) == (ids[-1].ledger_id(), ids[-1].entry_id(), -1)
    consumer.close()


def test_seek_by_id_and_time(target, client):
    topic = f"persistent://public/default/{target.topic('np-seek')}"
    ids = produce(client, topic, 6)
    consumer = client.subscribe(topic, "s", initial_position=pulsar.InitialPosition.Earliest)
    got = [consumer.receive(RECEIVE_MS) for _ in range(6)]
    for m in got:
        consumer.acknowledge(m)
    # on the topic itself, not a partition: the C++ client refuses seek by id on a partitioned topic. The broker
    # resets the cursor to the id and the client drops that very message (no start_message_id_inclusive).
    consumer.seek(ids[2])
    again = consumer.receive(RECEIVE_MS)
    assert again.data() == b"m3" and again.message_id().partition() == -1
    ts = got[4].publish_timestamp()
    first = min(i for i, m in enumerate(got) if m.publish_timestamp() >= ts)  # publish times may tie
    consumer.seek(ts)
    assert consumer.receive(RECEIVE_MS).data() == f"m{first}".encode()
    consumer.close()


def test_reader(target, client):
    topic = f"persistent://public/default/{target.topic('np-reader')}"
    ids = produce(client, topic, 4)
    reader = client.create_reader(topic, pulsar.MessageId.earliest)
    assert [reader.read_next(RECEIVE_MS).data() for _ in range(4)] == [b"m0", b"m1", b"m2", b"m3"]
    assert not reader.has_message_available()
    reader.close()
    after = client.create_reader(topic, ids[1])  # exclusive start: from the message after it
    assert after.read_next(RECEIVE_MS).data() == b"m2"
    after.close()


def test_http_service_url_auto_creates_non_partitioned(target, broker):
    """Over an http:// service URL (HTTP lookup) the producer auto-creates the same kind of topic."""
    name = target.topic("np-http")
    http = pulsar.Client(broker.admin_url, operation_timeout_seconds=60,
                         logger=pulsar.ConsoleLogger(pulsar.LoggerLevel.Warn))
    try:
        ids = produce(http, name, 2)
        assert {i.partition() for i in ids} == {-1}
        consumer = http.subscribe(name, "s", initial_position=pulsar.InitialPosition.Earliest)
        assert [consumer.receive(RECEIVE_MS).data() for _ in range(2)] == [b"m0", b"m1"]
        consumer.close()
    finally:
        http.close()
    assert admin(broker, "GET", f"persistent/public/default/{name}/partitions")[1]["partitions"] == 0


def test_delete_refused_while_clients_are_connected(target, client, broker):
    """Pulsar's 412 for a topic with a connected producer or consumer, deleted once they are gone."""
    name = target.topic("np-busy")
    path = f"persistent/public/default/{name}"
    producer = client.create_producer(name)
    assert admin(broker, "DELETE", path)[0] == 412
    producer.close()
    consumer = client.subscribe(name, "s")
    assert admin(broker, "DELETE", path)[0] == 412
    consumer.close()
    assert admin(broker, "DELETE", path)[0] == 204
    assert admin(broker, "PUT", f"{path}-p/partitions", 2)[0] == 204
    producer = client.create_producer(f"{name}-p")
    assert admin(broker, "DELETE", f"{path}-p/partitions")[0] == 412
    producer.close()
    assert admin(broker, "DELETE", f"{path}-p/partitions")[0] == 204


def test_admin_rest_both_kinds(target, broker):
    np_topic, p_topic = target.topic("np-rest"), target.topic("p-rest")
    base = "persistent/public/default"
    assert admin(broker, "PUT", f"{base}/{np_topic}")[0] == 204
    assert admin(broker, "PUT", f"{base}/{np_topic}")[0] == 409
    assert admin(broker, "PUT", f"{base}/{np_topic}/partitions", 3)[0] == 409
    assert admin(broker, "PUT", f"{base}/{p_topic}/partitions", 2)[0] == 204
    assert admin(broker, "PUT", f"{base}/{p_topic}")[0] == 409
    listed = admin(broker, "GET", base)[1]
    assert f"persistent://public/default/{np_topic}" in listed
    assert {f"persistent://public/default/{p_topic}-partition-{i}" for i in range(2)} <= set(listed)
    partitioned = admin(broker, "GET", f"{base}/partitioned")[1]
    assert f"persistent://public/default/{p_topic}" in partitioned
    assert f"persistent://public/default/{np_topic}" not in partitioned
    assert admin(broker, "GET", f"{base}/{np_topic}/partitions")[1]["partitions"] == 0
    assert admin(broker, "GET", f"{base}/{np_topic}/stats")[0] == 200
    assert admin(broker, "PUT", f"{base}/{p_topic}-partition-1")[0] == 409  # an existing partition's name
    assert admin(broker, "PUT", f"{base}/{p_topic}-partition-5")[0] == 412  # no such partition
    assert admin(broker, "GET", f"{base}/{np_topic}/partitioned-stats")[0] == 404
    assert admin(broker, "DELETE", f"{base}/{np_topic}/partitions")[0] == 409  # the other kind
    assert admin(broker, "DELETE", f"{base}/{p_topic}")[0] == 409
    assert admin(broker, "DELETE", f"{base}/{np_topic}")[0] == 204
    assert admin(broker, "DELETE", f"{base}/{np_topic}")[0] == 404
    assert admin(broker, "DELETE", f"{base}/{np_topic}/partitions")[0] == 404
    assert admin(broker, "DELETE", f"{base}/{p_topic}/partitions")[0] == 204
    listed = admin(broker, "GET", base)[1]
    assert not [t for t in listed if np_topic in t or p_topic in t]


def test_lookup_creates_nothing(target, client, broker):
    """A client's partitioned-metadata lookup of a missing name creates no topic, so creating it with 3 partitions
    afterwards succeeds (ours used to create a 1-partition topic there and answer 409)."""
    name = target.topic("np-lookup")
    topic = f"persistent://public/default/{name}"
    assert client.get_topic_partitions(topic) == [topic]
    assert admin(broker, "PUT", f"persistent/public/default/{name}/partitions", 3)[0] == 204
    assert client.get_topic_partitions(topic) == [f"{topic}-partition-{i}" for i in range(3)]


def test_java_client(target, broker):
    """Pulsar's Java client on a non-partitioned topic: seek by message id, a reader from a message id (the Java
    client refuses that start on a partitioned topic), ids with partition -1. (PulsarJava receives with a timeout,
    which the Java client refuses with a zero receiver queue: that is the Python client's test.)"""
    topic = f"persistent://public/default/{target.topic('np-java')}"
    with PulsarJava(broker.service_url, broker.admin_url).session() as java:
        ids = java(f"produce {topic} 5 false NONE")
        assert {i.split(":")[2] for i in ids} == {"-1"}
        java(f"subscribe c {topic} s Exclusive initial=earliest")
        assert [m["id"] for m in java("receive c 5")] == ids
        java(f"seek c {ids[1]}")
        assert [m["id"] for m in java("receive c 3")] == ids[2:]
        java(f"reader r {topic} {ids[2]}")
        assert [m["id"] for m in java("read r 2")] == ids[3:]


# ------------------------------------------------------------------ ours only: Kafka clients on the same topic


# Ours on the storage backends the run selects (KOP_E2E_TARGET; both by default); embedded when it names neither.
OURS = [t for t in ("kop", "kop-bk") if t in targets_for(__name__, PULSAR_SIDE_TARGETS)] or ["kop"]


@pytest.fixture(scope="module", params=OURS)
def kop(request, tmp_path_factory):
    """Our broker for the Kafka clients' test (Apache Pulsar has no Kafka listener), on each storage backend: Kafka
    clients on a non-partitioned topic are one of #22's Done-when items on `kop` and `kop-bk`."""
    settings = {"offsetsTopicNumPartitions": 1, "groupInitialRebalanceDelayMs": 0}
    b: KopBroker
    if request.param == "kop-bk":
        cluster = shared_cluster()
        cluster.ensure_all_up()
        b = KopBookKeeperBroker(tmp_path_factory.mktemp("kop-bk-np"), cluster, settings)
    else:
        b = KopBroker(tmp_path_factory.mktemp("kop-np"), settings)
    b.start()
    yield b
    b.stop()
    if isinstance(b, KopBookKeeperBroker):
        b.purge()


def test_kafka_clients_on_a_non_partitioned_topic(kop):
    """A Pulsar producer creates the topic; Kafka sees one partition whose offsets continue across both protocols;
    a consumer group reads and commits; a Pulsar consumer then sees the Kafka records with partition -1."""
    name = "np-kafka"
    client = pulsar.Client(kop.pulsar_service_url, operation_timeout_seconds=60,
                           logger=pulsar.ConsoleLogger(pulsar.LoggerLevel.Warn))
    try:
        produce(client, name, 3)
        kp = KafkaProducer(bootstrap_servers=kop.bootstrap)
        offsets = [kp.send(name, f"k{i}".encode()).get(60).offset for i in range(2)]
        kp.close()
        assert offsets == [3, 4]
        consumer = KafkaConsumer(name, bootstrap_servers=kop.bootstrap, group_id="g", auto_offset_reset="earliest",
                                 enable_auto_commit=False, consumer_timeout_ms=RECEIVE_MS)
        assert consumer.partitions_for_topic(name) == {0}
        records = []
        for r in consumer:
            records.append(r)
            if len(records) == 5:
                break
        assert [(r.partition, r.offset, r.value) for r in records] == \
            [(0, i, v) for i, v in enumerate([b"m0", b"m1", b"m2", b"k0", b"k1"])]
        consumer.commit()
        assert consumer.committed(TopicPartition(name, 0)) == 5
        consumer.close()
        kafka_admin = KafkaAdminClient(bootstrap_servers=kop.bootstrap)
        with pytest.raises(InvalidPartitionsError):  # a non-partitioned topic keeps its one partition
            kafka_admin.create_partitions({name: NewPartitions(3)})
        kafka_admin.close()
        sub = client.subscribe(name, "s", initial_position=pulsar.InitialPosition.Earliest)
        got = [sub.receive(RECEIVE_MS) for _ in range(5)]
        assert [m.data() for m in got][3:] == [b"k0", b"k1"]
        assert {m.message_id().partition() for m in got} == {-1}
        assert {m.topic_name() for m in got} == {f"persistent://public/default/{name}"}
    finally:
        client.close()
