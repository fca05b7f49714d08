"""DeleteTopics (key 20): v1-v6, by name (and by topic id from v6).

Deleting closes the partitions' logs, removes their managed ledgers and then the topic record; produce
requests that race with the deletion get UNKNOWN_TOPIC_OR_PARTITION. Internal topics cannot be deleted.

The topics of one request are deleted side by side, and the answer waits for them at most `timeout_ms` (30 s
when it is <= 0, Kafka's request timeout; librdkafka sends 0). A deletion not finished by then is answered
REQUEST_TIMED_OUT, as ZooKeeper-era Kafka did, and goes on to the end: it runs in a task of its own
(TopicManager.start_delete), so neither the timeout nor a closed connection leaves a topic half deleted,
and a request whose connection closes before its answer is still carried out, as Kafka's controller does.
Kafka 4.x answers once the controller has written the deletion record and removes the log files later;
here the logs go before the answer, so a slow store shows up as REQUEST_TIMED_OUT instead of as files left.
"""

from __future__ import annotations

import asyncio
from collections import Counter

from kop.aio import run_to_end
from kop.kafka import authorize
from kop.kafka.context import RequestContext
from kop.protocol.errors import ErrorCode
from kop.protocol.messages import DeleteTopicsRequest, DeleteTopicsResponse
from kop.topics.manager import Topic, TopicError

API_KEY = 20
VERSIONS = (1, 6)
ZERO_UUID = b"\0" * 16
DEFAULT_WAIT_SECONDS = 30.0  # timeout_ms <= 0: wait as long as a Kafka client waits for any request


async def handle(ctx: RequestContext, req: DeleteTopicsRequest) -> DeleteTopicsResponse:
    # A request the broker has read is carried out even if its connection closes meanwhile (the connection
    # cancels its requests' tasks): the shielded task still looks the topics up and starts their deletions.
    return await run_to_end(_delete_topics(ctx, req))


async def _delete_topics(ctx: RequestContext, req: DeleteTopicsRequest) -> DeleteTopicsResponse:
    R = DeleteTopicsResponse
    mgr = ctx.topics
    if ctx.version >= 6:
        wanted = [(t.name, t.topic_id) for t in req.topics]
    else:
        wanted = [(n, ZERO_UUID) for n in req.topic_names]
    out = []
    started: list[tuple[int, Topic, asyncio.Task[None]]] = []  # (index in out, topic, its deletion)
    names = Counter(n for n, _ in wanted if n is not None)
    ids = Counter(t for n, t in wanted if n is None)
    for name, topic_id in wanted:
        def res(err: int, msg: str | None = None, tid: bytes = ZERO_UUID, name: str | None = name
                ) -> DeleteTopicsResponse.DeletableTopicResult:
            return R.DeletableTopicResult(name=name, topic_id=tid, error_code=err, error_message=msg)

        if (names[name] if name is not None else ids[topic_id]) > 1:  # Kafka answers each copy so
            out.append(res(ErrorCode.INVALID_REQUEST, "Duplicate topic name." if name is not None
                           else "Duplicate topic id.", topic_id))
            continue
        if name is None:
            topic = mgr.get_by_id(topic_id)
            if topic is None:
                out.append(res(ErrorCode.UNKNOWN_TOPIC_ID, "Topic id not found", topic_id))
                continue
            name = ctx.names.kafka_name(topic.name)
            if not authorize.topic_allowed(ctx, authorize.Op.DESCRIBE, name) or \
                    not authorize.topic_allowed(ctx, authorize.Op.DELETE, name):
                out.append(res(ErrorCode.TOPIC_AUTHORIZATION_FAILED, authorize.MESSAGES[ErrorCode.TOPIC_AUTHORIZATION_FAILED], topic_id))
                continue
        else:
            if not authorize.topic_allowed(ctx, authorize.Op.DESCRIBE, name) or \
                    not authorize.topic_allowed(ctx, authorize.Op.DELETE, name):
                out.append(res(ErrorCode.TOPIC_AUTHORIZATION_FAILED, authorize.MESSAGES[ErrorCode.TOPIC_AUTHORIZATION_FAILED]))
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
        # the handlers forget the partitions' state (partition_log_deleted) when the deletion ends
        started.append((len(out), topic, mgr.start_delete(topic)))
        out.append(R.DeletableTopicResult(name=name, topic_id=topic.topic_id, error_code=0, error_message=None))
    if started:
        timeout = req.timeout_ms / 1000 if req.timeout_ms > 0 else DEFAULT_WAIT_SECONDS
        # first the deletions are recorded (a crash after the answer finishes them at the next start), however
        # short timeout_ms is; then the answer waits for them to end until the timeout
        await asyncio.wait([asyncio.ensure_future(mgr.deletion_recorded(t)) for _, t, _ in started],
                           timeout=DEFAULT_WAIT_SECONDS)
        await asyncio.wait([asyncio.shield(task) for _, _, task in started], timeout=timeout)
        for i, _, task in started:
            if not task.done():
                out[i].error_code = ErrorCode.REQUEST_TIMED_OUT
                out[i].error_message = f"The deletion of topic {out[i].name} is still in progress"
            elif task.cancelled() or task.exception() is not None:
                out[i].error_code = ErrorCode.UNKNOWN_SERVER_ERROR
                out[i].error_message = "The topic could not be deleted; the broker log says why"
    return R(throttle_time_ms=0, responses=out)
