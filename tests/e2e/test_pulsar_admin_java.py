"""Pulsar's own Java admin client (`pulsar-client-admin`) driving the admin REST API (issue 13).

Topic list, subscription create/list, cursor resets by message id and by time, and topic stats (backlog), checked
against what pulsar-client wrote and then reads, on the non-partitioned topic its producer auto-created (Pulsar's
default kind, on both brokers), so the per-topic calls (topic stats, cursors) name the topic itself.

Then (issue 22) what `pulsar-admin tenants`, `namespaces`, `topicPolicies` and `topics unload` call - the CLI
itself, pulsar-client-tools, is not served by Maven Central here, and it is a thin layer over these client calls
(tools/java/pulsar/src/PulsarAdminCalls.java): tenants and namespaces with their refusals, every namespace policy
this broker honours set / read / removed, the same at topic level with `applied`, each refusal as the
PulsarAdminException subclass and HTTP status the client raises, and unload of a partitioned topic.

Runs on the reference `pulsar` and on our broker (embedded and BookKeeper storage), the same assertions on each;
the call-by-call comparison of the two brokers' answers is tests/e2e/test_pulsar_admin_diff.py.
"""

from __future__ import annotations

import uuid

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
from tests.support.admin import create_partitioned_topic, ok, topic_url
from tests.support.net import wait_until
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


def _tenant() -> str:
    return f"tj-{uuid.uuid4().hex[:8]}"


CLUSTER = "standalone"  # both brokers' clusterName in the suite
NOT_FOUND = {"exception": "NotFoundException", "status": 404}
CONFLICT = {"exception": "ConflictException", "status": 409}
PRECONDITION = {"exception": "PreconditionFailedException", "status": 412}
BAD_REQUEST = {"exception": "PulsarAdminException", "status": 400}  # the Java client has no subclass for 400
# an error raised in the client before any request: PulsarAdminException with its default status
CLIENT_SIDE = {"exception": "PulsarAdminException", "status": 500}
RETENTION = '{"retentionTimeInMinutes":60,"retentionSizeInMB":100}'
QUOTA = '{"limitSize":1000,"limitTime":-1,"policy":"producer_exception"}'
AUTO_CREATION = '{"allowAutoTopicCreation":true,"topicType":"partitioned","defaultNumPartitions":2}'
# policy -> (value to set, as the client reads it back, the client's "unset" answer)
NAMESPACE_POLICIES: dict[str, tuple[str, object, object]] = {
    "retention": (RETENTION, {"retentionTimeInMinutes": 60, "retentionSizeInMB": 100}, None),
    "messageTTL": ("120", 120, None),
    "deduplication": ("true", True, None),
    "maxProducers": ("3", 3, None),
    "maxConsumers": ("4", 4, None),
    "backlogQuota": (QUOTA, {"destination_storage": {"limit": 1000, "limitSize": 1000, "limitTime": -1,
                                                     "policy": "producer_exception"}}, {}),
    "autoTopicCreation": (AUTO_CREATION, {"allowAutoTopicCreation": True, "topicType": "partitioned",
                                          "defaultNumPartitions": 2}, None),
    "schemaCompatibilityStrategy": ("BACKWARD", "BACKWARD", "UNDEFINED"),
}


