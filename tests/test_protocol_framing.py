"""Framing rules: request headers in, complete response frames out (and the client-side mirror).

kafka-python's own request/response classes produce and read the frames on the other side.
"""

from __future__ import annotations

import struct

import pytest
from kafka.protocol.consumer.fetch import FetchResponse as OracleFetchResponse
from kafka.protocol.metadata.api_versions import ApiVersionsRequest as OracleApiVersionsRequest
from kafka.protocol.metadata.api_versions import ApiVersionsResponse as OracleApiVersionsResponse
from kafka.protocol.metadata.metadata import MetadataRequest as OracleMetadataRequest
from kafka.protocol.metadata.metadata import MetadataResponse as OracleMetadataResponse
from kafka.protocol.producer.produce import ProduceRequest as OracleProduceRequest

from kop.protocol import (
    DecodeError,
    UnsupportedVersionError,
    api_info,
    decode_request,
    decode_request_header,
    decode_response,
    encode_request,
    encode_response,
    message_class,
)

ApiVersionsResponse = message_class("ApiVersionsResponse")
FetchResponse = message_class("FetchResponse")
MetadataResponse = message_class("MetadataResponse")


def _oracle_frame(request, correlation_id: int = 42, client_id: str | None = "client-1") -> memoryview:
    request.with_header(correlation_id=correlation_id, client_id=client_id)
    framed = request.encode(header=True, framed=True)
    (size,) = struct.unpack_from(">i", framed)
    assert size == len(framed) - 4
    return memoryview(framed)[4:]


# ------------------------------------------------------------------------------------- headers


def test_header_v1_for_a_non_flexible_request_version() -> None:
    frame = _oracle_frame(OracleMetadataRequest(version=8, topics=None, allow_auto_topic_creation=False))
    header, offset = decode_request_header(frame)
    assert (header.api_key, header.api_version, header.correlation_id, header.client_id) == (3, 8, 42, "client-1")
    assert offset == 8 + 2 + len("client-1")
    request = decode_request(3, 8, frame, offset)
    assert request.topics is None and request.allow_auto_topic_creation is False


def test_header_v2_for_a_flexible_request_version_skips_its_tag_buffer() -> None:
    frame = _oracle_frame(OracleMetadataRequest(version=12, topics=[]), client_id="cli")
    header, offset = decode_request_header(frame)
    assert header.api_version == 12 and header.client_id == "cli"
    assert offset == 8 + 2 + 3 + 1  # client id stays a classic int16 string; then an empty tag buffer
    assert decode_request(3, 12, frame, offset).topics == []


def test_header_tagged_fields_are_skipped_even_when_unknown() -> None:
    body = bytes([1, 0])  # MetadataRequest v12: empty compact topics array (1 = 0 + 1), ... rest below
    body += b"\x01\x00\x00"  # allow_auto_topic_creation, include_topic_authorized_operations, no tags
    tags = b"\x02" + b"\x05\x02ab" + b"\x81\x01\x00"  # two tagged fields: tag 5 (2 bytes), tag 129 (0 bytes)
    frame = struct.pack(">hhih", 3, 12, 7, -1) + tags + body[1:]
    header, offset = decode_request_header(memoryview(frame))
    assert header.client_id is None and header.correlation_id == 7
    assert offset == 10 + len(tags)
    assert decode_request(3, 12, memoryview(frame), offset).allow_auto_topic_creation is True


def test_header_of_an_unknown_api_key_is_still_returned() -> None:
    frame = struct.pack(">hhih", 999, 3, 11, 2) + b"id" + b"whatever"
    header, offset = decode_request_header(memoryview(frame))
    assert (header.api_key, header.api_version, header.correlation_id, header.client_id) == (999, 3, 11, "id")
    assert offset == 12
    with pytest.raises(UnsupportedVersionError):
        decode_request(999, 3, memoryview(frame), offset)


def test_header_of_an_unsupported_version_is_returned_even_if_the_rest_is_garbage() -> None:
    frame = struct.pack(">hhih", 18, 99, 5, 300) + b"short"  # client id length runs past the end
    header, _offset = decode_request_header(memoryview(frame))
    assert (header.api_key, header.api_version, header.correlation_id) == (18, 99, 5)
    with pytest.raises(UnsupportedVersionError):
        decode_request(18, 99, memoryview(frame), 10)


def test_newer_api_versions_request_uses_header_v2() -> None:
    # ApiVersions is flexible from v3, so a future v9 request still carries a tag buffer.
    frame = struct.pack(">hhih", 18, 9, 1, 1) + b"c" + b"\x00" + b"future body"
    header, offset = decode_request_header(memoryview(frame))
    assert header.api_version == 9 and offset == 12


@pytest.mark.parametrize("size", range(8))
def test_header_shorter_than_8_bytes_is_a_decode_error(size: int) -> None:
    with pytest.raises(DecodeError):
        decode_request_header(memoryview(struct.pack(">hhi", 3, 12, 1)[:size]))


def test_truncated_client_id_of_a_known_api_is_a_decode_error() -> None:
    frame = struct.pack(">hhih", 3, 12, 1, 10) + b"abc"
    with pytest.raises(DecodeError):
        decode_request_header(memoryview(frame))
    with pytest.raises(DecodeError):
        decode_request_header(memoryview(struct.pack(">hhi", 3, 12, 1) + b"\x00"))


def test_request_header_accepts_bytes_and_bytearray() -> None:
    frame = struct.pack(">hhih", 18, 0, 3, -1)
    assert decode_request_header(frame)[0].correlation_id == 3
    assert decode_request_header(bytearray(frame))[0].correlation_id == 3


# ---------------------------------------------------------------------------------- responses


