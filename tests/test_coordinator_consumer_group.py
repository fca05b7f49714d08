"""kop/coordinator/consumer_group.py: KIP-848's consumer group protocol, driven without sockets or a loop.

Each test heartbeats the machine the way Java and librdkafka consumers with `group.protocol=consumer` do,
with a fake clock (ms) and every write acknowledged in order, and reads the answers and the records. The
expected error codes and epochs are Apache Kafka 4.x's for the same sequence (its GroupMetadataManager and
CurrentAssignmentBuilder; research/kip848.md). A new group starts at epoch 1, as Kafka 4.4's ModernGroup does,
so its first member joins at epoch 2.
"""

from __future__ import annotations

from collections.abc import Hashable
from typing import Any

from kop.config import BrokerConfig
from kop.coordinator import consumer_records as crec
from kop.coordinator import records as rec
from kop.coordinator.consumer_group import (
    ConsumerGroupMachine,
    HeartbeatAnswer,
    HeartbeatRequest,
    HeartbeatResult,
    MemberState,
)
from kop.coordinator.group import ClassicGroup, Member
from kop.coordinator.group_state import Write
from kop.protocol.errors import ErrorCode as E

GROUP = "g"
SESSION_MS = 45_000
REBALANCE_MS = 30_000
FOO, BAR = b"\x01" * 16, b"\x02" * 16


class Driver:
    """The shell's part: a clock, the broker's topics, tokens, answers, writes."""

    def __init__(self, **config: Any) -> None:
        self.now = 1_000_000
        self.topics: dict[str, tuple[bytes, int]] = {"foo": (FOO, 6)}
        self.classic: dict[str, ClassicGroup] = {}
        self.machine = ConsumerGroupMachine(BrokerConfig(**config), lambda: self.topics, self.classic)
        self.answers: dict[Hashable, HeartbeatResult] = {}
        self.writes: list[Write] = []
        self._tokens = 0

    def pump(self) -> None:
        while effects := self.machine.take_effects():
            for effect in effects:
                if isinstance(effect, HeartbeatAnswer):
                    self.answers[effect.token] = effect.result
                else:
                    self.writes.append(effect)
                    self.machine.write_done(effect.write_id, 0, self.now)

    def advance(self, ms: int) -> None:
        end = self.now + ms
        while (deadline := self.machine.next_deadline()) is not None and deadline <= end:
            self.now = max(self.now, deadline)
            self.machine.expire_timers(self.now)
            self.pump()
        self.now = end

    def hb(self, member_id: str, epoch: int, owned: dict[bytes, list[int]] | None = None, **fields: Any
           ) -> HeartbeatResult:
        self._tokens += 1
        req = HeartbeatRequest(GROUP, member_id, epoch,
                               topic_partitions=None if owned is None else {t: frozenset(p) for t, p in owned.items()},
                               **fields)
        self.machine.heartbeat(req, self._tokens, self.now)
        self.pump()
        return self.answers.pop(self._tokens)

    def join(self, member_id: str, topics: list[str] | None = None, **fields: Any) -> HeartbeatResult:
        fields.setdefault("rebalance_timeout_ms", REBALANCE_MS)
        if "subscribed_topic_regex" not in fields:
            fields.setdefault("subscribed_topic_names", ["foo"] if topics is None else topics)
        return self.hb(member_id, 0, {}, **fields)

    def settle(self, members: dict[str, HeartbeatResult]) -> dict[str, HeartbeatResult]:
        """Heartbeat every member, reporting what it was last given, until no answer changes."""
        owned = {m: r.assignment or {} for m, r in members.items()}
        last = dict(members)
        for _ in range(10):
            moved = False
            for m, r in list(last.items()):
                res = self.hb(m, r.member_epoch, {t: sorted(p) for t, p in owned[m].items()})
                assert res.error == 0, (m, res)
                if res.assignment is not None and res.assignment != owned[m]:
                    owned[m] = res.assignment
                    moved = True
                if res.member_epoch != r.member_epoch:
                    moved = True
                res.assignment = owned[m]
                last[m] = res
            if not moved:
                return last
        raise AssertionError("did not settle")

    def group(self) -> Any:
        return self.machine.groups[GROUP]

    def record_types(self, write: Write) -> list[tuple[int, bool]]:
        """(record type, tombstone?) of each record of a write."""
        out = []
        for key, value in write.records:
            kind = rec._Reader(key, 0, False).int16()
            out.append((kind, value is None))
        return out


