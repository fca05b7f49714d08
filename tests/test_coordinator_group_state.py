"""kop/coordinator/group_state.py: the classic group state machine, driven without sockets or a loop.

Each test feeds the machine requests and a fake clock (ms) the way the async coordinator does - tokens
for the requests that wait, `expire_timers` at each deadline in turn, every write acknowledged (or failed)
in order - and reads its answers and the records it asks to write. The expected error codes are Apache
Kafka 4.x's for the same sequence of requests (its GroupMetadataManager's classic-group rules), so a
client sees here what it would see there.
"""

from __future__ import annotations

import struct
from collections.abc import Hashable
from typing import Any

import pytest

from kop.config import BrokerConfig
from kop.coordinator import records as rec
from kop.coordinator.group import ClassicGroup, GroupState
from kop.coordinator.group_state import (
    NEW_MEMBER_JOIN_TIMEOUT_MS,
    Answer,
    GroupStateMachine,
    JoinRequest,
    JoinResult,
    SyncResult,
    Write,
)
from kop.protocol.errors import ErrorCode as E

GROUP = "g"
SESSION_MS = 10_000
REBALANCE_MS = 30_000


def subscription(*topics: str) -> bytes:
    """A ConsumerProtocolSubscription v0 (the prefix every version shares): the topics, no user data."""
    body = struct.pack(">hi", 0, len(topics))
    for t in topics:
        body += struct.pack(">h", len(t)) + t.encode()
    return body + struct.pack(">i", -1)


class Driver:
    """The async coordinator's part, without asyncio: a clock, tokens, answers, writes."""

    def __init__(self, **config: Any) -> None:
        config.setdefault("groupInitialRebalanceDelayMs", 0)
        self.now = 1_000_000
        self.machine = GroupStateMachine(BrokerConfig(**config))
        self.answers: dict[Hashable, JoinResult | SyncResult] = {}
        self.repeated: list[Answer] = []  # answers to tokens already answered (dropped by the real shell)
        self.writes: list[Write] = []  # every write asked for, in order
        self.pending: list[Write] = []  # writes not yet acknowledged (when held)
        self.hold_writes = False
        self._tokens = 0

    # ------------------------------------------------------------------ the shell's loop
    def pump(self) -> None:
        for effect in self.machine.take_effects():
            if isinstance(effect, Answer):
                if effect.token in self.answers:
                    self.repeated.append(effect)
                else:
                    self.answers[effect.token] = effect.result
            else:
                self.writes.append(effect)
                self.pending.append(effect)
        if not self.hold_writes:
            self.ack()

    def ack(self, error: int = 0) -> None:
        """Report the outcome of every pending write (in order), and what follows from it."""
        while self.pending:
            w = self.pending.pop(0)
            self.machine.write_done(w.write_id, error, self.now)
            self.pump()

    def advance(self, ms: int) -> None:
        """Let `ms` pass, firing each timer at its own deadline as the loop would wake for it."""
        target = self.now + ms
        while (deadline := self.machine.next_deadline()) is not None and deadline <= target:
            self.now = max(self.now, deadline)
            self.machine.expire_timers(self.now)
            self.pump()
        self.now = target

    # ------------------------------------------------------------------ requests
    def token(self, kind: str) -> str:
        self._tokens += 1
        return f"{kind}-{self._tokens}"

    def join(self, member_id: str = "", *, instance: str | None = None, topics: tuple[str, ...] = ("t",),
             protocols: list[tuple[str, bytes]] | None = None, version: int = 9, client: str = "client",
             session_ms: int = SESSION_MS, rebalance_ms: int = REBALANCE_MS, group: str = GROUP) -> str:
        token = self.token("join")
        req = JoinRequest(group, member_id, instance, "consumer",
                          protocols if protocols is not None else [("range", subscription(*topics))],
                          session_ms, rebalance_ms, client, "/127.0.0.1", version)
        self.machine.join(req, token, self.now)
        self.pump()
        return token

    def sync(self, member_id: str, generation: int, assignments: dict[str, bytes] | None = None, *,
             instance: str | None = None) -> str:
        token = self.token("sync")
        self.machine.sync(GROUP, generation, member_id, instance, "consumer", "range",
                          list((assignments or {}).items()), token, self.now)
        self.pump()
        return token

    def heartbeat(self, member_id: str, generation: int, instance: str | None = None) -> int:
        error = self.machine.heartbeat(GROUP, generation, member_id, instance, self.now)
        self.pump()
        return error

    def leave(self, *members: tuple[str, str | None]) -> tuple[int, list[tuple[str, str | None, int]]]:
        result = self.machine.leave(GROUP, [(m, i, None) for m, i in members], self.now)
        self.pump()
        return result

    # ------------------------------------------------------------------ reading answers
    def join_answer(self, token: str) -> JoinResult:
        result = self.answers[token]
        assert isinstance(result, JoinResult)
        return result

    def sync_answer(self, token: str) -> SyncResult:
        result = self.answers[token]
        assert isinstance(result, SyncResult)
        return result

    @property
    def group(self) -> Any:
        return self.machine.groups[GROUP]

    def member(self, **join: Any) -> tuple[str, int]:
        """A new member, admitted in two steps as KIP-394 asks; its first generation's JoinGroup answered
        (the group's other members must rejoin meanwhile for that). Returns (member id, generation)."""
        first = self.join_answer(self.join(**join))
        assert first.error == E.MEMBER_ID_REQUIRED
        token = self.join(first.member_id, **join)
        self.advance(0)
        answer = self.join_answer(token)
        assert answer.error == 0, answer
        return answer.member_id, answer.generation_id

    def stable(self, *instances: str | None) -> tuple[list[str], int]:
        """A Stable group of one member per entry (None: dynamic), joined together in one generation."""
        tokens = []
        for i in instances:
            token = self.join(instance=i)
            if i is None:  # KIP-394 applies to dynamic members only: a static one is admitted at once
                first = self.join_answer(token)
                assert first.error == E.MEMBER_ID_REQUIRED
                token = self.join(first.member_id)
            tokens.append(token)
        self.advance(0)
        answers = [self.join_answer(t) for t in tokens]
        assert all(a.error == 0 for a in answers), answers
        generation = answers[0].generation_id
        members = [a.member_id for a in answers]
        leader = answers[0].leader
        syncs = [self.sync(m, generation, {x: x.encode() for x in members} if m == leader else None,
                           instance=i) for m, i in zip(members, instances, strict=True)]
        assert [self.sync_answer(s).error for s in syncs] == [0] * len(syncs)
        assert self.group.state == GroupState.STABLE
        return members, generation


