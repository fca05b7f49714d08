"""Pulsar's admin calls on a partitioned topic's base name, in cluster mode (kop/admin/fanout.py, issue 22).

Two brokers share a ZooKeeper chroot and the bookies; the topic's partitions are owned by both. Every call that acts
on the whole topic - subscriptions list, create (and its 409), reset by time, clear backlog, expire (one
subscription, all of them), delete, compaction trigger, partitioned (internal) stats, unload, the topic's deletion (refused while a
Pulsar consumer is connected to a partition of the other broker) - is made to one broker or the other, answered
by that broker itself (no redirect), and covers every partition: the per-partition stats, each from its owner, show
it. Before fanout.py such a call answered 412 whenever the partitions were spread over several brokers. The brokers
run with token authentication, so the forwarded calls must carry the caller's credentials.
"""

from __future__ import annotations

import base64
import json
import urllib.error
import urllib.request
import uuid
from typing import Any

import jwt
import pulsar
import pytest
from kafka import KafkaProducer

from kop.cluster.bundles import bundle_for, choose_owner
from tests.support.cluster import eventually, metadata, start_brokers, stop_brokers

PARTITIONS = 6
PER_PARTITION = 3
SECRET = b"k" * 32


class _NoRedirect(urllib.request.HTTPRedirectHandler):
    def redirect_request(self, *args: Any, **kwargs: Any) -> None:
        return None


def call(admin: str, method: str, path: str, body: object = None, role: str | None = "admin") -> tuple[int, Any]:
    """(status, JSON body or None) of /admin/v2/persistent/public/default/<path> with `role`'s token; a redirect is
    answered as is."""
    headers = {"Content-Type": "application/json"}
    if role is not None:
        headers["Authorization"] = f"Bearer {token(role)}"
    data = json.dumps(body).encode() if body is not None else b"" if method in ("PUT", "POST") else None
    req = urllib.request.Request(f"{admin}/admin/v2/persistent/public/default/{path}", method=method, data=data,
                                 headers=headers)
    try:
        with urllib.request.build_opener(_NoRedirect).open(req, timeout=60) as resp:
            status, raw = resp.status, resp.read()
    except urllib.error.HTTPError as e:
        status, raw = e.code, e.read()
    return status, json.loads(raw) if raw.strip() else None


def spread_topic() -> str:
    """A topic name whose partitions' bundles the rendezvous choice gives to both brokers (1 and 2)."""
    while True:
        name = f"fan-{uuid.uuid4().hex[:8]}"
        owners = {choose_owner(bundle_for("public", "default", name, p, 4), [1, 2]) for p in range(PARTITIONS)}
        if owners == {1, 2}:
            return name


def token(role: str) -> str:
    return jwt.encode({"sub": role}, SECRET, algorithm="HS256")


@pytest.fixture
def brokers(cluster, tmp_path_factory):
    # authentication on: a call forwarded to a partition's owner must carry the caller's credentials
    bs = start_brokers(tmp_path_factory, cluster, 2, messagingProtocols="kafka,pulsar", authenticationEnabled="true",
                       authenticationProviders="org.apache.pulsar.broker.authentication.AuthenticationProviderToken",
                       superUserRoles="admin", tokenSecretKey="data:;base64," + base64.b64encode(SECRET).decode())
    yield bs
    stop_brokers(bs)


def leaders_of(bootstrap: str, topic: str) -> dict[int, int] | None:
    """Partition -> leader id, None until every partition has one."""
    m = metadata(bootstrap, [topic])
    out = {p: lead for (t, p), (lead, err) in m.leaders.items() if t == topic and err == 0 and lead > 0}
    return out if len(out) == PARTITIONS else None


def backlogs(admin: str, topic: str, sub: str) -> dict[int, int]:
    """Partition -> the subscription's msgBacklog, from partitioned-stats (each partition's from its owner)."""
    status, stats = call(admin, "GET", f"{topic}/partitioned-stats")
    assert status == 200, stats
    return {int(name.rsplit("-", 1)[1]): s["subscriptions"][sub]["msgBacklog"]
            for name, s in stats["partitions"].items()}


