"""The share coordinator's rules for its five RPCs, as Apache Kafka 4.4's ShareCoordinatorShard applies them
(its maybeGet*Error checks, read from the 4.4 classes), sans-IO: each function takes the state stored now for a
share-partition (None: never initialized, or deleted) and the request's fields, and answers an error or what
to store. The handlers of InitializeShareGroupState (83), ReadShareGroupState (84), WriteShareGroupState (85),
DeleteShareGroupState (86) and ReadShareGroupStateSummary (87) in kop/kafka/apis/ and the persister's local
path (persister.py, a broker that owns the state's __share_group_state partition) both use them, so a
share-partition leader gets the same answers whether its share coordinator is itself or another broker.

Epochs (KIP-932): the state epoch is set by Initialize (an offset reset raises it) and a Write carrying an
older one is FENCED_STATE_EPOCH; the leader epoch is the share-partition leader's, recorded by its Read and
each Write, and a Read or Write carrying an older one is FENCED_LEADER_EPOCH: a leader that lost the
partition cannot overwrite the state its successor took up. Equal epochs pass (Kafka's `>` comparisons).
Topic existence (UNKNOWN_TOPIC_OR_PARTITION) is the handler's check, it needs the broker's topics.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from kop.coordinator.share.records import ShareState, StateBatch
from kop.protocol.errors import ErrorCode

#: Kafka's messages (ShareCoordinatorShard's static exceptions, Errors' default messages)
NEGATIVE_PARTITION = "The partition id cannot be a negative number."
NEGATIVE_LEADER_EPOCH = "The leader epoch cannot be a negative number."
NEGATIVE_STATE_EPOCH = "The state epoch cannot be a negative number."
WRITE_UNINITIALIZED = "Write operation on uninitialized share partition not allowed."
READ_UNINITIALIZED = "Read operation on uninitialized share partition not allowed."
FENCED_LEADER = "The leader epoch in the request is older than the epoch on the broker."
FENCED_STATE = "The coordinator rejected the request because the state epoch did not match."
MAX_STATE_SPAN = 1 << 16
_STATES = (0, 2, 4)
#: ReadShareGroupStateSummary of a share-partition never initialized (Kafka's PartitionFactory defaults)
UNINITIALIZED_START_OFFSET = -1


@dataclass(frozen=True, slots=True)
class Refused:
    error: int
    message: str | None


def _invalid(partition: int, **epochs: int) -> Refused | None:
    if partition < 0:
        return Refused(ErrorCode.INVALID_REQUEST, NEGATIVE_PARTITION)
    for name, value in epochs.items():
        if value < 0:
            return Refused(ErrorCode.INVALID_REQUEST,
                           NEGATIVE_LEADER_EPOCH if name == "leader_epoch" else NEGATIVE_STATE_EPOCH)
    return None


def _next_snapshot(old: ShareState | None) -> int:
    return old.snapshot_epoch + 1 if old is not None else 0


def initialize(old: ShareState | None, partition: int, state_epoch: int, start_offset: int) -> Refused | ShareState:
    """InitializeShareGroupState: a fresh state (nothing in flight) at `start_offset` (-1: the leader picks it
    by share.auto.offset.reset when it takes the share-partition up) and `state_epoch`."""
    refused = _invalid(partition, state_epoch=state_epoch)
    if refused is not None:
        return refused
    if old is not None and old.state_epoch > state_epoch:
        return Refused(ErrorCode.FENCED_STATE_EPOCH, FENCED_STATE)
    return ShareState(start_offset, (), _next_snapshot(old), state_epoch, 0)


def read(old: ShareState | None, partition: int, leader_epoch: int) -> Refused | tuple[ShareState, bool]:
    """ReadShareGroupState: the state, and whether it must be stored again first because the reader's leader
    epoch is newer than the one recorded (Kafka writes that as a ShareUpdate; here a snapshot)."""
    refused = _invalid(partition, leader_epoch=leader_epoch)
    if refused is not None:
        return refused
    if old is None:
        return Refused(ErrorCode.INVALID_REQUEST, READ_UNINITIALIZED)
    if old.leader_epoch > leader_epoch:
        return Refused(ErrorCode.FENCED_LEADER_EPOCH, FENCED_LEADER)
    if old.leader_epoch == leader_epoch:
        return old, False
    return replace(old, snapshot_epoch=old.snapshot_epoch + 1, leader_epoch=leader_epoch), True


def write(old: ShareState | None, partition: int, state_epoch: int, leader_epoch: int, start_offset: int,
          batches: tuple[StateBatch, ...]) -> Refused | ShareState:
    """WriteShareGroupState: the share-partition's state as the leader sends it (its whole window here; a
    start offset of -1 keeps the stored one), recorded with the leader's epochs."""
    refused = _invalid(partition, leader_epoch=leader_epoch, state_epoch=state_epoch)
    if refused is not None:
        return refused
    if old is None:
        return Refused(ErrorCode.INVALID_REQUEST, WRITE_UNINITIALIZED)
    if old.leader_epoch > leader_epoch:
        return Refused(ErrorCode.FENCED_LEADER_EPOCH, FENCED_LEADER)
    if old.state_epoch > state_epoch:
        return Refused(ErrorCode.FENCED_STATE_EPOCH, FENCED_STATE)
    start = start_offset if start_offset >= 0 else old.start_offset
    invalid = _invalid_state(start_offset, start, batches)
    if invalid is not None:
        return Refused(ErrorCode.INVALID_REQUEST, invalid)
    return ShareState(start, batches, old.snapshot_epoch + 1, state_epoch, leader_epoch)


def _invalid_state(start_offset: int, start: int, batches: tuple[StateBatch, ...]) -> str | None:
    """Why a written state cannot be taken, or None: not Kafka's check (its share coordinator keeps batches as
    ranges) but this broker's, whose leaders walk a state's window offset by offset when they take it up
    (partition.py): StartOffset below -1, a batch with FirstOffset > LastOffset or below the start offset, a
    delivery state other than 0/2/4 (AVAILABLE / ACKNOWLEDGED / ARCHIVED), a negative delivery count, or
    batches reaching more than MAX_STATE_SPAN offsets past the start (a leader's window holds at most 2000
    in-flight records; more is a hostile request)."""
    if start_offset < -1:
        return f"Invalid start offset {start_offset}."
    for first, last, state, count in batches:
        if not start <= first <= last or last - start >= MAX_STATE_SPAN:
            return f"Invalid state batch {first}-{last} for start offset {start}."
        if state not in _STATES or count < 0:
            return f"Invalid delivery state {state} / count {count}."
    return None


def delete(old: ShareState | None, partition: int) -> Refused | bool:
    """DeleteShareGroupState: whether there is a state to tombstone (deleting a missing one succeeds)."""
    refused = _invalid(partition)
    return refused if refused is not None else old is not None


@dataclass(frozen=True, slots=True)
class Summary:
    state_epoch: int
    leader_epoch: int
    start_offset: int
    delivery_complete_count: int


def summary(old: ShareState | None, partition: int) -> Refused | Summary:
    """ReadShareGroupStateSummary: the epochs and start offset without the batches (start -1, epochs 0 and
    delivery-complete count -1 for a share-partition never initialized, as Kafka answers)."""
    refused = _invalid(partition)
    if refused is not None:
        return refused
    if old is None:
        return Summary(0, 0, UNINITIALIZED_START_OFFSET, -1)
    return Summary(old.state_epoch, old.leader_epoch, old.start_offset, old.delivery_complete_count())
