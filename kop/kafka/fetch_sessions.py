"""Fetch sessions (KIP-227), sans-IO: which partitions a Fetch covers, and which of them its answer carries.

A consumer of many partitions asks for all of them in every Fetch, and a full answer names every one of
them, most with nothing new. With a session, the broker remembers the partitions and their fetch offsets;
later ("incremental") requests list only what changed, and answers carry only partitions with something to
say. Served for Fetch v7+ (the versions that have the fields); librdkafka never asks for sessions (it always
sends epoch -1), the Java client and kafka-python do.

Requests, by (session_id, session_epoch):

- (0, -1): no session - a full fetch of the listed partitions, answered in full, session id 0.
- (any, 0): a new session of the listed partitions (replacing session `id` if given); answered in full with
  the new id, or with id 0 - "no session", clients carry on with full fetches - when the cache is full.
- (id, -1): session `id` is closed; the request is then a sessionless full fetch.
- (id, n > 0): incremental. Unknown id: FETCH_SESSION_ID_NOT_FOUND; n is not the epoch the session
  expects: INVALID_FETCH_SESSION_EPOCH (the client then starts a new session). Listed partitions are added
  or update their fetch offset / byte limit; forgotten ones leave; the fetch covers every partition of the
  session, in the session's order.

An incremental answer carries a partition when it has records or an error, or when its high watermark or
log start offset differs from what the session last told the client (the last stable offset is the high
watermark here: no transactions). A partition that had to be answered moves to the end of the session, as
in Kafka, so that when the response byte limit cuts a fetch short the partitions behind it go first next
time.

Differences from Apache Kafka:
- Eviction when all `maxIncrementalFetchSessionCacheSlots` are taken: the least recently used session goes
  if it has been idle for 2 minutes (Kafka's min.incremental.fetch.session.eviction.ms); otherwise the new
  session is not created. Kafka can also evict a busy session for a bigger one; we do not rank sessions.
- Slots count sessions, not partitions. 0 turns sessions off (every answer says session id 0).
- Sessions are per broker, kept in memory: after a restart, clients get FETCH_SESSION_ID_NOT_FOUND once
  and start a new session, as after a Kafka broker restart.
"""

from __future__ import annotations

import random
import time
from collections import OrderedDict
from collections.abc import Callable, Iterable
from typing import TypeVar

from kop.protocol.errors import ErrorCode

FINAL_EPOCH = -1
INITIAL_EPOCH = 0
EVICTION_IDLE_S = 120.0  # Kafka's min.incremental.fetch.session.eviction.ms
_MAX_EPOCH = 2**31 - 1

#: how a request names a topic: its name as the client writes it (Fetch v7-v12), or its 16-byte topic id
#: (v13+; KIP-516). A session is keyed the way the request that created it names topics, as Kafka's
#: sessions are (TopicIdPartition): a v13+ session never confuses a topic with one created again under its name.
TopicKey = str | bytes
Key = tuple[TopicKey, int]  # (topic, partition)


_R = TypeVar("_R")  # a partition result of an answer


class CachedPartition:
    __slots__ = ("fetch_offset", "max_bytes", "leader_epoch", "high_watermark", "log_start_offset")

    def __init__(self, fetch_offset: int, max_bytes: int, leader_epoch: int) -> None:
        self.fetch_offset = fetch_offset
        self.max_bytes = max_bytes
        self.leader_epoch = leader_epoch
        self.high_watermark = -1  # as last answered (-1: never answered, so the first answer includes it)
        self.log_start_offset = -1


class FetchSession:
    __slots__ = ("id", "epoch", "parts", "last_used")

    def __init__(self, session_id: int, now: float) -> None:
        self.id = session_id
        self.epoch = 1  # the epoch the next (first incremental) request must carry
        self.parts: OrderedDict[Key, CachedPartition] = OrderedDict()
        self.last_used = now


class FetchContext:
    """One Fetch request's view of its session: the partitions to fetch and how to answer.

    `error` set (non-zero): answer only that top-level error, with session id 0 and no partitions."""

    __slots__ = ("session_id", "error", "partitions", "_session", "_incremental")

    def __init__(self, session_id: int = 0, error: int = 0,
                 partitions: list[tuple[TopicKey, list[tuple[int, int, int, int]]]] | None = None, session: FetchSession | None = None, incremental: bool = False) -> None:
        self.session_id = session_id
        self.error = error
        #: [(topic, [(partition, fetch_offset, partition_max_bytes, current_leader_epoch)])], consecutive
        #: partitions of one topic grouped (a topic may come back later in the list: the session's order)
        self.partitions = partitions or []
        self._session = session
        self._incremental = incremental

    @property
    def incremental(self) -> bool:
        return self._incremental

    def known(self, topic: TopicKey, partition: int) -> CachedPartition | None:
        """What the session's client was last told of a partition (None outside a session)."""
        return None if self._session is None else self._session.parts.get((topic, partition))

    def answer(self, results: list[tuple[TopicKey, list[_R]]], *, partition_of: Callable[[_R], int],
               must_answer: Callable[[_R, CachedPartition], bool]) -> list[tuple[TopicKey, list[_R]]]:
        """The partition results this answer carries (all of them unless incremental), remembering in the
        session what each carried one told the client. `must_answer(result, cached)` says whether a
        result differs from what the client knows, and updates `cached` to what it now knows."""
        session = self._session
        if session is None:
            return results
        parts = session.parts
        out: list[tuple[TopicKey, list[_R]]] = []
        moved: list[Key] = []
        for topic, presults in results:
            kept = []
            for r in presults:
                key = (topic, partition_of(r))
                cached = parts.get(key)
                if cached is None:  # not in the session (cannot happen: the context listed it)
                    kept.append(r)
                    continue
                if must_answer(r, cached) or not self._incremental:
                    kept.append(r)
                    if self._incremental:
                        moved.append(key)
            if kept:
                out.append((topic, kept))
        for key in moved:
            parts.move_to_end(key)
        return out


