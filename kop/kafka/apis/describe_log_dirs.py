"""DescribeLogDirs (key 35): v1-v5, as Apache Kafka 4.x serves it (`kafka-log-dirs --describe`).

Kafka answers one result per log directory, listing the partition logs it holds there with their size. Here
the one "log dir" is the embedded store's data directory (ledger files and the metadata database live
under it), with its volume's total and usable bytes (v4+) as Java's FileStore reports them; a partition's size
is its managed ledger's retained payload bytes (kop/offset/storage.py `stored_size`: the open log's, or what
its stored info records, so describing does not open logs). On BookKeeper there is no local directory: the
result is named after the BookKeeper metadata service and the volume bytes are unknown (-1, the schema's
default). OffsetLag is 0 (an entry counts once durable, so the high watermark is the log end), no log is a
future log and no directory is cordoned.

As Kafka: DESCRIBE on the cluster is required (without it, no results and, v3+, CLUSTER_AUTHORIZATION_FAILED);
`topics` null describes every partition log this broker holds (internal topics included), otherwise only the
named partitions this broker serves - unknown topics and partitions are left out, not errors, and topics
without a listed partition are omitted (a partition whose log was never opened is listed with size 0: Kafka
creates every partition's empty log with its topic). A directory whose volume or stored infos cannot be read is answered KAFKA_STORAGE_ERROR.
"""

from __future__ import annotations

import os

from kop.kafka import authorize
from kop.kafka.context import RequestContext
from kop.protocol.errors import ErrorCode
from kop.protocol.messages import DescribeLogDirsRequest, DescribeLogDirsResponse
from kop.storage.api import StorageError
from kop.topics.manager import Topic, TopicManager

API_KEY = 35
VERSIONS = (1, 5)

R = DescribeLogDirsResponse


def _volume_bytes(path: str) -> tuple[int, int]:
    """(total, usable) bytes of the volume holding `path`, as Java's FileStore getTotalSpace/getUsableSpace
    (usable: what an unprivileged writer may still use)."""
    st = os.statvfs(path)
    return st.f_blocks * st.f_frsize, st.f_bavail * st.f_frsize


async def handle(ctx: RequestContext, req: DescribeLogDirsRequest) -> DescribeLogDirsResponse:
    if not authorize.cluster_allowed(ctx, authorize.Op.DESCRIBE):
        return R(throttle_time_ms=0, error_code=ErrorCode.CLUSTER_AUTHORIZATION_FAILED, results=[])
    topics = ctx.topics
    storage = topics.storage
    names = ctx.names
    wanted: list[tuple[str, Topic, list[int]]] = []  # (name as the client spells it, topic, partitions)
    if req.topics is None:
        listed = topics.all() if names.default else [t for t in topics.all() if t.internal or names.owns(t.name)]
        for topic in listed:
            wanted.append((names.kafka_name(topic.name), topic, list(range(topic.partitions))))
    else:
        asked: dict[str, set[int]] = {}
        for t in req.topics:
            asked.setdefault(t.topic, set()).update(t.partitions)
        for name, indexes in asked.items():
            found = await ctx.find_topic(name)
            if found is not None:
                wanted.append((name, found, sorted(p for p in indexes if 0 <= p < found.partitions)))
    cfg = ctx.config
    data_dir = storage.data_dir
    log_dir = data_dir if data_dir is not None else (
        cfg.bookkeeperMetadataServiceUri or f"bookkeeper:{cfg.metadataStoreUrl or cfg.zookeeperServers}")
    total = usable = -1
    try:
        if data_dir is not None:
            total, usable = _volume_bytes(data_dir)
        described = await _describe(topics, wanted)
    except (OSError, StorageError):  # the volume or the metadata store cannot be read
        return R(throttle_time_ms=0, error_code=0, results=[R.DescribeLogDirsResult(
            error_code=ErrorCode.KAFKA_STORAGE_ERROR, log_dir=log_dir, topics=[])])
    return R(throttle_time_ms=0, error_code=0, results=[R.DescribeLogDirsResult(
        error_code=0, log_dir=log_dir, topics=described, total_bytes=total, usable_bytes=usable,
        is_cordoned=False)])


async def _describe(topics: TopicManager, wanted: list[tuple[str, Topic, list[int]]],
                    ) -> list[DescribeLogDirsResponse.DescribeLogDirsTopic]:
    described = []
    for name, topic, parts in sorted(wanted, key=lambda w: w[0]):
        partitions = []
        for p in parts:
            if topic.deleted or not topics.owns(topic, p):
                continue  # another broker's log (cluster mode), or going away
            # A partition never opened has no managed ledger yet; Kafka creates every partition's (empty) log
            # with the topic, so it is listed, empty.
            size = await topics.storage.stored_size(topic.ledger_name(p)) or 0
            partitions.append(R.DescribeLogDirsPartition(partition_index=p, partition_size=size, offset_lag=0,
                                                         is_future_key=False))
        if partitions:
            described.append(R.DescribeLogDirsTopic(name=name, partitions=partitions))
    return described
