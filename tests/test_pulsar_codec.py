"""kop/pulsar/codec: frames, commands, batch payloads and compression, as a specification.

The real-client half of the proof is tests/test_pulsar_real_client.py; this file pins the byte layout,
the limits and the errors a hostile or broken peer meets.
"""

from __future__ import annotations

import re
import struct
from pathlib import Path

import pytest

from kop.protocol.records import crc32c
from kop.pulsar.codec import batch as pbatch
from kop.pulsar.codec import commands as c
from kop.pulsar.codec import compression as pz
from kop.pulsar.codec import framing as f
from kop.pulsar.codec import regenerate


def _send(seq: int = 1, payload: bytes = b"hello", checksum: bool = True) -> bytes:
    md = c.MessageMetadata(producer_name="p", sequence_id=seq, publish_time=1000)
    return f.encode_message(c.command(c.SEND, producer_id=7, sequence_id=seq), md, payload, checksum)


# ---- commands ----------------------------------------------------------------------------------------


def test_command_field_numbers_equal_their_type_numbers() -> None:
    assert c.FIELD_BY_TYPE[c.PARTITIONED_METADATA] == "partitionMetadata"
    assert c.FIELD_BY_TYPE[c.LOOKUP_RESPONSE] == "lookupTopicResponse"
    assert c.FIELD_BY_TYPE[c.GET_OR_CREATE_SCHEMA_RESPONSE] == "getOrCreateSchemaResponse"
    for number, name in c.FIELD_BY_TYPE.items():
        assert c.BaseCommand.DESCRIPTOR.fields_by_name[name].number == number
        assert c.type_name(number) != f"UNKNOWN({number})"
    # Every command the brief lists is in our subset.
    for name in ("CONNECT CONNECTED PING PONG PARTITIONED_METADATA PARTITIONED_METADATA_RESPONSE LOOKUP "
                 "LOOKUP_RESPONSE GET_TOPICS_OF_NAMESPACE GET_TOPICS_OF_NAMESPACE_RESPONSE PRODUCER "
                 "PRODUCER_SUCCESS SEND SEND_RECEIPT SEND_ERROR CLOSE_PRODUCER SUBSCRIBE SUCCESS ERROR FLOW "
                 "MESSAGE ACK ACK_RESPONSE REDELIVER_UNACKNOWLEDGED_MESSAGES SEEK GET_LAST_MESSAGE_ID "
                 "GET_LAST_MESSAGE_ID_RESPONSE UNSUBSCRIBE CLOSE_CONSUMER REACHED_END_OF_TOPIC "
                 "ACTIVE_CONSUMER_CHANGE CONSUMER_STATS CONSUMER_STATS_RESPONSE GET_SCHEMA GET_SCHEMA_RESPONSE "
                 "GET_OR_CREATE_SCHEMA GET_OR_CREATE_SCHEMA_RESPONSE").split():
        assert getattr(c, name) in c.FIELD_BY_TYPE


def test_known_wire_bytes() -> None:
    """Bytes worked out by hand from the field numbers: type=7 (field 1), send_receipt (field 7) with
    producer_id=1, sequence_id=2, message_id {ledgerId=3, entryId=4}; PONG = type 19 + empty field 19."""
    receipt = c.command(c.SEND_RECEIPT, producer_id=1, sequence_id=2, message_id=c.message_id(3, 4))
    assert receipt.SerializeToString() == bytes.fromhex("0807" "3a0a" "0801" "1002" "1a04" "0803" "1004")
    assert f.encode_command(c.command(c.PONG)) == struct.pack(">II", 9, 5) + bytes.fromhex("0813" "9a0100")
    flow = c.command(c.FLOW, consumer_id=5, messagePermits=1000)
    assert flow.SerializeToString() == bytes.fromhex("080b" "5a05" "0805" "10e807")


