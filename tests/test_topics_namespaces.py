"""Tenants and namespaces (kop/topics/namespaces.py): the checks sans-IO, the store over the embedded metadata store,
and a data dir from before namespaces were stored (its topics' namespaces are created at start-up)."""

from __future__ import annotations

import pytest

from kop.config import BrokerConfig
from kop.offset import open_embedded_storage
from kop.server.service import BrokerService
from kop.storage.local.metadata import SqliteMetadataStore
from kop.topics import namespaces as n
from kop.topics.chores import retention_of
from kop.topics.namespaces import NamespaceError, Namespaces

CFG = BrokerConfig.from_strings({})


def refusal(fn, *args) -> tuple[int, str]:
    with pytest.raises(NamespaceError) as e:
        fn(*args)
    return e.value.status, e.value.reason


def test_tenant_info_is_checked_as_pulsar_does() -> None:
    assert n.tenant_info({"allowedClusters": ["standalone"]}, ["standalone"]) == {
        "adminRoles": [], "allowedClusters": ["standalone"]}
    assert refusal(n.tenant_info, None, ["standalone"]) == (412, "TenantInfo is null")
    assert refusal(n.tenant_info, {"allowedClusters": []}, ["standalone"]) == (412, "Clusters cannot be empty or blank")
    assert refusal(n.tenant_info, {"allowedClusters": ["x"]}, ["standalone"]) == (412, "Clusters do not exist")
    assert refusal(n.check_name, "a/b", "Namespace") == (412, "Namespace name is not valid")
    n.check_name("a-b.c=d:e_f", "Tenant")


def test_policies_are_checked_and_unknown_fields_ignored() -> None:
    body = {"max_producers_per_topic": 3, "deduplicationEnabled": False, "bundles": {"numBundles": 4},
            "message_ttl_in_seconds": None}
    assert n.check_policies(body) == {"max_producers_per_topic": 3, "deduplicationEnabled": False}
    assert refusal(n.check_policies, {"max_consumers_per_topic": -1})[0] == 412
    assert refusal(n.check_policies, {"max_consumers_per_topic": True})[0] == 400
    assert refusal(n.check_policies, {"deduplicationEnabled": "yes"})[0] == 400
    auto = n.VALIDATORS[n.AUTO_TOPIC_CREATION]
    assert auto({"allowAutoTopicCreation": False, "topicType": "bogus"}) == {"allowAutoTopicCreation": False}
    assert auto({"allowAutoTopicCreation": True, "topicType": "non-partitioned"}) == {
        "allowAutoTopicCreation": True, "topicType": "non-partitioned"}
    assert "cannot be null" in refusal(auto, {"allowAutoTopicCreation": True, "topicType": "partitioned"})[1]
    retention = n.VALIDATORS[n.RETENTION]
    assert retention({"retentionTimeInMinutes": 0, "retentionSizeInMB": 0}) == {
        "retentionTimeInMinutes": 0, "retentionSizeInMB": 0}
    assert refusal(retention, {"retentionTimeInMinutes": 0, "retentionSizeInMB": -1})[0] == 400


async def test_store_create_delete_and_reload(tmp_path) -> None:
    store = SqliteMetadataStore(tmp_path)
    ns = Namespaces(CFG, store)
    await ns.load([])
    assert ns.tenants() == ["public", "pulsar"] and ns.namespaces("public") == ["public/__kafka", "public/default"]
    assert ns.namespaces("pulsar") == ["pulsar/system"]  # as Apache Pulsar's standalone creates them
    with pytest.raises(NamespaceError, match="Tenant already exist"):
        await ns.create_tenant("pulsar", {"allowedClusters": ["standalone"]})
    await ns.create_tenant("acme", {"adminRoles": ["r"], "allowedClusters": ["standalone"]})
    with pytest.raises(NamespaceError, match="Tenant already exist"):
        await ns.create_tenant("acme", {"allowedClusters": ["standalone"]})
    await ns.create_namespace("acme", "a", {"max_producers_per_topic": 1})
    with pytest.raises(NamespaceError, match="Namespace already exists"):
        await ns.create_namespace("acme", "a")
    await ns.set_policy("acme", "a", n.DEDUPLICATION, True)
    await ns.set_policy("acme", "a", n.MAX_PRODUCERS, None)
    with pytest.raises(NamespaceError) as e:
        await ns.delete_tenant("acme")
    assert (e.value.status, e.value.reason) == (409, "The tenant still has active namespaces")
    ns.has_topics = lambda tenant, name: (tenant, name) == ("acme", "a")
    with pytest.raises(NamespaceError, match="Cannot delete non empty namespace"):
        await ns.delete_namespace("acme", "a")
    with pytest.raises(NamespaceError) as e:
        await ns.delete_namespace("public", "__kafka")  # the broker's own
    assert e.value.status == 403

    again = Namespaces(CFG, store)  # what a restart reads back
    await again.load([])
    assert again.tenant("acme") == {"adminRoles": ["r"], "allowedClusters": ["standalone"]}
    assert again.policies("acme", "a") == {"deduplicationEnabled": True}
    await again.create_namespace("acme", "b")  # as another broker would
    assert not ns.known("acme", "b") and await ns.exists("acme", "b")  # a miss re-reads the store
    await again.delete_namespace("acme", "a")
    await again.delete_namespace("acme", "b")
    await again.delete_tenant("acme")
    await ns.refresh("acme")
    assert ns.tenants() == ["public", "pulsar"] and not ns.known("acme", "a")
    await store.close()


