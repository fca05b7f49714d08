"""kop/pulsar/schema_ids.py: the partition's Confluent id -> Pulsar version map, learnt from the schema store.

Sans-IO: the store is a small class implementing kop/schemas/api.py's ``TopicSchemaIds`` that counts what it was
asked, and the map's clock is a number the test moves (no sleeps, no timing). What is pinned: an id is asked once
and kept; an unknown one is asked again only after the interval; a call asks a bounded number; two callers share
one round of lookups; a learnt id drops the converted entries and narrows a Pulsar producer's batch to its version.
"""

from __future__ import annotations

import asyncio

from kop.pulsar.schema_ids import SchemaIdMap
from kop.schemas.api import Part, TopicSchemaIds
from kop.topics.names import TopicName, parse_topic_name

TOPIC = parse_topic_name("t", "public", "default")


class Store:
    """A topic's ids as the schema store would answer them: {id: version}; ``fail`` makes lookups raise."""

    def __init__(self, versions: dict[int, int]) -> None:
        self.versions = versions
        self.asked: list[int] = []
        self.fail = False
        self.gate: asyncio.Event | None = None  # when set, lookups wait for it (two callers at once)

    async def confluent_id(self, topic: TopicName, version: int) -> int | None:
        return next((i for i, v in self.versions.items() if v == version), None)

    async def pulsar_version(self, topic: TopicName, schema_id: int) -> int | None:
        assert topic == TOPIC
        self.asked.append(schema_id)
        if self.gate is not None:
            await self.gate.wait()
        if self.fail:
            raise OSError("metadata store unavailable")
        return self.versions.get(schema_id)

    async def registered_ids(self, topic: TopicName, part: Part) -> frozenset[int]:
        return frozenset(self.versions)


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def _map(store: Store, clock: Clock | None = None, **kw: int) -> tuple[SchemaIdMap, list[int]]:
    dropped: list[int] = []
    ids: TopicSchemaIds = store
    m = SchemaIdMap(ids, TOPIC, on_learnt=lambda: dropped.append(1), retry_s=30.0, clock=clock or Clock(), **kw)
    return m, dropped


async def test_a_known_id_is_asked_once_and_kept() -> None:
    store = Store({7: 2})
    m, dropped = _map(store)
    assert m.versions == {} and m.unknown((7,)) == (7,)
    assert await m.learn((7,)) is True
    assert m.versions == {7: 2} and dropped == [1]  # the partition converts again without stale entries
    assert m.unknown((7, 8)) == (8,)
    assert await m.learn((7,)) is True  # known already: no lookup
    assert store.asked == [7]


async def test_an_unknown_id_is_asked_again_only_after_the_interval() -> None:
    store = Store({})
    clock = Clock()
    m, dropped = _map(store, clock)
    assert await m.learn((9,)) is False
    clock.now += 29.0
    assert await m.learn((9,)) is False
    assert store.asked == [9]  # garbage values do not cost a lookup each
    clock.now += 1.0
    store.versions[9] = 0  # registered meanwhile
    assert await m.learn((9,)) is True
    assert store.asked == [9, 9] and m.versions == {9: 0} and dropped == [1]


async def test_a_call_asks_a_bounded_number_and_the_tried_ids_are_bounded() -> None:
    store = Store({})
    m, _ = _map(store, per_call=3, remember=5)
    assert await m.learn((1, 2, 3, 4, 5)) is False
    assert store.asked == [1, 2, 3]
    assert await m.learn((1, 2, 3, 4, 5)) is False  # the ones not tried yet come next
    assert store.asked == [1, 2, 3, 4, 5]
    assert await m.learn((6,)) is False  # past `remember`: forgotten at once (and so asked again when seen)
    assert await m.learn((1,)) is False
    assert store.asked == [1, 2, 3, 4, 5, 6, 1]


async def test_lookups_have_a_budget_per_interval() -> None:
    """Random values name a new id each: past the budget nothing is asked until the interval has passed."""
    store = Store({})
    clock = Clock()
    m, _ = _map(store, clock, per_call=4, budget=6)
    assert await m.learn((1, 2, 3, 4, 5)) is False
    assert await m.learn((5, 6, 7, 8)) is False
    assert store.asked == [1, 2, 3, 4, 5, 6]
    store.versions[9] = 2
    clock.now += 29.0
    assert await m.learn((9,)) is False and store.asked == [1, 2, 3, 4, 5, 6]  # spent
    clock.now += 1.0
    assert await m.learn((9,)) is True and store.asked[-1] == 9


async def test_a_failed_lookup_is_retried_after_the_interval() -> None:
    store = Store({4: 1})
    store.fail = True
    clock = Clock()
    m, _ = _map(store, clock)
    assert await m.learn((4,)) is False and m.versions == {}
    store.fail = False
    assert await m.learn((4,)) is False  # within the interval
    clock.now += 30.0
    assert await m.learn((4,)) is True and m.versions == {4: 1}


async def test_two_callers_share_one_round_of_lookups() -> None:
    """A second subscription asking while the first waits for the store gets the answer, not a second lookup,
    and is told to convert again (else it would send the entry with the prefix)."""
    store = Store({5: 3})
    store.gate = asyncio.Event()
    m, dropped = _map(store)
    first = asyncio.ensure_future(m.learn((5,)))
    second = asyncio.ensure_future(m.learn((5,)))
    await asyncio.sleep(0)
    store.gate.set()
    assert await first is True and await second is True
    assert store.asked == [5] and dropped == [1]


async def test_a_pulsar_producers_batch_loses_only_its_versions_prefixes() -> None:
    store = Store({7: 0, 8: 1, 9: 1})
    m, _ = _map(store)
    assert await m.learn((7, 8, 9)) is True
    assert m.for_version(None) == {7: 0, 8: 1, 9: 1}
    assert m.for_version((1).to_bytes(8, "big")) == {8: 1, 9: 1}
    assert m.for_version((5).to_bytes(8, "big")) == {}
    store.versions[10] = 5
    assert await m.learn((10,)) is True
    assert m.for_version((5).to_bytes(8, "big")) == {10: 5}  # learning refreshes the per-version views
