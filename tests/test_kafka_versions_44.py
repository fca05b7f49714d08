"""The protocol versions Kafka 4.4 clients use (issue 23): ApiVersions v5, Produce v13, Fetch v13-v18, ListOffsets
v9-v11, Metadata v13, OffsetCommit/OffsetFetch v10 and DescribeTopicPartitions v0.

* Codec: ApiVersions v5's request is laid out byte for byte as Kafka 4.4's schema says; every other bumped
  request, encoded by kafka-python's generated classes (an independent codec), decodes with ours and encodes
  back to the same bytes at its new version.
* Wire, one broker for the module (raw requests through tests/support/wire.py at the new versions): the cluster
  and node id check of ApiVersions v5; topics named by id in Produce, Fetch (with a fetch session keyed by
  id), OffsetCommit and OffsetFetch, and UNKNOWN_TOPIC_ID for an id nobody knows; ListOffsets' tiered
  timestamps; DescribeTopicPartitions' cursor paging and its errors; DescribeCluster v2's IsFenced.
The Java 4.4 client itself runs in tests/e2e/test_kafka44_versions.py.
"""

from __future__ import annotations

import socket
import struct
import uuid
from collections.abc import Iterator

import pytest
from kafka.protocol.admin import DescribeTopicPartitionsRequest
from kafka.protocol.consumer import FetchRequest, ListOffsetsRequest, OffsetCommitRequest, OffsetFetchRequest
from kafka.protocol.metadata import MetadataRequest
from kafka.protocol.producer import ProduceRequest

from kop.protocol import decode_message, encode_message, encode_request
from kop.protocol.errors import ErrorCode
from kop.protocol.messages import ApiVersionsRequest
from kop.protocol.records import build_batch
from tests.support.broker import KopBroker
from tests.support.wire import WireClient, recv_exact

E = ErrorCode
UNKNOWN_ID = uuid.UUID(int=0xDEADBEEF)

# ---- codec -------------------------------------------------------------------------------------------------


def test_api_versions_v5_request_layout_is_kafka_44s() -> None:
    """Flexible (v3+): compact strings, then v5's nullable ClusterId and int32 NodeId, then the tag buffer."""
    req = ApiVersionsRequest(client_software_name="c", client_software_version="1", cluster_id="cid", node_id=7)
    assert encode_message(req, 5) == b"\x02c" + b"\x021" + b"\x04cid" + struct.pack(">i", 7) + b"\x00"
    absent = ApiVersionsRequest(client_software_name="c", client_software_version="1")
    assert encode_message(absent, 5) == b"\x02c\x021" + b"\x00" + struct.pack(">i", -1) + b"\x00"
    back = decode_message("ApiVersionsRequest", 5, encode_message(req, 5))
    assert (back.cluster_id, back.node_id) == ("cid", 7)
    assert encode_message(req, 4) == b"\x02c\x021\x00"  # v4 has neither field


def _fetch_request(topic_id: uuid.UUID, partition: int = 0, offset: int = 0, session: tuple[int, int] = (0, -1),
                   forgotten: list | None = None) -> FetchRequest:
    FT = FetchRequest.FetchTopic
    return FetchRequest(
        replica_id=-1, max_wait_ms=0, min_bytes=0, max_bytes=1 << 20, isolation_level=0,
        session_id=session[0], session_epoch=session[1],
        topics=[FT(topic_id=topic_id, partitions=[FT.FetchPartition(
            partition=partition, current_leader_epoch=-1, fetch_offset=offset, last_fetched_epoch=-1,
            log_start_offset=-1, partition_max_bytes=1 << 20)])] if offset >= 0 else [],
        forgotten_topics_data=forgotten or [], rack_id="")


def _produce_request(topic_id: uuid.UUID, batch: bytes) -> ProduceRequest:
    T = ProduceRequest.TopicProduceData
    return ProduceRequest(transactional_id=None, acks=-1, timeout_ms=30000, topic_data=[
        T(topic_id=topic_id, partition_data=[T.PartitionProduceData(index=0, records=batch)])])


