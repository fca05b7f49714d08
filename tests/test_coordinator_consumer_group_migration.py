"""KIP-848's online migration between the classic and the consumer protocol (kop/coordinator/consumer_group.py
with kop/coordinator/group_state.py), driven without sockets or a loop.

A "rolling switch" done by hand: classic members form a group, a ConsumerGroupHeartbeat upgrades it and
the classic members are served inside the consumer group (JoinGroup answered at once with their member
epoch, SyncGroup with the server-side assignor's partitions, REBALANCE_IN_PROGRESS when they must rejoin);
the last consumer-protocol member leaving turns the group classic again and it rebalances. At every step no
partition is held by two members. The error codes, epochs and record order are Apache Kafka 4.x's
(GroupMetadataManager convertToConsumerGroup / classicGroup*ToConsumerGroup / convertToClassicGroup).
"""

from __future__ import annotations

from collections.abc import Hashable
from typing import Any

import pytest

from kop.config import BrokerConfig
from kop.coordinator import consumer_protocol as cproto
from kop.coordinator import consumer_records as crec
from kop.coordinator import records as rec
from kop.coordinator.consumer_group import (
    ConsumerGroupMachine,
    ConsumerGroupReplayer,
    HeartbeatAnswer,
    HeartbeatRequest,
    HeartbeatResult,
    MemberState,
)
from kop.coordinator.group import GroupState
from kop.coordinator.group_state import Answer, GroupStateMachine, JoinRequest, JoinResult, SyncResult, Write
from kop.protocol.errors import ErrorCode as E

GROUP = "g"
FOO = b"\x01" * 16
PARTS = 6
SESSION_MS = 10_000
REBALANCE_MS = 30_000


def subscription(owned: list[int] | None = None, version: int = 1, topics: tuple[str, ...] = ("foo",)) -> bytes:
    return cproto.serialize_subscription(cproto.Subscription(version, topics, None, {"foo": frozenset(owned or [])}))


