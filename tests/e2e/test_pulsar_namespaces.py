"""Tenants, namespaces and namespace policies over Pulsar's admin REST (issue 22), on Apache Pulsar and on ours.

Plain HTTP against /admin/v2 (the answers' status codes and JSON bodies are what is compared), then Pulsar's rules
seen by pulsar-client: a producer in a namespace that does not exist fails with TopicNotFound, and a namespace's
maxProducersPerTopic / maxConsumersPerTopic refuse the one past the limit (ProducerBusy / ConsumerBusy), its
deduplication drops a resent sequence id, its autoTopicCreation turns auto-creation off or sets the partitions, and
its schemaCompatibilityStrategy decides which schema a producer may bring (IncompatibleSchema). Every test
makes its own tenant (the reference is shared by the session).
"""

from __future__ import annotations

import json
import urllib.error
import urllib.request
import uuid

import pulsar
import pytest
from pulsar.schema import AvroSchema, Integer, Record, String

from tests.support.admin import kop_admin, kop_admin_json
from tests.support.net import wait_until

PULSAR_SIDE_TARGETS = ("pulsar", "kop", "kop-bk")
CLUSTER = "standalone"  # both brokers' clusterName in the suite


def call(admin_url: str, method: str, path: str, body: object = None, raw: bytes | None = None
         ) -> tuple[int, object]:
    """(status, parsed JSON body or None for an empty one); `path` under /admin/v2 unless it is a /lookup or /admin
    one."""
    data = raw if raw is not None else (None if body is None else json.dumps(body).encode())
    prefix = "" if path.startswith(("/lookup/", "/admin/")) else "/admin/v2"
    req = urllib.request.Request(admin_url + prefix + path, data=data, method=method,
                                 headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=30) as r:
            status, text = r.status, r.read()
    except urllib.error.HTTPError as e:
        status, text = e.code, e.read()
    return status, (json.loads(text) if text.strip() else None)


def status_of(admin_url: str, method: str, path: str) -> int:
    """The status alone, for an answer whose body is not JSON (a server's error page)."""
    req = urllib.request.Request(admin_url + path, data=b"" if method == "PUT" else None, method=method)
    try:
        with urllib.request.urlopen(req, timeout=30) as r:
            return int(r.status)
    except urllib.error.HTTPError as e:
        return int(e.code)


class User(Record):
    _sorted_fields = True
    name = String()
    age = Integer()


class UserV2(Record):  # + a field with a default: FULL compatible with User
    _sorted_fields = True
    name = String()
    age = Integer()
    email = String(default=None, required_default=True)


UserV2.__name__ = "User"  # one record name: Avro compares them as versions of one schema


def new_tenant(admin_url: str) -> str:
    tenant = f"tn-{uuid.uuid4().hex[:8]}"
    assert call(admin_url, "PUT", f"/tenants/{tenant}", {"adminRoles": [], "allowedClusters": [CLUSTER]})[0] == 204
    return tenant


@pytest.fixture
def admin(pulsar_broker) -> str:
    return pulsar_broker.admin_url


