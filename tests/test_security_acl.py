"""kop/security/acl: Kafka's authorization model. The first tests state the rules one by one; the last one
checks thousands of random decisions and filter matches against Kafka 4.x's own StandardAuthorizer and
AclBindingFilter (tests/support/AclProbe.java), so "Kafka's semantics" is measured, not assumed."""

from __future__ import annotations

import asyncio
import random
import subprocess
from pathlib import Path

import pytest

from kop.security.acl import (
    AccessControlEntryFilter,
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    Authorizer,
    PatternType,
    ResourcePatternFilter,
    ResourceType,
    authorized_operations,
)
from kop.security.acl.authorizer import NOT_REQUESTED, group_by_resource
from kop.security.acl.model import SUPPORTED_OPERATIONS, java_host_address
from kop.security.principal import KafkaPrincipal
from tests.support.java import JavaToolsMissing, java_command

T, G, C, X = ResourceType.TOPIC, ResourceType.GROUP, ResourceType.CLUSTER, ResourceType.TRANSACTIONAL_ID
LIT, PRE = PatternType.LITERAL, PatternType.PREFIXED
Op, ALLOW, DENY = AclOperation, AclPermissionType.ALLOW, AclPermissionType.DENY
ALICE, BOB = KafkaPrincipal.user("alice"), KafkaPrincipal.user("bob")
H = "10.0.0.1"


def acl(rt, name, pt, principal, op, perm=ALLOW, host="*") -> AclBinding:
    return AclBinding.of(rt, name, pt, principal, host, op, perm)


def authorizer(*bindings, **kw) -> Authorizer:
    a = Authorizer(**kw)
    assert asyncio.run(a.create_acls(list(bindings))) == [None] * len(bindings)
    return a


def test_no_acls_means_deny_unless_allow_everyone():
    assert not authorizer().authorize(ALICE, H, Op.READ, T, "t")
    assert authorizer(allow_everyone_if_no_acl_found=True).authorize(ALICE, H, Op.READ, T, "t")


def test_allow_everyone_only_where_the_resource_has_no_acl_at_all():
    a = authorizer(acl(T, "t", LIT, "User:bob", Op.READ), allow_everyone_if_no_acl_found=True)
    assert not a.authorize(ALICE, H, Op.READ, T, "t")  # t has an ACL (for bob): alice is denied
    assert a.authorize(ALICE, H, Op.READ, T, "other")


def test_literal_prefixed_and_wildcard_patterns():
    a = authorizer(acl(T, "orders", LIT, "User:alice", Op.READ),
                   acl(T, "pay-", PRE, "User:alice", Op.WRITE),
                   acl(G, "*", LIT, "User:alice", Op.READ))
    assert a.authorize(ALICE, H, Op.READ, T, "orders")
    assert not a.authorize(ALICE, H, Op.READ, T, "orders2")
    assert a.authorize(ALICE, H, Op.WRITE, T, "pay-eu") and a.authorize(ALICE, H, Op.WRITE, T, "pay-")
    assert not a.authorize(ALICE, H, Op.WRITE, T, "pay")
    assert a.authorize(ALICE, H, Op.READ, G, "any-group")
    assert not a.authorize(ALICE, H, Op.READ, T, "any-topic")  # a GROUP wildcard says nothing about topics
    # One-character prefixes match too (KAFKA-7702).
    assert authorizer(acl(T, "p", PRE, "User:alice", Op.READ)).authorize(ALICE, H, Op.READ, T, "pq")


def test_deny_wins_and_wildcard_principal():
    a = authorizer(acl(T, "*", LIT, "User:*", Op.READ),
                   acl(T, "secret", LIT, "User:bob", Op.READ, DENY))
    assert a.authorize(ALICE, H, Op.READ, T, "secret")
    assert not a.authorize(BOB, H, Op.READ, T, "secret")
    assert a.authorize(BOB, H, Op.READ, T, "public")


def test_implications_are_allow_only():
    a = authorizer(acl(T, "t", LIT, "User:alice", Op.WRITE), acl(T, "t", LIT, "User:alice", Op.ALTER_CONFIGS),
                   acl(T, "t", LIT, "User:bob", Op.ALL), acl(T, "t", LIT, "User:bob", Op.READ, DENY))
    assert a.authorize(ALICE, H, Op.DESCRIBE, T, "t")  # WRITE implies DESCRIBE
    assert a.authorize(ALICE, H, Op.DESCRIBE_CONFIGS, T, "t")  # ALTER_CONFIGS implies DESCRIBE_CONFIGS
    assert not a.authorize(ALICE, H, Op.READ, T, "t")
    assert not a.authorize(BOB, H, Op.READ, T, "t")  # DENY READ beats ALLOW ALL
    assert a.authorize(BOB, H, Op.DESCRIBE, T, "t")  # ... but does not deny DESCRIBE
    deny_all = authorizer(acl(T, "t", LIT, "User:*", Op.READ), acl(T, "t", LIT, "User:alice", Op.ALL, DENY))
    assert not deny_all.authorize(ALICE, H, Op.DESCRIBE, T, "t")