class Driver:
    """The coordinator shell's part for both machines: a clock, the topics, tokens, answers, writes."""

    def __init__(self, **config: Any) -> None:
        config.setdefault("groupInitialRebalanceDelayMs", 0)
        config.setdefault("groupConsumerSessionTimeoutMs", 45_000)
        self.now = 1_000_000
        self.topics = {"foo": (FOO, PARTS)}
        self.config = BrokerConfig(**config)
        self.classic = GroupStateMachine(self.config)
        self.consumer = ConsumerGroupMachine(self.config, lambda: self.topics, self.classic)
        self.answers: dict[Hashable, Any] = {}
        self.writes: list[Write] = []
        self._tokens = 0

    def pump(self) -> None:
        moved = True
        while moved:
            moved = False
            for machine in (self.consumer, self.classic):
                for effect in machine.take_effects():
                    moved = True
                    if isinstance(effect, (Answer, HeartbeatAnswer)):
                        self.answers.setdefault(effect.token, effect.result)
                    else:
                        self.writes.append(effect)
                        machine.write_done(effect.write_id, 0, self.now)

    def advance(self, ms: int) -> None:
        end = self.now + ms
        while True:
            deadlines = [d for d in (self.classic.next_deadline(), self.consumer.next_deadline()) if d is not None]
            if not deadlines or min(deadlines) > end:
                break
            self.now = max(self.now, min(deadlines))
            self.classic.expire_timers(self.now)
            self.consumer.expire_timers(self.now)
            self.pump()
        self.now = end

    def token(self) -> int:
        self._tokens += 1
        return self._tokens

    # ------------------------------------------------------------------ classic requests
    def join(self, member_id: str = "", owned: list[int] | None = None, protocols: list[tuple[str, bytes]] | None = None,
             protocol_type: str = "consumer", instance: str | None = None) -> JoinResult:
        t = self.token()
        req = JoinRequest(GROUP, member_id, instance, protocol_type,
                          protocols if protocols is not None else [("range", subscription(owned))], SESSION_MS,
                          REBALANCE_MS, "classic-client", "/127.0.0.1", 9)
        if GROUP in self.consumer.groups and self.consumer.groups[GROUP].members:
            self.consumer.classic_join(req, t, self.now)
        else:
            self.classic.join(req, t, self.now)
        self.pump()
        if t not in self.answers:
            self.advance(0)  # a new classic group's initial rebalance delay (0 here) ends
        return self.answers.get(t)

    def sync(self, member_id: str, generation: int, assignments: dict[str, bytes] | None = None,
             protocol_name: str = "range") -> SyncResult | None:
        t = self.token()
        if GROUP in self.consumer.groups:
            self.consumer.classic_sync(GROUP, generation, member_id, None, "consumer", protocol_name, t, self.now)
        else:
            self.classic.sync(GROUP, generation, member_id, None, "consumer", protocol_name,
                              list((assignments or {}).items()), t, self.now)
        self.pump()
        return self.answers.get(t)

    def heartbeat(self, member_id: str, generation: int) -> int:
        if GROUP in self.consumer.groups:
            error = self.consumer.classic_heartbeat(GROUP, generation, member_id, None, self.now)
        else:
            error = self.classic.heartbeat(GROUP, generation, member_id, None, self.now)
        self.pump()
        return error

    def leave(self, member_id: str) -> tuple[int, list[tuple[str, str | None, int]]]:
        if GROUP in self.consumer.groups:
            out = self.consumer.classic_leave(GROUP, [(member_id, None, None)], self.now)
        else:
            out = self.classic.leave(GROUP, [(member_id, None, None)], self.now)
        self.pump()
        return out

    def classic_member(self, owned: list[int] | None = None) -> tuple[str, int]:
        """A member admitted in two steps (KIP-394) to the group, whatever kind it is now."""
        first = self.join()
        assert first.error == E.MEMBER_ID_REQUIRED, first
        j = self.join(first.member_id, owned)
        if j is None:
            return first.member_id, -1  # parked in a classic rebalance
        assert j.error == 0, j
        return j.member_id, j.generation_id

    # ------------------------------------------------------------------ consumer-protocol requests
    def hb(self, member_id: str, epoch: int, owned: list[int] | None = None, **fields: Any) -> HeartbeatResult:
        t = self.token()
        req = HeartbeatRequest(GROUP, member_id, epoch,
                               topic_partitions=None if owned is None else {FOO: frozenset(owned)}, **fields)
        self.consumer.heartbeat(req, t, self.now)
        self.pump()
        return self.answers[t]

    def cghb_join(self, member_id: str) -> HeartbeatResult:
        return self.hb(member_id, 0, [], rebalance_timeout_ms=REBALANCE_MS, subscribed_topic_names=["foo"])

    @property
    def group(self) -> Any:
        return self.consumer.groups[GROUP]


def assigned(sync: SyncResult) -> list[int]:
    return sorted(cproto.parse_assignment(sync.assignment).partitions.get("foo", ()))


def range_assignment(*members: str) -> dict[str, bytes]:
    """What a classic leader's range assignor gives: contiguous ranges of foo."""
    n = len(members)
    out, start = {}, 0
    for i, m in enumerate(members):
        size = PARTS // n + (1 if i < PARTS % n else 0)
        out[m] = cproto.serialize_assignment({"foo": frozenset(range(start, start + size))}, 1)
        start += size
    return out