def test_java_admin_tenants_namespaces_policies(target, pulsar_broker):
    """Tenants, namespaces and namespace policies through Pulsar's Java admin client (what `pulsar-admin tenants` /
    `namespaces` call), each error as the PulsarAdminException subclass and HTTP status the client raises."""
    tenant = _tenant()
    ns = f"{tenant}/ns"
    java = PulsarJava(pulsar_broker.service_url, pulsar_broker.admin_url)
    with java.session() as s:
        assert s(f"tenant-create {tenant} {CLUSTER} r1") is True
        assert s(f"try tenant-create {tenant} {CLUSTER} r1") == CONFLICT
        assert s(f"try tenant-create {tenant}-x nope r1") == PRECONDITION  # an unknown cluster
        assert s(f"try tenant-create {tenant}-y - r1") == PRECONDITION  # no cluster
        assert s(f"tenant-get {tenant}") == {"adminRoles": ["r1"], "allowedClusters": [CLUSTER]}
        assert s(f"try tenant-get {tenant}-x") == NOT_FOUND
        assert s(f"tenant-update {tenant} {CLUSTER} a,b") is True
        got = s(f"tenant-get {tenant}")
        assert sorted(got["adminRoles"]) == ["a", "b"] and got["allowedClusters"] == [CLUSTER]  # type: ignore[index]
        assert s(f"try tenant-update {tenant}-x {CLUSTER} a") == NOT_FOUND
        assert s(f"try tenant-update {tenant} - a") == PRECONDITION
        assert tenant in s("tenants")  # type: ignore[operator]

        assert s(f"namespaces {tenant}") == []
        assert s(f"namespace-create {ns}") is True
        assert s(f"try namespace-create {ns}") == CONFLICT
        assert s(f"try namespace-create {tenant}-x/ns") == NOT_FOUND
        # a three-part (v1) name: Pulsar 5.0's admin client refuses it itself (IllegalArgumentException "Invalid
        # namespace format", wrapped with the client's default status), sending nothing; its brokers have no v1 paths
        for v1 in (f"{tenant}/nope/ns", f"{tenant}-x/{CLUSTER}/ns", f"{tenant}/{CLUSTER}/ns"):
            assert s(f"try namespace-create {v1}") == CLIENT_SIDE, v1
        assert s(f"namespaces {tenant}") == [ns]
        assert s(f"try namespaces {tenant}-x") == NOT_FOUND
        assert s(f"try tenant-delete {tenant}") == CONFLICT  # it has a namespace
        policies = s(f"namespace-policies {ns}")
        assert isinstance(policies, dict)
        assert policies["replication_clusters"] == [CLUSTER] and policies["backlog_quota_map"] == {}
        # defaultNumberOfNamespaceBundles: Pulsar 5.0's default is 32 (4.0's was 4); ours stays 4 - a bundle is the
        # unit of ownership in our cluster mode (kop/cluster/bundles.py), where 32 means 8x the ownership nodes
        bundles = policies["bundles"]
        assert bundles["numBundles"] == (4 if target.is_kop else 32) == len(bundles["boundaries"]) - 1
        assert policies["is_allow_auto_update_schema"] is True
        assert policies["schema_compatibility_strategy"] == "UNDEFINED" and policies["deleted"] is False
        assert s(f"try namespace-policies {tenant}/nx") == NOT_FOUND

        for policy, (value, read_back, unset) in NAMESPACE_POLICIES.items():
            assert s(f"ns-get {ns} {policy}") == unset, policy
            assert s(f"ns-set {ns} {policy} {value}") is True, policy
            assert s(f"ns-get {ns} {policy}") == read_back, policy
            assert s(f"ns-remove {ns} {policy}") is True, policy
            assert s(f"ns-get {ns} {policy}") == unset, policy
            assert s(f"try ns-get {tenant}/nx {policy}") == NOT_FOUND, policy
        s(f"ns-set {ns} backlogQuota {QUOTA}")
        assert s(f"ns-set {ns} backlogQuota " + '{"limitTime":60,"policy":"producer_request_hold"} message_age') is True
        assert s(f"ns-get {ns} backlogQuota") == {
            "destination_storage": {"limit": 1000, "limitSize": 1000, "limitTime": -1, "policy": "producer_exception"},
            "message_age": {"limit": 0, "limitSize": 0, "limitTime": 60, "policy": "producer_request_hold"}}
        assert s(f"ns-remove {ns} backlogQuota message_age") is True
        assert list(s(f"ns-get {ns} backlogQuota")) == ["destination_storage"]  # type: ignore[arg-type]

        assert s(f"try ns-set {ns} messageTTL -3") == PRECONDITION
        assert s(f"try ns-set {ns} maxProducers -1") == PRECONDITION
        assert s(f"try ns-set {ns} maxConsumers -1") == PRECONDITION
        assert s(f"try ns-set {ns} retention " + '{"retentionTimeInMinutes":-5,"retentionSizeInMB":1}') == BAD_REQUEST
        assert s(f"try ns-set {ns} backlogQuota " + '{"limitSize":1}') == BAD_REQUEST  # no policy
        assert s(f"try ns-set {ns} autoTopicCreation " + '{"allowAutoTopicCreation":true,"topicType":"bogus"}') \
            == PRECONDITION
        assert s(f"try ns-set {tenant}/nx maxProducers 1") == NOT_FOUND
        assert s(f"try ns-remove {tenant}/nx maxProducers") == NOT_FOUND

        assert s(f"try namespace-delete {tenant}/nx") == NOT_FOUND
        assert s(f"namespace-delete {ns}") is True
        assert s(f"tenant-delete {tenant}") is True
        assert s(f"try tenant-delete {tenant}") == NOT_FOUND
        assert tenant not in s("tenants")  # type: ignore[operator]


