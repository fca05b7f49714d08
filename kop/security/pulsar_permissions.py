"""Pulsar's permissions (grant-permission on a namespace or a topic) as Kafka ACLs in the one authorizer.

Why no second model: the Pulsar port and the Kafka port already ask one `Authorizer` about the same topic names
(kop/pulsar/authorize.py, kop/kafka/authorize.py). A Pulsar grant kept beside the ACLs would let the two
protocols disagree about one topic (a role allowed to produce by a Pulsar grant but refused by Kafka's Produce,
or a Kafka DENY side-stepped over the Pulsar port). So a grant is stored as ACL bindings and a listing of
permissions is read back from the bindings: `kafka-acls --list` shows what `grant-permission` did, and a grant
made either way means the same on both ports.

The mapping (role R, host `*`, ALLOW):

| Pulsar                         | Kafka ACL bindings                                                      |
|--------------------------------|-------------------------------------------------------------------------|
| namespace `t/ns`               | resource TOPIC, PREFIXED `t/ns/` (every topic of the namespace)         |
| topic `t/ns/x`                 | resource TOPIC, LITERAL: the topic's Kafka name (`x` in the Kafka       |
|                                | namespace, `t/ns/x` elsewhere)                                          |
| action `produce`               | WRITE (implies DESCRIBE: lookup)                                        |
| action `consume`               | READ (implies DESCRIBE), plus READ on GROUP LITERAL `*`: Pulsar's      |
|                                | consume permission lets a role use any subscription name, and a durable |
|                                | subscription is authorized as a Kafka group                             |
| either                         | CREATE on the same pattern: Pulsar lets any role that may look a topic |
|                                | up auto-create it; here auto-creation needs CREATE (Kafka's rule)       |

A topic of the Kafka namespace is authorized under its bare Kafka name, and also under its full name
`tenant/ns/x` (the authorizer's topic alias), so the PREFIXED `public/default/` of a namespace grant reaches it.
Only produce and consume mean something here; Pulsar's other actions (functions, sources, sinks, packages) are
refused with 400, as Pulsar refuses an action it does not know. A grant replaces the role's actions on that
namespace or topic, as Pulsar's does; a revoke removes them. The group binding stays while the role can consume
anywhere by a Pulsar grant, and is removed with the last one (an identical group ACL made through Kafka cannot be
told apart from it: say so to operators, docs/security.md).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING

from kop.security.acl.model import (
    WILDCARD_HOST,
    WILDCARD_RESOURCE,
    AclBinding,
    AclOperation,
    AclPermissionType,
    PatternType,
    ResourcePattern,
    ResourceType,
)

if TYPE_CHECKING:
    from kop.security.acl import Authorizer

PRODUCE, CONSUME = "produce", "consume"
ACTIONS = (PRODUCE, CONSUME)
PULSAR_ONLY_ACTIONS = ("functions", "sources", "sinks", "packages")
_OP_OF = {PRODUCE: AclOperation.WRITE, CONSUME: AclOperation.READ}
_ACTION_OF = {op: action for action, op in _OP_OF.items()}
_MANAGED_OPS = frozenset({AclOperation.WRITE, AclOperation.READ, AclOperation.CREATE})
ANY_SUBSCRIPTION = ResourcePattern(ResourceType.GROUP, WILDCARD_RESOURCE, PatternType.LITERAL)


class BadGrant(ValueError):
    """A grant this broker cannot store (an unknown or unserved action): the REST answers 400 with it."""


def principal_of(role: str) -> str:
    return f"User:{role}"


def namespace_pattern(tenant: str, namespace: str) -> ResourcePattern:
    return ResourcePattern(ResourceType.TOPIC, f"{tenant}/{namespace}/", PatternType.PREFIXED)


def topic_pattern(kafka_name: str) -> ResourcePattern:
    return ResourcePattern(ResourceType.TOPIC, kafka_name, PatternType.LITERAL)


def parse_actions(body: object) -> list[str]:
    """A grant's body: a JSON array of action names (Pulsar's Set<AuthAction>)."""
    if not isinstance(body, list) or not all(isinstance(a, str) for a in body):
        raise BadGrant("the body must be a JSON array of actions, e.g. [\"produce\", \"consume\"]")
    out: list[str] = []
    for a in body:
        if a in PULSAR_ONLY_ACTIONS:
            raise BadGrant(f"action {a!r} is not served by this broker (only produce and consume)")
        if a not in ACTIONS:
            raise BadGrant(f"unknown action {a!r} (Pulsar's actions: produce, consume, "
                                   + ", ".join(PULSAR_ONLY_ACTIONS) + ")")
        if a not in out:
            out.append(a)
    return sorted(out)


def _allow(pattern: ResourcePattern, role: str, op: AclOperation) -> AclBinding:
    return AclBinding.of(pattern.resource_type, pattern.name, pattern.pattern_type, principal_of(role),
                         WILDCARD_HOST, op, AclPermissionType.ALLOW)


def grant_bindings(pattern: ResourcePattern, role: str, actions: Iterable[str]) -> list[AclBinding]:
    """The bindings a grant of `actions` to `role` on `pattern` stands for (the group one included)."""
    actions = list(actions)
    out = [_allow(pattern, role, _OP_OF[a]) for a in actions]
    if actions:
        out.append(_allow(pattern, role, AclOperation.CREATE))
    if CONSUME in actions:
        out.append(_allow(ANY_SUBSCRIPTION, role, AclOperation.READ))
    return out


def _is_grant_binding(b: AclBinding) -> bool:
    e = b.entry
    return (e.permission_type == AclPermissionType.ALLOW and e.host == WILDCARD_HOST
            and e.principal.startswith("User:") and e.operation in _MANAGED_OPS)


def held_on(bindings: Iterable[AclBinding], pattern: ResourcePattern, role: str | None = None) -> dict[str, list[str]]:
    """{role: actions} that the bindings grant on exactly this pattern (Pulsar's permissions listing)."""
    out: dict[str, set[str]] = {}
    for b in bindings:
        if b.pattern != pattern or not _is_grant_binding(b):
            continue
        r = b.entry.principal.removeprefix("User:")
        action = _ACTION_OF.get(b.entry.operation)
        if action is not None and (role is None or r == role):
            out.setdefault(r, set()).add(action)
    return {r: sorted(a) for r, a in sorted(out.items())}


def revoke_bindings(bindings: Iterable[AclBinding], pattern: ResourcePattern, role: str) -> list[AclBinding]:
    """The role's grant bindings on exactly this pattern (what a revoke, or a grant replacing it, removes)."""
    principal = principal_of(role)
    return [b for b in bindings if b.pattern == pattern and _is_grant_binding(b) and b.entry.principal == principal]


def still_consumes(bindings: Iterable[AclBinding], role: str) -> bool:
    """Does some Pulsar-style grant (a READ on a topic pattern) still let the role consume?"""
    principal = principal_of(role)
    return any(b.pattern.resource_type == ResourceType.TOPIC and _is_grant_binding(b)
               and b.entry.principal == principal and b.entry.operation == AclOperation.READ for b in bindings)


def subscription_binding(role: str) -> AclBinding:
    return _allow(ANY_SUBSCRIPTION, role, AclOperation.READ)


async def grant(authz: Authorizer, pattern: ResourcePattern, role: str, actions: list[str]) -> None:
    """Pulsar's grant: the role's actions on the pattern become exactly `actions`."""
    current = authz.describe_all()
    old = revoke_bindings(current, pattern, role)
    new = grant_bindings(pattern, role, actions)
    await authz.change(remove=[b for b in old if b not in new], add=new)
    await _tidy_subscriptions(authz, role)


async def revoke(authz: Authorizer, pattern: ResourcePattern, role: str) -> bool:
    """Pulsar's revoke; False when the role held nothing on exactly this pattern."""
    old = revoke_bindings(authz.describe_all(), pattern, role)
    if old:
        await authz.change(remove=old, add=[])
    await _tidy_subscriptions(authz, role)
    return bool(old)


async def _tidy_subscriptions(authz: Authorizer, role: str) -> None:
    group = subscription_binding(role)
    bindings = authz.describe_all()
    has = group in bindings
    wants = still_consumes(bindings, role)
    if has and not wants:
        await authz.change(remove=[group], add=[])
    elif wants and not has:
        await authz.change(remove=[], add=[group])
