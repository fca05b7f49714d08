"""KIP-848's server-side partition assignors, `uniform` and `range`, as pure functions.

With the consumer group protocol the coordinator, not a group leader, computes who consumes what
(research/kip848.md §4). An assignor sees each member's subscribed topics (as topic ids), its static
instance id and its current *target* assignment, and the partition count of every subscribed topic that
exists; it answers the new target of every member. Reconciliation (kop/coordinator/consumer_group.py)
then moves members towards it without ever giving a partition to two of them.

The properties Kafka's own assignors promise, and the tests (tests/test_coordinator_assignors.py) check:

* `uniform`: balance first - when every member subscribes to the same topics (a *homogeneous* group) the
  member sizes differ by at most one - then stickiness: a member keeps as much of its current target as
  balance allows. For a *heterogeneous* group (members subscribe to different topics, or by regex) it is
  balanced as far as the subscriptions permit, by moving partitions from the most to the least loaded
  eligible member. The algorithm is ours, not a port of Kafka's builders, so the exact partitions chosen
  can differ from Kafka's; the properties above do not.
* `range`: per topic, contiguous ranges of partitions, the first `partitions % subscribers` members one
  more; static members sort first (by instance id), then dynamic ones (by member id). It ignores earlier
  assignments, as Kafka 4.0's does; groups whose members subscribe to topics of equal partition counts are
  co-partitioned as a result. Neither assignor looks at racks (Kafka 4.0's built-ins do not either).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

TopicId = bytes
Assignment = dict[TopicId, frozenset[int]]


@dataclass(frozen=True, slots=True)
class MemberSpec:
    """What an assignor knows of a member."""
    subscribed: frozenset[TopicId]
    instance_id: str | None = None
    current: Mapping[TopicId, frozenset[int]] = field(default_factory=dict)


Assignor = Callable[[Mapping[str, MemberSpec], Mapping[TopicId, int]], dict[str, Assignment]]


def _as_assignment(parts: set[tuple[TopicId, int]]) -> Assignment:
    out: dict[TopicId, set[int]] = {}
    for tid, p in parts:
        out.setdefault(tid, set()).add(p)
    return {tid: frozenset(ps) for tid, ps in out.items()}


def uniform(members: Mapping[str, MemberSpec], topics: Mapping[TopicId, int]) -> dict[str, Assignment]:
    """Balanced first, sticky second; see the module docstring."""
    if not members:
        return {}
    order = sorted(members)
    eligible_topics = {m: {t for t in members[m].subscribed if t in topics} for m in order}
    owned: dict[str, set[tuple[TopicId, int]]] = {m: set() for m in order}
    taken: set[tuple[TopicId, int]] = set()
    # Stickiness: every member keeps what it still may consume (a partition once, should two claim it).
    for m in order:
        for tid, parts in members[m].current.items():
            if tid in eligible_topics[m]:
                for p in parts:
                    if p < topics[tid] and (tid, p) not in taken:
                        owned[m].add((tid, p))
                        taken.add((tid, p))
    homogeneous = len({frozenset(s) for s in eligible_topics.values()}) == 1
    if homogeneous:
        _trim_to_quota(order, owned, taken, sum(topics[t] for t in eligible_topics[order[0]]))
    # Partitions nobody keeps go to the least loaded eligible member, topics with fewest subscribers first.
    subscribers = {t: [m for m in order if t in eligible_topics[m]] for t in topics}
    free = [(tid, p) for tid in sorted(topics, key=lambda t: (len(subscribers[t]), t))
            for p in range(topics[tid]) if subscribers[tid] and (tid, p) not in taken]
    for tid, p in free:
        m = min(subscribers[tid], key=lambda x: (len(owned[x]), x))
        owned[m].add((tid, p))
    _rebalance(order, owned, subscribers)
    return {m: _as_assignment(owned[m]) for m in order}


def _trim_to_quota(order: list[str], owned: dict[str, set[tuple[TopicId, int]]],
                   taken: set[tuple[TopicId, int]], total: int) -> None:
    """In a homogeneous group each member may keep at most its quota (total // n, plus one for the first
    total % n members that hold more than that), so the free partitions can fill everyone up to theirs."""
    quota, extra = divmod(total, len(order))
    for m in sorted(order, key=lambda x: (-len(owned[x]), x)):
        cap = quota
        if extra and len(owned[m]) > quota:
            cap, extra = quota + 1, extra - 1
        for part in sorted(owned[m])[cap:]:
            owned[m].discard(part)
            taken.discard(part)


def _rebalance(order: list[str], owned: dict[str, set[tuple[TopicId, int]]],
               subscribers: Mapping[TopicId, list[str]]) -> None:
    """Move single partitions from a member to an eligible one holding at least two fewer, until no such
    move exists. Each move lowers the sum of squared sizes, so this ends; in a homogeneous group it ends
    with sizes differing by at most one."""
    moved = True
    while moved:
        moved = False
        for m in sorted(order, key=lambda x: (-len(owned[x]), x)):
            for tid, p in sorted(owned[m], reverse=True):
                target = min(subscribers[tid], key=lambda x: (len(owned[x]), x))
                if len(owned[target]) <= len(owned[m]) - 2:
                    owned[m].discard((tid, p))
                    owned[target].add((tid, p))
                    moved = True
                    break
            if moved:
                break


def range_(members: Mapping[str, MemberSpec], topics: Mapping[TopicId, int]) -> dict[str, Assignment]:
    """Contiguous ranges per topic; see the module docstring."""
    def sort_key(m: str) -> tuple[int, str]:
        inst = members[m].instance_id
        return (0, inst) if inst is not None else (1, m)

    order = sorted(members, key=sort_key)
    owned: dict[str, dict[TopicId, frozenset[int]]] = {m: {} for m in order}
    for tid in sorted(topics):
        subs = [m for m in order if tid in members[m].subscribed]
        if not subs:
            continue
        quota, extra = divmod(topics[tid], len(subs))
        start = 0
        for i, m in enumerate(subs):
            size = quota + (1 if i < extra else 0)
            if size:
                owned[m][tid] = frozenset(range(start, start + size))
            start += size
    return owned


ASSIGNORS: dict[str, Assignor] = {"uniform": uniform, "range": range_}
