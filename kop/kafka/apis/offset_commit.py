"""OffsetCommit (key 8): v2-v10.

- v10 (KIP-848; what Kafka 4.4 consumers send) names topics by id instead of name, in the request and the
  answer. Each id is resolved to its topic and the offsets are stored under the topic's Kafka name, as
  for v2-v9, so a v10 commit and a v9 fetch (or the other way round) see the same offsets. An unknown id
  answers UNKNOWN_TOPIC_ID on each of its partitions and stores nothing for them (Kafka's v10 error).
- Each commit is acknowledged only once its record is durable in __consumer_offsets (kop#1041: KoP's commits
  could be silently lost); the committed leader epoch (v6+) and metadata are stored and echoed by
  OffsetFetch.
- Generation/member checks are Kafka's: ILLEGAL_GENERATION, UNKNOWN_MEMBER_ID, FENCED_INSTANCE_ID,
  REBALANCE_IN_PROGRESS while the member awaits its assignment. Generation -1 with an empty member id is
  accepted for an Empty or missing group (what kafka-consumer-groups --reset-offsets --execute sends); a
  positive generation for a missing group is GROUP_ID_NOT_FOUND from v9, ILLEGAL_GENERATION before.
- For a KIP-848 consumer group the generation is the member epoch (Kafka's rules): an admin commit
  (epoch -1) only to a group without members; otherwise UNKNOWN_MEMBER_ID for a stranger,
  UNSUPPORTED_VERSION below v9, STALE_MEMBER_EPOCH for a newer epoch, and for an older one unless every
  partition is still the member's and was assigned to it at or before that epoch (KIP-1251, Kafka 4.3+:
  a commit sent while the heartbeat that moved the member was being answered is accepted).
- Partitions of topics that do not exist get UNKNOWN_TOPIC_OR_PARTITION (and nothing is stored for
  them); metadata longer than offsetMetadataMaxSize gets OFFSET_METADATA_TOO_LARGE; the other partitions
  of the request are committed.
- Offsets are stored under the topic's Kafka name (`t` for the default namespace, `tenant/ns/t`
  otherwise), whichever of KoP's spellings the client used, so every spelling reads the same offsets.
- v2-v4's retention_time_ms is honoured as Kafka does (an explicit expire timestamp in the record).
"""

from __future__ import annotations

from kop.kafka import authorize
from kop.kafka.apis.common import names_from_ids
from kop.kafka.context import RequestContext
from kop.protocol.errors import ErrorCode
from kop.protocol.messages import OffsetCommitRequest, OffsetCommitResponse

API_KEY = 8
VERSIONS = (2, 10)


async def handle(ctx: RequestContext, req: OffsetCommitRequest) -> OffsetCommitResponse:
    R = OffsetCommitResponse
    v = ctx.version
    coordinator = ctx.coordinator
    topics_mgr = ctx.topics
    plan: list[tuple[OffsetCommitRequest.OffsetCommitRequestTopic, list[tuple[int, int | None, str]]]] = []
    valid: list[tuple[str, int, int, int, str | None]] = []
    # v10 names topics by id: each entry gets the name this connection knows its topic by
    unknown_ids = names_from_ids(ctx, req.topics) if v >= 10 else set()
    if not authorize.group_allowed(ctx, authorize.Op.READ, req.group_id):
        denied = {t.name: ErrorCode.GROUP_AUTHORIZATION_FAILED for t in req.topics}
    else:
        denied = dict.fromkeys(authorize.denied_topics(ctx, authorize.Op.READ, (t.name for t in req.topics)),
                               ErrorCode.TOPIC_AUTHORIZATION_FAILED)
    for i, t in enumerate(req.topics):
        if i in unknown_ids:
            plan.append((t, [(p.partition_index, ErrorCode.UNKNOWN_TOPIC_ID, "") for p in t.partitions]))
            continue
        topic = None if t.name in denied else await ctx.find_topic(t.name)
        parts: list[tuple[int, int | None, str]] = []
        for p in t.partitions:
            if t.name in denied:
                parts.append((p.partition_index, denied[t.name], ""))
                continue
            if topic is None or not 0 <= p.partition_index < topic.partitions:
                parts.append((p.partition_index, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, ""))
                continue
            key = topics_mgr.kafka_name(topic.name)
            parts.append((p.partition_index, None, key))
            valid.append((key, p.partition_index, p.committed_offset,
                          p.committed_leader_epoch if v >= 6 else -1, p.committed_metadata))
        plan.append((t, parts))
    results: dict[tuple[str, int], int] = {}
    if valid:
        results = await coordinator.commit_offsets(
            ctx.names.global_id(req.group_id), req.generation_id_or_member_epoch, req.member_id,
            req.group_instance_id if v >= 7 else None, req.retention_time_ms if v <= 4 else -1, v, valid)
    return R(
        throttle_time_ms=0,
        topics=[
            R.OffsetCommitResponseTopic(name=t.name, topic_id=t.topic_id, partitions=[
                R.OffsetCommitResponsePartition(
                    partition_index=index, error_code=err if err is not None else results[(key, index)])
                for index, err, key in parts
            ])
            for t, parts in plan
        ],
    )
