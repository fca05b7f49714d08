"""KIP-1071 streams groups (StreamsGroupHeartbeat), sans-IO: Kafka Streams 4.x with `group.protocol=streams`.

The shape is KIP-848's (kop/coordinator/consumer_group.py), over tasks instead of partitions: each member
heartbeats; the coordinator keeps the group's topology (the first member's, replaced by a newer epoch), works
out its tasks and internal topics against the broker's topics (topology.py), computes every member's *target*
active tasks with the sticky task assignor (assignor.py) and moves each member towards its target on its own,
never giving a task to a member before its previous owner has revoked it. The three epochs are KIP-848's: the
group epoch moves when an input of the assignment changes (a member joins or leaves, the topology or its topics
change), the assignment epoch is the group epoch the targets were computed for, a member epoch the assignment
epoch the member has reached. Rules and error codes are Kafka 4.4's (its GroupMetadataManager
streamsGroupHeartbeat and streams CurrentAssignmentBuilder):

* join with epoch 0 (a topology is required); -1 leaves; -2 is a static member leaving for now (its instance id
  keeps its tasks until its session ends); a static member rejoining under a new member id takes over the old
  one's tasks (UNRELEASED_INSTANCE_ID while the old one is still active);
* a request epoch above the member's is FENCED_MEMBER_EPOCH; below it, accepted only when it is the member's
  previous epoch and the member owns no task it was not given (a lost response), else FENCED_MEMBER_EPOCH;
* a member whose target drops tasks it owns is told its tasks without them (state UNREVOKED_TASKS, epoch kept)
  and moves on once a heartbeat shows them gone; tasks still owned by another member are held back
  (UNRELEASED_TASKS) until released;
* the first assignment of a group that had no members waits for the initial rebalance delay (status
  ASSIGNMENT_DELAYED meanwhile: Kafka 4.4's group.streams.initial.rebalance.delay.ms), so members starting
  together are assigned at once rather than one after the other;
* a member whose heartbeats stop for the session timeout is fenced (removed, group epoch bumped), and so is one
  that has not revoked its tasks within its rebalance timeout.

Standby tasks (groupStreamsNumStandbyReplicas, Kafka's group.streams.num.standby.replicas, default 0) are kept
on other processes than the active task's; a member drops a standby task at once and gets one once nobody of its
process holds that task.

Warm-up tasks: none, as Kafka 4.4.0. Its heartbeat, records and reconciliation carry them, but the one step that
would create them (its AssignmentRefiner, fed the members' TaskOffsets, group.streams.num.warmup.replicas and
acceptable.recovery.lag) hands the assignor's result on unchanged, and its StickyTaskAssignor assigns only active
and standby tasks; so a task moves to its new owner at once there too, its state restored from the changelog
(or already there: the assignor prefers a member holding a standby copy, assignor.py).

Differences from Kafka 4.4, and why: the members' TaskOffsets/TaskEndOffsets are not kept (Kafka's assignor also
ranks members reporting local state of a task as standby candidates by them); standby tasks are not revoked through UNREVOKED_TASKS (they process nothing); no IQ endpoint information (PartitionsByUserEndpoint is null); a failed write of the group's records
leaves the change in memory (Kafka reverts it). Records: `records(group)` gives what changed since it was last
asked (records.py, Kafka 4.4's types 17 and 19-23), `restore` rebuilds a group from them at load. Clock: `now`
arguments, monotonic milliseconds.
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from kop.coordinator.streams import records as srec
from kop.coordinator.streams.assignor import Task, Tasks, assign, assign_standby
from kop.coordinator.streams.topology import (
    STALE_TOPOLOGY,
    Configured,
    Topology,
    configure,
)
from kop.protocol.errors import ErrorCode

E = ErrorCode
LEAVE_EPOCH, STATIC_LEAVE_EPOCH = -1, -2
ASSIGNMENT_DELAYED = 5  # Kafka 4.4's status code (group.streams.initial.rebalance.delay.ms)
EMPTY: Tasks = frozenset()


class MemberState(enum.IntEnum):
    STABLE = 0
    UNREVOKED_TASKS = 1
    UNRELEASED_TASKS = 2


@dataclass(slots=True)
class StreamsHeartbeat:
    """StreamsGroupHeartbeat's fields; None means "unchanged since the last heartbeat", as on the wire."""
    group_id: str
    member_id: str
    member_epoch: int
    instance_id: str | None = None
    rack_id: str | None = None
    rebalance_timeout_ms: int = -1
    topology: Topology | None = None
    active_tasks: Tasks | None = None
    process_id: str | None = None
    client_tags: dict[str, str] | None = None
    user_endpoint: tuple[str, int] | None = None
    shutdown_application: bool = False
    client_id: str = ""
    client_host: str = ""


