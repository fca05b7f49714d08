"""The share coordinator's rules for InitializeShareGroupState (83), ReadShareGroupState (84),
WriteShareGroupState (85), DeleteShareGroupState (86) and ReadShareGroupStateSummary (87), sans-IO
(kop/coordinator/share/shard.py: Apache Kafka 4.4's ShareCoordinatorShard checks), and their wire layouts
against Kafka 4.4's (the schemas read from its generated message classes). Over the wire on a broker:
tests/test_share_hostile.py; the admin commands that send them: tests/e2e/test_share_group_offsets.py."""

from __future__ import annotations

import pytest

from kop.coordinator.share import records as srec
from kop.coordinator.share import shard
from kop.coordinator.share.records import ShareState
from kop.coordinator.share.shard import Refused, Summary
from kop.protocol.codec import decode_request, decode_request_header, encode_response
from kop.protocol.errors import ErrorCode as E
from kop.protocol.messages import (
    InitializeShareGroupStateRequest,
    ReadShareGroupStateSummaryResponse,
)

ACKED, ARCHIVED, AVAILABLE = 2, 4, 0


def test_initialize_makes_a_fresh_state_and_fences_an_older_state_epoch() -> None:
    fresh = shard.initialize(None, 0, 0, -1)
    assert fresh == ShareState(-1, (), 0, 0, 0)
    old = ShareState(10, ((10, 12, ACKED, 1),), snapshot_epoch=4, state_epoch=3, leader_epoch=7)
    reset = shard.initialize(old, 0, 4, 20)
    assert reset == ShareState(20, (), 5, 4, 0)  # nothing in flight, the next snapshot epoch
    assert shard.initialize(old, 0, 3, 20) == ShareState(20, (), 5, 3, 0)  # an equal epoch passes (Kafka's `>`)
    assert shard.initialize(old, 0, 2, 20) == Refused(E.FENCED_STATE_EPOCH, shard.FENCED_STATE)
    assert shard.initialize(None, 0, -1, 0) == Refused(E.INVALID_REQUEST, shard.NEGATIVE_STATE_EPOCH)
    assert shard.initialize(None, -1, 0, 0) == Refused(E.INVALID_REQUEST, shard.NEGATIVE_PARTITION)


def test_read_records_a_newer_leader_epoch_and_fences_an_older_one() -> None:
    assert shard.read(None, 0, 1) == Refused(E.INVALID_REQUEST, shard.READ_UNINITIALIZED)
    state = ShareState(5, ((5, 6, ACKED, 1),), snapshot_epoch=2, state_epoch=1, leader_epoch=3)
    assert shard.read(state, 0, 3) == (state, False)  # the same leader: nothing to store
    newer = shard.read(state, 0, 4)
    assert newer == (ShareState(5, ((5, 6, ACKED, 1),), 3, 1, 4), True)
    assert shard.read(state, 0, 2) == Refused(E.FENCED_LEADER_EPOCH, shard.FENCED_LEADER)
    assert shard.read(state, 0, -1) == Refused(E.INVALID_REQUEST, shard.NEGATIVE_LEADER_EPOCH)


def test_a_write_from_a_stale_leader_epoch_or_state_epoch_is_fenced() -> None:
    state = ShareState(5, (), snapshot_epoch=2, state_epoch=1, leader_epoch=3)
    batches = ((5, 6, ACKED, 1),)
    assert shard.write(None, 0, 0, 0, 5, batches) == Refused(E.INVALID_REQUEST, shard.WRITE_UNINITIALIZED)
    assert shard.write(state, 0, 1, 2, 5, batches) == Refused(E.FENCED_LEADER_EPOCH, shard.FENCED_LEADER)
    assert shard.write(state, 0, 0, 3, 5, batches) == Refused(E.FENCED_STATE_EPOCH, shard.FENCED_STATE)
    # the leader epoch is checked first, as Kafka does
    assert shard.write(state, 0, 0, 2, 5, batches) == Refused(E.FENCED_LEADER_EPOCH, shard.FENCED_LEADER)
    assert shard.write(state, 0, 1, 3, 5, batches) == ShareState(5, batches, 3, 1, 3)
    assert shard.write(state, 0, 2, 9, -1, batches) == ShareState(5, batches, 3, 2, 9)  # -1 keeps the start
    assert shard.write(state, 0, -1, 3, 5, batches) == Refused(E.INVALID_REQUEST, shard.NEGATIVE_STATE_EPOCH)
    assert shard.write(state, 0, 1, -1, 5, batches) == Refused(E.INVALID_REQUEST, shard.NEGATIVE_LEADER_EPOCH)


