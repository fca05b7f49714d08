"""BrokerServices: the broker's shared services as its plugins see them.

A protocol handler (kop/protocol_handler.py) and the admin HTTP server get this, not the broker service
itself: they sit below the composition root (kop/server/), so they name what they use through this
interface and never import the class that builds it. `kop.server.service.BrokerService` implements it.
"""

from __future__ import annotations

from typing import Protocol

from kop.cluster.ownership import Ownership
from kop.config import BrokerConfig
from kop.coordinator import GroupCoordinator
from kop.metrics import BrokerMetrics
from kop.net.acceptor import Acceptor
from kop.offset.storage import LogStorage
from kop.topics.manager import TopicManager
from kop.topics.producer_ids import ProducerIdAllocator


class BrokerServices(Protocol):
    config: BrokerConfig
    topics: TopicManager
    producer_ids: ProducerIdAllocator
    coordinator: GroupCoordinator
    ownership: Ownership  # who serves which partition (this broker alone outside cluster mode)
    metrics: BrokerMetrics
    net: Acceptor  # connection limits and the request-bytes bound, shared by every protocol handler
    storage: LogStorage  # the partition logs' stores (readiness probes, damage reports)
    cluster_id: str
    started_ms: int  # wall-clock start time (DescribeCluster, /admin/v2/brokers)
    ready: bool  # topics loaded and every listener accepting (/ready)
    stopped: bool
