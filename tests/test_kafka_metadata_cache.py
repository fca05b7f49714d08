"""Metadata answers served from the encoded-topic cache (kop.kafka.apis.metadata.TopicEntryCache, issue 5) are
the answers the uncached path gives, and change as soon as the topics do.

* Codec level (plain bytes): a response whose topic entries are pre-encoded (kop.protocol.encode_struct) is
  byte-identical, at every Metadata version, to the same response encoded from objects.
* Broker level (a real broker, requests and decoding with kafka-python's classes, not our codec): every
  version's answer is byte-identical to our generic encoding of the same content (decode with our codec,
  re-encode without pre-encoded entries), a repeated answer (a cache hit) equals the first (a miss), and the
  answer follows CreatePartitions, DeleteTopics and a re-creation under the same name (new topic id).
Cluster mode (leaders = bundle owners, LEADER_NOT_AVAILABLE while unowned) is covered by tests/test_cluster_*.py:
the cache key holds every partition's leader, so an ownership move is a different key.
"""

from __future__ import annotations

import struct
import time

from kafka.protocol.metadata import MetadataRequest

from kop.kafka.apis.metadata import _topic
from kop.kafka.handler import Node
from kop.protocol import Encoded, api_info, decode_response, encode_response, encode_struct
from tests.support.clients import create_topic, wait_for_leaders
from tests.support.wire import Negotiated

R = api_info(3).response_class


class _Topic:
    """The fields of kop.topics.manager.Topic that a Metadata entry reads."""

    def __init__(self, partitions: int, internal: bool = False) -> None:
        self.topic_id = bytes(range(16))
        self.internal = internal
        self.partitions = partitions


def _response(topics: list) -> object:
    return R(throttle_time_ms=0, brokers=[R.MetadataResponseBroker(node_id=7, host="h", port=9092, rack=None)],
             cluster_id="c", controller_id=7, topics=topics, cluster_authorized_operations=-2147483648)


def test_pre_encoded_topics_are_byte_identical_at_every_version() -> None:
    node = Node(7, "broker-\u00e9", 9092)

    def some_unowned(p: int) -> Node | None:  # LEADER_NOT_AVAILABLE partitions, as in cluster mode
        return None if p % 3 == 1 else node

    error = R.MetadataResponseTopic(error_code=3, name="missing", topic_id=b"\0" * 16, is_internal=False,
                                    partitions=[])
    for version in range(0, 13):
        objs = [_topic(R, "t1", _Topic(4), lambda p: node), error, _topic(R, "__internal", _Topic(7, True), some_unowned)]
        plain = b"".join(encode_response(3, version, 99, _response(objs)))
        mixed = [encode_struct(objs[0], version), objs[1], encode_struct(objs[2], version)]
        assert all(isinstance(x, Encoded) for x in (mixed[0], mixed[2]))
        assert b"".join(encode_response(3, version, 99, _response(mixed))) == plain, f"v{version}"
        _, back = decode_response(3, version, plain[4:])
        assert [len(t.partitions) for t in back.topics] == [4, 0, 7]


# ---- against the broker ------------------------------------------------------------------------------------------

class _Raw(Negotiated):
    def raw(self, request, version: int):
        """(the response bytes after the size prefix, the response decoded by kafka-python) of one request."""
        self._correlation_id += 1
        request.API_VERSION = version
        request.with_header(correlation_id=self._correlation_id, client_id=self.client_id)
        self.sock.sendall(request.encode(version=version, header=True, framed=True))
        (size,) = struct.unpack(">i", self._recv_exact(4))
        payload = self._recv_exact(size)
        return payload, request.header.get_response_class().decode(payload, version=version, header=True)


def _md_request(version: int, topics: list[str] | None):
    T = MetadataRequest.MetadataRequestTopic
    if topics is None and version == 0:
        topics = []  # v0: an empty list means all topics
    return MetadataRequest(topics=None if topics is None else [T(topic_id=None, name=t) for t in topics],
                           allow_auto_topic_creation=False, include_cluster_authorized_operations=False,
                           include_topic_authorized_operations=False)