def stable_classic_group(d: Driver) -> tuple[str, str, int]:
    """Two classic members, Stable at generation g with three partitions each. Returns (a, b, g)."""
    a, gen = d.classic_member()
    assert gen == 1
    first = d.join()
    b = first.member_id
    tb = d.token()
    d.classic.join(JoinRequest(GROUP, b, None, "consumer", [("range", subscription())], SESSION_MS, REBALANCE_MS,
                               "classic-client", "/127.0.0.1", 9), tb, d.now)
    d.pump()
    ja = d.join(a)  # the leader rejoins: generation 2 completes
    jb = d.answers[tb]
    assert ja.error == jb.error == 0 and ja.generation_id == jb.generation_id == 2
    sa = d.sync(a, 2, range_assignment(a, b))
    sb = d.sync(b, 2)
    assert assigned(sa) == [0, 1, 2] and assigned(sb) == [3, 4, 5]
    assert d.classic.groups[GROUP].is_in(GroupState.STABLE)
    return a, b, 2


def owners_are_exclusive(d: Driver) -> None:
    held: list[int] = []
    for m in d.group.members.values():
        for parts in (m.assigned, m.pending_revocation):
            held += list(parts.get(FOO, ()))
    assert len(held) == len(set(held)), held


def record_types(write: Write) -> list[tuple[int, bool]]:
    return [(rec._Reader(k, 0, False).int16(), v is None) for k, v in write.records]


# ---------------------------------------------------------------------------------------- upgrade


def test_a_consumer_protocol_member_upgrades_a_live_classic_group() -> None:
    d = Driver()
    a, b, gen = stable_classic_group(d)
    before = len(d.writes)
    c = d.cghb_join("c")
    assert c.error == 0 and c.member_epoch == gen + 1
    assert GROUP not in d.classic.groups and GROUP in d.consumer.groups
    # Kafka's records: the classic group's tombstone, then the converted group, then the joining member's.
    types = record_types(d.writes[before])
    assert types[:10] == [(2, True), (5, False), (5, False), (4, False), (3, False), (7, False), (7, False),
                          (6, False), (8, False), (8, False)]
    g = d.group
    assert g.members[a].classic is not None and g.members[a].classic.session_timeout_ms == SESSION_MS
    assert g.members[a].member_epoch == gen and g.members[a].assigned == {FOO: frozenset({0, 1, 2})}
    assert c.assignment == {}  # every partition is still held by the classic members
    owners_are_exclusive(d)

    # The classic members learn of the new epoch from their heartbeats and rejoin; an eager (range) member
    # gave up its partitions before rejoining (it reports owning none).
    assert d.heartbeat(a, gen) == E.REBALANCE_IN_PROGRESS
    ja = d.join(a, owned=[])
    assert ja.error == 0 and ja.generation_id == gen + 1 and ja.protocol_name == "range" and ja.leader == ""
    assert ja.members == []
    sa = d.sync(a, gen + 1)
    assert sa.error == 0 and len(assigned(sa)) == 2
    owners_are_exclusive(d)
    assert d.heartbeat(b, gen) == E.REBALANCE_IN_PROGRESS
    jb = d.join(b, owned=[])
    sb = d.sync(b, jb.generation_id)
    assert len(assigned(sb)) == 2
    # The consumer-protocol member picks up what the classic members released.
    c2 = d.hb("c", c.member_epoch, [])
    assert c2.error == 0 and len(c2.assignment[FOO]) == 2
    all_parts = set(assigned(sa)) | set(assigned(sb)) | set(c2.assignment[FOO])
    assert all_parts == set(range(PARTS))
    owners_are_exclusive(d)
    assert d.heartbeat(a, ja.generation_id) == 0 and d.heartbeat(b, jb.generation_id) == 0
    assert d.hb("c", c2.member_epoch, sorted(c2.assignment[FOO])).error == 0
    assert d.group.state == "Stable"


def test_upgrade_answers_parked_classic_requests_with_rebalance_in_progress() -> None:
    d = Driver()
    a, b, gen = stable_classic_group(d)
    t = d.token()
    d.classic.join(JoinRequest(GROUP, a, None, "consumer", [("range", subscription())], SESSION_MS, REBALANCE_MS,
                               "classic-client", "/127.0.0.1", 9), t, d.now)
    d.pump()
    assert t not in d.answers  # parked: b has not rejoined
    assert d.cghb_join("c").error == 0
    assert d.answers[t].error == E.REBALANCE_IN_PROGRESS


