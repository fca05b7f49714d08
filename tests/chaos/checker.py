"""The chaos suite's checker: sans-IO, fed a History the workloads recorded (tests/chaos/workloads.py) and
the log as read back after the fault healed; it finds what a fault may have broken.

Positions are comparable values naming where a record sits in a partition: a Kafka offset (int), a Pulsar
message id as (ledger, entry, batch index). Values are unique per write (`<workload>-<sequence>`), so a
value found twice is a duplicate and a value's place is a fact to compare against its acknowledgement.

Anomalies (each a list of short strings, one per finding, in `Report`):
- lost: an acknowledged write absent from the log read back; a group that skipped positions it committed
  past without reading them.
- duplicated: one value at two positions of the log.
- wrong_offsets: an acknowledgement naming a position the value is not at; one position read with two
  different values (by consumers or the final read).
- reordered: one producer's acknowledged writes to a partition sitting in the log out of send order.
- backward_commits: a group's acknowledged committed offset for a partition lower than one acknowledged
  before it.
- stale_reads: a committed-offset answer lower than a commit acknowledged before the question was asked.
- aborted_reads: a read_committed reader (a consumer, or the final read) handed a value of a transaction
  that was aborted.
- undelivered: an acknowledged write that is in the log but that a durable subscription never handed to
  its consumer (Pulsar: at-least-once delivery broken, though nothing was lost from the log).
Stall: per workload, the time from the fault's heal to its first acknowledgement after it (None: none came,
reported as stuck).
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any

Key = tuple[str, int]  # (topic, partition)


@dataclass(frozen=True)
class Ack:
    """A write the system acknowledged: `seq` orders one workload's writes as it sent them."""

    workload: str
    topic: str
    partition: int
    position: Any
    value: str
    seq: int
    at: float


@dataclass(frozen=True)
class Read:
    """A record a consumer was handed; `committed`: it read under read_committed."""

    reader: str
    topic: str
    partition: int
    position: Any
    value: str
    committed: bool = False


@dataclass(frozen=True)
class Commit:
    """An acknowledged offset commit of a group (`at`: when the acknowledgement came)."""

    group: str
    topic: str
    partition: int
    offset: int
    at: float


@dataclass(frozen=True)
class CommittedAnswer:
    """What the coordinator answered, at `asked` (when the question was sent), for a group's committed
    offset."""

    group: str
    topic: str
    partition: int
    offset: int
    asked: float


@dataclass
class History:
    acks: list[Ack] = field(default_factory=list)
    reads: list[Read] = field(default_factory=list)
    commits: list[Commit] = field(default_factory=list)
    answers: list[CommittedAnswer] = field(default_factory=list)
    aborted: set[str] = field(default_factory=set)  # values written in transactions that were aborted
    # The log read back after the heal: (topic, partition) -> [(position, value)], and whether that topic
    # was read under read_committed.
    final: dict[Key, list[tuple[Any, str]]] = field(default_factory=dict)
    final_committed: set[str] = field(default_factory=set)
    # A group's reads must cover [start, last commit) of each partition it read: (group, topic) -> start.
    group_topics: dict[tuple[str, str], int] = field(default_factory=dict)
    workloads: set[str] = field(default_factory=set)
    # Durable subscriptions: topic -> every value handed to the subscription's consumers.
    delivered: dict[str, set[str]] = field(default_factory=dict)

    def extend(self, other: History) -> None:
        self.acks += other.acks
        self.reads += other.reads
        self.commits += other.commits
        self.answers += other.answers
        self.aborted |= other.aborted
        self.final.update(other.final)
        self.final_committed |= other.final_committed
        self.group_topics.update(other.group_topics)
        self.workloads |= other.workloads
        self.delivered.update(other.delivered)


ANOMALIES = ("lost", "duplicated", "wrong_offsets", "reordered", "backward_commits", "stale_reads",
             "aborted_reads", "undelivered")


@dataclass
class Report:
    acked: int = 0
    lost: list[str] = field(default_factory=list)
    duplicated: list[str] = field(default_factory=list)
    wrong_offsets: list[str] = field(default_factory=list)
    reordered: list[str] = field(default_factory=list)
    backward_commits: list[str] = field(default_factory=list)
    stale_reads: list[str] = field(default_factory=list)
    aborted_reads: list[str] = field(default_factory=list)
    undelivered: list[str] = field(default_factory=list)
    stalls: dict[str, float | None] = field(default_factory=dict)

    def anomalies(self) -> dict[str, list[str]]:
        return {name: getattr(self, name) for name in ANOMALIES if getattr(self, name)}

    @property
    def stuck(self) -> list[str]:
        return sorted(w for w, s in self.stalls.items() if s is None)


def check(h: History, healed_at: float | None = None) -> Report:
    """Every check over one history; stalls measured from `healed_at` when given."""
    r = Report(acked=len(h.acks))
    where = _positions(h.final)
    r.duplicated = [f"{v} at {sorted(ps, key=repr)}" for v, ps in sorted(where.items()) if len(ps) > 1]
    r.lost = _lost(h, where) + _group_gaps(h)
    r.wrong_offsets = _wrong_offsets(h, where)
    r.reordered = _reordered(h, where)
    r.backward_commits = _backward_commits(h.commits)
    r.stale_reads = _stale_reads(h.commits, h.answers)
    r.aborted_reads = _aborted_reads(h)
    r.undelivered = [f"{a.value} ({a.topic}-{a.partition})" for a in h.acks
                     if a.topic in h.delivered and a.value in where and a.value not in h.delivered[a.topic]]
    if healed_at is not None:
        r.stalls = stalls(h, healed_at)
    return r


