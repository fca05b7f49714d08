"""The sans-IO Pulsar codec against the real ``pulsar-client`` (the C++ client inside the PyPI package).

No broker: each test runs a tiny asyncio server on 127.0.0.1 built only from kop.pulsar.codec. It
answers the handshake (CONNECT, PARTITIONED_METADATA, LOOKUP, PRODUCER, SUBSCRIBE) and records what
the client sends. Producer side: the SEND frames of batched and unbatched producers, with each
compression and every mapped field, must decode to exactly what the application sent, and
kop.pulsar.convert must turn them into Kafka records with the mapped key/timestamp/headers. Consumer
side: MESSAGE frames our encoder builds from a Kafka batch (via convert.py) must reach the client with
the mapped fields and the message ids we chose.
"""

from __future__ import annotations

import asyncio
import logging
import queue
import threading
from collections.abc import Iterator

import pulsar
import pytest

from kop.protocol.records import build_batch, decode_records_absolute
from kop.pulsar.codec import batch as pbatch
from kop.pulsar.codec import commands as c
from kop.pulsar.codec import framing
from kop.pulsar.codec.compression import LZ4, NONE, SNAPPY, ZLIB, ZSTD
from kop.pulsar.convert import ORDERING_KEY_HEADER, kafka_to_pulsar, pulsar_to_kafka

LEDGER = 77
PY_CODECS = {
    NONE: pulsar.CompressionType.NONE,
    LZ4: pulsar.CompressionType.LZ4,
    ZLIB: pulsar.CompressionType.ZLib,
    ZSTD: pulsar.CompressionType.ZSTD,
    SNAPPY: pulsar.CompressionType.SNAPPY,
}


class CodecServer:
    """Just enough of a Pulsar broker to hold a producer and a consumer, on our codec only.

    ``sends`` receives every SEND frame (with a copy of its headers_and_payload); ``acks`` every ACK
    command; ``entries`` (set by a test) are pushed as MESSAGE frames once a consumer sends FLOW.
    """

    def __init__(self) -> None:
        self.sends: queue.Queue[framing.Frame] = queue.Queue()
        self.acks: queue.Queue = queue.Queue()
        self.entries: list[tuple[int, bytes]] = []  # (entry id, headers_and_payload)
        self.connects: list = []
        self.errors: list[BaseException] = []
        self._loop = asyncio.new_event_loop()
        self._ready = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self.port = 0
        self._next_entry = 0

    def start(self) -> None:
        self._thread.start()
        assert self._ready.wait(30), "codec server did not start"

    def stop(self) -> None:
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(30)

    @property
    def url(self) -> str:
        return f"pulsar://127.0.0.1:{self.port}"

    def _run(self) -> None:
        asyncio.set_event_loop(self._loop)
        server = self._loop.run_until_complete(asyncio.start_server(self._serve, "127.0.0.1", 0))
        self.port = server.sockets[0].getsockname()[1]
        self._ready.set()
        self._loop.run_forever()
        server.close()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        frames = framing.FrameReader()
        try:
            while data := await reader.read(65536):
                for frame in frames.frames(data):
                    for answer in self._answer(frame):
                        writer.write(answer)
                await writer.drain()
        except Exception as exc:  # recorded: a test fails on any server-side error
            self.errors.append(exc)
        finally:
            writer.close()

    def _answer(self, frame: framing.Frame) -> Iterator[bytes]:  # noqa: C901 - one branch per command
        t, cmd = frame.type, frame.inner
        enc = framing.encode_command
        if t == c.CONNECT:
            self.connects.append(cmd)
            yield enc(c.command(c.CONNECTED, server_version="kop-codec-test",
                                protocol_version=min(cmd.protocol_version, c.MAX_PROTOCOL_VERSION),
                                max_message_size=framing.DEFAULT_MAX_MESSAGE_SIZE))
        elif t == c.PARTITIONED_METADATA:
            yield enc(c.command(c.PARTITIONED_METADATA_RESPONSE, request_id=cmd.request_id, partitions=0,
                                response=c.pb.CommandPartitionedTopicMetadataResponse.Success))
        elif t == c.LOOKUP:
            yield enc(c.command(c.LOOKUP_RESPONSE, request_id=cmd.request_id, brokerServiceUrl=self.url,
                                response=c.pb.CommandLookupTopicResponse.Connect, authoritative=True))
        elif t == c.PRODUCER:
            yield enc(c.command(c.PRODUCER_SUCCESS, request_id=cmd.request_id,
                                producer_name=cmd.producer_name or "codec-test-0", last_sequence_id=-1))
        elif t == c.SEND:
            entry = self._next_entry
            self._next_entry += 1
            kept = framing.Frame(frame.command, memoryview(bytes(frame.headers_and_payload)))
            framing.split_headers_and_payload(kept)
            self.sends.put(kept)
            yield enc(c.command(c.SEND_RECEIPT, producer_id=cmd.producer_id, sequence_id=cmd.sequence_id,
                                message_id=c.message_id(LEDGER, entry)))
        elif t == c.SUBSCRIBE:
            yield enc(c.command(c.SUCCESS, request_id=cmd.request_id))
        elif t == c.FLOW:
            entries, self.entries = self.entries, []
            for entry_id, headers_and_payload in entries:
                msg = c.command(c.MESSAGE, consumer_id=cmd.consumer_id,
                                message_id=c.message_id(LEDGER, entry_id))
                yield framing.encode_payload_command(msg, headers_and_payload)
        elif t == c.ACK:
            self.acks.put(cmd)
        elif t in (c.CLOSE_PRODUCER, c.CLOSE_CONSUMER, c.UNSUBSCRIBE):
            yield enc(c.command(c.SUCCESS, request_id=cmd.request_id))
        elif t == c.PING:
            yield enc(c.command(c.PONG))


