"""TopicManager over real embedded storage (kop/topics/manager.py): deleting, creating and changing topics whose
callers are cancelled, and opening again a partition whose managed ledger fenced itself.

Deleting a topic of many partitions (up to 100000) asked the metadata store, partition by partition, whether each
had a log (32767 lookups for 32767 partitions). Now one listing says which partitions have a stored log: the ones
that were opened are deleted, and the store is not asked per partition. (Found while looking for the Kafka
fuzzer's unanswered DeleteTopics of "cleanup.policy", seed 2; that hang has another cause: it recurs with the
topic at 1 partition.)
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from kop.config import BrokerConfig
from kop.offset import open_embedded_storage
from kop.protocol.records import NewRecord, build_batch
from kop.server.service import BrokerService


@asynccontextmanager
async def embedded_service(tmp_path) -> AsyncIterator[BrokerService]:
    """A broker service over embedded storage with its topics loaded, the storage closed after."""
    storage = await open_embedded_storage(tmp_path, fsync="none")
    svc = BrokerService(BrokerConfig.from_strings({}), storage)
    await svc.topics.load()
    try:
        yield svc
    finally:
        await storage.close()


async def test_deleting_a_topic_of_many_partitions_asks_the_store_once(tmp_path) -> None:
    async with embedded_service(tmp_path) as svc:
        storage = svc.storage
        topic = await svc.topics.create(svc.topics.parse("cleanup.policy"), 32767)
        for p in (0, 30000):
            plog = await svc.topics.partition_log(topic, p)
            await plog.append(build_batch([NewRecord(b"k", b"v", (), 1_000)]), 0, 1_000)
        lookups = 0
        exists = storage.factory.exists

        async def counting_exists(name: str) -> bool:
            nonlocal lookups
            lookups += 1
            return await exists(name)

        storage.factory.exists = counting_exists  # a spy around the real lookup
        await svc.topics.delete(topic)
        assert lookups <= 2, f"the store was asked {lookups} times whether a partition has a log"
        names = await storage.list_logs()
        assert not [n for n in names if "cleanup.policy" in n], names
        assert svc.topics.get(svc.topics.parse("cleanup.policy")) is None


async def test_a_create_cancelled_after_its_record_landed_still_registers_the_topic(tmp_path) -> None:
    """A client that gives up (its request task cancelled) while the topic record is being written must not
    leave a record the broker does not know: every later create would get TOPIC_ALREADY_EXISTS and Metadata
    would never list the topic."""
    import asyncio

    cfg = BrokerConfig.from_strings({})
    storage = await open_embedded_storage(tmp_path, fsync="none")
    svc = BrokerService(cfg, storage)
    await svc.topics.load()
    store = svc.topics.store
    put = store.put
    landed = asyncio.Event()

    async def slow_put(path, value, expected_version=None):  # the write lands, then its caller is cancelled
        stat = await put(path, value, expected_version=expected_version)
        landed.set()
        await asyncio.sleep(0.2)
        return stat

    try:
        store.put = slow_put  # a spy around the real write
        name = svc.topics.parse("interrupted")
        creating = asyncio.ensure_future(svc.topics.create(name, 2))
        await landed.wait()
        creating.cancel()
        await asyncio.sleep(0.5)
        store.put = put
        topic = svc.topics.get(name)
        assert topic is not None and topic.partitions == 2
    finally:
        await storage.close()


async def test_a_change_cancelled_while_it_is_stored_still_completes(tmp_path) -> None:
    """CreatePartitions or AlterConfigs cancelled (the client's connection closed) while the topic's record is
    being written: the change is made in memory first, so stopped there it stayed with the topic's version behind
    the stored one, and every later change of the topic was refused (BadVersion) until a restart."""
    import asyncio

    cfg = BrokerConfig.from_strings({})
    storage = await open_embedded_storage(tmp_path, fsync="none")
    svc = BrokerService(cfg, storage)
    await svc.topics.load()
    store = svc.topics.store
    put = store.put
    gate, entered = asyncio.Event(), asyncio.Event()

    async def held_put(path, value, expected_version=None):  # written now, answered when the gate opens
        sent = asyncio.ensure_future(put(path, value, expected_version=expected_version))
        entered.set()
        await gate.wait()
        return await asyncio.shield(sent)

    try:
        topic = await svc.topics.create(svc.topics.parse("grown"), 2)
        store.put = held_put
        adding = asyncio.ensure_future(svc.topics.add_partitions(topic, 3))
        await entered.wait()
        adding.cancel()
        await asyncio.sleep(0)
        gate.set()
        await asyncio.sleep(0.2)
        store.put = put
        await svc.topics.add_partitions(topic, 4)  # the next change of the topic is stored
        await svc.topics.set_configs(topic, {"retention.ms": "1000"})
        assert topic.partitions == 4
    finally:
        await storage.close()


async def test_a_partition_whose_managed_ledger_fenced_itself_is_opened_again(tmp_path) -> None:
    """A managed ledger fences itself when its info changed under it. Another broker taking the partition
    also takes its bundle (the log is dropped then); anything else - here the info rewritten behind the
    log's back, as a write of ours whose answer was lost did (CI of stop 34) - left the partition refusing
    every append until a restart. The next use opens it again, as Pulsar reopens a fenced topic."""
    import pytest

    from kop.managed_ledger import ManagedLedgerFencedError

    async with embedded_service(tmp_path) as svc:
        topic = await svc.topics.create(svc.topics.parse("fenced"), 1)
        old = await svc.topics.partition_log(topic, 0)
        await old.append(build_batch([NewRecord(b"k", b"one", (), 1_000)]), 0, 1_000)
        store = svc.storage.metadata_store
        got = await store.get(old.ml.path)
        assert got is not None
        await store.put(old.ml.path, got[0])  # the info changed behind the log's back (version + 1)
        with pytest.raises(ManagedLedgerFencedError):
            await old.ml.set_properties({"x": "1"})
        assert old.fenced
        plog = await svc.topics.partition_log(topic, 0)
        assert plog is not old and not plog.fenced
        assert await plog.append(build_batch([NewRecord(b"k", b"two", (), 1_000)]), 0, 1_000) == 1
        assert plog.high_watermark == 2
        assert await svc.topics.partition_log(topic, 0) is plog
