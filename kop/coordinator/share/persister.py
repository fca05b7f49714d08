"""Where a share-partition leader reads and writes its share-partitions' durable state (Kafka's Persister,
KIP-932), alone and in cluster mode.

Kafka splits share groups three ways, and so does cluster mode here: the share-group coordinator (membership,
on the owner of the group's __consumer_offsets partition), the share-partition leader (the owner of the topic
partition: acquires records, holds the locks, serves ShareFetch/ShareAcknowledge) and the share coordinator
(the owner of the state's __share_group_state partition, placed by "group:topicId:partition" as Kafka does).
The leader and the share coordinator are usually different brokers, so the leader reads a share-partition's
state when it first serves it and writes it after each change with ReadShareGroupState (84) and
WriteShareGroupState (85), Kafka's inter-broker RPCs, to whichever broker owns that state partition now
(kop/kafka/apis/read_share_group_state.py, write_share_group_state.py serve them).

Why RPCs and not "the leader writes the state partition itself": every broker reaches the same bookies, but a
managed ledger has one writer - opening a partition's ledger on a broker that does not own it fences its owner
(docs/cluster.md) - and a state partition holds the states of many topic partitions led by different brokers.
Placing the state with the topic partition instead would change Kafka's placement and its topic's layout, which
Kafka's own tools (FindCoordinator's share keys, the __share_group_state formatter) rely on.

When the state partition is loaded on this broker the local store is used directly (standalone: always).
Otherwise one connection per broker, one request at a time, to the owner's first advertised Kafka listener,
without authentication (as the transaction markers' channel, kop/coordinator/transactions/markers.py).
Transient failures - the owner moving, loading, unreachable - are retried briefly (RETRIES x RETRY_S);
after that the caller gets PersisterError with Kafka's code and tries again later (a ShareFetch answers the
partition's error, a failed write stays pending and is written with the next flush).

How it differs from Kafka 4.4: the leader writes the share-partition's whole state each time (a snapshot),
so the share coordinator stores it as a ShareSnapshot, not as a ShareUpdate merged over the last one; the
StateEpoch/LeaderEpoch fields are 0 (no state resets, no leader epochs here). InitializeShareGroupState (the
leader's first write initializes), DeleteShareGroupState and ReadShareGroupStateSummary are not served, so
the admin APIs on share-group offsets act on the states of the broker they reach.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable
from typing import Protocol, cast

from kop.coordinator.broker_link import BrokerLink
from kop.coordinator.runtime import CoordinatorError
from kop.coordinator.share import records as srec
from kop.coordinator.share.store import ShareStateStore
from kop.protocol.errors import ErrorCode
from kop.protocol.messages import (
    ReadShareGroupStateRequest,
    ReadShareGroupStateResponse,
    WriteShareGroupStateRequest,
    WriteShareGroupStateResponse,
)
from kop.protocol.model import Struct
from kop.topics.names import TopicName

log = logging.getLogger(__name__)

READ_KEY, WRITE_KEY = 84, 85
CLIENT_ID = "kop-share-partition-leader"
REQUEST_TIMEOUT_S = 10.0
RETRIES = 10
RETRY_S = 0.3
#: errors that a moment later may be gone (the state partition moving, loading, its owner restarting)
TRANSIENT = frozenset({ErrorCode.NOT_COORDINATOR, ErrorCode.COORDINATOR_LOAD_IN_PROGRESS,
                       ErrorCode.COORDINATOR_NOT_AVAILABLE, ErrorCode.NETWORK_EXCEPTION})
Key = tuple[str, bytes, int]


class PersisterError(Exception):
    """A share-partition state could not be read or written; `error` is Kafka's code for it."""

    def __init__(self, error: int, message: str = "") -> None:
        super().__init__(message or ErrorCode(error).name)
        self.error = error


class Owner(Protocol):
    @property
    def broker_id(self) -> int: ...

    @property
    def host(self) -> str: ...

    @property
    def port(self) -> int: ...


class Placement(Protocol):
    """What the persister asks of the broker's ownership (kop/cluster/ownership.py)."""

    @property
    def clustered(self) -> bool: ...

    async def owner_of(self, topic: TopicName, partition: int, wait: float = 1.0) -> Owner | None: ...


