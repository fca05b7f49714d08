"""AlterConfigs (key 33): v0-v2, the legacy whole-set replacement.

For a topic, the given configs become its complete set of topic-level configs (anything not named returns
to the broker default), as Kafka's legacy API defines. Values are validated and then honoured (retention,
max.message.bytes, timestamp type); KoP logged "ignoring" and answered success. Broker configs are static
here (set in the config file): altering them gets INVALID_REQUEST.
"""

from __future__ import annotations

from kop.kafka.apis.configs_common import ConfigRequestError, alter_topic_resources
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


async def handle(ctx: RequestContext, req: AlterConfigsRequest) -> AlterConfigsResponse:
    return await alter_topic_resources(ctx, req, AlterConfigsResponse, _whole_set)
