"""kop/coordinator/assignors.py: the server-side assignors' promises, as Kafka's assignor tests state them.

`uniform`: every partition of a subscribed topic is assigned exactly once, to a subscriber; a homogeneous
group is balanced to within one partition; a member keeps its current partitions when balance allows
(stickiness: a member joining or leaving moves only what it must). `range`: contiguous ranges per topic,
static members first, co-partitioning of topics with equal counts.
"""

from __future__ import annotations

import itertools
import random

import pytest

from kop.coordinator.assignors import MemberSpec, range_, uniform

A, B, C = b"A" * 16, b"B" * 16, b"C" * 16


def flat(assignment: dict) -> set[tuple[bytes, int]]:
    return {(t, p) for t, ps in assignment.items() for p in ps}


def check_valid(members: dict[str, MemberSpec], topics: dict[bytes, int], result: dict) -> None:
    """Each partition of a subscribed topic once, and only to a member subscribed to its topic."""
    seen: list[tuple[bytes, int]] = []
    for mid, assignment in result.items():
        for t, p in flat(assignment):
            assert t in members[mid].subscribed and 0 <= p < topics[t]
            seen.append((t, p))
    assert len(seen) == len(set(seen))
    wanted = {(t, p) for t, n in topics.items() for p in range(n)
              if any(t in m.subscribed for m in members.values())}
    assert set(seen) == wanted


def sizes(result: dict) -> list[int]:
    return sorted(len(flat(a)) for a in result.values())


def test_uniform_homogeneous_is_balanced() -> None:
    topics = {A: 7, B: 5}
    for n in range(1, 9):
        members = {f"m{i}": MemberSpec(frozenset({A, B})) for i in range(n)}
        result = uniform(members, topics)
        check_valid(members, topics, result)
        assert sizes(result)[-1] - sizes(result)[0] <= 1


def test_uniform_is_sticky_when_a_member_joins() -> None:
    topics = {A: 6, B: 6}
    members = {m: MemberSpec(frozenset({A, B})) for m in ("m1", "m2", "m3")}
    first = uniform(members, topics)
    members = {m: MemberSpec(frozenset({A, B}), current=first[m]) for m in first}
    members["m4"] = MemberSpec(frozenset({A, B}))
    second = uniform(members, topics)
    check_valid(members, topics, second)
    assert sizes(second) == [3, 3, 3, 3]
    # The three old members each give up exactly one partition, to the newcomer, and keep the rest.
    for m in ("m1", "m2", "m3"):
        assert flat(second[m]) <= flat(first[m]) and len(flat(first[m]) - flat(second[m])) == 1


def test_uniform_is_sticky_when_a_member_leaves() -> None:
    topics = {A: 9}
    members = {m: MemberSpec(frozenset({A})) for m in ("m1", "m2", "m3")}
    first = uniform(members, topics)
    members = {m: MemberSpec(frozenset({A}), current=first[m]) for m in ("m1", "m2")}
    second = uniform(members, topics)
    check_valid(members, topics, second)
    assert sizes(second) == [4, 5]
    for m in ("m1", "m2"):
        assert flat(first[m]) <= flat(second[m])


def test_uniform_drops_partitions_of_topics_gone_or_unsubscribed() -> None:
    members = {"m1": MemberSpec(frozenset({A}), current={A: frozenset({0, 1}), B: frozenset({0})}),
               "m2": MemberSpec(frozenset({A}), current={A: frozenset({5})})}
    result = uniform(members, {A: 2})  # A shrank to 2 partitions (recreated), B unsubscribed
    check_valid(members, {A: 2}, result)
    assert sizes(result) == [1, 1]


def test_uniform_heterogeneous_balances_as_far_as_subscriptions_allow() -> None:
    members = {"m1": MemberSpec(frozenset({A})), "m2": MemberSpec(frozenset({A, B})),
               "m3": MemberSpec(frozenset({B, C}))}
    topics = {A: 3, B: 3, C: 3}
    result = uniform(members, topics)
    check_valid(members, topics, result)
    assert sizes(result) == [3, 3, 3]


def test_uniform_random_groups_are_valid_and_homogeneous_ones_balanced() -> None:
    rng = random.Random(848)
    for _ in range(200):
        topics = {t: rng.randint(0, 8) for t in (A, B, C) if rng.random() < 0.9}
        names = [f"m{i}" for i in range(rng.randint(1, 6))]
        homogeneous = rng.random() < 0.5
        subs = frozenset(t for t in (A, B, C) if rng.random() < 0.7)
        members = {m: MemberSpec(subs if homogeneous else frozenset(t for t in (A, B, C) if rng.random() < 0.6),
                                 current={t: frozenset(p for p in range(9) if rng.random() < 0.2) for t in (A, B)})
                   for m in names}
        result = uniform(members, topics)
        check_valid(members, topics, result)
        if homogeneous:
            assert sizes(result)[-1] - sizes(result)[0] <= 1


def test_range_contiguous_ranges_first_members_get_the_remainder() -> None:
    members = {m: MemberSpec(frozenset({A})) for m in ("m2", "m1", "m3")}
    result = range_(members, {A: 8})
    assert result["m1"][A] == frozenset({0, 1, 2})
    assert result["m2"][A] == frozenset({3, 4, 5})
    assert result["m3"][A] == frozenset({6, 7})


def test_range_static_members_sort_first_and_topics_are_co_partitioned() -> None:
    members = {"a-dynamic": MemberSpec(frozenset({A, B})),
               "z-static": MemberSpec(frozenset({A, B}), instance_id="i1")}
    result = range_(members, {A: 4, B: 4})
    check_valid(members, {A: 4, B: 4}, result)
    assert result["z-static"] == {A: frozenset({0, 1}), B: frozenset({0, 1})}
    assert result["a-dynamic"] == {A: frozenset({2, 3}), B: frozenset({2, 3})}


@pytest.mark.parametrize("n", [1, 2, 3, 5])
def test_range_heterogeneous_only_subscribers_get_a_topic(n: int) -> None:
    members = {f"m{i}": MemberSpec(frozenset({A} if i % 2 else {A, B})) for i in range(n)}
    topics = {A: 5, B: 3}
    result = range_(members, topics)
    check_valid(members, topics, result)
    for t in topics:
        counts = [len(a.get(t, ())) for m, a in result.items() if t in members[m].subscribed]
        assert max(counts) - min(counts) <= 1
        for a in result.values():  # contiguous
            ps = sorted(a.get(t, ()))
            assert all(y - x == 1 for x, y in itertools.pairwise(ps))
