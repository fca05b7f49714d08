"""IncrementalAlterConfigs (key 44): v0-v1 (what kafka-configs --alter sends).

Operations SET (0), DELETE (1: back to the default), APPEND (2) and SUBTRACT (3) on list configs
(cleanup.policy). Topic configs are validated, stored and honoured; KoP answered UNSUPPORTED_VERSION.
Broker configs are static here: altering them gets INVALID_REQUEST.
"""

from __future__ import annotations

from functools import partial

from kop.config import BrokerConfig
from kop.kafka.apis.configs_common import ConfigRequestError, alter_topic_resources
from kop.kafka.context import RequestContext
from kop.protocol.errors import ErrorCode
from kop.protocol.messages import IncrementalAlterConfigsRequest, IncrementalAlterConfigsResponse
from kop.topics.manager import Topic
from kop.topics.topic_config import TOPIC_CONFIGS, TYPE_LIST, effective

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
            current = [v for v in effective(configs, c.name, broker_config).split(",") if v]
            items = [v.strip() for v in (c.value or "").split(",") if v.strip()]
            if op == APPEND:
                current += [v for v in items if v not in current]
            else:
                current = [v for v in current if v not in items]
            configs[c.name] = ",".join(current)
        else:
            raise ConfigRequestError(ErrorCode.INVALID_REQUEST, f"Unknown config operation {op}")
    return configs


async def handle(ctx: RequestContext, req: IncrementalAlterConfigsRequest) -> IncrementalAlterConfigsResponse:
    return await alter_topic_resources(ctx, req, IncrementalAlterConfigsResponse,
                                       partial(_apply_operations, ctx.config))