@dataclass(slots=True)
class StreamsResult:
    error: int = 0
    message: str | None = None
    member_id: str = ""
    member_epoch: int = 0
    active_tasks: Tasks | None = None  # None: unchanged (then standby_tasks too)
    standby_tasks: Tasks | None = None
    statuses: list[tuple[int, str]] | None = None
    to_create: dict[str, tuple[int, dict[str, str]]] = field(default_factory=dict)


@dataclass(slots=True)
class StreamsMember:
    member_id: str
    instance_id: str | None = None
    rack_id: str | None = None
    client_id: str = ""
    client_host: str = ""
    process_id: str = ""
    topology_epoch: int = 0
    rebalance_timeout_ms: int = -1
    client_tags: dict[str, str] = field(default_factory=dict)
    user_endpoint: tuple[str, int] | None = None
    member_epoch: int = 0
    previous_epoch: int = -1
    state: MemberState = MemberState.STABLE
    assigned: Tasks = EMPTY  # the active tasks it may process now
    revoking: Tasks = EMPTY  # tasks it still owns and must give up
    sent: Tasks | None = None  # the tasks last sent to it
    standby: Tasks = EMPTY  # its standby tasks (kept up to date from changelogs, not processed)
    sent_standby: Tasks | None = None
    deadline: int = 0  # its session ends at this monotonic ms
    revoke_deadline: int | None = None  # while it revokes: fenced unless done by then (its rebalance timeout)

    def ends_at(self) -> int:
        return self.deadline if self.revoke_deadline is None else min(self.deadline, self.revoke_deadline)


@dataclass(slots=True)
class StreamsGroup:
    group_id: str
    group_epoch: int = 0
    assignment_epoch: int = 0
    topology: Topology | None = None
    configured: Configured | None = None
    members: dict[str, StreamsMember] = field(default_factory=dict)
    targets: dict[str, Tasks] = field(default_factory=dict)
    standby_targets: dict[str, Tasks] = field(default_factory=dict)
    shutdown: bool = False
    written: dict[bytes, bytes] = field(default_factory=dict)  # its records as last written: key -> value
    delayed_until: int | None = None  # the first assignment of a group that was empty waits until then

    @property
    def state(self) -> str:
        """Kafka's StreamsGroupState as ListGroups and describe print it."""
        if not self.members:
            return "Empty"
        if self.configured is None or not self.configured.tasks and self.configured.statuses:
            return "NotReady"
        if self.assignment_epoch < self.group_epoch:
            return "Assigning"
        if any(m.member_epoch != self.assignment_epoch or m.state != MemberState.STABLE
               for m in self.members.values()):
            return "Reconciling"
        return "Stable"

    def owner_elsewhere(self, task: Task, member_id: str) -> bool:
        """Whether another member still runs the task, or keeps it as a standby in this member's process (a
        process has one state directory per task)."""
        process = self.members[member_id].process_id
        return any(task in m.assigned or task in m.revoking or (task in m.standby and m.process_id == process)
                   for mid, m in self.members.items() if mid != member_id)

    def standby_free(self, task: Task, member_id: str) -> bool:
        """Whether the member may keep a standby of the task now: nobody of its process holds the task."""
        me = self.members[member_id]
        return task not in me.assigned and task not in me.revoking and not any(
            task in m.assigned or task in m.revoking or task in m.standby
            for mid, m in self.members.items() if mid != member_id and m.process_id == me.process_id)