# topic policy -> (value to set, as the client reads it back, the namespace's value, as read back)
TOPIC_POLICIES: dict[str, tuple[str, object, str, object]] = {
    "retention": ('{"retentionTimeInMinutes":10,"retentionSizeInMB":5}', {"retentionTimeInMinutes": 10,
                  "retentionSizeInMB": 5}, RETENTION, {"retentionTimeInMinutes": 60, "retentionSizeInMB": 100}),
    "messageTTL": ("20", 20, "120", 120),
    "deduplication": ("true", True, "false", False),
    "maxProducers": ("2", 2, "3", 3),
    "maxConsumers": ("7", 7, "4", 4),
    "backlogQuota": ('{"limitSize":2000,"limitTime":-1,"policy":"consumer_backlog_eviction"}',
                     {"destination_storage": {"limit": 2000, "limitSize": 2000, "limitTime": -1,
                                              "policy": "consumer_backlog_eviction"}},
                     QUOTA, {"destination_storage": {"limit": 1000, "limitSize": 1000, "limitTime": -1,
                                                     "policy": "producer_exception"}}),
    "schemaCompatibilityStrategy": ("FULL", "FULL", "BACKWARD", "BACKWARD"),
}


def _broker_defaults(target) -> dict[str, object]:
    """What `applied` answers for a topic whose namespace sets nothing: the broker's own keys. Retention is the one
    that differs, on purpose: ours keeps Kafka's week (defaultRetentionTimeInMinutes=10080, no size limit: README),
    Apache Pulsar keeps nothing past the backlog (0, 0)."""
    no_quota = {"limit": -1, "limitSize": -1, "limitTime": -1, "policy": "producer_request_hold"}
    return {
        "retention": ({"retentionTimeInMinutes": 10080, "retentionSizeInMB": -1} if target.is_kop
                      else {"retentionTimeInMinutes": 0, "retentionSizeInMB": 0}),
        "messageTTL": 0, "deduplication": False, "maxProducers": 0, "maxConsumers": 0,
        "backlogQuota": {"destination_storage": no_quota, "message_age": no_quota},
        "schemaCompatibilityStrategy": "FULL",
    }