def _commit_request(group: str, topic_id: uuid.UUID, offset: int) -> OffsetCommitRequest:
    T = OffsetCommitRequest.OffsetCommitRequestTopic
    return OffsetCommitRequest(group_id=group, generation_id_or_member_epoch=-1, member_id="", group_instance_id=None,
                               topics=[T(topic_id=topic_id, partitions=[T.OffsetCommitRequestPartition(
                                   partition_index=0, committed_offset=offset, committed_leader_epoch=-1,
                                   committed_metadata="m")])])


def _offset_fetch_request(group: str, topic_ids: list[uuid.UUID] | None) -> OffsetFetchRequest:
    G = OffsetFetchRequest.OffsetFetchRequestGroup
    return OffsetFetchRequest(require_stable=False, groups=[G(
        group_id=group, member_id=None, member_epoch=-1,
        topics=None if topic_ids is None else
        [G.OffsetFetchRequestTopics(topic_id=t, partition_indexes=[0]) for t in topic_ids])])


def _list_offsets_request(name: str, timestamp: int) -> ListOffsetsRequest:
    LT = ListOffsetsRequest.ListOffsetsTopic
    return ListOffsetsRequest(replica_id=-1, isolation_level=0, timeout_ms=1000, topics=[LT(name=name, partitions=[
        LT.ListOffsetsPartition(partition_index=0, timestamp=timestamp, current_leader_epoch=-1)])])


def _describe_request(names: list[str], limit: int = 2000, cursor: tuple[str, int] | None = None
                      ) -> DescribeTopicPartitionsRequest:
    R = DescribeTopicPartitionsRequest
    return R(topics=[R.TopicRequest(name=n) for n in names], response_partition_limit=limit,
             cursor=None if cursor is None else R.Cursor(topic_name=cursor[0], partition_index=cursor[1]))


@pytest.mark.parametrize(("name", "version", "build"), [
    ("ProduceRequest", 13, lambda: _produce_request(UNKNOWN_ID, build_batch([(b"k", b"v")]))),
    ("FetchRequest", 13, lambda: _fetch_request(UNKNOWN_ID)),
    ("FetchRequest", 18, lambda: _fetch_request(UNKNOWN_ID, session=(5, 2), forgotten=[
        FetchRequest.ForgottenTopic(topic_id=UNKNOWN_ID, partitions=[1, 2])])),
    ("ListOffsetsRequest", 11, lambda: _list_offsets_request("t", -6)),
    ("MetadataRequest", 13, lambda: MetadataRequest(topics=None, allow_auto_topic_creation=False,
                                                    include_topic_authorized_operations=True)),
    ("OffsetCommitRequest", 10, lambda: _commit_request("g", UNKNOWN_ID, 5)),
    ("OffsetFetchRequest", 10, lambda: _offset_fetch_request("g", [UNKNOWN_ID])),
    ("DescribeTopicPartitionsRequest", 0, lambda: _describe_request(["a", "b"], 7, ("b", 3))),
])
def test_requests_at_the_new_versions_round_trip_through_our_codec(name: str, version: int, build) -> None:
    theirs = bytes(build().encode(version=version))
    ours = decode_message(name, version, theirs)
    assert encode_message(ours, version) == theirs


def test_a_fetch_session_keys_partitions_as_its_requests_name_topics() -> None:
    """Sans-IO (kop/kafka/fetch_sessions.py): v13+ requests name topics by id, and so does their session."""
    from kop.kafka.fetch_sessions import INITIAL_EPOCH, FetchSessionCache

    cache = FetchSessionCache(10)
    tid = uuid.uuid4().bytes
    ctx = cache.begin(18, 0, INITIAL_EPOCH, [(tid, [(0, 5, 100, -1), (1, 7, 100, -1)])], [])
    sid = ctx.session_id
    assert ctx.known(tid, 0) is not None and ctx.known("t", 0) is None
    ctx = cache.begin(18, sid, 1, [], [(tid, [1])])
    assert ctx.incremental and ctx.partitions == [(tid, [(0, 5, 100, -1)])]


