"""KIP-848's consumer group protocol (ConsumerGroupHeartbeat), sans-IO, beside the classic one.

With `group.protocol=consumer` (Java 4.x, librdkafka 2.12+) there is no join/sync barrier: each member
heartbeats, the coordinator computes every member's *target* assignment with a server-side assignor
(kop/coordinator/assignors.py) and moves each member towards it on its own, never handing a partition to
a member before its previous owner has given it up. The rules, error codes and records are Apache Kafka
4.x's (its GroupMetadataManager and CurrentAssignmentBuilder; research/kip848.md §1-§6), because Java and
librdkafka consumers are written against them.

Driven like group_state.GroupStateMachine (kop/coordinator/sansio.py: no I/O, no timers of its own;
tests with a fake clock in tests/test_coordinator_consumer_group.py):

* `heartbeat(request, token, now)`: the answer comes out of `take_effects()` as `HeartbeatAnswer(token,
  result)` - at once for an error, else after the `Write` of its records is reported durable through
  `write_done(write_id, error, now)` (a failed write answers with that error);
* the classic requests of a consumer group's classic members (KIP-848 online migration; tests in
  tests/test_coordinator_consumer_group_migration.py): `classic_join` and `classic_sync` answer with
  group_state's `Answer(token, JoinResult | SyncResult)`, `classic_heartbeat` and `classic_leave` return;
  an upgrade or downgrade also makes the classic machine (`classic`) answer or rebalance;
* timers (session, rebalance; a classic member's join and sync) are deadlines: `next_deadline()` /
  `expire_timers(now)`; a member fenced by one produces a `Write` of its tombstones;
* `metadata()` (given to the constructor) is the broker's topics now, name -> (topic id, partitions). Each
  heartbeat recomputes the group's subscription metadata from it, so a subscribed topic created, deleted or
  grown bumps the group epoch and yields a new target assignment at the group's next heartbeat (Kafka 4.0
  does the same on its metadata refresh).

The three epochs: the *group epoch* moves whenever an input of the assignment changes (a member joins,
leaves or changes its subscription; subscribed topics change); the *assignment epoch* is the group epoch
the current targets were computed for; a *member epoch* is the assignment epoch the member has reached.
Each partition a member holds also has an *assignment epoch* of its own, the member epoch at which the member
got it (KIP-1251, Kafka 4.3+): an OffsetCommit carrying an older member epoch than the member's - one sent
while the heartbeat that moved the member was being answered - is accepted for partitions it held then.

How we differ from Kafka 4.x, and why:

* Regular expressions (`SubscribedTopicRegex`, v1) are compiled with Google RE2 (the google-re2 package,
  the C++ library RE2/J follows; both reject backreferences and lookaround) and match whole topic names,
  as Kafka's do. They are resolved synchronously at each heartbeat against the broker's topics, not by a
  background task at most every 10 s; a changed resolution bumps the group epoch at once, where Kafka
  bumps it when its asynchronous resolution completes. There is no ACL filtering (this broker has no ACLs).
* Online migration (research/kip848.md §7) as Kafka 4.x, under groupConsumerMigrationPolicy (Kafka's
  group.consumer.migration.policy, default bidirectional): a ConsumerGroupHeartbeat joining an empty
  classic group replaces it whatever the policy; one joining a classic group with members *upgrades* it
  (its members become classic members of the consumer group, STABLE at the classic generation with the
  partitions they had), or gets GROUP_ID_NOT_FOUND with Kafka's reason. Classic members are then served
  here (`classic_join/sync/heartbeat/leave`): JoinGroup is answered at once with the member epoch as
  generation, SyncGroup with the assignor's partitions, Heartbeat with REBALANCE_IN_PROGRESS when the member
  must rejoin; join and sync timers stand in for the rebalance timeout. When the members left after a
  leave or a fencing all use the classic protocol, the group is *downgraded*: handed to the classic
  machine at the group epoch, each member holding its target assignment, and it rebalances; so it is when a
  classic static member replaces the last consumer-protocol member (a rebalance only if its subscription
  differs). Difference: a LeaveGroup to a consumer group is answered before its records are durable (as
  this broker's classic LeaveGroup answers).
* Per-group overrides of the session timeout and heartbeat interval (IncrementalAlterConfigs on GROUP
  resources) are not supported; the broker's groupConsumerSessionTimeoutMs/HeartbeatIntervalMs apply.
* A failed write leaves the in-memory change in place (Kafka reverts it with its timeline structures);
  the member gets the write's error (NOT_COORDINATOR), rediscovers the coordinator and heartbeats again,
  which the previous-epoch rule below accepts.
"""

from __future__ import annotations

import enum
import logging
import uuid
from collections.abc import Callable, Hashable, Iterable, Mapping
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Protocol

import re2

from kop.config import BrokerConfig
from kop.coordinator import consumer_protocol as cproto
from kop.coordinator import consumer_records as crec
from kop.coordinator import records as rec
from kop.coordinator.assignors import ASSIGNORS, MemberSpec
from kop.coordinator.group import CONSUMER_PROTOCOL_TYPE, ClassicGroup, GroupState, Member
from kop.coordinator.group_state import (
    Answer,
    GroupStateMachine,
    JoinRequest,
    JoinResult,
    SyncResult,
    group_record,
)
from kop.coordinator.sansio import Record, SansIOMachine, Write
from kop.protocol.errors import ErrorCode

if TYPE_CHECKING:
    from kop.topics.scope import NameScope

log = logging.getLogger(__name__)

E = ErrorCode
LEAVE_EPOCH = -1
STATIC_LEAVE_EPOCH = -2
Partitions = dict[bytes, frozenset[int]]
Epochs = dict[bytes, dict[int, int]]  # topic id -> partition -> the member epoch it was assigned at
Metadata = Mapping[str, tuple[bytes, int]]  # topic name -> (topic id, partition count)


class MemberState(enum.IntEnum):
    """A member's reconciliation state, stored as the int8 `State` of record 8."""
    STABLE = 0
    UNREVOKED_PARTITIONS = 1
    UNRELEASED_PARTITIONS = 2
    UNKNOWN = 127


@dataclass(slots=True)
class HeartbeatRequest:
    """ConsumerGroupHeartbeat's fields; None means "unchanged since the last heartbeat", as on the wire."""
    group_id: str
    member_id: str
    member_epoch: int
    instance_id: str | None = None
    rack_id: str | None = None
    rebalance_timeout_ms: int = -1
    subscribed_topic_names: list[str] | None = None
    subscribed_topic_regex: str | None = None
    server_assignor: str | None = None
    topic_partitions: Partitions | None = None
    client_id: str = ""
    client_host: str = ""
    api_version: int = 1


@dataclass(slots=True)
class HeartbeatResult:
    error: int = 0
    error_message: str | None = None
    member_id: str | None = None
    member_epoch: int = 0
    heartbeat_interval_ms: int = 0
    assignment: Partitions | None = None  # None: unchanged (the wire's null Assignment)


@dataclass(frozen=True, slots=True)
class HeartbeatAnswer:
    token: Hashable
    result: HeartbeatResult


Effect = HeartbeatAnswer | Write


