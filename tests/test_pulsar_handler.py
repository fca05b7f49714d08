"""The pulsar handler plugin (kop/pulsar/handler.py, connection.py, session.py, lookup.py) against a real
`kop standalone`: how it is loaded, its listener, CONNECT/PING, PARTITIONED_METADATA/LOOKUP/GET_TOPICS_OF_NAMESPACE
for topics Kafka's CreateTopics made, and bad input on both ports. Raw frames go through tests/support/pulsar_wire.py
(our codec); the real `pulsar-client` checks that other connections are unharmed."""

from __future__ import annotations

import socket
import struct
import uuid
from collections.abc import Iterator
from pathlib import Path

import pulsar
import pytest

from kop.config import BrokerConfig, ConfigError
from kop.protocol_handler import load_handlers
from kop.pulsar.codec import commands as c
from kop.pulsar.codec.framing import encode_command, encode_message
from tests.support.broker import KopBroker
from tests.support.clients import create_topic, end_offsets
from tests.support.pulsar_wire import WireClient

MAX_MESSAGE = 1024 * 1024


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[KopBroker]:
    b = KopBroker(tmp_path_factory.mktemp("kop-pulsar"), {"maxMessageSize": MAX_MESSAGE})
    b.start()
    yield b
    b.stop()


def wire(broker: KopBroker) -> WireClient:
    w = WireClient(broker.pulsar_port)
    w.connect()
    return w


def name() -> str:
    return f"t-{uuid.uuid4().hex[:10]}"


def round_trip_with_real_client(broker: KopBroker) -> None:
    """A real client produces and consumes one message: the broker still serves everyone."""
    topic = name()
    client = pulsar.Client(broker.pulsar_url, operation_timeout_seconds=30)
    try:
        consumer = client.subscribe(topic, "s", initial_position=pulsar.InitialPosition.Earliest)
        client.create_producer(topic).send(b"still here")
        assert consumer.receive(30000).data() == b"still here"
    finally:
        client.close()


# ---------------------------------------------------------------------------------------------- the plugin
def test_kafka_and_pulsar_are_built_in_and_on_by_default() -> None:
    config = BrokerConfig.from_strings({})
    assert config.protocols == ["kafka", "pulsar"] and config.brokerServicePort == 6650
    assert [h.name for h in load_handlers(config)] == ["kafka", "pulsar"]
    assert [h.name for h in load_handlers(BrokerConfig.from_strings({"messagingProtocols": "kafka"}))] == ["kafka"]
    with pytest.raises(ConfigError, match="no protocol handler named 'mqtt'.*kafka, pulsar"):
        load_handlers(BrokerConfig.from_strings({"messagingProtocols": "kafka,mqtt"}))
    with pytest.raises(ConfigError, match="brokerServicePort"):
        BrokerConfig.from_strings({"brokerServicePort": "70000"})


def test_pyproject_declares_both_entry_points() -> None:
    text = (Path(__file__).resolve().parents[1] / "pyproject.toml").read_text()
    assert 'pulsar = "kop.pulsar.handler:PulsarProtocolHandler"' in text
    assert 'kafka = "kop.kafka.handler:KafkaProtocolHandler"' in text


def test_listener_is_logged_and_test_brokers_get_their_own_port(broker: KopBroker) -> None:
    assert f"pulsar handler listening on pulsar://127.0.0.1:{broker.pulsar_port}" in broker.log_path.read_text()
    assert broker.pulsar_port != 6650


# ---------------------------------------------------------------------------------------------- session
def test_connect_negotiates_the_protocol_version(broker: KopBroker) -> None:
    for asked, answered in ((21, 21), (10, 10), (99, c.MAX_PROTOCOL_VERSION), (0, 0)):
        w = WireClient(broker.pulsar_port)
        got = w.connect(asked)
        assert got.protocol_version == answered
        assert got.server_version.startswith("kop-")
        assert got.max_message_size == MAX_MESSAGE
        w.close()