# ---- wire ----------------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[KopBroker]:
    b = KopBroker(tmp_path_factory.mktemp("kop-versions-44"), {"defaultNumPartitions": "1"}).start()
    yield b
    b.stop()


@pytest.fixture(scope="module")
def client(broker: KopBroker) -> Iterator[WireClient]:
    with WireClient(broker.bootstrap) as c:
        yield c


def _topic(client: WireClient, name: str, partitions: int = 1) -> uuid.UUID:
    """Creates `name` (auto-creation: the broker's default of 1 partition, or CreatePartitions for more) and
    returns its id as Metadata v13 answers it."""
    from kafka.protocol.admin import CreatePartitionsRequest

    meta = client.send(MetadataRequest(topics=[MetadataRequest.MetadataRequestTopic(name=name)],
                                       allow_auto_topic_creation=True, include_topic_authorized_operations=False), 13)
    assert meta.error_code == 0 and meta.topics[0].error_code == 0
    if partitions > 1:
        R = CreatePartitionsRequest
        r = client.send(R(topics=[R.CreatePartitionsTopic(name=name, count=partitions, assignments=None)],
                          timeout_ms=30000, validate_only=False), 3)
        assert r.results[0].error_code == 0
    return meta.topics[0].topic_id


def _api_versions_v5(broker: KopBroker, cluster_id: str | None, node_id: int):
    host, port = broker.bootstrap.rsplit(":", 1)
    with socket.create_connection((host, int(port)), timeout=30) as s:
        body = ApiVersionsRequest(client_software_name="kop-tests", client_software_version="1",
                                  cluster_id=cluster_id, node_id=node_id)
        s.sendall(encode_request(18, 5, 9, "kop-tests", body))
        payload = recv_exact(s, struct.unpack(">i", recv_exact(s, 4))[0])
    assert struct.unpack_from(">i", payload)[0] == 9
    return decode_message("ApiVersionsResponse", 5, payload, 4)  # the header of ApiVersions is v0 at every version


def test_api_versions_v5_checks_the_cluster_and_node_the_client_meant(broker: KopBroker, client: WireClient) -> None:
    meta = client.send(MetadataRequest(topics=[], allow_auto_topic_creation=False,
                                       include_topic_authorized_operations=False), 13)
    cluster_id, node_id = meta.cluster_id, meta.brokers[0].node_id
    plain = _api_versions_v5(broker, None, -1)
    ranges = {k.api_key: (k.min_version, k.max_version) for k in plain.api_keys}
    assert plain.error_code == 0
    assert {k: ranges[k] for k in (0, 1, 2, 3, 8, 9, 18, 75)} == {
        0: (0, 13), 1: (4, 18), 2: (1, 11), 3: (0, 13), 8: (2, 10), 9: (1, 10), 18: (0, 5), 75: (0, 0)}
    assert _api_versions_v5(broker, cluster_id, node_id).error_code == 0
    for other in ((cluster_id, node_id + 1), ("another-cluster", node_id)):
        wrong = _api_versions_v5(broker, *other)
        assert (wrong.error_code, wrong.api_keys) == (E.REBOOTSTRAP_REQUIRED, [])
    for half in ((cluster_id, -1), (None, node_id)):  # both or neither
        assert _api_versions_v5(broker, *half).error_code == E.INVALID_REQUEST


def test_describe_cluster_v2_lists_the_broker_unfenced(client: WireClient) -> None:
    """DescribeCluster v2 (KIP-1073, what Kafka 4.4's admin client sends): IsFenced per broker, false for every
    broker listed here, with or without IncludeFencedBrokers (this broker never lists a fenced one)."""
    from kafka.protocol.admin import DescribeClusterRequest

    for fenced in (False, True):
        r = client.send(DescribeClusterRequest(include_cluster_authorized_operations=False, endpoint_type=1,
                                               include_fenced_brokers=fenced), 2)
        assert (r.error_code, [(b.broker_id, b.is_fenced) for b in r.brokers]) == (0, [(1, False)]), r