@dataclass(slots=True)
class ConsumerMember:
    member_id: str
    instance_id: str | None = None
    rack_id: str | None = None
    client_id: str = ""
    client_host: str = ""
    subscribed_topic_names: tuple[str, ...] = ()
    subscribed_topic_regex: str | None = None
    rebalance_timeout_ms: int = -1
    server_assignor: str | None = None
    member_epoch: int = 0
    previous_member_epoch: int = -1
    state: MemberState = MemberState.STABLE
    assigned: Partitions = field(default_factory=dict)
    pending_revocation: Partitions = field(default_factory=dict)
    # The member epoch at which each partition of `assigned` and `pending_revocation` was assigned to this
    # member (KIP-1251, Kafka 4.3+): a commit carrying an older member epoch is accepted for the partitions the
    # member held at that epoch already. A partition kept or being revoked keeps its epoch; a new one gets
    # the epoch of the target assignment that gave it.
    assignment_epochs: Epochs = field(default_factory=dict)
    # Set for a member that uses the classic protocol (JoinGroup/SyncGroup/Heartbeat) inside a consumer
    # group: its session timeout and JoinGroup protocols (KIP-848 online migration)
    classic: crec.ClassicMemberMetadata | None = None

    def metadata_value(self) -> crec.MemberMetadataValue:
        return crec.MemberMetadataValue(
            self.instance_id, self.rack_id, self.client_id, self.client_host, self.subscribed_topic_names,
            self.subscribed_topic_regex, self.rebalance_timeout_ms, self.server_assignor, self.classic)

    @property
    def protocol_name(self) -> str:
        """A classic member's protocol: the first it named in its JoinGroup (Kafka's choice)."""
        assert self.classic is not None
        return self.classic.supported_protocols[0][0]

    def assignment_epoch(self, topic_id: bytes, partition: int) -> int | None:
        """When the member got a partition it holds (assigned or pending revocation); None: it holds none.
        One without a recorded epoch counts as assigned at max(member epoch, 0), Kafka's default."""
        if partition not in self.assigned.get(topic_id, ()) and partition not in self.pending_revocation.get(topic_id, ()):
            return None
        found = self.assignment_epochs.get(topic_id, {}).get(partition)
        return found if found is not None else max(self.member_epoch, 0)

    def assignment_value(self) -> crec.CurrentAssignmentValue:
        epochs: crec.Epochs = {}
        for parts in (self.assigned, self.pending_revocation):
            for tid, ps in parts.items():
                per_topic = epochs.setdefault(tid, {})
                for p in ps:
                    per_topic[p] = self.assignment_epochs.get(tid, {}).get(p, max(self.member_epoch, 0))
        return crec.CurrentAssignmentValue(self.member_epoch, self.previous_member_epoch, int(self.state),
                                           self.assigned, self.pending_revocation, epochs)

    def reconciled_to(self, epoch: int) -> bool:
        return self.member_epoch == epoch and self.state == MemberState.STABLE


@dataclass(slots=True)
class ConsumerGroup:
    group_id: str
    # Kafka 4.4's ModernGroup starts a new group at epoch 1, so its first member's join makes it 2 (4.2: 0 and 1)
    group_epoch: int = 1
    assignment_epoch: int = 0
    members: dict[str, ConsumerMember] = field(default_factory=dict)
    targets: dict[str, Partitions] = field(default_factory=dict)
    # topic name -> (topic id, partitions) of the subscribed topics that exist (record 4)
    subscription_metadata: dict[str, tuple[bytes, int]] = field(default_factory=dict)
    regexes: dict[str, frozenset[str]] = field(default_factory=dict)  # resolved (record 16)

    @property
    def state(self) -> str:
        """Kafka's names, as ConsumerGroupDescribe and ListGroups show them."""
        if not self.members:
            return "Empty"
        if self.group_epoch > self.assignment_epoch:
            return "Assigning"
        if any(not m.reconciled_to(self.assignment_epoch) for m in self.members.values()):
            return "Reconciling"
        return "Stable"

    def static_member(self, instance_id: str) -> ConsumerMember | None:
        for m in self.members.values():
            if m.instance_id == instance_id:
                return m
        return None

    def supports_classic_protocols(self, protocol_type: str, names: Iterable[str]) -> bool:
        """Whether a classic member with these protocols may join: the consumer protocol type, and a
        protocol every classic member of the group supports (any, when there is none yet)."""
        if protocol_type != CONSUMER_PROTOCOL_TYPE:
            return False
        names = set(names)
        classic = [m.classic for m in self.members.values() if m.classic is not None]
        if not self.members:
            return bool(names)
        return any(all(any(n == name for n, _ in c.supported_protocols) for c in classic) for name in names)

    def owners(self) -> dict[tuple[bytes, int], str]:
        """Who holds each partition, assigned or pending revocation (a partition is free only when no one
        holds it)."""
        out: dict[tuple[bytes, int], str] = {}
        for m in self.members.values():
            for parts in (m.assigned, m.pending_revocation):
                for tid, ps in parts.items():
                    for p in ps:
                        out[(tid, p)] = m.member_id
        return out


class _Reject(Exception):
    def __init__(self, error: int, message: str) -> None:
        super().__init__(message)
        self.error = error
        self.message = message


def _subset(owned: Partitions | None, assigned: Partitions) -> bool:
    if owned is None:
        return False
    return all(ps <= assigned.get(tid, frozenset()) for tid, ps in owned.items() if ps)


def _owns_any(owned: Partitions | None, parts: Partitions) -> bool:
    """A null owned list (a keepalive) counts as still owning everything (Kafka does the same)."""
    if owned is None:
        return True
    return any(owned.get(tid, frozenset()) & ps for tid, ps in parts.items())


def _clean(parts: Mapping[bytes, Iterable[int]]) -> Partitions:
    return {tid: frozenset(ps) for tid, ps in parts.items() if ps}


class Regex(Protocol):
    """A compiled RE2 pattern, as this module uses it."""

    def fullmatch(self, text: str) -> object: ...


def compile_regex(pattern: str) -> Regex:
    """RE2 syntax, as Kafka's RE2/J; raises re2.error for a pattern RE2 does not accept."""
    return re2.compile(pattern)


