"""DeleteTopics (key 20): v1-v6, by name (and by topic id from v6).

Deleting closes the partitions' logs, removes their managed ledgers and then the topic record; produce
requests that race with the deletion get UNKNOWN_TOPIC_OR_PARTITION. Internal topics cannot be deleted.
"""

from __future__ import annotations

from typing import Any

from kop.kafka import authorize
from kop.kafka.context import RequestContext
from kop.protocol import api_info
from kop.protocol.errors import ErrorCode
from kop.topics.manager import TopicError

API_KEY = 20
VERSIONS = (1, 6)
ZERO_UUID = b"\0" * 16


async def handle(ctx: RequestContext, req: Any) -> Any:
    R = api_info(API_KEY).response_class
    mgr = ctx.topics
    if ctx.version >= 6:
        wanted = [(t.name, t.topic_id) for t in req.topics]
    else:
        wanted = [(n, ZERO_UUID) for n in req.topic_names]
    out = []
    for name, topic_id in wanted:
        def res(err: int, msg: str | None = None, tid: bytes = ZERO_UUID, name: Any = name) -> Any:
            return R.DeletableTopicResult(name=name, topic_id=tid, error_code=err, error_message=msg)

        if name is None:
            topic = mgr.get_by_id(topic_id)
            if topic is None:
                out.append(res(ErrorCode.UNKNOWN_TOPIC_ID, "Topic id not found", topic_id))
                continue
            name = mgr.kafka_name(topic.name)
            if not authorize.topic_allowed(ctx, authorize.Op.DESCRIBE, name) or \
                    not authorize.topic_allowed(ctx, authorize.Op.DELETE, name):
                out.append(res(ErrorCode.TOPIC_AUTHORIZATION_FAILED, authorize.MESSAGES[29], topic_id))
                continue
        else:
            if not authorize.topic_allowed(ctx, authorize.Op.DESCRIBE, name) or \
                    not authorize.topic_allowed(ctx, authorize.Op.DELETE, name):
                out.append(res(ErrorCode.TOPIC_AUTHORIZATION_FAILED, authorize.MESSAGES[29]))
                continue
            try:
                topic = await ctx.lookup_topic(name, auto_create=False)
            except TopicError as e:
                out.append(res(ErrorCode[e.error], e.message))
                continue
            if topic is None:
                out.append(res(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, "This server does not host this topic"))
                continue
        if topic.internal:
            out.append(res(ErrorCode.INVALID_TOPIC_EXCEPTION, "Internal topics cannot be deleted", topic.topic_id))
            continue
        await mgr.delete(topic)  # the handlers forget the partitions' state (partition_log_deleted)
        out.append(R.DeletableTopicResult(name=name, topic_id=topic.topic_id, error_code=0, error_message=None))
    return R(throttle_time_ms=0, responses=out)