@pytest.fixture
def server() -> Iterator[CodecServer]:
    s = CodecServer()
    s.start()
    yield s
    s.stop()
    assert not s.errors, s.errors


@pytest.fixture
def client(server: CodecServer) -> Iterator[pulsar.Client]:
    quiet = logging.getLogger("pulsar-client-test")
    quiet.setLevel(logging.ERROR)
    cl = pulsar.Client(server.url, operation_timeout_seconds=20, logger=quiet)
    yield cl
    cl.close()


TOPIC = "persistent://public/default/codec"


def _sent(server: CodecServer) -> framing.Frame:
    return server.sends.get(timeout=30)


# ---- producer side -----------------------------------------------------------------------------------


@pytest.mark.parametrize("codec", list(PY_CODECS))
def test_unbatched_send_decodes_and_converts(server: CodecServer, client: pulsar.Client, codec: int) -> None:
    producer = client.create_producer(TOPIC, producer_name="p-unbatched", compression_type=PY_CODECS[codec])
    connect = server.connects[0]
    assert connect.client_version.startswith("Pulsar-CPP") and connect.protocol_version >= 18
    value = b"unbatched value " * 40  # long enough that every codec really compresses it
    producer.send(value, properties={"h1": "v1", "h2": "v2"}, partition_key="pk-1", ordering_key="ok-1",
                  event_timestamp=1_700_000_000_123)
    frame = _sent(server)
    send, md = frame.inner, frame.metadata
    assert (send.producer_id, send.sequence_id, send.num_messages) == (0, 0, 1)
    assert frame.checksum is not None  # the client checksums (we answered protocol >= 6)
    assert md.producer_name == "p-unbatched" and md.sequence_id == 0
    assert md.partition_key == "pk-1" and md.ordering_key == b"ok-1"
    assert md.event_time == 1_700_000_000_123 and md.publish_time > 0
    assert {kv.key: kv.value for kv in md.properties} == {"h1": "v1", "h2": "v2"}
    assert not pbatch.is_batch(md)
    assert md.compression == codec
    [(smm, payload)] = pbatch.messages(md, frame.payload)
    assert smm is None and bytes(payload) == value
    if codec:
        assert md.uncompressed_size == len(value) and len(frame.payload) < len(value)

    [rec] = decode_records_absolute(pulsar_to_kafka(md, frame.payload, 100))
    assert rec.offset == 100
    assert rec.key == b"pk-1"  # the partition key is the key; the other ordering key rides in a header (#22)
    assert rec.timestamp == 1_700_000_000_123  # event time wins over the publish time
    assert rec.value == value
    assert sorted(rec.headers) == [("h1", b"v1"), ("h2", b"v2"), (ORDERING_KEY_HEADER, b"ok-1")]
    producer.close()