def test_hosts_and_super_users():
    a = authorizer(acl(T, "t", LIT, "User:alice", Op.READ, host=H), super_users=["User:admin"])
    assert a.authorize(ALICE, H, Op.READ, T, "t")
    assert not a.authorize(ALICE, "10.0.0.2", Op.READ, T, "t")
    a2 = authorizer(acl(T, "t", LIT, "User:admin", Op.ALL, DENY), super_users=["User:admin"])
    assert a2.authorize(KafkaPrincipal.user("admin"), H, Op.DELETE, T, "t")  # deny does not bind super users
    assert Authorizer.parse_super_users("User:a;User:b") == ["User:a", "User:b"]
    assert Authorizer.parse_super_users("admin, ops") == ["User:admin", "User:ops"]  # KoP's superUserRoles


def test_java_host_address_is_what_acl_hosts_are_compared_with():
    assert java_host_address("127.0.0.1") == "127.0.0.1"
    assert java_host_address("::1") == "0:0:0:0:0:0:0:1"
    assert java_host_address("fe80::a:b%eth0") == "fe80:0:0:0:0:0:a:b%eth0"
    assert java_host_address("::ffff:10.0.0.1") == "10.0.0.1"


def test_create_validation_matches_kafkas_messages():
    bad = [
        acl(C, "my-cluster", LIT, "User:a", Op.ALTER),
        acl(T, "", LIT, "User:a", Op.READ),
        acl(ResourceType.ANY, "t", LIT, "User:a", Op.READ),
        acl(T, "t", PatternType.MATCH, "User:a", Op.READ),
        acl(T, "t", LIT, "User:a", Op.ANY),
        acl(T, "t", LIT, "User:a", Op.READ, AclPermissionType.ANY),
        acl(T, "t", LIT, "alice", Op.READ),
    ]
    good = acl(C, "kafka-cluster", LIT, "User:a", Op.ALTER)
    a = Authorizer()
    errors = asyncio.run(a.create_acls([*bad, good]))
    assert errors == [
        "The only valid name for the CLUSTER resource is kafka-cluster",
        "Invalid empty resource name",
        "Invalid resourceType ANY",
        "Invalid patternType MATCH",
        "Invalid operation ANY",
        "Invalid permissionType ANY",
        "Could not parse principal from `alice` (no colon is present separating the principal type from the "
        "principal name)",
        None,
    ]
    assert a.describe_acls(AclBindingFilter()) == [good]  # the valid one was created anyway
    assert asyncio.run(a.create_acls([good])) == [None]  # creating twice is fine, stored once
    assert len(a.describe_acls(AclBindingFilter())) == 1


def test_describe_and_delete_filters():
    bindings = [acl(T, "orders", LIT, "User:alice", Op.READ), acl(T, "ord", PRE, "User:bob", Op.WRITE),
                acl(T, "*", LIT, "User:carol", Op.DESCRIBE), acl(G, "orders", LIT, "User:alice", Op.READ)]
    a = authorizer(*bindings)

    def names(flt):
        return [(b.pattern.resource_type.name, b.pattern.name, b.entry.principal) for b in a.describe_acls(flt)]

    # LITERAL filter: only literal bindings with that exact name (prefixed ones are not listed).
    assert names(AclBindingFilter(ResourcePatternFilter(T, "orders", LIT))) == [("TOPIC", "orders", "User:alice")]
    # MATCH: everything that applies to topic "orders".
    assert sorted(names(AclBindingFilter(ResourcePatternFilter(T, "orders", PatternType.MATCH)))) == [
        ("TOPIC", "*", "User:carol"), ("TOPIC", "ord", "User:bob"), ("TOPIC", "orders", "User:alice")]
    # ANY pattern type: exact name, either pattern type.
    assert names(AclBindingFilter(ResourcePatternFilter(ResourceType.ANY, "orders", PatternType.ANY))) == [
        ("TOPIC", "orders", "User:alice"), ("GROUP", "orders", "User:alice")]
    assert len(names(AclBindingFilter(entry=AccessControlEntryFilter(principal="User:alice")))) == 2
    with pytest.raises(ValueError):
        a.describe_acls(AclBindingFilter(ResourcePatternFilter(ResourceType.UNKNOWN)))
    grouped = group_by_resource(a.describe_acls(AclBindingFilter()))
    assert list(grouped)[0] == (T, "*", LIT)

    results = asyncio.run(a.delete_acls([
        AclBindingFilter(ResourcePatternFilter(T, "orders", PatternType.MATCH)),
        AclBindingFilter(entry=AccessControlEntryFilter(principal="User:bob")),
        AclBindingFilter(entry=AccessControlEntryFilter(operation=Op.UNKNOWN)),
    ]))
    assert [len(r.deleted) for r in results] == [3, 1, 0]  # bob's binding reported by both filters
    assert results[2].error == "Unknown entryFilter."
    assert a.describe_acls(AclBindingFilter()) == [bindings[3]]
    assert asyncio.run(a.store.load()) == {bindings[3]}  # the store followed
    assert not a.authorize(KafkaPrincipal.user("carol"), H, Op.DESCRIBE, T, "x")


