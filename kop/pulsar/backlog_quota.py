"""Pulsar's backlog quota: how far a durable subscription may fall behind before the broker acts.

Retention keeps every ledger a durable subscription has not acknowledged (kop/pulsar/subscriptions.py's
`backlog_floor`, used by kop/topics/chores.py), so a stalled subscription would keep data forever; the quota
bounds it, with Pulsar's broker keys and policies:

* ``backlogQuotaDefaultLimitBytes`` - the estimated size of a subscription's backlog: the entries after its
  mark-delete position times the partition's average stored entry size (Pulsar sums the ledgers after it and
  counts the ledger holding it pro rata by entries; the two agree when entries are of similar sizes),
* ``backlogQuotaDefaultLimitSecond`` - the age of its oldest unacknowledged entry since it was stored (the broker
  entry timestamp of its append: the publish time of a Pulsar producer's message; a Kafka record's own timestamp
  may be anything the producer chose),
* ``backlogQuotaDefaultRetentionPolicy`` when either is exceeded:
  ``producer_request_hold`` - producers are disconnected and new ones refused with
  ProducerBlockedQuotaExceededError (the clients keep retrying, holding their sends, until the backlog shrinks);
  ``producer_exception`` - the same with ProducerBlockedQuotaExceededException (the clients fail their sends);
  ``consumer_backlog_eviction`` - the slowest subscriptions skip their oldest entries until within the quota.

The check runs every ``backlogQuotaCheckIntervalInSeconds`` over the partitions the pulsar handler serves, and
on every PRODUCER. Kafka consumer groups are not cursors: they neither hold data back nor count here.
A namespace's backlogQuota policy (kop/topics/namespaces.py, `backlog_quota_map`) replaces the broker's limit and
policy for each quota type it sets: destination_storage (limitSize, bytes) and message_age (limitTime, seconds);
a topic's own backlogQuota policy replaces its namespace's the same way, type by type.
"""

from __future__ import annotations

import logging
import math
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING

from kop.protocol.records import parse_batch_header
from kop.pulsar.codec import commands as c
from kop.pulsar.subscriptions import backlog_entries, move_forward, nth_unacked
from kop.topics.namespaces import DESTINATION_STORAGE, MESSAGE_AGE

if TYPE_CHECKING:
    from kop.config import BrokerConfig
    from kop.pulsar.subscription import PartitionState, Subscription

log = logging.getLogger(__name__)

HOLD, EXCEPTION, EVICTION = "producer_request_hold", "producer_exception", "consumer_backlog_eviction"


@dataclass(frozen=True, slots=True)
class Quota:
    """The backlog quota of one partition: per quota type (Pulsar's destination_storage and message_age) its
    limit (-1: none) and policy."""

    limit_bytes: int
    limit_seconds: int
    size_policy: str
    age_policy: str

    @property
    def limited(self) -> bool:
        return self.limit_bytes >= 0 or self.limit_seconds >= 0

    def policies(self, size_over: bool, age_over: bool) -> set[str]:
        """The policies of the quota types exceeded."""
        return ({self.size_policy} if size_over else set()) | ({self.age_policy} if age_over else set())


def quota_of(cfg: BrokerConfig, state: PartitionState) -> Quota:
    """The partition's quota: for each type, its topic's backlogQuota policy, else its namespace's
    (kop/topics/namespaces.py), else the broker's backlogQuotaDefault* keys, as Pulsar resolves them."""
    broker = Quota(cfg.backlogQuotaDefaultLimitBytes, cfg.backlogQuotaDefaultLimitSecond,
                   cfg.backlogQuotaDefaultRetentionPolicy, cfg.backlogQuotaDefaultRetentionPolicy)
    name = state.seam.topic.name
    quotas = state.handler.service.topics.namespaces.backlog_quotas(name)
    if not quotas:
        return broker
    storage, age = quotas.get(DESTINATION_STORAGE), quotas.get(MESSAGE_AGE)
    limit_bytes, size_policy = broker.limit_bytes, broker.size_policy
    limit_seconds, age_policy = broker.limit_seconds, broker.age_policy
    if isinstance(storage, dict):
        limit_bytes, size_policy = int(storage.get("limitSize", -1)), str(storage.get("policy", HOLD))
    if isinstance(age, dict):
        limit_seconds, age_policy = int(age.get("limitTime", -1)), str(age.get("policy", HOLD))
    return Quota(limit_bytes, limit_seconds, size_policy, age_policy)


async def backlog_bytes(sub: Subscription) -> int:
    """Estimated bytes of the entries after the mark-delete position (acknowledged ones included, as Pulsar's
    estimate): their count times the average size of the entries the partition holds."""
    plog = sub.plog
    if sub.next_offset >= plog.high_watermark:
        return 0
    entries = await plog.entries_from(sub.next_offset)
    stored = await plog.entries_from(plog.log_start_offset)
    if not entries or not stored:
        return 0
    return plog.size_bytes * min(entries, stored) // stored