def test_unbatched_send_without_optional_fields(server: CodecServer, client: pulsar.Client) -> None:
    producer = client.create_producer(TOPIC)
    producer.send(b"plain", partition_key="only-pk")
    frame = _sent(server)
    md = frame.metadata
    assert not md.HasField("ordering_key") and md.event_time == 0 and not md.properties
    assert md.producer_name == "codec-test-0"  # the name our PRODUCER_SUCCESS gave it
    [rec] = decode_records_absolute(pulsar_to_kafka(md, frame.payload, 0))
    assert rec.key == b"only-pk"  # no ordering key: the partition key
    assert rec.timestamp == md.publish_time  # no event time: the publish time
    assert rec.headers == []
    producer.close()


@pytest.mark.parametrize("codec", list(PY_CODECS))
def test_batched_send_decodes_and_converts(server: CodecServer, client: pulsar.Client, codec: int) -> None:
    producer = client.create_producer(
        TOPIC, producer_name="p-batched", compression_type=PY_CODECS[codec], batching_enabled=True,
        batching_max_messages=5, batching_max_publish_delay_ms=60_000)
    for i in range(5):
        producer.send_async(
            f"value-{i}".encode() * 20, None, properties={"i": str(i)}, partition_key=f"pk-{i}",
            ordering_key=None if i == 3 else f"ok-{i}", event_timestamp=None if i == 4 else 1_600_000_000_000 + i)
    producer.flush()
    frame = _sent(server)
    send, md = frame.inner, frame.metadata
    assert send.num_messages == 5 and md.num_messages_in_batch == 5
    assert md.compression == codec
    msgs = pbatch.messages(md, frame.payload)
    assert [bytes(p) for _, p in msgs] == [f"value-{i}".encode() * 20 for i in range(5)]
    assert [s.partition_key for s, _ in msgs] == [f"pk-{i}" for i in range(5)]
    assert [s.ordering_key for s, _ in msgs] == [b"ok-0", b"ok-1", b"ok-2", b"", b"ok-4"]
    assert [s.event_time for s, _ in msgs] == [1_600_000_000_000 + i for i in range(4)] + [0]
    assert [{kv.key: kv.value for kv in s.properties} for s, _ in msgs] == [{"i": str(i)} for i in range(5)]

    records = decode_records_absolute(pulsar_to_kafka(md, frame.payload, 500))
    assert [r.offset for r in records] == [500, 501, 502, 503, 504]  # N messages = N offsets
    assert [r.key for r in records] == [f"pk-{i}".encode() for i in range(5)]
    assert [r.timestamp for r in records] == [1_600_000_000_000 + i for i in range(4)] + [md.publish_time]
    assert [r.headers for r in records] == [[("i", str(i).encode())] + ([] if i == 3 else [
        (ORDERING_KEY_HEADER, f"ok-{i}".encode())]) for i in range(5)]
    producer.close()


# ---- consumer side -----------------------------------------------------------------------------------


def _kafka_batch(compression: int = 0) -> bytes:
    return build_batch([
        (b"key-0", b"v0", [("h", b"x0"), ("n", None)], 1_650_000_000_000),
        (None, b"v1", [], 1_650_000_000_001),
        (b"key-2", None, [("h", b"x2")], 1_650_000_000_002),  # a tombstone
        (b"\x00\xffbin", b"v3", [], 1_650_000_000_003),
    ], base_offset=40, compression=compression)