@pytest.mark.parametrize("policy", ["disabled", "downgrade"])
def test_upgrade_refused_by_the_policy(policy: str) -> None:
    d = Driver(groupConsumerMigrationPolicy=policy)
    stable_classic_group(d)
    r = d.cghb_join("c")
    assert r.error == E.GROUP_ID_NOT_FOUND
    assert r.error_message == f"Cannot upgrade classic group {GROUP} to consumer group because online upgrade is disabled."
    assert GROUP in d.classic.groups and GROUP not in d.consumer.groups


def test_upgrade_refused_for_custom_assignor_user_data_and_other_protocol_types() -> None:
    d = Driver()
    a, gen = d.classic_member()
    with_user_data = cproto.serialize_assignment({"foo": frozenset(range(PARTS))}, 1)[:-4] + b"\x00\x00\x00\x01x"
    assert d.sync(a, gen, {a: with_user_data}).error == 0
    r = d.cghb_join("c")
    assert r.error == E.GROUP_ID_NOT_FOUND and "custom assignor" in r.error_message
    assert d.hb("c", 1).error == E.GROUP_ID_NOT_FOUND  # not a consumer group

    d2 = Driver()
    first = d2.join(protocol_type="connect", protocols=[("default", b"x")])
    j = d2.join(first.member_id, protocol_type="connect", protocols=[("default", b"x")])
    assert j.error == 0
    r = d2.cghb_join("c")
    assert r.error == E.GROUP_ID_NOT_FOUND and "does not use the consumer embedded protocol" in r.error_message


def test_a_cooperative_classic_member_revokes_before_others_get_its_partitions() -> None:
    """A classic member reporting owned partitions (cooperative) keeps those it must give up pending
    revocation: its JoinGroup answer carries only what it keeps, its heartbeat asks it to rejoin, and the
    partitions go to others only once it rejoined without them."""
    d = Driver()
    a, gen = d.classic_member()
    d.sync(a, gen, {a: cproto.serialize_assignment({"foo": frozenset(range(PARTS))}, 1)})
    c = d.cghb_join("c")
    assert c.assignment == {}
    assert d.heartbeat(a, gen) == E.REBALANCE_IN_PROGRESS
    ja = d.join(a, owned=list(range(PARTS)))
    assert ja.generation_id == gen  # still revoking: its epoch stays
    assert d.group.members[a].state == MemberState.UNREVOKED_PARTITIONS
    sa = d.sync(a, ja.generation_id)
    assert len(assigned(sa)) == 3
    assert d.hb("c", c.member_epoch, []).assignment in (None, {})  # not released yet
    assert d.heartbeat(a, gen) == E.REBALANCE_IN_PROGRESS
    ja2 = d.join(a, owned=assigned(sa))
    assert ja2.generation_id == c.member_epoch
    c2 = d.hb("c", c.member_epoch, [])
    assert sorted(c2.assignment[FOO]) == sorted(set(range(PARTS)) - set(assigned(sa)))
    owners_are_exclusive(d)


# ---------------------------------------------------------------------------------------- classic requests inside


