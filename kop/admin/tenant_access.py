"""Tenant admins (a tenant's `adminRoles`) on the admin REST, as Apache Pulsar allows them with authorization on.

Why: Pulsar delegates a tenant's administration to the roles its TenantInfo names, so an operator can hand a
team its own tenant without making it a super user. Before this module every admin path needed a super user.

With `authenticationEnabled` and `authorizationEnabled`, a role that is not a super user (kop/admin/auth.py
decides that first) may do to its own tenant (`/admin/v2/tenants/{t}`, `/namespaces/{t}/...`,
`/persistent/{t}/...`, `/non-persistent/{t}/...`, `/schemas/{t}/...`) what a super user may: get, update and
delete the tenant, create, list and delete its namespaces, read and set their policies, grant and revoke
permissions, and administer its topics - Pulsar's PulsarAuthorizationProvider, whose tenant, namespace, policy
and topic checks all come down to "super user or tenant admin". Creating a tenant and listing tenants stay a
super user's. Everyone else is refused with the status and `{"reason"}` Pulsar 4.0.7 answers for that path
(401 for the tenant-level checks and a topic's permissions, 403 for namespace and policy checks; tests/e2e/
test_pulsar_tenant_admins.py runs the same requests against Apache Pulsar). Paths not named above (clusters,
brokers, the schema registry's own rules, lookup) are untouched by this module.

Differences, on purpose: Pulsar also lets a role holding a consume or produce grant list a namespace's topics
and look a topic up over REST; here those REST paths need a tenant admin (the binary protocol's lookup and the
HTTP lookup under /lookup/ follow the grants). A role's tenant-admin rights are checked against the tenant as
stored, re-read on every such request, so a change made on another broker applies at once.
"""

from __future__ import annotations

from typing import NamedTuple

from kop.topics.namespaces import NamespaceError, Namespaces

V2 = "/admin/v2/"
TENANT_KINDS = ("tenants", "namespaces", "persistent", "non-persistent", "schemas")
REQUIRES_SUPER_USER = "This operation requires super-user access"
NOT_TENANT_ADMIN = "Don't have permission to administrate resources on this tenant"

# A namespace policy's REST segment -> Pulsar's PolicyName, as its refusals name it
POLICY_NAMES = {
    "messageTTL": "TTL", "retention": "RETENTION", "deduplication": "DEDUPLICATION",
    "deduplicationEnabled": "DEDUPLICATION", "maxProducersPerTopic": "MAX_PRODUCERS",
    "maxConsumersPerTopic": "MAX_CONSUMERS", "maxProducers": "MAX_PRODUCERS", "maxConsumers": "MAX_CONSUMERS",
    "autoTopicCreation": "AUTO_TOPIC_CREATION", "backlogQuota": "BACKLOG", "backlogQuotaMap": "BACKLOG",
    "schemaCompatibilityStrategy": "SCHEMA_COMPATIBILITY_STRATEGY", "partitions": "PARTITION",
}
_TENANT_OPS = {"GET": "GET_TENANT", "PUT": "CREATE_TENANT", "POST": "UPDATE_TENANT", "DELETE": "DELETE_TENANT"}
_PERMISSION_OPS = {"GET": "GET_PERMISSION", "POST": "GRANT_PERMISSION", "DELETE": "REVOKE_PERMISSION"}


class Refusal(NamedTuple):
    status: int
    reason: str


class Rule(NamedTuple):
    """Whose path it is and what a role that may not administer it gets. tenant None: super users only."""

    tenant: str | None
    refusal: Refusal


def _tenant_op(role: str, op: str) -> Refusal:
    return Refusal(401, f"Unauthorized to validateBothTenantOperationAndSuperUser for originalPrincipal [null] "
                        f"and clientAppId [{role}] about operation [{op}] ")


def _namespace_tenant_op(role: str, op: str, tenant: str) -> Refusal:
    return Refusal(401, f"Unauthorized to validateTenantOperation for originalPrincipal [null] and clientAppId "
                        f"[{role}] about operation [{op}] on tenant [{tenant}]")


