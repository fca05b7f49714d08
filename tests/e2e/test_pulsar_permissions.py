"""Pulsar's permissions (grant/revoke/list on namespaces and topics) as Apache Pulsar answers and enforces them.

A Pulsar-side module (tests/e2e/conftest.py): the same assertions run on Apache Pulsar standalone with token
authentication and authorization on (`pulsar`), which proves them right, and on our broker with the same settings
(`kop`, `kop-bk`), where the grants are Kafka ACLs in the one authorizer (kop/security/pulsar_permissions.py). The REST
calls are Pulsar's (what pulsar-admin and the Java admin client send); the clients are `pulsar-client` with
tokens. Only the super user `admin` administers.
"""

from __future__ import annotations

import base64
import json
import urllib.error
import urllib.request
import uuid

import jwt
import pulsar
import pytest

PULSAR_SIDE_TARGETS = ("pulsar", "kop", "kop-bk")

SECRET = b"pulsar-permissions-secret-0123456"
NS_PATH = "/admin/v2/namespaces/public/default/permissions"


def token(role: str) -> str:
    return jwt.encode({"sub": role}, SECRET, algorithm="HS256")


_KEY = "data:;base64," + base64.b64encode(SECRET).decode()
PULSAR_CONFIG = {
    "authenticationEnabled": "true", "authorizationEnabled": "true", "superUserRoles": "admin",
    "authenticationProviders": "org.apache.pulsar.broker.authentication.AuthenticationProviderToken",
    "tokenSecretKey": _KEY,
    "brokerClientAuthenticationPlugin": "org.apache.pulsar.client.impl.auth.AuthenticationToken",
    "brokerClientAuthenticationParameters": "token:" + token("admin"),
}
KOP_KEYS = {
    "authenticationEnabled": "true", "authorizationEnabled": "true", "superUserRoles": "admin",
    "authenticationProviders": "org.apache.pulsar.broker.authentication.AuthenticationProviderToken",
    "tokenSecretKey": _KEY, "allowAutoTopicCreation": "true",
}


class Admin:
    def __init__(self, url: str, role: str | None = "admin") -> None:
        self.url = url
        self.role = role  # None: no credentials

    def call(self, method: str, path: str, body: object = None) -> tuple[int, object]:
        data = None if body is None else json.dumps(body).encode()
        headers = {"Content-Type": "application/json"}
        if self.role is not None:
            headers["Authorization"] = "Bearer " + token(self.role)
        req = urllib.request.Request(self.url + path, method=method, data=data, headers=headers)
        try:
            with urllib.request.urlopen(req, timeout=60) as r:
                raw = r.read()
                return r.status, json.loads(raw) if raw else None
        except urllib.error.HTTPError as e:
            return e.code, e.read().decode()


@pytest.fixture
def endpoint(target):
    return target.pulsar_broker(PULSAR_CONFIG, **KOP_KEYS)


def as_sets(listing: object) -> dict[str, set[str]]:
    assert isinstance(listing, dict), listing
    return {role: set(actions) for role, actions in listing.items()}


def can_produce(service_url: str, role: str, topic: str) -> bool:
    c = pulsar.Client(service_url, authentication=pulsar.AuthenticationToken(token(role)),
                      operation_timeout_seconds=20, logger=pulsar.ConsoleLogger(pulsar.LoggerLevel.Error))
    try:
        c.create_producer(topic).send(b"x")
        return True
    except pulsar.AuthorizationError:
        return False
    finally:
        c.close()


def can_subscribe(service_url: str, role: str, topic: str) -> bool:
    c = pulsar.Client(service_url, authentication=pulsar.AuthenticationToken(token(role)),
                      operation_timeout_seconds=20, logger=pulsar.ConsoleLogger(pulsar.LoggerLevel.Error))
    try:
        c.subscribe(topic, f"sub-{role}").close()
        return True
    except pulsar.AuthorizationError:
        return False
    finally:
        c.close()


