"""The broker-side task assignor of streams groups (KIP-1071): Kafka's sticky task assignor for active tasks.

A task is (subtopology id, partition). What Kafka's StickyTaskAssignor promises, and this one keeps:
* every task is assigned to exactly one member while the group has members;
* the load is balanced: member task counts differ by at most one, and processes (a Streams instance with
  several stream threads is one process with several members) are balanced before members;
* a task stays with its previous owner whenever balance allows (its state store stays where it is, so no
  restore from the changelog) - a previous owner whose process has gone no longer counts;
* a task whose owner is gone (or over its share) goes, when balance allows, to the least loaded member that held
  a standby copy of it (its state is there, caught up): Kafka 4.4's second step, after the previous owners.
  Kafka also counts a member that reports local state for the task (StreamsGroupHeartbeat's TaskOffsets) as
  such a candidate, ranked by its offsets; this broker does not keep those reports, so only standby holders.
Standby replicas (`assign_standby`, groupStreamsNumStandbyReplicas): each on another process than the task's
active one and than each other, sticky, on the least loaded member.
Pure functions, no I/O (tests/test_coordinator_streams.py).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

Task = tuple[str, int]
Tasks = frozenset[Task]


def assign(tasks: Iterable[Task], members: Mapping[str, str], previous: Mapping[str, Tasks],
           previous_standby: Mapping[str, Tasks] | None = None) -> dict[str, Tasks]:
    """members: member id -> process id; previous: member id -> its active tasks in the last target
    assignment; previous_standby: member id -> its standby tasks in it. Returns member id -> active tasks,
    every task to one member, sticky and balanced."""
    todo = sorted(set(tasks))
    if not members:
        return {}
    ids = sorted(members)
    base, extra = divmod(len(todo), len(ids))
    out: dict[str, set[Task]] = {m: set() for m in ids}
    # 1. each member keeps up to `base` of its previous tasks
    valid = set(todo)
    owner = {t: m for m in ids for t in sorted(previous.get(m, ())) if t in valid}
    left: list[Task] = []
    for t in todo:
        m = owner.get(t)
        if m is not None and len(out[m]) < base:
            out[m].add(t)
        else:
            left.append(t)
    # 2. a previous owner at `base` keeps one more while extra slots remain
    rest: list[Task] = []
    for t in left:
        m = owner.get(t)
        if m is not None and extra > 0 and len(out[m]) == base:
            out[m].add(t)
            extra -= 1
        else:
            rest.append(t)
    # 3. the others go to the least loaded member with room that held a standby copy of the task, else to the
    #    least loaded member, the least loaded process first (ties: the member id)
    copies = {m: ts for m, ts in (previous_standby or {}).items() if m in out}
    for t in rest:
        room = [m for m in ids if len(out[m]) < base + (1 if extra > 0 else 0)]
        m = min([m for m in room if t in copies.get(m, ())] or room,
                key=lambda m: (len(out[m]), _process_load(out, members, members[m]), m))
        if len(out[m]) == base:
            extra -= 1
        out[m].add(t)
    return {m: frozenset(ts) for m, ts in out.items()}


def _process_load(out: Mapping[str, set[Task]], members: Mapping[str, str], process: str) -> int:
    return sum(len(ts) for m, ts in out.items() if members[m] == process)


def assign_standby(tasks: Iterable[Task], members: Mapping[str, str], active: Mapping[str, Tasks],
                   previous: Mapping[str, Tasks], replicas: int) -> dict[str, Tasks]:
    """`replicas` standby copies of each (stateful) task, each on a process other than the one running it actively and
    other than each other's (a process keeps one state directory per task), kept where they were when allowed,
    else on the least loaded member (active and standby tasks counted). A task without enough other processes
    gets fewer copies, as Kafka's assignor does."""
    out: dict[str, set[Task]] = {m: set() for m in members}
    if replicas <= 0 or not members:
        return {m: frozenset() for m in members}
    owner_process = {t: members[m] for m, ts in active.items() if m in members for t in ts}
    for t in sorted(set(tasks)):
        used = {owner_process.get(t)}
        for _ in range(replicas):
            eligible = [m for m in sorted(members) if members[m] not in used]
            if not eligible:
                break
            kept = [m for m in eligible if t in previous.get(m, ())]
            m = kept[0] if kept else min(eligible, key=lambda m: (len(active.get(m, ())) + len(out[m]), m))
            out[m].add(t)
            used.add(members[m])
    return {m: frozenset(ts) for m, ts in out.items()}