def _answer(c: _Raw, version: int, topics: list[str] | None = None):
    """(decoded by kafka-python, decoded by our codec) of one Metadata request, after checking the bytes equal
    our generic encoding of the same content and a second identical request's bytes."""
    first, theirs = c.raw(_md_request(version, topics), version)
    second, _ = c.raw(_md_request(version, topics), version)
    assert first[4:] == second[4:], f"v{version}: a repeated Metadata answer differs"
    _, ours = decode_response(3, version, first)
    regenerated = b"".join(encode_response(3, version, struct.unpack_from(">i", first)[0], ours))
    assert regenerated[4:] == first, f"v{version}: the answer differs from the generic encoding of its content"
    assert [(t.name, len(t.partitions)) for t in theirs.topics] == [(t.name, len(t.partitions)) for t in ours.topics]
    return theirs, ours


def _partitions(ours, name: str) -> list[tuple[int, int, int]] | None:
    for t in ours.topics:
        if t.name == name:
            return [(p.partition_index, p.leader_id, p.error_code) for p in t.partitions]
    return None


def _topic_id(ours, name: str) -> bytes:
    return next(t.topic_id for t in ours.topics if t.name == name)


def test_answers_identical_to_uncached_and_follow_topic_changes(kop_broker) -> None:
    from confluent_kafka.admin import AdminClient, NewPartitions

    broker = kop_broker()
    create_topic(broker.bootstrap, "mc-a", 2)
    create_topic(broker.bootstrap, "mc-b", 3)
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    with _Raw(broker.bootstrap) as c:
        node_id = None
        for version in range(0, 13):
            _, ours = _answer(c, version)
            node_id = ours.brokers[0].node_id
            assert _partitions(ours, "mc-a") == [(0, node_id, 0), (1, node_id, 0)], f"v{version}"
            assert _partitions(ours, "mc-b") == [(i, node_id, 0) for i in range(3)], f"v{version}"
            # The name is echoed as asked: two spellings of one topic are two entries.
            _, one = _answer(c, version, ["mc-a", "persistent://public/default/mc-b"])
            assert [t.name for t in one.topics] == ["mc-a", "persistent://public/default/mc-b"]
            assert _partitions(one, "persistent://public/default/mc-b") == [(i, node_id, 0) for i in range(3)]
        old_id = _topic_id(_answer(c, 12)[1], "mc-a")

        admin.create_partitions([NewPartitions("mc-a", 5)])["mc-a"].result(60)
        wait_for_leaders(broker.bootstrap, "mc-a", 5)
        for version in (1, 9, 12):
            _, ours = _answer(c, version)
            assert _partitions(ours, "mc-a") == [(i, node_id, 0) for i in range(5)], f"v{version}"
            _, one = _answer(c, version, ["mc-a"])
            assert _partitions(one, "mc-a") == [(i, node_id, 0) for i in range(5)], f"v{version}"

        admin.delete_topics(["mc-a"], operation_timeout=30)["mc-a"].result(60)
        deadline = time.monotonic() + 60
        while _partitions(_answer(c, 12)[1], "mc-a") is not None:
            assert time.monotonic() < deadline, "a deleted topic stays in Metadata"
            time.sleep(0.1)
        _, one = _answer(c, 12, ["mc-a"])
        assert one.topics[0].error_code == 3  # UNKNOWN_TOPIC_OR_PARTITION

        create_topic(broker.bootstrap, "mc-a", 3)
        for version in (1, 10, 12):
            _, ours = _answer(c, version)
            assert _partitions(ours, "mc-a") == [(i, node_id, 0) for i in range(3)], f"v{version}"
            if version >= 10:
                assert _topic_id(ours, "mc-a") not in (old_id, b"\0" * 16)
            assert _partitions(ours, "mc-b") == [(i, node_id, 0) for i in range(3)]
