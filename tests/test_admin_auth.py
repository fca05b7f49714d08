"""The admin HTTP server with authenticationEnabled (kop/admin/auth.py): `Authorization: Bearer <token>` with a
Pulsar token (HS256 secret here, made by PyJWT as Pulsar's tokens are), against a real broker.

401 without a token, with a malformed header, a forged, expired or not-yet-valid token; 403 for a valid token
whose role is not a super user; 200 for a super user; adminOpenPaths served without a token; nothing checked
without authenticationEnabled; a broker with authentication on but no token key refuses to start.
"""

from __future__ import annotations

import base64
import json
import time
import urllib.error
import urllib.request

import jwt
import pytest

from tests.support.broker import KopBroker

SECRET = b"k" * 32
OTHER = b"x" * 32


def token(role: str, key: bytes = SECRET, **claims: object) -> str:
    return jwt.encode({"sub": role, **claims}, key, algorithm="HS256")


def get(url: str, auth: str | None = None) -> tuple[int, str]:
    request = urllib.request.Request(url, headers={"Authorization": auth} if auth else {})
    try:
        with urllib.request.urlopen(request, timeout=30) as resp:
            return resp.status, resp.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode()


def secured(tmp_path, **extra: object) -> KopBroker:
    return KopBroker(tmp_path, {"webServicePort": 0, "authenticationEnabled": "true", "superUserRoles": "admin,ops",
                                "tokenSecretKey": "data:;base64," + base64.b64encode(SECRET).decode(), **extra})


@pytest.fixture
def broker(tmp_path):
    b = secured(tmp_path).start()
    yield b
    b.stop()


def test_tokens_decide_401_403_200(broker) -> None:
    url = broker.admin_url + "/admin/v2/clusters"
    assert get(url)[0] == 401
    assert get(url, "Basic YWRtaW46c2VjcmV0")[0] == 401
    assert get(url, "Bearer")[0] == 401
    assert get(url, "Bearer not-a-jwt")[0] == 401
    assert get(url, "Bearer " + token("admin", OTHER))[0] == 401  # forged: signed with another key
    assert get(url, "Bearer " + token("admin", exp=int(time.time()) - 60))[0] == 401  # expired
    assert get(url, "Bearer " + token("admin", nbf=int(time.time()) + 3600))[0] == 401  # not yet valid
    unsigned = jwt.encode({"sub": "admin"}, None, algorithm="none")
    assert get(url, "Bearer " + unsigned)[0] == 401
    status, body = get(url, "Bearer " + token("alice"))
    assert (status, json.loads(body)["reason"]) == (401, (  # as Pulsar 5.0: listing the clusters is a super user's
        "Unauthorized to validateBothSuperuserAndClusterOperation for originalPrincipal [null] and clientAppId "
        "[alice] about operation [LIST_CLUSTERS] on cluster [null]"))
    assert get(url, "Bearer " + token("admin")) == (200, '["standalone"]')
    status, body = get(broker.admin_url + "/admin/v2/brokers/health", "Bearer " + token("alice"))
    assert status == 401 and json.loads(body)["reason"].startswith(
        "Unauthorized to validateBothSuperuserAndBrokerOperation for originalPrincipal [null] and clientAppId "
        "[alice] about operation [HEALTH_CHECK] on broker [127.0.0.1:")  # Pulsar's answer
    status, body = get(broker.admin_url + "/ready", "Bearer " + token("alice"))
    assert status == 403 and "super-user" in body
    # Pulsar's isReady checks only authentication (its answer for such a role is 200 "ok"): the state, no refusal
    assert get(broker.admin_url + "/admin/v2/brokers/ready", "Bearer " + token("alice"))[0] in (200, 503)
    status, body = get(url, "Bearer " + token("admin"))
    assert status == 200 and body == '["standalone"]'
    assert get(url, "bearer " + token("ops"))[0] == 200  # the scheme is case-insensitive
    # a refused token's reason never echoes the token
    status, body = get(url, "Bearer " + token("admin", OTHER))
    assert token("admin", OTHER) not in body and json.loads(body) == {"reason": "Authentication required"}


def test_kop_admin_sends_its_token(broker, capsys) -> None:
    from kop.admin.cli import main

    assert main(["--admin-url", broker.admin_url, "tenants", "list"]) == 1
    assert "Authentication required (HTTP 401)" in capsys.readouterr().err
    assert main(["--admin-url", broker.admin_url, "--token", token("alice"), "tenants", "list"]) == 1
    assert "(HTTP 403)" in capsys.readouterr().err
    assert main(["--admin-url", broker.admin_url, "--token", token("admin"), "tenants", "list"]) == 0
    assert "public" in capsys.readouterr().out


def test_open_paths_and_the_rest(broker) -> None:
    base = broker.admin_url
    assert get(base + "/health")[0] == 200
    assert get(base + "/metrics")[0] == 200
    assert get(base + "/ready")[0] == 401  # not an open path by default
    assert get(base + "/admin/v2/persistent/public/default")[0] == 401
    assert get(base + "/admin/v2/persistent/public/default", "Bearer " + token("admin"))[0] == 200


def test_open_paths_are_configurable(tmp_path) -> None:
    b = secured(tmp_path, adminOpenPaths="/health,/ready").start()
    try:
        assert get(b.admin_url + "/metrics")[0] == 401
        assert get(b.admin_url + "/ready")[0] in (200, 503)  # open: the broker's state, not a refusal
    finally:
        b.stop()


def test_without_authentication_nothing_is_checked(tmp_path) -> None:
    b = KopBroker(tmp_path, {"webServicePort": 0}).start()
    try:
        assert get(b.admin_url + "/admin/v2/clusters")[0] == 200
    finally:
        b.stop()


def test_authentication_without_a_token_key_keeps_the_admin_rest_closed(tmp_path) -> None:
    """SASL users only (no Pulsar token key): the broker starts, and the admin REST lets no one in."""
    b = KopBroker(tmp_path, {"webServicePort": 0, "authenticationEnabled": "true"}).start()
    try:
        assert get(b.admin_url + "/admin/v2/clusters")[0] == 401
        assert get(b.admin_url + "/admin/v2/clusters", f"Bearer {token('admin')}")[0] == 401
        assert get(b.admin_url + "/health")[0] == 200
        assert "tokenSecretKey or tokenPublicKey" in b.log_path.read_text(errors="replace")
    finally:
        b.stop()
