"""Namespace policies that act on Pulsar subscriptions, with the real `pulsar-client` against our broker subprocess:
messageTTL (kop/pulsar/message_ttl.py) - a subscription of a topic in a namespace with a TTL has its old messages
expired (acknowledged) by the periodic pass, while one in a namespace without it keeps its backlog - and the
backlogQuota (kop/pulsar/backlog_quota.py) - a producer on a topic of a namespace whose quota a stalled subscription
exceeds is refused, one beside it in a namespace without a quota is not. Ours only: Apache Pulsar runs these checks
every minute or more, too slow for the suite; their REST answers are compared with Pulsar's in
tests/e2e/test_pulsar_namespaces.py."""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import pulsar
import pytest

from tests.e2e.test_pulsar_namespaces import call
from tests.support.admin import ok, topic_url
from tests.support.broker import KopBroker
from tests.support.cluster import eventually

WAIT_S = 60  # a guard against hangs while the periodic pass comes round, not a timing assertion


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[KopBroker]:
    b = KopBroker(tmp_path_factory.mktemp("kop-ttl"), {"backlogQuotaCheckIntervalInSeconds": 1})
    b.start()
    yield b
    b.stop()


def test_message_ttl_expires_old_messages_of_the_namespace_only(broker: KopBroker) -> None:
    admin = broker.admin_url
    tenant = f"tn-{uuid.uuid4().hex[:8]}"
    assert call(admin, "PUT", f"/tenants/{tenant}", {"allowedClusters": ["standalone"]})[0] == 204
    assert call(admin, "PUT", f"/namespaces/{tenant}/ttl")[0] == 204
    assert call(admin, "POST", f"/namespaces/{tenant}/ttl/messageTTL", -3) == (
        412, {"reason": "Invalid value for message TTL, message TTL must >= 0"})
    assert call(admin, "POST", f"/namespaces/{tenant}/ttl/messageTTL", 1) == (204, None)
    assert call(admin, "GET", f"/namespaces/{tenant}/ttl/messageTTL") == (200, 1)
    local = f"t-{uuid.uuid4().hex[:8]}"
    expiring, kept = f"persistent://{tenant}/ttl/{local}", f"persistent://public/default/{local}"
    client = pulsar.Client(broker.pulsar_url, operation_timeout_seconds=30)
    try:
        for topic in (expiring, kept):
            client.subscribe(topic, "slow", initial_position=pulsar.InitialPosition.Earliest).close()
            p = client.create_producer(topic, batching_enabled=False)
            for i in range(3):
                p.send(f"m{i}".encode())
            p.close()
    finally:
        client.close()

    def backlog(tenant: str, namespace: str) -> int:
        stats = ok(topic_url(admin, local, tenant, namespace) + "/stats")
        return int(stats["subscriptions"]["slow"]["msgBacklog"])

    eventually("the TTL namespace's subscription expired its messages", lambda: backlog(tenant, "ttl") == 0, WAIT_S)
    assert backlog("public", "default") == 3  # the same passes left the namespace without a TTL alone


def test_backlog_quota_of_the_namespace_refuses_producers(broker: KopBroker) -> None:
    admin = broker.admin_url
    tenant = f"tn-{uuid.uuid4().hex[:8]}"
    assert call(admin, "PUT", f"/tenants/{tenant}", {"allowedClusters": ["standalone"]})[0] == 204
    assert call(admin, "PUT", f"/namespaces/{tenant}/quota")[0] == 204
    quota = {"limitSize": 100, "limitTime": -1, "policy": "producer_exception"}
    assert call(admin, "POST", f"/namespaces/{tenant}/quota/backlogQuota", quota) == (204, None)
    local = f"t-{uuid.uuid4().hex[:8]}"
    client = pulsar.Client(broker.pulsar_url, operation_timeout_seconds=10)
    try:
        for topic in (f"persistent://{tenant}/quota/{local}", f"persistent://public/default/{local}"):
            stalled = client.subscribe(topic, "stalled", initial_position=pulsar.InitialPosition.Earliest)
            p = client.create_producer(topic, batching_enabled=False)
            for _ in range(10):
                p.send(b"x" * 100)
            p.close()
            stalled.close()
        with pytest.raises(Exception, match="(?i)quota"):  # ProducerBlockedQuotaExceededException
            client.create_producer(f"persistent://{tenant}/quota/{local}")
        client.create_producer(f"persistent://public/default/{local}").close()  # the broker has no quota
    finally:
        client.close()


def test_a_topic_message_ttl_overrides_its_namespaces(broker: KopBroker) -> None:
    """A topic's own messageTTL (kop/admin/topic_policies.py) decides over its namespace's: 1 s on one topic of a
    namespace whose TTL is an hour expires that topic's backlog only."""
    admin = broker.admin_url
    tenant = f"tn-{uuid.uuid4().hex[:8]}"
    assert call(admin, "PUT", f"/tenants/{tenant}", {"allowedClusters": ["standalone"]})[0] == 204
    assert call(admin, "PUT", f"/namespaces/{tenant}/hour", {"message_ttl_in_seconds": 3600})[0] == 204
    expiring, kept = f"t-{uuid.uuid4().hex[:8]}", f"u-{uuid.uuid4().hex[:8]}"
    for local in (expiring, kept):
        assert call(admin, "PUT", f"/persistent/{tenant}/hour/{local}/partitions", 1)[0] == 204
    assert call(admin, "POST", f"/persistent/{tenant}/hour/{expiring}/messageTTL?messageTTL=1") == (204, None)
    client = pulsar.Client(broker.pulsar_url, operation_timeout_seconds=30)
    try:
        for local in (expiring, kept):
            topic = f"persistent://{tenant}/hour/{local}"
            client.subscribe(topic, "slow", initial_position=pulsar.InitialPosition.Earliest).close()
            p = client.create_producer(topic, batching_enabled=False)
            for i in range(3):
                p.send(f"m{i}".encode())
            p.close()
    finally:
        client.close()

    def backlog(local: str) -> int:
        stats = ok(topic_url(admin, f"{local}-partition-0", tenant, "hour") + "/stats")
        return int(stats["subscriptions"]["slow"]["msgBacklog"])

    eventually("the topic's own TTL expired its messages", lambda: backlog(expiring) == 0, WAIT_S)
    assert backlog(kept) == 3  # the same passes kept the namespace's hour for the topic without its own
