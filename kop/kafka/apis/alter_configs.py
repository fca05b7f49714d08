"""AlterConfigs (key 33): v0-v2, the legacy whole-set replacement.

For a topic, the given configs become its complete set of topic-level configs (anything not named returns
to the broker default), as Kafka's legacy API defines. Values are validated and then honoured (retention,
max.message.bytes, timestamp type); KoP logged "ignoring" and answered success. Broker configs are static
here (set in the config file): altering them gets INVALID_REQUEST.
"""

from __future__ import annotations

from typing import Any

from kop.broker.topics import TopicError
from kop.kafka.apis.common import lookup_topic
from kop.kafka.apis.configs_common import RESOURCE_BROKER, RESOURCE_TOPIC
from kop.protocol import api_info
from kop.protocol.errors import ErrorCode

API_KEY = 33
VERSIONS = (0, 2)


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
        configs = {}
        for c in res.configs:
            if c.value is None:
                out.append(answer(ErrorCode.INVALID_CONFIG, f"Null value for {c.name}"))
                break
            configs[c.name] = c.value
        else:
            try:
                await h.service.topics.set_configs(topic, configs, validate_only=req.validate_only)
            except TopicError as e:
                out.append(answer(ErrorCode[e.error], e.message))
                continue
            out.append(answer(0))
    return R(throttle_time_ms=0, responses=out)
