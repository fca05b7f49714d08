"""Markers across brokers (cluster mode): a small Kafka client that sends WriteTxnMarkers v1 to the broker that
owns a partition, as Kafka's transaction marker channel does between brokers; and the other way round,
AddPartitionsToTxn v5 (Kafka's inter-broker form) from a partition's broker to the transaction coordinator,
for the implicit partition add of a TV2 producer's Produce (KIP-890 part 2), as Kafka's AddPartitionsToTxnManager.

One connection per broker address, one request at a time on it (markers of one transaction are few; a
coordinator drives transactions concurrently, each waits its turn on the connection), over kop.protocol's
codec. A failure (refused connection, timeout, broken frame) closes the connection and answers
NETWORK_EXCEPTION for the partition, which the coordinator retries like any retriable marker error.
No authentication: the connection goes to the owner's first advertised Kafka listener as is.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Sequence
from typing import Protocol, cast

from kop.coordinator.broker_link import BrokerLink
from kop.protocol import api_info
from kop.protocol.errors import ErrorCode
from kop.protocol.messages import AddPartitionsToTxnRequest, AddPartitionsToTxnResponse
from kop.protocol.model import Struct

log = logging.getLogger(__name__)

API_KEY = 27
VERSION = 1
ADD_PARTITIONS_KEY = 24
ADD_PARTITIONS_VERSION = 5
REQUEST_TIMEOUT_S = 30.0
CLIENT_ID = "kop-transaction-coordinator"


# The shape of kop.protocol's generated WriteTxnMarkers v1 classes, as this client uses them.
class _MarkerTopicClass(Protocol):
    def __call__(self, *, name: str, partition_indexes: list[int]) -> Struct: ...


class _MarkerClass(Protocol):
    WritableTxnMarkerTopic: _MarkerTopicClass

    def __call__(self, *, producer_id: int, producer_epoch: int, transaction_result: bool, topics: list[Struct],
                 coordinator_epoch: int) -> Struct: ...


class _RequestClass(Protocol):
    WritableTxnMarker: _MarkerClass

    def __call__(self, *, markers: list[Struct]) -> Struct: ...


class _PartitionResult(Protocol):
    partition_index: int
    error_code: int


class _TopicResult(Protocol):
    name: str
    partitions: Sequence[_PartitionResult]


class _MarkerResult(Protocol):
    topics: Sequence[_TopicResult]


class _Response(Protocol):
    markers: Sequence[_MarkerResult]


class MarkerChannel:
    """WriteTxnMarkers to other brokers; see the module docstring."""

    def __init__(self) -> None:
        self._connections: dict[tuple[str, int], BrokerLink] = {}

    async def write_marker(self, host: str, port: int, topic: str, partition: int, producer_id: int,
                           producer_epoch: int, commit: bool, coordinator_epoch: int) -> int:
        """The owner's error code for the marker of one partition (0: written)."""
        R = cast("_RequestClass", api_info(API_KEY).request_class)
        body = R(markers=[R.WritableTxnMarker(
            producer_id=producer_id, producer_epoch=producer_epoch, transaction_result=commit,
            topics=[R.WritableTxnMarker.WritableTxnMarkerTopic(name=topic, partition_indexes=[partition])],
            coordinator_epoch=coordinator_epoch)])
        conn = self._connection(host, port)
        try:
            response = cast("_Response", await asyncio.wait_for(conn.request(body, API_KEY, VERSION), REQUEST_TIMEOUT_S))
        except Exception as e:  # noqa: BLE001 - refused, timed out, broken frame: the marker is retried
            log.warning("WriteTxnMarkers to %s:%d failed: %r", host, port, e)
            conn.close()
            return ErrorCode.NETWORK_EXCEPTION
        for marker in response.markers:
            for t in marker.topics:
                for p in t.partitions:
                    if t.name == topic and p.partition_index == partition:
                        return int(p.error_code)
        return ErrorCode.UNKNOWN_SERVER_ERROR

    async def add_partitions(self, host: str, port: int, transactional_id: str, producer_id: int,
                             producer_epoch: int, topic: str, partition: int) -> int:
        """The coordinator's error code for adding one partition to a TV2 transaction (0: added)."""
        R = AddPartitionsToTxnRequest
        body = R(transactions=[R.AddPartitionsToTxnTransaction(
            transactional_id=transactional_id, producer_id=producer_id, producer_epoch=producer_epoch,
            verify_only=False, topics=[R.AddPartitionsToTxnTopic(name=topic, partitions=[partition])])])
        conn = self._connection(host, port)
        try:
            response = cast(AddPartitionsToTxnResponse, await asyncio.wait_for(
                conn.request(body, ADD_PARTITIONS_KEY, ADD_PARTITIONS_VERSION), REQUEST_TIMEOUT_S))
        except Exception as e:  # noqa: BLE001 - refused, timed out, broken frame: the producer retries
            log.warning("AddPartitionsToTxn to %s:%d failed: %r", host, port, e)
            conn.close()
            return ErrorCode.NETWORK_EXCEPTION
        if response.error_code:
            return int(response.error_code)
        for txn in response.results_by_transaction:
            for t in txn.topic_results:
                for p in t.results_by_partition:
                    if t.name == topic and p.partition_index == partition:
                        return int(p.partition_error_code)
        return ErrorCode.UNKNOWN_SERVER_ERROR

    def _connection(self, host: str, port: int) -> BrokerLink:
        conn = self._connections.get((host, port))
        if conn is None:
            conn = self._connections[(host, port)] = BrokerLink(host, port, CLIENT_ID)
        return conn

    def close(self) -> None:
        for conn in self._connections.values():
            with contextlib.suppress(Exception):
                conn.close()
        self._connections.clear()
