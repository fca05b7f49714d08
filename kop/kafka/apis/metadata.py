"""Metadata (key 3): v0-v12.

- This broker is the only broker, the controller, and the leader of every partition (replicas = ISR =
  [self]); it advertises the endpoint of the listener the request arrived on (KoP's multi-listener rule).
- Topic names are echoed exactly as the client wrote them (any of KoP's three spellings).
- Topic ids are real (random per topic, kept in the topic record), but the id-only versions of Fetch,
  Produce and OffsetCommit are not advertised, so clients keep using names.
- Auto-creation follows allowAutoTopicCreation and, from v4, the request's allow_auto_topic_creation.
- A request for all topics lists every topic; topics outside the default namespace appear as
  tenant/namespace/topic.
- Leader epoch is the constant LEADER_EPOCH (see kop.kafka.apis.common). v13's top-level error is not
  advertised.
"""

from __future__ import annotations

from typing import Any

from kop.broker.topics import TopicError
from kop.kafka.apis.common import LEADER_EPOCH, lookup_topic
from kop.protocol import api_info
from kop.protocol.errors import ErrorCode

API_KEY = 3
VERSIONS = (0, 12)
ZERO_UUID = b"\0" * 16


async def handle(conn: Any, header: Any, req: Any) -> Any:
    h = conn.handler
    R = api_info(API_KEY).response_class
    node = h.node_for(conn.listener_name)
    topics_mgr = h.service.topics
    out = []
    if req.topics is None or (header.api_version == 0 and not req.topics):
        for topic in sorted(topics_mgr.all(), key=lambda t: topics_mgr.kafka_name(t.name)):
            out.append(_topic(R, topics_mgr.kafka_name(topic.name), topic, node.node_id))
    else:
        allow = getattr(req, "allow_auto_topic_creation", True) if header.api_version >= 4 else True
        for rt in req.topics:
            name = rt.name
            if name is None:  # v10+ lookup by id
                topic = topics_mgr.get_by_id(rt.topic_id)
                if topic is None:
                    out.append(R.MetadataResponseTopic(
                        error_code=ErrorCode.UNKNOWN_TOPIC_ID, name=None, topic_id=rt.topic_id,
                        is_internal=False, partitions=[],
                    ))
                    continue
                out.append(_topic(R, topics_mgr.kafka_name(topic.name), topic, node.node_id))
                continue
            try:
                topic = await lookup_topic(h, name, auto_create=allow)
            except TopicError as e:
                out.append(R.MetadataResponseTopic(
                    error_code=ErrorCode[e.error], name=name, topic_id=ZERO_UUID, is_internal=False, partitions=[],
                ))
                continue
            if topic is None:
                out.append(R.MetadataResponseTopic(
                    error_code=ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, name=name, topic_id=ZERO_UUID,
                    is_internal=False, partitions=[],
                ))
                continue
            out.append(_topic(R, name, topic, node.node_id))
    return R(
        throttle_time_ms=0,
        brokers=[R.MetadataResponseBroker(node_id=node.node_id, host=node.host, port=node.port, rack=None)],
        cluster_id=h.service.cluster_id,
        controller_id=node.node_id,
        topics=out,
        cluster_authorized_operations=-2147483648,
    )


def _topic(R: Any, name: str, topic: Any, node_id: int) -> Any:
    replicas = [node_id]
    return R.MetadataResponseTopic(
        error_code=0,
        name=name,
        topic_id=topic.topic_id,
        is_internal=topic.internal,
        partitions=[
            R.MetadataResponsePartition(
                error_code=0, partition_index=i, leader_id=node_id, leader_epoch=LEADER_EPOCH,
                replica_nodes=replicas, isr_nodes=replicas, offline_replicas=[],
            )
            for i in range(topic.partitions)
        ],
        topic_authorized_operations=-2147483648,
    )
