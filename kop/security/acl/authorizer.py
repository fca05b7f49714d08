"""An authorizer with the semantics of Kafka's StandardAuthorizer (KRaft), plus the ACL administration
behind CreateAcls/DescribeAcls/DeleteAcls.

Decision for (principal, host, operation, resource), resource type and literal name given:

1. A super user (``super.users``, KoP's ``superUserRoles``) is always allowed.
2. The bindings that apply: same resource type; LITERAL with the exact name, LITERAL ``*``, or PREFIXED
   with a prefix of the name; principal the caller's or ``User:*``; host the caller's address (as Java
   prints it) or ``*``.
3. Any applying DENY for the operation (or for ALL) wins. Otherwise any applying ALLOW for the operation,
   for ALL, or for an operation that implies it: READ/WRITE/DELETE/ALTER imply DESCRIBE, ALTER_CONFIGS
   implies DESCRIBE_CONFIGS (implication works for ALLOW only: DENY READ does not deny DESCRIBE).
4. No ALLOW: if the resource has no bindings at all (any principal, any operation) the answer is
   ``allow.everyone.if.no.acl.found``; otherwise deny.

The authorize path reads an in-memory index and never awaits; changes go through the store first.
"""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from kop.security.acl.model import (
    SUPPORTED_OPERATIONS,
    WILDCARD_HOST,
    WILDCARD_PRINCIPAL,
    WILDCARD_RESOURCE,
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    PatternType,
    ResourceType,
)
from kop.security.acl.store import AclStore, InMemoryAclStore
from kop.security.principal import KafkaPrincipal

_IMPLIES_DESCRIBE = frozenset({AclOperation.DESCRIBE, AclOperation.READ, AclOperation.WRITE,
                               AclOperation.DELETE, AclOperation.ALTER})
_IMPLIES_DESCRIBE_CONFIGS = frozenset({AclOperation.DESCRIBE_CONFIGS, AclOperation.ALTER_CONFIGS})
NOT_REQUESTED = -2147483648  # Include*AuthorizedOperations not asked for (Int.MIN_VALUE)


@dataclass(frozen=True, slots=True)
class DeleteResult:
    """One DeleteAcls filter's outcome: the bindings it removed, or an INVALID_REQUEST message."""

    deleted: list[AclBinding]
    error: str | None = None


def _allows(acl_op: AclOperation, permission: AclPermissionType, op: AclOperation) -> bool:
    """Does an entry with (acl_op, permission) speak about op?"""
    if acl_op == AclOperation.ALL or acl_op == op:
        return True
    if permission != AclPermissionType.ALLOW:
        return False
    if op == AclOperation.DESCRIBE:
        return acl_op in _IMPLIES_DESCRIBE
    if op == AclOperation.DESCRIBE_CONFIGS:
        return acl_op in _IMPLIES_DESCRIBE_CONFIGS
    return False