# ====================================================================== JoinGroup / SyncGroup
def test_one_member_joins_syncs_and_heartbeats() -> None:
    d = Driver()
    first = d.join_answer(d.join(client="app"))
    assert first.error == E.MEMBER_ID_REQUIRED and first.member_id.startswith("app-")
    assert GROUP in d.machine.groups and not d.group.members  # KIP-394: not a member yet
    token = d.join(first.member_id)
    assert token not in d.answers  # parked until the initial rebalance delay has passed
    d.advance(0)
    join = d.join_answer(token)
    assert (join.error, join.generation_id, join.leader, join.member_id) == (0, 1, first.member_id, first.member_id)
    assert [m[0] for m in join.members] == [first.member_id]  # the leader gets the member list
    assert d.group.state == GroupState.COMPLETING_REBALANCE

    sync = d.sync(join.member_id, 1, {join.member_id: b"assignment"})
    assert d.sync_answer(sync) == SyncResult(0, "consumer", "range", b"assignment")
    assert d.group.state == GroupState.STABLE
    assert d.heartbeat(join.member_id, 1) == 0

    # The group's records: an empty one when it was created, then the generation with its assignment.
    keys = [rec.decode_key(k) for w in d.writes for k, _ in w.records]
    assert keys == [rec.GroupMetadataKey(GROUP)] * 2
    value = rec.decode_group_metadata_value(d.writes[-1].records[0][1])
    assert (value.generation, value.protocol, value.leader) == (1, "range", join.member_id)
    assert [(m.member_id, m.assignment) for m in value.members] == [(join.member_id, b"assignment")]