def parts(result: HeartbeatResult) -> set[tuple[bytes, int]]:
    return {(t, p) for t, ps in (result.assignment or {}).items() for p in ps}


# ---------------------------------------------------------------------------------------- joining


def test_first_member_joins_gets_epoch_2_and_every_partition() -> None:
    d = Driver()
    r = d.join("m1")
    assert r.error == 0 and r.member_id == "m1" and r.member_epoch == 2
    assert r.heartbeat_interval_ms == 5000
    assert r.assignment == {FOO: frozenset(range(6))}
    assert d.group().state == "Stable" and d.group().group_epoch == 2
    # Kafka's record order for a join: member (5), subscription metadata (4), group epoch (3), target (7),
    # assignment epoch (6), current assignment (8).
    assert d.record_types(d.writes[-1]) == [(5, False), (4, False), (3, False), (7, False), (6, False), (8, False)]


def test_v0_join_without_member_id_gets_a_generated_one() -> None:
    d = Driver()
    r = d.join("", api_version=0)
    assert r.error == 0 and r.member_id and len(r.member_id) == 36


def test_keepalive_heartbeat_sends_no_assignment() -> None:
    d = Driver()
    r = d.join("m1")
    again = d.hb("m1", r.member_epoch)
    assert again.error == 0 and again.member_epoch == 2 and again.assignment is None


def test_second_member_revoke_before_assign() -> None:
    """m2 joins: m1 must give up half its partitions, and m2 gets them only once m1 no longer owns them."""
    d = Driver()
    m1 = d.join("m1")
    m2 = d.join("m2")
    assert m2.member_epoch == 3 and m2.assignment == {}  # its target is held by m1 still
    assert d.group().members["m2"].state == MemberState.UNRELEASED_PARTITIONS
    # m1 still reports all six: it must revoke three and stays at epoch 2 meanwhile.
    r = d.hb("m1", 2, {FOO: list(range(6))})
    assert r.member_epoch == 2 and len(parts(r)) == 3
    assert d.group().members["m1"].state == MemberState.UNREVOKED_PARTITIONS
    assert d.group().state == "Reconciling"
    kept = parts(r)
    # m2 asks again: nothing is free yet.
    assert d.hb("m2", 3, {}).assignment is None
    # m1 acknowledges: it owns only what it kept, and moves to epoch 3.
    r = d.hb("m1", 2, {FOO: sorted(p for _, p in kept)})
    assert r.error == 0 and r.member_epoch == 3
    # now the revoked three are free, and m2 gets them.
    r2 = d.hb("m2", 3, {})
    assert parts(r2) == {(FOO, p) for p in range(6)} - kept
    assert d.group().state == "Stable"
    assert m1.member_epoch == 2


def test_keepalive_counts_as_still_owning_revoked_partitions() -> None:
    d = Driver()
    d.join("m1")
    d.join("m2")
    d.hb("m1", 2, {FOO: list(range(6))})
    r = d.hb("m1", 2)  # null TopicPartitions
    assert r.member_epoch == 2 and d.group().members["m1"].state == MemberState.UNREVOKED_PARTITIONS


def test_three_members_converge_without_ever_sharing_a_partition() -> None:
    d = Driver(groupConsumerAssignors="range,uniform")
    results = {m: d.join(m) for m in ("m1", "m2", "m3")}
    final = d.settle(results)
    owned = [parts(r) for r in final.values()]
    assert sorted(len(o) for o in owned) == [2, 2, 2]
    assert set().union(*owned) == {(FOO, p) for p in range(6)}
    assert d.group().state == "Stable"


# ---------------------------------------------------------------------------------------- epochs


def test_epoch_ahead_of_the_coordinator_is_fenced() -> None:
    d = Driver()
    d.join("m1")
    assert d.hb("m1", 5).error == E.FENCED_MEMBER_EPOCH


def test_previous_epoch_is_accepted_after_a_lost_response_only_with_a_subset() -> None:
    d = Driver()
    d.join("m1")
    d.join("m2")
    r = d.hb("m1", 2, {FOO: list(range(6))})
    keep = sorted(p for _, p in parts(r))
    assert d.hb("m1", 2, {FOO: keep}).member_epoch == 3
    # The answer with epoch 3 was lost: epoch 2 again, with a subset of the assignment, is accepted...
    assert d.hb("m1", 2, {FOO: keep}).error == 0
    # ...but claiming more than it was given is not.
    assert d.hb("m1", 2, {FOO: list(range(6))}).error == E.FENCED_MEMBER_EPOCH