def test_tenants(target, admin):
    tenant = f"tn-{uuid.uuid4().hex[:8]}"
    info = {"adminRoles": ["r1"], "allowedClusters": [CLUSTER]}
    assert call(admin, "PUT", f"/tenants/{tenant}", info) == (204, None)
    assert call(admin, "PUT", f"/tenants/{tenant}", info) == (409, {"reason": "Tenant already exist"})
    assert call(admin, "PUT", "/tenants/tn-empty", {"adminRoles": [], "allowedClusters": []}) == (
        412, {"reason": "Clusters cannot be empty or blank"})
    assert call(admin, "PUT", "/tenants/tn-nocluster", {"allowedClusters": ["nope"]}) == (
        412, {"reason": "Clusters do not exist"})
    assert call(admin, "PUT", "/tenants/tn-nobody", raw=b"") == (412, {"reason": "TenantInfo is null"})
    assert call(admin, "GET", f"/tenants/{tenant}") == (200, info)
    status, tenants = call(admin, "GET", "/tenants")
    assert status == 200 and {"public", "pulsar", tenant} <= set(tenants)  # type: ignore[arg-type]
    # what Pulsar's standalone creates at start: public/default and the system namespace pulsar/system
    assert call(admin, "PUT", "/tenants/pulsar", info) == (409, {"reason": "Tenant already exist"})
    assert call(admin, "GET", "/namespaces/pulsar") == (200, ["pulsar/system"])
    assert call(admin, "PUT", "/namespaces/pulsar/system") == (409, {"reason": "Namespace already exists"})
    assert "tn-empty" not in tenants  # type: ignore[operator]
    info2 = {"adminRoles": ["a", "b"], "allowedClusters": [CLUSTER]}
    assert call(admin, "POST", f"/tenants/{tenant}", info2) == (204, None)
    assert call(admin, "GET", f"/tenants/{tenant}") == (200, info2)
    assert call(admin, "POST", "/tenants/tn-missing", info2) == (404, {"reason": "Tenant tn-missing not found"})
    assert call(admin, "GET", "/tenants/tn-missing") == (404, {"reason": "Tenant does not exist"})
    assert call(admin, "GET", f"/namespaces/{tenant}") == (200, [])
    assert call(admin, "PUT", f"/namespaces/{tenant}/ns") == (204, None)
    assert call(admin, "DELETE", f"/tenants/{tenant}") == (409, {"reason": "The tenant still has active namespaces"})
    assert call(admin, "DELETE", f"/namespaces/{tenant}/ns") == (204, None)
    assert call(admin, "DELETE", f"/tenants/{tenant}") == (204, None)
    assert call(admin, "DELETE", f"/tenants/{tenant}") == (404, {"reason": "Tenant doesn't exist"})
    assert call(admin, "GET", f"/namespaces/{tenant}") == (404, {"reason": "Tenant not found"})


def test_namespaces(target, admin):
    tenant = new_tenant(admin)
    ns = f"{tenant}/ns1"
    assert call(admin, "PUT", f"/namespaces/{ns}") == (204, None)
    assert call(admin, "PUT", f"/namespaces/{ns}") == (409, {"reason": "Namespace already exists"})
    assert call(admin, "PUT", "/namespaces/tn-missing/ns1") == (404, {"reason": "Tenant does not exist"})
    assert call(admin, "PUT", f"/namespaces/{tenant}/bad$name") == (412, {"reason": "Namespace name is not valid"})
    assert call(admin, "GET", f"/namespaces/{tenant}") == (200, [ns])
    # v1 paths (three-part names tenant/cluster/ns) are gone from Pulsar 5.0: 404 (Jetty's own page there, whose
    # body no client reads), where Pulsar 4.0 listed and checked them
    for method, path in (("GET", f"/admin/namespaces/{tenant}"), ("PUT", f"/admin/namespaces/{tenant}/nope/ns1"),
                         ("PUT", f"/admin/namespaces/{tenant}/{CLUSTER}/ns2")):
        assert status_of(admin, method, path) == 404, (method, path)
    assert call(admin, "GET", f"/namespaces/{tenant}") == (200, [ns])  # and nothing was created
    status, policies = call(admin, "GET", f"/namespaces/{ns}")
    assert status == 200 and isinstance(policies, dict)
    assert policies["replication_clusters"] == [CLUSTER] and policies["backlog_quota_map"] == {}
    assert policies["schema_compatibility_strategy"] == "UNDEFINED" and "max_producers_per_topic" not in policies
    assert call(admin, "GET", f"/namespaces/{tenant}/nx") == (404, {"reason": "Namespace does not exist"})
    assert call(admin, "GET", f"/persistent/{tenant}/nx") == (404, {"reason": "Namespace does not exist"})
    assert call(admin, "PUT", f"/persistent/{tenant}/nx/t/partitions", 2) == (404, {"reason": "Namespace not found"})
    # an HTTP lookup client's calls
    assert call(admin, "GET", f"/persistent/{tenant}/nx/t/partitions?checkAllowAutoCreation=true") == (
        404, {"reason": "Namespace not found"})
    assert call(admin, "GET", f"/lookup/v2/topic/persistent/{tenant}/nx/t") == (404, {"reason": "Namespace not found"})
    assert call(admin, "PUT", f"/persistent/{ns}/t/partitions", 2) == (204, None)
    assert call(admin, "DELETE", f"/namespaces/{ns}") == (409, {"reason": "Cannot delete non empty namespace"})
    assert call(admin, "DELETE", f"/namespaces/{tenant}/nx") == (
        404, {"reason": f"Namespace {tenant}/nx does not exist."})


