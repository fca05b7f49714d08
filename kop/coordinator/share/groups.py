"""Share-group membership (KIP-932's ShareGroupHeartbeat), sans-IO: times are the caller's `now` (ms).

A share group's members heartbeat as KIP-848 consumers do (member epoch 0 joins, -1 leaves, the group epoch
moves when membership, subscriptions or the subscribed topics change), but there is nothing to reconcile:
a share-partition is read by every member it is assigned to at once, records being handed out one lock at
a time (partition.py), so a member's epoch is the group epoch as soon as it heartbeats and no partition is
ever revoked first. The assignment gives every member every partition of the topics it subscribes to
(Kafka's SimpleAssignor spreads the members over the partitions when there are more partitions than
members; with as many members as partitions or more - the queue case - it too gives each partition to
every member). The topic metadata is the consumer-group machine's (kop/coordinator/consumer_group.py's
`Metadata`: Kafka name -> (topic id, partition count)), read through the callable the caller gives.

The groups are durable through the coordinator (coordinator.py, group_records.py: Kafka's share-group
records in __consumer_offsets). How it differs from Kafka 4.4: no group size limit; no rack-aware assignment;
a member's PreviousMemberEpoch is not kept (its record carries the member epoch twice).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from kop.coordinator.consumer_group import Metadata, Partitions
from kop.protocol.errors import ErrorCode

LEAVE_EPOCH = -1
ASSIGNOR = "simple"


@dataclass(slots=True)
class ShareMember:
    member_id: str
    member_epoch: int
    subscribed: frozenset[str]
    client_id: str
    client_host: str
    rack_id: str | None
    deadline: int  # session expiry (ms)
    assigned: Partitions = field(default_factory=dict)
    sent: Partitions | None = None  # the assignment last answered, None before the first


@dataclass(slots=True)
class ShareGroup:
    group_id: str
    group_epoch: int = 0
    assignment_epoch: int = 0
    members: dict[str, ShareMember] = field(default_factory=dict)
    #: the topics its members subscribed to since this coordinator serves it, or whose offsets were altered here:
    #: where its share-partitions have state (Kafka records its initialized share-partitions in
    #: __consumer_offsets, ShareGroupStatePartitionMetadata; this set is in memory only)
    state_topics: set[str] = field(default_factory=set)

    @property
    def state(self) -> str:
        return "Stable" if self.members else "Empty"


@dataclass(frozen=True, slots=True)
class ShareHeartbeat:
    group_id: str
    member_id: str
    member_epoch: int
    rack_id: str | None
    subscribed_topic_names: list[str] | None
    client_id: str
    client_host: str


@dataclass(frozen=True, slots=True)
class ShareHeartbeatResult:
    error: int
    error_message: str | None = None
    member_id: str | None = None
    member_epoch: int = 0
    assignment: Partitions | None = None


def _blank(value: str | None) -> bool:
    """Kafka's Utils.throwIfEmptyString test: set, and only whitespace."""
    return value is not None and not value.strip()


def _invalid(req: ShareHeartbeat) -> str | None:
    """Kafka 4.4's throwIfShareGroupHeartbeatRequestIsInvalid, in its order: the INVALID_REQUEST message."""
    if _blank(req.member_id) or not req.member_id:
        return "MemberId can't be empty."
    if _blank(req.group_id) or not req.group_id:
        return "GroupId can't be empty."
    if _blank(req.rack_id):
        return "RackId can't be empty."
    if req.member_epoch == 0 and not req.subscribed_topic_names:
        return "SubscribedTopicNames must be set in first request."
    if req.member_epoch < LEAVE_EPOCH:
        return "MemberEpoch is invalid."
    return None


