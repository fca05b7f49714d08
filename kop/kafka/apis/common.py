"""Helpers shared by several API modules: topic lookup with auto-creation, error names.

In cluster mode a topic missing from this broker's cache is re-read from ZooKeeper before it is called
unknown (or auto-created): another broker may have created it a moment ago, before the watch said so.
Ownership is not checked here but in TopicManager.partition_log, the one place every partition access
goes through: a partition this broker does not own raises TopicError NOT_LEADER_OR_FOLLOWER."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Protocol

from kop.protocol import ZERO_UUID
from kop.topics.manager import Topic, TopicError
from kop.topics.names import InvalidTopicName

if TYPE_CHECKING:
    from kop.kafka.context import RequestContext
    from kop.kafka.handler import KafkaProtocolHandler
    from kop.topics.scope import NameScope

# The leader epoch this broker reports everywhere (Metadata, ListOffsets, OffsetForLeaderEpoch, stored
# batches). Alone, one node owns every partition for its whole life, so one constant epoch is the honest
# value. In cluster mode ownership moves, yet 0 stays correct for clients: a new owner never truncates
# (BookKeeper recovery keeps every acknowledged entry), so no consumer position ever has to be moved back,
# which is all that epoch bumps would signal (docs/cluster.md).
# A real epoch (not -1) keeps Java clients' KIP-320 position validation on, and matches what Apache Kafka
# reports for a fresh topic, so tools print the same columns.
LEADER_EPOCH = 0


async def lookup_topic(handler: KafkaProtocolHandler, name: str | None, auto_create: bool,
                       names: NameScope | None = None) -> Topic | None:
    """The topic named `name` (any of KoP's three spellings; short names in `names`, the connection's scope,
    None: the default). Creates it with defaultNumPartitions when absent, `auto_create` is set and
    allowAutoTopicCreation is on. Invalid names raise TopicError."""
    if not name:
        raise TopicError("INVALID_TOPIC_EXCEPTION", "Topic name is empty")
    topics = handler.service.topics
    try:
        tn = topics.parse(name) if names is None else names.parse(name)
    except InvalidTopicName as e:
        raise TopicError("INVALID_TOPIC_EXCEPTION", str(e)) from None
    topic = topics.get(tn)
    if topic is None and topics.ownership is not None:
        topic = await topics.refresh(tn)
    if topic is not None or not auto_create or not handler.config.allowAutoTopicCreation:
        return topic
    if tn.local.startswith("__"):
        return None  # internal names are never auto-created
    try:
        return await topics.create(tn, handler.config.defaultNumPartitions)
    except TopicError as e:
        if e.error == "TOPIC_ALREADY_EXISTS":
            return topics.get(tn)
        raise



def topic_by_id(handler: KafkaProtocolHandler, topic_id: bytes, names: NameScope) -> tuple[str, Topic] | None:
    """The topic a request names by id (Produce v13, Fetch v13+, OffsetCommit/OffsetFetch v10) and the name
    this connection knows it by (`names`: the connection's scope, kop/topics/scope.py), or None: the
    caller answers UNKNOWN_TOPIC_ID, as Kafka does for an id it does not know. Ids are looked up in this
    broker's topic cache only (a topic created by another broker a moment ago may not be there yet; the
    client retries after its next Metadata)."""
    if topic_id == ZERO_UUID:
        return None
    topic = handler.service.topics.get_by_id(topic_id)
    if topic is None:
        return None
    return names.kafka_name(topic.name), topic


class _ByTopicId(Protocol):
    topic_id: bytes
    name: str


def names_from_ids(ctx: RequestContext, entries: Sequence[_ByTopicId]) -> set[int]:
    """Requests that name topics by id (Produce v13, OffsetCommit v10): writes each entry's name (as this
    connection knows its topic) into it, so that the rest of the API - authorization, lookup, the partition seam
    - works on names as at the older versions; returns the positions of the entries whose id is unknown (their
    name stays as sent, "")."""
    unknown = set()
    for i, entry in enumerate(entries):
        found = topic_by_id(ctx.handler, entry.topic_id, ctx.names)
        if found is None:
            unknown.add(i)
        else:
            entry.name = found[0]
    return unknown
