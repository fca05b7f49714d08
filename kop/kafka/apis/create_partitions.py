"""CreatePartitions (key 37): v0-v3.

The count can only grow (INVALID_PARTITIONS otherwise); new partitions start empty at offset 0. Manual
assignments may only name this broker. validate_only checks without changing anything.
"""

from __future__ import annotations

from kop.kafka import authorize
from kop.kafka.context import RequestContext
from kop.protocol.errors import ErrorCode
from kop.protocol.messages import CreatePartitionsRequest, CreatePartitionsResponse
from kop.topics.manager import TopicError

API_KEY = 37
VERSIONS = (0, 3)


async def handle(ctx: RequestContext, req: CreatePartitionsRequest) -> CreatePartitionsResponse:
    R = CreatePartitionsResponse
    out = []
    for t in req.topics:
        def res(err: int, msg: str | None = None, t: CreatePartitionsRequest.CreatePartitionsTopic = t
                ) -> CreatePartitionsResponse.CreatePartitionsTopicResult:
            return R.CreatePartitionsTopicResult(name=t.name, error_code=err, error_message=msg)

        if not authorize.topic_allowed(ctx, authorize.Op.ALTER, t.name):
            out.append(res(ErrorCode.TOPIC_AUTHORIZATION_FAILED))  # no message, as Kafka
            continue
        try:
            topic = await ctx.lookup_topic(t.name, auto_create=False)
        except TopicError as e:
            out.append(res(ErrorCode[e.error], e.message))
            continue
        if topic is None:
            out.append(res(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"The topic '{t.name}' does not exist."))
            continue
        if t.assignments and any(b != ctx.config.kafkaBrokerId for a in t.assignments for b in a.broker_ids):
            out.append(res(ErrorCode.INVALID_REPLICA_ASSIGNMENT, "Assignments may only name this broker"))
            continue
        try:
            await ctx.topics.add_partitions(topic, t.count, validate_only=req.validate_only)
        except TopicError as e:
            out.append(res(ErrorCode[e.error], e.message))
            continue
        out.append(res(0))
    return R(throttle_time_ms=0, results=out)