def test_unknown_member_and_unknown_group() -> None:
    d = Driver()
    assert d.hb("nobody", 3).error == E.GROUP_ID_NOT_FOUND
    d.join("m1")
    assert d.hb("nobody", 3).error == E.UNKNOWN_MEMBER_ID
    assert d.hb("nobody", -1).error == E.UNKNOWN_MEMBER_ID


# ---------------------------------------------------------------------------------------- bad input


def test_invalid_requests() -> None:
    d = Driver()
    assert d.hb("m1", 0, {}, subscribed_topic_names=["foo"]).error == E.INVALID_REQUEST  # no rebalance timeout
    assert d.hb("m1", 0, None, rebalance_timeout_ms=1, subscribed_topic_names=["foo"]).error == E.INVALID_REQUEST
    assert d.hb("m1", 0, {FOO: [0]}, rebalance_timeout_ms=1, subscribed_topic_names=["foo"]).error == E.INVALID_REQUEST
    assert d.hb("m1", 0, {}, rebalance_timeout_ms=1).error == E.INVALID_REQUEST  # no subscription
    assert d.hb("", 1).error == E.INVALID_REQUEST
    assert d.hb("m1", -2).error == E.INVALID_REQUEST  # static leave without instance id
    assert d.hb("m1", -3).error == E.INVALID_REQUEST
    assert d.join("m1", instance_id="").error == E.INVALID_REQUEST
    assert d.join("m1", rack_id="").error == E.INVALID_REQUEST
    assert d.join("", api_version=1).error == E.INVALID_REQUEST  # v1: the client makes the member id
    assert d.join("m1").error == 0  # and nothing above created a member
    assert list(d.group().members) == ["m1"]


def test_empty_topic_list_joins_with_nothing() -> None:
    d = Driver()
    r = d.join("m1", topics=[])
    assert r.error == 0 and r.assignment == {}


def test_unsupported_assignor() -> None:
    d = Driver()
    r = d.join("m1", server_assignor="sticky")
    assert r.error == E.UNSUPPORTED_ASSIGNOR
    assert d.join("m1", server_assignor="range").error == 0


def test_invalid_regex_is_invalid_regular_expression() -> None:
    d = Driver()
    assert d.join("m1", subscribed_topic_regex="foo(").error == E.INVALID_REGULAR_EXPRESSION
    # RE2 (like Kafka's RE2/J) has no backreferences, which Python's re would accept.
    assert d.join("m1", subscribed_topic_regex=r"(a)\1").error == E.INVALID_REGULAR_EXPRESSION


def test_heartbeat_for_a_classic_group() -> None:
    """A classic group with members is not taken over (Kafka: GROUP_ID_NOT_FOUND when it cannot be
    upgraded); an empty one is replaced by the consumer group, its record tombstoned."""
    d = Driver()
    busy = ClassicGroup(GROUP)
    busy.add(Member("c1", None, "cli", "/h", 10_000, 10_000, "consumer", [("range", b"")]), None)
    d.classic[GROUP] = busy
    assert d.join("m1").error == E.GROUP_ID_NOT_FOUND
    assert d.hb("m1", 1).error == E.GROUP_ID_NOT_FOUND
    d.classic[GROUP] = ClassicGroup(GROUP)
    assert d.join("m1").error == 0
    assert GROUP not in d.classic
    assert d.writes[-1].records[0] == (rec.group_metadata_key(GROUP), None)


def test_group_max_size() -> None:
    d = Driver(groupConsumerMaxSize=2)
    d.join("m1")
    d.join("m2")
    assert d.join("m3").error == E.GROUP_MAX_SIZE_REACHED
    assert d.hb("m1", d.group().members["m1"].member_epoch).error == 0  # members already in are fine


# ---------------------------------------------------------------------------------------- leaving