def test_policies(target, admin):
    tenant = new_tenant(admin)
    ns = f"/namespaces/{tenant}/pol"
    assert call(admin, "PUT", ns) == (204, None)
    values = {"maxProducersPerTopic": 1, "maxConsumersPerTopic": 2, "deduplication": True,
              "autoTopicCreation": {"allowAutoTopicCreation": True, "topicType": "partitioned",
                                    "defaultNumPartitions": 2},
              "retention": {"retentionTimeInMinutes": 60, "retentionSizeInMB": 100}, "messageTTL": 120}
    for path, value in values.items():
        assert call(admin, "GET", f"{ns}/{path}") == (200, None), path
        assert call(admin, "POST", f"{ns}/{path}", value) == (204, None), path
        assert call(admin, "GET", f"{ns}/{path}") == (200, value), path
    status, policies = call(admin, "GET", ns)
    assert status == 200 and isinstance(policies, dict)
    assert (policies["max_producers_per_topic"], policies["max_consumers_per_topic"]) == (1, 2)
    assert policies["deduplicationEnabled"] is True
    assert policies["autoTopicCreationOverride"] == values["autoTopicCreation"]
    assert policies["retention_policies"] == values["retention"]
    assert policies["message_ttl_in_seconds"] == 120
    assert call(admin, "POST", f"{ns}/messageTTL", -3) == (
        412, {"reason": "Invalid value for message TTL, message TTL must >= 0"})
    assert call(admin, "POST", f"{ns}/retention", {"retentionTimeInMinutes": -5, "retentionSizeInMB": 1}) == (
        400, {"reason": "Invalid retention policy: time limit must be >= -1"})
    assert call(admin, "POST", f"{ns}/maxProducersPerTopic", -1) == (
        412, {"reason": "maxProducersPerTopic must be 0 or more"})
    assert call(admin, "POST", f"{ns}/autoTopicCreation", {"allowAutoTopicCreation": True, "topicType": "bogus"}) \
        == (412, {"reason": "Invalid configuration for autoTopicCreationOverride. the detail is Unknown topic type "
                            "[bogus]"})
    for path in values:
        assert call(admin, "DELETE", f"{ns}/{path}") == (204, None), path
        assert call(admin, "GET", f"{ns}/{path}") == (200, None), path
    assert call(admin, "POST", f"/namespaces/{tenant}/nx/maxProducersPerTopic", 1) == (
        404, {"reason": "Namespace does not exist"})

    quotas = {"destination_storage": {"limit": 1000, "limitSize": 1000, "limitTime": -1, "policy": "producer_exception"},
              "message_age": {"limit": 0, "limitSize": 0, "limitTime": 60, "policy": "producer_request_hold"}}
    assert call(admin, "GET", f"{ns}/backlogQuotaMap") == (200, {})
    assert call(admin, "POST", f"{ns}/backlogQuota", {"limitSize": 1000, "limitTime": -1,
                                                      "policy": "producer_exception"}) == (204, None)
    assert call(admin, "POST", f"{ns}/backlogQuota?backlogQuotaType=message_age",
                {"limitTime": 60, "policy": "producer_request_hold"}) == (204, None)
    assert call(admin, "GET", f"{ns}/backlogQuotaMap") == (200, quotas)
    assert call(admin, "POST", f"{ns}/backlogQuota", {"limitSize": 1, "policy": "nope"}) == (400, {
        "reason": f"Set namespace[{tenant}/pol] backlog quota failed because the data validation failed. the "
                  "attribute policy cannot be null"})
    assert call(admin, "DELETE", f"{ns}/backlogQuota") == (204, None)
    assert call(admin, "DELETE", f"{ns}/backlogQuota?backlogQuotaType=message_age") == (204, None)
    assert call(admin, "GET", f"{ns}/backlogQuotaMap") == (200, {})

    strategy = f"{ns}/schemaCompatibilityStrategy"
    assert call(admin, "GET", strategy) == (200, "UNDEFINED")
    assert call(admin, "PUT", strategy, "BACKWARD") == (204, None)
    # the reference answers GETs of this one from a cache that follows the store a moment later
    wait_until("BACKWARD read back", lambda: call(admin, "GET", strategy) == (200, "BACKWARD"), timeout=30)
    assert call(admin, "PUT", strategy, "NO_SUCH_STRATEGY") == (204, None)  # unsets it, as Pulsar does
    wait_until("UNDEFINED read back", lambda: call(admin, "GET", strategy) == (200, "UNDEFINED"), timeout=30)


