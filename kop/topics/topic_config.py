"""Per-topic configs: every name Apache Kafka 4.x accepts, with Kafka's types, validation rules and messages.

The list and the rules are Kafka 4.x's (LogConfig's definitions, checked against a real 4.x broker by
tests/e2e/test_topic_configs.py): a framework that creates its internal topics with Kafka's configs (Kafka
Streams' changelog and repartition topics, Kafka Connect's config/offset/status topics) must be able to
start here. Unknown names still get INVALID_CONFIG, as on Kafka.

Each config is either honoured (`honoured=True`: it changes what this broker does, see `doc`) or accepted,
validated, stored and described but without effect here, because the mechanism it tunes does not exist on
a managed ledger (replica throttles, preallocation, index sizes, flush intervals, tiered storage
locals...). README.md lists both groups.

Beyond Kafka's list, two extensions (`extension=True`): Confluent Server's `confluent.value.schema.validation`
and `confluent.key.schema.validation` (issue #25: the broker refuses a Kafka record whose schema id is not
registered for the topic, kop/topics/write_rules.py). They are validated, stored, altered and described like
the others, except that DescribeConfigs and CreateTopics list an extension only when it is set on the topic (or
asked for by name): a plain topic then describes exactly as on Apache Kafka, which the differential tests
compare field by field, and Kafka's own tools never meet a name they do not know.

Values are kept as the client sent them (describe output shows them so, as Kafka does) and parsed where
used, through the helpers at the end.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass

from kop.config import BrokerConfig
from kop.managed_ledger import ManagedLedgerConfig

# Kafka DescribeConfigs config_source values
SOURCE_DYNAMIC_TOPIC = 1
SOURCE_STATIC_BROKER = 4
SOURCE_DEFAULT = 5

# Kafka DescribeConfigs config_type values (v3+)
TYPE_BOOLEAN, TYPE_STRING, TYPE_INT, TYPE_SHORT, TYPE_LONG, TYPE_DOUBLE, TYPE_LIST = 1, 2, 3, 4, 5, 6, 7

INT_MAX = 2**31 - 1
LONG_MAX = 2**63 - 1
# Kafka's default and upper bound of max.decompressed.message.bytes: the largest array a JVM allocates.
MAX_DECOMPRESSED_MESSAGE_BYTES = INT_MAX - 8
_TYPE_NAMES = {TYPE_INT: "INT", TYPE_LONG: "LONG", TYPE_DOUBLE: "DOUBLE"}
COMPRESSION_TYPES = ("uncompressed", "zstd", "lz4", "snappy", "gzip", "producer")


class InvalidConfig(ValueError):
    pass


def _bad(name: str, value: str, why: str) -> InvalidConfig:
    return InvalidConfig(f"Invalid value {value} for configuration {name}: {why}")


def _number(lo: float | None = None, hi: float | None = None) -> Callable[[TopicConfigDef, str], None]:
    """Kafka's atLeast / between on an INT, LONG or DOUBLE (the value is trimmed first, as Kafka parses)."""

    def check(d: TopicConfigDef, v: str) -> None:
        s = v.strip()
        try:
            x: float = float(s) if d.type == TYPE_DOUBLE else int(s, 10)
        except ValueError:
            raise _bad(d.name, v, f"Not a number of type {_TYPE_NAMES[d.type]}") from None
        top = INT_MAX if d.type == TYPE_INT else LONG_MAX
        if d.type != TYPE_DOUBLE and not -top - 1 <= x <= top:
            raise _bad(d.name, v, f"Not a number of type {_TYPE_NAMES[d.type]}")
        if lo is not None and x < lo:
            raise _bad(d.name, s, f"Value must be at least {_fmt(lo)}")
        if hi is not None and x > hi:
            raise _bad(d.name, s, f"Value must be no more than {_fmt(hi)}")

    return check


def _fmt(x: float) -> str:
    return str(int(x)) if float(x).is_integer() else str(x)


def _gzip_level(d: TopicConfigDef, v: str) -> None:
    _number()(d, v)
    n = int(v.strip())
    if n != -1 and not 1 <= n <= 9:
        raise _bad(d.name, v.strip(), "Value must be between 1 and 9 or equal to -1")


def _boolean(d: TopicConfigDef, v: str) -> None:
    if v.strip().lower() not in ("true", "false"):
        raise _bad(d.name, v, "Expected value to be either true or false")


def _one_of(*allowed: str) -> Callable[[TopicConfigDef, str], None]:
    def check(d: TopicConfigDef, v: str) -> None:
        if v.strip() not in allowed:
            raise _bad(d.name, v.strip(), f"String must be one of: {', '.join(allowed)}")

    return check