def test_message_id_defaults_and_negative_ids() -> None:
    mid = c.message_id(1, 2)
    assert (mid.partition, mid.batch_index) == (-1, -1) and not mid.HasField("partition")
    assert c.message_id(1, 2, partition=3, batch_index=4).SerializeToString() == bytes.fromhex("0801100218032004")
    # (-1, -1) (earliest / "nothing yet") is uint64 on the wire; the upb runtime hands back 2**64-1.
    assert c.message_id(-1, -1).ledgerId == 2**64 - 1


def test_error_builders() -> None:
    err = c.error(9, c.ServerError.Value("ProducerBusy"), "busy")
    assert (err.type, err.error.request_id, err.error.error, err.error.message) == (c.ERROR, 9, 16, "busy")
    se = c.send_error(1, 2, c.ServerError.Value("ChecksumError"), "bad crc")
    assert (se.send_error.producer_id, se.send_error.sequence_id, se.send_error.error) == (1, 2, 9)


def test_committed_generated_module_matches_the_proto(tmp_path: Path) -> None:
    """pulsar_api_pb2.py must be regenerated after editing pulsar_api.proto."""
    def descriptor(text: str) -> str:
        # The serialized FileDescriptorProto literal: the schema itself, whatever protoc version wrote
        # the surrounding boilerplate.
        [literal] = re.findall(r"AddSerializedFile\((b'.*?')\)", text)
        return literal

    fresh = regenerate.compile_to(tmp_path).read_text()
    committed = (Path(regenerate.__file__).parent / "pulsar_api_pb2.py").read_text()
    assert descriptor(fresh) == descriptor(committed), "run: python -m kop.pulsar.codec.regenerate"


def test_committed_stub_matches_the_proto(tmp_path: Path) -> None:
    """pulsar_api_pb2.pyi (mypy-protobuf's stub, what the type check reads) is regenerated with the module."""
    pytest.importorskip("mypy_protobuf", reason="mypy-protobuf is in the test extra")
    fresh = regenerate.compile_to(tmp_path).with_suffix(".pyi").read_text()
    committed = (Path(regenerate.__file__).parent / "pulsar_api_pb2.pyi").read_text()
    assert fresh == committed, "run: python -m kop.pulsar.codec.regenerate"


# ---- frame reader ------------------------------------------------------------------------------------


def test_reader_cuts_frames_fed_byte_by_byte() -> None:
    stream = _send(1) + f.encode_command(c.command(c.PING)) + _send(2, b"x" * 300)
    reader = f.FrameReader()
    got = []
    for i in range(len(stream)):
        got += reader.frames(stream[i:i + 1])
    assert [fr.type for fr in got] == [c.SEND, c.PING, c.SEND]
    assert [fr.inner.sequence_id for fr in (got[0], got[2])] == [1, 2]
    assert bytes(got[2].payload) == b"x" * 300 and got[2].metadata.sequence_id == 2
    assert reader.buffered == 0
    reader.close()  # nothing pending: no error


def test_reader_keeps_frames_after_its_buffer_moves() -> None:
    reader = f.FrameReader()
    [first] = reader.frames(_send(1, b"first"))
    reader.frames(_send(2, b"second" * 1000))
    assert bytes(first.payload) == b"first"


def test_payload_frame_layout_and_checksum() -> None:
    md = c.MessageMetadata(producer_name="p", sequence_id=1, publish_time=1000)
    hp = f.encode_headers_and_payload(md, b"abc")
    raw_md = md.SerializeToString()
    tail = struct.pack(">I", len(raw_md)) + raw_md + b"abc"
    assert hp == b"\x0e\x01" + struct.pack(">I", crc32c(tail)) + tail
    assert f.encode_headers_and_payload(md, b"abc", checksum=False) == tail
    [fr] = f.FrameReader().frames(f.encode_payload_command(c.command(c.SEND, producer_id=1, sequence_id=1), hp))
    assert fr.checksum == crc32c(tail) and bytes(fr.stored_bytes) == hp