def test_authorizer_reloads_from_a_shared_store():
    one = authorizer(acl(T, "t", LIT, "User:alice", Op.READ))
    two = Authorizer(store=one.store)
    asyncio.run(two.load())
    assert two.authorize(ALICE, H, Op.READ, T, "t")


def test_a_reload_racing_a_create_keeps_the_created_acl():
    """A reload reads the store over several awaits; an ACL created meanwhile was dropped from the in-memory
    copy by the reload's older snapshot (a listing right after kafka-acls --add missed it, and a just-created
    DENY went unenforced until the next reload)."""
    from kop.security.acl.store import InMemoryAclStore

    class SlowStore(InMemoryAclStore):
        async def load(self):
            snapshot = await super().load()
            await asyncio.sleep(0.05)  # a metadata store answering one binding at a time
            return snapshot

    deny = acl(T, "t", LIT, "User:alice", Op.READ, DENY)
    allow = acl(T, "t", LIT, "User:alice", Op.READ)

    async def scenario():
        a = Authorizer(store=SlowStore())
        await a.create_acls([allow])
        reload = asyncio.create_task(a.load())
        await asyncio.sleep(0.01)  # the reload is inside its load
        await a.create_acls([deny])
        await reload
        return a

    a = asyncio.run(scenario())
    assert set(a.describe_acls(AclBindingFilter())) == {allow, deny}
    assert not a.authorize(ALICE, H, Op.READ, T, "t")


def test_authorize_by_resource_type():
    a = authorizer(acl(T, "pay-", PRE, "User:alice", Op.WRITE), acl(T, "pay-eu", LIT, "User:bob", Op.WRITE),
                   acl(T, "pay", PRE, "User:bob", Op.WRITE, DENY))
    assert a.authorize_by_resource_type(ALICE, H, Op.WRITE, T)
    assert not a.authorize_by_resource_type(BOB, H, Op.WRITE, T)  # the prefix deny dominates
    assert not a.authorize_by_resource_type(ALICE, H, Op.READ, T)


def test_authorized_operations_bitfield():
    group_ops = (1 << 3) | (1 << 6) | (1 << 8) | (1 << 10) | (1 << 11)
    # No authorizer: every operation the resource type supports (what kop/kafka/apis/describe_groups.py
    # reports today for groups).
    assert authorized_operations(None, ALICE, H, G, "g") == group_ops
    topic_all = sum(1 << op for op in SUPPORTED_OPERATIONS[T])
    assert authorized_operations(None, ALICE, H, T, "t") == topic_all == 0b1101_1111_1000  # 3..8, 10, 11
    a = authorizer(acl(T, "t", LIT, "User:alice", Op.READ), acl(G, "g", LIT, "User:alice", Op.ALL))
    assert authorized_operations(a, ALICE, H, T, "t") == (1 << 3) | (1 << 8)  # READ + implied DESCRIBE
    assert authorized_operations(a, ALICE, H, G, "g") == group_ops
    assert authorized_operations(a, BOB, H, T, "t") == 0
    assert NOT_REQUESTED == -(2 ** 31)


# --- the differential check against Kafka's classes ---------------------------------------------------

# Small alphabets, so that bindings collide with each other and with the queries often: the cases where
# DENY and ALLOW, implication, prefixes and wildcards interact are the ones worth comparing.
PRINCIPALS = ["User:alice", "User:bob", "User:*", "Group:ops"]
NAMES = ["t", "to", "top", "topic", "x", "*"]
TYPES = [T, T, T, G, C, X]
CONCRETE_OPS = [op for op in AclOperation if op not in (Op.UNKNOWN, Op.ANY)]
HOT_OPS = [Op.ALL, Op.READ, Op.WRITE, Op.DESCRIBE, Op.ALTER, Op.ALTER_CONFIGS, Op.DESCRIBE_CONFIGS]
HOSTS = ["*", "*", "10.0.0.1"]