class SharePersister:
    """Reads and writes share-partition states, locally or at the share coordinator (module docstring)."""

    def __init__(self, store: ShareStateStore, placement: Placement | None, broker_id: int) -> None:
        self.store = store
        self.placement = placement if placement is not None and placement.clustered else None
        self.broker_id = broker_id
        self._connections: dict[tuple[str, int], BrokerLink] = {}

    @property
    def clustered(self) -> bool:
        return self.placement is not None

    def local(self, key: Key) -> bool:
        """Whether this broker holds the key's state partition now (standalone: always)."""
        return self.placement is None or self.store.runtime.is_loaded(self.store.partition_of(key))

    async def read(self, key: Key) -> srec.ShareState | None:
        """The durable state of `key` (None: never written, or deleted)."""
        await self.store.ready()
        return await self._retried(lambda: self._read_once(key))

    async def write(self, key: Key, state: srec.ShareState, now_ms: int) -> None:
        """Write `key`'s whole state, durable when this returns."""
        await self.store.ready()
        await self._retried(lambda: self._write_once(key, state, now_ms))

    async def _retried(self, call: Callable[[], Awaitable[srec.ShareState | None]]) -> srec.ShareState | None:
        for attempt in range(RETRIES):
            try:
                return await call()
            except PersisterError as e:
                if e.error not in TRANSIENT or attempt == RETRIES - 1:
                    raise
            await asyncio.sleep(RETRY_S)
        raise AssertionError("unreachable")

    async def _owner(self, key: Key) -> BrokerLink | None:
        """The connection to the state partition's owner; None when that is this broker and it is loaded."""
        if self.local(key):
            return None
        assert self.placement is not None and self.store.runtime.topic is not None
        p = self.store.partition_of(key)
        owner = await self.placement.owner_of(self.store.runtime.topic.name, p)
        if owner is None:
            raise PersisterError(ErrorCode.COORDINATOR_NOT_AVAILABLE, f"no owner of {self.store.topic_name}-{p}")
        if owner.broker_id == self.broker_id:
            self.store.runtime.load_partition(p)  # ours, not loaded (yet): loaded now if it is not loading
            raise PersisterError(ErrorCode.COORDINATOR_LOAD_IN_PROGRESS)
        conn = self._connections.get((owner.host, owner.port))
        if conn is None:
            conn = self._connections[(owner.host, owner.port)] = BrokerLink(owner.host, owner.port, CLIENT_ID)
        return conn

    async def _call(self, conn: BrokerLink, api_key: int, body: Struct) -> Struct:
        try:
            return await asyncio.wait_for(conn.request(body, api_key, 0), REQUEST_TIMEOUT_S)
        except Exception as e:  # noqa: BLE001 - refused, timed out, broken frame: retried as a network error
            conn.close()
            raise PersisterError(ErrorCode.NETWORK_EXCEPTION, f"{conn.host}:{conn.port}: {e!r}") from None

    async def _read_once(self, key: Key) -> srec.ShareState | None:
        conn = await self._owner(key)
        if conn is None:
            return self.store.states.get(key)
        R = ReadShareGroupStateRequest
        body = R(group_id=key[0], topics=[R.ReadStateData(topic_id=key[1], partitions=[
            R.ReadStateData.PartitionData(partition=key[2], leader_epoch=0)])])
        got = cast(ReadShareGroupStateResponse, await self._call(conn, READ_KEY, body))
        for t in got.results:
            for p in t.partitions:
                if t.topic_id == key[1] and p.partition == key[2]:
                    if p.error_code:
                        raise PersisterError(p.error_code, p.error_message or "")
                    if p.start_offset < 0:
                        return None
                    return srec.ShareState(p.start_offset, tuple(
                        (b.first_offset, b.last_offset, b.delivery_state, b.delivery_count) for b in p.state_batches))
        raise PersisterError(ErrorCode.UNKNOWN_SERVER_ERROR, "no result for the share-partition")

    async def _write_once(self, key: Key, state: srec.ShareState, now_ms: int) -> None:
        conn = await self._owner(key)
        if conn is None:
            try:
                await self.store.write(key, state, now_ms)
            except CoordinatorError as e:  # unloaded meanwhile: the next attempt asks its new owner
                raise PersisterError(e.error) from None
            return
        R = WriteShareGroupStateRequest
        P = R.WriteStateData.PartitionData
        body = R(group_id=key[0], topics=[R.WriteStateData(topic_id=key[1], partitions=[P(
            partition=key[2], state_epoch=0, leader_epoch=0, start_offset=state.start_offset,
            state_batches=[P.StateBatch(first_offset=f, last_offset=la, delivery_state=s, delivery_count=c)
                           for f, la, s, c in state.batches])])])
        got = cast(WriteShareGroupStateResponse, await self._call(conn, WRITE_KEY, body))
        for t in got.results:
            for p in t.partitions:
                if p.error_code:
                    raise PersisterError(p.error_code, p.error_message or "")

    def close(self) -> None:
        for conn in self._connections.values():
            with contextlib.suppress(Exception):
                conn.close()
        self._connections.clear()

