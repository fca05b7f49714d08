"""A streams group's topology (sent by its members in StreamsGroupHeartbeat) and what it means on this broker's
topics now: the tasks of each subtopology and the internal topics it needs, as Kafka's coordinator works them out
(its StreamsTopology, InternalTopicManager and RepartitionTopics):

* a subtopology has one task per partition of its source topics: the most partitions of any of them (source
  topics are the user's topics and the repartition topics it reads);
* a repartition topic without a partition count of its own gets the task count of the subtopologies writing
  to it (worked out upstream first, to a fixed point); a changelog topic has one partition per task of its
  subtopology;
* user source topics missing: status MISSING_SOURCE_TOPICS and no tasks; internal topics missing: they are to
  be created (the coordinator does so) and, until they exist, status MISSING_INTERNAL_TOPICS and no tasks.
Copartition groups are not checked (Kafka reports INCORRECTLY_PARTITIONED_TOPICS when they differ); source
topic regexes are not resolved (no task for them). Pure, no I/O.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from kop.coordinator.streams.assignor import Task

STALE_TOPOLOGY, MISSING_SOURCE_TOPICS, INCORRECTLY_PARTITIONED_TOPICS, MISSING_INTERNAL_TOPICS = 0, 1, 2, 3
SHUTDOWN_APPLICATION = 4


@dataclass(frozen=True, slots=True)
class TopicInfo:
    name: str
    partitions: int  # 0: derived
    replication_factor: int
    configs: tuple[tuple[str, str], ...] = ()


@dataclass(frozen=True, slots=True)
class Subtopology:
    subtopology_id: str
    source_topics: tuple[str, ...]
    repartition_sink_topics: tuple[str, ...] = ()
    state_changelog_topics: tuple[TopicInfo, ...] = ()
    repartition_source_topics: tuple[TopicInfo, ...] = ()
    source_topic_regex: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class Topology:
    epoch: int
    subtopologies: tuple[Subtopology, ...]


@dataclass(slots=True)
class Configured:
    """The topology against the topics now: tasks (empty unless every topic is there), the statuses to
    report, and the internal topics to create: name -> (partitions, configs)."""
    tasks: frozenset[Task] = frozenset()
    statuses: list[tuple[int, str]] = field(default_factory=list)
    to_create: dict[str, tuple[int, dict[str, str]]] = field(default_factory=dict)

    def fingerprint(self) -> tuple[object, ...]:
        return tuple(sorted(self.tasks)), tuple(self.statuses)


def _repartition_counts(topology: Topology, partitions: Mapping[str, int]) -> dict[str, int]:
    """Partition count of every repartition topic: its own, the existing topic's, or the task count of the
    subtopologies writing to it, worked out to a fixed point (a chain of repartitions resolves upstream first)."""
    counts: dict[str, int] = {}
    for s in topology.subtopologies:
        for r in s.repartition_source_topics:
            if r.partitions > 0:
                counts[r.name] = r.partitions
            elif r.name in partitions:
                counts[r.name] = partitions[r.name]
    changed = True
    while changed:
        changed = False
        for s in topology.subtopologies:
            n = _task_count(s, partitions, counts)
            if n <= 0:
                continue
            for sink in s.repartition_sink_topics:
                if sink in partitions or _fixed(topology, sink):
                    continue  # its count is its own
                if counts.get(sink, 0) < n:  # counts only grow, so this ends
                    counts[sink] = n
                    changed = True
    return counts


def _fixed(topology: Topology, name: str) -> bool:
    return any(r.name == name and r.partitions > 0 for s in topology.subtopologies for r in s.repartition_source_topics)


def _task_count(s: Subtopology, partitions: Mapping[str, int], repartition: Mapping[str, int]) -> int:
    counts = [partitions.get(t, 0) for t in s.source_topics]
    counts += [repartition.get(r.name, 0) for r in s.repartition_source_topics]
    return max(counts, default=0)


def configure(topology: Topology, partitions: Mapping[str, int]) -> Configured:
    """partitions: the broker's topics, Kafka name -> partition count."""
    out = Configured()
    internal = {r.name for s in topology.subtopologies for r in s.repartition_source_topics}
    missing = sorted({t for s in topology.subtopologies for t in s.source_topics
                      if t not in internal and t not in partitions})
    if missing:
        out.statuses.append((MISSING_SOURCE_TOPICS, f"Source topics {', '.join(missing)} are missing."))
        return out
    counts = _repartition_counts(topology, partitions)
    tasks: set[Task] = set()
    for s in topology.subtopologies:
        n = _task_count(s, partitions, counts)
        tasks.update((s.subtopology_id, p) for p in range(n))
        for r in s.repartition_source_topics:
            if r.name not in partitions and counts.get(r.name, 0) > 0:
                out.to_create[r.name] = (counts[r.name], dict(r.configs))
        for c in s.state_changelog_topics:
            if c.name not in partitions and (c.partitions or n) > 0:
                out.to_create[c.name] = (c.partitions or n, dict(c.configs))
    if out.to_create:
        out.statuses.append((MISSING_INTERNAL_TOPICS,
                             f"Internal topics are missing: {', '.join(sorted(out.to_create))}"))
        return out
    out.tasks = frozenset(tasks)
    return out
