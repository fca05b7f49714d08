"""IncrementalAlterConfigs (key 44): v0-v1 (what kafka-configs --alter sends).

Operations SET (0), DELETE (1: back to the default), APPEND (2) and SUBTRACT (3) on list configs
(cleanup.policy). Topic configs are validated, stored and honoured; KoP answered UNSUPPORTED_VERSION.
BROKER resources (this broker's id, or "" for every broker's default: kafka-configs --alter --broker N /
--broker-defaults) change the dynamic broker configs, validated, stored and applied as
kop/topics/broker_configs.py says; the operations are Kafka's (APPEND / SUBTRACT on LIST configs only).
"""

from __future__ import annotations

from functools import partial

from kop.config import BrokerConfig
from kop.kafka.apis.configs_common import ConfigRequestError, alter_resources, broker_request_checks
from kop.kafka.context import RequestContext
from kop.protocol.errors import ErrorCode
from kop.protocol.messages import IncrementalAlterConfigsRequest, IncrementalAlterConfigsResponse
from kop.topics.broker_configs import TOPIC_OF, kafka_type
from kop.topics.manager import Topic
from kop.topics.topic_config import TOPIC_CONFIGS, TYPE_LIST, effective, split_list

API_KEY = 44
VERSIONS = (0, 1)
SET, DELETE, APPEND, SUBTRACT = 0, 1, 2, 3


def _apply_operations(broker_config: BrokerConfig, topic: Topic,
                      res: IncrementalAlterConfigsRequest.AlterConfigsResource) -> dict[str, str]:
    """The topic's configs after the resource's operations, applied in request order."""
    configs = dict(topic.configs)
    for c in res.configs:
        d = TOPIC_CONFIGS.get(c.name)
        if d is None:
            raise ConfigRequestError(ErrorCode.INVALID_CONFIG, f"Unknown topic config name: {c.name}")
        op = c.config_operation
        if op == SET:
            if c.value is None:
                raise ConfigRequestError(ErrorCode.INVALID_CONFIG, f"Null value for {c.name}")
            configs[c.name] = c.value
        elif op == DELETE:
            configs.pop(c.name, None)
        elif op in (APPEND, SUBTRACT):
            if d.type != TYPE_LIST:
                raise ConfigRequestError(ErrorCode.INVALID_CONFIG,
                                         f"Config {c.name} is not a list; APPEND/SUBTRACT do not apply")
            configs[c.name] = _list_operation(op, effective(configs, c.name, broker_config), c.value)
        else:
            raise ConfigRequestError(ErrorCode.INVALID_REQUEST, f"Unknown config operation {op}")
    return configs


def _apply_broker_operations(broker_config: BrokerConfig, current: dict[str, str],
                             res: IncrementalAlterConfigsRequest.AlterConfigsResource) -> dict[str, str]:
    """A BROKER resource's dynamic configs after its operations (Kafka's ConfigAdminManager.preprocess and
    prepareIncrementalConfigs: duplicate names and null values refused first, APPEND / SUBTRACT on a LIST from
    its stored value, else its default)."""
    broker_request_checks([c.name for c in res.configs],
                          [c.name for c in res.configs if c.config_operation != DELETE and c.value is None])
    for c in res.configs:
        op = c.config_operation
        if op == SET:
            current[c.name] = c.value or ""
        elif op == DELETE:
            current.pop(c.name, None)
        elif op in (APPEND, SUBTRACT):
            if kafka_type(c.name) != "LIST":
                verb = "append" if op == APPEND else "subtract"
                raise ConfigRequestError(ErrorCode.INVALID_CONFIG,
                                         f"Config value {verb} is not allowed for config key: {c.name}")
            old = current.get(c.name)
            if old is None:
                topic_name = TOPIC_OF.get(c.name)
                old = TOPIC_CONFIGS[topic_name].default(broker_config) if topic_name else ""
            current[c.name] = _list_operation(op, old, c.value)
        else:
            raise ConfigRequestError(ErrorCode.INVALID_REQUEST, f"Unknown operations type {op}")
    return current


def _list_operation(op: int, current: str, value: str | None) -> str:
    """APPEND (the items not there yet, at the end) or SUBTRACT (every copy of the items) on a LIST config's
    comma-separated value, as Kafka applies them to topic and broker configs alike."""
    items, given = split_list(current), split_list(value or "")
    if op == APPEND:
        return ",".join(items + [v for v in given if v not in items])
    return ",".join(v for v in items if v not in given)


async def handle(ctx: RequestContext, req: IncrementalAlterConfigsRequest) -> IncrementalAlterConfigsResponse:
    return await alter_resources(ctx, req, IncrementalAlterConfigsResponse, partial(_apply_operations, ctx.config),
                                 partial(_apply_broker_operations, ctx.config))