class Authorizer:
    def __init__(self, *, super_users: Iterable[str] = (), allow_everyone_if_no_acl_found: bool = False,
                 store: AclStore | None = None, topic_alias: Callable[[str], str | None] | None = None) -> None:
        self.super_users = frozenset(super_users)
        self.allow_everyone_if_no_acl_found = allow_everyone_if_no_acl_found
        self.store = store if store is not None else InMemoryAclStore()
        self._bindings: set[AclBinding] = set()
        # (resource type, pattern type, name) -> bindings: lookups by exact name and by each prefix.
        self._index: dict[tuple[ResourceType, PatternType, str], set[AclBinding]] = {}
        # The lengths of the PREFIXED names per resource type (with how many bindings have each): a
        # lookup only tries the prefixes of the resource name that some binding could have.
        self._prefix_lengths: dict[ResourceType, Counter[int]] = {}
        # A reload replaces the in-memory copy with a snapshot read over several awaits; a CreateAcls or
        # DeleteAcls landing meanwhile was lost from the copy until the next reload (a just-created DENY
        # not enforced, a listing without the ACLs just added). Reloads and changes take turns.
        self._changing = asyncio.Lock()
        # A topic's second name for ACLs, when it has one: a topic of the Kafka namespace is authorized under
        # its bare Kafka name and under its full `tenant/ns/name`, so that a Pulsar namespace grant (a PREFIXED
        # `tenant/ns/` binding, kop/security/pulsar_permissions.py) reaches it. Both names' bindings apply
        # together: a DENY on either wins.
        self._topic_alias = topic_alias

    @staticmethod
    def parse_super_users(value: str) -> list[str]:
        """``super.users`` is semicolon-separated (``User:a;User:b``); KoP's ``superUserRoles`` is a comma
        list of bare roles. Both end up as principals."""
        sep = ";" if ";" in value or value.strip().startswith("User:") else ","
        out = []
        for item in value.split(sep):
            item = item.strip()
            if item:
                out.append(item if ":" in item else f"User:{item}")
        return out

    # --- the in-memory copy ------------------------------------------------------------------------

    async def load(self) -> None:
        """(Re)read every binding from the store: at start, and when another broker changed them."""
        async with self._changing:
            self._replace(await self.store.load())

    def _replace(self, bindings: set[AclBinding]) -> None:
        self._bindings = set()
        self._index = {}
        self._prefix_lengths = {}
        for b in bindings:
            self._add_local(b)

    def _add_local(self, b: AclBinding) -> None:
        if b in self._bindings:
            return
        self._bindings.add(b)
        p = b.pattern
        self._index.setdefault((p.resource_type, p.pattern_type, p.name), set()).add(b)
        if p.pattern_type == PatternType.PREFIXED:
            self._prefix_lengths.setdefault(p.resource_type, Counter())[len(p.name)] += 1

    def _remove_local(self, b: AclBinding) -> None:
        if b not in self._bindings:
            return
        self._bindings.discard(b)
        p = b.pattern
        key = (p.resource_type, p.pattern_type, p.name)
        self._index[key].discard(b)
        if not self._index[key]:
            del self._index[key]
        if p.pattern_type == PatternType.PREFIXED:
            lengths = self._prefix_lengths[p.resource_type]
            lengths[len(p.name)] -= 1
            if lengths[len(p.name)] <= 0:
                del lengths[len(p.name)]

    def _applying(self, resource_type: ResourceType, name: str) -> list[AclBinding]:
        """Every binding that applies to the literal resource (type, name), any principal/operation."""
        out: list[AclBinding] = []
        out.extend(self._index.get((resource_type, PatternType.LITERAL, name), ()))
        if name != WILDCARD_RESOURCE:
            out.extend(self._index.get((resource_type, PatternType.LITERAL, WILDCARD_RESOURCE), ()))
        for n in self._prefix_lengths.get(resource_type, ()):
            if 0 < n <= len(name):
                out.extend(self._index.get((resource_type, PatternType.PREFIXED, name[:n]), ()))
        return out

    # --- decisions ---------------------------------------------------------------------------------

    def authorize(self, principal: KafkaPrincipal, host: str, operation: AclOperation,
                  resource_type: ResourceType, name: str) -> bool:
        """``host`` is the client's address as :func:`~kop.security.acl.model.java_host_address` gives."""
        text = str(principal)
        if text in self.super_users:
            return True
        principals = (text, WILDCARD_PRINCIPAL)
        applying = self._applying(resource_type, name)
        if resource_type == ResourceType.TOPIC and self._topic_alias is not None:
            alias = self._topic_alias(name)
            if alias is not None:
                applying += self._applying(resource_type, alias)
        allowed = False
        for b in applying:
            e = b.entry
            if e.principal not in principals or (e.host != WILDCARD_HOST and e.host != host):
                continue
            if not _allows(e.operation, e.permission_type, operation):
                continue
            if e.permission_type == AclPermissionType.DENY:
                return False
            allowed = True
        if allowed:
            return True
        return not applying and self.allow_everyone_if_no_acl_found

    def authorize_by_resource_type(self, principal: KafkaPrincipal, host: str, operation: AclOperation,
                                   resource_type: ResourceType) -> bool:
        """Kafka's Authorizer.authorizeByResourceType: may the principal do ``operation`` on *some*
        resource of the type? InitProducerId uses it (idempotent producers need IDEMPOTENT_WRITE on the
        cluster or WRITE on any topic). Only bindings for exactly ``operation`` or ALL count here."""
        # Kafka first asks about a made-up name, which lets super users and, with no ACLs in the way,
        # allow.everyone.if.no.acl.found through.
        if self.authorize(principal, host, operation, resource_type, "hardcode"):
            return True
        principals = (str(principal), WILDCARD_PRINCIPAL)
        deny_literal: set[str] = set()
        deny_prefixed: set[str] = set()
        allow: list[tuple[PatternType, str]] = []
        wildcard_allow = False
        for b in self._bindings:
            p, e = b.pattern, b.entry
            if p.resource_type != resource_type or e.principal not in principals:
                continue
            if e.host != WILDCARD_HOST and e.host != host:
                continue
            if e.operation not in (operation, AclOperation.ALL):
                continue
            if e.permission_type == AclPermissionType.DENY:
                if p.pattern_type == PatternType.LITERAL:
                    if p.name == WILDCARD_RESOURCE:
                        return False
                    deny_literal.add(p.name)
                else:
                    deny_prefixed.add(p.name)
            elif e.permission_type == AclPermissionType.ALLOW:
                if p.pattern_type == PatternType.LITERAL and p.name == WILDCARD_RESOURCE:
                    wildcard_allow = True  # not decisive yet: a DENY on '*' still wins
                else:
                    allow.append((p.pattern_type, p.name))
        if wildcard_allow:
            return True
        for pattern_type, name in allow:
            if pattern_type == PatternType.LITERAL and name in deny_literal:
                continue
            if any(name[:i] in deny_prefixed for i in range(1, len(name) + 1)):
                continue
            return True
        return False

    # --- administration (CreateAcls / DescribeAcls / DeleteAcls) -----------------------------------

    async def create_acls(self, bindings: list[AclBinding]) -> list[str | None]:
        """One result per binding, in order: None = created (or already there), else the INVALID_REQUEST
        message. Valid bindings are stored even when others in the same request are not, as in Kafka."""
        errors = [b.validation_error() for b in bindings]
        valid = [b for b, err in zip(bindings, errors, strict=True) if err is None]
        if valid:
            async with self._changing:
                await self.store.add(valid)
                for b in valid:
                    self._add_local(b)
        return errors

    async def change(self, *, remove: list[AclBinding], add: list[AclBinding]) -> None:
        """Remove then add bindings in one turn (a Pulsar grant replacing a role's actions); the bindings
        are valid ones made by the broker, not a client's CreateAcls."""
        async with self._changing:
            if remove:
                await self.store.remove(set(remove))
                for b in remove:
                    self._remove_local(b)
            if add:
                await self.store.add(add)
                for b in add:
                    self._add_local(b)

    def describe_all(self) -> list[AclBinding]:
        return sorted(self._bindings)

    def describe_acls(self, flt: AclBindingFilter) -> list[AclBinding]:
        """The bindings DescribeAcls returns; raises ValueError (INVALID_REQUEST) for a filter with an
        UNKNOWN element."""
        if flt.is_unknown:
            raise ValueError("The filter contains UNKNOWN elements")
        return sorted(b for b in self._bindings if flt.matches(b))

    async def delete_acls(self, filters: list[AclBindingFilter]) -> list[DeleteResult]:
        """Each filter matches against the bindings as they were before the request, so one binding
        matched by two filters is reported by both (Kafka does the same)."""
        async with self._changing:
            return await self._delete_acls(filters)

    async def _delete_acls(self, filters: list[AclBindingFilter]) -> list[DeleteResult]:
        results: list[DeleteResult] = []
        doomed: set[AclBinding] = set()
        for flt in filters:
            if flt.pattern.is_unknown:
                results.append(DeleteResult([], "Unknown patternFilter."))
                continue
            if flt.entry.is_unknown:
                results.append(DeleteResult([], "Unknown entryFilter."))
                continue
            matched = sorted(b for b in self._bindings if flt.matches(b))
            doomed.update(matched)
            results.append(DeleteResult(matched))
        if doomed:
            await self.store.remove(doomed)
            for b in doomed:
                self._remove_local(b)
        return results


def group_by_resource(bindings: Iterable[AclBinding]) -> dict[tuple[ResourceType, str, PatternType], list]:
    """DescribeAcls answers per resource pattern, each with its entries."""
    out: dict[tuple[ResourceType, str, PatternType], list] = {}
    for b in sorted(bindings):
        out.setdefault((b.pattern.resource_type, b.pattern.name, b.pattern.pattern_type), []).append(b.entry)
    return out


def authorized_operations(authorizer: Authorizer | None, principal: KafkaPrincipal, host: str,
                          resource_type: ResourceType, name: str) -> int:
    """The bitfield of Metadata's topic/cluster_authorized_operations, DescribeCluster's and
    DescribeGroups' authorized_operations: bit n is set when AclOperation n is allowed, over the operations
    the resource type supports. Without an authorizer every supported operation is allowed (Kafka)."""
    bits = 0
    for op in SUPPORTED_OPERATIONS[resource_type]:
        if authorizer is None or authorizer.authorize(principal, host, op, resource_type, name):
            bits |= 1 << op
    return bits