class StreamsGroupMachine:
    """Every streams group of this coordinator. heartbeat() answers at once; expire(now) fences members whose
    session ended; partitions() (given) is the broker's topics now, Kafka name -> partition count."""

    def __init__(self, session_timeout_ms: int, partitions: Callable[[], Mapping[str, int]],
                 initial_delay_ms: int = 0, standby_replicas: int = 0) -> None:
        self.session_timeout_ms = session_timeout_ms
        self.standby_replicas = standby_replicas
        self.initial_delay_ms = initial_delay_ms
        self.partitions = partitions
        self.groups: dict[str, StreamsGroup] = {}

    # ------------------------------------------------------------------ heartbeat
    def heartbeat(self, req: StreamsHeartbeat, now: int) -> StreamsResult:
        err = _invalid(req)
        if err is not None:
            return StreamsResult(E.INVALID_REQUEST, err, req.member_id, req.member_epoch)
        group = self.groups.get(req.group_id)
        if group is None:
            if req.member_epoch != 0:
                return StreamsResult(E.GROUP_ID_NOT_FOUND, f"Streams group {req.group_id} not found.",
                                     req.member_id, req.member_epoch)
            group = self.groups[req.group_id] = StreamsGroup(req.group_id)
        if req.member_epoch in (LEAVE_EPOCH, STATIC_LEAVE_EPOCH):
            return self._leave(group, req, now)
        if not group.members and self.initial_delay_ms > 0:
            group.delayed_until = now + self.initial_delay_ms  # more members may be on their way
        epoch_before = group.group_epoch
        member, result = self._member(group, req)
        if result is not None:
            return result
        assert member is not None
        self._update_member(group, member, req)
        member.deadline = now + self.session_timeout_ms
        statuses = self._configure(group, req)
        # one heartbeat moves the group epoch by one at most, whatever changed (Kafka bumps it once)
        group.group_epoch = min(group.group_epoch, epoch_before + 1)
        if group.delayed_until is not None and now < group.delayed_until:
            # members move to the group epoch with the targets as they were (none for the new ones)
            statuses.insert(0, (ASSIGNMENT_DELAYED, "Assignment delayed due to the configured initial rebalance delay."))
            group.assignment_epoch = group.group_epoch
        else:
            if group.delayed_until is not None:  # the delay is over: the first real assignment
                group.delayed_until = None
                group.group_epoch += 1
            if group.assignment_epoch < group.group_epoch:
                self._compute_targets(group)
        if req.active_tasks is not None:
            _reported(member, req.active_tasks)
        self._reconcile(group, member)
        if not member.revoking:
            member.revoke_deadline = None
        elif member.revoke_deadline is None and member.rebalance_timeout_ms > 0:
            member.revoke_deadline = now + member.rebalance_timeout_ms
        out = StreamsResult(member_id=member.member_id, member_epoch=member.member_epoch, statuses=statuses,
                            to_create=dict(group.configured.to_create) if group.configured is not None else {})
        if member.sent != member.assigned or member.sent_standby != member.standby or req.member_epoch == 0:
            out.active_tasks = member.sent = member.assigned
            out.standby_tasks = member.sent_standby = member.standby
        return out

    def _member(self, group: StreamsGroup, req: StreamsHeartbeat) -> tuple[StreamsMember | None, StreamsResult | None]:
        """The member the request is from (new or rejoining on epoch 0), or the error that fences it."""
        member = group.members.get(req.member_id)
        if req.member_epoch == 0:
            if req.instance_id is not None:
                old = next((m for m in group.members.values() if m.instance_id == req.instance_id
                            and m.member_id != req.member_id), None)
                if old is not None:
                    if old.member_epoch != STATIC_LEAVE_EPOCH:
                        return None, StreamsResult(E.UNRELEASED_INSTANCE_ID, f"Static member {req.instance_id} "
                                                   "is still active.", req.member_id, req.member_epoch)
                    # the static member comes back under a new member id: it takes over the old one's tasks
                    del group.members[old.member_id]
                    group.targets[req.member_id] = group.targets.pop(old.member_id, EMPTY)
                    group.standby_targets[req.member_id] = group.standby_targets.pop(old.member_id, EMPTY)
                    old.member_id = req.member_id
                    group.members[req.member_id] = old
                    old.sent = old.sent_standby = None
                    old.member_epoch = old.previous_epoch
                    return old, None
            if member is None:
                member = group.members[req.member_id] = StreamsMember(req.member_id)
                group.group_epoch += 1
            else:  # a rejoin of a known member: it has dropped its tasks and starts over
                member.member_epoch, member.previous_epoch, member.state = 0, -1, MemberState.STABLE
                member.assigned = member.revoking = member.standby = EMPTY
                member.sent = member.sent_standby = None
            return member, None
        if member is None:
            return None, StreamsResult(E.UNKNOWN_MEMBER_ID, f"Member {req.member_id} is not a member of group "
                                       f"{req.group_id}.", req.member_id, req.member_epoch)
        if req.member_epoch > member.member_epoch or (
                req.member_epoch < member.member_epoch and (
                    req.member_epoch != member.previous_epoch or
                    (req.active_tasks is not None and not req.active_tasks <= member.assigned | member.revoking))):
            return None, StreamsResult(E.FENCED_MEMBER_EPOCH, "The streams group member has a stale member epoch.",
                                       req.member_id, req.member_epoch)
        return member, None

    def _update_member(self, group: StreamsGroup, m: StreamsMember, req: StreamsHeartbeat) -> None:
        m.client_id, m.client_host = req.client_id or m.client_id, req.client_host or m.client_host
        if req.instance_id is not None:
            m.instance_id = req.instance_id
        if req.rack_id is not None:
            m.rack_id = req.rack_id
        if req.rebalance_timeout_ms != -1:
            m.rebalance_timeout_ms = req.rebalance_timeout_ms
        if req.client_tags is not None:
            m.client_tags = dict(req.client_tags)
        if req.user_endpoint is not None:
            m.user_endpoint = req.user_endpoint
        if req.topology is not None:
            m.topology_epoch = req.topology.epoch
        if req.process_id is not None and req.process_id != m.process_id:
            m.process_id = req.process_id
            group.group_epoch += 1  # the assignor balances processes
        if req.shutdown_application:
            group.shutdown = True

    def _configure(self, group: StreamsGroup, req: StreamsHeartbeat) -> list[tuple[int, str]]:
        """Take a newer topology; work it out against the topics now (a change of its tasks or of what is
        missing bumps the group epoch). Returns the statuses to answer with."""
        t = req.topology
        if t is not None and (group.topology is None or t.epoch > group.topology.epoch):
            group.topology = t
            group.group_epoch += 1
        statuses: list[tuple[int, str]] = []
        if group.topology is not None:
            configured = configure(group.topology, self.partitions())
            if group.configured is None or configured.fingerprint() != group.configured.fingerprint():
                group.group_epoch += 1
            group.configured = configured
            statuses.extend(configured.statuses)
            member = group.members.get(req.member_id)
            if member is not None and member.topology_epoch < group.topology.epoch:
                statuses.append((STALE_TOPOLOGY, f"The member's topology epoch {member.topology_epoch} is behind "
                                                 f"the group's topology epoch {group.topology.epoch}."))
        if group.shutdown:
            statuses.append((4, "A KafkaStreams instance encountered a fatal error and requested a shutdown "
                                "for the entire application."))
        return statuses

    def _compute_targets(self, group: StreamsGroup) -> None:
        tasks = group.configured.tasks if group.configured is not None else EMPTY
        processes = {m.member_id: m.process_id or m.member_id for m in group.members.values()}
        group.targets = assign(tasks, processes, group.targets, group.standby_targets)
        # standby copies only of tasks with state (a subtopology with changelog topics), as Kafka
        stateful = {s.subtopology_id for s in group.topology.subtopologies if s.state_changelog_topics} \
            if group.topology is not None else set()
        group.standby_targets = assign_standby([t for t in tasks if t[0] in stateful], processes, group.targets,
                                               group.standby_targets, self.standby_replicas)
        group.assignment_epoch = group.group_epoch

    def _reconcile(self, group: StreamsGroup, m: StreamsMember) -> None:
        """Move the member towards its target (Kafka's streams CurrentAssignmentBuilder)."""
        if m.revoking:
            return  # it must first give up its revoked tasks
        target = group.targets.get(m.member_id, EMPTY)
        if m.member_epoch != group.assignment_epoch:
            dropped = m.assigned - target
            if dropped:
                m.assigned, m.revoking, m.state = m.assigned & target, dropped, MemberState.UNREVOKED_TASKS
                return
            m.previous_epoch, m.member_epoch = m.member_epoch, group.assignment_epoch
        free = frozenset(t for t in target - m.assigned if not group.owner_elsewhere(t, m.member_id))
        m.assigned = m.assigned | free
        # standby tasks: dropped at once (they process nothing), taken once nobody of its process holds them
        standby = group.standby_targets.get(m.member_id, EMPTY)
        m.standby = frozenset(t for t in standby if t in m.standby or group.standby_free(t, m.member_id))
        done = m.assigned == target and m.standby == standby
        m.state = MemberState.STABLE if done else MemberState.UNRELEASED_TASKS

    # ------------------------------------------------------------------ leaving and expiring
    def _leave(self, group: StreamsGroup, req: StreamsHeartbeat, now: int) -> StreamsResult:
        member = group.members.get(req.member_id)
        if member is None:
            return StreamsResult(E.UNKNOWN_MEMBER_ID, f"Member {req.member_id} is not a member of group "
                                 f"{req.group_id}.", req.member_id, req.member_epoch)
        if req.member_epoch == STATIC_LEAVE_EPOCH and member.instance_id is not None:
            member.previous_epoch, member.member_epoch = member.member_epoch, STATIC_LEAVE_EPOCH
            member.deadline = now + self.session_timeout_ms  # its tasks wait for it until its session ends
        else:
            self.remove(group, req.member_id)
        return StreamsResult(member_id=req.member_id, member_epoch=req.member_epoch)

    def remove(self, group: StreamsGroup, member_id: str) -> None:
        group.members.pop(member_id, None)
        group.targets.pop(member_id, None)
        group.standby_targets.pop(member_id, None)
        group.group_epoch += 1

    def next_deadline(self) -> int | None:
        return min((m.ends_at() for g in self.groups.values() for m in g.members.values()), default=None)

    def expire(self, now: int) -> list[tuple[str, str]]:
        """Fence the members whose session ended, or who did not revoke within their rebalance timeout:
        [(group id, member id)]."""
        gone = [(g, m.member_id) for g in self.groups.values() for m in g.members.values() if m.ends_at() <= now]
        for g, mid in gone:
            self.remove(g, mid)
        return [(g.group_id, mid) for g, mid in gone]

    def refresh(self, now: int) -> None:
        """Fresh session deadlines (the coordinator could not serve heartbeats for a while)."""
        for g in self.groups.values():
            for m in g.members.values():
                m.deadline = max(m.deadline, now + self.session_timeout_ms)
                if m.revoke_deadline is not None:
                    m.revoke_deadline = max(m.revoke_deadline, now + m.rebalance_timeout_ms)

    # ------------------------------------------------------------------ records
    def records(self, group: StreamsGroup) -> list[tuple[bytes, bytes | None]]:
        """The __consumer_offsets records of what changed in `group` since this was last asked (to be written
        before its answers go out); a group no longer here gets its tombstones."""
        now = snapshot(group) if self.groups.get(group.group_id) is group else {}
        out = srec.diff(group.written, now)
        group.written = now
        return out

    def restore(self, group_id: str, values: dict[bytes, bytes], now: int) -> StreamsGroup:
        """A group from its records as replayed at load (key -> latest value); its members' sessions start now."""
        group = self.groups[group_id] = restored(group_id, values)
        if group.topology is not None:
            group.configured = configure(group.topology, self.partitions())
        for m in group.members.values():
            m.deadline = now + self.session_timeout_ms
        return group

    # ------------------------------------------------------------------ offsets
    @staticmethod
    def subscribed_topics(group: StreamsGroup) -> set[str]:
        """The topics a group with members reads (its source and repartition topics): their offsets are
        neither deleted (OffsetDelete answers GROUP_SUBSCRIBED_TO_TOPIC) nor expired. None without members."""
        if not group.members or group.topology is None:
            return set()
        return {t for s in group.topology.subtopologies for t in s.source_topics}
    def validate_offset_commit(self, group: StreamsGroup, member_id: str, epoch: int) -> int:
        """A commit of a streams group: by a member at its epoch (or its previous one: a commit sent while the
        heartbeat moving it was answered); a commit without member information only when it is empty."""
        if epoch < 0 and not member_id:
            return 0 if not group.members else E.UNKNOWN_MEMBER_ID
        m = group.members.get(member_id)
        if m is None:
            return E.UNKNOWN_MEMBER_ID
        if epoch != m.member_epoch and epoch != m.previous_epoch:
            return E.STALE_MEMBER_EPOCH
        return 0


