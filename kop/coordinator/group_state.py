"""The classic group protocol's state machine (JoinGroup, SyncGroup, Heartbeat, LeaveGroup), sans-IO.

This is the part of Kafka 4.x's group coordinator that decides: who is a member, when a rebalance starts
and ends, which member leads, which errors a request gets (Kafka's codes, because clients and
kafka-consumer-groups are written against them). It does no I/O and has no timers of its own, in the
manner of h11 for HTTP, so that every rule can be tried with a fake clock and no sockets
(tests/test_coordinator_group_state.py):

* requests go in as method calls with the time `now` (ms) and, for the requests that may wait (JoinGroup,
  SyncGroup), a token the caller picks; their answers come out of `take_effects()` as `Answer(token, ...)`;
* records to write come out as `Write(write_id, group_id, records)`; the caller writes them in that order
  and reports each outcome with `write_done(write_id, error)` - a rebalance completes, or is undone, only
  then, so no member is told of a state a crash could take back;
* timers (session, rebalance, initial rebalance delay, pending sync) are deadlines held here:
  `next_deadline()` says when to call `expire_timers(now)` next.

The caller (kop/coordinator/coordinator.py) is the async shell: it feeds the loop's monotonic time (so a
wall-clock jump neither expires nor prolongs a session), writes the records to __consumer_offsets and
answers the waiting requests. Time stamps kept in records (a group's state time) come from `wall_ms`.

Where KoP fell short we do not (research/kop.md §3.5, §6): KIP-394 (a first JoinGroup v4+ without a
member id gets MEMBER_ID_REQUIRED and a generated id); KIP-345 static membership (a restarted member with
the same group.instance.id takes its old member id's place and assignment without a rebalance when its
protocols did not change, and the old id is fenced with FENCED_INSTANCE_ID); LeaveGroup of a batch of
members by member id or group instance id with per-member results.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Hashable, Iterable
from dataclasses import dataclass, field

from kop.config import BrokerConfig
from kop.coordinator import records as rec
from kop.coordinator.group import (
    EMPTY_ASSIGNMENT,
    UNKNOWN_MEMBER_ID,
    ClassicGroup,
    GroupState,
    Member,
    new_member_uuid,
)
from kop.coordinator.sansio import Record, SansIOMachine, Write
from kop.protocol.errors import ErrorCode

log = logging.getLogger(__name__)

# Kafka's GROUP_NEW_MEMBER_JOIN_TIMEOUT: a new member parked in a rebalance is dropped after this long.
NEW_MEMBER_JOIN_TIMEOUT_MS = 300_000

S = GroupState
E = ErrorCode


@dataclass(slots=True)
class JoinRequest:
    group_id: str
    member_id: str
    group_instance_id: str | None
    protocol_type: str
    protocols: list[tuple[str, bytes]]
    session_timeout_ms: int
    rebalance_timeout_ms: int
    client_id: str
    client_host: str
    api_version: int
    reason: str | None = None


@dataclass(slots=True)
class JoinResult:
    error: int = 0
    generation_id: int = -1
    protocol_type: str | None = None
    protocol_name: str | None = None
    leader: str = ""
    skip_assignment: bool = False
    member_id: str = ""
    members: list[tuple[str, str | None, bytes]] = field(default_factory=list)


@dataclass(slots=True)
class SyncResult:
    error: int = 0
    protocol_type: str | None = None
    protocol_name: str | None = None
    assignment: bytes = EMPTY_ASSIGNMENT


@dataclass(frozen=True, slots=True)
class Answer:
    """The answer to the parked JoinGroup or SyncGroup whose token this is. Only a token's first answer
    counts: a request answered early (say, a failed write) may be answered again when its member leaves."""
    token: Hashable
    result: JoinResult | SyncResult


Effect = Answer | Write


def group_record(group: ClassicGroup, assignment: dict[str, bytes]) -> Record:
    """The group metadata record of `group` with the given assignment (member id -> bytes)."""
    members = [
        rec.MemberMetadata(m.member_id, m.group_instance_id, m.client_id, m.client_host,
                           m.rebalance_timeout_ms, m.session_timeout_ms, m.metadata(group.protocol_name),
                           assignment.get(m.member_id, EMPTY_ASSIGNMENT))
        for m in group.members.values()
    ]
    value = rec.GroupMetadataValue(
        group.protocol_type or "", group.generation_id, group.protocol_name, group.leader_id,
        -1 if group.state_timestamp is None else group.state_timestamp, members)
    return rec.group_metadata_key(group.group_id), rec.encode_group_metadata_value(value)


def empty_group_record(group: ClassicGroup) -> Record:
    """What Kafka 4.x writes for a group that was just created: no protocol, generation 0."""
    value = rec.GroupMetadataValue("", 0, None, None,
                                   -1 if group.state_timestamp is None else group.state_timestamp, [])
    return rec.group_metadata_key(group.group_id), rec.encode_group_metadata_value(value)


def _inconsistent(requested: str | None, current: str | None) -> bool:
    return requested is not None and current is not None and requested != current


class GroupStateMachine(SansIOMachine[Answer]):
    """Every classic group of this coordinator and the rules that move them. See the module docstring for
    how it is driven; `groups` is shared with the coordinator, which loads them and keeps their offsets."""

    def __init__(self, config: BrokerConfig, wall_ms: Callable[[], int] | None = None) -> None:
        super().__init__(wall_ms)
        self.config = config
        self.groups: dict[str, ClassicGroup] = {}

    # ------------------------------------------------------------------ answers (timers, writes: sansio.py)
    def _answer(self, token: Hashable | None, result: JoinResult | SyncResult) -> None:
        if token is not None:
            self._effects.append(Answer(token, result))

    def _reschedule_heartbeat(self, group: ClassicGroup, member: Member, timeout_ms: int | None = None) -> None:
        self._schedule(("hb", group.group_id, member.member_id),
                       member.session_timeout_ms if timeout_ms is None else timeout_ms,
                       self._expire_heartbeat, group.group_id, member.member_id)

    # ================================================================== groups coming and going
    def loaded(self, groups: Iterable[ClassicGroup], now: int) -> None:
        """Groups were loaded from __consumer_offsets: their members' sessions start now; a group over
        groupMaxSize (the limit was lowered since) rebalances, and so does a group whose last rebalance is
        recent (`_rebalanced_recently`)."""
        self._now = now
        for group in groups:
            for m in group.members.values():
                self._reschedule_heartbeat(group, m)
            if len(group.members) > self.config.groupMaxSize:
                self._prepare_rebalance(group, f"freshly loaded group is over capacity {self.config.groupMaxSize}")
            elif self._rebalanced_recently(group):
                self._prepare_rebalance(group, f"its coordinator moved while generation {group.generation_id} "
                                               "may still have been fetching its committed offsets")

    def _rebalanced_recently(self, group: ClassicGroup) -> bool:
        """Whether a loaded Stable group's generation began less than its rebalance timeout ago.

        Its members may then have had their SyncGroup answered by the old coordinator and their first
        OffsetFetch (the committed offsets of the new assignment) refused by it with NOT_COORDINATOR as it
        unloaded. librdkafka (confluentinc/librdkafka#5586, open) never retries that fetch: the partitions
        stay unfetched while the member heartbeats happily, so the group is stuck with no rebalance and no
        commit (issue #24's all-brokers-kill trial). The new coordinator cannot know which members are in that
        state, so such a group rebalances once; every member's JoinGroup then assigns (and fetches) afresh.
        Apache Kafka does not do this, and a move outside the window costs nothing."""
        if not group.is_in(S.STABLE) or not group.members or group.state_timestamp is None:
            return False
        return self.timestamp() - group.state_timestamp < group.rebalance_timeout_ms()

    def drop_groups(self, group_ids: Iterable[str]) -> None:
        """Forget these groups (their partition moved away): their parked requests get NOT_COORDINATOR, as
        in Kafka when a coordinator moves, so clients look the coordinator up again."""
        for gid in list(group_ids):
            group = self.groups.pop(gid, None)
            if group is not None:
                self._cancel_group_timers(gid)
                self._release(group)

    def shutdown(self) -> None:
        """The coordinator stops: no timer fires any more and parked requests get NOT_COORDINATOR."""
        self._clear_timers()
        for group in self.groups.values():
            self._release(group)

    def _release(self, group: ClassicGroup) -> None:
        for m in list(group.members.values()):
            self._answer(group.take_join(m), JoinResult(E.NOT_COORDINATOR, member_id=m.member_id))
            self._answer(group.take_sync(m), SyncResult(E.NOT_COORDINATOR))

    def remove_group(self, group_id: str) -> None:
        """The group is deleted (DeleteGroups, or expired): it is Dead and its parked members must rejoin."""
        group = self.groups.get(group_id)
        if group is None:
            return
        self._cancel_group_timers(group_id)
        for m in list(group.members.values()):
            self._answer_removed(m)
        group.state = S.DEAD
        del self.groups[group_id]

    # ================================================================== online migration (KIP-848)
    def take_over(self, group_id: str, now: int) -> ClassicGroup | None:
        """The group becomes a consumer group (kop/coordinator/consumer_group.py upgrades it): its parked
        JoinGroup and SyncGroup requests get REBALANCE_IN_PROGRESS, so their members rejoin the consumer
        group, its timers stop, and this machine forgets it. Returns the group (marked Dead, so a write
        still in flight for it changes nothing when it completes)."""
        self._now = now
        group = self.groups.pop(group_id, None)
        if group is None:
            return None
        self._cancel_group_timers(group_id)
        for m in list(group.members.values()):
            self._answer(group.take_join(m), JoinResult(E.REBALANCE_IN_PROGRESS, member_id=m.member_id))
            self._answer(group.take_sync(m), SyncResult(E.REBALANCE_IN_PROGRESS))
        group.transition_to(S.DEAD, self.timestamp())
        return group

    def adopt(self, group: ClassicGroup, now: int, reason: str | None) -> None:
        """A consumer group became this classic group (its last consumer-protocol member left or was
        replaced): its members' sessions start now and, given a reason, a rebalance begins, as in Kafka's
        convertToClassicGroup."""
        self._now = now
        self.groups[group.group_id] = group
        for m in group.members.values():
            self._reschedule_heartbeat(group, m)
        if reason is not None:
            self._prepare_rebalance(group, reason)

    # ================================================================== JoinGroup
    def join(self, req: JoinRequest, token: Hashable, now: int) -> None:
        """A JoinGroup; its answer comes out as an Answer for `token`, at once or when the rebalance ends."""
        self._now = now
        if not req.group_id:
            self._answer(token, JoinResult(E.INVALID_GROUP_ID, member_id=req.member_id))
            return
        if not self.config.groupMinSessionTimeoutMs <= req.session_timeout_ms <= self.config.groupMaxSessionTimeoutMs:
            self._answer(token, JoinResult(E.INVALID_SESSION_TIMEOUT, member_id=req.member_id))
            return
        is_unknown = req.member_id == UNKNOWN_MEMBER_ID
        group = self.groups.get(req.group_id)
        is_new_group = False
        if group is None:
            if not is_unknown:
                self._answer(token, JoinResult(E.UNKNOWN_MEMBER_ID, member_id=req.member_id))
                return
            group = ClassicGroup(req.group_id, state_timestamp=self.timestamp())
            self.groups[req.group_id] = group
            is_new_group = True
        wrote = False
        if not self._accept_joining_member(group, req.member_id):
            group.remove(req.member_id)
            self._answer(token, JoinResult(E.GROUP_MAX_SIZE_REACHED, member_id=UNKNOWN_MEMBER_ID))
        elif is_unknown:
            wrote = self._join_new_member(req, group, token)
        else:
            wrote = self._join_existing_member(req, group, token)
        if is_new_group and not wrote:
            # Kafka 4.x commits a new group with an empty group metadata record.
            def done(error: int) -> None:
                if error:
                    self._answer(token, JoinResult(error, member_id=req.member_id))

            self._write(group.group_id, [empty_group_record(group)], done)

    def _accept_joining_member(self, group: ClassicGroup, member_id: str) -> bool:
        max_size = self.config.groupMaxSize
        if group.is_in(S.EMPTY, S.DEAD):
            return True
        if group.is_in(S.PREPARING_REBALANCE):
            m = group.members.get(member_id)
            return (m is not None and m.awaiting_join) or group.num_awaiting_join < max_size
        return member_id in group.members or len(group.members) < max_size

    def _join_new_member(self, req: JoinRequest, group: ClassicGroup, token: Hashable) -> bool:
        if group.is_in(S.DEAD):
            # The group was just removed; the client retries and finds (or creates) it again.
            self._answer(token, JoinResult(E.COORDINATOR_NOT_AVAILABLE, member_id=req.member_id))
            return False
        if not group.supports_protocols(req.protocol_type, req.protocols):
            self._answer(token, JoinResult(E.INCONSISTENT_GROUP_PROTOCOL, member_id=req.member_id))
            return False
        prefix = req.group_instance_id if req.group_instance_id is not None else req.client_id
        new_member_id = f"{prefix}-{new_member_uuid()}"
        if req.group_instance_id is not None:
            existing = group.static_member_id(req.group_instance_id)
            if existing is None:
                return self._add_member_and_rebalance(req, group, new_member_id, token)
            return self._update_static_member(req, group, existing, new_member_id, token)
        if req.api_version >= 4:
            # KIP-394: hand out the id and have the client join again with it, so a client that never
            # receives this answer cannot leave a member behind in the group.
            group.add_pending_member(new_member_id)
            self._schedule(("hb", group.group_id, new_member_id), req.session_timeout_ms,
                           self._expire_heartbeat, group.group_id, new_member_id)
            self._answer(token, JoinResult(E.MEMBER_ID_REQUIRED, member_id=new_member_id))
            return False
        return self._add_member_and_rebalance(req, group, new_member_id, token)

    def _join_existing_member(self, req: JoinRequest, group: ClassicGroup, token: Hashable) -> bool:
        member_id = req.member_id
        if group.is_in(S.DEAD):
            self._answer(token, JoinResult(E.COORDINATOR_NOT_AVAILABLE, member_id=member_id))
            return False
        if not group.supports_protocols(req.protocol_type, req.protocols):
            self._answer(token, JoinResult(E.INCONSISTENT_GROUP_PROTOCOL, member_id=member_id))
            return False
        if member_id in group.pending_join_members:
            return self._add_member_and_rebalance(req, group, member_id, token)
        err = self._validate_existing_member(group, member_id, req.group_instance_id)
        if err:
            self._answer(token, JoinResult(err, member_id=member_id))
            return False
        member = group.members[member_id]
        if group.is_in(S.PREPARING_REBALANCE):
            return self._update_member_then_rebalance(req, group, member, token)
        if group.is_in(S.COMPLETING_REBALANCE):
            if member.matches(req.protocols):
                # Same metadata: it probably missed the JoinGroup answer; give it the current generation.
                self._answer(token, self._join_result(group, member, with_members=group.is_leader(member_id)))
                return False
            return self._update_member_then_rebalance(req, group, member, token)
        if group.is_in(S.STABLE):
            if group.is_leader(member_id) or not member.matches(req.protocols):
                # The leader's JoinGroup always rebalances (it may have seen topic metadata change).
                return self._update_member_then_rebalance(req, group, member, token)
            self._answer(token, self._join_result(group, member, with_members=False))
            return False
        # Empty with members cannot happen; let the member start over.
        self._answer(token, JoinResult(E.UNKNOWN_MEMBER_ID, member_id=member_id))
        return False

    @staticmethod
    def _join_result(group: ClassicGroup, member: Member, with_members: bool,
                     skip_assignment: bool = False, leader: str | None = None) -> JoinResult:
        members = [(m.member_id, m.group_instance_id, m.metadata(group.protocol_name))
                   for m in group.members.values()] if with_members else []
        return JoinResult(
            0, group.generation_id, group.protocol_type, group.protocol_name,
            group.leader_id or "" if leader is None else leader, skip_assignment, member.member_id, members)

    @staticmethod
    def _validate_existing_member(group: ClassicGroup, member_id: str, instance_id: str | None) -> int:
        if instance_id is None:
            return 0 if member_id in group.members else E.UNKNOWN_MEMBER_ID
        existing = group.static_member_id(instance_id)
        if existing is None:
            return E.UNKNOWN_MEMBER_ID
        if existing != member_id:
            log.info("group %s: member id %s of static member %s is fenced by %s", group.group_id, member_id,
                     instance_id, existing)
            return E.FENCED_INSTANCE_ID
        return 0

    def _add_member_and_rebalance(self, req: JoinRequest, group: ClassicGroup, member_id: str,
                                  token: Hashable) -> bool:
        member = Member(member_id, req.group_instance_id, req.client_id, req.client_host,
                        req.rebalance_timeout_ms, req.session_timeout_ms, req.protocol_type, req.protocols,
                        is_new=True)
        if group.is_in(S.PREPARING_REBALANCE) and group.previous_state == S.EMPTY:
            group.new_member_added = True  # the initial rebalance may wait a little longer
        group.add(member, token)
        # A new member cannot heartbeat yet; drop it if its join stays parked for too long.
        self._reschedule_heartbeat(group, member, NEW_MEMBER_JOIN_TIMEOUT_MS)
        return self._maybe_prepare_rebalance_or_complete_join(group, f"adding new member {member_id}")

    def _update_member_then_rebalance(self, req: JoinRequest, group: ClassicGroup, member: Member,
                                      token: Hashable) -> bool:
        superseded = group.update_member(member, req.protocols, req.rebalance_timeout_ms, req.session_timeout_ms,
                                         token)
        self._answer(superseded, JoinResult(E.REBALANCE_IN_PROGRESS, member_id=member.member_id))
        return self._maybe_prepare_rebalance_or_complete_join(
            group, f"member {member.member_id} is joining group during {group.state.value}")

    def _update_static_member(self, req: JoinRequest, group: ClassicGroup, old_member_id: str,
                              new_member_id: str, token: Hashable) -> bool:
        assert req.group_instance_id is not None
        instance_id = req.group_instance_id
        current_leader = group.leader_id  # before the new id may take the leader's place
        self._cancel(("hb", group.group_id, old_member_id))
        member, old_join, old_sync = group.replace_static_member(instance_id, old_member_id, new_member_id)
        self._answer(old_join, JoinResult(E.FENCED_INSTANCE_ID, member_id=old_member_id))
        self._answer(old_sync, SyncResult(E.FENCED_INSTANCE_ID))
        self._reschedule_heartbeat(group, member)
        old = (member.protocols, member.rebalance_timeout_ms, member.session_timeout_ms)
        group.update_member(member, req.protocols, req.rebalance_timeout_ms, req.session_timeout_ms, token)
        if group.is_in(S.STABLE):
            if (group.protocol_name or "") == group.select_protocol():
                self._persist_static_member(req, group, member, old_member_id, old, current_leader, token)
                return True
            return self._maybe_prepare_rebalance_or_complete_join(
                group, f"static member {instance_id} joined with a change of protocol")
        if group.is_in(S.COMPLETING_REBALANCE):
            # The leader may already have computed assignments for the old member id: rebalance again.
            return self._prepare_rebalance(group, f"updating metadata for static member {instance_id}")
        if group.is_in(S.EMPTY, S.DEAD):
            raise RuntimeError(f"group {group.group_id} has static member {instance_id} in state {group.state}")
        return False  # PreparingRebalance: the member is answered when the join phase completes

    def _persist_static_member(self, req: JoinRequest, group: ClassicGroup, member: Member, old_member_id: str,
                               old: tuple[list[tuple[str, bytes]], int, int], current_leader: str | None,
                               token: Hashable) -> None:
        """KIP-345: the selected protocol does not change, so write the new member id and hand the member
        its old assignment without a rebalance of the others; if the write fails, the old id is restored."""
        instance_id = req.group_instance_id
        new_member_id = member.member_id

        def done(error: int) -> None:
            if error:
                log.warning("group %s: persisting static member %s failed: %s", group.group_id, instance_id,
                            ErrorCode(error).name)
                if group.members.get(new_member_id) is member and instance_id is not None:
                    group.update_member(member, old[0], old[1], old[2], None)
                    self._cancel(("hb", group.group_id, new_member_id))
                    restored, _, _ = group.replace_static_member(instance_id, new_member_id, old_member_id)
                    self._reschedule_heartbeat(group, restored)
                self._answer(token, JoinResult(
                    error, group.generation_id, group.protocol_type, group.protocol_name,
                    current_leader or "", False, UNKNOWN_MEMBER_ID))
                return
            if group.members.get(new_member_id) is not member:
                return
            if req.api_version >= 9:
                is_leader = group.is_leader(new_member_id)
                result = self._join_result(group, member, with_members=is_leader, skip_assignment=is_leader)
            else:
                result = self._join_result(group, member, with_members=False, leader=current_leader or "")
            self._answer(group.take_join(member), result)

        self._write(group.group_id, [group_record(group, {m.member_id: m.assignment for m in group.members.values()})],
                    done)

    # ------------------------------------------------------------------ rebalance
    def _maybe_prepare_rebalance_or_complete_join(self, group: ClassicGroup, reason: str) -> bool:
        if group.can_rebalance():
            return self._prepare_rebalance(group, reason)
        return self._maybe_complete_join_phase(group)

    def _maybe_complete_join_phase(self, group: ClassicGroup) -> bool:
        if (group.is_in(S.PREPARING_REBALANCE) and group.previous_state != S.EMPTY
                and group.has_all_members_joined()):
            return self._complete_join(group)
        return False

    def _prepare_rebalance(self, group: ClassicGroup, reason: str) -> bool:
        if group.is_in(S.COMPLETING_REBALANCE):
            # Members waiting in SyncGroup rejoin.
            self._reset_and_propagate_assignment(group, E.REBALANCE_IN_PROGRESS)
        self._cancel(("sync", group.group_id))
        group.pending_sync_members.clear()
        initial = group.is_in(S.EMPTY)
        if initial:
            # A new group: give the other members a moment to join before the first generation.
            delay = self.config.groupInitialRebalanceDelayMs
            remaining = max(group.rebalance_timeout_ms() - delay, 0)
            self._schedule(("join", group.group_id), delay, self._try_complete_initial_rebalance,
                           group.group_id, delay, remaining)
        group.transition_to(S.PREPARING_REBALANCE, self.timestamp())
        log.info("group %s: preparing to rebalance (generation %d): %s", group.group_id, group.generation_id,
                 reason)
        if initial:
            return False
        if group.has_all_members_joined():
            return self._complete_join(group)
        self._schedule(("join", group.group_id), group.rebalance_timeout_ms(), self._complete_join_by_id,
                       group.group_id)
        return False

    def _try_complete_initial_rebalance(self, group_id: str, delay_ms: int, remaining_ms: int) -> None:
        group = self.groups.get(group_id)
        if group is None or not group.is_in(S.PREPARING_REBALANCE):
            return
        if group.new_member_added and remaining_ms != 0:
            group.new_member_added = False
            new_delay = min(self.config.groupInitialRebalanceDelayMs, remaining_ms)
            new_remaining = max(remaining_ms - delay_ms, 0)
            self._schedule(("join", group_id), new_delay, self._try_complete_initial_rebalance, group_id,
                           new_delay, new_remaining)
            return
        self._complete_join(group)

    def _complete_join_by_id(self, group_id: str) -> None:
        group = self.groups.get(group_id)
        if group is not None and group.is_in(S.PREPARING_REBALANCE):
            self._complete_join(group)

    def _complete_join(self, group: ClassicGroup) -> bool:
        """End the join phase: drop dynamic members that did not rejoin, start the next generation and
        answer every parked JoinGroup (the leader gets the member list). Returns True when it wrote."""
        gid = group.group_id
        self._cancel(("join", gid))
        for m in [m for m in group.not_yet_rejoined() if not m.is_static]:
            group.remove(m.member_id)
            self._cancel(("hb", gid, m.member_id))
            self._answer_removed(m)
        if group.is_in(S.DEAD):
            return False
        if not group.maybe_elect_new_joined_leader() and group.members:
            # Only static members that did not rejoin are left: wait until their sessions expire.
            log.info("group %s could not complete the rebalance: no member rejoined", gid)
            self._schedule(("join", gid), group.rebalance_timeout_ms(), self._complete_join_by_id, gid)
            return False
        group.init_next_generation(self.timestamp())
        if group.is_in(S.EMPTY):
            log.info("group %s with generation %d is now empty", gid, group.generation_id)
            self._write_logged(gid, [group_record(group, {})], "empty group metadata")
            return True
        log.info("group %s: stabilized generation %d with %d members (protocol %s)", gid, group.generation_id,
                 len(group.members), group.protocol_name)
        for m in list(group.members.values()):
            self._answer(group.take_join(m), self._join_result(group, m, with_members=group.is_leader(m.member_id)))
            self._reschedule_heartbeat(group, m)
            m.is_new = False
            group.pending_sync_members.add(m.member_id)
        self._schedule(("sync", gid), group.rebalance_timeout_ms(), self._expire_pending_sync, gid,
                       group.generation_id)
        return False

    def _answer_removed(self, member: Member) -> None:
        """A member removed while parked gets UNKNOWN_MEMBER_ID, so a live client joins again. (The group
        has already dropped it, so its counts do not change here.)"""
        self._answer(member.join_token, JoinResult(E.UNKNOWN_MEMBER_ID, member_id=UNKNOWN_MEMBER_ID))
        member.join_token = None
        self._answer(member.sync_token, SyncResult(E.UNKNOWN_MEMBER_ID))
        member.sync_token = None

    def _expire_pending_sync(self, group_id: str, generation: int) -> None:
        group = self.groups.get(group_id)
        if group is None or generation != group.generation_id:
            return
        if not group.is_in(S.COMPLETING_REBALANCE, S.STABLE) or not group.pending_sync_members:
            return
        pending = list(group.pending_sync_members)
        for mid in pending:
            m = group.remove(mid)
            self._cancel(("hb", group_id, mid))
            if m is not None:
                self._answer_removed(m)
        self._prepare_rebalance(group, f"removing {pending} on pending sync request expiration")

    def _expire_heartbeat(self, group_id: str, member_id: str) -> None:
        group = self.groups.get(group_id)
        if group is None or group.is_in(S.DEAD):
            return
        if member_id in group.pending_join_members:
            log.info("group %s: pending member %s removed after its session timeout", group_id, member_id)
            group.remove(member_id)
            if group.is_in(S.PREPARING_REBALANCE) and group.has_all_members_joined():
                self._complete_join(group)
            return
        member = group.members.get(member_id)
        if member is None or member.has_satisfied_heartbeat():
            return
        log.info("group %s: member %s failed (no heartbeat within %d ms), removing it", group_id, member_id,
                 member.session_timeout_ms)
        self._remove_member(group, member_id)
        reason = f"removing member {member_id} on heartbeat expiration"
        if group.is_in(S.STABLE, S.COMPLETING_REBALANCE):
            self._maybe_prepare_rebalance_or_complete_join(group, reason)
        elif group.is_in(S.PREPARING_REBALANCE) and group.has_all_members_joined():
            self._complete_join(group)

    def _remove_member(self, group: ClassicGroup, member_id: str) -> None:
        """Take a member out of the group (session expired, or it left); its parked requests, if any, get
        UNKNOWN_MEMBER_ID."""
        member = group.members[member_id]
        self._cancel(("hb", group.group_id, member_id))
        self._answer(group.take_join(member), JoinResult(E.UNKNOWN_MEMBER_ID, member_id=UNKNOWN_MEMBER_ID))
        group.remove(member_id)
        self._answer_removed(member)

    # ================================================================== SyncGroup
    def sync(self, group_id: str, generation_id: int, member_id: str, instance_id: str | None,
             protocol_type: str | None, protocol_name: str | None, assignments: list[tuple[str, bytes]],
             token: Hashable, now: int) -> None:
        """A SyncGroup; its answer comes out as an Answer for `token`: at once, or - in CompletingRebalance -
        once the leader's assignment is durable."""
        self._now = now
        if not group_id:
            self._answer(token, SyncResult(E.INVALID_GROUP_ID))
            return
        group = self.groups.get(group_id)
        if group is None:
            self._answer(token, SyncResult(E.UNKNOWN_MEMBER_ID))
            return
        if group.is_in(S.DEAD):
            self._answer(token, SyncResult(E.COORDINATOR_NOT_AVAILABLE))
            return
        err = self._validate_existing_member(group, member_id, instance_id)
        if not err and generation_id != group.generation_id:
            err = E.ILLEGAL_GENERATION
        if not err and (_inconsistent(protocol_type, group.protocol_type)
                        or _inconsistent(protocol_name, group.protocol_name)):
            err = E.INCONSISTENT_GROUP_PROTOCOL
        if not err and group.is_in(S.PREPARING_REBALANCE):
            err = E.REBALANCE_IN_PROGRESS
        if err:
            self._answer(token, SyncResult(err))
            return
        member = group.members[member_id]
        self._remove_pending_sync_member(group, member_id)
        if group.is_in(S.STABLE):
            self._answer(token, SyncResult(0, group.protocol_type, group.protocol_name, member.assignment))
            return
        # CompletingRebalance: park until the leader's assignment is durable.
        member.sync_token = token
        if group.is_leader(member_id):
            self._store_assignment(group, generation_id, member_id, assignments)

    def _remove_pending_sync_member(self, group: ClassicGroup, member_id: str) -> None:
        group.pending_sync_members.discard(member_id)
        if not group.pending_sync_members:
            self._cancel(("sync", group.group_id))

    def _store_assignment(self, group: ClassicGroup, generation_id: int, leader_id: str,
                          assignments: list[tuple[str, bytes]]) -> None:
        assignment = {mid: data for mid, data in assignments}
        missing = [mid for mid in group.members if mid not in assignment]
        for mid in missing:
            assignment[mid] = EMPTY_ASSIGNMENT
        if missing:
            log.warning("group %s: the leader's assignment misses members %s; they get an empty one",
                        group.group_id, missing)
        log.info("group %s: assignment received from leader %s for generation %d (%d members)", group.group_id,
                 leader_id, generation_id, len(group.members))

        def done(error: int) -> None:
            # Another member may have joined meanwhile: only act on the same generation, still completing.
            if not (group.is_in(S.COMPLETING_REBALANCE) and group.generation_id == generation_id):
                return
            if error:
                log.warning("group %s: storing the assignment of generation %d failed: %s", group.group_id,
                            generation_id, ErrorCode(error).name)
                self._reset_and_propagate_assignment(group, error)
                self._maybe_prepare_rebalance_or_complete_join(group, f"error {error} storing the assignment")
                return
            for m in group.members.values():
                m.assignment = assignment.get(m.member_id, EMPTY_ASSIGNMENT)
            self._propagate_assignment(group, 0)
            group.transition_to(S.STABLE, self.timestamp())

        self._write(group.group_id, [group_record(group, assignment)], done)

    def _reset_and_propagate_assignment(self, group: ClassicGroup, error: int) -> None:
        for m in group.members.values():
            m.assignment = EMPTY_ASSIGNMENT
        self._propagate_assignment(group, error)

    def _propagate_assignment(self, group: ClassicGroup, error: int) -> None:
        ptype = group.protocol_type if error == 0 else None
        pname = group.protocol_name if error == 0 else None
        for m in group.members.values():
            token = group.take_sync(m)
            if token is not None:
                self._answer(token, SyncResult(error, ptype, pname, m.assignment))
                # Sessions restart once members have their assignment.
                self._reschedule_heartbeat(group, m)

    # ================================================================== Heartbeat
    def heartbeat(self, group_id: str, generation_id: int, member_id: str, instance_id: str | None,
                  now: int) -> int:
        """A Heartbeat: its error code (it never waits)."""
        self._now = now
        if not group_id:
            return E.INVALID_GROUP_ID
        group = self.groups.get(group_id)
        if group is None:
            return E.UNKNOWN_MEMBER_ID
        if group.is_in(S.DEAD):
            return E.COORDINATOR_NOT_AVAILABLE
        err = self._validate_existing_member(group, member_id, instance_id)
        if err:
            return err
        if generation_id != group.generation_id:
            return E.ILLEGAL_GENERATION
        if group.is_in(S.EMPTY):
            return E.UNKNOWN_MEMBER_ID
        self._reschedule_heartbeat(group, group.members[member_id])
        if group.is_in(S.PREPARING_REBALANCE):
            return E.REBALANCE_IN_PROGRESS
        return 0

    # ================================================================== LeaveGroup
    def leave(self, group_id: str, members: list[tuple[str, str | None, str | None]], now: int
              ) -> tuple[int, list[tuple[str, str | None, int]]]:
        """members: (member id, group instance id, reason). Returns (top-level error, per-member errors);
        for a group that does not exist every member is UNKNOWN_MEMBER_ID (Kafka 4.x)."""
        self._now = now
        if not group_id:
            return E.INVALID_GROUP_ID, []
        group = self.groups.get(group_id)
        if group is None:
            return 0, [(mid, iid, E.UNKNOWN_MEMBER_ID) for mid, iid, _ in members]
        if group.is_in(S.DEAD):
            return E.COORDINATOR_NOT_AVAILABLE, []
        out: list[tuple[str, str | None, int]] = []
        left = []
        for member_id, instance_id, reason in members:
            if member_id == UNKNOWN_MEMBER_ID:
                # Administrative removal of a static member by its group instance id.
                existing = group.static_member_id(instance_id)
                e = E.UNKNOWN_MEMBER_ID if existing is None else 0
                gone = existing
            elif member_id in group.pending_join_members:
                group.remove(member_id)
                self._cancel(("hb", group_id, member_id))
                e, gone = 0, None
                left.append(member_id)
            else:
                e = self._validate_existing_member(group, member_id, instance_id) if instance_id is not None else 0
                if not e and member_id not in group.members:
                    e = E.UNKNOWN_MEMBER_ID
                gone = None if e else member_id
            if gone is not None:
                log.info("group %s: member %s left (reason: %s)", group_id, gone, reason or "not provided")
                self._remove_member(group, gone)
                left.append(gone)
            out.append((member_id, instance_id, e))
        if left:
            reason = f"explicit LeaveGroup request for ({', '.join(left)}) members"
            if group.is_in(S.STABLE, S.COMPLETING_REBALANCE):
                self._maybe_prepare_rebalance_or_complete_join(group, reason)
            elif group.is_in(S.PREPARING_REBALANCE):
                self._maybe_complete_join_phase(group)
        return 0, out

    # ================================================================== offset commits
    def validate_offset_commit(self, group: ClassicGroup, member_id: str, instance_id: str | None,
                               generation_id: int, now: int) -> int:
        """The error of an OffsetCommit to `group` (0: it may commit). A commit of a member counts as a
        heartbeat, as in Kafka."""
        self._now = now
        if group.is_in(S.DEAD):
            return E.COORDINATOR_NOT_AVAILABLE
        if generation_id < 0 and group.is_in(S.EMPTY):
            return 0  # admin client or a consumer outside group management, on an empty group
        if generation_id >= 0 or member_id or instance_id is not None:
            err = member_fencing_error(group, member_id, instance_id, generation_id)
            if err:
                return err
        elif not group.is_in(S.EMPTY):
            return E.UNKNOWN_MEMBER_ID
        if group.is_in(S.COMPLETING_REBALANCE):
            # A valid member that has its JoinGroup answer but not its assignment yet.
            return E.REBALANCE_IN_PROGRESS
        if group.is_in(S.STABLE, S.PREPARING_REBALANCE):
            self._reschedule_heartbeat(group, group.members[member_id])
        return 0


def member_fencing_error(group: ClassicGroup, member_id: str, instance_id: str | None, generation_id: int) -> int:
    """Whether a classic member's offset commit (plain or transactional) names the member and generation the
    group has now: UNKNOWN_MEMBER_ID, FENCED_INSTANCE_ID (a static id now held by another member id) or
    ILLEGAL_GENERATION, else 0."""
    if instance_id is not None:
        existing = group.static_member_id(instance_id)
        if existing is None:
            return E.UNKNOWN_MEMBER_ID
        if existing != member_id:
            return E.FENCED_INSTANCE_ID
    if member_id not in group.members:
        return E.UNKNOWN_MEMBER_ID
    if generation_id != group.generation_id:
        return E.ILLEGAL_GENERATION
    return 0
