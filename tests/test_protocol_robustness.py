"""Hostile input: whatever bytes arrive, decoding ends quickly in a result or a DecodeError.

Covers KIP-482 (unknown tagged fields are skipped, at any nesting level), truncation at every
byte position of every message version, absurd declared lengths and counts, nulls in
non-nullable fields, and random corruption.
"""

from __future__ import annotations

import random
import struct
import time

import pytest

from kop.protocol import DecodeError, decode_message, decoder, encode_message, message_class
from kop.protocol.codec import MODELS
from kop.protocol.codegen import uvarint_bytes
from tests.test_protocol_codec import CASES, random_struct

FetchResponse = message_class("FetchResponse")
MetadataRequest = message_class("MetadataRequest")


def _sample(name: str, version: int, seed: str = "robust") -> bytes:
    model = MODELS[name]
    rng = random.Random(f"{seed}/{name}/{version}")
    return encode_message(random_struct(rng, model.root, model.spec.fields, version, model), version)


# ------------------------------------------------------------------------------ tagged fields


def _tags(*fields: tuple[int, bytes]) -> bytes:
    out = bytes([len(fields)])
    for tag, payload in fields:
        out += uvarint_bytes(tag) + uvarint_bytes(len(payload)) + payload
    return out


def test_unknown_tagged_fields_are_skipped_at_top_level() -> None:
    # ApiVersionsRequest v3: compact name, compact version, tag buffer.
    data = b"\x03ab" + b"\x02c" + _tags((7, b"xyz"), (300, b""), (2**20, b"\x00" * 200))
    request = decode_message("ApiVersionsRequest", 3, data)
    assert (request.client_software_name, request.client_software_version) == ("ab", "c")


def test_unknown_tagged_fields_are_skipped_in_nested_structs() -> None:
    # MetadataRequest v12: one topic (uuid, compact nullable name, tags), then two bools and tags.
    topic = b"\x00" * 16 + b"\x02t" + _tags((42, b"future"))
    data = b"\x02" + topic + b"\x01\x00" + _tags((9, b"\x01\x02"))
    request = decode_message("MetadataRequest", 12, data)
    assert request == MetadataRequest(topics=[MetadataRequest.MetadataRequestTopic(name="t")],
                                      allow_auto_topic_creation=True)


def test_known_tags_are_decoded_next_to_unknown_ones() -> None:
    leader = FetchResponse.LeaderIdAndEpoch(leader_id=3, leader_epoch=9)
    partition = FetchResponse.PartitionData(partition_index=1, current_leader=leader)
    body = FetchResponse(responses=[FetchResponse.FetchableTopicResponse(topic="t", partitions=[partition])])
    data = bytearray(encode_message(body, 12))
    decoded = decode_message("FetchResponse", 12, data)
    assert decoded.responses[0].partitions[0].current_leader == leader
    assert decoded.responses[0].partitions[0].diverging_epoch is None  # absent tagged struct
    # Re-frame the partition's tag buffer with an unknown tag 5 after the known tag 1.
    known = uvarint_bytes(1) + uvarint_bytes(9) + struct.pack(">ii", 3, 9) + b"\x00"
    i = data.index(b"\x01" + known)
    data[i:i + 1 + len(known)] = b"\x02" + known + uvarint_bytes(5) + uvarint_bytes(2) + b"??"
    assert decode_message("FetchResponse", 12, data) == decoded


def test_a_tagged_field_is_written_only_when_it_differs_from_its_default() -> None:
    Fetch = message_class("FetchRequest")
    plain = encode_message(Fetch(), 12)
    assert encode_message(Fetch(cluster_id=None), 12) == plain  # default null
    with_cluster = encode_message(Fetch(cluster_id="c"), 12)
    assert len(with_cluster) == len(plain) + 4  # tag 0, size 2, compact "c"
    assert decode_message("FetchRequest", 12, with_cluster).cluster_id == "c"
    default_leader = FetchResponse.PartitionData(current_leader=FetchResponse.LeaderIdAndEpoch())
    a = FetchResponse(responses=[FetchResponse.FetchableTopicResponse(partitions=[default_leader])])
    b = FetchResponse(responses=[FetchResponse.FetchableTopicResponse(partitions=[FetchResponse.PartitionData()])])
    assert encode_message(a, 12) == encode_message(b, 12)


