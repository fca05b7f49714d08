"""ListConfigResources (key 74): v0 (ListClientMetricsResources) and v1 (KIP-1142), as Apache Kafka 4.4.

`kafka-client-metrics --list` and Admin.listConfigResources ask it which resources have configs. As Kafka:
DESCRIBE_CONFIGS on the cluster is required (else CLUSTER_AUTHORIZATION_FAILED and nothing listed); v0 serves
only client-metrics resources, v1 topics, brokers, broker loggers, client metrics and groups; an empty type
list means all of the version's types, and asking for a type outside them answers UNSUPPORTED_VERSION with
nothing listed. Resources come in Kafka's order: groups, client metrics, broker loggers, brokers, topics.

What this broker has of each type:
- topics: every topic (internal ones included; a tenant login sees its own and the internal ones, as in
  Metadata);
- brokers: the live brokers (this one, or every registered one in cluster mode), by id;
- groups: the groups that have dynamic group configs, as Kafka (the share group configs of
  kop/kafka/apis/group_configs.py, a tenant login seeing its own);
- client metrics: the KIP-714 subscriptions that have configs (kop/kafka/apis/client_metrics_configs.py,
  cluster-wide: a tenant login sees them all, as the cluster they are on is one);
- broker loggers: none. Kafka lists one per broker, but this broker has no BROKER_LOGGER configs to describe
  (DescribeConfigs answers INVALID_REQUEST for them), so listing them would only send tools to an error.
"""

from __future__ import annotations

from kop.kafka import authorize
from kop.kafka.apis import client_metrics_configs
from kop.kafka.context import RequestContext
from kop.protocol.errors import ErrorCode
from kop.protocol.messages import ListConfigResourcesRequest, ListConfigResourcesResponse

API_KEY = 74
VERSIONS = (0, 1)

TOPIC, BROKER, BROKER_LOGGER, CLIENT_METRICS, GROUP = 2, 4, 8, 16, 32
SUPPORTED = {0: (CLIENT_METRICS,), 1: (TOPIC, BROKER, BROKER_LOGGER, CLIENT_METRICS, GROUP)}
ORDER = (GROUP, CLIENT_METRICS, BROKER_LOGGER, BROKER, TOPIC)

R = ListConfigResourcesResponse


async def handle(ctx: RequestContext, req: ListConfigResourcesRequest) -> ListConfigResourcesResponse:
    if not authorize.cluster_allowed(ctx, authorize.Op.DESCRIBE_CONFIGS):
        return R(throttle_time_ms=0, error_code=ErrorCode.CLUSTER_AUTHORIZATION_FAILED, config_resources=[])
    supported = SUPPORTED[min(ctx.version, 1)]
    asked = set(req.resource_types) or set(supported)
    if not asked <= set(supported):
        return R(throttle_time_ms=0, error_code=ErrorCode.UNSUPPORTED_VERSION, config_resources=[])
    out: list[ListConfigResourcesResponse.ConfigResource] = []
    for rtype in ORDER:
        if rtype not in asked:
            continue
        found = (await client_metrics_configs.names(ctx.handler.service.broker_configs.store)
                 if rtype == CLIENT_METRICS else _names(ctx, rtype))
        for name in found:
            out.append(R.ConfigResource(resource_name=name, resource_type=rtype))
    return R(throttle_time_ms=0, error_code=0, config_resources=out)


def _names(ctx: RequestContext, rtype: int) -> list[str]:
    if rtype == BROKER:
        return [str(n.node_id) for n in ctx.handler.broker_nodes(ctx.listener_name)]
    if rtype == TOPIC:
        names = ctx.names
        topics = ctx.topics.all()
        if not names.default:
            topics = [t for t in topics if t.internal or names.owns(t.name)]
        return sorted(names.kafka_name(t.name) for t in topics if not t.deleted)
    if rtype == GROUP:
        names = ctx.names
        ids = [gid for gid, values in ctx.handler.share.configs.items() if values]
        return sorted(gid if names.default else names.client_id(gid) for gid in ids if names.default or names.owns_id(gid))
    return []  # broker loggers: none here (module docstring)
