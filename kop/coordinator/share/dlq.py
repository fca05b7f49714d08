"""The dead-letter queue of share groups (KIP-1191, share.version 2 in Apache Kafka 4.4): where a share group's
REJECTed records and those archived at the delivery-count limit are written, one DLQ record per offset.

When: the feature share.version is finalized at 2 (kop/topics/features.py; Kafka's ShareVersion.SV_2) and the
group config errors.deadletterqueue.topic.name is set. Then the share-partitions of the group list such
records (partition.py's `dead`) and the coordinator hands them here after each change.

What is written, as Kafka 4.4's ShareGroupDLQStateManager writes it: to partition (source partition mod the DLQ
topic's partition count), one uncompressed batch, a record per offset with the time of the write as its
timestamp and the headers __dlq.errors.topic (the source topic's name), __dlq.errors.partition,
__dlq.errors.offset, __dlq.errors.group, __dlq.errors.delivery.count and __dlq.errors.message ("Offset
rejected by client." / "Offset delivery count exceeded the threshold."), all as UTF-8 strings. The record's
key and value are the original record's with the group config errors.deadletterqueue.copy.record.enable=true,
else null; the original record's headers are not copied.

Which topic: Kafka's checks, each a refusal that is logged and drops the records (they stay ARCHIVED, as
Kafka "proceeding to ARCHIVED regardless"): a name starting with "__", a name without the broker's
errors.deadletterqueue.topic.name.prefix ("dlq.", Kafka's default), a topic that does not exist
(errors.deadletterqueue.auto.create.topics.enable is false in Kafka by default, and not served here), or one
whose topic config errors.deadletterqueue.group.enable is not true.

How it differs from Kafka 4.4: the records are ARCHIVED at once and written after (Kafka keeps them ARCHIVING
until the DLQ write completes), so a broker killed in between loses their DLQ records; the prefix and the
auto-creation are Kafka's defaults, not broker configs; names are in the default tenant and namespace.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

from kop.coordinator.share.partition import DeadRun
from kop.offset.api import OffsetOutOfRange
from kop.protocol.records import NewRecord, build_batch, decode_records
from kop.topics.manager import Topic, TopicError, TopicManager
from kop.topics.partition import Writer
from kop.topics.write_rules import AppendRefused

log = logging.getLogger(__name__)

TOPIC_NAME = "errors.deadletterqueue.topic.name"
COPY_RECORD = "errors.deadletterqueue.copy.record.enable"
TOPIC_ENABLE = "errors.deadletterqueue.group.enable"  # the DLQ topic's own config
PREFIX = "dlq."
SHARE_VERSION_DLQ = 2


def refusal(group_id: str, name: str, topic: Topic | None) -> str | None:
    """Kafka's message when `name` cannot be this group's DLQ topic (`topic`: the topic by that name, if any)."""
    if not name:
        return f"Configured DLQ topic name in share group: {group_id} is empty."
    if name.startswith("__"):
        return f"Configured DLQ topic name in share group: {group_id} cannot start with __, topic: {name}."
    if PREFIX and not name.startswith(PREFIX):
        return (f"Configured DLQ topic name does not comply with the DLQ topic prefix in share group: {group_id}, "
                f"topic: {name}, prefix: {PREFIX}.")
    if topic is None:
        return (f"DLQ topic does not exist and auto create is disabled on cluster for share group: {group_id}, "
                f"topic: {name}.")
    if topic.configs.get(TOPIC_ENABLE, "false").lower() != "true":
        return f"DLQ is not enabled on configured DLQ topic for share group: {group_id}, topic: {name}."
    return None


def dlq_records(group_id: str, source_topic: str, partition: int, runs: list[DeadRun],
                originals: dict[int, tuple[bytes | None, bytes | None]], now_ms: int) -> list[NewRecord]:
    """The DLQ records of `runs` (sans-IO): `originals` holds the key and value by offset when copied."""
    out = []
    for first, last, count, cause in runs:
        for off in range(first, last + 1):
            key, value = originals.get(off, (None, None))
            headers = [("__dlq.errors.topic", source_topic), ("__dlq.errors.partition", str(partition)),
                       ("__dlq.errors.offset", str(off)), ("__dlq.errors.group", group_id),
                       ("__dlq.errors.delivery.count", str(count)), ("__dlq.errors.message", cause)]
            out.append(NewRecord(key, value, [(k, v.encode()) for k, v in headers], now_ms))
    return out


class DeadLetterQueue:
    """Writes dead records to the DLQ topics through the topic manager (the broker's own partitions)."""

    def __init__(self, topics: TopicManager, share_version: Callable[[], int]) -> None:
        self.topics = topics
        self.share_version = share_version

    def enabled(self, topic_name: str) -> bool:
        return bool(topic_name) and self.share_version() >= SHARE_VERSION_DLQ

    async def _originals(self, source: Topic, partition: int, runs: list[DeadRun]
                         ) -> dict[int, tuple[bytes | None, bytes | None]]:
        """The key and value of each dead offset, read back from the source partition."""
        wanted = {off for first, last, _, _ in runs for off in range(first, last + 1)}
        out: dict[int, tuple[bytes | None, bytes | None]] = {}
        plog = await self.topics.partition_log(source, partition)
        offset, end = min(wanted), max(wanted) + 1
        while offset < end:
            try:
                res = await plog.read(offset, 1 << 20, min_one=True)
            except OffsetOutOfRange:
                break
            if not res.batches:
                break
            for fb in res.batches:
                for r in decode_records(fb.batch):
                    off = fb.base_offset + r.offset_delta
                    if off in wanted:
                        out[off] = (r.key, r.value)
                offset = max(offset, fb.last_offset + 1)
        return out

    async def write(self, group_id: str, topic_id: bytes, partition: int, runs: list[DeadRun], dlq_topic: str,
                    copy: bool) -> None:
        """Write the DLQ records of `runs`; a refused topic or a failed write is logged (the records stay
        archived, as in Kafka)."""
        source = self.topics.get_by_id(topic_id)
        if source is None or not runs:
            return
        target = self.topics.get(self.topics.parse(dlq_topic))
        why = refusal(group_id, dlq_topic, target)
        if why is not None or target is None:
            log.warning("share group DLQ: %s", why)
            return
        try:
            originals = await self._originals(source, partition, runs) if copy else {}
            records = dlq_records(group_id, self.topics.kafka_name(source.name), partition, runs, originals,
                                  int(time.time() * 1000))
            part = await self.topics.partition(target, partition % target.partitions)
            await part.append(build_batch(records), Writer.KAFKA)
        except (TopicError, AppendRefused) as e:
            log.warning("share group DLQ: records of %s-%d not written to %s: %s", group_id, partition, dlq_topic, e)