def test_pulsar_clients_follow_namespaces(target, admin, pulsar_service_url):
    tenant = new_tenant(admin)
    client = pulsar.Client(pulsar_service_url, operation_timeout_seconds=30,
                           logger=pulsar.ConsoleLogger(pulsar.LoggerLevel.Error))
    try:
        with pytest.raises(pulsar.TopicNotFound):
            client.create_producer(f"persistent://{tenant}/missing/t")
        with pytest.raises(pulsar.TopicNotFound):
            client.subscribe(f"persistent://{tenant}/missing/t", "s")
        # the limits set with the namespace: a topic loaded afterwards has them from the start on the reference
        body = {"max_producers_per_topic": 2, "max_consumers_per_topic": 1}
        assert call(admin, "PUT", f"/namespaces/{tenant}/lim", body) == (204, None)
        topic = f"persistent://{tenant}/lim/t"
        producers = [client.create_producer(topic) for _ in range(2)]
        with pytest.raises(pulsar.ProducerBusy):
            client.create_producer(topic)
        producers[0].close()
        producers.append(client.create_producer(topic))  # one left: room for one again
        consumer = client.subscribe(topic, "a")
        with pytest.raises(pulsar.ConsumerBusy):
            client.subscribe(topic, "b")
        consumer.close()
        # the namespace's deduplication (the broker's is off): a resent sequence id is dropped
        assert call(admin, "PUT", f"/namespaces/{tenant}/dedup", {"deduplicationEnabled": True}) == (204, None)
        topic = f"persistent://{tenant}/dedup/t"
        reader = client.subscribe(topic, "r", initial_position=pulsar.InitialPosition.Earliest)
        p = client.create_producer(topic, producer_name=f"dedup-{tenant}", batching_enabled=False)
        for seq, value in ((5, b"first"), (5, b"resent"), (6, b"next")):
            p.send(value, sequence_id=seq)
        p.close()
        assert [reader.receive(30_000).data() for _ in range(2)] == [b"first", b"next"]
        reader.close()
        # the namespace's autoTopicCreation decides over the broker's keys: off, or partitioned with 3 partitions
        off = {"autoTopicCreationOverride": {"allowAutoTopicCreation": False}}
        assert call(admin, "PUT", f"/namespaces/{tenant}/nocreate", off) == (204, None)
        with pytest.raises(pulsar.TopicNotFound):
            client.create_producer(f"persistent://{tenant}/nocreate/t")
        three = {"autoTopicCreationOverride": {"allowAutoTopicCreation": True, "topicType": "partitioned",
                                               "defaultNumPartitions": 3}}
        assert call(admin, "PUT", f"/namespaces/{tenant}/three", three) == (204, None)
        client.create_producer(f"persistent://{tenant}/three/t").close()
        assert call(admin, "GET", f"/persistent/{tenant}/three/t/partitions")[1]["partitions"] == 3  # type: ignore[index]
        # the namespace's schema compatibility strategy decides over the broker's (FULL would take UserV2)
        body = {"schema_compatibility_strategy": "ALWAYS_INCOMPATIBLE"}
        assert call(admin, "PUT", f"/namespaces/{tenant}/strict", body) == (204, None)
        topic = f"persistent://{tenant}/strict/t"
        client.create_producer(topic, schema=AvroSchema(User)).send(User(name="ann", age=30))
        with pytest.raises(pulsar.IncompatibleSchema):
            client.create_producer(topic, schema=AvroSchema(UserV2))
    finally:
        client.close()


def test_kop_admin_cli(target, admin):
    """kop-admin's tenants and namespaces commands, against Pulsar's REST as much as ours."""
    tenant = f"tn-{uuid.uuid4().hex[:8]}"

    def run(*args: str) -> str:
        r = kop_admin(admin, *args)
        assert r.returncode == 0, f"kop-admin {args}: {r.returncode}\n{r.stderr}"
        return r.stdout.strip()

    assert run("tenants", "create", "-r", "ops", tenant) == "done"  # allowed on the broker's clusters
    assert kop_admin_json(admin, "tenants", "get", tenant) == {"adminRoles": ["ops"], "allowedClusters": [CLUSTER]}
    assert run("namespaces", "create", f"{tenant}/ns") == "done"
    assert kop_admin_json(admin, "namespaces", "policies", f"{tenant}/ns")["replication_clusters"] == [CLUSTER]
    refused = kop_admin(admin, "tenants", "delete", tenant)
    assert refused.returncode == 1 and "The tenant still has active namespaces (HTTP 409)" in refused.stderr
    assert run("namespaces", "delete", f"{tenant}/ns") == "done"
    assert run("tenants", "delete", tenant) == "done"