def test_java_admin_topic_policies(target, pulsar_broker):
    """Topic-level policies through `admin.topicPolicies()` (what `pulsar-admin topicPolicies` calls): unset, the
    broker's value applied; the namespace's applied; the topic's own over it; removed, the namespace's again; the
    refusals as the client raises them."""
    tenant = _tenant()
    ns = f"{tenant}/ns"
    topic = f"persistent://{ns}/pt"
    java = PulsarJava(pulsar_broker.service_url, pulsar_broker.admin_url)
    defaults = _broker_defaults(target)
    with java.session() as s:
        s(f"tenant-create {tenant} {CLUSTER} -")
        s(f"namespace-create {ns}")
        s(f"create-partitioned-topic {topic} 2")
        # the broker's values, on a topic of another namespace: Apache Pulsar 4.0.7 writes the default quotas it
        # answers `applied` with into its cached namespace policies, which a later namespace update then stores
        s(f"namespace-create {ns}2")
        s(f"create-partitioned-topic persistent://{ns}2/t 1")
        for policy in TOPIC_POLICIES:
            assert s(f"topic-get persistent://{ns}2/t {policy}") == ({} if policy == "backlogQuota" else None), policy
            assert s(f"topic-get persistent://{ns}2/t {policy} applied") == defaults[policy], policy
        for policy, (_, _, ns_value, ns_read) in TOPIC_POLICIES.items():
            s(f"ns-set {ns} {policy} {ns_value}")
            assert s(f"topic-get {topic} {policy} applied") == ns_read, policy
        for policy, (value, read_back, _, _) in TOPIC_POLICIES.items():
            assert s(f"topic-set {topic} {policy} {value}") is True, policy
            assert s(f"topic-get {topic} {policy}") == read_back, policy
            assert s(f"topic-get {topic} {policy} applied") == read_back, policy
        # a quota of the other type on the topic: `applied` is the topic's whole map, not merged per type
        s(f"topic-remove {topic} backlogQuota")
        s(f"topic-set {topic} backlogQuota " + '{"limitTime":10,"policy":"producer_exception"} message_age')
        age = {"message_age": {"limit": 0, "limitSize": 0, "limitTime": 10, "policy": "producer_exception"}}
        assert s(f"topic-get {topic} backlogQuota applied") == age
        for policy, (_, _, _, ns_read) in TOPIC_POLICIES.items():
            assert s(f"topic-remove {topic} {policy}" + (" message_age" if policy == "backlogQuota" else "")) is True
            assert s(f"topic-get {topic} {policy}") == ({} if policy == "backlogQuota" else None), policy
            assert s(f"topic-get {topic} {policy} applied") == ns_read, policy

        assert s(f"try topic-set {topic} messageTTL -1") == PRECONDITION
        assert s(f"try topic-set {topic} maxProducers -2") == PRECONDITION
        assert s(f"try topic-set {topic} maxConsumers -2") == PRECONDITION
        assert s(f"try topic-set {topic} retention " + '{"retentionTimeInMinutes":10,"retentionSizeInMB":0}') \
            == BAD_REQUEST
        assert s(f"try topic-set {topic} backlogQuota " + '{"limitSize":1}') == BAD_REQUEST
        assert s(f"try topic-get {topic}-partition-0 maxProducers") == PRECONDITION
        assert s(f"try topic-set {topic}-partition-0 maxProducers 1") == PRECONDITION
        assert s(f"try topic-get persistent://{ns}/nosuch maxProducers") == NOT_FOUND
        assert s(f"try topic-set persistent://{ns}/nosuch maxProducers 1") == NOT_FOUND
        assert s(f"try topic-get persistent://{tenant}/nx/t maxProducers") == NOT_FOUND
        assert s(f"try topic-set persistent://{tenant}/nx/t maxProducers 1") == NOT_FOUND


def _connected_since(admin_url: str, topic: str, sub: str) -> list[str | None]:
    """Per partition, when the subscription's consumer connected (Pulsar's consumer stats, over REST: cheaper than a
    JVM per poll; None while it is not connected)."""
    out: list[str | None] = []
    for p in range(2):
        stats = ok(topic_url(admin_url, f"{topic.rsplit('/', 1)[1]}-partition-{p}") + "/stats")
        consumers = stats["subscriptions"].get(sub, {}).get("consumers", [])
        out.append(consumers[0]["connectedSince"] if consumers else None)
    return out


def test_java_admin_unload(target, client, pulsar_broker):
    """unload through the Java admin client (what `pulsar-admin topics unload` calls) on a partitioned topic's base
    name: every partition's consumer is made to reconnect (its connectedSince moves), and it goes on where it was."""
    topic = topic_name(target, "unload")
    admin = pulsar_broker.admin_url
    create_partitioned_topic(admin, topic, 2)
    consumer = client.subscribe(topic, "u", initial_position=pulsar.InitialPosition.Earliest)
    produce(client, topic, 4)
    assert sorted(index_of(m) for m in receive_n(consumer, 4)) == [0, 1, 2, 3]
    before = _connected_since(admin, topic, "u")
    missing = f"persistent://{NAMESPACE}/nosuch-{uuid.uuid4().hex[:8]}"
    java = PulsarJava(pulsar_broker.service_url, admin)
    assert java.run(f"unload {topic}", f"try unload {missing}") == [True, NOT_FOUND]
    wait_until("both partitions' consumers reconnected", lambda: all(
        now is not None and now != then
        for then, now in zip(before, _connected_since(admin, topic, "u"), strict=True)), timeout=60)
    produce(client, topic, 4, start=4)
    assert sorted(index_of(m) for m in receive_n(consumer, 4)) == [4, 5, 6, 7]
    consumer.close()
