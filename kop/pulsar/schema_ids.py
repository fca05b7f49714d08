"""A partition's map from Confluent schema ids to its topic's Pulsar schema versions, for the dispatcher that strips
Confluent's 5-byte prefix from values on their way to Pulsar consumers (kop/pulsar/subscription.py, issue #25).

Why a map filled on demand: the dispatch loop converts entries synchronously (kop/pulsar/convert.py), so the ids it
may strip must be known before; asking the schema store (kop/schemas/api.py ``TopicSchemaIds``) per record would put
an await on every message. The conversion instead reports the ids it met and the map lacked; the dispatcher asks the
store for them here and converts the entry again when one turned out to be a version of this topic. What a topic
without registry-written records pays: nothing but the conversion's first-byte compare, until a value starts with
0x00 and four bytes that could be an id (1 .. 2^31 - 1). Such look-alikes (binary values of a topic without a
registry) are asked about at most once per id per ``retry_s``, at most ``per_call`` per call and ``budget`` per
``retry_s`` in all (random bytes name a new id each time), and the ids tried are forgotten all at once past
``remember`` of them, so garbage values cost a bounded number of lookups, never one per message. The price of the
budget: on a partition whose values flood it with look-alikes, a newly registered id may wait up to ``retry_s``
before its records lose their prefix (they go out as stored meanwhile). Ids never leave the map (a global id names one definition for good; a deleted version keeps its id).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable

from kop.schemas.api import TopicSchemaIds
from kop.topics.names import TopicName

log = logging.getLogger(__name__)


class SchemaIdMap:
    """Confluent id -> the topic's Pulsar schema version, learnt from the schema store as ids turn up."""

    def __init__(self, store: TopicSchemaIds, topic: TopicName, *, on_learnt: Callable[[], None] = lambda: None,
                 retry_s: float = 30.0, per_call: int = 8, budget: int = 64, remember: int = 4096,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.store = store
        self.topic = topic
        self.versions: dict[int, int] = {}  # what convert.kafka_to_pulsar(schema_ids=...) strips
        self._of_version: dict[int, dict[int, int]] = {}  # version -> its ids (a Pulsar producer's batches)
        self._tried: dict[int, float] = {}  # id the store did not know -> when it was asked
        self._lock = asyncio.Lock()  # one round of lookups at a time: a second asker waits for its answers
        self._on_learnt = on_learnt  # the partition drops the entries it converted without the new ids
        self.retry_s = retry_s
        self.per_call = per_call
        self.budget = budget
        self.remember = remember
        self._window = (-retry_s, 0)  # (start, lookups spent in the window that began then)
        self._clock = clock

    def for_version(self, carried: bytes | None) -> dict[int, int]:
        """The ids a batch may lose: all of them, or for a Pulsar producer's batch (``carried``: the 8-byte version
        it was sent with) only that version's, so a payload of another schema that merely looks prefixed stays
        whole."""
        if carried is None:
            return self.versions
        version = int.from_bytes(carried, "big", signed=True)
        part = self._of_version.get(version)
        if part is None:
            part = self._of_version[version] = {i: v for i, v in self.versions.items() if v == version}
        return part

    def unknown(self, ids: tuple[int, ...]) -> tuple[int, ...]:
        """Those of ``ids`` the map lacks (a Pulsar producer's batch reports the ids of other versions too)."""
        return tuple(i for i in ids if i not in self.versions) if ids else ids

    async def learn(self, ids: tuple[int, ...]) -> bool:
        """Ask the store for the versions of ``ids`` (the ones not asked within ``retry_s``); True when one of
        ``ids`` is known now - learnt here or by another caller meanwhile - so the caller converts again."""
        async with self._lock:
            if any(i in self.versions for i in ids):
                return True
            now = self._clock()
            start, spent = self._window
            if now - start >= self.retry_s:
                start, spent = now, 0
            tried = self._tried
            due = [i for i in ids if i not in tried or now - tried[i] >= self.retry_s][:min(self.per_call,
                                                                                          self.budget - spent)]
            self._window = (start, spent + len(due))
            if len(tried) + len(due) > self.remember:
                tried.clear()
            learnt = False
            for schema_id in due:
                tried[schema_id] = now
                try:
                    version = await self.store.pulsar_version(self.topic, schema_id)
                except Exception as e:  # noqa: BLE001 - the store failed: the value goes out as stored; asked later
                    log.warning("%s: the version of schema id %d is not known (%s)", self.topic, schema_id, e)
                    continue
                if version is not None:
                    self.versions[schema_id] = version
                    del tried[schema_id]
                    learnt = True
            if learnt:
                self._of_version.clear()
                self._on_learnt()
            return learnt
