"""What DescribeConfigs / AlterConfigs / IncrementalAlterConfigs share: resource resolution, the broker's
read-only config view (Kafka names for KoP keys), and topic config entries with their synonyms."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

from kop.config import BrokerConfig
from kop.kafka import authorize
from kop.kafka.context import RequestContext
from kop.protocol.errors import ErrorCode
from kop.protocol.messages import (
    AlterConfigsRequest,
    AlterConfigsResponse,
    IncrementalAlterConfigsRequest,
    IncrementalAlterConfigsResponse,
)
from kop.topics.manager import Topic, TopicError
from kop.topics.topic_config import (
    SOURCE_DEFAULT,
    SOURCE_DYNAMIC_TOPIC,
    SOURCE_STATIC_BROKER,
    TOPIC_CONFIGS,
    TYPE_BOOLEAN,
    TYPE_DOUBLE,
    TYPE_INT,
    TYPE_LIST,
    TYPE_LONG,
    TYPE_STRING,
    described,
    effective,
)

RESOURCE_TOPIC = 2
RESOURCE_BROKER = 4
RESOURCE_BROKER_LOGGER = 8

# Broker-level synonym of each topic config, as Kafka names them (the configs without one have none on
# Kafka either: their broker default is only the topic default).
BROKER_SYNONYM = {
    "retention.ms": "log.retention.ms",
    "retention.bytes": "log.retention.bytes",
    "max.message.bytes": "message.max.bytes",
    "cleanup.policy": "log.cleanup.policy",
    "message.timestamp.type": "log.message.timestamp.type",
    "message.timestamp.before.max.ms": "log.message.timestamp.before.max.ms",
    "message.timestamp.after.max.ms": "log.message.timestamp.after.max.ms",
    "segment.bytes": "log.segment.bytes",
    "segment.ms": "log.roll.ms",
    "min.insync.replicas": "min.insync.replicas",
    "delete.retention.ms": "log.cleaner.delete.retention.ms",
    "min.cleanable.dirty.ratio": "log.cleaner.min.cleanable.ratio",
    "min.compaction.lag.ms": "log.cleaner.min.compaction.lag.ms",
    "max.compaction.lag.ms": "log.cleaner.max.compaction.lag.ms",
    "compression.type": "compression.type",
    "compression.gzip.level": "compression.gzip.level",
    "compression.lz4.level": "compression.lz4.level",
    "compression.zstd.level": "compression.zstd.level",
    "file.delete.delay.ms": "log.segment.delete.delay.ms",
    "flush.messages": "log.flush.interval.messages",
    "index.interval.bytes": "log.index.interval.bytes",
    "segment.index.bytes": "log.index.size.max.bytes",
    "preallocate": "log.preallocate",
    "unclean.leader.election.enable": "unclean.leader.election.enable",
    "local.retention.ms": "log.local.retention.ms",
    "local.retention.bytes": "log.local.retention.bytes",
    # Kafka 4.3 / 4.4 (ServerTopicConfigSynonyms); errors.deadletterqueue.group.enable has none.
    "max.decompressed.message.bytes": "max.decompressed.message.bytes",
    "remote.copy.lag.ms": "log.remote.copy.lag.ms",
    "remote.copy.lag.bytes": "log.remote.copy.lag.bytes",
}


def broker_configs(cfg: BrokerConfig) -> list[tuple[str, str, int, int]]:
    """(Kafka name, value, type, source) of the broker settings a Kafka tool may ask for; all static here.

    First the settings this broker's config file gives (STATIC_BROKER_CONFIG), under Kafka's names and with
    the types of Kafka 4.4's broker ConfigDef (listeners and log.cleanup.policy are LISTs; an INT is never
    described past 2^31-1: log.segment.bytes is the ledger rollover size, capped as the topic's segment.bytes
    is). Then the broker-level synonym of every other topic config, whose value is the topic default
    (DEFAULT_CONFIG: nothing here sets it), so each synonym a topic's description names is a broker config."""
    static = [
        ("broker.id", str(cfg.kafkaBrokerId), TYPE_INT),
        ("node.id", str(cfg.kafkaBrokerId), TYPE_INT),
        ("listeners", ",".join(str(x) for x in cfg.listeners), TYPE_LIST),
        ("advertised.listeners", ",".join(str(x) for x in cfg.advertised_listeners), TYPE_LIST),
        ("auto.create.topics.enable", str(cfg.allowAutoTopicCreation).lower(), TYPE_BOOLEAN),
        ("num.partitions", str(cfg.defaultNumPartitions), TYPE_INT),
        ("default.replication.factor", "1", TYPE_INT),
        ("delete.topic.enable", "true", TYPE_BOOLEAN),
        ("message.max.bytes", str(cfg.maxMessageSize), TYPE_INT),
        ("socket.request.max.bytes", str(cfg.socketRequestMaxBytes), TYPE_INT),
        ("connections.max.idle.ms", str(cfg.connectionMaxIdleMs), TYPE_LONG),
        ("log.retention.ms", str(cfg.default_retention_ms), TYPE_LONG),
        ("log.retention.bytes", str(cfg.default_retention_bytes), TYPE_LONG),
        ("log.cleanup.policy", "delete", TYPE_LIST),
        ("log.message.timestamp.type", "CreateTime", TYPE_STRING),
        ("log.segment.bytes", TOPIC_CONFIGS["segment.bytes"].default(cfg), TYPE_INT),
        ("log.roll.ms", str(cfg.managedLedgerMaxLedgerRolloverTimeMinutes * 60000), TYPE_LONG),
        ("min.insync.replicas", "1", TYPE_INT),
        ("log.cleaner.enable", str(cfg.logCleanerEnabled).lower(), TYPE_BOOLEAN),
        ("log.cleaner.backoff.ms", str(cfg.logCleanerIntervalMs), TYPE_LONG),
        ("log.cleaner.delete.retention.ms", "86400000", TYPE_LONG),
        ("log.cleaner.min.cleanable.ratio", "0.5", TYPE_DOUBLE),
        ("log.cleaner.max.compaction.lag.ms", "9223372036854775807", TYPE_LONG),
    ]
    out = [(name, value, ctype, SOURCE_STATIC_BROKER) for name, value, ctype in static]
    listed = {name for name, _, _ in static}
    for topic_name, broker_name in sorted(BROKER_SYNONYM.items(), key=lambda kv: kv[1]):
        if broker_name not in listed:
            d = TOPIC_CONFIGS[topic_name]
            out.append((broker_name, d.default(cfg), d.type, SOURCE_DEFAULT))
            listed.add(broker_name)
    return out


