"""DescribeConfigs (key 32): v1-v4, for topics and for this broker.

Topic resources list every per-topic config the broker honours, with the source (DYNAMIC_TOPIC_CONFIG when
set on the topic, DEFAULT_CONFIG otherwise), synonyms on request (the topic value, then the broker default
under Kafka's broker-level name), types and documentation (v3+). Broker resources (this broker's id, or ""
for cluster defaults) describe the static settings, under Kafka's names and Kafka 4.4's types, as
STATIC_BROKER_CONFIG and read-only, then the broker-level synonyms of the other topic configs at their
defaults (DEFAULT_CONFIG; configs_common.broker_configs). KoP answered topics with a fixed list and brokers
with dummies; tools that read-modify-write configs need the truth. BROKER_LOGGER and other resource types get INVALID_REQUEST.
"""

from __future__ import annotations

from kop.kafka import authorize
from kop.kafka.apis.configs_common import (
    RESOURCE_BROKER,
    RESOURCE_TOPIC,
    broker_configs,
    is_this_broker,
    topic_entries,
)
from kop.kafka.context import RequestContext
from kop.protocol.errors import ErrorCode
from kop.protocol.messages import DescribeConfigsRequest, DescribeConfigsResponse
from kop.topics.manager import TopicError

API_KEY = 32
VERSIONS = (1, 4)


async def handle(ctx: RequestContext, req: DescribeConfigsRequest) -> DescribeConfigsResponse:
    h = ctx.handler
    R = DescribeConfigsResponse
    cfg = h.config
    results = []
    for res in req.resources:
        def result(err: int, msg: str | None, configs: list[DescribeConfigsResponse.DescribeConfigsResourceResult],
                   res: DescribeConfigsRequest.DescribeConfigsResource = res) -> DescribeConfigsResponse.DescribeConfigsResult:
            return R.DescribeConfigsResult(
                error_code=err, error_message=msg, resource_type=res.resource_type,
                resource_name=res.resource_name, configs=configs,
            )

        keys = set(res.configuration_keys) if res.configuration_keys is not None else None
        refused = authorize.configs_refused(ctx, authorize.Op.DESCRIBE_CONFIGS, res.resource_type, res.resource_name)
        if refused is not None:
            results.append(result(refused, authorize.MESSAGES[refused], []))
            continue
        if res.resource_type == RESOURCE_TOPIC:
            try:
                topic = await ctx.lookup_topic(res.resource_name, auto_create=False)
            except TopicError as e:
                results.append(result(ErrorCode[e.error], e.message, []))
                continue
            if topic is None:
                results.append(result(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
                                      f"Topic {res.resource_name} does not exist", []))
                continue
            entries = []
            for name, value, ro, source, ctype, doc, syns in topic_entries(topic.configs, cfg, keys):
                if keys is not None and name not in keys:
                    continue
                entries.append(R.DescribeConfigsResourceResult(
                    name=name, value=value, read_only=ro, config_source=source, is_default=source == 5,
                    is_sensitive=False,
                    synonyms=[R.DescribeConfigsSynonym(name=n, value=v, source=s) for n, v, s in syns]
                    if req.include_synonyms else [],
                    config_type=ctype, documentation=doc if req.include_documentation else None,
                ))
            results.append(result(0, "", entries))
        elif res.resource_type == RESOURCE_BROKER:
            if not is_this_broker(res.resource_name, cfg):
                results.append(result(ErrorCode.INVALID_REQUEST,
                                      f"Broker {res.resource_name} is not this broker ({cfg.kafkaBrokerId})", []))
                continue
            entries = []
            for name, value, ctype, source in broker_configs(cfg):
                if keys is not None and name not in keys:
                    continue
                entries.append(R.DescribeConfigsResourceResult(
                    name=name, value=value, read_only=True, config_source=source, is_default=source == 5,
                    is_sensitive=False,
                    synonyms=[R.DescribeConfigsSynonym(name=name, value=value, source=source)]
                    if req.include_synonyms else [],
                    config_type=ctype, documentation=None,
                ))
            results.append(result(0, "", entries))
        else:
            results.append(result(ErrorCode.INVALID_REQUEST,
                                  f"Resource type {res.resource_type} is not supported", []))
    return R(throttle_time_ms=0, results=results)
