"""What DescribeConfigs / AlterConfigs / IncrementalAlterConfigs share: resource resolution, the broker's
config view (Kafka names for KoP keys, with the dynamic broker configs of kop/topics/broker_configs.py over
them), and topic config entries with their synonyms in Kafka's order."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

from kop.config import BrokerConfig
from kop.kafka import authorize
from kop.kafka.apis import client_metrics_configs
from kop.kafka.context import RequestContext
from kop.protocol.errors import ErrorCode
from kop.protocol.messages import (
    AlterConfigsRequest,
    AlterConfigsResponse,
    IncrementalAlterConfigsRequest,
    IncrementalAlterConfigsResponse,
)
from kop.topics.broker_configs import BROKER_SYNONYM, DYNAMIC, BrokerConfigError, BrokerConfigs, is_dynamic
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
RESOURCE_GROUP = 32
RESOURCE_BROKER_LOGGER = 8



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


SOURCE_DYNAMIC_BROKER = 2  # Kafka's DYNAMIC_BROKER_CONFIG: set for this broker
SOURCE_DYNAMIC_DEFAULT_BROKER = 3  # DYNAMIC_DEFAULT_BROKER_CONFIG: the cluster-wide dynamic default
_TYPE_IDS = {"BOOLEAN": 1, "STRING": 2, "INT": 3, "SHORT": 4, "LONG": 5, "DOUBLE": 6, "LIST": 7, "CLASS": 8,
             "PASSWORD": 9}

Synonyms = list[tuple[str, str | None, int]]
# (name, value, read_only, source, type, sensitive, synonyms) of one broker config entry
BrokerEntry = tuple[str, str | None, bool, int, int, bool, Synonyms]


def _dynamic_synonyms(name: str, dyn: BrokerConfigs | None, per_broker: bool = True) -> Synonyms:
    """The dynamic layers of a broker config, highest precedence first (Kafka's ConfigHelper.configSynonyms)."""
    out: Synonyms = []
    if dyn is not None:
        if per_broker and name in dyn.own:
            out.append((name, dyn.own[name], SOURCE_DYNAMIC_BROKER))
        if name in dyn.default:
            out.append((name, dyn.default[name], SOURCE_DYNAMIC_DEFAULT_BROKER))
    return out


def broker_entries(cfg: BrokerConfig, dyn: BrokerConfigs, resource_name: str) -> list[BrokerEntry]:
    """A BROKER resource's description, as Kafka's ConfigHelper builds it. This broker's id: every config of
    broker_configs plus the dynamic ones set, each valued by its highest layer (per-broker dynamic, cluster
    dynamic default, the config file, the default) with those layers as synonyms in that order. "": only the
    cluster-wide dynamic defaults (DYNAMIC_DEFAULT_BROKER_CONFIG). Read-only = not dynamic on Kafka; a PASSWORD
    (or a custom name, whose type nobody knows) is sensitive: no value, as Kafka answers."""
    out: list[BrokerEntry] = []

    def entry(name: str, ctype: int, syns: Synonyms) -> None:
        sensitive = ctype in (0, 9)
        if sensitive:
            syns = [(n, None, src) for n, _, src in syns]
        out.append((name, syns[0][1], not is_dynamic(name), syns[0][2], ctype, sensitive, syns))

    def type_of(name: str) -> int:
        kind = DYNAMIC.get(name)
        return _TYPE_IDS[kind[0]] if kind else 0

    if resource_name == "":
        for name in sorted(dyn.default):
            entry(name, type_of(name), _dynamic_synonyms(name, dyn, per_broker=False))
        return out
    listed = set()
    for name, value, ctype, source in broker_configs(cfg):
        entry(name, ctype, [*_dynamic_synonyms(name, dyn), (name, value, source)])
        listed.add(name)
    for name in sorted({**dyn.default, **dyn.own}):
        if name not in listed and name in DYNAMIC:
            entry(name, type_of(name), _dynamic_synonyms(name, dyn))
    return out


def topic_entries(
    topic_configs: dict[str, str], cfg: BrokerConfig, asked: set[str] | None = None,
    dyn: BrokerConfigs | None = None,
) -> list[tuple[str, str, bool, int, int, str, Synonyms]]:
    """(name, value, read_only, source, type, doc, synonyms) for every topic config described (extensions
    only when set or `asked` for: topic_config.described): synonyms in Kafka's order (the topic's value, then
    its broker-level synonym's dynamic per-broker, dynamic default and default values); the source is the
    first synonym's."""
    out = []
    for name, d in described(topic_configs, asked):
        value = effective(topic_configs, name, cfg)
        synonyms: Synonyms = []
        if name in topic_configs:
            synonyms.append((name, topic_configs[name], SOURCE_DYNAMIC_TOPIC))
        if name in BROKER_SYNONYM:
            synonyms += _dynamic_synonyms(BROKER_SYNONYM[name], dyn)
            synonyms.append((BROKER_SYNONYM[name], d.default(cfg), SOURCE_DEFAULT))
        source = synonyms[0][2] if synonyms else SOURCE_DEFAULT
        out.append((name, value, d.read_only, source, d.type, d.doc, synonyms))
    return out


class ConfigRequestError(Exception):
    """A resource's alteration is refused with this Kafka error code and message."""

    def __init__(self, error: int, message: str) -> None:
        super().__init__(message)
        self.error = error
        self.message = message


def broker_request_checks(names: list[str], null_values: list[str]) -> None:
    """Kafka's ConfigAdminManager.preprocess checks of a BROKER resource's entries."""
    if len(set(names)) != len(names):
        raise ConfigRequestError(ErrorCode.INVALID_REQUEST, "Error due to duplicate config keys")
    if null_values:
        raise ConfigRequestError(ErrorCode.INVALID_REQUEST,
                                 "Null value not supported for : " + ", ".join(null_values))


_Response = TypeVar("_Response", AlterConfigsResponse, IncrementalAlterConfigsResponse)


async def alter_resources(
    ctx: RequestContext, req: AlterConfigsRequest | IncrementalAlterConfigsRequest, response_class: type[_Response],
    new_configs: Callable[[Topic, Any], dict[str, str]],
    new_broker_configs: Callable[[dict[str, str], Any], dict[str, str]],
) -> _Response:
    """The resource loop AlterConfigs and IncrementalAlterConfigs share; they differ only in how a resource's
    entries turn into its complete new config set (`new_configs` for a topic, `new_broker_configs` from a
    BROKER resource's current dynamic configs), which raise ConfigRequestError to refuse one resource. A
    BROKER resource is this broker's id or "" (every broker's default; kop/topics/broker_configs.py validates,
    stores and applies); each resource is answered on its own, as Kafka does."""
    h = ctx.handler
    R = response_class
    answers: list[tuple[int, str | None]] = []  # (error, message) per resource, in the request's order
    answer = answers.append
    for res in req.resources:
        refused = authorize.configs_refused(ctx, authorize.Op.ALTER_CONFIGS, res.resource_type, res.resource_name)
        if refused is not None:
            # Kafka 4.4 refuses a BROKER resource before forwarding (ConfigAdminManager.preprocess): its
            # ClusterAuthorizationException carries the default message, which ApiError.fromThrowable drops; its
            # controller refuses a CLIENT_METRICS resource with ApiError(CLUSTER_AUTHORIZATION_FAILED), the message kept
            answer((refused, None if res.resource_type == RESOURCE_BROKER else authorize.MESSAGES[refused]))
            continue
        if res.resource_type == RESOURCE_GROUP and isinstance(res, IncrementalAlterConfigsRequest.AlterConfigsResource):
            from kop.kafka.apis import group_configs  # share group configs (KIP-932); it imports this module

            try:
                group_configs.alter(h.share, ctx.names.global_id(res.resource_name),
                                    [(c.name, c.config_operation, c.value) for c in res.configs], req.validate_only)
            except ConfigRequestError as e:
                answer((e.error, e.message))
            else:
                await h.share.flush()  # durable (the metadata store) before the answer
                answer((0, None))
            continue
        if res.resource_type == client_metrics_configs.RESOURCE_CLIENT_METRICS:
            answer(await client_metrics_configs.alter(h.service.broker_configs.store, res, req.validate_only))
            continue
        if res.resource_type not in (RESOURCE_TOPIC, RESOURCE_BROKER):
            answer((ErrorCode.INVALID_REQUEST, f"Resource type {res.resource_type} is not supported"))
            continue
        try:
            if res.resource_type == RESOURCE_BROKER:
                entries: Any = res

                def change(current: dict[str, str], entries: Any = entries) -> dict[str, str]:
                    return new_broker_configs(current, entries)

                await h.service.broker_configs.alter(res.resource_name, change, validate_only=req.validate_only)
                answer((0, None))
                continue
            topic = await ctx.lookup_topic(res.resource_name, auto_create=False)
            if topic is None:
                raise ConfigRequestError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
                                         f"Topic {res.resource_name} does not exist")
            configs = new_configs(topic, res)
            await h.service.topics.set_configs(topic, configs, validate_only=req.validate_only)
        except TopicError as e:
            answer((ErrorCode[e.error], e.message))
        except BrokerConfigError as e:
            answer((ErrorCode[e.error], e.message))
        except ConfigRequestError as e:
            answer((e.error, e.message))
        else:
            answer((0, None))
    keys = [(res.resource_type, res.resource_name) for res in req.resources]
    return R(throttle_time_ms=0, responses=[
        R.AlterConfigsResourceResponse(error_code=err, error_message=msg, resource_type=rtype, resource_name=rname)
        for (rtype, rname), (err, msg) in zip(keys, answers, strict=True)])