def test_classic_requests_inside_a_consumer_group_get_kafkas_errors() -> None:
    d = Driver()
    a, b, gen = stable_classic_group(d)
    c = d.cghb_join("c")
    assert d.sync(a, gen + 5).error == E.ILLEGAL_GENERATION
    assert d.heartbeat(a, gen + 5) == E.ILLEGAL_GENERATION
    assert d.sync(a, gen).error == E.REBALANCE_IN_PROGRESS  # behind the group epoch: rejoin first
    assert d.sync(a, gen, protocol_name="roundrobin").error == E.INCONSISTENT_GROUP_PROTOCOL
    assert d.sync("c", c.member_epoch).error == E.UNKNOWN_MEMBER_ID  # uses the consumer protocol
    assert d.heartbeat("c", c.member_epoch) == E.UNKNOWN_MEMBER_ID
    assert d.heartbeat("nobody", 1) == E.UNKNOWN_MEMBER_ID
    # a protocol no classic member supports
    assert d.join(protocols=[("roundrobin", subscription())]).error == E.INCONSISTENT_GROUP_PROTOCOL
    # OffsetCommit: a classic member's generation is its member epoch
    g = d.group
    assert d.consumer.validate_offset_commit(g, a, gen, 8) == 0
    assert d.consumer.validate_offset_commit(g, a, gen + 1, 9) == E.ILLEGAL_GENERATION
    assert d.consumer.validate_offset_commit(g, "c", c.member_epoch + 1, 9) == E.STALE_MEMBER_EPOCH
    assert ConsumerGroupMachine.validate_offset_fetch(g, a, 99) == E.ILLEGAL_GENERATION


