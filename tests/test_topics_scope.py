"""kop/topics/scope.py: the names of a tenant login and of the default scope, without a broker."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest

from kop.config import BrokerConfig
from kop.topics.manager import TopicManager
from kop.topics.names import InvalidTopicName, TopicName
from kop.topics.scope import InvalidTenant, NameScope, explicit_id, tenant_namespace


def manager() -> TopicManager:
    storage: Any = SimpleNamespace(metadata_store=None)
    return TopicManager(BrokerConfig(), storage)


def test_username_names_a_tenant_or_tenant_namespace() -> None:
    assert tenant_namespace("A", "default") == ("A", "default")
    assert tenant_namespace("A/ns", "default") == ("A", "ns")
    assert tenant_namespace("t.e-n_a=n:t", "x") == ("t.e-n_a=n:t", "x")
    for bad in ("", "a/b/c", "/ns", "A/", "bad tenant", "A/bad ns", "ä"):
        with pytest.raises(InvalidTenant):
            tenant_namespace(bad, "default")


def test_default_scope_is_the_managers() -> None:
    m = manager()
    d = m.names
    assert d.default and d.parse("t") == TopicName("public", "default", "t")
    assert d.kafka_name(TopicName("A", "default", "t")) == "A/default/t"
    assert d.global_name("persistent://public/default/t") == "t"
    assert d.client_name("A/default/t") == "A/default/t"
    for gid in ("g", "A/default/g", "a/b", ""):  # ids are global ids unchanged
        assert d.global_id(gid) == gid and d.client_id(gid) == gid and d.owns_id(gid)


def test_tenant_scope_topics() -> None:
    m = manager()
    a = NameScope(m, "A", "default")
    assert not a.default
    assert a.parse("t") == TopicName("A", "default", "t")
    assert a.parse("B/ns/t") == TopicName("B", "ns", "t")
    assert a.parse("persistent://public/default/t") == TopicName("public", "default", "t")
    assert a.parse("__consumer_offsets") == m.offsets_topic  # the internal topics are the broker's
    assert a.kafka_name(m.offsets_topic) == "__consumer_offsets"
    assert a.kafka_name(TopicName("A", "default", "t")) == "t"
    assert a.kafka_name(TopicName("public", "default", "t")) == "public/default/t"
    assert a.global_name("t") == "A/default/t" and a.global_name("public/default/t") == "t"
    assert a.global_name("bad name!") == "bad name!"
    assert a.client_name("A/default/t") == "t" and a.client_name("t") == "public/default/t"
    assert a.owns(TopicName("A", "default", "t")) and not a.owns(TopicName("A", "other", "t"))
    with pytest.raises(InvalidTopicName):
        a.parse("a/b")


def test_tenant_scope_ids_round_trip() -> None:
    a = NameScope(manager(), "A", "ns")
    assert a.global_id("g") == "A/ns/g" and a.client_id("A/ns/g") == "g" and a.owns_id("A/ns/g")
    assert a.global_id("B/x/g") == "B/x/g" and a.client_id("B/x/g") == "B/x/g" and not a.owns_id("B/x/g")
    assert a.global_id("a/b") == "A/ns/a/b" and a.client_id("A/ns/a/b") == "a/b"
    assert not a.owns_id("g")  # the default tenant's g
    # an id another scope wrote that would read back as explicit is not this scope's
    assert not a.owns_id("A/ns/x/y/z") and a.client_id("A/ns/x/y/z") == "A/ns/x/y/z"
    for gid in ("g", "a/b", "x y/b/c", "", "B/x/g"):
        assert a.global_id(a.client_id(a.global_id(gid))) == a.global_id(gid)
    assert explicit_id("a/b/c") and explicit_id("a/b/c/d") and not explicit_id("a/b/") and not explicit_id("a b/c/d")