def test_topic_policies_override_the_namespace(target, admin, pulsar_service_url):
    """Topic-level policies (kop/admin/topic_policies.py): set, read and removed over Pulsar's topic paths, refused
    as Pulsar refuses them, and a topic's maxProducers overriding its namespace's maxProducersPerTopic."""
    ns = f"{new_tenant(admin)}/pol"
    assert call(admin, "PUT", f"/namespaces/{ns}", {"max_producers_per_topic": 1}) == (204, None)
    t = f"/persistent/{ns}/t"
    assert call(admin, "PUT", t + "/partitions", 1) == (204, None)
    assert call(admin, "GET", t + "/messageTTL") == (200, None)
    assert call(admin, "POST", t + "/messageTTL?messageTTL=20") == (204, None)
    assert call(admin, "GET", t + "/messageTTL") == (200, 20)
    assert call(admin, "POST", t + "/messageTTL?messageTTL=-1") == (412, {"reason": "Invalid value for message TTL"})
    assert call(admin, "DELETE", t + "/messageTTL") == (204, None)
    assert call(admin, "GET", t + "/messageTTL") == (200, None)
    retention = {"retentionTimeInMinutes": 10, "retentionSizeInMB": 5}
    assert call(admin, "POST", t + "/retention", retention) == (204, None)
    assert call(admin, "GET", t + "/retention") == (200, retention)
    assert call(admin, "POST", t + "/retention", {"retentionTimeInMinutes": 10, "retentionSizeInMB": 0})[0] == 400
    assert call(admin, "POST", t + "/deduplicationEnabled", True) == (204, None)
    assert call(admin, "GET", t + "/deduplicationEnabled") == (200, True)
    assert call(admin, "DELETE", t + "/deduplicationEnabled") == (204, None)
    assert call(admin, "POST", t + "/maxConsumers", -2) == (412, {"reason": "maxConsumers must be 0 or more"})
    quota = {"limitSize": 1000, "limitTime": -1, "policy": "producer_exception"}
    assert call(admin, "POST", t + "/backlogQuota", quota) == (204, None)
    assert call(admin, "GET", t + "/backlogQuotaMap") == (200, {"destination_storage": {"limit": 1000, **quota}})
    assert call(admin, "DELETE", t + "/backlogQuota") == (204, None)
    assert call(admin, "GET", t + "/backlogQuotaMap") == (200, {})
    assert call(admin, "PUT", t + "/schemaCompatibilityStrategy", "FULL") == (204, None)
    assert call(admin, "GET", t + "/schemaCompatibilityStrategy") == (200, "FULL")
    assert call(admin, "DELETE", t + "/schemaCompatibilityStrategy") == (204, None)
    assert call(admin, "GET", t + "/schemaCompatibilityStrategy") == (200, None)
    assert call(admin, "GET", t + "-partition-0/maxProducers") == (
        412, {"reason": "Not allowed to set/get topic policy for a partition"})
    assert call(admin, "GET", f"/persistent/{ns}/nosuch/maxProducers") == (
        404, {"reason": f"Topic persistent://{ns}/nosuch not found"})
    assert call(admin, "GET", t + "/maxProducers?applied=true") == (200, 1)  # the namespace's
    assert call(admin, "POST", t + "/maxProducers", 2) == (204, None)
    assert call(admin, "GET", t + "/maxProducers") == (200, 2)
    client = pulsar.Client(pulsar_service_url, operation_timeout_seconds=30,
                           logger=pulsar.ConsoleLogger(pulsar.LoggerLevel.Error))
    try:
        producers = [client.create_producer(f"persistent://{ns}/t") for _ in range(2)]  # 2 > the namespace's 1
        with pytest.raises(pulsar.ProducerBusy):
            client.create_producer(f"persistent://{ns}/t")
        sibling = client.create_producer(f"persistent://{ns}/u")  # a topic without its own: the namespace's 1
        with pytest.raises(pulsar.ProducerBusy):
            client.create_producer(f"persistent://{ns}/u")
        for p in (*producers, sibling):
            p.close()
    finally:
        client.close()