def test_namespace_and_topic_grants_are_listed_enforced_and_revoked(target, endpoint) -> None:
    admin = Admin(endpoint.admin_url)
    suffix = uuid.uuid4().hex[:6]
    producer_role, consumer_role = f"alice-{suffix}", f"bob-{suffix}"
    local = target.topic("perm")
    topic = f"persistent://public/default/{local}"
    topic_path = f"/admin/v2/persistent/public/default/{local}"
    assert admin.call("PUT", topic_path + "/partitions", 1)[0] == 204
    assert not can_produce(endpoint.service_url, producer_role, topic)  # nothing granted yet

    assert admin.call("POST", f"{NS_PATH}/{producer_role}", ["produce"])[0] == 204
    assert admin.call("POST", f"{topic_path}/permissions/{consumer_role}", ["consume"])[0] == 204
    status, listing = admin.call("GET", NS_PATH)
    assert status == 200 and as_sets(listing).get(producer_role) == {"produce"}
    assert consumer_role not in as_sets(listing)  # a topic grant is not the namespace's
    status, listing = admin.call("GET", topic_path + "/permissions")
    got = as_sets(listing)
    assert status == 200 and got[producer_role] == {"produce"} and got[consumer_role] == {"consume"}

    assert can_produce(endpoint.service_url, producer_role, topic)
    assert not can_subscribe(endpoint.service_url, producer_role, topic)
    assert can_subscribe(endpoint.service_url, consumer_role, topic)
    assert not can_produce(endpoint.service_url, consumer_role, topic)

    # A topic revoke leaves the namespace's grant; the namespace revoke ends it.
    assert admin.call("DELETE", f"{topic_path}/permissions/{producer_role}")[0] == 204
    assert can_produce(endpoint.service_url, producer_role, topic)
    assert admin.call("DELETE", f"{NS_PATH}/{producer_role}")[0] == 204
    assert producer_role not in as_sets(admin.call("GET", NS_PATH)[1])
    assert not can_produce(endpoint.service_url, producer_role, topic)
    assert admin.call("DELETE", f"{topic_path}/permissions/{consumer_role}")[0] == 204
    assert not can_subscribe(endpoint.service_url, consumer_role, topic)


def test_a_grant_replaces_the_roles_actions_and_unknown_names_are_404(target, endpoint) -> None:
    admin = Admin(endpoint.admin_url)
    role = f"carol-{uuid.uuid4().hex[:6]}"
    assert admin.call("POST", f"{NS_PATH}/{role}", ["produce", "consume"])[0] == 204
    assert as_sets(admin.call("GET", NS_PATH)[1])[role] == {"produce", "consume"}
    assert admin.call("POST", f"{NS_PATH}/{role}", ["consume"])[0] == 204
    assert as_sets(admin.call("GET", NS_PATH)[1])[role] == {"consume"}
    assert admin.call("DELETE", f"{NS_PATH}/{role}")[0] == 204
    assert admin.call("POST", f"{NS_PATH}/{role}", "produce")[0] == 400  # not an array
    missing_ns = admin.call("GET", "/admin/v2/namespaces/public/no-such-ns/permissions")
    assert missing_ns[0] == 404 and "Namespace does not exist" in str(missing_ns[1])
    local = target.topic("no-such-topic")
    missing = admin.call("POST", f"/admin/v2/persistent/public/default/{local}/permissions/{role}", ["consume"])
    assert missing[0] == 404 and "not found" in str(missing[1])


def reason(answer: tuple[int, object]) -> tuple[int, str]:
    """(status, the {"reason"} of a refusal)."""
    status, body = answer
    return status, json.loads(body)["reason"] if isinstance(body, str) and body else ""


