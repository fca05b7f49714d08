"""Hostile input to the share-group APIs and UpdateFeatures on a live broker of ours: bad member ids and epochs,
unknown topic ids, share-session epochs out of turn, acknowledgement batches out of range or malformed
(including one naming 2^62 offsets, which must not make the broker walk them), unknown feature updates and a
truncated frame. Each gets Kafka 4.4's error code (and message, where Kafka's validation has one), and the
broker keeps serving: the records the hostile requests named are acknowledged normally afterwards.

Requests are encoded with our codec (kop.protocol: kafka-python has no share-group messages); the codes are
Kafka's (the ErrorCode numbers), the messages Kafka 4.4's GroupCoordinatorService/SharePartition ones. The
sans-IO rules behind them: tests/test_share_partition.py, tests/test_share_groups_unit.py."""

from __future__ import annotations

import socket
import struct
import uuid
from typing import Any

import pytest

from kop.protocol import decode_response, encode_request
from kop.protocol.errors import ErrorCode as E
from kop.protocol.messages import IncrementalAlterConfigsRequest as I
from kop.protocol.messages import (
    ShareAcknowledgeRequest,
    ShareFetchRequest,
    ShareGroupHeartbeatRequest,
    UpdateFeaturesRequest,
)
from tests.support.broker import KopBroker
from tests.support.clients import create_topic
from tests.support.wire import recv_exact

HEARTBEAT, FETCH, ACK, UPDATE_FEATURES = 76, 78, 79, 57
ACCEPT = 1
Batch = ShareAcknowledgeRequest.AcknowledgeTopic.AcknowledgePartition.AcknowledgementBatch


class Client:
    def __init__(self, bootstrap: str) -> None:
        host, port = bootstrap.rsplit(":", 1)
        self.sock = socket.create_connection((host, int(port)), timeout=30)
        self.correlation_id = 0

    def call(self, api_key: int, version: int, body: Any) -> Any:
        self.correlation_id += 1
        self.sock.sendall(encode_request(api_key, version, self.correlation_id, "share-hostile", body))
        size = struct.unpack(">i", recv_exact(self.sock, 4))[0]
        corr, resp = decode_response(api_key, version, recv_exact(self.sock, size))
        assert corr == self.correlation_id
        return resp


@pytest.fixture(scope="module")
def broker(tmp_path_factory):
    b = KopBroker(tmp_path_factory.mktemp("kop-share-hostile")).start()
    yield b
    b.stop()


def heartbeat(c: Client, group: str, member: str, epoch: int, topics: list[str] | None = None,
              rack: str | None = None) -> Any:
    return c.call(HEARTBEAT, 1, ShareGroupHeartbeatRequest(group_id=group, member_id=member, member_epoch=epoch,
                                                           rack_id=rack, subscribed_topic_names=topics))


def fetch(c: Client, group: str, member: str, epoch: int, topic_id: bytes, batches: list[Any] | None = None) -> Any:
    F = ShareFetchRequest
    part = F.FetchTopic.FetchPartition(partition_index=0, acknowledgement_batches=batches or [])
    return c.call(FETCH, 1, F(group_id=group, member_id=member, share_session_epoch=epoch, max_wait_ms=0,
                              min_bytes=1, max_bytes=1 << 20, max_records=10, batch_size=10, share_acquire_mode=0,
                              is_renew_ack=False, topics=[F.FetchTopic(topic_id=topic_id, partitions=[part])],
                              forgotten_topics_data=[]))


def ack(c: Client, group: str, member: str, epoch: int, topic_id: bytes, first: int, last: int,
        types: list[int]) -> int:
    A = ShareAcknowledgeRequest
    part = A.AcknowledgeTopic.AcknowledgePartition(partition_index=0, acknowledgement_batches=[
        Batch(first_offset=first, last_offset=last, acknowledge_types=types)])
    resp = c.call(ACK, 1, A(group_id=group, member_id=member, share_session_epoch=epoch, is_renew_ack=False,
                            topics=[A.AcknowledgeTopic(topic_id=topic_id, partitions=[part])]))
    assert resp.error_code == 0, resp
    (t,) = resp.responses
    (p,) = t.partitions
    return p.error_code


