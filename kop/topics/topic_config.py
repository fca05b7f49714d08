"""Per-topic configs that the broker honours, with Kafka's names, types and validation.

Only configs that change behaviour here are accepted: a config a client sets must do what Kafka documents
(KoP accepted and ignored them, which made read-modify-write tools lie). Unknown names get INVALID_CONFIG.
Values are kept as strings (as Kafka's describe output shows them) and parsed where used.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from kop.config import BrokerConfig

# Kafka DescribeConfigs config_source values
SOURCE_DYNAMIC_TOPIC = 1
SOURCE_STATIC_BROKER = 4
SOURCE_DEFAULT = 5

# Kafka DescribeConfigs config_type values (v3+)
TYPE_BOOLEAN, TYPE_STRING, TYPE_INT, TYPE_SHORT, TYPE_LONG, TYPE_DOUBLE, TYPE_LIST = 1, 2, 3, 4, 5, 6, 7


class InvalidConfig(ValueError):
    pass


def _long(lo: int) -> Callable[[str], None]:
    def check(v: str) -> None:
        try:
            n = int(v)
        except ValueError:
            raise InvalidConfig(f"{v!r} is not a number") from None
        if n < lo:
            raise InvalidConfig(f"{n} is below the minimum {lo}")

    return check


def _ratio(v: str) -> None:
    try:
        x = float(v)
    except ValueError:
        raise InvalidConfig(f"{v!r} is not a number") from None
    if not 0.0 <= x <= 1.0:
        raise InvalidConfig(f"{x} is not between 0 and 1")


def _one_of(*allowed: str) -> Callable[[str], None]:
    def check(v: str) -> None:
        parts = [p.strip() for p in v.split(",")] if "," in v else [v.strip()]
        for p in parts:
            if p not in allowed:
                raise InvalidConfig(f"{p!r} is not one of {', '.join(allowed)}")

    return check


@dataclass(frozen=True, slots=True)
class TopicConfigDef:
    name: str
    type: int
    default: Callable[[BrokerConfig], str]
    check: Callable[[str], None]
    doc: str
    read_only: bool = False


TOPIC_CONFIGS: dict[str, TopicConfigDef] = {
    d.name: d
    for d in [
        TopicConfigDef(
            "retention.ms", TYPE_LONG, lambda c: str(c.default_retention_ms), _long(-1),
            "How long whole closed ledgers are kept before deletion (-1: forever).",
        ),
        TopicConfigDef(
            "retention.bytes", TYPE_LONG, lambda c: str(c.default_retention_bytes), _long(-1),
            "Per-partition size above which the oldest closed ledgers are deleted (-1: no limit).",
        ),
        TopicConfigDef(
            "max.message.bytes", TYPE_INT, lambda c: str(c.maxMessageSize), _long(0),
            "Largest record batch accepted by Produce (MESSAGE_TOO_LARGE above it).",
        ),
        TopicConfigDef(
            "cleanup.policy", TYPE_LIST, lambda c: "delete", _one_of("delete", "compact"),
            "delete: retention by time and size. compact: the log cleaner keeps the latest record of each key "
            "(kop/offset/compaction.py); both: 'compact,delete'.",
        ),
        TopicConfigDef(
            "delete.retention.ms", TYPE_LONG, lambda c: "86400000", _long(0),
            "How long tombstones are kept after the cleaner pass that first kept them (compacted topics).",
        ),
        TopicConfigDef(
            "min.cleanable.dirty.ratio", TYPE_DOUBLE, lambda c: "0.5", _ratio,
            "The cleaner compacts a partition once the uncleaned share of its closed ledgers' bytes exceeds this.",
        ),
        TopicConfigDef(
            "max.compaction.lag.ms", TYPE_LONG, lambda c: "9223372036854775807", _long(1),
            "The cleaner rolls and compacts the current ledger once its first entry is older than this.",
        ),
        TopicConfigDef(
            "message.timestamp.type", TYPE_STRING, lambda c: "CreateTime", _one_of("CreateTime", "LogAppendTime"),
            "CreateTime keeps the producer's timestamps; LogAppendTime stamps the broker time on append.",
        ),
        TopicConfigDef(
            "segment.bytes", TYPE_INT, lambda c: str(c.managedLedgerMaxSizePerLedgerMbytes * 1024 * 1024),
            _long(1), "Ledger rollover size (managedLedgerMaxSizePerLedgerMbytes); read-only per topic here.",
            read_only=True,
        ),
        TopicConfigDef(
            "segment.ms", TYPE_LONG, lambda c: str(c.managedLedgerMaxLedgerRolloverTimeMinutes * 60000), _long(1),
            "Ledger rollover age (managedLedgerMaxLedgerRolloverTimeMinutes); read-only per topic here.",
            read_only=True,
        ),
        TopicConfigDef(
            "min.insync.replicas", TYPE_INT, lambda c: "1", _long(1),
            "Accepted for compatibility; durability comes from the ledger store's write/ack quorums.",
        ),
    ]
}


def validate_topic_configs(configs: dict[str, str]) -> None:
    for name, value in configs.items():
        d = TOPIC_CONFIGS.get(name)
        if d is None:
            raise InvalidConfig(f"Unknown topic config name: {name}")
        if d.read_only:
            raise InvalidConfig(f"{name} cannot be set per topic on this broker")
        d.check(value)


def effective(configs: dict[str, str], name: str, broker: BrokerConfig) -> str:
    v = configs.get(name)
    return v if v is not None else TOPIC_CONFIGS[name].default(broker)
