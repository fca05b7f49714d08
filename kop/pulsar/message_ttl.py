"""Pulsar's message TTL: a topic's messageTTL policy, else its namespace's (`message_ttl_in_seconds`,
kop/topics/namespaces.py), acknowledges, on every subscription of its topics' partitions, the messages published longer ago than the TTL -
what Pulsar's PersistentMessageExpiryMonitor does, and what `expire-messages` does once over the admin REST.

Why the backlog-quota pass's interval: Pulsar runs the expiry every `messageExpiryCheckIntervalInMinutes` (5 by
default); this broker runs it beside the backlog quota check, every `backlogQuotaCheckIntervalInSeconds` (60 by
default), one timer for the two passes that move slow subscriptions forward by age. Only partitions the pulsar
handler serves are looked at (a partition opened by no Pulsar client has no subscription in memory); the expiry
goes by the publish time a consumer of ours reads (kop/pulsar/subscriptions.py `published_since`). Kafka consumer
groups are not subscriptions: the TTL does not move them (retention is what deletes data for them).
"""

from __future__ import annotations

import logging
import time
from typing import TYPE_CHECKING

from kop.pulsar.subscriptions import move_forward, published_since
from kop.topics.namespaces import MESSAGE_TTL

if TYPE_CHECKING:
    from kop.pulsar.subscription import PartitionState
    from kop.topics.namespaces import Namespaces

log = logging.getLogger(__name__)


async def expire(namespaces: Namespaces, states: list[PartitionState]) -> int:
    """One pass: returns on how many subscriptions messages expired."""
    now = int(time.time() * 1000)
    moved = 0
    for state in states:
        await namespaces.fresh(state.seam.topic.name)  # cluster mode: policies set on another broker
        ttl = namespaces.limit(state.seam.topic.name, MESSAGE_TTL)
        if ttl <= 0:
            continue
        for sub in list(state.subscriptions.values()):
            if sub.next_offset >= sub.plog.high_watermark:
                continue
            before = sub.next_offset
            await move_forward(sub, await published_since(sub.plog, now - ttl * 1000))
            if sub.next_offset != before:
                moved += 1
                log.debug("%s/%s: messages older than %d s expired", state.ledger_name, sub.name, ttl)
    return moved
