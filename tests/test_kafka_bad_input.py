"""Bad input never crashes or hangs the broker, and never harms other connections.

Each test sends one kind of bad input on its own connection, checks Kafka's answer (an error code, or a
closed connection), and then checks that a well-behaved client on another connection still produces and
consumes, and that the broker process is alive. Requests are built with kafka-python's own protocol
classes and batch builder (tests/support/wire.py), independent of the broker's codec.
"""

from __future__ import annotations

import socket
import struct
import time
import uuid

import pytest
from kafka import KafkaConsumer, KafkaProducer, TopicPartition
from kafka.protocol.metadata.api_versions import ApiVersionsRequest
from kafka.protocol.metadata.metadata import MetadataRequest
from kafka.protocol.producer.produce import ProduceRequest
from kafka.record.memory_records import MemoryRecordsBuilder

from tests.support.broker import KopBroker
from tests.support.wire import WireClient

CORRUPT_MESSAGE = 2
UNKNOWN_TOPIC_OR_PARTITION = 3
MESSAGE_TOO_LARGE = 10
UNSUPPORTED_VERSION = 35
INVALID_RECORD = 87
INVALID_REQUIRED_ACKS = 21


@pytest.fixture(scope="module")
def broker(tmp_path_factory):
    b = KopBroker(
        tmp_path_factory.mktemp("kop-bad-input"),
        {"socketRequestMaxBytes": 1024 * 1024, "maxMessageSize": 64 * 1024, "allowAutoTopicCreation": "true"},
    )
    b.start()
    yield b
    b.stop()


def healthy(broker: KopBroker) -> None:
    """A well-behaved client on a fresh connection produces and consumes; the broker process is alive."""
    assert broker.alive(), "broker process died"
    topic = f"healthy-{uuid.uuid4().hex[:8]}"
    producer = KafkaProducer(bootstrap_servers=broker.bootstrap, acks="all", linger_ms=0)
    try:
        for i in range(5):
            producer.send(topic, key=b"k%d" % i, value=b"v%d" % i).get(timeout=30)
    finally:
        producer.close()
    consumer = KafkaConsumer(bootstrap_servers=broker.bootstrap, enable_auto_commit=False, consumer_timeout_ms=10000)
    try:
        tp = TopicPartition(topic, 0)
        consumer.assign([tp])
        consumer.seek_to_beginning(tp)
        got = []
        for m in consumer:  # stops at 5 records, or after consumer_timeout_ms without one
            got.append((m.offset, m.value))
            if len(got) == 5:
                break
    finally:
        consumer.close()
    assert got == [(i, b"v%d" % i) for i in range(5)]
    assert broker.alive()


def closed_by_peer(sock: socket.socket, timeout: float = 10) -> bool:
    sock.settimeout(timeout)
    try:
        while True:
            data = sock.recv(65536)
            if not data:
                return True
    except ConnectionResetError:
        return True
    except TimeoutError:
        return False


def connect(broker: KopBroker) -> socket.socket:
    return socket.create_connection(("127.0.0.1", broker.port), timeout=10)


def batch(n: int = 3, value_size: int = 10) -> bytearray:
    b = MemoryRecordsBuilder(magic=2, compression_type=0, batch_size=1 << 22)
    for i in range(n):
        b.append(timestamp=int(time.time() * 1000), key=b"k%d" % i, value=b"x" * value_size, headers=[])
    b.close()
    return bytearray(b.buffer())


def produce(client: WireClient, topic: str, records: bytes, acks: int = -1, version: int = 9):
    req = ProduceRequest(
        transactional_id=None, acks=acks, timeout_ms=10000,
        topic_data=[ProduceRequest.TopicProduceData(
            name=topic, partition_data=[ProduceRequest.TopicProduceData.PartitionProduceData(index=0, records=bytes(records))],
        )],
    )
    resp = client.send(req, version=version)
    return resp.responses[0].partition_responses[0]


# --------------------------------------------------------------------------- framing and headers