def _reported(m: StreamsMember, owned: Tasks) -> None:
    """The member says which active tasks it owns: revoked ones it no longer owns are released."""
    if m.revoking and not (owned & m.revoking):
        m.revoking = EMPTY
        m.state = MemberState.STABLE


def _invalid(req: StreamsHeartbeat) -> str | None:
    """Kafka's throwIfStreamsGroupHeartbeatRequestIsInvalid: the reason for INVALID_REQUEST, or None."""
    if not req.group_id:
        return "GroupId can't be empty."
    if not req.member_id:
        return "MemberId can't be empty."
    if req.instance_id is not None and not req.instance_id:
        return "InstanceId can't be empty."
    if req.rack_id is not None and not req.rack_id:
        return "RackId can't be empty."
    if req.member_epoch == 0:
        if req.rebalance_timeout_ms == -1:
            return "RebalanceTimeoutMs must be provided in first request."
        if req.topology is None:
            return "Topology must be non-null when (re-)joining a streams group."
        if req.process_id is None:
            return "ProcessId must be provided in first request."
        if req.active_tasks is None:
            return "ActiveTasks must be empty when (re-)joining a streams group."
    elif req.member_epoch == STATIC_LEAVE_EPOCH and req.instance_id is None:
        return "InstanceId can't be null when leaving a static member."
    elif req.member_epoch < STATIC_LEAVE_EPOCH:
        return f"MemberEpoch is {req.member_epoch}, but must be greater than or equal to -2."
    return None


