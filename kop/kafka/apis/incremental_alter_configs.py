"""IncrementalAlterConfigs (key 44): v0-v1 (what kafka-configs --alter sends).

Operations SET (0), DELETE (1: back to the default), APPEND (2) and SUBTRACT (3) on list configs
(cleanup.policy). Topic configs are validated, stored and honoured; KoP answered UNSUPPORTED_VERSION.
Broker configs are static here: altering them gets INVALID_REQUEST.
"""

from __future__ import annotations

from typing import Any

from kop.broker.topic_config import TOPIC_CONFIGS, TYPE_LIST, effective
from kop.broker.topics import TopicError
from kop.kafka.apis.common import lookup_topic
from kop.kafka.apis.configs_common import RESOURCE_BROKER, RESOURCE_TOPIC
from kop.protocol import api_info
from kop.protocol.errors import ErrorCode

API_KEY = 44
VERSIONS = (0, 1)
SET, DELETE, APPEND, SUBTRACT = 0, 1, 2, 3


async def handle(conn: Any, header: Any, req: Any) -> Any:
    h = conn.handler
    R = api_info(API_KEY).response_class
    out = []
    for res in req.resources:
        def answer(err: int, msg: str | None = None, res: Any = res) -> Any:
            return R.AlterConfigsResourceResponse(
                error_code=err, error_message=msg, resource_type=res.resource_type, resource_name=res.resource_name,
            )

        if res.resource_type == RESOURCE_BROKER:
            out.append(answer(ErrorCode.INVALID_REQUEST, "Broker configs are static here; set them in the config file"))
            continue
        if res.resource_type != RESOURCE_TOPIC:
            out.append(answer(ErrorCode.INVALID_REQUEST, f"Resource type {res.resource_type} is not supported"))
            continue
        try:
            topic = await lookup_topic(h, res.resource_name, auto_create=False)
        except TopicError as e:
            out.append(answer(ErrorCode[e.error], e.message))
            continue
        if topic is None:
            out.append(answer(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"Topic {res.resource_name} does not exist"))
            continue
        configs = dict(topic.configs)
        error = None
        for c in res.configs:
            d = TOPIC_CONFIGS.get(c.name)
            if d is None:
                error = f"Unknown topic config name: {c.name}"
                break
            op = c.config_operation
            if op == SET:
                if c.value is None:
                    error = f"Null value for {c.name}"
                    break
                configs[c.name] = c.value
            elif op == DELETE:
                configs.pop(c.name, None)
            elif op in (APPEND, SUBTRACT):
                if d.type != TYPE_LIST:
                    error = f"Config {c.name} is not a list; APPEND/SUBTRACT do not apply"
                    break
                current = [v for v in effective(configs, c.name, h.config).split(",") if v]
                items = [v.strip() for v in (c.value or "").split(",") if v.strip()]
                if op == APPEND:
                    current += [v for v in items if v not in current]
                else:
                    current = [v for v in current if v not in items]
                configs[c.name] = ",".join(current)
            else:
                error = f"Unknown config operation {op}"
                break
        if error:
            out.append(answer(ErrorCode.INVALID_CONFIG if "operation" not in error else ErrorCode.INVALID_REQUEST, error))
            continue
        try:
            await h.service.topics.set_configs(topic, configs, validate_only=req.validate_only)
        except TopicError as e:
            out.append(answer(ErrorCode[e.error], e.message))
            continue
        out.append(answer(0))
    return R(throttle_time_ms=0, responses=out)