def test_sync_is_answered_only_once_the_assignment_is_durable() -> None:
    d = Driver()
    (a, b), generation = d.stable(None, None)
    ta, tb = d.join(a), d.join(b)  # the leader's JoinGroup always rebalances; b rejoins too
    new = d.join_answer(ta).generation_id
    assert new == d.join_answer(tb).generation_id == generation + 1
    d.hold_writes = True
    sync_b = d.sync(b, new)
    sync_a = d.sync(a, new, {a: b"A", b: b"B"})
    assert sync_a not in d.answers and sync_b not in d.answers and d.pending
    d.ack()
    assert d.sync_answer(sync_a).assignment == b"A" and d.sync_answer(sync_b).assignment == b"B"


def test_join_v3_joins_without_member_id_required() -> None:
    d = Driver()
    token = d.join(version=3)
    d.advance(0)
    assert d.join_answer(token).error == 0 and d.join_answer(token).generation_id == 1


def test_join_errors() -> None:
    d = Driver(groupMinSessionTimeoutMs=6000, groupMaxSessionTimeoutMs=60_000)
    assert d.join_answer(d.join(group="")).error == E.INVALID_GROUP_ID
    assert d.join_answer(d.join(session_ms=5999)).error == E.INVALID_SESSION_TIMEOUT
    assert d.join_answer(d.join(session_ms=60_001)).error == E.INVALID_SESSION_TIMEOUT
    assert d.join_answer(d.join("someone", group="other")).error == E.UNKNOWN_MEMBER_ID
    (a,), _ = d.stable(None)
    assert d.join_answer(d.join("stranger")).error == E.UNKNOWN_MEMBER_ID
    bad = d.join_answer(d.join(a, protocols=[("roundrobin", subscription("t"))]))
    assert bad.error == E.INCONSISTENT_GROUP_PROTOCOL


def test_a_pipelined_second_join_answers_the_first_with_rebalance_in_progress() -> None:
    d = Driver()
    (a, b), _ = d.stable(None, None)
    first = d.join(a)
    second = d.join(a)
    assert d.join_answer(first).error == E.REBALANCE_IN_PROGRESS
    assert second not in d.answers  # still waiting for b
    d.join(b)
    assert d.join_answer(second).error == 0


# ====================================================================== timers
def test_initial_rebalance_delay_waits_for_more_members() -> None:
    """groupInitialRebalanceDelayMs: the first generation waits; each new member extends the wait by the
    delay again, bounded by the rebalance timeout."""
    d = Driver(groupInitialRebalanceDelayMs=3000)
    ta = d.join(version=3)
    d.advance(2000)
    tb = d.join(version=3)
    d.advance(1000)  # the first delay is over, but a member came meanwhile: wait another 3000 ms
    assert ta not in d.answers and tb not in d.answers
    d.advance(2999)
    assert ta not in d.answers
    d.advance(1)
    assert d.join_answer(ta).generation_id == d.join_answer(tb).generation_id == 1
    assert len(d.join_answer(ta).members) == 2


def test_initial_rebalance_delay_is_bounded_by_the_rebalance_timeout() -> None:
    d = Driver(groupInitialRebalanceDelayMs=3000)
    first = d.join(version=3, rebalance_ms=4000)  # 3000 ms, then at most 1000 more
    for _ in range(10):
        d.advance(500)
        d.join(version=3, rebalance_ms=4000)
        if first in d.answers:
            break
    assert d.join_answer(first).error == 0
    assert d.now - 1_000_000 <= 4000


def test_session_timeout_removes_a_silent_member_and_rebalances() -> None:
    d = Driver()
    (a, b), generation = d.stable(None, None)
    d.advance(SESSION_MS - 1)
    assert d.heartbeat(b, generation) == 0  # b stays alive; a is silent
    assert d.group.state == GroupState.STABLE
    d.advance(1)
    assert d.group.state == GroupState.PREPARING_REBALANCE
    assert a not in d.group.members
    assert d.heartbeat(a, generation) == E.UNKNOWN_MEMBER_ID
    assert d.heartbeat(b, generation) == E.REBALANCE_IN_PROGRESS  # rejoin
    token = d.join(b)
    answer = d.join_answer(token)
    assert (answer.error, answer.generation_id, answer.leader) == (0, generation + 1, b)


