"""What the pipeline jobs ask the broker directly, outside Spark: partitions, log start / end offsets and the
topic's cleanup.policy (kafka-python's admin client: Metadata, ListOffsets, DescribeConfigs).

Spark resolves `earliest` and `latest` itself and does not tell the job what it resolved them to. The audit
needs those numbers to know which offsets it *expected* to see, so it asks first and hands Spark explicit
offsets: what Spark reads and what the audit compares against are then the same range by construction.
cleanup.policy decides whether a hole inside the retained log is compaction at work or data loss.

Offset JSON follows Spark's startingOffsets format: {"topic": {"partition": offset}} with -2 = earliest and
-1 = latest; for one topic the bare {"partition": offset} form is accepted too.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

EARLIEST = -2
LATEST = -1


class PipelineError(Exception):
    """A problem with what the user asked for (unknown topic, bad offsets JSON, ...): reported, not a traceback."""


@dataclass(frozen=True, slots=True)
class TopicSnapshot:
    """A topic's partitions and their [log start, log end) offsets at one moment, plus its cleanup.policy."""

    topic: str
    cleanup_policy: str
    log_start: dict[int, int]
    log_end: dict[int, int]

    @property
    def partitions(self) -> list[int]:
        return sorted(self.log_end)

    @property
    def compacted(self) -> bool:
        return "compact" in self.cleanup_policy.replace(" ", "").split(",")


def _admin(bootstrap: str) -> Any:
    from kafka.admin import KafkaAdminClient

    return KafkaAdminClient(bootstrap_servers=bootstrap, client_id="kop-pipeline", request_timeout_ms=30000)


def snapshot_topic(bootstrap: str, topic: str) -> TopicSnapshot:
    """Partitions, earliest and latest offsets, and cleanup.policy of `topic`."""
    from kafka import TopicPartition
    from kafka.admin import ConfigResource, ConfigResourceType, OffsetSpec
    from kafka.errors import KafkaError

    admin = _admin(bootstrap)
    try:
        try:
            described = admin.describe_topics([topic])
        except KafkaError as e:
            raise PipelineError(f"topic {topic!r}: {e}") from e
        if not described or described[0].get("error_code", 0) != 0:
            code = described[0].get("error_code") if described else "no answer"
            raise PipelineError(f"topic {topic!r} does not exist at {bootstrap} (Metadata error {code})")
        partitions = sorted(p["partition_index"] for p in described[0]["partitions"])
        tps = [TopicPartition(topic, p) for p in partitions]
        earliest = admin.list_partition_offsets({tp: OffsetSpec.EARLIEST for tp in tps})
        latest = admin.list_partition_offsets({tp: OffsetSpec.LATEST for tp in tps})
        configs = admin.describe_configs(
            [ConfigResource(ConfigResourceType.TOPIC, topic, ["cleanup.policy"])], config_filter="all"
        )
        entry = configs.get("topic", {}).get(topic, {}).get("cleanup.policy")
        policy = str(entry["value"]) if entry and entry.get("value") is not None else "delete"
        return TopicSnapshot(
            topic=topic,
            cleanup_policy=policy,
            log_start={tp.partition: earliest[tp].offset for tp in tps},
            log_end={tp.partition: latest[tp].offset for tp in tps},
        )
    finally:
        admin.close()


def parse_offsets_json(text: str | None, topic: str) -> dict[int, int]:
    """{"partition": offset} for `topic` from Spark-style offsets JSON (or the bare per-partition form)."""
    if text is None or not text.strip():
        return {}
    try:
        data = json.loads(text)
    except json.JSONDecodeError as e:
        raise PipelineError(f"offsets JSON {text!r}: {e}") from e
    if not isinstance(data, dict):
        raise PipelineError(f"offsets JSON {text!r}: expected an object")
    if topic in data and isinstance(data[topic], dict):
        data = data[topic]
    elif data and all(isinstance(v, dict) for v in data.values()):
        raise PipelineError(f"offsets JSON {text!r} names topics {sorted(data)}, not {topic!r}")
    out: dict[int, int] = {}
    for k, v in data.items():
        try:
            p, o = int(k), int(v)
        except (TypeError, ValueError) as e:
            raise PipelineError(f"offsets JSON {text!r}: partition {k!r} -> {v!r} is not integer -> integer") from e
        if o < EARLIEST:
            raise PipelineError(f"offsets JSON: partition {p} offset {o} (use -2 for earliest, -1 for latest)")
        out[p] = o
    return out


def resolve_range(
    snap: TopicSnapshot, from_offsets: dict[int, int], to_offsets: dict[int, int]
) -> dict[int, tuple[int, int]]:
    """Per partition the half-open offset range [start, end) to read: earliest/latest by default, -2/-1 in
    the JSON resolved against the snapshot. Starting below the log start is allowed (that is how an operator
    asks "is anything missing since offset 0?"); reading past the log end is not, as nothing can be there."""
    unknown = sorted((set(from_offsets) | set(to_offsets)) - set(snap.partitions))
    if unknown:
        raise PipelineError(f"topic {snap.topic!r} has partitions {snap.partitions}, not {unknown}")

    def resolve(value: int, p: int) -> int:
        return snap.log_start[p] if value == EARLIEST else snap.log_end[p] if value == LATEST else value

    out: dict[int, tuple[int, int]] = {}
    for p in snap.partitions:
        start = resolve(from_offsets.get(p, EARLIEST), p)
        end = resolve(to_offsets.get(p, LATEST), p)
        if end > snap.log_end[p]:
            raise PipelineError(f"partition {p}: end offset {end} is past the log end offset {snap.log_end[p]}")
        if start > end:
            raise PipelineError(f"partition {p}: start offset {start} is after the end offset {end}")
        out[p] = (start, end)
    return out