def test_produce_v13_and_fetch_v18_name_topics_by_id(client: WireClient) -> None:
    name = f"ids-{uuid.uuid4().hex[:8]}"
    tid = _topic(client, name)
    for i in range(3):
        r = client.send(_produce_request(tid, build_batch([(b"k", f"v{i}".encode())])), 13)
        (t,) = r.responses
        assert (t.topic_id, t.partition_responses[0].error_code, t.partition_responses[0].base_offset) == (tid, 0, i)
    r = client.send(_produce_request(UNKNOWN_ID, build_batch([(b"k", b"x")])), 13)
    assert (r.responses[0].topic_id, r.responses[0].partition_responses[0].error_code) == (UNKNOWN_ID, E.UNKNOWN_TOPIC_ID)

    for version in (13, 18):
        r = client.send(_fetch_request(tid), version)
        (t,) = r.responses
        assert t.topic_id == tid and t.partitions[0].error_code == 0 and t.partitions[0].high_watermark == 3
        assert len(t.partitions[0].records) > 0
    r = client.send(_fetch_request(UNKNOWN_ID), 18)
    assert (r.responses[0].topic_id, r.responses[0].partitions[0].error_code) == (UNKNOWN_ID, E.UNKNOWN_TOPIC_ID)


def test_fetch_sessions_of_v18_are_keyed_by_topic_id(client: WireClient) -> None:
    name = f"sess-{uuid.uuid4().hex[:8]}"
    tid = _topic(client, name)
    client.send(_produce_request(tid, build_batch([(b"k", b"a"), (b"k", b"b")])), 13)
    full = client.send(_fetch_request(tid, offset=2, session=(0, 0)), 18)  # a new session, fetching at the end
    sid = full.session_id
    assert sid != 0 and [t.topic_id for t in full.responses] == [tid]
    # Incremental, nothing listed: the session remembers the partition by its id; nothing changed, nothing said.
    quiet = client.send(_fetch_request(tid, offset=-1, session=(sid, 1)), 18)
    assert (quiet.error_code, quiet.session_id, quiet.responses) == (0, sid, [])
    client.send(_produce_request(tid, build_batch([(b"k", b"c")])), 13)
    news = client.send(_fetch_request(tid, offset=-1, session=(sid, 2)), 18)
    (t,) = news.responses
    assert t.topic_id == tid and t.partitions[0].high_watermark == 3 and len(t.partitions[0].records) > 0
    # The partition leaves the session by id; then an incremental fetch has nothing to cover.
    gone = client.send(_fetch_request(tid, offset=-1, session=(sid, 3),
                                      forgotten=[FetchRequest.ForgottenTopic(topic_id=tid, partitions=[0])]), 18)
    assert (gone.error_code, gone.responses) == (0, [])
    # An unknown id joins a session too, answered UNKNOWN_TOPIC_ID.
    odd = client.send(_fetch_request(UNKNOWN_ID, offset=0, session=(sid, 4)), 18)
    assert [(t.topic_id, t.partitions[0].error_code) for t in odd.responses] == [(UNKNOWN_ID, E.UNKNOWN_TOPIC_ID)]