@pytest.mark.parametrize("codec", list(PY_CODECS))
def test_consumer_receives_kafka_batch_with_mapped_fields(
        server: CodecServer, client: pulsar.Client, codec: int) -> None:
    entry = kafka_to_pulsar(_kafka_batch(compression=1), compression=codec)
    server.entries = [(9, framing.encode_headers_and_payload(entry.metadata, entry.payload))]
    consumer = client.subscribe(TOPIC, "sub", initial_position=pulsar.InitialPosition.Earliest)
    got = [consumer.receive(timeout_millis=30_000) for _ in range(4)]
    ids = [(m.message_id().ledger_id(), m.message_id().entry_id(), m.message_id().batch_index()) for m in got]
    assert ids == [(LEDGER, 9, i) for i in range(4)]
    # The Python wrapper decodes ordering keys as UTF-8, so the binary key's is not readable there; its
    # partition key is the base64 text (partition_key_b64_encoded), which Java's getKeyBytes() decodes.
    assert [m.ordering_key() for m in got[:3]] == ["key-0", "", "key-2"]
    assert [m.partition_key() for m in got] == ["key-0", "", "key-2", "AP9iaW4="]
    assert [m.event_timestamp() for m in got] == [1_650_000_000_000 + i for i in range(4)]
    assert [m.properties() for m in got] == [{"h": "x0", "n": ""}, {}, {"h": "x2"}, {}]
    assert [m.data() for m in got] == [b"v0", b"v1", b"", b"v3"]
    assert [m.has_null_value() for m in got] == [False, False, True, False]
    assert all(m.publish_timestamp() == 1_650_000_000_000 for m in got)
    for m in got:
        consumer.acknowledge(m)
    consumer.close()  # flushes the grouped acks
    ack = server.acks.get(timeout=30)
    assert [(i.ledgerId, i.entryId) for i in ack.message_id] == [(LEDGER, 9)]


def test_consumer_receives_unbatched_pulsar_entry_as_sent(server: CodecServer, client: pulsar.Client) -> None:
    """A producer's SEND bytes, stored and pushed back unchanged after a MESSAGE command."""
    producer = client.create_producer(TOPIC, compression_type=pulsar.CompressionType.ZSTD)
    producer.send(b"round trip " * 10, properties={"a": "b"}, ordering_key="ok", partition_key="pk",
                  event_timestamp=1_234)
    stored = bytes(_sent(server).stored_bytes)
    server.entries = [(3, stored)]
    consumer = client.subscribe(TOPIC, "sub2", initial_position=pulsar.InitialPosition.Earliest)
    m = consumer.receive(timeout_millis=30_000)
    assert m.data() == b"round trip " * 10
    assert (m.ordering_key(), m.partition_key(), m.event_timestamp(), m.properties()) == ("ok", "pk", 1_234,
                                                                                          {"a": "b"})
    assert (m.message_id().ledger_id(), m.message_id().entry_id(), m.message_id().batch_index()) == (LEDGER, 3, -1)
    consumer.close()
    producer.close()


def test_consumer_accepts_entries_with_broker_entry_metadata(server: CodecServer, client: pulsar.Client) -> None:
    """Stored entries carry 0x0e02 broker entry metadata (index = offset of the last message); a client
    that announced supports_broker_entry_metadata skips it, so the handler may forward entries as stored."""
    entry = kafka_to_pulsar(build_batch([(b"k", b"a", [], 1), (b"k", b"b", [], 2)]))
    bem = c.BrokerEntryMetadata(broker_timestamp=1_700_000_000_000, index=41)
    server.entries = [(5, framing.encode_headers_and_payload(entry.metadata, entry.payload, broker_entry_metadata=bem))]
    consumer = client.subscribe(TOPIC, "sub3", initial_position=pulsar.InitialPosition.Earliest)
    assert server.connects[0].feature_flags.supports_broker_entry_metadata
    got = [consumer.receive(timeout_millis=30_000) for _ in range(2)]
    assert [(m.data(), m.message_id().entry_id(), m.message_id().batch_index()) for m in got] == [
        (b"a", 5, 0), (b"b", 5, 1)]
    consumer.close()