def test_frame_without_checksum_is_accepted() -> None:
    [fr] = f.FrameReader().frames(_send(checksum=False))
    assert fr.checksum is None and bytes(fr.payload) == b"hello"


def test_message_frame_with_broker_entry_metadata() -> None:
    md = c.MessageMetadata(producer_name="p", sequence_id=1, publish_time=1000)
    bem = c.BrokerEntryMetadata(broker_timestamp=5, index=41)
    hp = f.encode_headers_and_payload(md, b"abc", broker_entry_metadata=bem)
    assert hp[:2] == b"\x0e\x02"
    [fr] = f.FrameReader().frames(f.encode_payload_command(
        c.command(c.MESSAGE, consumer_id=1, message_id=c.message_id(1, 2)), hp))
    assert fr.broker_entry_metadata.index == 41 and bytes(fr.payload) == b"abc"
    assert bytes(fr.stored_bytes) == f.encode_headers_and_payload(md, b"abc")  # 0x0e02 part stripped


def test_wrong_checksum_is_reported_and_the_stream_goes_on() -> None:
    bad = bytearray(_send(5))
    bad[-1] ^= 0xFF  # flip a payload byte
    reader = f.FrameReader()
    reader.feed(bytes(bad) + _send(6))
    with pytest.raises(f.ChecksumMismatch) as info:
        reader.next_frame()
    assert info.value.frame.inner.sequence_id == 5  # enough to answer SEND_ERROR ChecksumError
    assert reader.next_frame().inner.sequence_id == 6


def test_oversized_frame_is_refused_before_its_body_arrives() -> None:
    reader = f.FrameReader(max_frame_size=1024)
    with pytest.raises(f.FrameTooLarge) as info:
        reader.frames(struct.pack(">I", 2**32 - 1))  # only the length: nothing is allocated for it
    assert info.value.size == 2**32 + 3 and info.value.limit == 1024
    assert reader.buffered == 4
    with pytest.raises(f.FrameTooLarge):
        reader.frames(b"more")  # poisoned: the stream is out of step


def test_default_limit_is_pulsar_max_message_size_plus_padding() -> None:
    assert f.DEFAULT_MAX_FRAME_SIZE == 5 * 1024 * 1024 + 10 * 1024
    big = _send(1, b"z" * (5 * 1024 * 1024))  # a full 5 MiB message still fits
    [fr] = f.FrameReader().frames(big)
    assert len(fr.payload) == 5 * 1024 * 1024


def test_reader_grows_with_the_bytes_not_with_the_announced_size() -> None:
    reader = f.FrameReader()
    reader.frames(struct.pack(">II", 5_000_000, 3))  # announces ~5 MB, sends 8 bytes
    assert reader.buffered == 8
    assert len(reader._buf) == 8  # the buffer holds what arrived, nothing more


@pytest.mark.parametrize("garbage, error", [
    (struct.pack(">I", 2) + b"ab", "no room for a command size"),
    (struct.pack(">II", 8, 9) + b"abcd", "command size 9 is over"),
    (struct.pack(">II", 7, 3) + b"\xff\xff\xff", "command does not parse"),
    (struct.pack(">II", 8, 4) + b"\x08\x12\x92\x01", "command does not parse"),  # field 18 cut short
    (struct.pack(">II", 4 + 4, 4) + c.command(c.SEND, producer_id=1, sequence_id=1).SerializeToString()[:4],
     "command does not parse"),
    (b"GET / HTTP/1.1\r\n", "byte limit"),  # an HTTP client on 6650: "GET " is a 1.2 GB frame
])
def test_garbage_is_a_malformed_frame(garbage: bytes, error: str) -> None:
    reader = f.FrameReader(max_frame_size=1 << 16)
    with pytest.raises(f.FrameError, match=error):
        reader.frames(garbage)


