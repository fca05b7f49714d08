"""AlterConfigs (key 33): v0-v2, the legacy whole-set replacement.

For a topic, the given configs become its complete set of topic-level configs (anything not named returns
to the broker default), as Kafka's legacy API defines. Values are validated and then honoured (retention,
max.message.bytes, timestamp type); KoP logged "ignoring" and answered success. For a BROKER resource
(this broker's id, or "" for every broker's default) the named configs likewise become the resource's whole
set of dynamic broker configs, validated, stored and applied as kop/topics/broker_configs.py says.
"""

from __future__ import annotations

from kop.kafka.apis.configs_common import ConfigRequestError, alter_resources, broker_request_checks
from kop.kafka.context import RequestContext
from kop.protocol.errors import ErrorCode
from kop.protocol.messages import AlterConfigsRequest, AlterConfigsResponse
from kop.topics.manager import Topic

API_KEY = 33
VERSIONS = (0, 2)


def _whole_set(topic: Topic, res: AlterConfigsRequest.AlterConfigsResource) -> dict[str, str]:
    """The named configs are the topic's complete set (legacy semantics)."""
    configs = {}
    for c in res.configs:
        if c.value is None:
            raise ConfigRequestError(ErrorCode.INVALID_CONFIG, f"Null value for {c.name}")
        configs[c.name] = c.value
    return configs


def _whole_broker_set(current: dict[str, str], res: AlterConfigsRequest.AlterConfigsResource) -> dict[str, str]:
    """The named configs replace the resource's dynamic broker configs (Kafka's legacy semantics)."""
    broker_request_checks([c.name for c in res.configs], [c.name for c in res.configs if c.value is None])
    return {c.name: c.value for c in res.configs if c.value is not None}


async def handle(ctx: RequestContext, req: AlterConfigsRequest) -> AlterConfigsResponse:
    return await alter_resources(ctx, req, AlterConfigsResponse, _whole_set, _whole_broker_set)
