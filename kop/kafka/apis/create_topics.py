"""CreateTopics (key 19): v2-v7.

- num_partitions -1 means defaultNumPartitions. Any replication factor (or -1) is accepted and reported
  as 1: copies are the ledger store's business (BookKeeper's write quorum in cluster mode), not Kafka
  replicas. A manual assignment must name only this broker (INVALID_REPLICA_ASSIGNMENT otherwise).
- Configs are validated as Kafka validates them (INVALID_CONFIG for unknown names or bad values) and
  stored with the topic; validate_only checks without creating.
- v5+ responses carry the partition count, replication factor and the topic's full config list (an
  empty list, not null, for a topic that failed, as Kafka).
- Configs: every name Kafka 4.x accepts (kop/topics/topic_config.py), with Kafka's validation messages.
- Names use KoP's mapping: `t` (in the connection's namespace, kop/topics/scope.py), `tenant/ns/t` or `persistent://tenant/ns/t`; topics starting with `__` are
  reserved for the broker (INVALID_TOPIC_EXCEPTION), as Kafka reserves its internal topics;
  `__consumer_offsets` itself exists from start-up, so asking for it gets TOPIC_ALREADY_EXISTS as in Kafka.
"""

from __future__ import annotations

from kop.config import BrokerConfig
from kop.kafka import authorize
from kop.kafka.context import RequestContext
from kop.protocol.errors import ErrorCode
from kop.protocol.messages import CreateTopicsRequest, CreateTopicsResponse
from kop.topics.manager import Topic, TopicError
from kop.topics.names import InvalidTopicName
from kop.topics.topic_config import SOURCE_DEFAULT, SOURCE_DYNAMIC_TOPIC, described, effective

API_KEY = 19
VERSIONS = (2, 7)
ZERO_UUID = b"\0" * 16


async def handle(ctx: RequestContext, req: CreateTopicsRequest) -> CreateTopicsResponse:
    h = ctx.handler
    R = CreateTopicsResponse
    topics_mgr = h.service.topics
    results = []
    seen: dict[str, int] = {}
    for t in req.topics:
        seen[t.name] = seen.get(t.name, 0) + 1
    may_create = authorize.cluster_allowed(ctx, authorize.Op.CREATE)  # else CREATE per topic
    for t in req.topics:
        def fail(error: str, message: str, t: CreateTopicsRequest.CreatableTopic = t
                 ) -> CreateTopicsResponse.CreatableTopicResult:
            return R.CreatableTopicResult(
                name=t.name, topic_id=ZERO_UUID, error_code=ErrorCode[error], error_message=message,
                num_partitions=-1, replication_factor=-1, configs=[],
            )

        if seen[t.name] > 1:
            results.append(fail("INVALID_REQUEST", f"Duplicate topic {t.name} in the request"))
            continue
        if not may_create:
            if not authorize.topic_allowed(ctx, authorize.Op.CREATE, t.name):
                results.append(fail("TOPIC_AUTHORIZATION_FAILED", "Authorization failed."))
                continue
        try:
            tn = ctx.names.parse(t.name)
        except InvalidTopicName as e:
            results.append(fail("INVALID_TOPIC_EXCEPTION", str(e)))
            continue
        if tn in (topics_mgr.offsets_topic, topics_mgr.transaction_state_topic):
            # The broker made it at start-up; Kafka answers the same for its own internal topics.
            results.append(fail("TOPIC_ALREADY_EXISTS", f"Topic '{t.name}' already exists."))
            continue
        if tn.local.startswith("__"):
            results.append(fail("INVALID_TOPIC_EXCEPTION", f"Topic names starting with '__' are reserved ({t.name})"))
            continue
        partitions = t.num_partitions
        if t.assignments:
            if partitions != -1 or t.replication_factor != -1:
                results.append(fail("INVALID_REQUEST",
                                    "Both assignments and num_partitions/replication_factor were given"))
                continue
            if any(b != h.config.kafkaBrokerId for a in t.assignments for b in a.broker_ids):
                results.append(fail("INVALID_REPLICA_ASSIGNMENT", "Assignments may only name this broker"))
                continue
            partitions = len(t.assignments)
        if partitions == -1:
            partitions = h.config.defaultNumPartitions
        if t.replication_factor == 0 or t.replication_factor < -1:
            results.append(fail("INVALID_REPLICATION_FACTOR", "Replication factor must be larger than 0."))
            continue
        configs: dict[str, str] = {}
        bad = None
        for c in t.configs:
            if c.value is None:
                bad = f"Null value not supported for topic config {c.name}"
                break
            configs[c.name] = c.value
        if bad:
            results.append(fail("INVALID_CONFIG", bad))
            continue
        try:
            topic = await topics_mgr.create(tn, partitions, configs, validate_only=req.validate_only)
        except TopicError as e:
            # The manager's messages name the topic globally; the client reads the name it asked for.
            results.append(fail(e.error, e.message.replace(f"'{topics_mgr.kafka_name(tn)}'", f"'{t.name}'")))
            continue
        results.append(_created(R, t.name, topic, h.config,
                                authorize.topic_allowed(ctx, authorize.Op.DESCRIBE_CONFIGS, t.name)))
    return R(throttle_time_ms=0, topics=results)


def _created(R: type[CreateTopicsResponse], name: str, topic: Topic, cfg: BrokerConfig, show_configs: bool
             ) -> CreateTopicsResponse.CreatableTopicResult:
    """A created topic's answer; without DESCRIBE_CONFIGS on it, its configs are withheld and
    topic_config_error_code says why (Kafka's controller does the same)."""
    return R.CreatableTopicResult(
        name=name, topic_id=topic.topic_id, error_code=0, error_message=None,
        topic_config_error_code=0 if show_configs else ErrorCode.TOPIC_AUTHORIZATION_FAILED,
        num_partitions=topic.partitions, replication_factor=1,
        configs=[
            R.CreatableTopicConfigs(
                name=key, value=effective(topic.configs, key, cfg), read_only=d.read_only,
                config_source=SOURCE_DYNAMIC_TOPIC if key in topic.configs else SOURCE_DEFAULT,
                is_sensitive=False,
            )
            for key, d in described(topic.configs)
        ] if show_configs else [],
    )