def test_kafka_client_on_the_pulsar_port_is_refused() -> None:
    """A Kafka ApiVersions request: its size prefix is fine, the body is no BaseCommand."""
    body = bytes.fromhex("0012" "0003" "00000001" "000a" "6b61666b612d74657374" "00")
    reader = f.FrameReader()
    with pytest.raises(f.MalformedFrame, match="command size 1179651 is over"):  # api key 18, version 3
        reader.frames(struct.pack(">I", len(body)) + body)


def test_send_without_payload_and_ping_with_payload_are_malformed() -> None:
    cmd = c.command(c.SEND, producer_id=1, sequence_id=1).SerializeToString()
    with pytest.raises(f.MalformedFrame, match="without metadata"):
        f.FrameReader().frames(struct.pack(">II", 4 + len(cmd), len(cmd)) + cmd)
    ping = c.command(c.PING).SerializeToString()
    with pytest.raises(f.MalformedFrame, match="followed by"):
        f.FrameReader().frames(struct.pack(">II", 4 + len(ping) + 3, len(ping)) + ping + b"abc")


def test_payload_headers_that_run_past_the_frame() -> None:
    cmd = c.command(c.SEND, producer_id=1, sequence_id=1).SerializeToString()
    tail = struct.pack(">I", 1000) + b"short"  # metadata size 1000, five bytes follow
    with pytest.raises(f.MalformedFrame, match="runs past"):
        f.FrameReader().frames(struct.pack(">II", 4 + len(cmd) + len(tail), len(cmd)) + cmd + tail)


def test_unknown_command_type_is_named_and_the_stream_goes_on() -> None:
    body = bytes.fromhex("0832")  # type 50 (NEW_TXN): outside our subset
    reader = f.FrameReader()
    reader.feed(struct.pack(">II", 4 + len(body), len(body)) + body + f.encode_command(c.command(c.PING)))
    with pytest.raises(f.UnknownCommand) as info:
        reader.next_frame()
    assert info.value.type == 50
    assert reader.next_frame().type == c.PING


def test_truncated_stream_is_reported_on_close() -> None:
    reader = f.FrameReader()
    assert reader.frames(_send()[:-2]) == []
    with pytest.raises(f.TruncatedFrame):
        reader.close()


def test_missing_required_fields_are_tolerated_on_read() -> None:
    """Parsing is partial (MergeFromString): a SEND without sequence_id still parses and the handler
    decides. Encoding refuses missing required fields (the runtime checks)."""
    partial = c.BaseCommand(type=c.SEND)
    partial.send.producer_id = 1
    body = partial.SerializePartialToString()
    hp = f.encode_headers_and_payload(c.MessageMetadata(producer_name="p", sequence_id=1, publish_time=1), b"x")
    [fr] = f.FrameReader().frames(struct.pack(">II", 4 + len(body) + len(hp), len(body)) + body + hp)
    assert fr.inner.producer_id == 1 and not fr.inner.HasField("sequence_id")
    with pytest.raises(Exception, match="required"):
        f.encode_command(c.BaseCommand(type=c.FLOW, flow=c.pb.CommandFlow(consumer_id=1)))


# ---- compression -------------------------------------------------------------------------------------


DATA = b"pulsar payload " * 500


@pytest.mark.parametrize("codec", [pz.NONE, pz.LZ4, pz.ZLIB, pz.ZSTD, pz.SNAPPY])
def test_compression_round_trip(codec: int) -> None:
    packed = pz.compress(codec, DATA)
    assert pz.decompress(codec, packed, len(DATA), 1 << 20) == DATA
    if codec:
        assert len(packed) < len(DATA) // 4


def test_compression_formats_are_pulsars() -> None:
    import cramjam
    import lz4.block

    assert lz4.block.decompress(pz.compress(pz.LZ4, DATA), uncompressed_size=len(DATA)) == DATA  # raw block
    assert pz.compress(pz.ZLIB, DATA)[:1] == b"\x78"  # zlib container, not gzip
    assert pz.compress(pz.ZSTD, DATA)[:4] == b"\x28\xb5\x2f\xfd"  # zstd frame magic
    assert bytes(cramjam.snappy.decompress_raw(pz.compress(pz.SNAPPY, DATA))) == DATA  # raw, no xerial