def test_share_group_heartbeat_refusals_are_kafkas(broker) -> None:
    topic, group = f"hostile-hb-{uuid.uuid4().hex[:6]}", f"hostile-g-{uuid.uuid4().hex[:6]}"
    create_topic(broker.bootstrap, topic)
    c = Client(broker.bootstrap)
    for member, epoch, topics, rack, message in (
            ("", 0, [topic], None, "MemberId can't be empty."),
            ("  ", 0, [topic], None, "MemberId can't be empty."),
            ("m1", 0, [topic], " ", "RackId can't be empty."),
            ("m1", 0, None, None, "SubscribedTopicNames must be set in first request."),
            ("m1", 0, [], None, "SubscribedTopicNames must be set in first request."),
            ("m1", -2, None, None, "MemberEpoch is invalid.")):
        r = heartbeat(c, group, member, epoch, topics, rack)
        assert (r.error_code, r.error_message) == (E.INVALID_REQUEST, message), (member, epoch, r)
    assert heartbeat(c, group, "m1", 3).error_code == E.UNKNOWN_MEMBER_ID
    joined = heartbeat(c, group, "m1", 0, [topic])
    assert joined.error_code == 0 and joined.member_epoch > 0
    assert heartbeat(c, group, "m1", joined.member_epoch + 100).error_code == E.FENCED_MEMBER_EPOCH
    assert heartbeat(c, group, "m1", joined.member_epoch).error_code == 0  # still a member, nothing harmed


def test_share_fetch_and_acknowledge_refusals_then_normal_service(broker) -> None:
    from confluent_kafka import Producer

    topic, group = f"hostile-sf-{uuid.uuid4().hex[:6]}", f"hostile-g-{uuid.uuid4().hex[:6]}"
    create_topic(broker.bootstrap, topic)
    p = Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 0})
    for i in range(3):
        p.produce(topic, value=b"r%d" % i)
    assert p.flush(30) == 0
    c = Client(broker.bootstrap)
    (tp,) = heartbeat(c, group, "m1", 0, [topic]).assignment.topic_partitions
    tid = tp.topic_id
    # share.auto.offset.reset is latest by default: the share-partition starts at the log start with earliest

    r = c.call(44, 1, I(resources=[I.AlterConfigsResource(resource_type=32, resource_name=group, configs=[
        I.AlterConfigsResource.AlterableConfig(name="share.auto.offset.reset", config_operation=0,
                                               value="earliest")])], validate_only=False))
    assert r.responses[0].error_code == 0

    assert fetch(c, group, "m1", 5, tid).error_code == E.SHARE_SESSION_NOT_FOUND
    bad = [ShareFetchRequest.FetchTopic.FetchPartition.AcknowledgementBatch(
        first_offset=0, last_offset=0, acknowledge_types=[ACCEPT])]
    assert fetch(c, group, "m1", 0, tid, bad).error_code == E.INVALID_REQUEST  # no acks on a new session
    unknown = fetch(c, group, "m1", 0, uuid.uuid4().bytes)
    assert unknown.error_code == 0 and unknown.responses[0].partitions[0].error_code == E.UNKNOWN_TOPIC_ID
    assert fetch(c, group, "m1", 7, tid).error_code == E.INVALID_SHARE_SESSION_EPOCH
    got = fetch(c, group, "m1", 1, tid)  # the session holds the unknown id too: it answers UNKNOWN_TOPIC_ID again
    assert got.error_code == 0
    by_id = {t.topic_id: t.partitions[0] for t in got.responses}
    assert by_id[unknown.responses[0].topic_id].error_code == E.UNKNOWN_TOPIC_ID
    assert [(a.first_offset, a.last_offset) for a in by_id[tid].acquired_records] == [(0, 2)]

    epoch = 2
    for first, last, types, error in (
            (0, 2**62, [ACCEPT], E.INVALID_RECORD_STATE),  # far past what was acquired: refused at once
            (2, 1, [ACCEPT], E.INVALID_REQUEST),  # reversed
            (-5, 1, [ACCEPT], E.INVALID_REQUEST),  # negative
            (0, 2, [ACCEPT, ACCEPT], E.INVALID_REQUEST),  # neither one type nor one per offset
            (0, 2, [9], E.INVALID_REQUEST),  # no such acknowledge type
            (5, 7, [ACCEPT], E.INVALID_RECORD_STATE)):  # never acquired
        assert ack(c, group, "m1", epoch, tid, first, last, types) == error, (first, last, types)
        epoch += 1
    # Nothing of the refused batches applied: the records are still this member's, and accepting them works.
    assert ack(c, group, "m1", epoch, tid, 0, 2, [ACCEPT]) == 0
    assert ack(c, group, "m1", epoch + 1, tid, 0, 2, [ACCEPT]) == E.INVALID_RECORD_STATE  # already done