def test_garbage_bytes_close_the_connection(broker):
    s = connect(broker)
    s.sendall(b"\x00\x00\x00\x20" + bytes(range(32)))  # a frame whose header is nonsense
    assert closed_by_peer(s)
    s = connect(broker)
    s.sendall(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")  # 'GET ' read as a 1.2 GB size
    assert closed_by_peer(s)
    healthy(broker)


def test_oversized_and_negative_frames_close_the_connection(broker):
    s = connect(broker)
    s.sendall(struct.pack(">i", 1024 * 1024 + 1))
    assert closed_by_peer(s)
    s = connect(broker)
    s.sendall(struct.pack(">i", -5))
    assert closed_by_peer(s)
    healthy(broker)


def test_truncated_frame_then_disconnect(broker):
    s = connect(broker)
    s.sendall(struct.pack(">i", 5000) + b"\x00\x03\x00\x01")  # promises 5000 bytes, sends 4, hangs up
    s.close()
    # and a truncated frame on a connection that stays open only occupies that connection
    s2 = connect(broker)
    s2.sendall(struct.pack(">i", 5000) + b"\x00\x03")
    healthy(broker)
    s2.close()


def test_unknown_api_key_closes_the_connection(broker):
    s = connect(broker)
    header = struct.pack(">hhih", 999, 0, 1, 3) + b"bad"
    s.sendall(struct.pack(">i", len(header)) + header)
    assert closed_by_peer(s)
    healthy(broker)


def test_unsupported_version_of_a_known_api_closes_the_connection(broker):
    s = connect(broker)
    header = struct.pack(">hhih", 3, 99, 1, -1)  # Metadata v99
    s.sendall(struct.pack(">i", len(header)) + header)
    assert closed_by_peer(s)
    healthy(broker)


def test_newer_api_versions_request_gets_v0_answer_with_our_ranges(broker):
    s = connect(broker)
    header = struct.pack(">hhih", 18, 99, 7, -1)  # ApiVersions v99
    s.sendall(struct.pack(">i", len(header)) + header)
    s.settimeout(10)
    size = struct.unpack(">i", s.recv(4))[0]
    body = b""
    while len(body) < size:
        body += s.recv(size - len(body))
    correlation_id, error_code, n = struct.unpack_from(">ihi", body, 0)
    assert correlation_id == 7
    assert error_code == UNSUPPORTED_VERSION
    keys = {struct.unpack_from(">hhh", body, 10 + 6 * i)[0]: struct.unpack_from(">hhh", body, 10 + 6 * i)[1:] for i in range(n)}
    assert keys[18] == (0, 5)
    assert keys[0][0] == 0  # Produce advertised from v0 (KAFKA-18659)
    s.close()
    with WireClient(broker.bootstrap) as c:
        resp = c.send(ApiVersionsRequest(client_software_name="t", client_software_version="1"), version=3)
        assert resp.error_code == 0
    healthy(broker)


def test_truncated_body_closes_the_connection(broker):
    s = connect(broker)
    header = struct.pack(">hhih", 3, 1, 5, -1) + b"\x00\x00\x00\x05"  # Metadata v1 with 5 topics and no bytes
    s.sendall(struct.pack(">i", len(header)) + header)
    assert closed_by_peer(s)
    healthy(broker)


def test_produce_v2_is_refused(broker):
    s = connect(broker)
    header = struct.pack(">hhih", 0, 2, 5, -1) + b"\x00\x01\x00\x00\x03\xe8\x00\x00\x00\x00"
    s.sendall(struct.pack(">i", len(header)) + header)
    assert closed_by_peer(s)
    healthy(broker)


# --------------------------------------------------------------------------- record batches


def test_bad_crc_is_corrupt_message(broker):
    topic = f"crc-{uuid.uuid4().hex[:8]}"
    data = batch()
    data[-1] ^= 0xFF
    with WireClient(broker.bootstrap) as c:
        r = produce(c, topic, data)
    assert r.error_code == CORRUPT_MESSAGE
    healthy(broker)


def test_bad_magic_is_refused(broker):
    topic = f"magic-{uuid.uuid4().hex[:8]}"
    data = batch()
    data[16] = 1
    with WireClient(broker.bootstrap) as c:
        r = produce(c, topic, data)
    assert r.error_code != 0
    healthy(broker)


def test_wrong_record_count_is_refused(broker):
    topic = f"count-{uuid.uuid4().hex[:8]}"
    data = batch(3)
    struct.pack_into(">i", data, 57, 7)  # records count (not CRC-covered? it is: the CRC catches it too)
    with WireClient(broker.bootstrap) as c:
        r = produce(c, topic, data)
    assert r.error_code in (CORRUPT_MESSAGE, INVALID_RECORD)
    healthy(broker)


def test_truncated_batch_is_corrupt(broker):
    topic = f"trunc-{uuid.uuid4().hex[:8]}"
    data = batch()[:-5]
    with WireClient(broker.bootstrap) as c:
        r = produce(c, topic, data)
    assert r.error_code in (CORRUPT_MESSAGE, INVALID_RECORD)
    healthy(broker)


def test_batch_over_max_message_bytes(broker):
    topic = f"big-{uuid.uuid4().hex[:8]}"
    data = batch(1, value_size=100 * 1024)  # maxMessageSize is 64 KiB on this broker
    with WireClient(broker.bootstrap) as c:
        r = produce(c, topic, data)
        assert r.error_code == MESSAGE_TOO_LARGE
        ok = produce(c, topic, batch(1, value_size=1000))
        assert ok.error_code == 0 and ok.base_offset == 0  # nothing of the refused batch was written
    healthy(broker)


def test_invalid_acks(broker):
    with WireClient(broker.bootstrap) as c:
        r = produce(c, f"acks-{uuid.uuid4().hex[:8]}", batch(), acks=5)
    assert r.error_code == INVALID_REQUIRED_ACKS
    healthy(broker)


def test_produce_to_a_deleted_topic(tmp_path_factory):
    b = KopBroker(tmp_path_factory.mktemp("kop-deleted"), {"allowAutoTopicCreation": "false"})
    b.start()
    try:
        from kafka.admin import KafkaAdminClient, NewTopic

        admin = KafkaAdminClient(bootstrap_servers=b.bootstrap)
        admin.create_topics([NewTopic("doomed", 1, 1)])
        with WireClient(b.bootstrap) as c:
            assert produce(c, "doomed", batch()).error_code == 0
            admin.delete_topics(["doomed"])
            r = produce(c, "doomed", batch())
            assert r.error_code == UNKNOWN_TOPIC_OR_PARTITION
            md = c.send(MetadataRequest(topics=[MetadataRequest.MetadataRequestTopic(name="doomed")],
                                        allow_auto_topic_creation=False), version=9)
            assert md.topics[0].error_code == UNKNOWN_TOPIC_OR_PARTITION
        admin.close()
        admin = KafkaAdminClient(bootstrap_servers=b.bootstrap)
        admin.create_topics([NewTopic("doomed", 1, 1)])  # a new topic of the same name starts empty
        with WireClient(b.bootstrap) as c:
            assert produce(c, "doomed", batch()).base_offset == 0
        admin.close()
        healthy_no_autocreate(b)
    finally:
        b.stop()


def healthy_no_autocreate(b: KopBroker) -> None:
    from kafka.admin import KafkaAdminClient, NewTopic

    admin = KafkaAdminClient(bootstrap_servers=b.bootstrap)
    topic = f"healthy-{uuid.uuid4().hex[:8]}"
    admin.create_topics([NewTopic(topic, 1, 1)])
    admin.close()
    healthy_topic = topic
    producer = KafkaProducer(bootstrap_servers=b.bootstrap, acks="all")
    producer.send(healthy_topic, value=b"ok").get(timeout=30)
    producer.close()
    assert b.alive()