def test_a_heartbeat_keeps_the_session() -> None:
    d = Driver()
    (a,), generation = d.stable(None)
    for _ in range(10):
        d.advance(SESSION_MS - 1)
        assert d.heartbeat(a, generation) == 0
    assert d.group.state == GroupState.STABLE


def test_rebalance_timeout_drops_members_that_do_not_rejoin() -> None:
    d = Driver()
    (a, b), generation = d.stable(None, None)
    tb = d.join(b, topics=("t", "u"))  # new metadata: a rebalance; a keeps heartbeating but never rejoins
    for _ in range(REBALANCE_MS // 5000 - 1):
        d.advance(5000)
        assert d.heartbeat(a, generation) == E.REBALANCE_IN_PROGRESS
        assert tb not in d.answers
    d.advance(5000)
    answer = d.join_answer(tb)
    assert (answer.error, answer.generation_id, answer.leader) == (0, generation + 1, b)
    assert [m[0] for m in answer.members] == [b]
    assert d.heartbeat(a, generation) == E.UNKNOWN_MEMBER_ID


def test_a_member_that_never_syncs_is_removed_after_the_rebalance_timeout() -> None:
    d = Driver()
    (a, b), generation = d.stable(None, None)
    ta, tb = d.join(a), d.join(b)
    assert d.join_answer(ta).generation_id == d.join_answer(tb).generation_id == generation + 1
    sync_a = d.sync(a, generation + 1, {a: b"A", b: b"B"})  # b heartbeats but never sends SyncGroup
    assert d.sync_answer(sync_a).error == 0
    for _ in range(REBALANCE_MS // 5000):
        assert d.heartbeat(a, generation + 1) == d.heartbeat(b, generation + 1) == 0
        d.advance(5000)
    assert b not in d.group.members and d.group.state == GroupState.PREPARING_REBALANCE
    assert d.heartbeat(a, generation + 1) == E.REBALANCE_IN_PROGRESS


def test_a_new_member_parked_too_long_is_dropped() -> None:
    """A member parked in its first JoinGroup cannot heartbeat: Kafka drops it after 5 minutes."""
    d = Driver()
    (a,), generation = d.stable(None)
    first = d.join_answer(d.join())
    token = d.join(first.member_id, session_ms=SESSION_MS, rebalance_ms=10 * NEW_MEMBER_JOIN_TIMEOUT_MS)
    while d.machine.next_deadline() is not None and token not in d.answers:
        d.advance(SESSION_MS // 2)
        d.heartbeat(a, generation)
        assert d.now - 1_000_000 < 2 * NEW_MEMBER_JOIN_TIMEOUT_MS
    assert d.join_answer(token).error == E.UNKNOWN_MEMBER_ID


# ====================================================================== KIP-394
def test_member_id_required_id_expires_when_the_client_never_rejoins() -> None:
    d = Driver()
    (a,), generation = d.stable(None)
    required = d.join_answer(d.join())
    assert required.error == E.MEMBER_ID_REQUIRED
    assert required.member_id in d.group.pending_join_members
    for _ in range(3):
        d.advance(SESSION_MS // 2)
        d.heartbeat(a, generation)
    assert required.member_id not in d.group.pending_join_members
    assert d.join_answer(d.join(required.member_id)).error == E.UNKNOWN_MEMBER_ID
    assert d.group.state == GroupState.STABLE  # the id that never joined did not disturb the group


def test_a_pending_member_may_leave() -> None:
    d = Driver()
    d.stable(None)
    required = d.join_answer(d.join())
    assert d.leave((required.member_id, None)) == (0, [(required.member_id, None, 0)])
    assert required.member_id not in d.group.pending_join_members


# ====================================================================== group.max.size
def test_group_max_size() -> None:
    d = Driver(groupMaxSize=2)
    (a, b), generation = d.stable(None, None)
    full = d.join_answer(d.join())  # checked before KIP-394's MEMBER_ID_REQUIRED, as in Kafka
    assert (full.error, full.member_id) == (E.GROUP_MAX_SIZE_REACHED, "")
    assert set(d.group.members) == {a, b} and not d.group.pending_join_members
    # The members themselves may rejoin.
    ta, tb = d.join(a), d.join(b)
    assert d.join_answer(ta).error == d.join_answer(tb).error == 0


def test_a_loaded_group_over_max_size_rebalances() -> None:
    """groupMaxSize lowered below a group's size: the loaded group rebalances, and only that many of its
    members get into the next generation."""
    d = Driver()
    (a, b, c), generation = d.stable(None, None, None)
    smaller = Driver(groupMaxSize=2)
    smaller.machine.groups[GROUP] = d.group
    smaller.machine.loaded([d.group], smaller.now)
    assert d.group.state == GroupState.PREPARING_REBALANCE
    ta, tb, tc = (smaller.join(m) for m in (a, b, c))
    assert smaller.join_answer(tc).error == E.GROUP_MAX_SIZE_REACHED
    smaller.advance(REBALANCE_MS)  # the join phase waits for c's old place until the rebalance timeout
    assert smaller.join_answer(ta).generation_id == smaller.join_answer(tb).generation_id == generation + 1
    assert set(d.group.members) == {a, b}


def _loaded_elsewhere(d: Driver, after_ms: int) -> Driver:
    """The group `d` wrote, loaded `after_ms` later by another coordinator from its last group record, as
    GroupCoordinator's replay makes it (the coordinator moved: cluster mode's bundle handoff)."""
    from kop.coordinator.coordinator import GroupCoordinator

    key, value = [r for w in d.writes for r in w.records][-1]
    assert rec.decode_key(key) == rec.GroupMetadataKey(GROUP) and value is not None
    moved = Driver()
    moved.now = d.now + after_ms
    group = GroupCoordinator._group_from_record(GROUP, rec.decode_group_metadata_value(value))
    moved.machine.groups[GROUP] = group
    moved.machine.loaded([group], moved.now)
    moved.pump()
    return moved


def test_a_group_loaded_soon_after_its_rebalance_rebalances_once() -> None:
    """Issue #24's stuck group: generation 3 was synced on one broker, whose __consumer_offsets partition
    moved to the other a second later. librdkafka's first OffsetFetch of the new assignment got
    NOT_COORDINATOR from the old coordinator, which librdkafka never retries (librdkafka#5586): both members
    heartbeated the new coordinator with no partition fetched and no commit for 120 s. The new coordinator
    cannot tell, so a group whose generation is younger than its rebalance timeout rebalances once on load:
    heartbeats say REBALANCE_IN_PROGRESS, the members rejoin and get (and fetch) their assignment again."""
    d = Driver()
    (a, b), generation = d.stable(None, None)
    moved = _loaded_elsewhere(d, after_ms=4_000)
    assert moved.group.state == GroupState.PREPARING_REBALANCE
    assert moved.heartbeat(a, generation) == moved.heartbeat(b, generation) == E.REBALANCE_IN_PROGRESS
    ta, tb = moved.join(a), moved.join(b)
    ja, jb = moved.join_answer(ta), moved.join_answer(tb)
    assert ja.error == jb.error == 0 and ja.generation_id == jb.generation_id == generation + 1
    leader = ja.leader
    syncs = [moved.sync(m, generation + 1, {x: x.encode() for x in (a, b)} if m == leader else None) for m in (a, b)]
    assert [moved.sync_answer(s).assignment for s in syncs] == [a.encode(), b.encode()]
    assert moved.group.state == GroupState.STABLE


def test_a_group_loaded_long_after_its_rebalance_keeps_its_generation() -> None:
    """Past the rebalance timeout no member can still be between its SyncGroup and its first OffsetFetch:
    the loaded group stays Stable in its generation, as in Kafka, and its members heartbeat on."""
    d = Driver()
    (a, b), generation = d.stable(None, None)
    moved = _loaded_elsewhere(d, after_ms=REBALANCE_MS + 1)
    assert moved.group.state == GroupState.STABLE
    assert moved.heartbeat(a, generation) == moved.heartbeat(b, generation) == 0
    assert moved.sync_answer(moved.sync(b, generation)).assignment == b.encode()


# ====================================================================== generation fencing
def test_requests_of_an_old_generation_are_fenced() -> None:
    d = Driver()
    (a, b), generation = d.stable(None, None)
    ta, tb = d.join(a), d.join(b)
    new = d.join_answer(ta).generation_id
    assert new == generation + 1 and d.join_answer(tb).error == 0
    assert d.heartbeat(a, generation) == E.ILLEGAL_GENERATION
    assert d.sync_answer(d.sync(b, generation)).error == E.ILLEGAL_GENERATION
    assert d.machine.validate_offset_commit(d.group, b, None, generation, d.now) == E.ILLEGAL_GENERATION
    # The new generation has its JoinGroup answers but no assignment yet: commits wait (Kafka 4.x).
    assert d.machine.validate_offset_commit(d.group, b, None, new, d.now) == E.REBALANCE_IN_PROGRESS
    d.sync(a, new, {a: b"", b: b""})
    assert d.machine.validate_offset_commit(d.group, b, None, new, d.now) == 0
    assert d.machine.validate_offset_commit(d.group, "", None, -1, d.now) == E.UNKNOWN_MEMBER_ID  # not Empty


def test_offset_commits_outside_group_management_need_an_empty_group() -> None:
    d = Driver()
    d.machine.groups[GROUP] = group = ClassicGroup(GROUP)  # as a commit outside group management makes it
    assert d.machine.validate_offset_commit(group, "", None, -1, d.now) == 0
    assert d.machine.validate_offset_commit(group, "m", None, 1, d.now) == E.UNKNOWN_MEMBER_ID


def test_sync_errors() -> None:
    d = Driver()
    (a, b), generation = d.stable(None, None)
    assert d.sync_answer(d.sync("stranger", generation)).error == E.UNKNOWN_MEMBER_ID
    token = d.token("sync")
    d.machine.sync(GROUP, generation, a, None, "other", None, [], token, d.now)
    d.pump()
    assert d.sync_answer(token).error == E.INCONSISTENT_GROUP_PROTOCOL
    d.join(a)  # PreparingRebalance: a SyncGroup of the old generation's members must rejoin first
    assert d.sync_answer(d.sync(b, generation)).error == E.REBALANCE_IN_PROGRESS
    token = d.token("sync")
    d.machine.sync("", 1, a, None, None, None, [], token, d.now)
    d.pump()
    assert d.sync_answer(token).error == E.INVALID_GROUP_ID


# ====================================================================== LeaveGroup
def test_leave_rebalances_the_others() -> None:
    d = Driver()
    (a, b), generation = d.stable(None, None)
    assert d.leave((a, None), ("stranger", None)) == (0, [(a, None, 0), ("stranger", None, E.UNKNOWN_MEMBER_ID)])
    assert d.group.state == GroupState.PREPARING_REBALANCE
    tb = d.join(b)
    assert d.join_answer(tb).generation_id == generation + 1 and d.join_answer(tb).leader == b
    assert d.leave((b, None))[1] == [(b, None, 0)]
    assert d.group.state == GroupState.EMPTY and d.group.generation_id == generation + 2
    # The emptied group's record: no members.
    assert rec.decode_group_metadata_value(d.writes[-1].records[0][1]).members == []


def test_leave_of_a_parked_member_answers_its_join() -> None:
    d = Driver()
    (a, b), _ = d.stable(None, None)
    ta = d.join(a)  # parked, waiting for b
    d.leave((a, None))
    assert d.join_answer(ta).error == E.UNKNOWN_MEMBER_ID


def test_leave_of_an_unknown_group() -> None:
    d = Driver()
    assert d.leave(("m", None), ("", "i")) == (0, [("m", None, E.UNKNOWN_MEMBER_ID), ("", "i", E.UNKNOWN_MEMBER_ID)])
    assert d.machine.leave("", [("m", None, None)], d.now) == (E.INVALID_GROUP_ID, [])


# ====================================================================== KIP-345 static membership
def test_a_restarted_static_member_takes_its_place_without_a_rebalance() -> None:
    d = Driver()
    (a, b), generation = d.stable("i-a", "i-b")
    writes = len(d.writes)
    token = d.join(instance="i-a")  # a restarted: no member id, same group.instance.id, same protocols
    answer = d.join_answer(token)
    assert answer.error == 0 and answer.member_id != a and answer.member_id.startswith("i-a-")
    assert answer.generation_id == generation and d.group.state == GroupState.STABLE
    assert len(d.writes) == writes + 1  # the new member id is written before the answer
    new = answer.member_id
    # The old member id is fenced everywhere.
    assert d.heartbeat(a, generation, "i-a") == E.FENCED_INSTANCE_ID
    assert d.sync_answer(d.sync(a, generation, instance="i-a")).error == E.FENCED_INSTANCE_ID
    assert d.join_answer(d.join(a, instance="i-a")).error == E.FENCED_INSTANCE_ID
    assert d.machine.validate_offset_commit(d.group, a, "i-a", generation, d.now) == E.FENCED_INSTANCE_ID
    assert d.leave((a, "i-a"))[1] == [(a, "i-a", E.FENCED_INSTANCE_ID)]
    # The new one keeps the old assignment.
    assert d.sync_answer(d.sync(new, generation, instance="i-a")).assignment == a.encode()
    assert d.heartbeat(new, generation, "i-a") == 0 and d.heartbeat(b, generation, "i-b") == 0


def test_a_static_member_leader_rejoining_v9_is_told_to_skip_the_assignment() -> None:
    d = Driver()
    (a, b), generation = d.stable("i-a", "i-b")
    assert d.group.leader_id == a
    answer = d.join_answer(d.join(instance="i-a", version=9))
    assert answer.skip_assignment and answer.leader == answer.member_id and len(answer.members) == 2
    old_client = Driver()
    (x, _), _ = old_client.stable("i-x", "i-y")
    answer = old_client.join_answer(old_client.join(instance="i-x", version=8))
    assert not answer.skip_assignment and answer.leader == x and answer.members == []  # the old leader id


def test_a_failed_write_of_a_replaced_static_member_restores_the_old_id() -> None:
    d = Driver()
    (a, b), generation = d.stable("i-a", "i-b")
    d.hold_writes = True
    token = d.join(instance="i-a")
    assert token not in d.answers
    d.ack(E.NOT_COORDINATOR)
    assert d.join_answer(token).error == E.NOT_COORDINATOR and d.join_answer(token).member_id == ""
    assert d.heartbeat(a, generation, "i-a") == 0  # the old id is the member again


def test_a_static_member_rejoining_with_another_protocol_choice_rebalances() -> None:
    """KIP-345 skips the rebalance only while the selected protocol stays the same (Kafka compares the
    protocol the group would select next with the current one)."""
    d = Driver()
    both = [("range", subscription("t")), ("roundrobin", subscription("t"))]
    token = d.join(instance="i-a", protocols=both)
    d.advance(0)
    a, generation = d.join_answer(token).member_id, d.join_answer(token).generation_id
    d.sync(a, generation, {a: b"A"}, instance="i-a")
    assert d.group.protocol_name == "range"
    same = d.join_answer(d.join(instance="i-a", protocols=both))
    assert (same.error, same.generation_id) == (0, generation)  # no rebalance
    moved = d.join_answer(d.join(instance="i-a", protocols=both[::-1]))
    assert (moved.error, moved.generation_id, moved.protocol_name) == (0, generation + 1, "roundrobin")


def test_a_static_member_that_does_not_rejoin_keeps_its_place_in_a_rebalance() -> None:
    """Static members are not dropped when the join phase ends without them (only dynamic ones are): they
    stay members until their sessions expire."""
    d = Driver()
    (a, b), generation = d.stable("i-a", "i-b")
    ta = d.join(a, instance="i-a")  # the leader rejoins: a rebalance; b heartbeats but does not rejoin
    for _ in range(REBALANCE_MS // 5000):
        d.advance(5000)
        assert d.heartbeat(b, generation, "i-b") in (E.REBALANCE_IN_PROGRESS, E.ILLEGAL_GENERATION)
    answer = d.join_answer(ta)
    assert answer.generation_id == generation + 1 and {m[0] for m in answer.members} == {a, b}
    assert d.heartbeat(b, generation, "i-b") == E.ILLEGAL_GENERATION  # b must rejoin
    d.advance(SESSION_MS)
    assert b not in d.group.members


def test_a_static_member_is_removed_by_its_instance_id() -> None:
    d = Driver()
    (a, b), _ = d.stable("i-a", "i-b")
    assert d.leave(("", "i-a"), ("", "i-z")) == (0, [("", "i-a", 0), ("", "i-z", E.UNKNOWN_MEMBER_ID)])
    assert a not in d.group.members and "i-a" not in d.group.static_members


def test_a_static_member_fences_its_old_id_parked_in_a_rebalance() -> None:
    d = Driver()
    (a, b), _ = d.stable("i-a", "i-b")
    ta = d.join(a, instance="i-a")  # parked: b has not rejoined
    fresh = d.join(instance="i-a")  # a restarted while its old JoinGroup waits
    assert d.join_answer(ta).error == E.FENCED_INSTANCE_ID
    d.join(b, instance="i-b")
    assert d.join_answer(fresh).error == 0 and d.join_answer(fresh).member_id != a


# ====================================================================== writes and moves
def test_a_failed_assignment_write_makes_the_members_rejoin() -> None:
    d = Driver()
    (a, b), generation = d.stable(None, None)
    ta, tb = d.join(a), d.join(b)
    new = d.join_answer(ta).generation_id
    assert d.join_answer(tb).generation_id == new
    d.hold_writes = True
    sb = d.sync(b, new)
    sa = d.sync(a, new, {a: b"A", b: b"B"})
    d.ack(E.NOT_COORDINATOR)
    assert d.sync_answer(sa).error == d.sync_answer(sb).error == E.NOT_COORDINATOR
    assert d.group.state == GroupState.PREPARING_REBALANCE


def test_a_failed_write_of_a_new_group_answers_its_first_member() -> None:
    d = Driver()
    d.hold_writes = True
    token = d.join(version=3)
    d.ack(E.NOT_COORDINATOR)
    assert d.join_answer(token).error == E.NOT_COORDINATOR


def test_dropped_groups_answer_not_coordinator_and_forget_their_timers() -> None:
    d = Driver()
    (a, b), _ = d.stable(None, None)
    ta = d.join(a)
    d.machine.drop_groups([GROUP])
    d.pump()
    assert d.join_answer(ta).error == E.NOT_COORDINATOR
    assert GROUP not in d.machine.groups and d.machine.next_deadline() is None


def test_shutdown_answers_parked_requests() -> None:
    d = Driver()
    (a, b), _ = d.stable(None, None)
    ta = d.join(a)
    d.machine.shutdown()
    d.pump()
    assert d.join_answer(ta).error == E.NOT_COORDINATOR and d.machine.next_deadline() is None


def test_a_removed_group_makes_parked_members_rejoin() -> None:
    d = Driver()
    (a, b), _ = d.stable(None, None)
    ta = d.join(a)
    group = d.group
    d.machine.remove_group(GROUP)
    d.pump()
    assert d.join_answer(ta).error == E.UNKNOWN_MEMBER_ID and group.state == GroupState.DEAD


@pytest.mark.parametrize("code,value", [
    (E.REBALANCE_IN_PROGRESS, 27), (E.ILLEGAL_GENERATION, 22), (E.UNKNOWN_MEMBER_ID, 25),
    (E.MEMBER_ID_REQUIRED, 79), (E.GROUP_MAX_SIZE_REACHED, 81), (E.FENCED_INSTANCE_ID, 82),
    (E.INVALID_SESSION_TIMEOUT, 26), (E.INCONSISTENT_GROUP_PROTOCOL, 23),
])
def test_error_codes_are_kafkas(code: int, value: int) -> None:
    assert code == value