async def test_auto_creation_override() -> None:
    ns = Namespaces(CFG, None)  # type: ignore[arg-type]  # memory only: no store call below
    assert ns.auto_creation("t", "n", True, 3) == (True, None, 3)
    ns._namespaces[("t", "n")] = {n.AUTO_TOPIC_CREATION: {"allowAutoTopicCreation": False}}
    assert ns.auto_creation("t", "n", True, 3) == (False, None, 3)
    ns._namespaces[("t", "n")] = {n.AUTO_TOPIC_CREATION: {"allowAutoTopicCreation": True, "topicType": "partitioned",
                                                          "defaultNumPartitions": 5}}
    assert ns.auto_creation("t", "n", False, 3) == (True, "partitioned", 5)


async def test_a_data_dir_without_namespaces_gets_its_topics_namespaces(tmp_path) -> None:
    storage = await open_embedded_storage(tmp_path, fsync="none")
    svc = BrokerService(CFG, storage)
    await svc.topics.load()
    await svc.topics.create(svc.topics.parse("acme/old/t"), 1)  # a Kafka client names any namespace
    assert svc.topics.namespaces.known("acme", "old")
    await svc.topics.close()
    await storage.metadata_store.delete_recursive(n.ROOT)  # as written before namespaces were stored
    await storage.close()

    storage = await open_embedded_storage(tmp_path, fsync="none")
    try:
        svc = BrokerService(CFG, storage)
        await svc.topics.load()
        spaces = svc.topics.namespaces
        assert spaces.known("acme", "old") and spaces.known("public", "default") and spaces.known("public", "__kafka")
        assert spaces.tenant("acme") == {"adminRoles": [], "allowedClusters": ["standalone"]}
        assert await storage.metadata_store.exists(f"{n.ROOT}/acme/old")  # stored, not only remembered
        await svc.topics.close()
    finally:
        await storage.close()


async def test_retention_policy_sits_between_the_topic_and_the_broker(tmp_path) -> None:
    storage = await open_embedded_storage(tmp_path, fsync="none")
    try:
        svc = BrokerService(CFG, storage)
        topics = svc.topics
        await topics.load()
        plain = await topics.create(topics.parse("acme/r/plain"), 1)
        own = await topics.create(topics.parse("acme/r/own"), 1, {"retention.ms": "5000"})
        broker = (CFG.default_retention_ms, CFG.default_retention_bytes)
        assert retention_of(topics, plain, CFG) == broker
        await topics.namespaces.set_policy("acme", "r", n.RETENTION,
                                           {"retentionTimeInMinutes": 60, "retentionSizeInMB": 100})
        assert retention_of(topics, plain, CFG) == (3_600_000, 100 << 20)
        assert retention_of(topics, own, CFG) == (5000, 100 << 20)  # the topic's own config first
        await topics.namespaces.set_policy("acme", "r", n.RETENTION,
                                           {"retentionTimeInMinutes": -1, "retentionSizeInMB": -1})
        assert retention_of(topics, plain, CFG) == (-1, -1)  # no limit: kept forever, as on Pulsar
        await topics.namespaces.set_policy("acme", "r", n.RETENTION, None)
        assert retention_of(topics, plain, CFG) == broker
        await topics.close()
    finally:
        await storage.close()


async def test_cluster_mode_rereads_policies_set_on_another_broker(tmp_path) -> None:
    """Two brokers' caches over one store (as on one ZooKeeper): a policy set through one applies on the other
    from its next decision (`fresh`), and only in cluster mode (embedded, nothing else writes the store)."""
    store = SqliteMetadataStore(tmp_path)
    one, other = Namespaces(CFG, store), Namespaces(CFG, store)
    await one.load([])
    await other.load([])
    await one.create_tenant("acme", {"allowedClusters": ["standalone"]})
    await one.create_namespace("acme", "a")
    name = n.TopicName("acme", "a", "t")
    assert await other.exists("acme", "a") and other.limit(name, n.MAX_PRODUCERS) == 0
    await one.set_policy("acme", "a", n.MAX_PRODUCERS, 2)
    await other.fresh(name)
    assert other.limit(name, n.MAX_PRODUCERS) == 0  # embedded: the cache is the truth, no read
    other.clustered = lambda: True
    await other.fresh(name)
    assert other.limit(name, n.MAX_PRODUCERS) == 2
    await store.close()
