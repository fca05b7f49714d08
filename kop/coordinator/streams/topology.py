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
* an internal topic that exists with another partition count than the one worked out (a repartition topic's
  fixed count, a changelog's task count): status INCORRECTLY_PARTITIONED_TOPICS ("Existing topic X has
  different number of partitions: expected N, found M", Kafka's InternalTopicManager) and no tasks - so the
  tasks of a subtopology never outnumber the partitions of a topic that exists (a member's topology naming
  an existing topic as a repartition topic of 11 million partitions once made 11 million tasks here and
  stalled the broker's event loop for minutes: the Kafka fuzz test, seed 12).
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
    for s in topology.subtopologies:
        n = _task_count(s, partitions, counts)
        internal_topics = [(r.name, counts.get(r.name, 0), r.configs) for r in s.repartition_source_topics]
        internal_topics += [(c.name, c.partitions or n, c.configs) for c in s.state_changelog_topics]
        for name, expected, configs in internal_topics:
            found = partitions.get(name)
            if found is not None and expected > 0 and found != expected:
                out.statuses.append((INCORRECTLY_PARTITIONED_TOPICS, f"Existing topic {name} has different "
                                     f"number of partitions: expected {expected}, found {found}"))
                out.to_create.clear()
                return out
            if found is None and expected > 0:
                out.to_create[name] = (expected, dict(configs))
    if out.to_create:
        out.statuses.append((MISSING_INTERNAL_TOPICS,
                             f"Internal topics are missing: {', '.join(sorted(out.to_create))}"))
        return out
    # Every topic a task reads exists now with the count expected of it, so a subtopology has as many tasks as
    # the partitions of an existing topic (never a count a member merely asked for)
    out.tasks = frozenset((s.subtopology_id, p) for s in topology.subtopologies
                          for p in range(_task_count(s, partitions, counts)))
    return out
