"""Pulsar's permissions (grant/revoke/list on namespaces and topics) as Apache Pulsar answers and enforces them.

A Pulsar-side module (tests/e2e/conftest.py): the same assertions run on Apache Pulsar 4.0.x standalone with token
authentication and authorization on (`pulsar`), which proves them right, and on our broker with the same settings
(`kop`), where the grants are Kafka ACLs in the one authorizer (kop/security/pulsar_permissions.py). The REST
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

PULSAR_SIDE_TARGETS = ("pulsar", "kop")

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
    def __init__(self, url: str) -> None:
        self.url = url

    def call(self, method: str, path: str, body: object = None) -> tuple[int, object]:
        data = None if body is None else json.dumps(body).encode()
        req = urllib.request.Request(self.url + path, method=method, data=data, headers={
            "Content-Type": "application/json", "Authorization": "Bearer " + token("admin")})
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
