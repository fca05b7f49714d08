"""DescribeConfigs (key 32): v1-v4, for topics and for brokers.

Topic resources list every per-topic config the broker honours, with the source (DYNAMIC_TOPIC_CONFIG when
set on the topic, else that of its broker-level synonym: DYNAMIC_BROKER_CONFIG, DYNAMIC_DEFAULT_BROKER_CONFIG
or DEFAULT_CONFIG), synonyms on request in Kafka's order, types and documentation (v3+). A broker resource
named by this broker's id describes its settings under Kafka's names and Kafka 4.4's types
(configs_common.broker_entries): the config file's (STATIC_BROKER_CONFIG), the broker-level synonyms of the
other topic configs (DEFAULT_CONFIG), each under the dynamic values set for this broker or for every broker
(kop/topics/broker_configs.py), read-only unless Kafka lets it be set dynamically. The resource "" lists the
cluster-wide dynamic defaults only, and another broker id gets Kafka's INVALID_REQUEST, as on Kafka. KoP
answered topics with a fixed list and brokers with dummies; tools that read-modify-write configs need the
truth. GROUP resources (32) list the share group configs (kop/kafka/apis/group_configs.py), CLIENT_METRICS
resources (16) a client metrics subscription's (kop/kafka/apis/client_metrics_configs.py). BROKER_LOGGER and
other resource types get INVALID_REQUEST.
"""

from __future__ import annotations

from kop.kafka import authorize
from kop.kafka.apis import client_metrics_configs, group_configs
from kop.kafka.apis.configs_common import (
    RESOURCE_BROKER,
    RESOURCE_TOPIC,
    broker_entries,
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
    dyn = h.service.broker_configs
    if any(res.resource_type == RESOURCE_BROKER for res in req.resources):
        await dyn.reload()  # what another broker of the cluster set a moment ago is described too
    results = []
    for res in req.resources:
        def result(err: int, msg: str | None, configs: list[DescribeConfigsResponse.DescribeConfigsResourceResult],
                   res: DescribeConfigsRequest.DescribeConfigsResource = res) -> DescribeConfigsResponse.DescribeConfigsResult:
            return R.DescribeConfigsResult(
                error_code=err, error_message=msg, resource_type=res.resource_type,
                resource_name=res.resource_name, configs=configs,
            )

        keys = set(res.configuration_keys) if res.configuration_keys else None  # none or []: all, as Kafka
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
            for name, value, ro, source, ctype, doc, syns in topic_entries(topic.configs, cfg, keys, dyn):
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
            if res.resource_name != "" and res.resource_name != str(cfg.kafkaBrokerId):
                try:
                    int(res.resource_name)
                    msg = (f"Unexpected broker id, expected {cfg.kafkaBrokerId} or empty string, but received "
                           f"{res.resource_name}")
                except ValueError:
                    msg = f"Broker id must be an integer, but it is: {res.resource_name}"
                results.append(result(ErrorCode.INVALID_REQUEST, msg, []))
                continue
            entries = []
            for name, shown, ro, source, ctype, sensitive, syns in broker_entries(cfg, dyn, res.resource_name):
                if keys is not None and name not in keys:
                    continue
                entries.append(R.DescribeConfigsResourceResult(
                    name=name, value=shown, read_only=ro, config_source=source, is_default=source == 5,
                    is_sensitive=sensitive,
                    synonyms=[R.DescribeConfigsSynonym(name=n, value=v, source=s) for n, v, s in syns]
                    if req.include_synonyms else [],
                    config_type=ctype, documentation=None,
                ))
            results.append(result(0, "", entries))
        elif res.resource_type == client_metrics_configs.RESOURCE_CLIENT_METRICS:
            results.append(result(*await client_metrics_configs.describe(
                dyn.store, res, req.include_synonyms, req.include_documentation)))
        elif res.resource_type == group_configs.RESOURCE_GROUP:
            entries = [R.DescribeConfigsResourceResult(
                name=name, value=value, read_only=False, config_source=source, is_default=source == 5,
                is_sensitive=False, synonyms=[], config_type=ctype, documentation=None)
                for name, value, source, ctype in group_configs.describe(h.share, ctx.names.global_id(res.resource_name))
                if keys is None or name in keys]
            results.append(result(0, "", entries))
        else:
            results.append(result(ErrorCode.INVALID_REQUEST,
                                  f"Resource type {res.resource_type} is not supported", []))
    return R(throttle_time_ms=0, results=results)