def test_ping_is_answered_pong(broker: KopBroker) -> None:
    w = wire(broker)
    w.send(c.command(c.PING))
    w.expect(c.PONG)
    w.close()


def test_commands_before_connect_close_the_connection(broker: KopBroker) -> None:
    w = WireClient(broker.pulsar_port)
    w.send(c.command(c.LOOKUP, topic="x", request_id=1))
    assert w.closed_by_peer()


# ---------------------------------------------------------------------------------------------- lookup
def test_partitioned_metadata_of_a_topic_created_with_kafka(broker: KopBroker) -> None:
    topic = name()
    create_topic(broker.bootstrap, topic, partitions=3)
    w = wire(broker)
    for i, asked in enumerate((topic, f"persistent://public/default/{topic}", f"public/default/{topic}")):
        w.send(c.command(c.PARTITIONED_METADATA, topic=asked, request_id=i))
        got = w.expect(c.PARTITIONED_METADATA_RESPONSE)
        assert (got.request_id, got.partitions, got.response) == (i, 3, 0)
    w.send(c.command(c.PARTITIONED_METADATA, topic=f"persistent://public/default/{topic}-partition-2", request_id=9))
    assert w.expect(c.PARTITIONED_METADATA_RESPONSE).partitions == 0  # one partition: not partitioned itself
    w.close()


def test_partitioned_metadata_creates_nothing_on_the_default_kind(broker: KopBroker) -> None:
    """On Pulsar's default (allowAutoTopicCreationType=non-partitioned) PARTITIONED_METADATA of a missing topic
    answers 0 and creates nothing: the PRODUCER or SUBSCRIBE that follows creates the non-partitioned topic."""
    w = wire(broker)
    absent = name()
    for i, allow in enumerate((False, True)):
        w.send(c.command(c.PARTITIONED_METADATA, topic=absent, request_id=i, metadata_auto_creation_enabled=allow))
        got = w.expect(c.PARTITIONED_METADATA_RESPONSE)
        assert (got.partitions, got.response) == (0, 0)
    w.send(c.command(c.PARTITIONED_METADATA, topic=absent, request_id=2))
    assert w.expect(c.PARTITIONED_METADATA_RESPONSE).partitions == 0
    w.close()
    assert absent not in kafka_topics(broker)
    round_trip_with_real_client(broker)


def kafka_topics(broker: KopBroker) -> set[str]:
    """The topics Kafka's Metadata lists (asking for none creates none)."""
    from kafka import KafkaAdminClient

    admin = KafkaAdminClient(bootstrap_servers=broker.bootstrap)
    try:
        return set(admin.list_topics())
    finally:
        admin.close()


def test_partitioned_metadata_creates_a_missing_topic_only_when_allowed(tmp_path: Path) -> None:
    """With allowAutoTopicCreationType=partitioned PARTITIONED_METADATA creates the partitioned topic unless the
    client says metadata_auto_creation_enabled=false."""
    b = KopBroker(tmp_path / "kop", {"allowAutoTopicCreationType": "partitioned"}).start()
    try:
        _partitioned_metadata_answers(b)
    finally:
        b.stop()


def _partitioned_metadata_answers(broker: KopBroker) -> None:
    w = wire(broker)
    absent = name()
    w.send(c.command(c.PARTITIONED_METADATA, topic=absent, request_id=1, metadata_auto_creation_enabled=False))
    got = w.expect(c.PARTITIONED_METADATA_RESPONSE)
    assert (got.partitions, got.response) == (0, 0)
    w.send(c.command(c.PARTITIONED_METADATA, topic=absent, request_id=2))
    assert w.expect(c.PARTITIONED_METADATA_RESPONSE).partitions == 1
    assert end_offsets(broker.bootstrap, absent, 1) == {0: 0}  # Kafka sees the topic it created
    # a non-persistent name is served too (kop/pulsar/nonpersistent_commands.py), in a namespace that exists only
    w.send(c.command(c.PARTITIONED_METADATA, topic="non-persistent://public/default/x", request_id=3))
    assert w.expect(c.PARTITIONED_METADATA_RESPONSE).response == 0
    w.send(c.command(c.PARTITIONED_METADATA, topic="non-persistent://public/nope/x", request_id=5))
    got = w.expect(c.PARTITIONED_METADATA_RESPONSE)
    assert got.response == 1 and got.error == c.ServerError.TopicNotFound
    w.send(c.command(c.PARTITIONED_METADATA, topic="persistent://public/default/bad name", request_id=4))
    got = w.expect(c.PARTITIONED_METADATA_RESPONSE)
    assert got.response == 1 and got.error == c.ServerError.InvalidTopicName
    w.close()


