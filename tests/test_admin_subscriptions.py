"""The admin REST's Pulsar subscription endpoints (kop/admin/subscriptions.py over kop/pulsar/subscriptions.py)
with the real `pulsar-client` against `kop standalone`: list, create at a position, stats (msgBacklog,
unackedMessages, consumers), reset cursor by time and by message id (connected consumers are disconnected and
come back at the new position), skip, skip_all, expire, peek with Pulsar's headers, delete, and Pulsar's refusals
on a partitioned topic's base name. The producers auto-create non-partitioned topics (Pulsar's default), so the
per-topic calls name the topic itself; the refusals' topic is created partitioned over the admin REST."""

from __future__ import annotations

import json
import time
import urllib.error
import urllib.request
import uuid
from typing import Any

import pulsar

from tests.support.admin import create_partitioned_topic, ok, topic_url
from tests.support.broker import KopBroker

RECEIVE_MS = 30000  # a guard against hangs, not a timing assertion


def call(method: str, url: str, body: Any = None) -> tuple[int, Any, dict[str, str]]:
    data = None if body is None else json.dumps(body).encode()
    req = urllib.request.Request(url, data=data, method=method, headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=60) as resp:
            status, raw, headers = resp.status, resp.read(), dict(resp.headers)
    except urllib.error.HTTPError as e:
        status, raw, headers = e.code, e.read(), dict(e.headers)
    try:
        return status, json.loads(raw), headers
    except ValueError:
        return status, raw, headers


def name() -> str:
    return f"s-{uuid.uuid4().hex[:10]}"


def produce(client: pulsar.Client, topic: str, n: int, start: int = 0) -> list[pulsar.MessageId]:
    producer = client.create_producer(topic, batching_enabled=False)
    ids = [producer.send(f"m{i}".encode(), properties={"k": str(i)}, partition_key=f"key{i}")
           for i in range(start, start + n)]
    producer.close()
    return ids


def sub_stats(broker: KopBroker, part: str, sub: str) -> dict[str, Any]:
    return ok(topic_url(broker.admin_url, part) + "/stats")["subscriptions"][sub]


def test_create_list_stats_skip_expire_clear_delete(broker: KopBroker, client: pulsar.Client) -> None:
    topic = name()
    produce(client, topic, 5)
    part = topic  # non-partitioned
    base = topic_url(broker.admin_url, part)
    assert call("PUT", base + "/subscription/s1", {"ledgerId": -1, "entryId": -1})[0] == 204  # earliest
    assert call("PUT", base + "/subscription/s2")[0] == 204  # no body: latest
    assert call("PUT", base + "/subscription/s1")[0] == 409
    assert ok(base + "/subscriptions") == ["s1", "s2"]
    assert ok(topic_url(broker.admin_url, topic) + "/subscriptions") == ["s1", "s2"]
    assert sub_stats(broker, part, "s1")["msgBacklog"] == 5
    assert sub_stats(broker, part, "s2")["msgBacklog"] == 0
    assert call("POST", base + "/subscription/s1/skip/2")[0] == 204
    assert sub_stats(broker, part, "s1")["msgBacklog"] == 3
    status, headers_body, headers = call("GET", base + "/subscription/s1/position/1")
    assert status == 200 and headers_body == b"m2", (status, headers_body)
    assert json.loads(headers["X-Pulsar-PROPERTY"]) == {"k": "2"} and headers["X-Pulsar-partition-key"] == "key2"
    assert len(headers["X-Pulsar-Message-ID"].split(":")) == 2
    assert call("GET", base + "/subscription/s1/position/4")[0] == 404
    # the consumer now starts at m2
    c = client.subscribe(topic, "s1", consumer_type=pulsar.ConsumerType.Shared)
    m = c.receive(RECEIVE_MS)
    assert m.data() == b"m2"
    st = sub_stats(broker, part, "s1")
    assert st["unackedMessages"] >= 1 and len(st["consumers"]) == 1 and st["type"] == "Shared"
    assert call("DELETE", base + "/subscription/s1")[0] == 412  # a consumer is connected
    assert call("POST", base + "/subscription/s1/expireMessages/3600")[0] == 204  # nothing that old
    assert sub_stats(broker, part, "s1")["msgBacklog"] == 3
    assert call("POST", base + "/subscription/s1/skip_all")[0] == 204
    assert sub_stats(broker, part, "s1")["msgBacklog"] == 0
    produce(client, topic, 1, start=5)
    got = [c.receive(RECEIVE_MS).data() for _ in range(1)]
    assert got == [b"m5"] or got == [b"m3"]  # at-least-once: a message sent before the clear may still come
    c.close()
    assert call("DELETE", base + "/subscription/s1")[0] == 204
    assert ok(base + "/subscriptions") == ["s2"]
    assert call("DELETE", base + "/subscription/s1")[0] == 404