def _positions(final: dict[Key, list[tuple[Any, str]]]) -> dict[str, set[tuple[str, int, Any]]]:
    where: dict[str, set[tuple[str, int, Any]]] = defaultdict(set)
    for (topic, partition), entries in final.items():
        for position, value in entries:
            where[value].add((topic, partition, position))
    return where


def _lost(h: History, where: dict[str, set[tuple[str, int, Any]]]) -> list[str]:
    read_back = {k[0] for k in h.final}
    return [f"{a.value} ({a.topic}-{a.partition}@{a.position})" for a in h.acks
            if a.topic in read_back and not any(t == a.topic for t, _, _ in where.get(a.value, ()))]


def _wrong_offsets(h: History, where: dict[str, set[tuple[str, int, Any]]]) -> list[str]:
    out = []
    for a in h.acks:
        found = where.get(a.value)
        if found and a.position is not None and (a.topic, a.partition, a.position) not in found:
            out.append(f"{a.value} acknowledged at {a.topic}-{a.partition}@{a.position}, found at {sorted(found)}")
    seen: dict[tuple[str, int, Any], str] = {}
    for (topic, partition), entries in h.final.items():
        for position, value in entries:
            seen[(topic, partition, position)] = value
    for rd in h.reads:
        k = (rd.topic, rd.partition, rd.position)
        if seen.setdefault(k, rd.value) != rd.value:
            out.append(f"{rd.topic}-{rd.partition}@{rd.position} read as {rd.value} by {rd.reader}, "
                       f"elsewhere as {seen[k]}")
    return out


def _reordered(h: History, where: dict[str, set[tuple[str, int, Any]]]) -> list[str]:
    by_stream: dict[tuple[str, str, int], list[tuple[Any, int, str]]] = defaultdict(list)
    for a in h.acks:
        found = where.get(a.value, set())
        if len(found) == 1:  # a duplicate is reported as one, not as a reordering too
            ((topic, partition, position),) = found
            by_stream[(a.workload, topic, partition)].append((position, a.seq, a.value))
    out = []
    for (workload, topic, partition), rows in sorted(by_stream.items()):
        rows.sort(key=lambda row: row[0])
        for before, after in zip(rows, rows[1:], strict=False):
            if after[1] < before[1]:
                out.append(f"{workload} {topic}-{partition}: {after[2]} after {before[2]} in the log")
    return out


def _backward_commits(commits: list[Commit]) -> list[str]:
    last: dict[tuple[str, str, int], Commit] = {}
    out = []
    for c in sorted(commits, key=lambda c: c.at):
        k = (c.group, c.topic, c.partition)
        prev = last.get(k)
        if prev is not None and c.offset < prev.offset:
            out.append(f"{c.group} {c.topic}-{c.partition}: committed {c.offset} after {prev.offset}")
        if prev is None or c.offset >= prev.offset:
            last[k] = c
    return out


def _stale_reads(commits: list[Commit], answers: list[CommittedAnswer]) -> list[str]:
    out = []
    for a in answers:
        acked = [c.offset for c in commits
                 if (c.group, c.topic, c.partition) == (a.group, a.topic, a.partition) and c.at < a.asked]
        if acked and a.offset < max(acked):
            out.append(f"{a.group} {a.topic}-{a.partition}: answered {a.offset} after {max(acked)} was acknowledged")
    return out


def _aborted_reads(h: History) -> list[str]:
    out = [f"{rd.value} read by {rd.reader}" for rd in h.reads if rd.committed and rd.value in h.aborted]
    for (topic, partition), entries in h.final.items():
        if topic in h.final_committed:
            out += [f"{v} in the read_committed log of {topic}-{partition}" for _, v in entries if v in h.aborted]
    return out


def _group_gaps(h: History) -> list[str]:
    """Positions below a group's last acknowledged commit that none of its members read (Kafka offsets)."""
    read: dict[tuple[str, str, int], set[int]] = defaultdict(set)
    for rd in h.reads:
        if isinstance(rd.position, int):
            read[(rd.reader.split("/")[0], rd.topic, rd.partition)].add(rd.position)
    top: dict[tuple[str, str, int], int] = {}
    for c in h.commits:
        k = (c.group, c.topic, c.partition)
        top[k] = max(top.get(k, 0), c.offset)
    present: dict[Key, set[int]] = {k: {p for p, _ in v if isinstance(p, int)} for k, v in h.final.items()}
    out = []
    for (group, topic, partition), upto in sorted(top.items()):
        if (group, topic) not in h.group_topics or (topic, partition) not in present:
            continue
        start = h.group_topics[(group, topic)]
        missing = sorted(p for p in present[(topic, partition)] if start <= p < upto
                         and p not in read[(group, topic, partition)])
        if missing:
            out.append(f"group {group} skipped {topic}-{partition} offsets {missing[:5]} ({len(missing)})")
    return out


def stalls(h: History, healed_at: float) -> dict[str, float | None]:
    """Per workload: seconds from the heal to its first acknowledgement (or commit) after it."""
    firsts: dict[str, float | None] = {w: None for w in h.workloads}
    events = [(a.workload, a.at) for a in h.acks] + [(c.group, c.at) for c in h.commits]
    for workload, at in events:
        if at >= healed_at and workload in firsts:
            first = firsts[workload]
            firsts[workload] = at if first is None else min(first, at)
    return {w: None if t is None else t - healed_at for w, t in firsts.items()}