def _list_of(*allowed: str) -> Callable[[TopicConfigDef, str], None]:
    def check(d: TopicConfigDef, v: str) -> None:
        for item in split_list(v):
            if item not in allowed:
                raise _bad(d.name, item, f"String must be one of: {', '.join(allowed)}")

    return check


def _throttled_replicas(d: TopicConfigDef, v: str) -> None:
    """'*' or partition:broker pairs, as Kafka's ThrottledReplicaListValidator."""
    items = split_list(v)
    if items == ["*"]:
        return
    for item in items:
        p, sep, b = item.partition(":")
        if not (sep and p.strip().isdigit() and b.strip().isdigit()):
            raise _bad(d.name, "[" + ", ".join(items) + "]", f"{d.name} must be the literal '*' or a list of "
                       "replicas in the following format: [partitionId]:[brokerId],[partitionId]:[brokerId],...")


def _no_remote_storage(d: TopicConfigDef, v: str) -> None:
    _boolean(d, v)
    if v.strip().lower() == "true":
        raise InvalidConfig("Tiered Storage functionality is disabled in the broker. Topic cannot be configured "
                            "with remote log storage.")



@dataclass(frozen=True, slots=True)
class TopicConfigDef:
    name: str
    type: int
    default: Callable[[BrokerConfig], str]
    check: Callable[[TopicConfigDef, str], None]
    doc: str
    honoured: bool = True
    read_only: bool = False
    extension: bool = False  # not Apache Kafka's: described only when set or asked for (module docstring)


def _const(v: str) -> Callable[[BrokerConfig], str]:
    return lambda c: v


def _d(name: str, type_: int, default: Callable[[BrokerConfig], str], check: Callable[[TopicConfigDef, str], None],
       doc: str, honoured: bool = True) -> TopicConfigDef:
    return TopicConfigDef(name, type_, default, check, doc, honoured)


_NO_EFFECT = "Accepted and stored for compatibility; without effect here: "

