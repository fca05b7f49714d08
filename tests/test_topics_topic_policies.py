"""Topic-level policies (kop/topics/namespaces.py): a topic's own policy overrides its namespace's through the one
rule every decision uses (`effective`, `limit`, `retention`, `backlog_quotas`), is kept in the metadata store (a
restart and another broker read it back) and goes with its topic."""

from __future__ import annotations

import pytest

from kop.config import BrokerConfig
from kop.offset import open_embedded_storage
from kop.server.service import BrokerService
from kop.storage.local.metadata import SqliteMetadataStore
from kop.topics import namespaces as n
from kop.topics.chores import retention_of
from kop.topics.namespaces import NamespaceError, Namespaces, TopicName

CFG = BrokerConfig.from_strings({})


async def test_a_topic_policy_overrides_its_namespace_and_survives_a_restart(tmp_path) -> None:
    store = SqliteMetadataStore(tmp_path)
    ns = Namespaces(CFG, store)
    await ns.load([])
    await ns.create_tenant("acme", {"allowedClusters": ["standalone"]})
    await ns.create_namespace("acme", "a", {"max_producers_per_topic": 1, "message_ttl_in_seconds": 3600})
    t, sibling = TopicName("acme", "a", "t"), TopicName("acme", "a", "u")
    await ns.set_topic_policy(t, n.MAX_PRODUCERS, 3)
    await ns.set_topic_policy(t, n.MESSAGE_TTL, 0)  # 0 set on the topic: no TTL there, whatever the namespace says
    assert (ns.limit(t, n.MAX_PRODUCERS), ns.limit(sibling, n.MAX_PRODUCERS)) == (3, 1)
    assert (ns.limit(t, n.MESSAGE_TTL), ns.limit(sibling, n.MESSAGE_TTL)) == (0, 3600)
    with pytest.raises(NamespaceError) as e:
        await ns.set_topic_policy(t, n.MAX_PRODUCERS, -1)
    assert (e.value.status, e.value.reason) == (412, "maxProducers must be 0 or more")
    with pytest.raises(NamespaceError, match="Invalid value for message TTL"):
        await ns.set_topic_policy(t, n.MESSAGE_TTL, -1)

    again = Namespaces(CFG, store)  # what a restart reads back
    await again.load([])
    assert again.topic_policies(t) == {n.MAX_PRODUCERS: 3, n.MESSAGE_TTL: 0}
    await ns.set_topic_policy(t, n.MAX_PRODUCERS, None)
    assert ns.limit(t, n.MAX_PRODUCERS) == 1  # removed: the namespace's again
    other = Namespaces(CFG, store)  # another broker's cache over the same store
    await other.load([])
    await ns.set_topic_policy(t, n.MAX_CONSUMERS, 2)
    other.clustered = lambda: True
    await other.fresh(t)
    assert other.limit(t, n.MAX_CONSUMERS) == 2 and other.limit(t, n.MAX_PRODUCERS) == 1
    await ns.drop_topic(t)
    assert ns.topic_policies(t) == {} and await store.get(f"{n.TOPIC_ROOT}/acme/a/t") is None
    await store.close()


async def test_backlog_quotas_resolve_type_by_type(tmp_path) -> None:
    store = SqliteMetadataStore(tmp_path)
    ns = Namespaces(CFG, store)
    await ns.load([])
    t = TopicName("public", "default", "t")
    await ns.set_backlog_quota("public", "default", n.DESTINATION_STORAGE, {"limitSize": 10, "policy": "producer_exception"})
    await ns.set_backlog_quota("public", "default", n.MESSAGE_AGE, {"limitTime": 5, "policy": "producer_request_hold"})
    await ns.set_topic_backlog_quota(t, n.DESTINATION_STORAGE, {"limitSize": 99, "policy": "producer_exception"})
    namespace_level = ns.backlog_quotas(TopicName("public", "default", "u"))
    assert ns.backlog_quotas(t) == {**namespace_level, n.DESTINATION_STORAGE: {
        "limit": 99, "limitSize": 99, "limitTime": 0, "policy": "producer_exception"}}
    assert namespace_level[n.DESTINATION_STORAGE]["limitSize"] == 10  # type: ignore[index]
    await ns.set_topic_backlog_quota(t, n.DESTINATION_STORAGE, None)
    assert ns.backlog_quotas(t) == namespace_level and ns.topic_policies(t) == {}
    await store.close()


async def test_retention_of_a_topic_policy_and_its_deletion_with_the_topic(tmp_path) -> None:
    storage = await open_embedded_storage(tmp_path, fsync="none")
    try:
        topics = BrokerService(CFG, storage).topics
        await topics.load()
        topic = await topics.create(topics.parse("acme/r/t"), 1)
        await topics.namespaces.set_policy("acme", "r", n.RETENTION, {"retentionTimeInMinutes": 60,
                                                                      "retentionSizeInMB": 100})
        await topics.namespaces.set_topic_policy(topic.name, n.RETENTION, {"retentionTimeInMinutes": 1,
                                                                           "retentionSizeInMB": -1})
        assert retention_of(topics, topic, CFG) == (60_000, -1)
        await topics.delete(topic)
        assert topics.namespaces.topic_policies(topic.name) == {}  # a topic made again starts without them
        await topics.close()
    finally:
        await storage.close()