def test_update_features_refusals_are_kafkas(broker) -> None:
    U = UpdateFeaturesRequest
    c = Client(broker.bootstrap)

    def update(*updates: tuple[str, int, int]) -> Any:
        return c.call(UPDATE_FEATURES, 1, U(timeout_ms=1000, validate_only=True, feature_updates=[
            U.FeatureUpdateKey(feature=name, max_version_level=level, allow_downgrade=False, upgrade_type=kind)
            for name, level, kind in updates]))

    for name, level, kind, why in (
            ("share.version", 5, 1, "Local controller 1 only supports versions 0-2"),
            ("", 1, 1, "Local controller 1 does not support this feature."),
            ("share.version", -3, 1, "A feature version cannot be less than 0."),
            ("share.version", 1, 7, "The controller does not support the given upgrade type.")):
        r = update((name, level, kind))
        assert r.error_code == E.INVALID_UPDATE_VERSION and why in r.error_message, r
    assert update(("share.version", 1, 2), ("share.version", 1, 2)).error_code == E.INVALID_REQUEST
    assert update(("share.version", 1, 2)).error_code == 0  # a safe downgrade, validated only


def test_a_truncated_share_fetch_closes_only_its_connection(broker) -> None:
    c = Client(broker.bootstrap)
    frame = encode_request(FETCH, 1, 1, "share-hostile", ShareFetchRequest(
        group_id="g", member_id="m", share_session_epoch=0, max_wait_ms=0, min_bytes=1, max_bytes=1, max_records=1,
        batch_size=1, share_acquire_mode=0, is_renew_ack=False, topics=[], forgotten_topics_data=[]))
    raw = b"".join(bytes(part) for part in frame) if isinstance(frame, list) else bytes(frame)
    body = raw[4:-3]  # cut inside the body, framed with its own (shorter) length
    c.sock.sendall(struct.pack(">i", len(body)) + body)
    assert c.sock.recv(1) == b""  # the broker closed this connection, as Kafka does on a request it cannot parse
    other = Client(broker.bootstrap)
    assert heartbeat(other, "g-ok", "m", 0, ["t"]).error_code == 0
    assert broker.alive()


def test_share_version_0_turns_share_groups_off(broker) -> None:
    """share.version finalized at 0 (a downgrade through UpdateFeatures): the share-group APIs answer
    UNSUPPORTED_VERSION, as Kafka 4.4's isShareGroupProtocolEnabled; upgraded again, they serve."""
    U = UpdateFeaturesRequest
    c = Client(broker.bootstrap)

    def set_level(level: int, kind: int) -> None:
        r = c.call(UPDATE_FEATURES, 1, U(timeout_ms=1000, validate_only=False, feature_updates=[
            U.FeatureUpdateKey(feature="share.version", max_version_level=level, allow_downgrade=False,
                               upgrade_type=kind)]))
        assert r.error_code == 0, r

    set_level(0, 2)  # SAFE_DOWNGRADE
    try:
        r = heartbeat(c, "g-off", "m", 0, ["t"])
        assert (r.error_code, r.error_message) == (E.UNSUPPORTED_VERSION, "The version of API is not supported.")
        assert fetch(c, "g-off", "m", 0, uuid.uuid4().bytes).error_code == E.UNSUPPORTED_VERSION
    finally:
        set_level(2, 1)  # UPGRADE
    assert heartbeat(c, "g-off", "m", 0, ["t"]).error_code == 0