def _scenario(rng: random.Random, lines: list[str], expect: list[str]) -> None:
    allow_everyone = rng.random() < 0.5
    a = Authorizer(super_users=["User:admin"], allow_everyone_if_no_acl_found=allow_everyone)
    lines.append(f"SCENARIO\t{'true' if allow_everyone else 'false'}\tUser:admin")
    bindings = []
    for _ in range(rng.randint(0, 12)):
        b = acl(rng.choice(TYPES), rng.choice(NAMES), rng.choice([LIT, PRE]), rng.choice(PRINCIPALS),
                rng.choice(HOT_OPS if rng.random() < 0.8 else CONCRETE_OPS), rng.choice([ALLOW, ALLOW, DENY]),
                rng.choice(HOSTS))
        if b in bindings:
            continue
        bindings.append(b)
        p, e = b.pattern, b.entry
        lines.append(f"ACL\t{p.resource_type.name}\t{p.name}\t{p.pattern_type.name}\t{e.principal}\t{e.host}\t"
                     f"{e.operation.name}\t{e.permission_type.name}")
    # Loaded through the store, as a broker loads ACLs another broker created: this bypasses CreateAcls'
    # validation, so CLUSTER bindings with names other than kafka-cluster exercise the matching too.
    asyncio.run(a.store.add(bindings))
    asyncio.run(a.load())
    lines.append("LOADED")
    for _ in range(60):
        op = rng.choice(HOT_OPS[1:] if rng.random() < 0.8 else CONCRETE_OPS[1:])  # never ALL
        rt, name = rng.choice(TYPES), rng.choice(NAMES)
        who = rng.choice(["User:alice", "User:bob", "User:carol", "User:admin"])
        host = rng.choice(["10.0.0.1", "10.0.0.2"])
        lines.append(f"Q\t{rt.name}\t{name}\t{who}\t{host}\t{op.name}")
        expect.append("A" if a.authorize(KafkaPrincipal.parse(who), host, op, rt, name) else "D")
    for _ in range(10):
        rt, op = rng.choice(TYPES), rng.choice(CONCRETE_OPS[1:])
        who, host = rng.choice(["User:alice", "User:bob", "User:carol"]), rng.choice(["10.0.0.1", "10.0.0.2"])
        lines.append(f"R\t{rt.name}\t{who}\t{host}\t{op.name}")
        expect.append("A" if a.authorize_by_resource_type(KafkaPrincipal.parse(who), host, op, rt) else "D")
    for _ in range(20):
        flt = AclBindingFilter(
            ResourcePatternFilter(rng.choice([*TYPES, ResourceType.ANY]), rng.choice([*NAMES, None]),
                                  rng.choice([LIT, PRE, PatternType.ANY, PatternType.MATCH])),
            AccessControlEntryFilter(rng.choice([*PRINCIPALS, None]), rng.choice([*HOSTS, None]),
                                     rng.choice([*CONCRETE_OPS, Op.ANY]), rng.choice([ALLOW, DENY, AclPermissionType.ANY])))
        f = flt.pattern
        e = flt.entry
        lines.append(f"F\t{f.resource_type.name}\t{f.name or '~null'}\t{f.pattern_type.name}\t"
                     f"{e.principal or '~null'}\t{e.host or '~null'}\t{e.operation.name}\t{e.permission_type.name}")
        expect.append(" ".join(["M", *(str(i) for i, b in enumerate(bindings) if flt.matches(b))]))


@pytest.mark.java
def test_same_decisions_as_kafkas_standard_authorizer(tmp_path):
    rng = random.Random(14)
    lines: list[str] = []
    expect: list[str] = []
    for _ in range(300):
        _scenario(rng, lines, expect)
    script = tmp_path / "scenarios.tsv"
    script.write_text("\n".join(lines) + "\n")
    probe = Path(__file__).parent / "support" / "AclProbe.java"
    try:
        cmd = java_command(str(probe), [str(script)], jvm_opts=["-Xmx256m"])
    except JavaToolsMissing as e:
        pytest.fail(str(e))
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    got = [ln.rstrip() for ln in out.stdout.splitlines()]
    assert len(got) == len(expect)
    mismatches = [(lines_for(lines, i), e, g) for i, (e, g) in enumerate(zip(expect, got, strict=True)) if e != g]
    assert not mismatches, mismatches[:5]
    # The scenarios exercise both answers often enough to mean something.
    assert 0.1 < sum(1 for e in expect if e == "A") / len(expect) < 0.9


def lines_for(lines: list[str], answer_index: int) -> str:
    """The query line (and its scenario's ACLs) that produced answer number ``answer_index``."""
    n = -1
    scenario: list[str] = []
    for ln in lines:
        if ln.startswith("SCENARIO"):
            scenario = [ln]
        elif ln.startswith("ACL"):
            scenario.append(ln)
        elif ln[0] in "QRF":
            n += 1
            if n == answer_index:
                return "\n".join([*scenario, ln])
    return "?"
