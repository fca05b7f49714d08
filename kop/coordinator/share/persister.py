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

The five RPCs are Kafka 4.4's: InitializeShareGroupState (83), ReadShareGroupState (84), WriteShareGroupState
(85), DeleteShareGroupState (86) and ReadShareGroupStateSummary (87). When the state partition is loaded on
this broker (standalone: always) the local store answers by the same rules (kop/coordinator/share/shard.py,
store.py `_change`), so alone and in cluster mode a share-partition goes through one path. Otherwise one
connection per broker, one request at a time, to the owner's first advertised Kafka listener, without
authentication (as the transaction markers' channel, kop/coordinator/transactions/markers.py). Transient
failures - the owner moving, loading, unreachable - are retried briefly (RETRIES x RETRY_S); after that, and
for the share coordinator's refusals (FENCED_STATE_EPOCH, FENCED_LEADER_EPOCH, INVALID_REQUEST), the caller
gets PersisterError with Kafka's code (a ShareFetch answers the partition's error, a failed write stays
pending and is written with the next flush, a fenced one makes the leader forget the share-partition).

Epochs: a leader takes a share-partition up (`take_up`) by reading it at the recorded leader epoch + 1, which
fences the leader before it; AlterShareGroupOffsets initializes at a raised state epoch, which fences a
leader still holding the old window. How it differs from Kafka 4.4: Kafka's leaders carry the topic
partition's leader epoch (KRaft's), and its group coordinator initializes share-partitions on assignment;
here partitions have no leader epochs (one owner at a time through the bundle lease), so the leader reads the
recorded one from the summary first, and initializes the share-partition itself when it is not. The leader
writes the share-partition's whole state each time (a snapshot), so the share coordinator stores it as a
ShareSnapshot, not as a ShareUpdate merged over the last one.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Awaitable, Callable, Sequence
from typing import Protocol, TypeVar, cast

from kop.coordinator.broker_link import BrokerLink
from kop.coordinator.share import records as srec
from kop.coordinator.share import shard
from kop.coordinator.share.shard import Refused, Summary
from kop.coordinator.share.store import ShareStateStore
from kop.protocol.errors import ErrorCode
from kop.protocol.messages import (
    DeleteShareGroupStateRequest,
    InitializeShareGroupStateRequest,
    ListOffsetsRequest,
    ListOffsetsResponse,
    ReadShareGroupStateRequest,
    ReadShareGroupStateResponse,
    ReadShareGroupStateSummaryRequest,
    ReadShareGroupStateSummaryResponse,
    WriteShareGroupStateRequest,
)
from kop.protocol.model import Struct
from kop.topics.names import TopicName

log = logging.getLogger(__name__)

INITIALIZE_KEY, READ_KEY, WRITE_KEY, DELETE_KEY, SUMMARY_KEY = 83, 84, 85, 86, 87
LIST_OFFSETS_KEY = 2
CLIENT_ID = "kop-share-partition-leader"
REQUEST_TIMEOUT_S = 10.0
RETRIES = 10
RETRY_S = 0.3
#: errors that a moment later may be gone (the state partition moving, loading, its owner restarting)
TRANSIENT = frozenset({ErrorCode.NOT_COORDINATOR, ErrorCode.COORDINATOR_LOAD_IN_PROGRESS,
                       ErrorCode.COORDINATOR_NOT_AVAILABLE, ErrorCode.NETWORK_EXCEPTION})
Key = tuple[str, bytes, int]
Local = TypeVar("Local")


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


class _PartitionAnswer(Protocol):
    @property
    def error_code(self) -> int: ...

    @property
    def error_message(self) -> str | None: ...


class _TopicAnswer(Protocol):
    @property
    def partitions(self) -> Sequence[_PartitionAnswer]: ...