class ConsumerGroupMachine(SansIOMachine[HeartbeatAnswer | Answer]):
    """Every consumer group of this coordinator. `classic` is the classic groups' state machine (or just
    its `groups`, for tests): a heartbeat replaces an empty classic group and upgrades one with members,
    and a consumer group left with classic members only is handed to it. `normalize` turns a topic name
    a classic member subscribed with into the name `metadata()` knows it by. `scope(group_id)`: the
    kop.topics.scope.NameScope a tenant's group spells topics in (None: the default one, `normalize` and
    `metadata()`'s names as they are) - a tenant's classic members write and read short names, and its
    regexes match only its own namespace's topics, by their short names."""

    def __init__(self, config: BrokerConfig, metadata: Callable[[], Metadata],
                 classic: GroupStateMachine | dict[str, ClassicGroup] | None = None,
                 wall_ms: Callable[[], int] | None = None,
                 normalize: Callable[[str], str] = lambda name: name,
                 scope: Callable[[str], NameScope | None] = lambda group_id: None) -> None:
        super().__init__(wall_ms)
        self.config = config
        self.metadata = metadata
        self.normalize = normalize
        self.scope = scope
        if isinstance(classic, GroupStateMachine):
            self.classic = classic
        else:
            self.classic = GroupStateMachine(config, wall_ms)
            if classic is not None:
                self.classic.groups = classic
        self.groups: dict[str, ConsumerGroup] = {}

    @property
    def classic_groups(self) -> dict[str, ClassicGroup]:
        return self.classic.groups

    # ------------------------------------------------------------------ answers (timers, writes: sansio.py)
    def _answer(self, token: Hashable, result: HeartbeatResult) -> None:
        self._effects.append(HeartbeatAnswer(token, result))

    # ================================================================== loading
    def loaded(self, groups: Iterable[ConsumerGroup], now: int) -> None:
        """Groups replayed from __consumer_offsets: every member's session starts now, and a member caught
        revoking gets its rebalance timeout again (Kafka's onLoaded)."""
        self._now = now
        for group in groups:
            self.groups[group.group_id] = group
            for m in group.members.values():
                self._arm_session(group.group_id, m)
                if m.state == MemberState.UNREVOKED_PARTITIONS and m.classic is None:
                    self._arm_rebalance(group.group_id, m)

    def drop_groups(self, group_ids: Iterable[str]) -> None:
        for gid in list(group_ids):
            if self.groups.pop(gid, None) is not None:
                self._cancel_group_timers(gid)

    def shutdown(self) -> None:
        """The coordinator stops: no timer fires any more."""
        self._clear_timers()

    def delete_group(self, group_id: str) -> list[Record]:
        """Forget an empty group (DeleteGroups, offset expiry, or a JoinGroup turning it classic) and give
        its tombstones in Kafka's order: current assignments, targets, assignment epoch, members, regexes,
        subscription metadata, and the group epoch last."""
        group = self.groups.pop(group_id)
        gid = group_id

        def key(kind: int, second: str | None = None) -> bytes:
            return crec.encode_key(crec.ConsumerKey(kind, gid, second))

        records: list[Record] = [(key(crec.CURRENT_MEMBER_ASSIGNMENT, m), None) for m in group.members]
        records += [(key(crec.TARGET_ASSIGNMENT_MEMBER, m), None) for m in group.targets]
        records.append((key(crec.TARGET_ASSIGNMENT_METADATA), None))
        records += [(key(crec.MEMBER_METADATA, m), None) for m in group.members]
        records += [(key(crec.REGULAR_EXPRESSION, r), None) for r in group.regexes]
        records.append((key(crec.PARTITION_METADATA), None))
        records.append((key(crec.GROUP_EPOCH), None))
        self._cancel_group_timers(gid)
        return records

    # ================================================================== offsets of consumer groups
    def validate_offset_commit(self, group: ConsumerGroup, member_id: str, member_epoch: int, api_version: int,
                               partitions: Iterable[tuple[str, int]] = (), transactional: bool = False) -> int:
        """Kafka 4.4's rules for a commit to a consumer group (ConsumerGroup.validateOffsetCommit), for the
        `partitions` (topic as `metadata()` names it, partition) it commits: an admin commit (epoch < 0) only
        to an empty group; else the member must exist and, unless the commit is transactional, a
        consumer-protocol member must use OffsetCommit v9+. Its current epoch commits anything and a newer
        one nothing. An older epoch is a commit the member sent before it heard of its new epoch (the
        heartbeat that moved it was answered meanwhile, librdkafka and Java send both on their own): it is
        accepted when every partition is still the member's (assigned or pending revocation) and was
        assigned to it at or before that epoch (KIP-1251, Kafka 4.3+; Kafka 4.2 wanted the current epoch,
        and a commit racing a heartbeat failed there too). A refusal is the whole commit's, as in Kafka:
        STALE_MEMBER_EPOCH, ILLEGAL_GENERATION for a classic member (its generation is its member epoch)."""
        if member_epoch < 0 and not group.members:
            return 0
        member = group.members.get(member_id)
        if member is None:
            return E.UNKNOWN_MEMBER_ID
        if not transactional and api_version < 9 and member.classic is None:
            return E.UNSUPPORTED_VERSION
        if member_epoch == member.member_epoch:
            return 0
        refused = E.ILLEGAL_GENERATION if member.classic is not None else E.STALE_MEMBER_EPOCH
        if member_epoch > member.member_epoch:
            return refused
        topics = self.metadata()
        for name, partition in partitions:
            known = topics.get(name)
            assigned_at = None if known is None else member.assignment_epoch(known[0], partition)
            if assigned_at is None or member_epoch < assigned_at:
                return refused
        return 0

    @staticmethod
    def validate_offset_fetch(group: ConsumerGroup, member_id: str | None, member_epoch: int) -> int:
        """An admin fetch (no member id, epoch < 0) is always served; a member's needs its current epoch."""
        if member_id is None and member_epoch < 0:
            return 0
        member = group.members.get(member_id or "")
        if member is None:
            return E.UNKNOWN_MEMBER_ID
        if member_epoch == member.member_epoch:
            return 0
        return E.ILLEGAL_GENERATION if member.classic is not None else E.STALE_MEMBER_EPOCH

    @staticmethod
    def subscribed_topics(group: ConsumerGroup) -> set[str]:
        """Every topic name some member subscribes to, by name or through its regex."""
        names: set[str] = set()
        for m in group.members.values():
            names.update(m.subscribed_topic_names)
            if m.subscribed_topic_regex:
                names.update(group.regexes.get(m.subscribed_topic_regex, ()))
        return names

    # ================================================================== the heartbeat
    def heartbeat(self, req: HeartbeatRequest, token: Hashable, now: int) -> None:
        self._now = now
        records: list[Record] = []
        try:
            self._validate(req)
            if req.member_epoch in (LEAVE_EPOCH, STATIC_LEAVE_EPOCH):
                result = self._leave(req, records)
            else:
                result = self._join_or_heartbeat(req, records)
        except _Reject as rej:
            # What was changed in memory before the rejection (a group converted from the classic
            # protocol, an empty classic group replaced) is written all the same: memory and log agree.
            if records:
                self._write_logged(req.group_id, records, "the group's records")
            self._answer(token, HeartbeatResult(rej.error, rej.message))
            return
        if not records:
            self._answer(token, result)
            return

        def done(error: int) -> None:
            self._answer(token, result if not error else HeartbeatResult(error, "the group's records could not be written"))

        self._write(req.group_id, records, done)

    def _validate(self, req: HeartbeatRequest) -> None:
        """INVALID_REQUEST and UNSUPPORTED_ASSIGNOR as Kafka 4.x's throwIfConsumerGroupHeartbeatRequestIsInvalid,
        INVALID_REGULAR_EXPRESSION for a regex RE2 rejects."""
        def bad(message: str) -> _Reject:
            return _Reject(E.INVALID_REQUEST, message)

        if not req.group_id:
            raise bad("GroupId can't be empty.")
        if req.instance_id == "":
            raise bad("InstanceId can't be empty.")
        if req.rack_id == "":
            raise bad("RackId can't be empty.")
        epoch = req.member_epoch
        if not req.member_id and (req.api_version >= 1 or epoch > 0 or epoch == LEAVE_EPOCH):
            raise bad("MemberId can't be empty.")
        if epoch == 0:
            if req.rebalance_timeout_ms == -1:
                raise bad("RebalanceTimeoutMs must be provided in first request.")
            if req.topic_partitions is None or any(req.topic_partitions.values()):
                raise bad("TopicPartitions must be empty when (re-)joining.")
            if req.subscribed_topic_names is None and req.subscribed_topic_regex is None:
                raise bad("SubscribedTopicNames or SubscribedTopicRegex must be set in first request.")
        elif epoch == STATIC_LEAVE_EPOCH:
            if req.instance_id is None:
                raise bad("InstanceId can't be null.")
        elif epoch < STATIC_LEAVE_EPOCH:
            raise bad("MemberEpoch is invalid.")
        if req.server_assignor is not None and req.server_assignor not in self.config.consumer_assignors:
            raise _Reject(E.UNSUPPORTED_ASSIGNOR, f"ServerAssignor {req.server_assignor} is not supported. "
                          f"Supported assignors: {', '.join(self.config.consumer_assignors)}.")
        if req.subscribed_topic_regex:
            try:
                compile_regex(req.subscribed_topic_regex)
            except re2.error as exc:
                raise _Reject(E.INVALID_REGULAR_EXPRESSION, f"SubscribedTopicRegex `{req.subscribed_topic_regex}`"
                              f" is not a valid regular expression: {exc}.") from None

    def _group_for(self, req: HeartbeatRequest, records: list[Record]) -> ConsumerGroup:
        """The consumer group, created on a join (member epoch 0; the group starts at epoch 1) - also in place
        of an empty classic group."""
        gid = req.group_id
        group = self.groups.get(gid)
        if group is not None:
            return group
        classic = self.classic_groups.get(gid)
        if req.member_epoch != 0 and classic is None:
            raise _Reject(E.GROUP_ID_NOT_FOUND, f"Consumer group {gid} not found.")
        if classic is not None:
            if req.member_epoch != 0:
                raise _Reject(E.GROUP_ID_NOT_FOUND, f"Group {gid} is not a consumer group.")
            if classic.members:
                return self._upgrade(classic, records)
            self.classic.take_over(gid, self._now)
            records.append((rec.group_metadata_key(gid), None))
        group = ConsumerGroup(gid)
        self.groups[gid] = group
        return group

    def _join_or_heartbeat(self, req: HeartbeatRequest, records: list[Record]) -> HeartbeatResult:
        group = self._group_for(req, records)
        if len(group.members) >= self.config.groupConsumerMaxSize and (
                not req.member_id or req.member_id not in group.members):
            raise _Reject(E.GROUP_MAX_SIZE_REACHED, "The consumer group has reached its maximum capacity of "
                          f"{self.config.groupConsumerMaxSize} members.")
        member_id = req.member_id or str(uuid.uuid4())
        if req.instance_id is None:
            member = self._dynamic_member(group, member_id, req)
        else:
            member = self._static_member(group, member_id, req, records)
        old = member
        updated = replace(
            member,
            instance_id=req.instance_id if req.instance_id is not None else member.instance_id,
            rack_id=req.rack_id if req.rack_id is not None else member.rack_id,
            rebalance_timeout_ms=(req.rebalance_timeout_ms if req.rebalance_timeout_ms != -1
                                  else member.rebalance_timeout_ms),
            server_assignor=req.server_assignor if req.server_assignor is not None else member.server_assignor,
            subscribed_topic_names=(tuple(req.subscribed_topic_names) if req.subscribed_topic_names is not None
                                    else member.subscribed_topic_names),
            subscribed_topic_regex=(member.subscribed_topic_regex if req.subscribed_topic_regex is None
                                    else (req.subscribed_topic_regex or None)),  # "" clears it
            client_id=req.client_id, client_host=req.client_host, classic=None)
        self._apply_member(group, old, updated, records)
        reconciled = self._reconcile(group, updated, req.topic_partitions, records)
        self._arm_session(group.group_id, reconciled)
        full = req.member_epoch == 0 or (
            req.rebalance_timeout_ms != -1 and req.topic_partitions is not None
            and (req.subscribed_topic_names is not None or req.subscribed_topic_regex is not None))
        changed = reconciled.assigned != old.assigned
        return HeartbeatResult(
            member_id=member_id, member_epoch=reconciled.member_epoch,
            heartbeat_interval_ms=self.config.groupConsumerHeartbeatIntervalMs,
            assignment=dict(reconciled.assigned) if full or changed else None)

    def _apply_member(self, group: ConsumerGroup, old: ConsumerMember, updated: ConsumerMember,
                      records: list[Record]) -> None:
        """Store the member's new metadata (record 5 when it changed); a new member or a changed
        subscription, or subscribed topics that changed, bump the group epoch, and a group epoch ahead
        of the assignment epoch computes new targets (Kafka 4.0 does that synchronously too)."""
        member_id = updated.member_id
        bump = False
        if updated.metadata_value() != old.metadata_value() or member_id not in group.members:
            records.append(self._member_record(group.group_id, updated))
            bump = (updated.subscribed_topic_names != old.subscribed_topic_names
                    or updated.subscribed_topic_regex != old.subscribed_topic_regex
                    or member_id not in group.members)
        group.members[member_id] = updated
        bump = self._refresh_subscriptions(group, records) or bump
        if bump:
            self._bump(group, records)
        if group.group_epoch > group.assignment_epoch:
            self._compute_targets(group, records)

    def _dynamic_member(self, group: ConsumerGroup, member_id: str, req: HeartbeatRequest) -> ConsumerMember:
        member = group.members.get(member_id)
        if member is None:
            if req.member_epoch != 0:
                raise _Reject(E.UNKNOWN_MEMBER_ID, f"Member {member_id} is not a member of group {group.group_id}.")
            return ConsumerMember(member_id)
        self._check_epoch(member, req)
        return member

    def _static_member(self, group: ConsumerGroup, member_id: str, req: HeartbeatRequest,
                       records: list[Record]) -> ConsumerMember:
        """KIP-848 static membership: an instance id rejoining under a new member id takes over the old
        member's assignment (no rebalance) once the old one left with epoch -2; while the old one is
        active the newcomer gets UNRELEASED_INSTANCE_ID."""
        assert req.instance_id is not None
        existing = group.static_member(req.instance_id)
        if req.member_epoch == 0:
            if existing is None:
                member = group.members.get(member_id)
                if member is not None:
                    self._check_epoch(member, req)
                    return member
                return ConsumerMember(member_id)
            if existing.member_id == member_id:
                self._check_epoch(existing, req)
                return existing
            if existing.member_epoch != STATIC_LEAVE_EPOCH:
                raise _Reject(E.UNRELEASED_INSTANCE_ID, f"Static member {member_id} with instance id "
                              f"{req.instance_id} cannot join the group because the instance id is owned by "
                              f"{existing.member_id} member.")
            new = replace(existing, member_id=member_id, member_epoch=0, previous_member_epoch=0)
            target = group.targets.get(existing.member_id, {})
            self._remove_member(group, existing, records)
            group.members[member_id] = new
            group.targets[member_id] = target
            records.append(self._member_record(group.group_id, new))
            records.append((crec.encode_key(crec.ConsumerKey(crec.TARGET_ASSIGNMENT_MEMBER, group.group_id,
                                                             member_id)), crec.encode_target_member(target)))
            records.append(self._assignment_record(group.group_id, new))
            return new
        if existing is None:
            raise _Reject(E.UNKNOWN_MEMBER_ID, f"Instance id {req.instance_id} is unknown.")
        if existing.member_id != member_id:
            raise _Reject(E.FENCED_INSTANCE_ID, f"Static member {member_id} with instance id {req.instance_id}"
                          f" was fenced by member {existing.member_id}.")
        self._check_epoch(existing, req)
        return existing

    @staticmethod
    def _check_epoch(member: ConsumerMember, req: HeartbeatRequest) -> None:
        """A greater epoch than ours, or a smaller one other than the previous epoch of a member reporting
        no more than its assignment (a lost response), is fenced: the member drops its partitions and
        rejoins with epoch 0."""
        epoch = req.member_epoch
        if epoch > member.member_epoch:
            raise _Reject(E.FENCED_MEMBER_EPOCH, f"The consumer group member has a greater member epoch ({epoch})"
                          f" than the one known by the group coordinator ({member.member_epoch}).")
        if epoch < member.member_epoch and (
                epoch != member.previous_member_epoch or not _subset(req.topic_partitions, member.assigned)):
            raise _Reject(E.FENCED_MEMBER_EPOCH, f"The consumer group member has a smaller member epoch ({epoch})"
                          f" than the one known by the group coordinator ({member.member_epoch}).")

    # ------------------------------------------------------------------ subscriptions and targets
    def _refresh_subscriptions(self, group: ConsumerGroup, records: list[Record]) -> bool:
        """Resolve the group's regexes and its subscription metadata against the broker's topics now;
        True (and records 16 / 4) when either changed, which bumps the group epoch."""
        topics = self.metadata()
        changed = False
        in_use = {m.subscribed_topic_regex for m in group.members.values() if m.subscribed_topic_regex}
        scope = self.scope(group.group_id) if in_use else None
        # a tenant's regex sees its own namespace's topics, by their short names
        spelled = {t: t for t in topics} if scope is None else \
            {t: local for t in topics if "/" not in (local := scope.client_name(t))}
        for pattern in sorted(in_use):
            compiled = compile_regex(pattern)
            resolved = frozenset(t for t, local in spelled.items() if compiled.fullmatch(local))
            if group.regexes.get(pattern) != resolved:
                group.regexes[pattern] = resolved
                records.append((crec.encode_key(crec.ConsumerKey(crec.REGULAR_EXPRESSION, group.group_id, pattern)),
                                crec.encode_regex(crec.RegexValue(tuple(resolved), 0, self.timestamp()))))
                changed = True
        for pattern in sorted(set(group.regexes) - in_use):
            del group.regexes[pattern]
            records.append((crec.encode_key(crec.ConsumerKey(crec.REGULAR_EXPRESSION, group.group_id, pattern)),
                            None))
        names: set[str] = set()
        for m in group.members.values():
            names.update(m.subscribed_topic_names)
            if m.subscribed_topic_regex:
                names.update(group.regexes.get(m.subscribed_topic_regex, ()))
        metadata = {n: topics[n] for n in names if n in topics}
        if metadata != group.subscription_metadata:
            group.subscription_metadata = metadata
            records.append((crec.encode_key(crec.ConsumerKey(crec.PARTITION_METADATA, group.group_id)),
                            crec.encode_partition_metadata(
                                [crec.TopicMetadata(tid, n, count) for n, (tid, count) in metadata.items()])))
            changed = True
        return changed

    def _bump(self, group: ConsumerGroup, records: list[Record]) -> None:
        group.group_epoch += 1
        records.append((crec.encode_key(crec.ConsumerKey(crec.GROUP_EPOCH, group.group_id)),
                        crec.encode_epoch(group.group_epoch)))

    def _subscribed_ids(self, group: ConsumerGroup, m: ConsumerMember) -> frozenset[bytes]:
        names = set(m.subscribed_topic_names)
        if m.subscribed_topic_regex:
            names.update(group.regexes.get(m.subscribed_topic_regex, ()))
        return frozenset(group.subscription_metadata[n][0] for n in names if n in group.subscription_metadata)

    def preferred_assignor(self, group: ConsumerGroup) -> str:
        """The assignor named by most members (ties: the broker's order), else the broker's default."""
        counts: dict[str, int] = {}
        for m in group.members.values():
            if m.server_assignor:
                counts[m.server_assignor] = counts.get(m.server_assignor, 0) + 1
        names = self.config.consumer_assignors
        if not counts:
            return names[0]
        return max(counts, key=lambda a: (counts[a], -names.index(a) if a in names else -len(names)))

    def _compute_targets(self, group: ConsumerGroup, records: list[Record]) -> None:
        specs = {mid: MemberSpec(self._subscribed_ids(group, m), m.instance_id, group.targets.get(mid, {}))
                 for mid, m in group.members.items()}
        topics = {tid: count for tid, count in group.subscription_metadata.values()}
        new = ASSIGNORS[self.preferred_assignor(group)](specs, topics)
        for mid in sorted(group.members):
            target = _clean(new.get(mid, {}))
            if mid not in group.targets or group.targets[mid] != target:
                group.targets[mid] = target
                records.append((crec.encode_key(crec.ConsumerKey(crec.TARGET_ASSIGNMENT_MEMBER, group.group_id, mid)),
                                crec.encode_target_member(target)))
        group.assignment_epoch = group.group_epoch
        records.append((crec.encode_key(crec.ConsumerKey(crec.TARGET_ASSIGNMENT_METADATA, group.group_id)),
                        crec.encode_epoch(group.assignment_epoch)))

    # ------------------------------------------------------------------ reconciliation
    def _reconcile(self, group: ConsumerGroup, member: ConsumerMember, owned: Partitions | None,
                   records: list[Record]) -> ConsumerMember:
        """Move `member` towards its target (Kafka's CurrentAssignmentBuilder): revoke before assign, and
        a partition goes to its new owner only once no one holds it."""
        epoch = group.assignment_epoch
        if member.reconciled_to(epoch):
            return member
        target = group.targets.get(member.member_id, {})
        if member.state == MemberState.STABLE:
            updated = self._next_assignment(group, member, member.member_epoch, target, epoch, owned)
        elif member.state == MemberState.UNREVOKED_PARTITIONS:
            if _owns_any(owned, member.pending_revocation):
                updated = member
            else:
                # Revoked: it moves on from the epoch it has (Kafka 4.0 went to epoch + 1 here; 4.1+ do not).
                updated = self._next_assignment(group, member, member.member_epoch, target, epoch, owned)
        elif member.state == MemberState.UNRELEASED_PARTITIONS:
            updated = self._next_assignment(group, member, member.member_epoch, target, epoch, owned)
        else:
            if owned is None or any(owned.values()):
                raise _Reject(E.FENCED_MEMBER_EPOCH, "The consumer group member is in a unknown state.")
            updated = self._next_assignment(group, member, epoch, target, epoch, owned)
        if updated != member:
            group.members[member.member_id] = updated
            records.append(self._assignment_record(group.group_id, updated))
            # A classic member has no rebalance timer: its join and sync timers stand in for it.
            if updated.state == MemberState.UNREVOKED_PARTITIONS and updated.classic is None:
                self._arm_rebalance(group.group_id, updated)
            else:
                self._cancel(("rebalance", group.group_id, updated.member_id))
        return updated

    @staticmethod
    def _next_assignment(group: ConsumerGroup, member: ConsumerMember, member_epoch: int, target: Partitions,
                         target_epoch: int, owned: Partitions | None) -> ConsumerMember:
        """Kafka 4.4's computeNextAssignment: partitions to revoke first (the member stays at `member_epoch`),
        else the member reaches `target_epoch` with the partitions it keeps and those no one else holds (a
        partition it is revoking itself is not held by another). Kept and revoked partitions keep their
        assignment epochs, new ones get `target_epoch`. The previous epoch is always the epoch the member
        had, also when it does not change (Kafka's updateMemberEpoch)."""
        owners = group.owners()
        keep: dict[bytes, frozenset[int]] = {}
        revoke: dict[bytes, frozenset[int]] = {}
        add: dict[bytes, frozenset[int]] = {}
        unreleased = False
        for tid in set(target) | set(member.assigned):
            t = target.get(tid, frozenset())
            current = member.assigned.get(tid, frozenset())
            mine = member.pending_revocation.get(tid, frozenset())
            keep[tid] = current & t
            revoke[tid] = current - keep[tid]
            wanted = t - keep[tid]
            free = frozenset(p for p in wanted if (tid, p) not in owners or p in mine)
            unreleased = unreleased or free != wanted
            add[tid] = free
        keep, revoke, add = _clean(keep), _clean(revoke), _clean(add)

        def moved(epoch: int, state: MemberState, assigned: Partitions, pending: Partitions) -> ConsumerMember:
            epochs: Epochs = {}
            for parts in (assigned, pending):
                for tid, ps in parts.items():
                    per_topic = epochs.setdefault(tid, {})
                    for p in ps:
                        held = member.assignment_epoch(tid, p) if p in member.assigned.get(tid, ()) else None
                        per_topic[p] = target_epoch if held is None else held
            return replace(member, member_epoch=epoch, previous_member_epoch=member.member_epoch, state=state,
                           assigned=assigned, pending_revocation=pending, assignment_epochs=epochs)

        if revoke and _owns_any(owned, revoke):
            return moved(member_epoch, MemberState.UNREVOKED_PARTITIONS, keep, revoke)
        state = MemberState.UNRELEASED_PARTITIONS if unreleased else MemberState.STABLE
        if add:
            merged = {tid: keep.get(tid, frozenset()) | add.get(tid, frozenset()) for tid in set(keep) | set(add)}
            return moved(target_epoch, state, merged, {})
        return moved(target_epoch, state, keep, {})

    # ------------------------------------------------------------------ leaving and fencing
    def _leave(self, req: HeartbeatRequest, records: list[Record]) -> HeartbeatResult:
        group = self.groups.get(req.group_id)
        if group is None:
            raise _Reject(E.GROUP_ID_NOT_FOUND, f"Group {req.group_id} not found.")
        if req.instance_id is None:
            member = group.members.get(req.member_id)
            if member is None:
                raise _Reject(E.UNKNOWN_MEMBER_ID, f"Member {req.member_id} is not a member of group {req.group_id}.")
        else:
            member = group.static_member(req.instance_id)
            if member is None:
                raise _Reject(E.UNKNOWN_MEMBER_ID, f"Instance id {req.instance_id} is unknown.")
            if member.member_id != req.member_id:
                raise _Reject(E.FENCED_INSTANCE_ID, f"Static member {req.member_id} with instance id "
                              f"{req.instance_id} was fenced by member {member.member_id}.")
            if req.member_epoch == STATIC_LEAVE_EPOCH:
                # Away for now: it keeps its partitions (no one else gets them) until its session expires.
                # Its assignment epochs go to 0, as in Kafka: whoever takes the instance over commits them.
                away = replace(member, member_epoch=STATIC_LEAVE_EPOCH, pending_revocation={},
                               assignment_epochs={tid: dict.fromkeys(ps, 0) for tid, ps in member.assigned.items()})
                group.members[member.member_id] = away
                self._cancel(("rebalance", group.group_id, member.member_id))
                records.append(self._assignment_record(group.group_id, away))
                return HeartbeatResult(member_id=member.member_id, member_epoch=STATIC_LEAVE_EPOCH)
        self._fence_members(group, [member], records)
        return HeartbeatResult(member_id=req.member_id, member_epoch=req.member_epoch)

    def _fence_members(self, group: ConsumerGroup, members: list[ConsumerMember], records: list[Record]) -> None:
        """Remove the members and bump the group epoch, so the next heartbeat computes new targets; or,
        when only classic members would be left and the policy allows it, make the group classic again
        (Kafka's consumerGroupFenceMembers)."""
        if not members:
            return
        gone = {m.member_id for m in members}
        remaining = [m for mid, m in group.members.items() if mid not in gone]
        if (remaining and all(m.classic is not None for m in remaining) and self.config.migration_downgrade
                and len(remaining) <= self.config.groupMaxSize):
            self._downgrade(group, remaining, records)
            return
        for member in members:
            self._remove_member(group, member, records)
        self._refresh_subscriptions(group, records)
        self._bump(group, records)

    def _remove_member(self, group: ConsumerGroup, member: ConsumerMember, records: list[Record]) -> None:
        """Tombstones in Kafka's order: current assignment (8), target (7), member (5)."""
        gid, mid = group.group_id, member.member_id
        for kind in (crec.CURRENT_MEMBER_ASSIGNMENT, crec.TARGET_ASSIGNMENT_MEMBER, crec.MEMBER_METADATA):
            records.append((crec.encode_key(crec.ConsumerKey(kind, gid, mid)), None))
        group.members.pop(mid, None)
        group.targets.pop(mid, None)
        for timer in ("session", "rebalance", "join", "sync"):
            self._cancel((timer, gid, mid))

    def _fence_by_timer(self, group_id: str, member_id: str, epoch: int | None, why: str) -> None:
        group = self.groups.get(group_id)
        member = group.members.get(member_id) if group is not None else None
        if group is None or member is None or (epoch is not None and member.member_epoch != epoch):
            return
        log.info("group %s: member %s fenced: %s", group_id, member_id, why)
        records: list[Record] = []
        self._fence_members(group, [member], records)

        def done(error: int) -> None:
            if error:
                log.warning("writing the fencing of %s in group %s failed: %s", member_id, group_id, E(error).name)

        self._write(group_id, records, done)

    def _arm_session(self, group_id: str, member: ConsumerMember, timeout_ms: int | None = None) -> None:
        """A classic member's session is its own JoinGroup's session timeout; a consumer-protocol
        member's the broker's groupConsumerSessionTimeoutMs."""
        if timeout_ms is None:
            timeout_ms = (member.classic.session_timeout_ms if member.classic is not None
                          else self.config.groupConsumerSessionTimeoutMs)
        self._schedule(("session", group_id, member.member_id), timeout_ms,
                       self._fence_by_timer, group_id, member.member_id, None, "its session expired")

    def _arm_rebalance(self, group_id: str, member: ConsumerMember) -> None:
        self._schedule(("rebalance", group_id, member.member_id), max(member.rebalance_timeout_ms, 0),
                       self._fence_by_timer, group_id, member.member_id, member.member_epoch,
                       "it did not revoke its partitions within its rebalance timeout")


    def _global(self, name: str, group_id: str) -> str:
        """A topic name a member of `group_id` wrote -> the name `metadata()` knows it by."""
        scope = self.scope(group_id)
        return self.normalize(name) if scope is None else scope.global_name(name)

    # ================================================================== online migration (KIP-848)
    def _ids(self, by_name: Mapping[str, Iterable[int]], topics: Metadata, group_id: str) -> Partitions:
        """Classic topic names (as a client wrote them) -> topic ids; topics that do not exist drop out."""
        out: dict[bytes, frozenset[int]] = {}
        for name, ps in by_name.items():
            known = topics.get(self._global(name, group_id))
            if known is not None:
                out[known[0]] = out.get(known[0], frozenset()) | frozenset(p for p in ps if 0 <= p < known[1])
        return _clean(out)

    def _names(self, parts: Partitions, topics: Metadata, group_id: str) -> dict[str, frozenset[int]]:
        """Topic ids -> the names a classic member of `group_id` reads (its scope's spelling)."""
        by_id = {tid: name for name, (tid, _) in topics.items()}
        scope = self.scope(group_id)
        return {(by_id[tid] if scope is None else scope.client_name(by_id[tid])): ps
                for tid, ps in parts.items() if tid in by_id and ps}

    def _upgrade(self, classic: ClassicGroup, records: list[Record]) -> ConsumerGroup:
        """A ConsumerGroupHeartbeat joins a classic group with members: it becomes a consumer group whose
        classic members keep their partitions at the classic generation (Kafka's validateOnlineUpgrade and
        convertToConsumerGroup). Refused with GROUP_ID_NOT_FOUND, as Kafka, when the policy forbids it, the
        group is not a consumer-protocol group, too big, or holds bytes that do not parse or that a custom
        assignor's user data would need."""
        gid = classic.group_id

        def refuse(why: str) -> _Reject:
            log.info("group %s: cannot upgrade the classic group: %s", gid, why)
            return _Reject(E.GROUP_ID_NOT_FOUND, f"Cannot upgrade classic group {gid} to consumer group {why}.")

        if not self.config.migration_upgrade:
            raise refuse("because online upgrade is disabled")
        if not classic.uses_consumer_protocol():
            raise refuse("because the group does not use the consumer embedded protocol")
        if len(classic.members) > self.config.groupConsumerMaxSize:
            raise refuse("because the group size exceeds the consumer group maximum size")
        topics = self.metadata()
        generation = classic.generation_id
        group = ConsumerGroup(gid, group_epoch=generation, assignment_epoch=generation)
        try:
            for m in classic.members.values():
                assigned: Partitions = {}
                if m.assignment:
                    a = cproto.parse_assignment(m.assignment)
                    if a.user_data:
                        raise refuse("because an unsupported custom assignor is in use. Please refer to the "
                                     "documentation or switch to a default assignor before re-attempting the upgrade")
                    assigned = self._ids(a.partitions, topics, gid)
                metadata = m.metadata(classic.protocol_name) if classic.protocol_name else m.protocols[0][1]
                sub = cproto.parse_subscription(metadata)
                group.members[m.member_id] = ConsumerMember(
                    m.member_id, instance_id=m.group_instance_id, rack_id=sub.rack_id, client_id=m.client_id,
                    client_host=m.client_host, subscribed_topic_names=tuple(self._global(t, gid) for t in sub.topics),
                    rebalance_timeout_ms=m.rebalance_timeout_ms, member_epoch=generation,
                    previous_member_epoch=generation, assigned=assigned,
                    assignment_epochs={tid: dict.fromkeys(ps, generation) for tid, ps in assigned.items()},
                    classic=crec.ClassicMemberMetadata(m.session_timeout_ms, tuple(m.protocols)))
                group.targets[m.member_id] = assigned
        except (cproto.ProtocolError, KeyError):
            raise refuse("because the embedded consumer protocol is malformed") from None
        names = {n for m in group.members.values() for n in m.subscribed_topic_names}
        group.subscription_metadata = {n: topics[n] for n in names if n in topics}
        # Parked JoinGroup/SyncGroup requests get REBALANCE_IN_PROGRESS: their members rejoin this group.
        self.classic.take_over(gid, self._now)
        self.groups[gid] = group
        # Kafka's records of a converted group: the classic group's tombstone, then members, subscription
        # metadata, group epoch, targets, assignment epoch, current assignments.
        records.append((rec.group_metadata_key(gid), None))
        records += [self._member_record(gid, m) for m in group.members.values()]
        records.append((crec.encode_key(crec.ConsumerKey(crec.PARTITION_METADATA, gid)),
                        crec.encode_partition_metadata([crec.TopicMetadata(tid, n, count) for n, (tid, count)
                                                        in group.subscription_metadata.items()])))
        records.append((crec.encode_key(crec.ConsumerKey(crec.GROUP_EPOCH, gid)), crec.encode_epoch(generation)))
        records += [(crec.encode_key(crec.ConsumerKey(crec.TARGET_ASSIGNMENT_MEMBER, gid, mid)),
                     crec.encode_target_member(t)) for mid, t in group.targets.items()]
        records.append((crec.encode_key(crec.ConsumerKey(crec.TARGET_ASSIGNMENT_METADATA, gid)),
                        crec.encode_epoch(generation)))
        records += [self._assignment_record(gid, m) for m in group.members.values()]
        for member in group.members.values():
            self._arm_session(gid, member)
        log.info("group %s: converted the classic group (generation %d, %d members) to a consumer group", gid,
                 generation, len(group.members))
        return group

    def _downgrade(self, group: ConsumerGroup, remaining: list[ConsumerMember], records: list[Record],
                   rebalance: bool = True) -> None:
        """Only classic members are left: the group becomes a classic group at the group epoch, each member
        holding its target assignment, and rebalances (Kafka's convertToClassicGroup)."""
        gid = group.group_id
        topics = self.metadata()
        records += self.delete_group(gid)
        classic = ClassicGroup(gid, state=GroupState.STABLE, state_timestamp=self.timestamp(),
                               generation_id=group.group_epoch, protocol_type=CONSUMER_PROTOCOL_TYPE)
        for m in remaining:
            assert m.classic is not None
            classic.add(Member(m.member_id, m.instance_id, m.client_id, m.client_host, m.rebalance_timeout_ms,
                               m.classic.session_timeout_ms, CONSUMER_PROTOCOL_TYPE, list(m.classic.supported_protocols)),
                        None)
        classic.protocol_name = classic.select_protocol()
        classic.subscribed_topics = classic.compute_subscribed_topics()
        for cm in classic.members.values():
            try:
                version = cproto.version_of(cm.metadata(classic.protocol_name))
            except cproto.ProtocolError:
                version = 0
            cm.assignment = cproto.serialize_assignment(
                self._names(group.targets.get(cm.member_id, {}), topics, group.group_id), version)
        records.append(group_record(classic, {m.member_id: m.assignment for m in classic.members.values()}))
        log.info("group %s: converted the consumer group (epoch %d) to a classic group of %d members", gid,
                 group.group_epoch, len(classic.members))
        self.classic.adopt(classic, self._now, f"Downgrade group {gid} from consumer to classic for member leaving."
                           if rebalance else None)

    # ------------------------------------------------------------------ classic members inside a consumer group
    def _classic_member(self, group: ConsumerGroup, member_id: str, instance_id: str | None) -> ConsumerMember:
        """Kafka's validateConsumerGroupMember plus: the member must use the classic protocol."""
        if instance_id is None:
            member = group.members.get(member_id)
            if member is None:
                raise _Reject(E.UNKNOWN_MEMBER_ID, f"Member {member_id} is not a member of group {group.group_id}.")
        else:
            member = group.static_member(instance_id)
            if member is None:
                raise _Reject(E.UNKNOWN_MEMBER_ID, f"Member with instance id {instance_id} is not a member of "
                              f"group {group.group_id}.")
            if member.member_id != member_id:
                raise _Reject(E.FENCED_INSTANCE_ID, f"Static member {member_id} with instance id {instance_id} "
                              f"was fenced by member {member.member_id}.")
        if member.classic is None:
            raise _Reject(E.UNKNOWN_MEMBER_ID, f"Member {member.member_id} does not use the classic protocol.")
        return member

    def _arm_join_timeout(self, group_id: str, member: ConsumerMember) -> None:
        """A classic member told to rejoin must do so within its rebalance timeout, else it is fenced."""
        key = ("join", group_id, member.member_id)
        if key not in self._timers:
            self._schedule(key, max(member.rebalance_timeout_ms, 0), self._fence_by_timer, group_id,
                           member.member_id, None, "the classic member failed to join within the rebalance timeout")

    def classic_join(self, req: JoinRequest, token: Hashable, now: int) -> None:
        """A JoinGroup to a consumer group with members: the classic member joins or rejoins it, its
        subscription and owned partitions come from its protocol metadata, and it is answered at once with
        its member epoch as generation (no join barrier), once its records are durable."""
        self._now = now
        group = self.groups[req.group_id]
        records: list[Record] = []
        try:
            result = self._classic_join(group, req, records)
        except _Reject as rej:
            if records:
                self._write_logged(req.group_id, records, "the group's records")
            self._effects.append(Answer(token, JoinResult(rej.error, member_id=req.member_id)))
            return
        if result.error:  # MEMBER_ID_REQUIRED: nothing changed
            self._effects.append(Answer(token, result))
            return
        gid, mid = req.group_id, result.member_id

        def done(error: int) -> None:
            if error:
                self._effects.append(Answer(token, JoinResult(error, member_id=mid)))
                return
            self._cancel(("join", gid, mid))
            cg = self.groups.get(gid)
            member = cg.members.get(mid) if cg is not None else None
            if member is not None:
                self._arm_session(gid, member, req.session_timeout_ms)
                self._schedule(("sync", gid, mid), max(req.rebalance_timeout_ms, 0), self._fence_by_timer, gid,
                               mid, None, "the member failed to sync within timeout")
            self._effects.append(Answer(token, result))

        if records:
            self._write(gid, records, done)
        else:
            done(0)

    def _classic_join(self, group: ConsumerGroup, req: JoinRequest, records: list[Record]) -> JoinResult:
        if not self.config.groupMinSessionTimeoutMs <= req.session_timeout_ms <= self.config.groupMaxSessionTimeoutMs:
            raise _Reject(E.INVALID_SESSION_TIMEOUT, "invalid session timeout")
        unknown = not req.member_id
        member_id = req.member_id or str(uuid.uuid4())
        if member_id not in group.members and len(group.members) >= self.config.groupConsumerMaxSize:
            raise _Reject(E.GROUP_MAX_SIZE_REACHED, "The consumer group has reached its maximum capacity of "
                          f"{self.config.groupConsumerMaxSize} members.")
        if not group.supports_classic_protocols(req.protocol_type, [n for n, _ in req.protocols]):
            raise _Reject(E.INCONSISTENT_GROUP_PROTOCOL, f"Member {member_id}'s protocols are not supported.")
        if unknown and req.api_version >= 4 and req.group_instance_id is None:
            # KIP-394, as for a classic group: the client joins again with this id.
            return JoinResult(E.MEMBER_ID_REQUIRED, member_id=member_id)
        try:
            sub = cproto.parse_subscription(req.protocols[0][1])
        except cproto.ProtocolError:
            raise _Reject(E.UNKNOWN_SERVER_ERROR, "Malformed embedded consumer protocol in subscription.") from None
        replaced = group.static_member(req.group_instance_id) if req.group_instance_id is not None and unknown else None
        # Kafka's validateOnlineDowngradeWithReplacedMember: the static member this one replaces was the last
        # one using the consumer protocol.
        downgrade = (replaced is not None and replaced.classic is None and self.config.migration_downgrade
                     and all(m.classic is not None for m in group.members.values() if m is not replaced)
                     and len(group.members) <= self.config.groupMaxSize)
        if req.group_instance_id is None:
            member = group.members.get(member_id) or ConsumerMember(member_id)
        else:
            member = self._classic_static_member(group, member_id, unknown, req.group_instance_id, records)
        updated = replace(
            member, instance_id=req.group_instance_id if req.group_instance_id is not None else member.instance_id,
            rack_id=sub.rack_id if sub.rack_id is not None else member.rack_id,
            rebalance_timeout_ms=req.rebalance_timeout_ms if req.rebalance_timeout_ms != -1 else member.rebalance_timeout_ms,
            subscribed_topic_names=tuple(self._global(t, group.group_id) for t in sub.topics),
            subscribed_topic_regex=None,
            client_id=req.client_id, client_host=req.client_host,
            classic=crec.ClassicMemberMetadata(req.session_timeout_ms, tuple(req.protocols)))
        epoch = group.group_epoch
        self._apply_member(group, member, updated, records)
        subscription_changed = group.group_epoch != epoch
        reconciled = updated
        if not (downgrade and subscription_changed):
            reconciled = self._reconcile(group, updated, self._ids(sub.owned, self.metadata(), group.group_id), records)
        if downgrade:
            # The group turns classic with this member in the replaced one's place (its assignment); it
            # rebalances only when the subscription changed.
            self._downgrade(group, list(group.members.values()), records, rebalance=subscription_changed)
        return JoinResult(0, reconciled.member_epoch, CONSUMER_PROTOCOL_TYPE, reconciled.protocol_name, "",
                          False, member_id, [])

    def _classic_static_member(self, group: ConsumerGroup, member_id: str, unknown: bool, instance_id: str,
                               records: list[Record]) -> ConsumerMember:
        """A classic static member: a new one, or one rejoining under a new member id, which takes over the
        old member's place and assignment (whatever protocol the old one used); a known member id must be
        the instance's current one."""
        existing = group.static_member(instance_id)
        if not unknown:
            if existing is None:
                raise _Reject(E.UNKNOWN_MEMBER_ID, f"Instance id {instance_id} is unknown.")
            if existing.member_id != member_id:
                raise _Reject(E.FENCED_INSTANCE_ID, f"Static member {member_id} with instance id {instance_id}"
                              f" was fenced by member {existing.member_id}.")
            return existing
        if existing is None:
            return ConsumerMember(member_id)
        new = replace(existing, member_id=member_id, member_epoch=0, previous_member_epoch=0)
        target = group.targets.get(existing.member_id, {})
        self._remove_member(group, existing, records)
        self._cancel(("join", group.group_id, existing.member_id))
        self._cancel(("sync", group.group_id, existing.member_id))
        group.members[member_id] = new
        group.targets[member_id] = target
        records.append(self._member_record(group.group_id, new))
        records.append((crec.encode_key(crec.ConsumerKey(crec.TARGET_ASSIGNMENT_MEMBER, group.group_id, member_id)),
                        crec.encode_target_member(target)))
        records.append(self._assignment_record(group.group_id, new))
        return new

    def classic_sync(self, group_id: str, generation_id: int, member_id: str, instance_id: str | None,
                     protocol_type: str | None, protocol_name: str | None, token: Hashable, now: int) -> None:
        """A SyncGroup of a classic member of a consumer group: its assigned partitions, serialized at its
        subscription's version; REBALANCE_IN_PROGRESS when the group moved on and the member must rejoin."""
        self._now = now
        group = self.groups.get(group_id)
        try:
            if group is None or not group.members:
                raise _Reject(E.UNKNOWN_MEMBER_ID, "")
            member = self._classic_member(group, member_id, instance_id)
            if generation_id != member.member_epoch:
                raise _Reject(E.ILLEGAL_GENERATION, "")
            if (protocol_type is not None and protocol_type != CONSUMER_PROTOCOL_TYPE) or (
                    protocol_name is not None and protocol_name != member.protocol_name):
                raise _Reject(E.INCONSISTENT_GROUP_PROTOCOL, "")
            if group.group_epoch > member.member_epoch and member.state != MemberState.UNREVOKED_PARTITIONS:
                self._arm_join_timeout(group_id, member)
                raise _Reject(E.REBALANCE_IN_PROGRESS, "")
        except _Reject as rej:
            self._effects.append(Answer(token, SyncResult(rej.error)))
            return
        assert member.classic is not None
        self._cancel(("sync", group_id, member.member_id))
        self._arm_session(group_id, member)
        try:
            version = cproto.version_of(member.classic.supported_protocols[0][1])
        except cproto.ProtocolError:
            version = 0
        assignment = cproto.serialize_assignment(self._names(member.assigned, self.metadata(), group_id), version)
        self._effects.append(Answer(token, SyncResult(0, protocol_type, protocol_name, assignment)))

    def classic_heartbeat(self, group_id: str, generation_id: int, member_id: str, instance_id: str | None,
                          now: int) -> int:
        """A Heartbeat of a classic member of a consumer group. REBALANCE_IN_PROGRESS (rejoin) when the
        group epoch moved past the member's, when it must revoke partitions, or when partitions it waits
        for were released."""
        self._now = now
        group = self.groups.get(group_id)
        try:
            if group is None:
                raise _Reject(E.UNKNOWN_MEMBER_ID, "")
            member = self._classic_member(group, member_id, instance_id)
        except _Reject as rej:
            return rej.error
        if generation_id != member.member_epoch:
            return E.ILLEGAL_GENERATION
        self._arm_session(group_id, member)
        if (member.member_epoch < group.group_epoch or member.state == MemberState.UNREVOKED_PARTITIONS
                or (member.state == MemberState.UNRELEASED_PARTITIONS and not self._waits_on_unreleased(group, member))):
            self._arm_join_timeout(group_id, member)
            return E.REBALANCE_IN_PROGRESS
        return 0

    @staticmethod
    def _waits_on_unreleased(group: ConsumerGroup, member: ConsumerMember) -> bool:
        """Whether some partition of the member's target that it does not have yet is still held by another."""
        owners = group.owners()
        for tid, ps in group.targets.get(member.member_id, {}).items():
            mine = member.assigned.get(tid, frozenset())
            if any(p not in mine and (tid, p) in owners for p in ps):
                return True
        return False

    def classic_leave(self, group_id: str, members: list[tuple[str, str | None, str | None]], now: int
                      ) -> tuple[int, list[tuple[str, str | None, int]]]:
        """LeaveGroup to a consumer group: the named members (by member id, or by instance id) are fenced
        together, whatever protocol they use, which may turn the group classic again."""
        self._now = now
        group = self.groups[group_id]
        out: list[tuple[str, str | None, int]] = []
        leaving: dict[str, ConsumerMember] = {}
        for member_id, instance_id, reason in members:
            if instance_id is None:
                member = group.members.get(member_id)
                error = 0 if member is not None else E.UNKNOWN_MEMBER_ID
            else:
                member = group.static_member(instance_id)
                error = 0
                if member is None:
                    error = E.UNKNOWN_MEMBER_ID
                elif member_id and member.member_id != member_id:
                    error = E.FENCED_INSTANCE_ID
            if not error and member is not None:
                log.info("group %s: member %s left (reason: %s)", group_id, member.member_id, reason or "not provided")
                leaving[member.member_id] = member
            out.append((member_id, instance_id, error))
        if leaving:
            records: list[Record] = []
            self._fence_members(group, list(leaving.values()), records)
            self._write_logged(group_id, records, "the leaving members' records")
        return 0, out

    # ------------------------------------------------------------------ records
    @staticmethod
    def _member_record(group_id: str, m: ConsumerMember) -> Record:
        return (crec.encode_key(crec.ConsumerKey(crec.MEMBER_METADATA, group_id, m.member_id)),
                crec.encode_member_metadata(m.metadata_value()))

    @staticmethod
    def _assignment_record(group_id: str, m: ConsumerMember) -> Record:
        return (crec.encode_key(crec.ConsumerKey(crec.CURRENT_MEMBER_ASSIGNMENT, group_id, m.member_id)),
                crec.encode_current_assignment(m.assignment_value()))


