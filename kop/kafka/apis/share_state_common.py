"""What the share coordinator's five RPCs (InitializeShareGroupState 83, ReadShareGroupState 84,
WriteShareGroupState 85, DeleteShareGroupState 86, ReadShareGroupStateSummary 87) check before the share
coordinator's rules (kop/coordinator/share/shard.py) apply, as Kafka 4.4 does:

- Authorization: CLUSTER_ACTION on the cluster (they are inter-broker RPCs), else CLUSTER_AUTHORIZATION_FAILED
  per partition.
- NOT_COORDINATOR when another broker owns the key's __share_group_state partition,
  COORDINATOR_LOAD_IN_PROGRESS while it loads here (the sender retries).
- UNKNOWN_TOPIC_OR_PARTITION for a topic id this broker does not know or a partition beyond its count (Kafka's
  share coordinator checks its metadata image after its own rules; the order only matters to a request that
  is wrong twice).
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable, Sequence
from typing import Generic, Protocol, TypedDict, TypeVar

from kop.coordinator.share.shard import Refused
from kop.coordinator.share.store import Key, ShareStateStore
from kop.kafka import authorize
from kop.kafka.context import RequestContext
from kop.protocol.errors import ErrorCode

T = TypeVar("T")
P = TypeVar("P", bound="_Partition")
P_co = TypeVar("P_co", covariant=True)


class _Partition(Protocol):
    @property
    def partition(self) -> int: ...


class _Topic(Protocol[P_co]):
    @property
    def topic_id(self) -> bytes: ...
    @property
    def partitions(self) -> Sequence[P_co]: ...


class _Request(Protocol[P_co]):
    """The request shape the five RPCs share: a group id, topics by id, partitions of each."""

    @property
    def group_id(self) -> str: ...
    @property
    def topics(self) -> Sequence[_Topic[P_co]]: ...


class ErrorFields(TypedDict):
    error_code: int
    error_message: str | None


class Answered(Generic[P, T]):
    """A request partition and what answers it: a refusal, the rules' outcome, or None (no store)."""

    __slots__ = ("part", "got")

    def __init__(self, part: P, got: Refused | T | None) -> None:
        self.part = part
        self.got = got


async def share_store(ctx: RequestContext) -> tuple[ShareStateStore | None, bool]:
    """The share coordinator's store, loaded, and whether the sender may call it."""
    store = ctx.handler.share.store
    allowed = authorize.cluster_allowed(ctx, authorize.Op.CLUSTER_ACTION)
    if store is not None and allowed:
        await store.ready()
    return store, allowed


def refused(ctx: RequestContext, store: ShareStateStore | None, allowed: bool, key: tuple[str, bytes, int]
            ) -> Refused | None:
    """Why this share-partition's request is answered with an error before the rules apply, or None."""
    if not allowed:
        return Refused(ErrorCode.CLUSTER_AUTHORIZATION_FAILED, None)
    if store is None:
        return Refused(ErrorCode.COORDINATOR_NOT_AVAILABLE, None)
    error = store.runtime.error(store.partition_of(key))
    if error:
        return Refused(error, None)
    topic = ctx.topics.get_by_id(key[1])
    if topic is None or key[2] >= topic.partitions:
        return Refused(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, "This server does not host this topic-partition.")
    return None


def now_ms() -> int:
    return int(time.time() * 1000)


async def each_partition(ctx: RequestContext, req: _Request[P], act: Callable[[ShareStateStore, Key, P], Awaitable[T]]
                         ) -> list[tuple[bytes, list[Answered[P, T]]]]:
    """The one walk of the five RPCs: per topic id, each request partition with what answers it, either the
    refusal above or what `act(store, key, partition)` gave (the share coordinator's rules). The RPCs differ
    only in `act` and in the result shapes they build from it."""
    store, allowed = await share_store(ctx)
    out: list[tuple[bytes, list[Answered[P, T]]]] = []
    for t in req.topics:
        parts: list[Answered[P, T]] = []
        for p in t.partitions:
            key = (req.group_id, t.topic_id, p.partition)
            got: Refused | T | None = refused(ctx, store, allowed, key)
            if got is None and store is not None:
                got = await act(store, key, p)
            parts.append(Answered(p, got))
        out.append((t.topic_id, parts))
    return out


def error_fields(got: object) -> ErrorFields:
    """ErrorCode and ErrorMessage of a partition's result: the refusal's, or none."""
    if isinstance(got, Refused):
        return {"error_code": got.error, "error_message": got.message}
    return {"error_code": 0, "error_message": None}
