"""Helpers shared by several API modules: topic lookup with auto-creation, error names."""

from __future__ import annotations

from typing import Any

from kop.broker.names import InvalidTopicName
from kop.broker.topics import Topic, TopicError

# The leader epoch this broker reports everywhere (Metadata, ListOffsets, OffsetForLeaderEpoch, stored
# batches). One node owns every partition for its whole life, so one constant epoch is the honest value.
# A real epoch (not -1) keeps Java clients' KIP-320 position validation on, and matches what Apache Kafka
# reports for a fresh topic, so tools print the same columns.
LEADER_EPOCH = 0


async def lookup_topic(handler: Any, name: str | None, auto_create: bool) -> Topic | None:
    """The topic named `name` (any of KoP's three spellings). Creates it with defaultNumPartitions when
    absent, `auto_create` is set and allowAutoTopicCreation is on. Invalid names raise TopicError."""
    if not name:
        raise TopicError("INVALID_TOPIC_EXCEPTION", "Topic name is empty")
    topics = handler.service.topics
    try:
        tn = topics.parse(name)
    except InvalidTopicName as e:
        raise TopicError("INVALID_TOPIC_EXCEPTION", str(e)) from None
    topic = topics.get(tn)
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