def snapshot(group: StreamsGroup) -> dict[bytes, bytes]:
    """Every record of the group as it is now: key -> value (Kafka 4.4's types 17, 19-23)."""
    gid = group.group_id
    out = {srec.encode_key(srec.METADATA, gid): srec.metadata_value(group.group_epoch),
           srec.encode_key(srec.TARGET_METADATA, gid): srec.target_metadata_value(group.assignment_epoch)}
    if group.topology is not None:
        out[srec.encode_key(srec.TOPOLOGY, gid)] = srec.topology_value(group.topology)
    for mid, m in group.members.items():
        out[srec.encode_key(srec.MEMBER_METADATA, gid, mid)] = srec.member_value(
            m.instance_id, m.rack_id, m.client_id, m.client_host, m.rebalance_timeout_ms, m.topology_epoch,
            m.process_id, m.user_endpoint, m.client_tags)
        out[srec.encode_key(srec.TARGET_MEMBER, gid, mid)] = srec.target_member_value(
            group.targets.get(mid, EMPTY), group.standby_targets.get(mid, EMPTY))
        out[srec.encode_key(srec.CURRENT_ASSIGNMENT, gid, mid)] = srec.current_value(
            m.member_epoch, m.previous_epoch, int(m.state), m.assigned, m.revoking, m.standby)
    return out


def restored(group_id: str, values: dict[bytes, bytes]) -> StreamsGroup:
    """The group its records describe (the inverse of `snapshot`)."""
    group = StreamsGroup(group_id, written=dict(values))
    for key, value in values.items():
        kind, _, member_id = srec.decode_key(key)
        if kind == srec.METADATA:
            group.group_epoch = srec.read_epoch(value)
        elif kind == srec.TARGET_METADATA:
            group.assignment_epoch = srec.read_epoch(value)
        elif kind == srec.TOPOLOGY:
            group.topology = srec.read_topology(value)
        elif kind == srec.TARGET_MEMBER:
            group.targets[member_id or ""], group.standby_targets[member_id or ""] = srec.read_target_member(value)
        else:
            m = group.members.setdefault(member_id or "", StreamsMember(member_id or ""))
            if kind == srec.MEMBER_METADATA:
                for name, v in srec.read_member(value).items():
                    setattr(m, name, v)
            else:
                epoch, previous, state, m.assigned, m.revoking, m.standby = srec.read_current(value)
                m.member_epoch, m.previous_epoch = epoch, previous
                m.state = MemberState(state) if state in (0, 1, 2) else MemberState.STABLE
                m.sent, m.sent_standby = m.assigned, m.standby
    return group