def test_non_persistent_topic_over_the_wire(broker: KopBroker) -> None:
    """A producer with a schema on a non-persistent topic: the schema is the name's (GET_SCHEMA answers it under
    either domain), the receipt names no position, nothing is stored for Kafka clients; acks and seeks are answered,
    GET_LAST_MESSAGE_ID is refused (kop/pulsar/nonpersistent_commands.py)."""
    topic = name()
    w = wire(broker)
    schema = c.pb.Schema(name=topic, schema_data=b"", type=c.pb.Schema.Type.String)
    w.send(c.command(c.PRODUCER, topic=f"non-persistent://public/default/{topic}", producer_id=1, request_id=1,
                     schema=schema))
    version = w.expect(c.PRODUCER_SUCCESS).schema_version
    for i, domain in enumerate(("non-persistent", "persistent")):
        w.send(c.command(c.GET_SCHEMA, topic=f"{domain}://public/default/{topic}", request_id=10 + i))
        got = w.expect(c.GET_SCHEMA_RESPONSE)
        assert (got.schema.type, got.schema_version) == (c.pb.Schema.Type.String, version)
    w.send(c.command(c.SUBSCRIBE, topic=f"non-persistent://public/default/{topic}", subscription="s", subType=0,
                     consumer_id=2, request_id=2))
    w.expect(c.SUCCESS)
    w.send(c.command(c.FLOW, consumer_id=2, messagePermits=10))
    md = c.pb.MessageMetadata(producer_name="x", sequence_id=0, publish_time=1)
    w.raw(encode_message(c.command(c.SEND, producer_id=1, sequence_id=0), md, b"hello"))
    receipt = w.expect(c.SEND_RECEIPT)
    assert (receipt.message_id.ledgerId, receipt.message_id.entryId) == (0, 0)
    delivered = w.expect(c.MESSAGE)
    assert (delivered.consumer_id, delivered.message_id.ledgerId, delivered.message_id.entryId) == (2, 0, 0)
    w.send(c.command(c.ACK, consumer_id=2, ack_type=0, message_id=[c.message_id(0, 0)], request_id=3))
    assert w.expect(c.ACK_RESPONSE).request_id == 3
    w.send(c.command(c.SEEK, consumer_id=2, request_id=4, message_publish_time=0))
    assert w.expect(c.SUCCESS).request_id == 4
    w.send(c.command(c.GET_LAST_MESSAGE_ID, consumer_id=2, request_id=5))
    assert w.expect(c.ERROR).error == c.ServerError.UnknownError
    full = f"non-persistent://public/default/{topic}"
    for rid, mode, listed in ((6, 0, False), (7, 1, True), (8, 2, True)):  # PERSISTENT, NON_PERSISTENT, ALL
        w.send(c.command(c.GET_TOPICS_OF_NAMESPACE, namespace="public/default", request_id=rid, mode=mode))
        assert (full in w.expect(c.GET_TOPICS_OF_NAMESPACE_RESPONSE).topics) == listed
    assert end_offsets(broker.bootstrap, topic, 1) == {0: 0}  # the persistent topic of the name: nothing in it
    w.close()