def test_leave_bumps_the_epoch_and_frees_the_partitions() -> None:
    d = Driver()
    d.settle({m: d.join(m) for m in ("m1", "m2")})
    epoch = d.group().group_epoch
    left = d.hb("m2", -1)
    assert left.error == 0 and left.member_id == "m2" and left.member_epoch == -1
    assert d.group().group_epoch == epoch + 1 and d.group().state == "Assigning"
    # Kafka's tombstone order: current assignment (8), target (7), member (5), then the epoch (3).
    assert d.record_types(d.writes[-1])[:3] == [(8, True), (7, True), (5, True)]
    r = d.hb("m1", d.group().members["m1"].member_epoch)
    assert r.assignment == {FOO: frozenset(range(6))}
    assert d.group().state == "Stable"


def test_session_timeout_fences_and_reassigns() -> None:
    d = Driver()
    final = d.settle({m: d.join(m) for m in ("m1", "m2")})
    d.advance(SESSION_MS - 1)
    d.hb("m1", final["m1"].member_epoch, {FOO: sorted(p for _, p in parts(final["m1"]))})
    d.advance(2)  # m2's session has expired, m1's has not
    assert list(d.group().members) == ["m1"]
    r = d.hb("m1", final["m1"].member_epoch)
    assert r.assignment == {FOO: frozenset(range(6))}
    assert d.hb("m2", final["m2"].member_epoch).error == E.UNKNOWN_MEMBER_ID


def test_rebalance_timeout_fences_a_member_that_does_not_revoke() -> None:
    d = Driver()
    d.join("m1", rebalance_timeout_ms=5_000)
    d.join("m2")
    d.hb("m1", 2, {FOO: list(range(6))})  # told to revoke; never does
    d.advance(4_000)
    d.hb("m1", 2, {FOO: list(range(6))})  # heartbeats keep its session, not its rebalance deadline
    d.hb("m2", 3, {})
    d.advance(1_001)
    assert "m1" not in d.group().members
    r = d.hb("m2", 3, {})
    assert r.assignment == {FOO: frozenset(range(6))}


# ---------------------------------------------------------------------------------------- static members


def test_static_member_leaves_with_minus_2_and_rejoins_without_a_rebalance() -> None:
    d = Driver()
    final = d.settle({"s1": d.join("s1", instance_id="i1"), "m2": d.join("m2")})
    epoch = d.group().group_epoch
    held = parts(final["s1"])
    away = d.hb("s1", -2, instance_id="i1")
    assert away.error == 0 and away.member_epoch == -2
    assert d.group().members["s1"].member_epoch == -2
    # While it is away its partitions stay its own: m2 gets none of them.
    assert not parts(d.hb("m2", final["m2"].member_epoch, None)) & held
    back = d.join("s1-new", instance_id="i1")
    assert back.error == 0 and parts(back) == held
    assert "s1" not in d.group().members and d.group().group_epoch == epoch


def test_static_instance_id_still_active_is_unreleased() -> None:
    d = Driver()
    d.join("s1", instance_id="i1")
    assert d.join("s2", instance_id="i1").error == E.UNRELEASED_INSTANCE_ID
    assert d.hb("s2", 1, instance_id="i1").error == E.FENCED_INSTANCE_ID
    assert d.hb("s2", -1, instance_id="i1").error == E.FENCED_INSTANCE_ID
    assert d.hb("s3", 1, instance_id="i9").error == E.UNKNOWN_MEMBER_ID


def test_static_member_away_too_long_is_removed() -> None:
    d = Driver()
    d.join("s1", instance_id="i1")
    d.hb("s1", -2, instance_id="i1")
    d.advance(SESSION_MS + 1)
    assert d.group().members == {}
    assert d.join("s2", instance_id="i1").error == 0


# ---------------------------------------------------------------------------------------- metadata and regex


def test_partitions_added_and_topic_created_trigger_a_new_target() -> None:
    d = Driver()
    r = d.join("m1", topics=["foo", "bar"])
    assert r.assignment == {FOO: frozenset(range(6))}
    d.topics["foo"] = (FOO, 8)
    r = d.hb("m1", 2)
    assert r.member_epoch == 3 and r.assignment == {FOO: frozenset(range(8))}
    d.topics["bar"] = (BAR, 2)
    r = d.hb("m1", 3)
    assert r.member_epoch == 4 and r.assignment == {FOO: frozenset(range(8)), BAR: frozenset({0, 1})}
    del d.topics["foo"]
    r = d.hb("m1", 4)  # a keepalive: it still owns foo's partitions, so it must first revoke them
    assert r.member_epoch == 4 and r.assignment == {BAR: frozenset({0, 1})}
    r = d.hb("m1", 4, {BAR: [0, 1]})
    assert r.member_epoch == 5 and d.group().state == "Stable"