def test_a_classic_member_that_does_not_rejoin_is_fenced_after_its_rebalance_timeout() -> None:
    d = Driver()
    a, b, gen = stable_classic_group(d)
    c = d.cghb_join("c")
    assert d.heartbeat(a, gen) == E.REBALANCE_IN_PROGRESS  # arms a's join timeout
    assert d.heartbeat(b, gen) == E.REBALANCE_IN_PROGRESS
    jb = d.join(b, owned=[])  # b rejoins, a does not
    d.sync(b, jb.generation_id)
    for _ in range(REBALANCE_MS // 2000 + 1):
        d.advance(2000)
        assert d.heartbeat(b, jb.generation_id) in (0, E.REBALANCE_IN_PROGRESS)
        c = d.hb("c", c.member_epoch, sorted((c.assignment or {}).get(FOO, ())))
    assert a not in d.group.members and b in d.group.members


def test_a_new_classic_member_joins_a_consumer_group() -> None:
    d = Driver()
    c = d.cghb_join("c")
    assert c.assignment[FOO] == frozenset(range(PARTS))
    m, gen = d.classic_member()
    assert gen == c.member_epoch + 1 and d.group.members[m].classic is not None
    s = d.sync(m, gen)
    assert s.error == 0 and assigned(s) == []  # c still holds everything
    c2 = d.hb("c", c.member_epoch, sorted(c.assignment[FOO]))
    assert len(c2.assignment[FOO]) == 3  # c revokes three
    d.hb("c", c2.member_epoch, sorted(c2.assignment[FOO]))
    assert d.heartbeat(m, gen) == E.REBALANCE_IN_PROGRESS  # its partitions were released: rejoin for them
    j = d.join(m, owned=[])
    assert len(assigned(d.sync(m, j.generation_id))) == 3
    owners_are_exclusive(d)
    assert d.leave(m) == (0, [(m, None, 0)])
    assert m not in d.group.members and d.group.group_epoch == j.generation_id + 1


# ---------------------------------------------------------------------------------------- downgrade


def upgraded(d: Driver) -> tuple[str, str, HeartbeatResult]:
    a, b, gen = stable_classic_group(d)
    c = d.cghb_join("c")
    for m in (a, b):
        assert d.heartbeat(m, gen) == E.REBALANCE_IN_PROGRESS
        j = d.join(m, owned=[])
        d.sync(m, j.generation_id)
    c = d.hb("c", c.member_epoch, [])
    return a, b, c


def test_the_last_consumer_protocol_member_leaving_turns_the_group_classic() -> None:
    d = Driver()
    a, b, c = upgraded(d)
    epoch = d.group.group_epoch
    targets = {m: d.group.targets[m] for m in (a, b)}
    before = len(d.writes)
    left = d.hb("c", -1)
    assert left.error == 0 and left.member_epoch == -1
    assert GROUP not in d.consumer.groups
    classic = d.classic.groups[GROUP]
    assert classic.is_in(GroupState.PREPARING_REBALANCE) and set(classic.members) == {a, b}
    # Records: every consumer record tombstoned (group epoch last), then the classic group at the group epoch,
    # each member with its target assignment.
    write = d.writes[before]
    types = record_types(write)
    assert all(tomb for _, tomb in types[:-1]) and types[-2] == (3, True) and types[-1] == (2, False)
    value = rec.decode_group_metadata_value(write.records[-1][1])
    assert value.generation == epoch and value.protocol_type == "consumer" and value.protocol == "range"
    for m in value.members:
        got = cproto.parse_assignment(m.assignment).partitions["foo"]
        assert got == targets[m.member_id][FOO]
        assert m.session_timeout == SESSION_MS and m.rebalance_timeout == REBALANCE_MS
    # The classic rebalance: both rejoin (told by their heartbeats) and a new generation starts.
    assert d.heartbeat(a, epoch) == E.REBALANCE_IN_PROGRESS
    ta = d.token()
    d.classic.join(JoinRequest(GROUP, a, None, "consumer", [("range", subscription())], SESSION_MS, REBALANCE_MS,
                               "classic-client", "/127.0.0.1", 9), ta, d.now)
    jb = d.join(b)
    ja = d.answers[ta]
    assert ja.error == jb.error == 0 and ja.generation_id == jb.generation_id == epoch + 1
    assert {ja.leader, jb.leader} == {classic.leader_id}
    assert d.classic.groups[GROUP].is_in(GroupState.COMPLETING_REBALANCE)


def test_no_downgrade_when_the_policy_forbids_it() -> None:
    d = Driver(groupConsumerMigrationPolicy="upgrade")
    a, b, c = upgraded(d)
    assert d.hb("c", -1).error == 0
    assert GROUP in d.consumer.groups and GROUP not in d.classic.groups
    assert set(d.group.members) == {a, b}  # the classic members stay, served inside the consumer group


def test_downgrade_when_the_consumer_member_session_expires() -> None:
    d = Driver(groupConsumerSessionTimeoutMs=20_000)
    a, b, c = upgraded(d)
    gens = {m: d.group.members[m].member_epoch for m in (a, b)}
    for _ in range(11):
        d.advance(2000)
        for m in (a, b):
            d.heartbeat(m, gens[m])
    assert GROUP not in d.consumer.groups and set(d.classic.groups[GROUP].members) == {a, b}


def replayed(d: Driver) -> tuple[list[Any], rec.GroupMetadataValue | None]:
    """The consumer groups and the classic group (type 2) the writes so far replay to."""
    replayer = ConsumerGroupReplayer()
    classic = None
    for w in d.writes:
        for key, value in w.records:
            kind = rec._Reader(key, 0, False).int16()
            if kind in crec.TYPES:
                replayer.replay(crec.decode_key(key), value)
            elif kind == 2:
                classic = None if value is None else rec.decode_group_metadata_value(value)
    return replayer.result(), classic


def test_the_converted_groups_records_replay_to_the_same_group() -> None:
    d = Driver()
    a, b, c = upgraded(d)
    [group], classic = replayed(d)
    assert classic is None
    live = d.group
    assert group.group_epoch == live.group_epoch and group.assignment_epoch == live.assignment_epoch
    assert {m: (x.member_epoch, x.assigned, x.classic) for m, x in group.members.items()} == {
        m: (x.member_epoch, x.assigned, x.classic) for m, x in live.members.items()}
    # Downgraded: no consumer group is left, the classic group holds the two members.
    d.hb("c", -1)
    groups, classic = replayed(d)
    assert groups == [] and classic is not None and {m.member_id for m in classic.members} == {a, b}
    # Upgraded again: the group replays afresh from its new records (none of the old members' leftovers).
    d.cghb_join("c2")
    [group], classic = replayed(d)
    assert classic is None and set(group.members) == {a, b, "c2"} and "c" not in group.targets


def test_classic_member_metadata_round_trips_in_record_5() -> None:
    v = crec.MemberMetadataValue("i", None, "client", "/1.2.3.4", ("foo",), None, 30000, None,
                                 crec.ClassicMemberMetadata(10000, (("range", b"\x00\x01"), ("cooperative-sticky", b""))))
    raw = crec.encode_member_metadata(v)
    assert crec.decode_member_metadata(raw) == v
    plain = crec.MemberMetadataValue("i", None, "client", "/1.2.3.4", ("foo",), None, 30000, "uniform")
    assert crec.decode_member_metadata(crec.encode_member_metadata(plain)) == plain
    assert crec.encode_member_metadata(plain).endswith(b"\x01\x00\x01\x00")


def test_a_classic_static_member_replacing_the_last_consumer_member_downgrades_without_rebalance() -> None:
    d = Driver()
    c = d.hb("c", 0, [], rebalance_timeout_ms=REBALANCE_MS, subscribed_topic_names=["foo"], instance_id="i1")
    a, gen = d.classic_member()
    c = d.hb("c", c.member_epoch, sorted(c.assignment[FOO]), instance_id="i1")
    c = d.hb("c", c.member_epoch, sorted(c.assignment[FOO]), instance_id="i1")
    assert d.heartbeat(a, gen) == E.REBALANCE_IN_PROGRESS
    ja = d.join(a, owned=[])
    assert len(assigned(d.sync(a, ja.generation_id))) == 3
    kept = d.group.targets["c"]
    epoch = d.group.group_epoch
    # The consumer process restarts as a classic one with the same group.instance.id.
    j = d.join("", instance="i1")
    assert j.error == 0 and j.member_id != "c" and j.generation_id == epoch
    assert GROUP not in d.consumer.groups
    classic = d.classic.groups[GROUP]
    assert classic.is_in(GroupState.STABLE) and classic.generation_id == epoch  # same subscription: no rebalance
    assert set(classic.members) == {a, j.member_id} and classic.static_member_id("i1") == j.member_id
    s = d.sync(j.member_id, j.generation_id)
    assert s.error == 0 and assigned(s) == sorted(kept[FOO])
    assert d.heartbeat(a, ja.generation_id) == 0


def test_leave_group_to_a_consumer_group_by_instance_id_and_its_errors() -> None:
    d = Driver()
    c = d.cghb_join("c")
    first = d.join(instance="i-a")
    assert first.error == 0 and first.generation_id == c.member_epoch + 1  # static: no MEMBER_ID_REQUIRED
    a = first.member_id
    t = d.token()
    bad = JoinRequest(GROUP, "", None, "consumer", [("range", subscription())], 1, REBALANCE_MS, "x", "/h", 9)
    d.consumer.classic_join(bad, t, d.now)
    d.pump()
    assert d.answers[t].error == E.INVALID_SESSION_TIMEOUT
    out = d.consumer.classic_leave(GROUP, [("someone-else", "i-a", None), ("nobody", None, None),
                                           ("", "i-unknown", None)], d.now)
    assert out == (0, [("someone-else", "i-a", E.FENCED_INSTANCE_ID), ("nobody", None, E.UNKNOWN_MEMBER_ID),
                       ("", "i-unknown", E.UNKNOWN_MEMBER_ID)])
    assert a in d.group.members
    # An administrative removal by instance id (no member id) takes the member out; c is left.
    epoch = d.group.group_epoch
    assert d.consumer.classic_leave(GROUP, [("", "i-a", "admin")], d.now) == (0, [("", "i-a", 0)])
    d.pump()
    assert set(d.group.members) == {"c"} and d.group.group_epoch == epoch + 1