def test_share_coordinator_rpcs_write_then_read_and_the_leader_serves_that_state(broker) -> None:
    """ReadShareGroupState / WriteShareGroupState (84/85, what a share-partition leader sends its share coordinator
    in cluster mode: tests/test_cluster_share_groups.py) on one broker: a never-initialized share-partition is
    INVALID_REQUEST to read, as in Kafka 4.4, and readable once InitializeShareGroupState (83) made it; a written
    state reads back as written; and a share-partition first served after the write
    starts from it - r0 and r1 written ACKNOWLEDGED, the group's consumer gets r2 only. A state this broker could
    not take up (a batch of 2^62 offsets, a reversed one, an ACQUIRED state) is INVALID_REQUEST and not kept."""
    from confluent_kafka import Producer

    from kop.coordinator.share.shard import READ_UNINITIALIZED
    from kop.protocol.messages import InitializeShareGroupStateRequest as In
    from kop.protocol.messages import ReadShareGroupStateRequest as Rd
    from kop.protocol.messages import WriteShareGroupStateRequest as W

    topic, group = f"hostile-rpc-{uuid.uuid4().hex[:6]}", f"hostile-g-{uuid.uuid4().hex[:6]}"
    create_topic(broker.bootstrap, topic)
    p = Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 0})
    for i in range(3):
        p.produce(topic, value=b"r%d" % i)
    assert p.flush(30) == 0
    c = Client(broker.bootstrap)
    (tp,) = heartbeat(c, group, "m1", 0, [topic]).assignment.topic_partitions
    tid = tp.topic_id

    def read() -> Any:
        r = c.call(84, 0, Rd(group_id=group, topics=[Rd.ReadStateData(topic_id=tid, partitions=[
            Rd.ReadStateData.PartitionData(partition=0, leader_epoch=0)])]))
        return r.results[0].partitions[0]

    assert (read().error_code, read().error_message) == (E.INVALID_REQUEST, READ_UNINITIALIZED)
    init = c.call(83, 0, In(group_id=group, topics=[In.InitializeStateData(topic_id=tid, partitions=[
        In.PartitionData(partition=0, state_epoch=0, start_offset=0)])]))
    assert init.results[0].partitions[0].error_code == 0
    assert (read().error_code, read().start_offset, read().state_batches) == (0, 0, [])
    P = W.WriteStateData.PartitionData
    w = c.call(85, 0, W(group_id=group, topics=[W.WriteStateData(topic_id=tid, partitions=[P(
        partition=0, state_epoch=0, leader_epoch=0, start_offset=0,
        state_batches=[P.StateBatch(first_offset=0, last_offset=1, delivery_state=2, delivery_count=1)])])]))
    assert w.results[0].partitions[0].error_code == 0
    for first, last, state in ((0, 2**62, 2), (1, 0, 2), (0, 1, 1)):  # a range to walk for ever, reversed, ACQUIRED
        bad = c.call(85, 0, W(group_id=group, topics=[W.WriteStateData(topic_id=tid, partitions=[P(
            partition=0, state_epoch=0, leader_epoch=0, start_offset=0, state_batches=[P.StateBatch(
                first_offset=first, last_offset=last, delivery_state=state, delivery_count=1)])])]))
        assert bad.results[0].partitions[0].error_code == E.INVALID_REQUEST, (first, last, state)
    got = read()
    assert (got.error_code, got.start_offset) == (0, 0)
    assert [(b.first_offset, b.last_offset, b.delivery_state, b.delivery_count) for b in got.state_batches] == [
        (0, 1, 2, 1)]
    served = fetch(c, group, "m1", 0, tid)
    acquired = [(a.first_offset, a.last_offset) for t in served.responses for q in t.partitions
                for a in q.acquired_records]
    assert acquired == [(2, 2)], served


