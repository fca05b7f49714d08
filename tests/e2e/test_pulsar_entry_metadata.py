"""Broker entry metadata to clients (issue 13): `Message.getIndex()` and `getBrokerPublishTime()` in Pulsar's Java
client, with `exposingBrokerEntryMetadataToClientEnabled`.

A Pulsar-side module (tests/e2e/conftest.py), run on Apache Pulsar standalone (`pulsar`: the reference runs
with the index and broker-timestamp interceptors and the key on, tests/support/pulsar_server.py) and on ours (`kop`, `kop-bk`) with the
key on. Pulsar's index counts a partition's messages from 0 and an entry carries the index of its last message; the
client derives each batched message's own index. Ours is the Kafka offset, so the same messages get the same
indexes on both: three unbatched messages and a batch of four are 0..6 on each target.

On ours, also: the indexes are the Kafka offsets a Kafka consumer sees for those messages, they agree with the
admin REST's getMessageIdByIndex (PIP-415) message by message, and without the key (Pulsar's default, false) the
client gets no index (on both targets).
"""

from __future__ import annotations

import pulsar

from tests.support.admin import ok, topic_url
from tests.support.clients import consume_kafka_python
from tests.support.pulsar_java import PulsarJava

PULSAR_SIDE_TARGETS = ("pulsar", "kop", "kop-bk")


def produce(service_url: str, topic: str) -> None:
    """Three unbatched messages (three entries) and one batch of four (one entry): m-0 .. m-6."""
    client = pulsar.Client(service_url, operation_timeout_seconds=60,
                           logger=pulsar.ConsoleLogger(pulsar.LoggerLevel.Warn))
    single = client.create_producer(topic, batching_enabled=False)
    for i in range(3):
        single.send(f"m-{i}".encode())
    batched = client.create_producer(topic, batching_enabled=True, batching_max_messages=4,
                                     batching_max_publish_delay_ms=60_000)
    for i in range(3, 7):
        batched.send_async(f"m-{i}".encode(), None)
    batched.flush()
    client.close()


def receive(endpoint, topic: str, n: int) -> list[dict]:
    java = PulsarJava(endpoint.service_url, endpoint.admin_url)
    with java.session() as s:
        s(f"subscribe c {topic} sub Exclusive")
        return s(f"receive c {n}")


def test_index_and_broker_publish_time(target):
    endpoint = target.pulsar_broker(exposingBrokerEntryMetadataToClientEnabled="true")
    local = target.topic("bem")
    topic = f"persistent://public/default/{local}"
    produce(endpoint.service_url, topic)
    got = receive(endpoint, topic, 7)
    assert [m["value"] for m in got] == [f"m-{i}" for i in range(7)]
    assert [m["index"] for m in got] == list(range(7))
    assert all(m["brokerPublishTime"] is not None and m["brokerPublishTime"] > 0 for m in got)
    ids = [m["id"].split(":") for m in got]
    assert len({(i[0], i[1]) for i in ids[3:]}) == 1 and [int(i[3]) for i in ids[3:]] == [0, 1, 2, 3]  # one batch
    # the C++ client (pulsar-client) reads the same MESSAGE frames, metadata in front or not
    client = pulsar.Client(endpoint.service_url, operation_timeout_seconds=60,
                           logger=pulsar.ConsoleLogger(pulsar.LoggerLevel.Warn))
    reader = client.create_reader(topic, pulsar.MessageId.earliest)  # non-partitioned
    assert [reader.read_next(60_000).data() for _ in range(7)] == [f"m-{i}".encode() for i in range(7)]
    client.close()
    if not target.is_kop:
        return
    # ours: the index is the Kafka offset, and PIP-415's lookup names the entry that holds it
    kafka = consume_kafka_python(endpoint.handle.bootstrap, local, {0: 7})
    assert [(g.offset, g.value) for g in kafka] == [(m["index"], m["value"].encode()) for m in got]
    admin = topic_url(endpoint.admin_url, local)
    for m, parts in zip(got, ids, strict=True):
        by_index = ok(f"{admin}/getMessageIdByIndex?index={m['index']}")
        assert (str(by_index["ledgerId"]), str(by_index["entryId"])) == (parts[0], parts[1])


def test_no_index_without_the_setting(target):
    """Pulsar's default (false): the client gets no broker entry metadata (the entries still have it: Pulsar's
    interceptors stay on; ours always index). Ours: the shared broker, default settings; the reference: the module's
    own with the key off."""
    endpoint = target.pulsar_broker(pulsar_config={"exposingBrokerEntryMetadataToClientEnabled": "false"})
    topic = f"persistent://public/default/{target.topic('nobem')}"
    produce(endpoint.service_url, topic)
    got = receive(endpoint, topic, 7)
    assert [m["index"] for m in got] == [None] * 7
    assert [m["brokerPublishTime"] for m in got] == [None] * 7