def _policy(method: str, what: str, name: str, policy: str) -> Refusal:
    op = "READ" if method in ("GET", "HEAD") else "WRITE"
    return Refusal(403, f"Unauthorized to validate{what.capitalize()}PolicyOperation for operation [{op}] on "
                        f"{what} [{name}] on policy [{policy}]")


def _namespace_op(op: str, ns: str) -> Refusal:
    return Refusal(403, f"Unauthorized to validateNamespaceOperation for operation [{op}] on namespace [{ns}]")


def rule(method: str, path: str, role: str) -> Rule | None:
    """The rule for one request of a role that is not a super user; None for a path this module leaves alone."""
    if not path.startswith(V2):
        return None
    parts = [p for p in path[len(V2):].split("/") if p]
    if not parts or parts[0] not in TENANT_KINDS:
        return None
    kind, rest = parts[0], parts[1:]
    if kind == "tenants":
        if not rest:
            return Rule(None, _tenant_op(role, "LIST_TENANTS"))
        return Rule(rest[0], _tenant_op(role, _TENANT_OPS.get(method, "GET_TENANT")))
    if not rest:
        return None
    tenant = rest[0]
    if kind == "namespaces":
        return Rule(tenant, _namespace_refusal(method, role, rest))
    return Rule(tenant, _topic_refusal(method, kind, rest))


def _namespace_refusal(method: str, role: str, rest: list[str]) -> Refusal:
    tenant = rest[0]
    if len(rest) == 1:
        return _namespace_tenant_op(role, "LIST_NAMESPACES", tenant)
    ns = f"{tenant}/{rest[1]}"
    if len(rest) == 2:
        if method in ("PUT", "DELETE"):
            op = "CREATE_NAMESPACE" if method == "PUT" else "DELETE_NAMESPACE"
            return _namespace_tenant_op(role, op, tenant)
        return _policy(method, "namespace", ns, "ALL")
    if rest[2] == "permissions":
        return _namespace_op(_PERMISSION_OPS.get(method, "GET_PERMISSION"), ns)
    return _policy(method, "namespace", ns, POLICY_NAMES.get(rest[2], "ALL"))


def _topic_refusal(method: str, kind: str, rest: list[str]) -> Refusal:
    if len(rest) < 3:  # a namespace's topic listing
        return _namespace_op("GET_TOPICS", "/".join(rest))
    domain = "persistent" if kind == "schemas" else kind
    topic = f"{domain}://{rest[0]}/{rest[1]}/{rest[2]}"
    segment = rest[3] if len(rest) > 3 else ""
    if segment == "permissions":
        return Refusal(401, NOT_TENANT_ADMIN)
    if segment in POLICY_NAMES and not (segment == "partitions" and method == "GET"):
        return _policy(method, "topic", topic, POLICY_NAMES[segment])
    op = "LOOKUP" if segment == "partitions" else "ADMIN"
    return Refusal(401, f"Unauthorized to validateTopicOperation for operation [{op}] on topic [{topic}]")


async def is_tenant_admin(store: Namespaces, tenant: str, role: str) -> bool | None:
    """Whether `role` is in the tenant's adminRoles, read from the store; None when the tenant does not exist."""
    await store.refresh(tenant)
    try:
        info = store.tenant(tenant)
    except NamespaceError:
        return None
    roles = info.get("adminRoles")
    return isinstance(roles, list) and role in roles


async def check(store: Namespaces, method: str, path: str, role: str) -> Refusal | None:
    """None: a tenant admin's request, which may go on; else the refusal. A path under a tenant that does not
    exist answers Pulsar's 404 (a tenant's own paths: its refusal); a path this module leaves alone keeps
    kop/admin/auth.py's super-user refusal."""
    found = rule(method, path, role)
    if found is None:
        return Refusal(403, REQUIRES_SUPER_USER)
    if found.tenant is None:
        return found.refusal
    admin = await is_tenant_admin(store, found.tenant, role)
    if admin is None and not path.startswith(V2 + "tenants/"):
        return Refusal(404, "Tenant does not exist")
    return None if admin else found.refusal