def test_state_epochs_fence_stale_writers_and_a_fenced_leader_takes_the_state_up_again(broker) -> None:
    """The share coordinator's epochs (kop/coordinator/share/shard.py) over the wire, and this broker's own
    share-partition leader obeying them. The leader took the share-partition up at leader epoch 1; another
    "leader" reads it at epoch 5 (the recorded epoch moves up): a write at epoch 4 is FENCED_LEADER_EPOCH, at 5
    it is taken. Our leader's next write (an acknowledgement) is fenced too: it forgets its window and takes the
    state up again from the share coordinator (at epoch 6), so the record the other leader wrote ACKNOWLEDGED
    is not delivered again. Then an InitializeShareGroupState at state epoch 3 fences writes at state epoch 2,
    ReadShareGroupStateSummary v1 answers the epochs, and DeleteShareGroupState leaves it uninitialized."""
    from confluent_kafka import Producer

    from kop.protocol.messages import DeleteShareGroupStateRequest as D
    from kop.protocol.messages import InitializeShareGroupStateRequest as In
    from kop.protocol.messages import ReadShareGroupStateRequest as Rd
    from kop.protocol.messages import ReadShareGroupStateSummaryRequest as S
    from kop.protocol.messages import WriteShareGroupStateRequest as W

    topic, group = f"hostile-epochs-{uuid.uuid4().hex[:6]}", f"hostile-g-{uuid.uuid4().hex[:6]}"
    create_topic(broker.bootstrap, topic)
    p = Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 0})
    for i in range(4):
        p.produce(topic, value=b"r%d" % i)
    assert p.flush(30) == 0
    c = Client(broker.bootstrap)
    altered = c.call(91, 0, _alter(group, topic, 0))  # start at the log start (before the group has members)
    assert altered.error_code == 0 and altered.responses[0].partitions[0].error_code == 0
    hb = heartbeat(c, group, "m1", 0, [topic])
    tid = hb.assignment.topic_partitions[0].topic_id

    def summary() -> Any:
        r = c.call(87, 1, S(group_id=group, topics=[S.ReadStateSummaryData(topic_id=tid, partitions=[
            S.ReadStateSummaryData.PartitionData(partition=0, leader_epoch=0)])]))
        return r.results[0].partitions[0]

    def write(state_epoch: int, leader_epoch: int, batches: list[tuple[int, int, int, int]]) -> int:
        P = W.WriteStateData.PartitionData
        r = c.call(85, 0, W(group_id=group, topics=[W.WriteStateData(topic_id=tid, partitions=[P(
            partition=0, state_epoch=state_epoch, leader_epoch=leader_epoch, start_offset=-1,
            state_batches=[P.StateBatch(first_offset=f, last_offset=la, delivery_state=s, delivery_count=n)
                           for f, la, s, n in batches])])]))
        return int(r.results[0].partitions[0].error_code)

    served = fetch(c, group, "m1", 0, tid)  # our leader takes the share-partition up
    assert [(a.first_offset, a.last_offset) for t in served.responses for q in t.partitions
            for a in q.acquired_records] == [(0, 3)]
    taken = summary()
    assert (taken.error_code, taken.leader_epoch, taken.start_offset) == (0, 1, 0)
    state_epoch = taken.state_epoch
    r = c.call(84, 0, Rd(group_id=group, topics=[Rd.ReadStateData(topic_id=tid, partitions=[
        Rd.ReadStateData.PartitionData(partition=0, leader_epoch=5)])]))
    assert r.results[0].partitions[0].error_code == 0
    assert write(state_epoch, 4, [(0, 0, 2, 1)]) == E.FENCED_LEADER_EPOCH
    assert write(state_epoch, 5, [(0, 0, 2, 1)]) == 0  # r0 ACKNOWLEDGED by the newer leader
    # our leader's acknowledgement is refused by the share coordinator: the partition's error, window forgotten
    assert ack(c, group, "m1", 1, tid, 1, 1, [1]) != 0
    again = fetch(c, group, "m1", 0, tid)  # taken up again: r0 stays acknowledged, r1-r3 delivered again
    assert [(a.first_offset, a.last_offset) for t in again.responses for q in t.partitions
            for a in q.acquired_records] == [(1, 3)], again
    assert summary().leader_epoch == 6
    assert heartbeat(c, group, "m1", -1).error_code == 0  # leaves: the group may be reset

    init = c.call(83, 0, In(group_id=group, topics=[In.InitializeStateData(topic_id=tid, partitions=[
        In.PartitionData(partition=0, state_epoch=state_epoch + 2, start_offset=2)])]))
    assert init.results[0].partitions[0].error_code == 0
    assert write(state_epoch + 1, 6, []) == E.FENCED_STATE_EPOCH
    got = summary()
    assert (got.state_epoch, got.start_offset, got.delivery_complete_count) == (state_epoch + 2, 2, 0)
    assert write(state_epoch + 2, 6, [(2, 3, 2, 1)]) == 0
    assert summary().delivery_complete_count == 2
    stale = c.call(83, 0, In(group_id=group, topics=[In.InitializeStateData(topic_id=tid, partitions=[
        In.PartitionData(partition=0, state_epoch=state_epoch, start_offset=0)])]))
    assert stale.results[0].partitions[0].error_code == E.FENCED_STATE_EPOCH
    for _ in range(2):  # deleting twice: the second finds nothing, and succeeds (as Kafka)
        d = c.call(86, 0, D(group_id=group, topics=[D.DeleteStateData(topic_id=tid, partitions=[
            D.DeleteStateData.PartitionData(partition=0)])]))
        assert d.results[0].partitions[0].error_code == 0
    gone = summary()
    assert (gone.error_code, gone.start_offset, gone.delivery_complete_count) == (0, -1, -1)
    assert write(0, 9, []) == E.INVALID_REQUEST
    unknown = c.call(86, 0, D(group_id=group, topics=[D.DeleteStateData(topic_id=bytes(16), partitions=[
        D.DeleteStateData.PartitionData(partition=0)])]))
    assert unknown.results[0].partitions[0].error_code == E.UNKNOWN_TOPIC_OR_PARTITION


def _alter(group: str, topic: str, offset: int) -> Any:
    from kop.protocol.messages import AlterShareGroupOffsetsRequest as A
    return A(group_id=group, topics=[A.AlterShareGroupOffsetsRequestTopic(topic_name=topic, partitions=[
        A.AlterShareGroupOffsetsRequestPartition(partition_index=0, start_offset=offset)])])
