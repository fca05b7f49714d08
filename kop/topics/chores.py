"""The two background passes over every owned partition: retention and the log cleaner.

The broker service (kop/server/service.py) runs them periodically (kop/aio.py's PeriodicTask); tests,
the admin server and the group coordinator's compaction pass call them directly. Both only touch the
partitions this broker owns: in cluster mode the owner of a partition applies its retention and cleans it.
"""

from __future__ import annotations

import logging
import time

from kop.config import BrokerConfig
from kop.managed_ledger import Position
from kop.offset.api import PartitionLog
from kop.offset.compaction import CompactionResult
from kop.storage.api import StorageError
from kop.topics.manager import Topic, TopicError, TopicManager
from kop.topics.topic_config import effective

log = logging.getLogger(__name__)


async def apply_retention(topics: TopicManager, config: BrokerConfig) -> int:
    """Delete the ledgers past retention.ms / retention.bytes of every owned partition of every topic
    whose cleanup.policy contains delete. Returns how many ledgers were deleted."""
    deleted = 0
    for topic in topics.all():
        await topics.namespaces.fresh(topic.name)  # cluster mode: a retention policy set on another broker
        retention_ms, retention_bytes = retention_of(topics, topic, config)
        if retention_ms < 0 and retention_bytes < 0:
            continue
        if "delete" not in effective(topic.configs, "cleanup.policy", config):
            continue
        for p in range(topic.partitions):
            if not topics.owns(topic, p):
                continue  # cluster mode: its owner applies retention
            # Only open logs are trimmed: a partition never opened since start-up is opened here, since
            # retention must not depend on whether somebody read the partition recently.
            try:
                plog = await topics.partition_log(topic, p)
            except TopicError as e:  # deleted (or moved) during the pass: the other topics still get theirs
                log.debug("retention skips %s-%d: %s", topic.name, p, e)
                continue
            keep = await _retention_floor(topics, topic, p)
            deleted += await plog.apply_retention(retention_ms, retention_bytes, keep)
    if deleted:
        log.info("retention deleted %d ledgers", deleted)
    return deleted


def retention_of(topics: TopicManager, topic: Topic, config: BrokerConfig) -> tuple[int, int]:
    """(retention.ms, retention.bytes) of a topic: its own config, else its namespace's retention policy
    (kop/topics/namespaces.py, Pulsar's minutes and MB), else the broker's defaults - Pulsar's topic, namespace,
    broker order, on the one retention both protocols' data share."""
    policy = topics.namespaces.retention(topic.name)
    out = []
    for name, i in (("retention.ms", 0), ("retention.bytes", 1)):
        if name in topic.configs or policy is None:
            out.append(int(effective(topic.configs, name, config)))
        else:
            out.append(policy[i])
    return out[0], out[1]


async def _retention_floor(topics: TopicManager, topic: Topic, partition: int) -> int | None:
    """The lowest offset retention must keep (with its ledger and every later one): what a durable Pulsar
    subscription has not acknowledged (TopicManager.retention_floors); None when nothing holds data back."""
    keep = None
    for floor in topics.retention_floors:
        try:
            got = await floor(topic, partition)
        except TopicError:  # deleted or moved during the pass: nothing of it to keep
            continue
        if got is not None:
            keep = got if keep is None else min(keep, got)
    return keep