class ConsumerGroupReplayer:
    """Rebuilds consumer groups from their records in __consumer_offsets, in log order (the last record
    of a key wins; a null value deletes). The group's existence follows its epoch record (type 3), as in
    Kafka: a group whose type-3 record is a tombstone is gone."""

    def __init__(self) -> None:
        self.groups: dict[str, ConsumerGroup] = {}
        self._deleted: set[str] = set()

    def _group(self, gid: str) -> ConsumerGroup:
        group = self.groups.get(gid)
        if group is None:
            group = self.groups[gid] = ConsumerGroup(gid)
        self._deleted.discard(gid)
        return group

    def replay(self, key: crec.ConsumerKey, value: bytes | memoryview | None) -> None:
        gid, second = key.group, key.second or ""
        if value is None:
            group = self.groups.get(gid)
            if group is None:
                return
            if key.type == crec.GROUP_EPOCH:
                # Everything else of the group was tombstoned before (Kafka's order): a group of the same
                # id written later (converted from the classic protocol again) starts afresh.
                del self.groups[gid]
                self._deleted.add(gid)
            elif key.type == crec.MEMBER_METADATA:
                group.members.pop(second, None)
            elif key.type == crec.TARGET_ASSIGNMENT_MEMBER:
                group.targets.pop(second, None)
            elif key.type == crec.CURRENT_MEMBER_ASSIGNMENT and second in group.members:
                group.members[second] = replace(group.members[second], member_epoch=LEAVE_EPOCH, assigned={},
                                                pending_revocation={}, assignment_epochs={})
            elif key.type == crec.PARTITION_METADATA:
                group.subscription_metadata = {}
            elif key.type == crec.REGULAR_EXPRESSION:
                group.regexes.pop(second, None)
            return
        group = self._group(gid)
        if key.type == crec.GROUP_EPOCH:
            group.group_epoch = crec.decode_epoch(value)
        elif key.type == crec.TARGET_ASSIGNMENT_METADATA:
            group.assignment_epoch = crec.decode_epoch(value)
        elif key.type == crec.PARTITION_METADATA:
            group.subscription_metadata = {t.name: (t.topic_id, t.partitions)
                                           for t in crec.decode_partition_metadata(value)}
        elif key.type == crec.MEMBER_METADATA:
            v = crec.decode_member_metadata(value)
            m = group.members.get(second) or ConsumerMember(second)
            group.members[second] = replace(
                m, instance_id=v.instance_id, rack_id=v.rack_id, client_id=v.client_id, client_host=v.client_host,
                subscribed_topic_names=tuple(v.subscribed_topic_names), subscribed_topic_regex=v.subscribed_topic_regex,
                rebalance_timeout_ms=v.rebalance_timeout_ms, server_assignor=v.server_assignor, classic=v.classic)
        elif key.type == crec.TARGET_ASSIGNMENT_MEMBER:
            group.targets[second] = crec.decode_target_member(value)
        elif key.type == crec.CURRENT_MEMBER_ASSIGNMENT:
            a = crec.decode_current_assignment(value)
            m = group.members.get(second) or ConsumerMember(second)
            try:
                state = MemberState(a.state)
            except ValueError:
                state = MemberState.UNKNOWN  # written by a newer version: fenced unless it owns nothing
            epochs: Epochs = {}
            for parts in (a.assigned, a.pending_revocation):
                for tid, ps in parts.items():
                    epochs.setdefault(tid, {}).update((p, a.epoch_of(tid, p)) for p in ps)
            group.members[second] = replace(m, member_epoch=a.member_epoch,
                                            previous_member_epoch=a.previous_member_epoch, state=state,
                                            assigned=a.assigned, pending_revocation=a.pending_revocation,
                                            assignment_epochs=epochs)
        elif key.type == crec.REGULAR_EXPRESSION:
            group.regexes[second] = frozenset(crec.decode_regex(value).topics)

    def result(self) -> list[ConsumerGroup]:
        """The groups that exist at the end of the log."""
        return [g for gid, g in self.groups.items() if gid not in self._deleted]