TOPIC_CONFIGS: dict[str, TopicConfigDef] = {
    d.name: d
    for d in [
        # -- honoured ---------------------------------------------------------------------------------
        _d("retention.ms", TYPE_LONG, lambda c: str(c.default_retention_ms), _number(-1),
           "How long whole closed ledgers are kept before deletion (-1: forever)."),
        _d("retention.bytes", TYPE_LONG, lambda c: str(c.default_retention_bytes), _number(),
           "Per-partition size above which the oldest closed ledgers are deleted (-1: no limit)."),
        _d("max.message.bytes", TYPE_INT, lambda c: str(c.maxMessageSize), _number(0),
           "Largest record batch accepted by Produce (MESSAGE_TOO_LARGE above it)."),
        _d("cleanup.policy", TYPE_LIST, _const("delete"), _list_of("compact", "delete"),
           "delete: retention by time and size. compact: the log cleaner keeps the latest record of each key "
           "(kop/offset/compaction.py); both: 'compact,delete'."),
        _d("delete.retention.ms", TYPE_LONG, _const("86400000"), _number(0),
           "How long tombstones are kept after the cleaner pass that first kept them (compacted topics)."),
        _d("min.cleanable.dirty.ratio", TYPE_DOUBLE, _const("0.5"), _number(0, 1),
           "The cleaner compacts a partition once the uncleaned share of its closed ledgers' bytes exceeds this."),
        _d("min.compaction.lag.ms", TYPE_LONG, _const("0"), _number(0),
           "The cleaner compacts no record younger than this: a pass (which cleans every closed ledger) waits "
           "until the newest record it would clean is this old."),
        _d("max.compaction.lag.ms", TYPE_LONG, _const(str(LONG_MAX)), _number(1),
           "The cleaner rolls and compacts the current ledger once its first entry is older than this."),
        _d("message.timestamp.type", TYPE_STRING, _const("CreateTime"), _one_of("CreateTime", "LogAppendTime"),
           "CreateTime keeps the producer's timestamps; LogAppendTime stamps the broker time on append."),
        _d("message.timestamp.before.max.ms", TYPE_LONG, _const(str(LONG_MAX)), _number(0),
           "Produce refuses (INVALID_TIMESTAMP, per record) CreateTime records older than this."),
        _d("message.timestamp.after.max.ms", TYPE_LONG, _const("3600000"), _number(0),
           "Produce refuses (INVALID_TIMESTAMP, per record) CreateTime records further in the future than this."),
        _d("segment.bytes", TYPE_INT, lambda c: str(min(c.managedLedgerMaxSizePerLedgerMbytes << 20, INT_MAX)),
           _number(1 << 20), "A partition's current ledger is rolled over once it holds this many bytes."),
        _d("segment.ms", TYPE_LONG, lambda c: str(c.managedLedgerMaxLedgerRolloverTimeMinutes * 60000), _number(1),
           "A partition's current ledger is rolled over once it is this old (and holds a record)."),
        _d("compression.type", TYPE_STRING, _const("producer"), _one_of(*COMPRESSION_TYPES),
           "producer: batches are stored as sent. Any codec (or uncompressed): Produce recompresses batches "
           "in another codec, as Kafka does."),
        _d("compression.gzip.level", TYPE_INT, _const("-1"), _gzip_level,
           "Level of the broker's gzip recompression (compression.type=gzip)."),
        _d("compression.lz4.level", TYPE_INT, _const("9"), _number(1, 17),
           "Level of the broker's lz4 recompression (compression.type=lz4)."),
        _d("compression.zstd.level", TYPE_INT, _const("3"), _number(-131072, 22),
           "Level of the broker's zstd recompression (compression.type=zstd)."),
        _d("min.insync.replicas", TYPE_INT, _const("1"), _number(1),
           "Accepted for compatibility; durability comes from the ledger store's write/ack quorums.", False),
        # -- accepted, without effect ---------------------------------------------------------------------
        _d("segment.jitter.ms", TYPE_LONG, _const("0"), _number(0),
           _NO_EFFECT + "ledger ages are always jittered by up to 5%.", False),
        _d("segment.index.bytes", TYPE_INT, _const("10485760"), _number(4),
           _NO_EFFECT + "ledgers have no separate index files.", False),
        _d("index.interval.bytes", TYPE_INT, _const("4096"), _number(0),
           _NO_EFFECT + "ledgers have no separate index files.", False),
        _d("flush.messages", TYPE_LONG, _const(str(LONG_MAX)), _number(1),
           _NO_EFFECT + "every acknowledged append is durable under the ledger store's policy.", False),
        _d("flush.ms", TYPE_LONG, _const(str(LONG_MAX)), _number(0),
           _NO_EFFECT + "every acknowledged append is durable under the ledger store's policy.", False),
        _d("file.delete.delay.ms", TYPE_LONG, _const("60000"), _number(0),
           _NO_EFFECT + "deleted ledgers go at once (no reader holds a segment file).", False),
        _d("preallocate", TYPE_BOOLEAN, _const("false"), _boolean,
           _NO_EFFECT + "ledger files are not preallocated.", False),
        _d("unclean.leader.election.enable", TYPE_BOOLEAN, _const("false"), _boolean,
           _NO_EFFECT + "there are no out-of-sync replicas to elect.", False),
        _d("leader.replication.throttled.replicas", TYPE_LIST, _const(""), _throttled_replicas,
           _NO_EFFECT + "replication is the ledger store's, not Kafka replicas'.", False),
        _d("follower.replication.throttled.replicas", TYPE_LIST, _const(""), _throttled_replicas,
           _NO_EFFECT + "replication is the ledger store's, not Kafka replicas'.", False),
        _d("remote.storage.enable", TYPE_BOOLEAN, _const("false"), _no_remote_storage,
           "Tiered storage is not available: only false is accepted (as on a Kafka broker without it).", False),
        _d("local.retention.ms", TYPE_LONG, _const("-2"), _number(-2), _NO_EFFECT + "no tiered storage.", False),
        _d("local.retention.bytes", TYPE_LONG, _const("-2"), _number(-2), _NO_EFFECT + "no tiered storage.", False),
        _d("remote.log.copy.disable", TYPE_BOOLEAN, _const("false"), _boolean,
           _NO_EFFECT + "no tiered storage.", False),
        _d("remote.log.delete.on.disable", TYPE_BOOLEAN, _const("false"), _boolean,
           _NO_EFFECT + "no tiered storage.", False),
        # -- added in Apache Kafka 4.3 / 4.4 (LogConfig's definitions: types, defaults, ranges) ----------------
        # Kafka refuses a compressed batch holding a record whose decompressed body is larger (INVALID_RECORD,
        # "Invalid record size: N exceeds the configured maximum record size of M."); the write rules
        # (kop/topics/write_rules.py) enforce it for Kafka and Pulsar writers.
        _d("max.decompressed.message.bytes", TYPE_INT, _const(str(MAX_DECOMPRESSED_MESSAGE_BYTES)),
           _number(1, MAX_DECOMPRESSED_MESSAGE_BYTES),
           "The largest record body (decompressed) a compressed batch may hold: a batch with a larger record is "
           "refused as a whole (INVALID_RECORD). Uncompressed batches are not checked; at the default, batches "
           "are not decompressed for it."),
        # The cross-checks against local.retention.* that Kafka makes apply only with remote.storage.enable=true,
        # which is refused here; what remains is the range.
        _d("remote.copy.lag.ms", TYPE_LONG, _const("0"), _number(-1), _NO_EFFECT + "no tiered storage.", False),
        _d("remote.copy.lag.bytes", TYPE_LONG, _const("-1"), _number(-1), _NO_EFFECT + "no tiered storage.", False),
        _d("errors.deadletterqueue.group.enable", TYPE_BOOLEAN, _const("false"), _boolean,
           _NO_EFFECT + "whether share groups may use this topic as their dead-letter queue; this broker has no "
           "share groups yet.", False),
        # -- extensions (Confluent Server's names): not Apache Kafka's ----------------------------------------
        TopicConfigDef("confluent.value.schema.validation", TYPE_BOOLEAN, _const("false"), _boolean,
                       "true: Produce refuses (INVALID_RECORD, per record) a Kafka record whose non-null value does "
                       "not start with Confluent's prefix (magic byte 0, a 4-byte schema id) naming an id "
                       "registered under the subject <topic>-value.", extension=True),
        TopicConfigDef("confluent.key.schema.validation", TYPE_BOOLEAN, _const("false"), _boolean,
                       "true: Produce refuses (INVALID_RECORD, per record) a Kafka record whose non-null key does "
                       "not start with Confluent's prefix (magic byte 0, a 4-byte schema id) naming an id "
                       "registered under the subject <topic>-key.", extension=True),
    ]
}