def test_regex_subscription_matches_whole_names_and_follows_new_topics() -> None:
    d = Driver()
    d.topics["foobar"] = (BAR, 2)
    r = d.join("m1", subscribed_topic_regex="foo.*")
    assert r.assignment == {FOO: frozenset(range(6)), BAR: frozenset({0, 1})}
    r = d.join("m2", subscribed_topic_regex="^fo")  # a whole-name match: neither foo nor foobar
    assert r.error == 0
    assert d.group().regexes["^fo"] == frozenset()
    d.topics["food"] = (b"\x03" * 16, 1)
    epoch = d.group().group_epoch
    d.hb("m1", d.group().members["m1"].member_epoch)
    assert d.group().regexes["foo.*"] == frozenset({"foo", "foobar", "food"})
    assert d.group().group_epoch == epoch + 1


def test_assignor_chosen_by_the_client_else_the_default() -> None:
    d = Driver()
    d.join("m1")
    assert d.machine.preferred_assignor(d.group()) == "uniform"
    d.join("m2", server_assignor="range")
    assert d.machine.preferred_assignor(d.group()) == "range"


def test_records_decode_to_the_group() -> None:
    d = Driver()
    d.join("m1", instance_id="i1", rack_id="r1", client_id="cli", client_host="/10.0.0.1")
    for key, value in d.writes[-1].records:
        k = crec.decode_key(key)
        assert k.group == GROUP
        if k.type == crec.MEMBER_METADATA:
            v = crec.decode_member_metadata(value)
            assert (v.instance_id, v.rack_id, v.client_id, v.client_host, v.subscribed_topic_names,
                    v.rebalance_timeout_ms) == ("i1", "r1", "cli", "/10.0.0.1", ("foo",), REBALANCE_MS)
        elif k.type == crec.CURRENT_MEMBER_ASSIGNMENT:
            v = crec.decode_current_assignment(value)
            assert (v.member_epoch, v.previous_member_epoch, v.state) == (2, 0, 0)
            assert v.assigned == {FOO: frozenset(range(6))}


# ---------------------------------------------------------------------------------------- commits and epochs


def commit(d: Driver, member: str, epoch: int, *partitions: int) -> int:
    """The error of an OffsetCommit v9 of `member` with `epoch` for partitions of foo."""
    return d.machine.validate_offset_commit(d.group(), member, epoch, 9, [("foo", p) for p in partitions])


def test_a_commit_sent_before_the_member_heard_of_its_new_epoch_is_accepted() -> None:
    """Issue 23: m1 commits each record synchronously while m2 leaves. The heartbeat that moves m1 to the
    new epoch (and gives it m2's partitions) is answered while a commit carrying the old epoch is on its
    way: Kafka 4.4 accepts that commit for the partitions m1 already held at the old epoch (KIP-1251's
    assignment epochs), and refuses it for those it got with the new epoch, and any newer epoch."""
    d = Driver()
    d.join("m1")
    d.join("m2")
    r = d.hb("m1", 2, {FOO: list(range(6))})
    kept = sorted(p for _, p in parts(r))
    assert d.hb("m1", 2, {FOO: kept}).member_epoch == 3
    given = sorted(p for _, p in parts(d.hb("m2", 3, {})))
    assert len(given) == 3 and d.group().state == "Stable"
    member = d.group().members["m1"]
    assert {p: member.assignment_epoch(FOO, p) for p in kept} == dict.fromkeys(kept, 2)  # m1's since epoch 2
    assert commit(d, "m1", 2, *kept) == 0  # older than epoch 3, but m1 held them at 2 already

    assert d.hb("m2", -1).error == 0  # m2 leaves: epoch 4, m1 gets all six
    r = d.hb("m1", 3, {FOO: kept})
    assert r.member_epoch == 4 and parts(r) == {(FOO, p) for p in range(6)}
    member = d.group().members["m1"]
    assert (member.member_epoch, member.previous_member_epoch) == (4, 3)
    assert {p: member.assignment_epoch(FOO, p) for p in given} == dict.fromkeys(given, 4)
    assert commit(d, "m1", 4, *range(6)) == 0  # the current epoch commits anything
    assert commit(d, "m1", 3, *kept) == 0  # in flight when m1 moved to 4: accepted, as in Kafka 4.4
    assert commit(d, "m1", 2, *kept) == 0  # any epoch at or after the partition's assignment
    # A partition m1 got at epoch 4 cannot have been consumed at epoch 3: the whole commit is refused.
    assert commit(d, "m1", 3, kept[0], given[0]) == E.STALE_MEMBER_EPOCH
    assert commit(d, "m1", 5, *kept) == E.STALE_MEMBER_EPOCH  # newer than the member's
    assert commit(d, "m1", 0, *kept) == E.STALE_MEMBER_EPOCH  # older than the partitions' epoch
    assert commit(d, "m1", 3) == 0  # nothing to check (Kafka's validator runs per partition)
    assert commit(d, "nobody", 4, 0) == E.UNKNOWN_MEMBER_ID
    assert d.machine.validate_offset_commit(d.group(), "m1", 3, 8, [("foo", kept[0])]) == E.UNSUPPORTED_VERSION