class ShareGroups:
    """Every share group of this coordinator; `left` collects the members that left or expired, whose
    acquired records the caller releases."""

    def __init__(self, metadata: Callable[[], Metadata], session_timeout_ms: int, heartbeat_interval_ms: int) -> None:
        self.groups: dict[str, ShareGroup] = {}
        self.metadata = metadata
        self.session_timeout_ms = session_timeout_ms
        self.heartbeat_interval_ms = heartbeat_interval_ms
        self.left: list[tuple[str, str]] = []  # (group id, member id)

    def heartbeat(self, req: ShareHeartbeat, now: int) -> ShareHeartbeatResult:
        refused = _invalid(req)
        if refused is not None:
            return ShareHeartbeatResult(ErrorCode.INVALID_REQUEST, refused)
        group = self.groups.get(req.group_id)
        if req.member_epoch == LEAVE_EPOCH:
            if group is not None and group.members.pop(req.member_id, None) is not None:
                self.left.append((req.group_id, req.member_id))
                self._bump(group)
            return ShareHeartbeatResult(0, member_id=req.member_id, member_epoch=LEAVE_EPOCH)
        if req.member_epoch == 0:
            group = self.groups.setdefault(req.group_id, ShareGroup(req.group_id))
            member = group.members.get(req.member_id)
            if member is None:
                member = group.members[req.member_id] = ShareMember(
                    req.member_id, 0, frozenset(), req.client_id, req.client_host, req.rack_id, 0)
                group.group_epoch += 1
        else:
            member = group.members.get(req.member_id) if group is not None else None
            if group is None or member is None:
                return ShareHeartbeatResult(ErrorCode.UNKNOWN_MEMBER_ID,
                                            f"Member {req.member_id} is not a member of group {req.group_id}.")
            if req.member_epoch != member.member_epoch:
                return ShareHeartbeatResult(ErrorCode.FENCED_MEMBER_EPOCH,
                                            f"The share group member has a smaller member epoch "
                                            f"({req.member_epoch}) than the one known by the group coordinator "
                                            f"({member.member_epoch}). The member must abandon all its partitions "
                                            f"and rejoin.")
        member.deadline = now + self.session_timeout_ms
        if req.rack_id is not None:
            member.rack_id = req.rack_id
        if req.subscribed_topic_names is not None and frozenset(req.subscribed_topic_names) != member.subscribed:
            member.subscribed = frozenset(req.subscribed_topic_names)
            group.state_topics.update(member.subscribed)
            group.group_epoch += 1
        self._assign(group)
        member.member_epoch = group.group_epoch
        assignment = None
        if member.sent != member.assigned:
            assignment = member.sent = member.assigned
        return ShareHeartbeatResult(0, member_id=member.member_id, member_epoch=member.member_epoch,
                                    assignment=assignment)

    def _bump(self, group: ShareGroup) -> None:
        group.group_epoch += 1
        self._assign(group)

    def _assign(self, group: ShareGroup) -> None:
        """Each member: every partition of its subscribed topics (the topics that exist now). A changed
        assignment (a topic created or grown) moves the group epoch."""
        topics = self.metadata()
        changed = False
        for m in group.members.values():
            target = {topics[n][0]: frozenset(range(topics[n][1])) for n in m.subscribed if n in topics}
            if target != m.assigned:
                m.assigned = target
                changed = True
        if changed and group.assignment_epoch == group.group_epoch:
            group.group_epoch += 1
        group.assignment_epoch = group.group_epoch

    def expire(self, now: int) -> None:
        """Members whose session ran out are removed (into `left`)."""
        for group in self.groups.values():
            gone = [m for m in group.members.values() if m.deadline <= now]
            for m in gone:
                del group.members[m.member_id]
                self.left.append((group.group_id, m.member_id))
            if gone:
                self._bump(group)

    def next_deadline(self) -> int | None:
        deadlines = [m.deadline for g in self.groups.values() for m in g.members.values()]
        return min(deadlines) if deadlines else None

    def take_left(self) -> list[tuple[str, str]]:
        out, self.left = self.left, []
        return out