class LogCleaner:
    """The log cleaner of `cleanup.policy=compact` topics (compaction itself: kop/offset/compaction.py)."""

    def __init__(self, topics: TopicManager, config: BrokerConfig) -> None:
        self.topics = topics
        self.config = config
        self.stopping = False  # set by the broker at shutdown: a pass in progress ends early

    async def run(self, now_ms: int | None = None) -> list[CompactionResult]:
        """One pass over every partition of every topic whose cleanup.policy contains compact
        ("compact,delete" topics get retention as well). A partition is compacted when:

        * its dirty ratio - bytes of closed ledgers not cleaned yet / bytes of all closed ledgers - exceeds
          min.cleanable.dirty.ratio (Kafka's rule; the current ledger, like Kafka's active segment, is
          never cleaned), or
        * the earliest tombstone delete horizon is due (so tombstones go even without new writes), or
        * its current ledger's first entry is older than max.compaction.lag.ms: the ledger is rolled
          first and cleaned (Kafka rolls the active segment of compacted topics at
          min(segment.ms, max.compaction.lag.ms); here the cleaner does it on its next pass),
        and, with min.compaction.lag.ms set, the newest record the pass would clean is at least that old
        (a pass cleans all closed ledgers at once, so it waits for the newest of them).

        Partitions are cleaned one after the other, each pass yielding to the event loop regularly.
        Returns the CompactionResults of the passes run."""
        results: list[CompactionResult] = []
        for topic in self.topics.all():
            if topic.deleted or "compact" not in effective(topic.configs, "cleanup.policy", self.config):
                continue
            min_ratio = float(effective(topic.configs, "min.cleanable.dirty.ratio", self.config))
            delete_retention = int(effective(topic.configs, "delete.retention.ms", self.config))
            max_lag = int(effective(topic.configs, "max.compaction.lag.ms", self.config))
            min_lag = int(effective(topic.configs, "min.compaction.lag.ms", self.config))
            for p in range(topic.partitions):
                if topic.deleted or self.stopping:
                    break
                if not self.topics.owns(topic, p):
                    continue  # cluster mode: its owner cleans it
                try:
                    result = await self._clean(topic, p, now_ms, min_ratio, delete_retention, max_lag, min_lag)
                except (StorageError, OSError) as e:
                    # A pass writes new ledgers; when none can be created (bookies gone, a full disk) the
                    # other partitions would fail alike: one line saying why, no traceback; the next pass
                    # tries again.
                    log.warning("log-cleaner pass skipped at %s-%d: %s: %s; cleaning resumes on a later pass",
                                topic.name.canonical, p, type(_innermost(e)).__name__, e)
                    return results
                if result is not None:
                    results.append(result)
        return results

    async def _clean(self, topic: Topic, p: int, now_ms: int | None, min_ratio: float, delete_retention: int,
                     max_lag: int, min_lag: int) -> CompactionResult | None:
        """One partition of a pass (see run): its compaction result, or None when it is not due."""
        plog = await self.topics.partition_log(topic, p)
        now = int(time.time() * 1000) if now_ms is None else now_ms
        state = await plog.cleaning_state()
        first = state.current_first_timestamp
        roll = first is not None and now - first >= max_lag
        horizon_due = state.delete_horizon is not None and now >= state.delete_horizon
        if min_lag > 0 and (roll or horizon_due or state.dirty_ratio > min_ratio):
            # min.compaction.lag.ms: a pass cleans every closed ledger at once, so it waits until the
            # newest record it would clean is that old (the current ledger is left out while its
            # newest record is younger).
            if roll:
                newest_all = await _newest_entry_time(plog, current=True)
                roll = newest_all is None or now - newest_all >= min_lag
            newest = await _newest_entry_time(plog, current=roll)
            if newest is not None and now - newest < min_lag:
                return None
        if roll or horizon_due or state.dirty_ratio > min_ratio:
            return await plog.compact(delete_retention, roll_current=roll, now_ms=now_ms)
        return None

    async def compact_now(self, topic: Topic | str, partition: int | None = None, *, roll_current: bool = True,
                          now_ms: int | None = None) -> list[CompactionResult]:
        """Compact one partition (or all of them) of a compacted topic now, whatever its dirty ratio
        (tests, admin, the group coordinator's compaction pass). `topic` is a Topic or a Kafka topic name.
        roll_current (default): roll the current ledger first, so that everything written so far is
        cleaned. Raises TopicError for an unknown topic or one whose cleanup.policy has no compact."""
        t = topic if isinstance(topic, Topic) else self.topics.get(self.topics.parse(topic))
        if t is None or t.deleted:
            raise TopicError("UNKNOWN_TOPIC_OR_PARTITION", f"Topic {topic} does not exist")
        if "compact" not in effective(t.configs, "cleanup.policy", self.config):
            raise TopicError("INVALID_CONFIG", f"Topic {topic} has no cleanup.policy=compact")
        delete_retention = int(effective(t.configs, "delete.retention.ms", self.config))
        parts = range(t.partitions) if partition is None else [partition]
        results = []
        for p in parts:
            if not 0 <= p < t.partitions:
                raise TopicError("UNKNOWN_TOPIC_OR_PARTITION", f"Partition {p} does not exist")
            plog = await self.topics.partition_log(t, p)
            results.append(await plog.compact(delete_retention, roll_current=roll_current, now_ms=now_ms))
        return results


def _innermost(e: BaseException) -> BaseException:
    while e.__cause__ is not None:
        e = e.__cause__
    return e


async def _newest_entry_time(plog: PartitionLog, current: bool) -> int | None:
    """Broker time of the newest entry a cleaner pass would compact (of the current ledger too when it is
    to be rolled first); None when there is none."""
    ml = plog.ml
    cur = ml.current_ledger_id
    for li in reversed(ml.ledgers()):
        if not li.entries or (li.ledger_id == cur and not current):
            continue
        return (await plog.entry_offsets(Position(li.ledger_id, li.entries - 1))).append_time
    return None