@pytest.mark.parametrize("codec", [pz.LZ4, pz.ZLIB, pz.ZSTD, pz.SNAPPY])
def test_decompression_is_bounded_by_the_announced_size(codec: int) -> None:
    bomb = pz.compress(codec, b"\x00" * 4_000_000)
    with pytest.raises(pz.CompressionError):
        pz.decompress(codec, bomb, 1000, 1 << 30)  # the metadata lies: stop at ~1000 bytes
    with pytest.raises(pz.CompressionError, match="over the"):
        pz.decompress(codec, bomb, 4_000_000, 1 << 20)  # honest, but over the limit
    with pytest.raises(pz.CompressionError):
        pz.decompress(codec, b"\x01garbage\xff" * 3, 100, 1 << 20)


def test_unknown_codec() -> None:
    with pytest.raises(pz.CompressionError):
        pz.decompress(9, b"x", 1, 10)
    with pytest.raises(pz.CompressionError):
        pz.compress(9, b"x")


# ---- batches -----------------------------------------------------------------------------------------


def _smm(**fields: object) -> c.SingleMessageMetadata:
    return c.SingleMessageMetadata(payload_size=0, **fields)


def test_batch_layout() -> None:
    one = _smm(partition_key="k")
    raw = pbatch.encode_batch([(one, b"abc")])
    smm_bytes = c.SingleMessageMetadata(partition_key="k", payload_size=3).SerializeToString()
    assert raw == struct.pack(">I", len(smm_bytes)) + smm_bytes + b"abc"


@pytest.mark.parametrize("codec", [pz.NONE, pz.LZ4, pz.ZLIB, pz.ZSTD, pz.SNAPPY])
def test_batch_round_trip_with_compression(codec: int) -> None:
    items = [(_smm(event_time=i + 1, ordering_key=b"o%d" % i), b"m%d" % i * 50) for i in range(10)]
    md = c.MessageMetadata(producer_name="p", sequence_id=0, publish_time=1, num_messages_in_batch=10)
    payload = pbatch.compressed(codec, pbatch.encode_batch(items), md)
    assert md.compression == codec
    got = pbatch.messages(md, payload)
    assert [(s.event_time, s.ordering_key, bytes(p)) for s, p in got] == [
        (i + 1, b"o%d" % i, b"m%d" % i * 50) for i in range(10)]


def test_single_message_entry() -> None:
    md = c.MessageMetadata(producer_name="p", sequence_id=0, publish_time=1)
    assert pbatch.messages(md, b"alone") == [(None, b"alone")]


@pytest.mark.parametrize("count, cut, error", [
    (3, None, "truncated after 2"),  # announces 3, holds 2
    (1, None, "bytes after the last"),  # announces 1, holds 2
    (2, -1, "runs past"),  # last payload cut short
    (0, None, "announces 0"),
])
def test_broken_batches(count: int, cut: int | None, error: str) -> None:
    raw = pbatch.encode_batch([(_smm(), b"aa"), (_smm(), b"bbb")])
    md = c.MessageMetadata(producer_name="p", sequence_id=0, publish_time=1, num_messages_in_batch=count)
    with pytest.raises(pbatch.BatchError, match=error):
        pbatch.messages(md, raw[:cut])


def test_batch_that_does_not_decompress() -> None:
    md = c.MessageMetadata(producer_name="p", sequence_id=0, publish_time=1, num_messages_in_batch=1,
                           compression=pz.LZ4, uncompressed_size=100)
    with pytest.raises(pbatch.BatchError, match="corrupt"):
        pbatch.messages(md, b"\xff" * 20)