class FetchSessionCache:
    def __init__(self, slots: int, *, eviction_idle_s: float = EVICTION_IDLE_S,
                 clock: Callable[[], float] = time.monotonic, rng: random.Random | None = None) -> None:
        self.slots = slots
        self.eviction_idle_s = eviction_idle_s
        self._clock = clock
        self._rng = rng or random.Random()
        self._sessions: OrderedDict[int, FetchSession] = OrderedDict()  # least recently used first
        self.evictions = 0
        self.incremental_fetches = 0  # requests served as incremental (a metric: clients do use sessions)

    def __len__(self) -> int:
        return len(self._sessions)

    def get(self, session_id: int) -> FetchSession | None:
        return self._sessions.get(session_id)

    def begin(self, version: int, session_id: int, epoch: int,
              topics: Iterable[tuple[TopicKey, Iterable[tuple[int, int, int, int]]]],
              forgotten: Iterable[tuple[TopicKey, Iterable[int]]]) -> FetchContext:
        """The context of one Fetch request: `topics` as [(topic, [(partition, fetch_offset, max_bytes,
        current_leader_epoch)])], `forgotten` as [(topic, [partition])]; a topic is its name below v13, its
        id from v13 (TopicKey)."""
        listed = [(name, list(parts)) for name, parts in topics]
        if version < 7 or (session_id == 0 and epoch == FINAL_EPOCH):
            return FetchContext(partitions=listed)
        now = self._clock()
        if epoch == FINAL_EPOCH:  # close session_id; a full fetch without a session
            self._sessions.pop(session_id, None)
            return FetchContext(partitions=listed)
        if epoch == INITIAL_EPOCH:
            if session_id:
                self._sessions.pop(session_id, None)
            session = self._create(now)
            if session is None:
                return FetchContext(partitions=listed)
            for name, parts in listed:
                for index, offset, max_bytes, leader_epoch in parts:
                    session.parts[(name, index)] = CachedPartition(offset, max_bytes, leader_epoch)
            return FetchContext(session.id, partitions=listed, session=session)
        session = self._sessions.get(session_id)
        if session is None:
            return FetchContext(error=ErrorCode.FETCH_SESSION_ID_NOT_FOUND)
        if epoch != session.epoch:
            return FetchContext(error=ErrorCode.INVALID_FETCH_SESSION_EPOCH)
        session.epoch = 1 if epoch >= _MAX_EPOCH else epoch + 1
        self.incremental_fetches += 1
        session.last_used = now
        self._sessions.move_to_end(session_id)
        cached_parts = session.parts
        for name, indexes in forgotten:
            for index in indexes:
                cached_parts.pop((name, index), None)
        for name, listed_parts in listed:
            for index, offset, max_bytes, leader_epoch in listed_parts:
                cached = cached_parts.get((name, index))
                if cached is None:
                    cached_parts[(name, index)] = CachedPartition(offset, max_bytes, leader_epoch)
                else:
                    cached.fetch_offset = offset
                    cached.max_bytes = max_bytes
                    cached.leader_epoch = leader_epoch
        return FetchContext(session.id, partitions=_grouped(cached_parts), session=session, incremental=True)

    def _create(self, now: float) -> FetchSession | None:
        if self.slots <= 0:
            return None
        if len(self._sessions) >= self.slots:
            oldest_id, oldest = next(iter(self._sessions.items()))
            if now - oldest.last_used < self.eviction_idle_s:
                return None
            del self._sessions[oldest_id]
            self.evictions += 1
        while True:
            session_id = self._rng.randint(1, _MAX_EPOCH)
            if session_id not in self._sessions:
                break
        session = FetchSession(session_id, now)
        self._sessions[session_id] = session
        return session


def _grouped(parts: OrderedDict[Key, CachedPartition]) -> list[tuple[TopicKey, list[tuple[int, int, int, int]]]]:
    out: list[tuple[TopicKey, list[tuple[int, int, int, int]]]] = []
    last = None
    group: list[tuple[int, int, int, int]] = []
    for (name, index), c in parts.items():
        if name != last:
            group = []
            out.append((name, group))
            last = name
        group.append((index, c.fetch_offset, c.max_bytes, c.leader_epoch))
    return out
