"""The Pulsar handler's partition state is never made over a log that was let go while it opened
(kop/pulsar/handler.py `partition_state`), sans-IO.

Issue #24 (the chaos short form, `all-brokers-kill`: the tail of one partition never handed to a durable
subscription): a SUBSCRIBE awaits the partition's log while it opens (a restarted broker recovers the ledger, which
takes seconds); callers share the opening and resume after it. When the bundle is released in between (the second
broker registered and takes it), the release closes the log and tells the handler - which has no state for the
partition yet. The waiting SUBSCRIBE then resumed with the closed log, made a state over it and stored it as the
partition's, and `PartitionState.served` held (it is the handler's, not abandoned): the consumer was attached to a
dispatcher reading a closed log, and no CLOSE_CONSUMER would ever come. Now such a call is refused (the client looks
the partition up again), and a state found over an older log is abandoned when a newer one replaces it.

The handler's method runs on a stand-in of what it uses (its partitions, the topic manager's `partition`); the
partition state it makes is real.
"""

from __future__ import annotations

import asyncio
from types import SimpleNamespace
from typing import Any, cast

import pytest

from kop.pulsar.handler import PulsarProtocolHandler
from kop.pulsar.subscription import PartitionState
from kop.topics.manager import Topic, TopicError
from kop.topics.names import TopicName


def log(name: str) -> Any:
    """What a partition state reads of its log when it is made (the compaction horizon property)."""
    return SimpleNamespace(name=name, ml=SimpleNamespace(properties={}))


class Topics:
    """The topic manager's `partition`: the seam over the partition's open log, returned once `opened` is set (the
    opening is shared: a caller resumes after it, and things may happen in between)."""

    def __init__(self, topic: Any) -> None:
        self.topic = topic
        self.opened = asyncio.Event()
        self.paused = False

    async def partition(self, topic: Any, partition: int) -> Any:
        plog = topic.logs[partition]  # the log being opened for this caller
        await self.opened.wait()
        return SimpleNamespace(topic=topic, index=partition, log=plog)


def handler_and_topic() -> tuple[Any, Any]:
    name = TopicName("public", "default", "chaos-pulsar")
    topic = SimpleNamespace(name=name, logs={}, ledger_name=lambda p: f"public/default/persistent/chaos-pulsar-partition-{p}",
                            pulsar_partition=lambda p: p)
    handler = SimpleNamespace(partitions={}, service=SimpleNamespace(schema_ids=None, topics=Topics(topic)))
    return handler, topic


async def state_of(handler: Any, topic: Any) -> PartitionState:
    return await PulsarProtocolHandler.partition_state(cast(PulsarProtocolHandler, handler), cast(Topic, topic), 0)


async def test_a_subscribe_that_awaited_a_log_let_go_meanwhile_gets_no_state_over_it():
    handler, topic = handler_and_topic()
    first = topic.logs[0] = log("first")
    waiting = asyncio.get_running_loop().create_task(state_of(handler, topic))  # a SUBSCRIBE, its log opening
    await asyncio.sleep(0)
    del topic.logs[0]  # the bundle is released: the log is closed; the handler has no state of it to abandon
    topic.logs[0] = log("second")  # and the partition is opened again (the bundle came back, or another caller)
    topics: Topics = handler.service.topics
    topics.opened.set()
    with pytest.raises(TopicError):
        await waiting
    assert not handler.partitions, "a state over the closed log was made and kept as the partition's"
    state = await state_of(handler, topic)
    assert state.plog is topic.logs[0] and state.plog is not first
    assert handler.partitions[topic.ledger_name(0)] is state and await state_of(handler, topic) is state


async def test_a_state_over_an_older_log_is_abandoned_when_a_newer_one_replaces_it():
    handler, topic = handler_and_topic()
    topics: Topics = handler.service.topics
    topic.logs[0] = log("first")
    topics.opened.set()
    old = await state_of(handler, topic)
    del handler.partitions[topic.ledger_name(0)]
    topic.logs[0] = log("second")  # the partition's log now
    topics.opened.clear()
    waiting = asyncio.get_running_loop().create_task(state_of(handler, topic))
    await asyncio.sleep(0)
    handler.partitions[topic.ledger_name(0)] = old  # a state over the older log turns up meanwhile
    topics.opened.set()
    new = await waiting
    assert new is not old and new.plog is topic.logs[0] and handler.partitions[topic.ledger_name(0)] is new
    assert old.abandoned and not old.served()  # its clients were told to go