@pytest.mark.parametrize("batch", [(4, 6, ACKED, 1), (6, 5, ACKED, 1), (5, 6, 1, 1), (5, 6, ACKED, -1),
                                   (5, 5 + shard.MAX_STATE_SPAN, ACKED, 1)])
def test_a_state_this_broker_could_not_walk_is_invalid(batch: tuple[int, int, int, int]) -> None:
    state = ShareState(5, (), leader_epoch=0)
    got = shard.write(state, 0, 0, 0, 5, (batch,))
    assert isinstance(got, Refused) and got.error == E.INVALID_REQUEST


def test_delete_and_summary() -> None:
    assert shard.delete(None, 0) is False  # nothing to tombstone, and no error (as Kafka)
    state = ShareState(10, ((10, 11, ACKED, 1), (12, 12, AVAILABLE, 1), (13, 15, ARCHIVED, 5)), 4, 2, 6)
    assert shard.delete(state, 0) is True
    assert shard.delete(state, -1) == Refused(E.INVALID_REQUEST, shard.NEGATIVE_PARTITION)
    assert shard.summary(None, 0) == Summary(0, 0, -1, -1)
    assert shard.summary(state, 0) == Summary(2, 6, 10, 5)  # 2 acknowledged + 3 archived


def test_snapshots_keep_the_state_and_leader_epochs() -> None:
    state = ShareState(7, ((7, 8, ACKED, 2),), snapshot_epoch=3, state_epoch=5, leader_epoch=9)
    raw = srec.encode_snapshot(state, now_ms=1)
    assert srec.decode_value(srec.SNAPSHOT, raw) == state
    update = ShareState(-1, ((9, 9, ACKED, 1),), snapshot_epoch=4, leader_epoch=10)
    merged = srec.apply_update(state, update)
    assert (merged.state_epoch, merged.leader_epoch, merged.start_offset) == (5, 10, 7)


def test_wire_layouts_are_kafka_44s() -> None:
    """Bytes as Kafka 4.4's InitializeShareGroupStateRequestData v0 writes them (group "g", one topic, partition
    3, state epoch 2, start offset -1), and a ReadShareGroupStateSummary v1 partition with its
    DeliveryCompleteCount (absent at v0)."""
    tid = bytes(range(16))
    header = b"\x00\x53\x00\x00\x00\x00\x00\x07\x00\x01c\x00"  # key 83 v0, correlation 7, client "c", tags
    body = (b"\x02g" + b"\x02" + tid + b"\x02" + b"\x00\x00\x00\x03" + b"\x00\x00\x00\x02"
            + b"\xff" * 8 + b"\x00" + b"\x00" + b"\x00")
    frame = header + body
    head, offset = decode_request_header(frame)
    req = decode_request(head.api_key, head.api_version, frame, offset)
    assert isinstance(req, InitializeShareGroupStateRequest)
    p = req.topics[0].partitions[0]
    assert (req.group_id, req.topics[0].topic_id, p.partition, p.state_epoch, p.start_offset) == ("g", tid, 3, 2, -1)
    R = ReadShareGroupStateSummaryResponse
    resp = R(results=[R.ReadStateSummaryResult(topic_id=tid, partitions=[R.PartitionResult(
        partition=0, error_code=0, error_message=None, state_epoch=1, leader_epoch=2, start_offset=3,
        delivery_complete_count=4)])])
    v0, v1 = (b"".join(bytes(b) for b in encode_response(87, v, 1, resp)) for v in (0, 1))
    assert len(v1) == len(v0) + 4 and v1.endswith(b"\x00\x00\x00\x04\x00\x00\x00")


def test_streams_group_describe_v1_bytes_are_kafka_44s() -> None:
    """StreamsGroupDescribe v1's group (kop/kafka/apis/streams_group_describe.py): the bytes Kafka 4.4's
    StreamsGroupDescribeResponseData writes for the same group (MessageUtil.toByteBufferAccessor at v1: a null
    TopologyDescription, status NOT_STORED, assignor "sticky"); v0 leaves the three fields out."""
    from kop.protocol.messages import StreamsGroupDescribeResponse as R
    g = R.DescribedGroup(error_code=0, error_message=None, group_id="g", group_state="Empty", group_epoch=3,
                         assignment_epoch=2, topology=None, members=[], authorized_operations=-2147483648,
                         topology_description=None, topology_description_status=1, assignor_name="sticky")
    v0, v1 = (b"".join(bytes(b) for b in encode_response(89, v, 1, R(throttle_time_ms=0, groups=[g])))[9:]
              for v in (0, 1))
    assert v1.hex() == "0000000002000000026706456d7074790000000300000002ff0180000000ff0107737469636b790000"
    assert v0 == v1[:-len("ff0107737469636b790000") // 2] + b"\x00\x00"