def test_non_persistent_access_modes(broker: KopBroker) -> None:
    """Exclusive producers on a non-persistent topic as on a persistent one: a Shared one beside it is ProducerBusy,
    ExclusiveWithFencing closes it (CLOSE_PRODUCER) and takes the next topic epoch."""
    topic = f"non-persistent://public/default/{name()}"
    first, second = wire(broker), wire(broker)
    first.send(c.command(c.PRODUCER, topic=topic, producer_id=1, request_id=1, producer_access_mode=1))
    assert first.expect(c.PRODUCER_SUCCESS).topic_epoch == 0
    second.send(c.command(c.PRODUCER, topic=topic, producer_id=1, request_id=2))
    assert second.expect(c.ERROR).error == c.ServerError.ProducerBusy
    second.send(c.command(c.PRODUCER, topic=topic, producer_id=2, request_id=3, producer_access_mode=3))
    assert second.expect(c.PRODUCER_SUCCESS).topic_epoch == 1
    assert first.expect(c.CLOSE_PRODUCER).producer_id == 1
    md = c.pb.MessageMetadata(producer_name="x", sequence_id=0, publish_time=1)
    first.raw(encode_message(c.command(c.SEND, producer_id=1, sequence_id=0), md, b"late"))
    assert first.expect(c.SEND_ERROR).error == c.ServerError.NotAllowedError  # that producer is gone
    # maxMessageSize binds a non-persistent SEND as a persistent one (produce.size_refusal)
    second.raw(encode_message(c.command(c.SEND, producer_id=2, sequence_id=0), md, b"x" * (MAX_MESSAGE + 100)))
    refused = second.expect(c.SEND_ERROR)
    assert refused.error == c.ServerError.NotAllowedError and "maxMessageSize" in refused.message
    first.close()
    second.close()


def test_lookup_connects_to_this_broker(broker: KopBroker) -> None:
    topic = name()
    create_topic(broker.bootstrap, topic, partitions=2)
    w = wire(broker)
    w.send(c.command(c.LOOKUP, topic=f"persistent://public/default/{topic}-partition-1", request_id=5))
    got = w.expect(c.LOOKUP_RESPONSE)
    assert got.response == c.pb.CommandLookupTopicResponse.Connect
    assert got.brokerServiceUrl == broker.pulsar_url and got.authoritative and got.request_id == 5
    w.send(c.command(c.LOOKUP, topic=f"persistent://public/default/{topic}-partition-7", request_id=6))
    got = w.expect(c.LOOKUP_RESPONSE)
    assert got.response == c.pb.CommandLookupTopicResponse.Failed and got.error == c.ServerError.TopicNotFound
    # a regex consumer's pattern (the Java client places its topic-list watcher by it): found, like Pulsar, not
    # refused - and no topic of that name is created
    pattern = f"persistent://public/default/{topic}-.*"
    w.send(c.command(c.LOOKUP, topic=pattern, request_id=7))
    got = w.expect(c.LOOKUP_RESPONSE)
    assert got.response == c.pb.CommandLookupTopicResponse.Connect and got.brokerServiceUrl == broker.pulsar_url
    w.send(c.command(c.PRODUCER, topic=pattern, producer_id=1, request_id=8))
    assert w.expect(c.ERROR).error == c.ServerError.InvalidTopicName
    w.close()


def test_topics_of_namespace_with_and_without_a_pattern(broker: KopBroker) -> None:
    stem = f"rx{uuid.uuid4().hex[:6]}"
    create_topic(broker.bootstrap, f"{stem}-a", partitions=2)
    create_topic(broker.bootstrap, f"{stem}-b", partitions=1)
    create_topic(broker.bootstrap, f"other{stem}", partitions=1)
    w = wire(broker)
    w.send(c.command(c.GET_TOPICS_OF_NAMESPACE, namespace="public/default", request_id=1))
    got = w.expect(c.GET_TOPICS_OF_NAMESPACE_RESPONSE)
    base = "persistent://public/default/"
    assert {f"{base}{stem}-a-partition-0", f"{base}{stem}-a-partition-1", f"{base}{stem}-b-partition-0",
            f"{base}other{stem}-partition-0"} <= set(got.topics)
    assert not any("__consumer_offsets" in t for t in got.topics)
    w.send(c.command(c.GET_TOPICS_OF_NAMESPACE, namespace="public/default", request_id=2,
                     topics_pattern=f"{base}{stem}-.*"))
    got = w.expect(c.GET_TOPICS_OF_NAMESPACE_RESPONSE)
    assert sorted(got.topics) == [f"{base}{stem}-a-partition-0", f"{base}{stem}-a-partition-1",
                                  f"{base}{stem}-b-partition-0"]
    assert got.filtered
    w.close()


