"""kop/coordinator/consumer_protocol.py: the classic consumer protocol's subscription and assignment bytes,
checked against layouts written by hand from Kafka's ConsumerProtocol*.json (and what the Java client's
ConsumerProtocol would write for the same values)."""

from __future__ import annotations

import struct

import pytest

from kop.coordinator import consumer_protocol as cproto


def _s(s: str) -> bytes:
    return struct.pack(">h", len(s)) + s.encode()


def test_a_v3_subscription_with_owned_partitions_generation_and_rack() -> None:
    raw = (struct.pack(">h", 3) + struct.pack(">i", 2) + _s("a") + _s("b") + struct.pack(">i", -1)
           + struct.pack(">i", 1) + _s("a") + struct.pack(">iii", 2, 0, 3) + struct.pack(">i", 7) + _s("r1"))
    sub = cproto.parse_subscription(raw)
    assert sub == cproto.Subscription(3, ("a", "b"), None, {"a": frozenset({0, 3})}, 7, "r1")
    assert cproto.serialize_subscription(sub) == raw


def test_a_v0_subscription_and_newer_versions_read_as_the_newest_known() -> None:
    v0 = struct.pack(">hi", 0, 1) + _s("t") + struct.pack(">i", 2) + b"ud"
    assert cproto.parse_subscription(v0) == cproto.Subscription(0, ("t",), b"ud")
    v9 = struct.pack(">hi", 9, 1) + _s("t") + struct.pack(">i", -1) + struct.pack(">i", 0) + struct.pack(">i", 4)
    v9 += struct.pack(">h", -1)  # RackId: null
    sub = cproto.parse_subscription(v9 + b"future fields")
    assert sub.version == 9 and sub.topics == ("t",) and sub.generation_id == 4


def test_assignment_round_trip_at_the_members_version() -> None:
    raw = cproto.serialize_assignment({"b": frozenset({2}), "a": frozenset({1, 0})}, 1)
    assert raw == (struct.pack(">hi", 1, 2) + _s("a") + struct.pack(">iii", 2, 0, 1) + _s("b")
                   + struct.pack(">ii", 1, 2) + struct.pack(">i", -1))
    a = cproto.parse_assignment(raw)
    assert a == cproto.Assignment(1, {"a": frozenset({0, 1}), "b": frozenset({2})}, None)
    assert cproto.version_of(cproto.serialize_assignment({}, 7)) == 3


@pytest.mark.parametrize("raw", [b"", b"\x00", b"\xff\xff", struct.pack(">hi", 0, 5) + _s("t"),
                                 struct.pack(">hi", 0, 1) + struct.pack(">h", 9) + b"ab"])
def test_malformed_bytes_raise_protocol_error(raw: bytes) -> None:
    with pytest.raises(cproto.ProtocolError):
        cproto.parse_subscription(raw)