def _frame_bytes(parts: list) -> bytes:
    data = b"".join(bytes(p) for p in parts)
    (size,) = struct.unpack_from(">i", data)
    assert size == len(data) - 4
    return data


def test_api_versions_response_always_uses_header_v0() -> None:
    body = ApiVersionsResponse(error_code=0, api_keys=[ApiVersionsResponse.ApiVersion(api_key=18, max_version=4)])
    data = _frame_bytes(encode_response(18, 3, 77, body))
    assert data[4:8] == struct.pack(">i", 77)
    assert data[8:10] == b"\x00\x00"  # the error code follows directly: no tag buffer in the header
    decoded = OracleApiVersionsResponse.decode(data, version=3, header=True, framed=True)
    assert decoded.api_keys[0].max_version == 4
    correlation_id, ours = decode_response(18, 3, memoryview(data)[4:])
    assert correlation_id == 77 and ours == body


def test_flexible_response_has_header_v1_and_classic_one_v0() -> None:
    body = MetadataResponse(brokers=[MetadataResponse.MetadataResponseBroker(node_id=1, host="h", port=9092)],
                            cluster_id="c", controller_id=1)
    flexible = _frame_bytes(encode_response(3, 12, 5, body))
    assert flexible[8] == 0  # response header v1: empty tag buffer after the correlation id
    assert OracleMetadataResponse.decode(flexible, version=12, header=True, framed=True).cluster_id == "c"
    classic = _frame_bytes(encode_response(3, 8, 5, body))
    assert len(flexible) != len(classic)
    assert OracleMetadataResponse.decode(classic, version=8, header=True, framed=True).brokers[0].port == 9092


def test_fetch_response_records_are_sent_by_reference() -> None:
    batch = bytes(range(256)) * 40  # 10 KiB
    tail = memoryview(bytearray(b"z" * 5000))
    offset_part = struct.pack(">q", 123)
    partition = FetchResponse.PartitionData(partition_index=0, high_watermark=10, records=[offset_part, batch, tail])
    body = FetchResponse(responses=[FetchResponse.FetchableTopicResponse(topic="t", partitions=[partition])])
    parts = encode_response(1, 12, 9, body)
    assert any(p is batch for p in parts) and any(p is tail for p in parts)
    data = _frame_bytes(parts)
    decoded = OracleFetchResponse.decode(data, version=12, header=True, framed=True)
    assert bytes(decoded.responses[0].partitions[0].records) == offset_part + batch + bytes(tail)
    _cid, ours = decode_response(1, 12, memoryview(data)[4:])
    records = ours.responses[0].partitions[0].records
    assert isinstance(records, memoryview) and records == offset_part + batch + bytes(tail)


def test_small_records_and_null_records_are_encoded_inline() -> None:
    partitions = [FetchResponse.PartitionData(partition_index=0, records=b"tiny"),
                  FetchResponse.PartitionData(partition_index=1, records=None)]
    body = FetchResponse(responses=[FetchResponse.FetchableTopicResponse(topic="t", partitions=partitions)])
    for version in (4, 11, 12, 16):
        parts = encode_response(1, version, 1, body)
        assert len(parts) == 1 and isinstance(parts[0], bytes)
        _cid, back = decode_response(1, version, memoryview(parts[0])[4:])
        got = [p.records for p in back.responses[0].partitions]
        assert got[0] == b"tiny" and got[1] is None


def test_encode_request_matches_kafka_python_and_decodes_back() -> None:
    oracle = OracleProduceRequest(version=9, transactional_id=None, acks=-1, timeout_ms=1000, topic_data=[])
    oracle.with_header(correlation_id=3, client_id="me")
    expected = oracle.encode(header=True, framed=True)
    Produce = message_class("ProduceRequest")
    ours = encode_request(0, 9, 3, "me", Produce(acks=-1, timeout_ms=1000))
    assert ours == expected
    header, offset = decode_request_header(memoryview(ours)[4:])
    assert decode_request(header.api_key, header.api_version, memoryview(ours)[4:], offset) == Produce(
        acks=-1, timeout_ms=1000)


def test_encode_request_of_api_versions_matches_kafka_python() -> None:
    oracle = OracleApiVersionsRequest(version=3, client_software_name="n", client_software_version="1")
    oracle.with_header(correlation_id=1, client_id=None)
    body = message_class("ApiVersionsRequest")(client_software_name="n", client_software_version="1")
    assert encode_request(18, 3, 1, None, body) == oracle.encode(header=True, framed=True)


def test_api_versions_error_response_is_read_as_v0_by_clients() -> None:
    body = ApiVersionsResponse(error_code=35, api_keys=[ApiVersionsResponse.ApiVersion(api_key=18, max_version=4)])
    data = _frame_bytes(encode_response(18, 0, 1, body))  # the broker answers unsupported versions in v0
    _cid, decoded = decode_response(18, 3, memoryview(data)[4:])
    assert decoded.error_code == 35 and decoded.api_keys[0].max_version == 4


def test_unsupported_response_version_is_rejected() -> None:
    with pytest.raises(UnsupportedVersionError):
        encode_response(18, 99, 1, ApiVersionsResponse())
    with pytest.raises(UnsupportedVersionError):
        decode_request(0, 2, memoryview(b""), 0)  # Produce v0-v2 were removed by KIP-896


def test_api_info_describes_the_schema() -> None:
    produce = api_info(0)
    assert (produce.key, produce.name, produce.min_version) == (0, "Produce", 3)
    assert produce.max_version >= 12
    assert produce.request_class.__name__ == "ProduceRequest"
    assert produce.response_class.__name__ == "ProduceResponse"
    assert not produce.flexible(8) and produce.flexible(9)
    assert api_info(18).flexible(3) and not api_info(18).flexible(2)
    with pytest.raises(KeyError):
        api_info(4242)