# ---------------------------------------------------------------------------------------------- bad input
def test_garbage_and_a_kafka_client_on_the_pulsar_port_are_disconnected(broker: KopBroker) -> None:
    with socket.create_connection(("127.0.0.1", broker.pulsar_port), timeout=30) as s:
        s.sendall(b"\xff" * 64)
        assert s.recv(100) == b""
    # A Kafka ApiVersions v3 request, as kafka clients open with.
    body = struct.pack(">hhi", 18, 3, 1) + struct.pack(">h", 4) + b"test" + b"\x00" + b"\x05kafka\x041.0\x00"
    with socket.create_connection(("127.0.0.1", broker.pulsar_port), timeout=30) as s:
        s.sendall(struct.pack(">i", len(body)) + body)
        assert s.recv(100) == b""
    with socket.create_connection(("127.0.0.1", broker.pulsar_port), timeout=30) as s:
        s.sendall(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
        assert s.recv(100) == b""
    round_trip_with_real_client(broker)


def test_a_pulsar_client_on_the_kafka_port_fails_cleanly(broker: KopBroker) -> None:
    client = pulsar.Client(f"pulsar://{broker.bootstrap}", operation_timeout_seconds=5)
    try:
        with pytest.raises(Exception):  # noqa: B017, PT011 - the client's own connect/timeout error
            client.create_producer(name())
    finally:
        client.close()
    assert end_offsets(broker.bootstrap, "__consumer_offsets", 1) is not None  # Kafka side still serves
    round_trip_with_real_client(broker)


def test_truncated_frames_and_oversized_frames(broker: KopBroker) -> None:
    w = wire(broker)
    frame = encode_command(c.command(c.PING))
    w.raw(frame[:5])  # a frame cut in the middle, then the peer goes
    w.close()
    w = wire(broker)
    w.raw(struct.pack(">II", MAX_MESSAGE + 20 * 1024, 4))  # announces more than maxMessageSize + 10 KiB
    assert w.closed_by_peer()
    round_trip_with_real_client(broker)


def test_strings_that_are_not_utf8_close_the_connection(broker: KopBroker) -> None:
    """Found by the fuzzer: protobuf hands a non-UTF-8 string over as bytes, and handlers raised on it."""
    for cmd in (c.command(c.LOOKUP, topic="t-xyz", request_id=1),
                c.command(c.PRODUCER, topic="t-xyz", producer_id=1, request_id=2),
                c.command(c.GET_TOPICS_OF_NAMESPACE, namespace="public/t-xyz", request_id=3)):
        w = wire(broker)
        body = cmd.SerializeToString().replace(b"t-xyz", b"t-x\xffz")
        w.raw(struct.pack(">II", len(body) + 4, len(body)) + body)
        assert w.closed_by_peer()
    assert "that is not UTF-8" in broker.log_path.read_text(errors="replace")
    assert "unexpected error" not in broker.log_path.read_text(errors="replace")
    round_trip_with_real_client(broker)


def test_unknown_commands_leave_the_connection_usable(broker: KopBroker) -> None:
    w = wire(broker)
    w.raw(struct.pack(">II", 6, 2) + b"\x08\x32")  # BaseCommand{type=50}: outside our schema
    w.send(c.command(c.GET_SCHEMA_RESPONSE, request_id=77))  # in our schema, not served (a broker's answer)
    got = w.expect(c.ERROR)
    assert got.request_id == 77 and got.error == c.ServerError.NotAllowedError
    w.send(c.command(c.PING))
    w.expect(c.PONG)
    w.close()


def test_send_errors_checksum_size_and_unknown_producer(broker: KopBroker) -> None:
    topic = name()
    w = wire(broker)
    w.send(c.command(c.PRODUCER, topic=topic, producer_id=1, request_id=1))
    ok = w.expect(c.PRODUCER_SUCCESS)
    assert ok.HasField("schema_version")  # Pulsar's Java client reads it unconditionally
    md = c.MessageMetadata(producer_name="x", sequence_id=0, publish_time=1)
    data = bytearray(encode_message(c.command(c.SEND, producer_id=1, sequence_id=0), md, b"payload"))
    data[-1] ^= 0xFF  # the payload no longer matches its CRC32C
    w.raw(bytes(data))
    got = w.expect(c.SEND_ERROR)
    assert (got.sequence_id, got.error) == (0, c.ServerError.ChecksumError)
    big = b"x" * (MAX_MESSAGE + 1024)  # within the frame limit, over maxMessageSize
    w.send_message(c.command(c.SEND, producer_id=1, sequence_id=1), md, big)
    got = w.expect(c.SEND_ERROR)
    assert got.sequence_id == 1 and "maxMessageSize" in got.message
    w.send_message(c.command(c.SEND, producer_id=42, sequence_id=2), md, b"p")
    assert w.expect(c.SEND_ERROR).sequence_id == 2
    w.send_message(c.command(c.SEND, producer_id=1, sequence_id=3), md, b"good")
    got = w.expect(c.SEND_RECEIPT)
    assert got.sequence_id == 3 and got.message_id.partition == -1  # the producer made a non-partitioned topic
    assert end_offsets(broker.bootstrap, topic, 1) == {0: 1}  # only the good one was stored
    w.close()


def test_no_producer_on_internal_topics(broker: KopBroker) -> None:
    w = wire(broker)
    w.send(c.command(c.PRODUCER, topic="persistent://public/__kafka/__consumer_offsets-partition-0", producer_id=1,
                     request_id=1))
    got = w.expect(c.ERROR)
    assert got.error == c.ServerError.NotAllowedError and "internal" in got.message
    w.close()


def test_reserved_and_empty_subscription_names(broker: KopBroker) -> None:
    w = wire(broker)
    for i, sub in enumerate(("", "pulsar.dedup")):  # the de-duplication cursor's name
        w.send(c.command(c.SUBSCRIBE, topic=name(), subscription=sub, subType=0, consumer_id=i, request_id=i))
        assert w.expect(c.ERROR).error == c.ServerError.InvalidTopicName
    w.close()


def test_acks_for_ids_never_delivered_and_flow_storms(broker: KopBroker) -> None:
    topic = name()
    w = wire(broker)
    w.send(c.command(c.SUBSCRIBE, topic=topic, subscription="s", subType=1, consumer_id=1, request_id=1))
    w.expect(c.SUCCESS)
    w.send(c.command(c.ACK, consumer_id=1, ack_type=0,
                     message_id=[c.message_id(999, 5), c.message_id(1, 1 << 40)]))
    w.send(c.command(c.ACK, consumer_id=1, ack_type=1, message_id=[c.message_id(123456, 0)]))
    w.send(c.command(c.ACK, consumer_id=77, ack_type=0, message_id=[c.message_id(1, 1)]))  # unknown consumer
    storm = b"".join(encode_command(c.command(c.FLOW, consumer_id=cid, messagePermits=2**31 - 1))
                     for cid in (1, 2) for _ in range(5000))
    w.raw(storm)
    w.send(c.command(c.PING))
    w.expect(c.PONG)
    round_trip_with_real_client(broker)
    # The subscription still works: a message produced now reaches this consumer.
    client = pulsar.Client(broker.pulsar_url, operation_timeout_seconds=30)
    try:
        client.create_producer(topic).send(b"after the storm")
    finally:
        client.close()
    frame = w.recv()
    while frame is not None and frame.type != c.MESSAGE:
        frame = w.recv()
    assert frame is not None and frame.inner.consumer_id == 1
    w.close()
