"""Pulsar's permissions as Kafka ACLs (kop/security/pulsar_permissions.py), on a real Authorizer in memory.

What a grant stands for is checked by asking the authorizer the questions the Pulsar and the Kafka ports ask
(kop/pulsar/authorize.py: WRITE to produce, READ on the topic and on the subscription's group to subscribe,
DESCRIBE to look up, CREATE to auto-create), so the mapping is tested by its effect, not by its bindings.
"""

from __future__ import annotations

import asyncio

import pytest

from kop.security import pulsar_permissions as perms
from kop.security.acl import Authorizer
from kop.security.acl.model import AclBinding, AclOperation, AclPermissionType, PatternType, ResourceType
from kop.security.principal import KafkaPrincipal

Op = AclOperation
TOPIC, GROUP = ResourceType.TOPIC, ResourceType.GROUP
HOST = "127.0.0.1"


def alias(name: str) -> str | None:
    """The broker's rule (kop/server/service.py): a bare Kafka name is a topic of public/default."""
    return None if "/" in name or name.startswith("__") else f"public/default/{name}"


def user(role: str) -> KafkaPrincipal:
    return KafkaPrincipal("User", role)


def run(coro):
    return asyncio.run(coro)


def may(authz: Authorizer, role: str, op: AclOperation, name: str, rtype: ResourceType = TOPIC) -> bool:
    return authz.authorize(user(role), HOST, op, rtype, name)


def test_a_namespace_grant_covers_its_topics_under_their_bare_and_full_names_and_nothing_else() -> None:
    authz = Authorizer(topic_alias=alias)
    run(perms.grant(authz, perms.namespace_pattern("public", "default"), "alice", ["produce"]))
    assert may(authz, "alice", Op.WRITE, "orders")  # public/default/orders, by its Kafka name
    assert may(authz, "alice", Op.DESCRIBE, "orders") and may(authz, "alice", Op.CREATE, "orders")
    assert not may(authz, "alice", Op.READ, "orders")
    assert not may(authz, "alice", Op.WRITE, "acme/ns/orders")  # another namespace
    assert not may(authz, "alice", Op.WRITE, "__consumer_offsets")  # internal topics have no alias
    assert not may(authz, "bob", Op.WRITE, "orders")


def test_consume_adds_reading_any_subscription_and_loses_it_with_the_last_consume_grant() -> None:
    authz = Authorizer(topic_alias=alias)
    ns = perms.namespace_pattern("acme", "ns")
    topic = perms.topic_pattern("public/default/x")
    run(perms.grant(authz, ns, "bob", ["consume"]))
    run(perms.grant(authz, topic, "bob", ["consume"]))
    assert may(authz, "bob", Op.READ, "acme/ns/t") and may(authz, "bob", Op.READ, "sub-1", GROUP)
    assert run(perms.revoke(authz, ns, "bob"))
    assert may(authz, "bob", Op.READ, "sub-1", GROUP)  # the topic grant still consumes
    assert not may(authz, "bob", Op.READ, "acme/ns/t")
    assert run(perms.revoke(authz, topic, "bob"))
    assert not may(authz, "bob", Op.READ, "sub-1", GROUP)
    assert authz.describe_all() == []


def test_a_grant_replaces_the_roles_actions_and_the_listing_reads_them_back() -> None:
    authz = Authorizer(topic_alias=alias)
    ns = perms.namespace_pattern("public", "default")
    run(perms.grant(authz, ns, "carol", ["produce", "consume"]))
    run(perms.grant(authz, ns, "dave", ["produce"]))
    assert perms.held_on(authz.describe_all(), ns) == {"carol": ["consume", "produce"], "dave": ["produce"]}
    run(perms.grant(authz, ns, "carol", ["consume"]))
    assert perms.held_on(authz.describe_all(), ns) == {"carol": ["consume"], "dave": ["produce"]}
    assert not may(authz, "carol", Op.WRITE, "t") and may(authz, "carol", Op.READ, "t")
    assert not run(perms.revoke(authz, perms.topic_pattern("t"), "carol"))  # nothing at the topic level


def test_a_kafka_deny_still_wins_over_a_pulsar_grant_whichever_name_it_uses() -> None:
    authz = Authorizer(topic_alias=alias)
    run(perms.grant(authz, perms.namespace_pattern("public", "default"), "erin", ["produce"]))
    deny = AclBinding.of(TOPIC, "secret", PatternType.LITERAL, "User:erin", "*", Op.WRITE, AclPermissionType.DENY)
    run(authz.change(remove=[], add=[deny]))
    assert not may(authz, "erin", Op.WRITE, "secret") and may(authz, "erin", Op.WRITE, "open")
    full = AclBinding.of(TOPIC, "public/default/open", PatternType.LITERAL, "User:erin", "*", Op.WRITE,
                         AclPermissionType.DENY)
    run(authz.change(remove=[], add=[full]))
    assert not may(authz, "erin", Op.WRITE, "open")


def test_an_authorizer_without_an_alias_knows_topics_by_one_name() -> None:
    authz = Authorizer()
    run(perms.grant(authz, perms.namespace_pattern("public", "default"), "fay", ["produce"]))
    assert not may(authz, "fay", Op.WRITE, "t") and may(authz, "fay", Op.WRITE, "public/default/t")


@pytest.mark.parametrize("body, error", [
    ("produce", "JSON array"), ([1], "JSON array"), (["bogus"], "unknown action 'bogus'"),
    (["functions"], "not served by this broker"), (["sinks", "produce"], "not served by this broker"),
])
def test_grants_this_broker_cannot_keep_are_refused(body: object, error: str) -> None:
    with pytest.raises(perms.BadGrant, match=error):
        perms.parse_actions(body)


def test_actions_are_deduplicated_and_sorted() -> None:
    assert perms.parse_actions(["produce", "consume", "produce"]) == ["consume", "produce"]
    assert perms.parse_actions([]) == []
