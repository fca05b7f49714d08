"""Consumer lag: log end offset - committed offset, per group and partition (KoP never had it).

Committed offsets come from the group coordinator (kop/coordinator); log end offsets from the partition
logs (the high watermark: with one replica, what Kafka's tools call the log end offset). Lag is computed
when /metrics is scraped (and for topic stats), never on the produce or fetch path.

Transactions: lag is measured against the high watermark, not the last stable offset - as
kafka-consumer-groups.sh does (its ListOffsets asks for LATEST with READ_UNCOMMITTED). So a read_committed
group waiting behind an open transaction shows that transaction's records as lag, which is what it is
still to read; markers count as offsets (a caught-up consumer's position is past them).
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from kop.metrics import LagSample

if TYPE_CHECKING:
    from kop.services import BrokerServices

log = logging.getLogger(__name__)


def committed_offsets(service: BrokerServices) -> list[tuple[str, str, int, int]]:
    """(group, topic as persistent://tenant/ns/name, partition, committed offset) for every durable commit
    the group coordinator holds. The coordinator keys topics by their Kafka name
    (`t`, or `tenant/ns/t` outside the default namespace); the admin side speaks Pulsar's full names."""
    coordinator = service.coordinator
    out = []
    topics = service.topics
    for (group, topic, partition), offset in coordinator.committed_offsets().items():
        try:
            canonical = topics.parse(topic).canonical
        except ValueError:
            continue
        if offset >= 0:
            out.append((group, canonical, partition, offset))
    return out


async def lag_samples(service: BrokerServices) -> list[LagSample]:
    """One sample per committed (group, partition) of a topic that still exists."""
    out = []
    topics = service.topics
    for group, canonical, partition, committed in committed_offsets(service):
        topic = topics.get(topics.parse(canonical))
        if topic is None or not 0 <= partition < topic.partitions or not topics.owns(topic, partition):
            continue
        try:
            plog = await topics.partition_log(topic, partition)
        except Exception as e:  # a partition that cannot be opened must not break the scrape
            log.warning("lag: cannot open %s partition %d: %r", canonical, partition, e)
            continue
        out.append(LagSample(group, canonical, partition, committed, plog.high_watermark))
    return out


async def refresh(service: BrokerServices) -> None:
    """Recompute the lag the next /metrics exposition reports."""
    service.metrics.lag = await lag_samples(service)