# ------------------------------------------------------------------------------- truncation


@pytest.mark.parametrize(("name", "version"), CASES, ids=[f"{n}-v{v}" for n, v in CASES])
def test_truncation_at_every_byte_is_a_decode_error(name: str, version: int) -> None:
    data = _sample(name, version)
    decode = decoder(name, version)
    _obj, end = decode(memoryview(data), 0)
    assert end == len(data)
    for cut in range(len(data)):
        with pytest.raises(DecodeError):
            decode(memoryview(data[:cut]), 0)


@pytest.mark.parametrize(("name", "version"), CASES, ids=[f"{n}-v{v}" for n, v in CASES])
def test_random_corruption_gives_a_result_or_a_decode_error(name: str, version: int) -> None:
    rng = random.Random(f"corrupt/{name}/{version}")
    valid = _sample(name, version, "corrupt")
    decode = decoder(name, version)
    for _ in range(40):
        data = bytearray(valid)
        for _ in range(rng.randint(1, 4)):
            if data:
                data[rng.randrange(len(data))] = rng.choice([0x00, 0x7F, 0x80, 0xFF, rng.randrange(256)])
        noise = rng.randbytes(rng.randint(0, 40))
        for candidate in (data, noise):
            try:
                decode(memoryview(bytes(candidate)), 0)
            except DecodeError:
                pass


# ------------------------------------------------------------------------ absurd sizes, nulls

HUGE_CASES = [
    # (message, version, bytes): each declares far more than it carries
    ("MetadataRequest", 1, struct.pack(">i", 2**31 - 1) + b"\x00" * 8),  # array count
    ("MetadataRequest", 12, b"\xff\xff\xff\xff\x0f" + b"\x00" * 8),  # compact array count 2^32-2
    ("ApiVersionsRequest", 3, b"\xff\xff\xff\xff\x07abc"),  # compact string length
    ("SaslHandshakeRequest", 1, struct.pack(">h", 32767) + b"abc"),  # string length
    ("SaslAuthenticateRequest", 1, struct.pack(">i", 2**31 - 1) + b"abc"),  # bytes length
    ("ApiVersionsRequest", 3, b"\x01\x01" + b"\xff\xff\xff\x7f"),  # tag count 2^28
    ("ApiVersionsRequest", 3, b"\x01\x01" + b"\x01\x05\xff\xff\xff\x0f"),  # tag size 2^32
    ("ApiVersionsRequest", 3, b"\x01\x01" + b"\x01" + b"\x80" * 12 + b"\x01"),  # overlong varint
]


@pytest.mark.parametrize(("name", "version", "data"), HUGE_CASES)
def test_huge_declared_lengths_fail_fast(name: str, version: int, data: bytes) -> None:
    started = time.perf_counter()
    with pytest.raises(DecodeError):
        decode_message(name, version, data)
    assert time.perf_counter() - started < 0.05


def test_null_in_a_non_nullable_field_is_a_decode_error() -> None:
    # MetadataResponse v1 broker: node id, host (non-nullable string) = null.
    data = struct.pack(">i", 1) + struct.pack(">ih", 1, -1)
    with pytest.raises(DecodeError, match="non-nullable"):
        decode_message("MetadataResponse", 1, data)
    with pytest.raises(DecodeError, match="non-nullable"):
        decode_message("MetadataRequest", 0, struct.pack(">i", -1))  # topics only nullable from v1
    assert decode_message("MetadataRequest", 1, struct.pack(">i", -1)).topics is None


def test_decode_error_names_the_message_and_version() -> None:
    with pytest.raises(DecodeError, match=r"ProduceRequest v9"):
        decode_message("ProduceRequest", 9, b"\x00")
