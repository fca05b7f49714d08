"""Pulsar's own Java admin client (`pulsar-client-admin`) driving the admin REST API (issue 13).

Topic list, subscription create/list, cursor resets by message id and by time, and topic stats (backlog), checked
against what pulsar-client wrote and then reads, on the non-partitioned topic its producer auto-created (Pulsar's
default kind, on both brokers), so the per-topic calls (topic stats, cursors) name the topic itself.

Runs on the reference `pulsar` and on our broker (embedded and BookKeeper storage); the call-by-call comparison
of the two brokers' answers is tests/e2e/test_pulsar_admin_diff.py.
"""

from __future__ import annotations

import pulsar
import pytest

from tests.e2e.test_pulsar_clients import (
    NAMESPACE,
    RECEIVE_MS,
    index_of,
    ledger_entry,
    produce,
    receive_n,
    topic_name,
)
from tests.support.pulsar_java import PulsarJava

PULSAR_SIDE_TARGETS = ("pulsar", "kop", "kop-bk")


@pytest.fixture
def client(pulsar_service_url: str):
    c = pulsar.Client(pulsar_service_url, operation_timeout_seconds=60,
                      logger=pulsar.ConsoleLogger(pulsar.LoggerLevel.Warn))
    yield c
    c.close()

def test_java_admin_client(target, client, pulsar_broker):
    topic = topic_name(target, "jadmin")
    produce(client, topic, 10)  # creates a non-partitioned topic: the per-topic admin calls below take its name
    reader = client.create_reader(topic, pulsar.MessageId.earliest)
    got = [reader.read_next(RECEIVE_MS) for _ in range(10)]
    reader.close()
    ts = got[3].publish_timestamp()
    by_time = min(i for i, m in enumerate(got) if m.publish_timestamp() >= ts)
    ledger, entry = ledger_entry(got[6].message_id())

    java = PulsarJava(pulsar_broker.service_url, pulsar_broker.admin_url)
    topics, created, subs, stats0, reset_id, stats_id, reset_time, stats_time = java.run(
        f"topics {NAMESPACE}",
        f"create-subscription {topic} adm earliest",
        f"subscriptions {topic}",
        f"stats {topic}",
        f"reset-cursor-id {topic} adm {ledger} {entry}",
        f"stats {topic}",
        f"reset-cursor-time {topic} adm {ts}",
        f"stats {topic}",
    )
    assert topic in topics
    assert created is True and reset_id is True and reset_time is True
    assert subs == ["adm"]
    assert stats0["msgInCounter"] == 10
    assert stats0["subscriptions"]["adm"]["msgBacklog"] == 10
    assert stats_id["subscriptions"]["adm"]["msgBacklog"] == 4  # reset to message 6: 6..9 are left
    assert stats_time["subscriptions"]["adm"]["msgBacklog"] == 10 - by_time

    consumer = client.subscribe(topic, "adm")  # the subscription exists: its reset cursor decides
    assert [index_of(m) for m in receive_n(consumer, 10 - by_time)] == list(range(by_time, 10))
    consumer.close()