def test_offset_commit_and_fetch_v10_by_id_share_offsets_with_v9_by_name(client: WireClient) -> None:
    name = f"oc-{uuid.uuid4().hex[:8]}"
    group = f"g-{uuid.uuid4().hex[:8]}"
    tid = _topic(client, name)
    r = client.send(_commit_request(group, tid, 42), 10)
    assert [(t.topic_id, t.partitions[0].error_code) for t in r.topics] == [(tid, 0)]
    r = client.send(_commit_request(group, UNKNOWN_ID, 1), 10)
    assert [(t.topic_id, t.partitions[0].error_code) for t in r.topics] == [(UNKNOWN_ID, E.UNKNOWN_TOPIC_ID)]

    r = client.send(_offset_fetch_request(group, [tid, UNKNOWN_ID]), 10)
    (g,) = r.groups
    got = [(t.topic_id, t.partitions[0].committed_offset, t.partitions[0].error_code) for t in g.topics]
    assert got == [(tid, 42, 0), (UNKNOWN_ID, -1, E.UNKNOWN_TOPIC_ID)]
    everything = client.send(_offset_fetch_request(group, None), 10).groups[0].topics
    assert [(t.topic_id, t.partitions[0].committed_offset) for t in everything] == [(tid, 42)]
    # v9 names the topic: the same offset (it is stored under the topic's name whichever way it was named).
    G = OffsetFetchRequest.OffsetFetchRequestGroup
    v9 = client.send(OffsetFetchRequest(require_stable=False, groups=[G(
        group_id=group, member_id=None, member_epoch=-1,
        topics=[G.OffsetFetchRequestTopics(name=name, partition_indexes=[0])])]), 9)
    assert v9.groups[0].topics[0].partitions[0].committed_offset == 42


def test_list_offsets_v11_answers_tiered_timestamps_with_no_offset(client: WireClient) -> None:
    name = f"lo-{uuid.uuid4().hex[:8]}"
    tid = _topic(client, name)
    client.send(_produce_request(tid, build_batch([(b"k", b"a"), (b"k", b"b")])), 13)
    for timestamp, offset in ((-1, 2), (-2, 0), (-5, -1), (-6, -1)):
        p = client.send(_list_offsets_request(name, timestamp), 11).topics[0].partitions[0]
        assert (p.error_code, p.offset) == (0, offset), timestamp


def test_describe_topic_partitions_pages_with_a_cursor(client: WireClient) -> None:
    prefix = f"dtp-{uuid.uuid4().hex[:8]}"
    a, b = f"{prefix}-a", f"{prefix}-b"
    ids = {a: _topic(client, a, partitions=3), b: _topic(client, b, partitions=2)}
    missing = f"{prefix}-c"

    def page(cursor: tuple[str, int] | None, limit: int) -> tuple[list[tuple[str, int, list[int]]], tuple | None]:
        r = client.send(_describe_request([b, a, missing], limit, cursor), 0)
        nxt = r.next_cursor
        return ([(t.name, t.error_code, [p.partition_index for p in t.partitions]) for t in r.topics],
                None if nxt is None else (nxt.topic_name, nxt.partition_index))

    # Sorted by name; the limit stops topic a midway, then b's end exactly (the cursor names the next topic).
    assert page(None, 2) == ([(a, 0, [0, 1])], (a, 2))
    assert page((a, 2), 3) == ([(a, 0, [2]), (b, 0, [0, 1])], (missing, 0))
    assert page((missing, 0), 3) == ([(missing, E.UNKNOWN_TOPIC_OR_PARTITION, [])], None)
    whole = client.send(_describe_request([a]), 0).topics[0]
    assert whole.topic_id == ids[a] and not whole.is_internal
    assert [(p.leader_id, p.replica_nodes, p.isr_nodes, p.eligible_leader_replicas) for p in whole.partitions] == \
        [(1, [1], [1], [])] * 3
    assert whole.topic_authorized_operations > 0  # computed unasked, as Kafka does
    # A cursor outside the requested topics, or a negative partition, is INVALID_REQUEST.
    assert {t.error_code for t in client.send(_describe_request([a], 10, (b, 0)), 0).topics} == {E.INVALID_REQUEST}
    assert {t.error_code for t in client.send(_describe_request([a], 10, (a, -1)), 0).topics} == {E.INVALID_REQUEST}
    # All topics: listed by name from the cursor on, unknown ones never listed.
    listed = client.send(_describe_request([], 2000, (a, 0)), 0).topics
    assert [t.name for t in listed if t.name.startswith(prefix)] == [a, b]