def validate_topic_configs(configs: dict[str, str]) -> None:
    """Kafka's per-value checks, then its cross-config check (min.compaction.lag.ms <= max)."""
    for name, value in configs.items():
        d = TOPIC_CONFIGS.get(name)
        if d is None:
            raise InvalidConfig(f"Unknown topic config name: {name}")
        if d.read_only:
            raise InvalidConfig(f"{name} cannot be set per topic on this broker")
        d.check(d, value)
    lo = int(configs.get("min.compaction.lag.ms", "0").strip())
    hi = int(configs.get("max.compaction.lag.ms", str(LONG_MAX)).strip())
    if lo > hi:
        raise InvalidConfig(f"conflict topic config setting min.compaction.lag.ms ({lo}) > "
                            f"max.compaction.lag.ms ({hi})")


def described(configs: dict[str, str], asked: set[str] | None = None) -> list[tuple[str, TopicConfigDef]]:
    """The configs a DescribeConfigs or CreateTopics answer lists for a topic with `configs` set, by name:
    every one of Kafka's; an extension only when set on the topic or named in `asked` (module docstring)."""
    return [(name, d) for name, d in sorted(TOPIC_CONFIGS.items())
            if not d.extension or name in configs or (asked is not None and name in asked)]


def split_list(v: str) -> list[str]:
    """A LIST value's items, trimmed, as Kafka parses them ("" is the empty list)."""
    return [p.strip() for p in v.split(",")] if v.strip() else []


def effective(configs: dict[str, str], name: str, broker: BrokerConfig) -> str:
    """The topic's value, else the dynamic broker default (kop/topics/broker_configs.py), else the static one."""
    v = configs.get(name)
    if v is None:
        v = broker.dynamic_topic_defaults.get(name)
    return v.strip() if v is not None else TOPIC_CONFIGS[name].default(broker)


def effective_int(configs: dict[str, str], name: str, broker: BrokerConfig) -> int:
    return int(effective(configs, name, broker))


def ledger_config(configs: dict[str, str], base: ManagedLedgerConfig) -> ManagedLedgerConfig:
    """The managed-ledger settings of a topic's partitions: segment.bytes / segment.ms set on the topic
    replace the broker's rollover size and age, and then, as in Kafka, no minimum ledger age holds a
    rollover back (managedLedgerMinLedgerRolloverTimeMinutes is for the broker-wide defaults)."""
    if "segment.bytes" not in configs and "segment.ms" not in configs:
        return base
    changes: dict[str, float] = {"min_rollover_time_ms": 0}
    if "segment.bytes" in configs:
        changes["max_size_per_ledger_mb"] = int(configs["segment.bytes"].strip()) / (1 << 20)
    if "segment.ms" in configs:
        changes["max_rollover_time_ms"] = int(configs["segment.ms"].strip())
    return dataclasses.replace(base, **changes)  # type: ignore[arg-type]
