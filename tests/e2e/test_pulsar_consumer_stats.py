"""CONSUMER_STATS end to end (issue 13): the broker's view of one consumer, asked over the wire.

A Pulsar-side module (tests/e2e/conftest.py), run on Apache Pulsar standalone (`pulsar`), which proves it
right, and on ours. No client API of today sends the command - the Java client 4.x dropped it, the C++ client's
getBrokerConsumerStats is not in pulsar-client's Python wrapper - so the consumer here is a raw connection made with
our codec (tests/support/pulsar_wire.py), reading messages a real `pulsar-client` producer wrote.

What is checked: consumerName, availablePermits (FLOW 3, three messages dispatched: 0 left), unackedMessages
(Shared: the two delivered and not acknowledged; Exclusive: 0, as Pulsar counts them for Shared and Key_Shared
only), blockedConsumerOnUnackedMsgs, the subscription type, msgBacklog in entries (one acknowledged of five: 4), the
address and connectedSince, and ConsumerNotFound for an unknown consumer id (where Pulsar 4.0.7 closes the
connection: see that test). Rates are not compared (ours are 0).
"""

from __future__ import annotations

import pulsar
import pytest

from kop.pulsar.codec import commands as c
from tests.support.pulsar_wire import WireClient

PULSAR_SIDE_TARGETS = ("pulsar", "kop", "kop-bk")

SHARED, EXCLUSIVE = 1, 0
EARLIEST = 1


@pytest.fixture
def client(pulsar_service_url: str):
    cl = pulsar.Client(pulsar_service_url, operation_timeout_seconds=60,
                       logger=pulsar.ConsoleLogger(pulsar.LoggerLevel.Warn))
    yield cl
    cl.close()


def wire_to(service_url: str) -> WireClient:
    host, port = service_url.removeprefix("pulsar://").rsplit(":", 1)
    w = WireClient(int(port), host)
    w.connect()
    return w


def subscribe(w: WireClient, topic: str, sub: str, sub_type: int, consumer_id: int, name: str) -> None:
    w.send(c.command(c.SUBSCRIBE, topic=topic, subscription=sub, subType=sub_type, consumer_id=consumer_id,
                     request_id=consumer_id, consumer_name=name, initialPosition=EARLIEST))
    w.expect(c.SUCCESS)


def receive(w: WireClient, n: int) -> list:
    return [w.expect(c.MESSAGE) for _ in range(n)]


def stats(w: WireClient, consumer_id: int, request_id: int):
    w.send(c.command(c.CONSUMER_STATS, consumer_id=consumer_id, request_id=request_id))
    got = w.expect(c.CONSUMER_STATS_RESPONSE)
    assert got.request_id == request_id
    return got


def test_consumer_stats(target, client, pulsar_broker):
    topic = f"persistent://public/default/{target.topic('stats')}"
    producer = client.create_producer(topic, batching_enabled=False)
    for i in range(5):
        producer.send(f"m-{i}".encode())
    producer.close()
    partition = topic  # non-partitioned, as the producer created it

    w = wire_to(pulsar_broker.service_url)
    local_port = w.sock.getsockname()[1]
    subscribe(w, partition, "shared", SHARED, 1, "stats-c")
    w.send(c.command(c.FLOW, consumer_id=1, messagePermits=3))
    msgs = receive(w, 3)
    # acknowledge the first, and wait for the broker to say it applied it
    w.send(c.command(c.ACK, consumer_id=1, ack_type=0, message_id=[msgs[0].message_id], request_id=50))
    w.expect(c.ACK_RESPONSE)
    got = stats(w, 1, 51)
    assert not got.HasField("error_code")
    assert got.consumerName == "stats-c"
    assert got.availablePermits == 0
    assert got.unackedMessages == 2
    assert got.blockedConsumerOnUnackedMsgs is False
    assert got.type == "Shared"
    assert got.msgBacklog == 4
    assert got.address.endswith(f":{local_port}")
    assert got.connectedSince  # a date, in the broker's clock

    subscribe(w, partition, "excl", EXCLUSIVE, 2, "stats-x")
    w.send(c.command(c.FLOW, consumer_id=2, messagePermits=5))
    receive(w, 5)
    got = stats(w, 2, 52)
    assert (got.consumerName, got.type, got.availablePermits, got.msgBacklog) == ("stats-x", "Exclusive", 0, 5)
    assert got.unackedMessages == 0  # Pulsar counts unacknowledged messages for Shared and Key_Shared only

    w.close()


def test_consumer_stats_of_an_unknown_consumer(target, pulsar_broker):
    """We answer ConsumerNotFound "Consumer <id> not found", what Pulsar's ServerCnx.handleConsumerStats means to
    answer; Apache Pulsar 4.0.7 instead fails on the missing consumer (a NullPointerException in that method: its
    `consumers.get(id)` gives null, not a future) and closes the connection - a difference on purpose."""
    w = wire_to(pulsar_broker.service_url)
    w.send(c.command(c.CONSUMER_STATS, consumer_id=99, request_id=53))
    if target.kind == "pulsar":
        assert w.closed_by_peer()
    else:
        got = w.expect(c.CONSUMER_STATS_RESPONSE)
        assert (got.request_id, got.error_code, got.error_message) == (
            53, c.ServerError.ConsumerNotFound, "Consumer 99 not found")
        w.send(c.command(c.PING))
        w.expect(c.PONG)  # the connection stays
    w.close()