def test_tenant_admins_administer_their_tenant_and_others_are_refused_as_pulsar_refuses(endpoint) -> None:
    suffix = uuid.uuid4().hex[:6]
    tenant, tadmin, other = f"team-{suffix}", f"tadmin-{suffix}", f"bob-{suffix}"
    ns, info = f"{tenant}/ns", {"adminRoles": [tadmin], "allowedClusters": ["standalone"]}
    admin, mine, theirs = Admin(endpoint.admin_url), Admin(endpoint.admin_url, tadmin), Admin(endpoint.admin_url, other)
    who = f"originalPrincipal [null] and clientAppId [{other}]"
    assert reason(theirs.call("PUT", f"/admin/v2/tenants/{tenant}", info)) == (
        401, f"Unauthorized to validateBothTenantOperationAndSuperUser for {who} about operation [CREATE_TENANT] ")
    assert admin.call("PUT", f"/admin/v2/tenants/{tenant}", info)[0] == 204
    assert mine.call("PUT", f"/admin/v2/tenants/{tenant}-2", info)[0] == 401  # only super users create tenants
    assert mine.call("GET", "/admin/v2/tenants")[0] == 401  # nor list them
    assert mine.call("GET", f"/admin/v2/tenants/{tenant}") == (200, info)
    assert reason(theirs.call("PUT", f"/admin/v2/namespaces/{ns}")) == (401, "Unauthorized to validateTenantOperation "
                                                                              f"for {who} about operation [CREATE_NAMESPACE] on tenant [{tenant}]")
    assert mine.call("PUT", f"/admin/v2/namespaces/{ns}")[0] == 204
    assert mine.call("PUT", f"/admin/v2/namespaces/public/ns-{suffix}")[0] == 401  # not its tenant
    assert mine.call("GET", f"/admin/v2/namespaces/{tenant}") == (200, [ns])
    assert reason(theirs.call("POST", f"/admin/v2/namespaces/{ns}/messageTTL", 30)) == (
        403, f"Unauthorized to validateNamespacePolicyOperation for operation [WRITE] on namespace [{ns}] on policy [TTL]")
    assert theirs.call("GET", f"/admin/v2/namespaces/{ns}")[0] == 403
    assert mine.call("POST", f"/admin/v2/namespaces/{ns}/messageTTL", 30)[0] == 204
    assert mine.call("GET", f"/admin/v2/namespaces/{ns}/messageTTL") == (200, 30)
    assert reason(theirs.call("POST", f"/admin/v2/namespaces/{ns}/permissions/carol", ["produce"])) == (
        403, f"Unauthorized to validateNamespaceOperation for operation [GRANT_PERMISSION] on namespace [{ns}]")
    assert mine.call("POST", f"/admin/v2/namespaces/{ns}/permissions/carol", ["produce"])[0] == 204
    assert as_sets(mine.call("GET", f"/admin/v2/namespaces/{ns}/permissions")[1]) == {"carol": {"produce"}}
    topic_path = f"/admin/v2/persistent/{ns}/t"
    assert mine.call("PUT", topic_path + "/partitions", 1)[0] == 204
    assert reason(theirs.call("POST", topic_path + "/permissions/carol", ["consume"])) == (
        401, "Don't have permission to administrate resources on this tenant")
    assert mine.call("POST", topic_path + "/permissions/carol", ["consume"])[0] == 204
    assert theirs.call("GET", f"/admin/v2/persistent/{ns}")[0] == 403
    assert mine.call("DELETE", topic_path + "/partitions")[0] == 204
    assert mine.call("DELETE", f"/admin/v2/namespaces/{ns}/permissions/carol")[0] == 204
    assert theirs.call("DELETE", f"/admin/v2/namespaces/{ns}")[0] == 401
    assert Admin(endpoint.admin_url, None).call("DELETE", f"/admin/v2/namespaces/{ns}")[0] == 401  # no credentials
    assert mine.call("DELETE", f"/admin/v2/namespaces/{ns}")[0] == 204
    assert theirs.call("DELETE", f"/admin/v2/tenants/{tenant}")[0] == 401
    assert mine.call("DELETE", f"/admin/v2/tenants/{tenant}")[0] == 204  # Pulsar 4.0.7 lets a tenant admin do it
    assert reason(theirs.call("PUT", f"/admin/v2/namespaces/{tenant}/ns")) == (404, "Tenant does not exist")