def topic_entries(
    topic_configs: dict[str, str], cfg: BrokerConfig, asked: set[str] | None = None
) -> list[tuple[str, str, bool, int, int, str, list[tuple[str, str, int]]]]:
    """(name, value, read_only, source, type, doc, synonyms) for every topic config described (extensions
    only when set or `asked` for: topic_config.described)."""
    out = []
    for name, d in described(topic_configs, asked):
        value = effective(topic_configs, name, cfg)
        default = d.default(cfg)
        synonyms: list[tuple[str, str, int]] = []
        if name in topic_configs:
            synonyms.append((name, topic_configs[name], SOURCE_DYNAMIC_TOPIC))
        if name in BROKER_SYNONYM:
            synonyms.append((BROKER_SYNONYM[name], default, SOURCE_DEFAULT))
        source = SOURCE_DYNAMIC_TOPIC if name in topic_configs else SOURCE_DEFAULT
        out.append((name, value, d.read_only, source, d.type, d.doc, synonyms))
    return out


def is_this_broker(resource_name: str, cfg: BrokerConfig) -> bool:
    return resource_name in ("", str(cfg.kafkaBrokerId))



class ConfigRequestError(Exception):
    """A resource's alteration is refused with this Kafka error code and message."""

    def __init__(self, error: int, message: str) -> None:
        super().__init__(message)
        self.error = error
        self.message = message


_Response = TypeVar("_Response", AlterConfigsResponse, IncrementalAlterConfigsResponse)


async def alter_topic_resources(
    ctx: RequestContext, req: AlterConfigsRequest | IncrementalAlterConfigsRequest, response_class: type[_Response],
    new_configs: Callable[[Topic, Any], dict[str, str]],
) -> _Response:
    """The resource loop AlterConfigs and IncrementalAlterConfigs share; they differ only in how a resource's
    entries turn into the topic's complete new config set (`new_configs`, which raises ConfigRequestError to
    refuse one resource). Broker configs are static here (the config file), so altering them is
    INVALID_REQUEST; each resource is answered on its own, as Kafka does."""
    h = ctx.handler
    R = response_class
    answers: list[tuple[int, str | None]] = []  # (error, message) per resource, in the request's order
    answer = answers.append
    for res in req.resources:
        refused = authorize.configs_refused(ctx, authorize.Op.ALTER_CONFIGS, res.resource_type, res.resource_name)
        if refused is not None:
            answer((refused, authorize.MESSAGES[refused]))
            continue
        if res.resource_type == RESOURCE_BROKER:
            answer((ErrorCode.INVALID_REQUEST, "Broker configs are static here; set them in the config file"))
            continue
        if res.resource_type != RESOURCE_TOPIC:
            answer((ErrorCode.INVALID_REQUEST, f"Resource type {res.resource_type} is not supported"))
            continue
        try:
            topic = await ctx.lookup_topic(res.resource_name, auto_create=False)
            if topic is None:
                raise ConfigRequestError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
                                         f"Topic {res.resource_name} does not exist")
            configs = new_configs(topic, res)
            await h.service.topics.set_configs(topic, configs, validate_only=req.validate_only)
        except TopicError as e:
            answer((ErrorCode[e.error], e.message))
        except ConfigRequestError as e:
            answer((e.error, e.message))
        else:
            answer((0, None))
    keys = [(res.resource_type, res.resource_name) for res in req.resources]
    return R(throttle_time_ms=0, responses=[
        R.AlterConfigsResourceResponse(error_code=err, error_message=msg, resource_type=rtype, resource_name=rname)
        for (rtype, rname), (err, msg) in zip(keys, answers, strict=True)])