async def oldest_age_ms(sub: Subscription, now_ms: int) -> int:
    """Age of the oldest unacknowledged entry: since its broker append time (the batch's own max timestamp
    for an entry stored without one)."""
    plog = sub.plog
    if sub.next_offset >= plog.high_watermark:
        return 0
    offset = max(sub.next_offset, plog.log_start_offset)
    appended = (await plog.entry_offsets(await plog.position_of(offset))).append_time
    if appended <= 0:
        got = await plog.read(offset, 1)
        appended = parse_batch_header(got.batches[0].batch).max_timestamp if got.batches else now_ms
    return max(0, now_ms - appended)


async def exceeded(q: Quota, sub: Subscription, now_ms: int) -> tuple[bool, bool]:
    """(over the size limit, over the time limit) for one durable subscription."""
    size = q.limit_bytes >= 0 and await backlog_bytes(sub) > q.limit_bytes
    age = q.limit_seconds >= 0 and await oldest_age_ms(sub, now_ms) > q.limit_seconds * 1000
    return size, age


async def partition_exceeded(q: Quota, state: PartitionState) -> set[str]:
    """The policies of the quota types some durable subscription of the partition exceeds."""
    now = int(time.time() * 1000)
    out: set[str] = set()
    for sub in list(state.subscriptions.values()):
        if sub.durable:
            out |= q.policies(*await exceeded(q, sub, now))
    return out


async def refusal(cfg: BrokerConfig, state: PartitionState) -> tuple[int, str] | None:
    """The error a PRODUCER gets while the partition's backlog is over quota (producer_* policies). First of the
    PRODUCER's namespace-policy checks, it re-reads them in cluster mode (max producers, deduplication follow)."""
    await state.handler.service.topics.namespaces.fresh(state.seam.topic.name)
    q = quota_of(cfg, state)
    if not cfg.backlogQuotaCheckEnabled or not q.limited or {q.size_policy, q.age_policy} == {EVICTION}:
        return None
    over = await partition_exceeded(q, state) - {EVICTION}
    if not over:
        return None
    if EXCEPTION in over:
        return c.ServerError.ProducerBlockedQuotaExceededException, "Cannot create producer on topic with " \
            "backlog quota exceeded"
    return c.ServerError.ProducerBlockedQuotaExceededError, "Cannot create producer on topic with backlog " \
        "quota exceeded"


async def evict(q: Quota, sub: Subscription, size_over: bool, age_over: bool) -> None:
    """consumer_backlog_eviction: skip the oldest entries until the subscription is within the quota."""
    plog = sub.plog
    if age_over:
        await move_forward(sub, await plog.offset_appended_since(int(time.time() * 1000) - q.limit_seconds * 1000))
    if size_over:
        size = await backlog_bytes(sub)
        entries = await backlog_entries(sub)
        if size > q.limit_bytes and entries:
            skip = min(entries, math.ceil((size - q.limit_bytes) / (size / entries)))
            pos = await nth_unacked(sub, skip)
            target = plog.high_watermark if pos is None else await plog.offset_after(pos)
            await move_forward(sub, target)


async def check(cfg: BrokerConfig, states: list[PartitionState]) -> int:
    """One pass over the served partitions; returns on how many a policy acted."""
    if not cfg.backlogQuotaCheckEnabled:
        return 0
    acted = 0
    now = int(time.time() * 1000)
    for state in states:
        await state.handler.service.topics.namespaces.fresh(state.seam.topic.name)  # cluster mode: set elsewhere
        q = quota_of(cfg, state)
        if not q.limited:
            continue
        over = []
        for sub in list(state.subscriptions.values()):
            if sub.durable:
                size_over, age_over = await exceeded(q, sub, now)
                if size_over or age_over:
                    over.append((sub, size_over, age_over))
        if not over:
            continue
        acted += 1
        for sub, size_over, age_over in over:
            evict_size, evict_age = size_over and q.size_policy == EVICTION, age_over and q.age_policy == EVICTION
            if evict_size or evict_age:
                log.info("%s/%s: backlog over quota; evicting its oldest entries", state.ledger_name, sub.name)
                await evict(q, sub, evict_size, evict_age)
        if any(q.policies(size_over, age_over) - {EVICTION} for _, size_over, age_over in over):
            # the producers reconnect and are refused (refusal) until the backlog is within the quota
            for p in list(state.producers.values()):
                p.conn.send(c.command(c.CLOSE_PRODUCER, producer_id=p.producer_id, request_id=0))
                p.conn.producers.pop(p.producer_id, None)
                p.close()
    return acted