def test_partitions_pending_revocation_accept_older_commits_until_given_up() -> None:
    """A member revoking partitions keeps their assignment epochs until it gives them up: a commit with an
    older epoch is accepted for them meanwhile, and refused once another member got them."""
    d = Driver()
    d.join("m1")
    d.join("m2")
    r = d.hb("m1", 2, {FOO: list(range(6))})
    kept = sorted(p for _, p in parts(r))
    revoked = sorted(set(range(6)) - set(kept))
    d.hb("m1", 2, {FOO: kept})
    d.hb("m2", 3, {})
    d.join("m3")  # epoch 4: m1 and m2 each give m3 one partition
    r = d.hb("m1", 3, {FOO: kept})
    member = d.group().members["m1"]
    assert member.state == MemberState.UNREVOKED_PARTITIONS and r.member_epoch == 3
    [pending] = member.pending_revocation[FOO]
    assert member.assignment_epoch(FOO, pending) == 2
    assert commit(d, "m1", 2, pending) == 0
    assert commit(d, "m1", 2, revoked[0]) == E.STALE_MEMBER_EPOCH  # m2's now
    d.hb("m1", 3, {FOO: sorted(set(kept) - {pending})})
    assert d.group().members["m1"].member_epoch == 4
    assert commit(d, "m1", 3, pending) == E.STALE_MEMBER_EPOCH  # given up


def test_a_member_that_revoked_moves_on_from_its_epoch_not_epoch_plus_one() -> None:
    """Kafka 4.1+: a member that revoked its partitions is reconciled from the epoch it has (4.0 went to
    epoch + 1); when more must be revoked by then, it stays at its epoch, and its previous epoch is always
    the one it had before (Kafka's updateMemberEpoch)."""
    d = Driver()
    d.join("m1")
    d.join("m2")  # epoch 3: m1 must revoke three
    r = d.hb("m1", 2, {FOO: list(range(6))})
    first = sorted(p for _, p in parts(r))
    d.join("m3")  # epoch 4 while m1 is still revoking: m1's target shrinks to two
    r = d.hb("m1", 2, {FOO: first})
    member = d.group().members["m1"]
    assert (r.member_epoch, member.state) == (2, MemberState.UNREVOKED_PARTITIONS)  # not 3
    assert (member.member_epoch, member.previous_member_epoch) == (2, 2)
    r = d.hb("m1", 2, {FOO: sorted(p for _, p in parts(r))})
    member = d.group().members["m1"]
    assert r.member_epoch == 4 and (member.state, len(member.assigned[FOO])) == (MemberState.STABLE, 2)
    assert member.previous_member_epoch == 2


def test_a_static_member_away_keeps_its_partitions_at_assignment_epoch_0() -> None:
    """Kafka resets the assignment epochs of a static member that leaves with -2 to 0: the member that takes
    the instance over reaches the group's epoch with them and may commit them with any epoch since."""
    d = Driver()
    d.join("s1", instance_id="i1")
    assert d.hb("s1", -2, instance_id="i1").member_epoch == -2
    away = d.group().members["s1"]
    assert {away.assignment_epoch(FOO, p) for p in range(6)} == {0}
    r = d.join("s2", instance_id="i1")
    assert r.member_epoch == 2 and len(parts(r)) == 6
    assert {d.group().members["s2"].assignment_epoch(FOO, p) for p in range(6)} == {0}


