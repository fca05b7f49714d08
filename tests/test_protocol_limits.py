"""Kafka 4.4's decoder limits: a collection longer than 1 000 000 elements, or a tag buffer of more than 10 000
tagged fields, is refused when its length is read, with Kafka's message (its generated readers, since 4.3).

Lengths were already bounded by the bytes left in the frame (a truncated length is refused too, first, as Kafka
checks it first); the limits close the gap a large frame leaves (socket.request.max.bytes is 100 MB). The
broker answers a DecodeError by closing the connection, as Kafka does with a request it cannot parse.
"""

from __future__ import annotations

import struct

import pytest

from kop.protocol import DecodeError, decode_message, decode_request, decode_request_header, encode_request
from kop.protocol.codegen import MAX_COLLECTION_SIZE, MAX_TAGGED_FIELDS, uvarint_bytes
from kop.protocol.messages import ListConfigResourcesRequest


def _list_config_resources_v1(count: int, tags: int = 0, present: int | None = None) -> bytes:
    """A ListConfigResources v1 body (flexible): ResourceTypes ([]int8, `count` announced, `present` there),
    then the top-level tag buffer with `tags` empty unknown tagged fields."""
    present = count if present is None else present
    body = uvarint_bytes(count + 1) + bytes([2]) * present
    body += uvarint_bytes(tags) + b"".join(uvarint_bytes(1000 + i) + b"\x00" for i in range(tags))
    return body


def test_the_limits_are_kafkas() -> None:
    assert (MAX_COLLECTION_SIZE, MAX_TAGGED_FIELDS) == (1_000_000, 10_000)


def test_a_collection_at_the_limit_decodes() -> None:
    req = decode_message("ListConfigResourcesRequest", 1, _list_config_resources_v1(MAX_COLLECTION_SIZE))
    assert isinstance(req, ListConfigResourcesRequest)
    assert len(req.resource_types) == MAX_COLLECTION_SIZE


def test_a_collection_over_the_limit_is_refused_with_kafkas_message() -> None:
    with pytest.raises(DecodeError, match=r"Tried to read a collection of size 1000001, which exceeds the "
                                          r"maximum allowed size of 1000000\.$"):
        decode_message("ListConfigResourcesRequest", 1, _list_config_resources_v1(MAX_COLLECTION_SIZE + 1))


def test_the_remaining_bytes_are_checked_before_the_limit() -> None:
    """Kafka checks a length against the bytes left first: a huge count in a short frame is a truncation."""
    with pytest.raises(DecodeError, match="runs past the end"):
        decode_message("ListConfigResourcesRequest", 1, _list_config_resources_v1(50_000_000, present=10))


def test_a_classic_int32_array_over_the_limit_is_refused() -> None:
    """Non-flexible versions count with an int32: DescribeLogDirs v1's Topics[].Partitions ([]int32)."""
    count = MAX_COLLECTION_SIZE + 1
    body = struct.pack(">i", 1) + struct.pack(">h", 1) + b"t" + struct.pack(">i", count) + b"\x00" * (4 * count)
    with pytest.raises(DecodeError, match="exceeds the maximum allowed size of 1000000"):
        decode_message("DescribeLogDirsRequest", 1, body)
    ok = struct.pack(">i", 1) + struct.pack(">h", 1) + b"t" + struct.pack(">i", 3) + b"\x00" * 12
    assert decode_message("DescribeLogDirsRequest", 1, ok).topics[0].partitions == [0, 0, 0]


def test_tag_buffers_at_the_limit_decode_and_over_it_are_refused() -> None:
    req = decode_message("ListConfigResourcesRequest", 1, _list_config_resources_v1(1, tags=MAX_TAGGED_FIELDS))
    assert req.resource_types == [2]
    with pytest.raises(DecodeError, match=r"Tried to read 10001 tagged fields, which exceeds the maximum "
                                          r"allowed count of 10000\.$"):
        decode_message("ListConfigResourcesRequest", 1, _list_config_resources_v1(1, tags=MAX_TAGGED_FIELDS + 1))


def test_a_tag_count_over_the_remaining_bytes_is_refused_with_kafkas_message() -> None:
    body = uvarint_bytes(1) + uvarint_bytes(5000)  # no resource types, 5000 tagged fields announced, none there
    with pytest.raises(DecodeError, match=r"Tried to read 5000 tagged fields, but there are only 0 bytes "
                                          r"remaining\.$"):
        decode_message("ListConfigResourcesRequest", 1, body)


def test_the_request_header_tag_buffer_has_the_same_limit() -> None:
    frame = encode_request(74, 1, 7, "c", ListConfigResourcesRequest(resource_types=[]))[4:]
    header, pos = decode_request_header(frame)
    assert (header.api_key, header.correlation_id) == (74, 7)
    assert decode_request(74, 1, frame, pos).resource_types == []
    # Same frame with 10 001 empty tagged fields in the header's tag buffer.
    head_end = 2 + 2 + 4 + 2 + 1  # key, version, correlation id, client id length, "c"
    tags = uvarint_bytes(MAX_TAGGED_FIELDS + 1) + b"".join(uvarint_bytes(i) + b"\x00" for i in range(MAX_TAGGED_FIELDS + 1))
    bad = frame[:head_end] + tags + frame[head_end + 1:]
    with pytest.raises(DecodeError, match="exceeds the maximum allowed count of 10000"):
        decode_request_header(bad)


def _peak(body: bytes, ok: bool) -> int:
    """The most memory (tracemalloc) decoding `body` as ListConfigResources v1 took at once, whether it decoded
    (`ok`) or was refused."""
    import tracemalloc

    tracemalloc.start()
    try:
        if ok:
            decode_message("ListConfigResourcesRequest", 1, body)
        else:
            with pytest.raises(DecodeError, match="exceeds the maximum allowed"):
                decode_message("ListConfigResourcesRequest", 1, body)
        return tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


def test_an_over_limit_collection_is_refused_before_its_elements_are_allocated() -> None:
    """Refused when the count is read: decoding 1 000 001 elements that are all in the frame takes a small
    fraction of the memory that decoding 1 000 000 of them takes (their list alone is 8 MB). (Tag buffers need no
    such test: unknown tagged fields are skipped, never kept, so a tag buffer allocates nothing either way.)"""
    at_limit = _peak(_list_config_resources_v1(MAX_COLLECTION_SIZE), ok=True)
    over = _peak(_list_config_resources_v1(MAX_COLLECTION_SIZE + 1), ok=False)
    assert at_limit > 8 * MAX_COLLECTION_SIZE
    assert over < at_limit // 8, (over, at_limit)

