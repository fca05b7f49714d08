"""Retention with Pulsar subscriptions (kop/topics/chores.py + kop/pulsar/subscriptions.py's backlog floor) and
the backlog quota policies (kop/pulsar/backlog_quota.py), with the real `pulsar-client` against our broker
subprocess: a ledger a durable subscription has not acknowledged outlives the topic's retention, and the
quota's consumer_backlog_eviction and producer_exception policies act as Pulsar documents them."""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import pulsar
import pytest

from tests.support.admin import ok, topic_url
from tests.support.broker import KopBroker

RECEIVE_MS = 30000
WAIT_S = 60  # a guard against hangs while a periodic pass comes round, not a timing assertion

SMALL_LEDGERS = {"managedLedgerMaxEntriesPerLedger": 2, "managedLedgerMinLedgerRolloverTimeMinutes": 0}


def until(what: Callable[[], Any], why: str) -> Any:
    deadline = time.monotonic() + WAIT_S
    while time.monotonic() < deadline:
        got = what()
        if got:
            return got
        time.sleep(0.2)
    raise AssertionError(f"never happened: {why}")


def produce(client: pulsar.Client, topic: str, n: int) -> None:
    p = client.create_producer(topic, batching_enabled=False)
    for i in range(n):
        p.send(f"m{i}".encode())
    p.close()


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[KopBroker]:
    b = KopBroker(tmp_path_factory.mktemp("kop-retention-subs"), {
        **SMALL_LEDGERS, "defaultRetentionTimeInMinutes": 0, "retentionCheckIntervalMs": 200})
    b.start()
    yield b
    b.stop()


def stats(b: KopBroker, part: str) -> dict[str, Any]:
    return ok(topic_url(b.admin_url, part) + "/stats")


def test_retention_keeps_what_a_subscription_has_not_acknowledged(broker: KopBroker) -> None:
    client = pulsar.Client(broker.pulsar_url, operation_timeout_seconds=30)
    kept, free = f"k-{uuid.uuid4().hex[:8]}", f"f-{uuid.uuid4().hex[:8]}"
    c = client.subscribe(kept, "slow", initial_position=pulsar.InitialPosition.Earliest)
    produce(client, kept, 6)
    produce(client, free, 6)
    # retention runs: the topic nobody subscribed loses its closed ledgers (Kafka consumer semantics) ...
    until(lambda: stats(broker, free)["logStartOffset"] > 0, "retention trimmed the free topic")
    time.sleep(1)  # a few more retention passes (not a timing assertion: the check below must hold regardless)
    # ... while the subscribed one keeps everything its subscription has not acknowledged
    assert stats(broker, kept)["logStartOffset"] == 0
    got = [c.receive(RECEIVE_MS) for _ in range(6)]
    assert [m.data() for m in got] == [f"m{i}".encode() for i in range(6)]
    for m in got[:4]:
        c.acknowledge(m)
    # once acknowledged, retention applies again
    until(lambda: stats(broker, kept)["logStartOffset"] >= 4, "acknowledged ledgers trimmed")
    assert stats(broker, kept)["subscriptions"]["slow"]["msgBacklog"] == 2
    c.close()
    client.close()


def test_consumer_backlog_eviction(tmp_path) -> None:
    b = KopBroker(tmp_path / "evict", {**SMALL_LEDGERS, "backlogQuotaDefaultLimitBytes": 1,
                                       "backlogQuotaDefaultRetentionPolicy": "consumer_backlog_eviction",
                                       "backlogQuotaCheckIntervalInSeconds": 1})
    b.start()
    try:
        client = pulsar.Client(b.pulsar_url, operation_timeout_seconds=30)
        topic = f"e-{uuid.uuid4().hex[:8]}"
        c = client.subscribe(topic, "stalled", initial_position=pulsar.InitialPosition.Earliest,
                             receiver_queue_size=1)
        produce(client, topic, 8)
        part = topic
        until(lambda: stats(b, part)["subscriptions"]["stalled"]["msgBacklog"] <= 1, "the backlog was evicted")
        c.close()
        client.close()
    finally:
        b.stop()


def test_producer_exception(tmp_path) -> None:
    b = KopBroker(tmp_path / "exc", {**SMALL_LEDGERS, "backlogQuotaDefaultLimitBytes": 100,
                                     "backlogQuotaDefaultRetentionPolicy": "producer_exception",
                                     "backlogQuotaCheckIntervalInSeconds": 1})
    b.start()
    try:
        client = pulsar.Client(b.pulsar_url, operation_timeout_seconds=10)
        topic = f"x-{uuid.uuid4().hex[:8]}"
        c = client.subscribe(topic, "stalled", initial_position=pulsar.InitialPosition.Earliest)
        p = client.create_producer(topic, batching_enabled=False)
        for _ in range(10):
            p.send(b"x" * 100)
        with pytest.raises(Exception, match="(?i)quota"):
            client.create_producer(topic, batching_enabled=False)
        # acknowledging the backlog lifts the block
        for _ in range(10):
            c.acknowledge(c.receive(RECEIVE_MS))
        until(lambda: stats(b, topic)["subscriptions"]["stalled"]["msgBacklog"] == 0, "acked")
        client.create_producer(topic, batching_enabled=False).close()
        c.close()
        client.close()
    finally:
        b.stop()