def test_base_name_calls_cover_every_partition_from_either_broker(brokers):
    b1, b2 = brokers
    a1, a2 = b1.admin_url, b2.admin_url
    topic = spread_topic()
    assert call(a1, "PUT", f"{topic}/partitions", PARTITIONS) == (204, None)
    leaders = eventually("every partition led", lambda: leaders_of(b1.bootstrap, topic))
    assert set(leaders.values()) == {1, 2}, leaders  # owned by both brokers

    assert call(a1, "PUT", f"{topic}/subscription/s") == (204, None)  # at latest, on every partition
    assert call(a2, "PUT", f"{topic}/subscription/s") == (409, {"reason": "Subscription already exists for topic"})
    assert call(a2, "GET", f"{topic}/subscriptions") == (200, ["s"])
    assert call(a2, "GET", f"{topic}/subscriptions", role=None)[0] == 401
    assert call(a2, "GET", f"{topic}/subscriptions", role="alice")[0] == 403  # no super user, no tenant admin
    for p in range(PARTITIONS):  # each partition has it, as its owner says
        owner = a1 if leaders[p] == 1 else a2
        assert call(owner, "GET", f"{topic}-partition-{p}/subscriptions") == (200, ["s"]), p

    producer = KafkaProducer(bootstrap_servers=b1.bootstrap)
    for p in range(PARTITIONS):
        for i in range(PER_PARTITION):
            producer.send(topic, f"m{p}-{i}".encode(), partition=p).get(60)
            producer.flush()
    producer.close()
    full = backlogs(a2, topic, "s")
    status, internal = call(a1, "GET", f"{topic}/partitioned-internalStats")
    assert status == 200 and sorted(internal["partitions"]) == sorted(
        f"persistent://public/default/{topic}-partition-{p}" for p in range(PARTITIONS)), internal
    assert sorted(full) == list(range(PARTITIONS)) and all(full.values()), full

    assert call(a2, "POST", f"{topic}/subscription/s/skip_all") == (204, None)  # clear-backlog
    assert backlogs(a1, topic, "s") == dict.fromkeys(range(PARTITIONS), 0)
    assert call(a1, "POST", f"{topic}/subscription/s/resetcursor/0") == (204, None)  # by time: the start
    assert backlogs(a2, topic, "s") == full
    assert call(a1, "POST", f"{topic}/subscription/s/expireMessages/0") == (204, None)
    assert backlogs(a1, topic, "s") == dict.fromkeys(range(PARTITIONS), 0)
    assert call(a2, "POST", f"{topic}/subscription/s/resetcursor/0") == (204, None)
    assert call(a2, "POST", f"{topic}/all_subscription/expireMessages/0") == (204, None)
    assert backlogs(a2, topic, "s") == dict.fromkeys(range(PARTITIONS), 0)
    assert call(a1, "PUT", f"{topic}/compaction") == (204, None)

    assert call(a2, "DELETE", f"{topic}/subscription/s") == (204, None)
    assert call(a1, "GET", f"{topic}/subscriptions") == (200, [])
    for p in range(PARTITIONS):
        owner = a1 if leaders[p] == 1 else a2
        assert call(owner, "GET", f"{topic}-partition-{p}/subscriptions") == (200, []), p

    # a Pulsar consumer on a partition broker 2 owns holds the topic: broker 1 refuses the deletion, as Pulsar
    p2 = next(p for p, lead in leaders.items() if lead == 2)
    client = pulsar.Client(b2.pulsar_url, operation_timeout_seconds=30, authentication=pulsar.AuthenticationToken(
        token("admin")), logger=pulsar.ConsoleLogger(pulsar.LoggerLevel.Error))
    try:
        consumer = client.subscribe(f"persistent://public/default/{topic}-partition-{p2}", "held")

        def since() -> str:
            """When the consumer connected ("" while it is not: reconnecting)."""
            status, stats = call(a2, "GET", f"{topic}-partition-{p2}/stats")
            consumers = stats["subscriptions"].get("held", {}).get("consumers", []) if status == 200 else []
            return consumers[0]["connectedSince"] if consumers else ""

        before = eventually("the consumer in the stats", since)
        assert call(a1, "PUT", f"{topic}/unload") == (204, None)  # broker 1 unloads broker 2's partition too
        eventually("the consumer reconnected", lambda: since() not in ("", before))
        assert call(a1, "DELETE", f"{topic}/partitions") == (
            412, {"reason": "Topic has active producers/subscriptions"})
        consumer.close()
    finally:
        client.close()
    assert call(a1, "DELETE", f"{topic}/partitions") == (204, None)
    for admin in (a1, a2):
        eventually("the topic gone", lambda a=admin: call(a, "GET", f"{topic}/partitions")[0] == 404
                   or call(a, "GET", f"{topic}/partitions")[1] == {"partitions": 0})