# Kafka 4.4's bytes of a ConsumerGroupCurrentMemberAssignmentValue (MemberEpoch 7, PreviousMemberEpoch 6,
# State 1, topic 0x01.. partitions 0, 2, 5 assigned at epochs 3, 7, 5, topic 0x02.. partition 1 pending
# revocation from epoch 4), as its generated class serializes it (MessageUtil.toVersionPrefixedBytes).
KAFKA_44_ASSIGNMENT = bytes.fromhex(
    "000000000007000000060102010101010101010101010101010101010400000000000000020000000501000d04000000030000"
    "00070000000502020202020202020202020202020202020200000001010005020000000400")


def test_current_assignment_records_carry_assignment_epochs_as_kafka_44() -> None:
    v = crec.decode_current_assignment(KAFKA_44_ASSIGNMENT)
    assert (v.member_epoch, v.previous_member_epoch, v.state) == (7, 6, 1)
    assert v.assigned == {FOO: frozenset({0, 2, 5})} and v.pending_revocation == {BAR: frozenset({1})}
    assert v.epochs == {FOO: {0: 3, 2: 7, 5: 5}, BAR: {1: 4}}
    assert crec.encode_current_assignment(v) == KAFKA_44_ASSIGNMENT
    # Kafka 4.2's layout (no tag): no epochs; each partition counts as assigned at the member epoch.
    old = crec.CurrentAssignmentValue(7, 6, 0, {FOO: frozenset({0, 2})})
    again = crec.decode_current_assignment(crec.encode_current_assignment(old))
    assert again == old and again.epochs is None and again.epoch_of(FOO, 2) == 7
    # Replayed, a member's assignment epochs are back (and what a 4.2-era record lacks defaults likewise).
    d = Driver()
    d.join("m1")
    d.join("m2")
    r = d.hb("m1", 2, {FOO: list(range(6))})
    d.hb("m1", 2, {FOO: sorted(p for _, p in parts(r))})
    d.hb("m2", 3, {})
    live = d.group()
    restored = replayed(d)[GROUP]
    assert {m: r.assignment_epochs for m, r in restored.members.items()} == {
        m: r.assignment_epochs for m, r in live.members.items()}
    assert set(restored.members["m2"].assignment_epochs[FOO].values()) == {3}


# ---------------------------------------------------------------------------------------- restart


def replayed(d: Driver) -> Any:
    """The groups a fresh coordinator rebuilds from every record written so far, in order."""
    from kop.coordinator.consumer_group import ConsumerGroupReplayer

    replayer = ConsumerGroupReplayer()
    for w in d.writes:
        for key, value in w.records:
            if rec._Reader(key, 0, False).int16() in crec.TYPES:
                replayer.replay(crec.decode_key(key), value)
    return {g.group_id: g for g in replayer.result()}


def test_replaying_the_records_restores_every_group_mid_reconciliation() -> None:
    d = Driver()
    d.topics["foobar"] = (BAR, 3)
    d.join("s1", instance_id="i1", client_id="c1", client_host="/10.0.0.1")
    d.join("m2", subscribed_topic_regex="foo.*", server_assignor="range")
    d.hb("s1", 2, {FOO: list(range(6))})  # s1 now revoking: UNREVOKED_PARTITIONS
    restored = replayed(d)[GROUP]
    live = d.group()
    assert restored == live
    assert restored.members["s1"].state == MemberState.UNREVOKED_PARTITIONS
    # A coordinator that loads them serves the members where they were: s1 is still asked to revoke.
    d2 = Driver()
    d2.topics = d.topics
    d2.machine.loaded([restored], d2.now)
    kept = sorted(restored.members["s1"].assigned[FOO])
    r = d2.hb("s1", 2, {FOO: kept}, instance_id="i1")
    assert r.error == 0 and r.member_epoch == live.assignment_epoch
    # Sessions start again at load: members that never come back are removed.
    d2.advance(SESSION_MS + 1)
    assert d2.group().members == {}


def test_replay_after_leave_and_session_expiry_forgets_members() -> None:
    d = Driver()
    d.settle({m: d.join(m) for m in ("m1", "m2", "m3")})
    d.hb("m3", -1)
    d.advance(SESSION_MS + 1)  # m1 and m2 expire too
    restored = replayed(d)[GROUP]
    assert restored.members == {} and restored.targets == {}
    assert restored.group_epoch == d.group().group_epoch and restored.state == "Empty"