class _Answer(Protocol):
    """What the five share coordinator RPCs' responses have in common."""

    @property
    def results(self) -> Sequence[_TopicAnswer]: ...


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

    async def initialize(self, key: Key, state_epoch: int, start_offset: int) -> None:
        """InitializeShareGroupState: a fresh state at `start_offset` (-1: share.auto.offset.reset decides)."""
        R = InitializeShareGroupStateRequest
        body = R(group_id=key[0], topics=[R.InitializeStateData(topic_id=key[1], partitions=[R.PartitionData(
            partition=key[2], state_epoch=state_epoch, start_offset=start_offset)])])
        await self._retried(key, lambda s, now: s.initialize(key, state_epoch, start_offset, now), INITIALIZE_KEY, body)

    async def read(self, key: Key, leader_epoch: int) -> srec.ShareState:
        """ReadShareGroupState at `leader_epoch` (recorded when newer; FENCED_LEADER_EPOCH when older)."""
        R = ReadShareGroupStateRequest
        body = R(group_id=key[0], topics=[R.ReadStateData(topic_id=key[1], partitions=[
            R.ReadStateData.PartitionData(partition=key[2], leader_epoch=leader_epoch)])])
        got = await self._retried(key, lambda s, now: s.read(key, leader_epoch, now), READ_KEY, body)
        if isinstance(got, srec.ShareState):
            return got
        p = cast(ReadShareGroupStateResponse.PartitionResult, got)
        return srec.ShareState(p.start_offset, tuple(
            (b.first_offset, b.last_offset, b.delivery_state, b.delivery_count) for b in p.state_batches),
            state_epoch=p.state_epoch, leader_epoch=leader_epoch)

    async def write(self, key: Key, state: srec.ShareState) -> None:
        """WriteShareGroupState of `key`'s whole window with the epochs in `state`, durable when this returns."""
        R = WriteShareGroupStateRequest
        P = R.WriteStateData.PartitionData
        body = R(group_id=key[0], topics=[R.WriteStateData(topic_id=key[1], partitions=[P(
            partition=key[2], state_epoch=state.state_epoch, leader_epoch=state.leader_epoch,
            start_offset=state.start_offset,
            state_batches=[P.StateBatch(first_offset=f, last_offset=la, delivery_state=s, delivery_count=c)
                           for f, la, s, c in state.batches])])])
        await self._retried(key, lambda s, now: s.write_state(key, state.state_epoch, state.leader_epoch,
                                                               state.start_offset, state.batches, now),
                            WRITE_KEY, body)

    async def delete(self, key: Key) -> None:
        """DeleteShareGroupState: `key`'s state is tombstoned (nothing to do when it has none)."""
        R = DeleteShareGroupStateRequest
        body = R(group_id=key[0], topics=[R.DeleteStateData(topic_id=key[1], partitions=[
            R.DeleteStateData.PartitionData(partition=key[2])])])
        await self._retried(key, lambda s, now: s.delete(key, now), DELETE_KEY, body)

    async def summary(self, key: Key) -> Summary:
        """ReadShareGroupStateSummary (v1): epochs, start offset (-1: never initialized) and the records done."""
        R = ReadShareGroupStateSummaryRequest
        body = R(group_id=key[0], topics=[R.ReadStateSummaryData(topic_id=key[1], partitions=[
            R.ReadStateSummaryData.PartitionData(partition=key[2], leader_epoch=0)])])

        async def local(s: ShareStateStore, now: int) -> Refused | Summary:
            return s.summary(key)
        got = await self._retried(key, local, SUMMARY_KEY, body, version=1)
        if isinstance(got, Summary):
            return got
        p = cast(ReadShareGroupStateSummaryResponse.PartitionResult, got)
        return Summary(p.state_epoch, p.leader_epoch, p.start_offset, p.delivery_complete_count)

    async def take_up(self, key: Key) -> srec.ShareState:
        """What a share-partition leader does when it starts serving a share-partition: read its state at a
        leader epoch above the one recorded, so the leader before it is fenced from writing it again. A
        share-partition never initialized is initialized first (start offset -1: the leader applies
        share.auto.offset.reset). Kafka's group coordinator initializes on assignment and its leaders carry
        the partition's leader epoch; here the partition leader does both (no per-partition leader epochs)."""
        epoch = (await self.summary(key)).leader_epoch + 1
        try:
            return await self.read(key, epoch)
        except PersisterError as e:
            if e.error != ErrorCode.INVALID_REQUEST or str(e) != shard.READ_UNINITIALIZED:
                raise
        await self.initialize(key, 0, shard.UNINITIALIZED_START_OFFSET)
        return await self.read(key, epoch)

    async def _retried(self, key: Key, local: Callable[[ShareStateStore, int], Awaitable[Local]], api_key: int,
                       body: Struct, version: int = 0) -> Local | Struct:
        """One RPC, at the local store when this broker holds the key's state partition, else at its owner,
        retried briefly on TRANSIENT errors; the single partition's answer, or PersisterError."""
        await self.store.ready()
        for attempt in range(RETRIES):
            try:
                conn = await self._owner(key)
                if conn is None:
                    got = await local(self.store, int(time.time() * 1000))
                    if isinstance(got, Refused):
                        raise PersisterError(got.error, got.message or "")
                    return got
                return self._partition(await self._call(conn, api_key, version, body))
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

    async def _call(self, conn: BrokerLink, api_key: int, version: int, body: Struct) -> Struct:
        try:
            return await asyncio.wait_for(conn.request(body, api_key, version), REQUEST_TIMEOUT_S)
        except Exception as e:  # noqa: BLE001 - refused, timed out, broken frame: retried as a network error
            conn.close()
            raise PersisterError(ErrorCode.NETWORK_EXCEPTION, f"{conn.host}:{conn.port}: {e!r}") from None

    @staticmethod
    def _partition(response: Struct) -> Struct:
        """The one partition result of a share coordinator RPC's response (each asks one share-partition)."""
        for t in cast(_Answer, response).results:
            for p in t.partitions:
                if p.error_code:
                    raise PersisterError(p.error_code, p.error_message or "")
                return cast(Struct, p)
        raise PersisterError(ErrorCode.UNKNOWN_SERVER_ERROR, "no result for the share-partition")

    async def high_watermark(self, topic: TopicName, kafka_name: str, partition: int, timestamp: int = -1) -> int:
        """The high watermark (`timestamp` -1, ListOffsets' latest; -2: the log start offset) of a topic
        partition another broker leads, from its owner: what DescribeShareGroupOffsets's lag and
        AlterShareGroupOffsets's bounds need at the group coordinator, which leads other partitions."""
        if self.placement is None:
            raise PersisterError(ErrorCode.NOT_LEADER_OR_FOLLOWER)
        owner = await self.placement.owner_of(topic, partition)
        if owner is None or owner.broker_id == self.broker_id:
            raise PersisterError(ErrorCode.NOT_LEADER_OR_FOLLOWER)
        conn = self._connections.get((owner.host, owner.port))
        if conn is None:
            conn = self._connections[(owner.host, owner.port)] = BrokerLink(owner.host, owner.port, CLIENT_ID)
        R = ListOffsetsRequest
        body = R(replica_id=-1, isolation_level=0, topics=[R.ListOffsetsTopic(name=kafka_name, partitions=[
            R.ListOffsetsPartition(partition_index=partition, current_leader_epoch=-1, timestamp=timestamp)])])
        got = cast(ListOffsetsResponse, await self._call(conn, LIST_OFFSETS_KEY, 4, body))
        for t in got.topics:
            for p in t.partitions:
                if p.error_code:
                    raise PersisterError(p.error_code)
                return int(p.offset)
        raise PersisterError(ErrorCode.UNKNOWN_SERVER_ERROR, "no ListOffsets result")

    def close(self) -> None:
        for conn in self._connections.values():
            with contextlib.suppress(Exception):
                conn.close()
        self._connections.clear()