def test_reset_cursor_rewinds_connected_consumers(broker: KopBroker, client: pulsar.Client) -> None:
    topic = name()
    ids = produce(client, topic, 4)
    part = topic  # non-partitioned
    base = topic_url(broker.admin_url, part)
    c = client.subscribe(topic, "r", initial_position=pulsar.InitialPosition.Earliest)
    for i in range(4):
        m = c.receive(RECEIVE_MS)
        assert m.data() == f"m{i}".encode()
        c.acknowledge(m)
    time.sleep(0.5)  # let the acks reach the broker (not a timing assertion: the backlog check retries)
    deadline = time.monotonic() + 30
    while sub_stats(broker, part, "r")["msgBacklog"] != 0 and time.monotonic() < deadline:
        time.sleep(0.2)
    mid = ids[1]
    body = {"ledgerId": mid.ledger_id(), "entryId": mid.entry_id(), "partitionIndex": mid.partition(), "isExcluded": False}
    assert call("POST", base + "/subscription/r/resetcursor", body)[0] == 204
    assert c.receive(RECEIVE_MS).data() == b"m1"  # the client was disconnected and came back at m1
    assert sub_stats(broker, part, "r")["msgBacklog"] == 3
    assert call("POST", base + "/subscription/r/resetcursor/0")[0] == 204  # by time: from the start
    seen = [c.receive(RECEIVE_MS).data() for _ in range(4)]
    assert b"m0" in seen
    c.close()


def test_partitioned_base_name_refusals(broker: KopBroker, client: pulsar.Client) -> None:
    topic = name()
    create_partitioned_topic(broker.admin_url, topic, 1)
    produce(client, topic, 1)
    base = topic_url(broker.admin_url, topic)
    assert call("PUT", base + "/subscription/p")[0] == 204
    assert call("POST", base + "/subscription/p/skip/1")[0] == 405
    assert call("GET", base + "/subscription/p/position/1")[0] == 405
    assert call("POST", base + "/subscription/p/resetcursor", {"ledgerId": -1, "entryId": -1})[0] == 405
    assert call("POST", base + "/subscription/p/resetcursor/0")[0] == 204
    assert call("POST", base + "/subscription/nope/skip_all")[0] == 404


def test_kop_admin_subscription_verbs(broker: KopBroker, client: pulsar.Client) -> None:
    from tests.support.admin import kop_admin, kop_admin_json

    topic = name()
    produce(client, topic, 4)
    part = topic  # non-partitioned: the per-topic verbs and the whole-topic ones name the same
    admin = broker.admin_url

    def run(*args: str) -> str:
        r = kop_admin(admin, *args)
        assert r.returncode == 0, f"kop-admin {args}: {r.returncode}\n{r.stderr}"
        return r.stdout

    assert run("topics", "create-subscription", "-s", "cli", "-m", "earliest", topic).strip() == "done"
    assert run("topics", "subscriptions", topic).split() == ["cli"]
    table = run("topics", "stats", part)
    assert "SUBSCRIPTIONS" in table and "cli" in table
    assert kop_admin_json(admin, "topics", "stats", part)["subscriptions"]["cli"]["msgBacklog"] == 4
    out = run("topics", "peek-messages", "-s", "cli", "-n", "2", part)
    assert "payload: m0" in out and "payload: m1" in out and 'PROPERTY: {"k":"1"}' in out
    run("topics", "skip", "-s", "cli", "-n", "1", part)
    assert sub_stats(broker, part, "cli")["msgBacklog"] == 3
    run("topics", "expire-messages", "-s", "cli", "-t", "1d", topic)
    assert sub_stats(broker, part, "cli")["msgBacklog"] == 3
    run("topics", "clear-backlog", "-s", "cli", topic)
    assert sub_stats(broker, part, "cli")["msgBacklog"] == 0
    run("topics", "reset-cursor", "-s", "cli", "-t", "1h", topic)
    assert sub_stats(broker, part, "cli")["msgBacklog"] == 4
    r = kop_admin(admin, "topics", "skip", "-s", "nope", "-n", "1", part)
    assert r.returncode == 1 and f"Subscription nope not found for topic persistent://public/default/{part}" in r.stderr
    run("topics", "unsubscribe", "-s", "cli", topic)
    assert run("topics", "subscriptions", topic).strip() == ""


def test_pulsar_metrics_per_topic_and_subscription(broker: KopBroker, client: pulsar.Client) -> None:
    from tests.support.admin import Scrape

    topic = name()
    full = f"persistent://public/default/{topic}"  # non-partitioned
    c = client.subscribe(topic, "met", initial_position=pulsar.InitialPosition.Earliest,
                         consumer_type=pulsar.ConsumerType.Shared)
    produce(client, topic, 3)
    msgs = [c.receive(RECEIVE_MS) for _ in range(3)]
    c.acknowledge(msgs[0])
    deadline = time.monotonic() + 30  # the ack travels asynchronously; a guard, not a timing assertion
    while sub_stats(broker, topic, "met")["unackedMessages"] != 2 and time.monotonic() < deadline:
        time.sleep(0.2)
    s = Scrape(broker.admin_url)
    sub = {"namespace": "public/default", "topic": full, "subscription": "met"}
    assert s.value("pulsar_subscription_back_log", **sub) == 2
    assert s.value("pulsar_subscription_unacked_messages", **sub) == 2
    assert s.value("pulsar_subscription_consumers_count", **sub) == 1
    assert s.value("pulsar_subscription_msg_out_total", **sub) == 3
    t = {"namespace": "public/default", "topic": full}
    assert s.value("pulsar_in_messages_total", **t) == 3
    assert s.value("pulsar_out_messages_total", **t) == 3
    assert s.value("pulsar_in_bytes_total", **t) > 0
    assert s.value("pulsar_consumers_count", **t) == 1
    c.close()
