"""pulsar-admin with credentials (tests/support/pulsar_admin_cli.py's auth_plugin / auth_params, written to the
client.conf the CLI reads as `authPlugin` / `authParams`) against our broker with token authentication and
authorization on: a super user's token administers, another role's token is refused by the authorizer, no
credentials at all by the authentication, each with the exit code and words pulsar-admin prints.

Ours only: a second Apache Pulsar with authentication would cost the suite another reference start (about 20 s),
and the refusals' words are pinned against Apache Pulsar by tests/e2e/test_pulsar_authentication.py and
tests/e2e/test_pulsar_permissions.py already; what this adds is the CLI's path for credentials.
"""

from __future__ import annotations

import base64
from collections.abc import Iterator

import jwt
import pytest

from tests.support.broker import KopBroker
from tests.support.pulsar_admin_cli import PulsarAdminCli

SECRET = b"pulsar-admin-cli-token-secret-32b"
TOKEN_PLUGIN = "org.apache.pulsar.client.impl.auth.AuthenticationToken"


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[KopBroker]:
    b = KopBroker(tmp_path_factory.mktemp("kop-cli-auth"), {
        "authenticationEnabled": "true", "authorizationEnabled": "true", "superUserRoles": "admin",
        "authenticationProviders": "org.apache.pulsar.broker.authentication.AuthenticationProviderToken",
        "tokenSecretKey": "data:;base64," + base64.b64encode(SECRET).decode()})
    b.start()
    yield b
    b.stop()


def _cli(broker: KopBroker, role: str | None) -> PulsarAdminCli:
    if role is None:
        return PulsarAdminCli(broker.admin_url)
    return PulsarAdminCli(broker.admin_url, TOKEN_PLUGIN, "token:" + jwt.encode({"sub": role}, SECRET, algorithm="HS256"))


def _refusal(reason: str) -> str:
    return f"{reason}\n\nReason: {reason}\n"


def test_token_credentials(broker: KopBroker) -> None:
    with _cli(broker, "admin").session() as admin:
        assert admin("tenants", "create", "cli-auth", "-c", "standalone").check().stdout == ""
        assert "cli-auth" in admin("tenants", "list").check().lines
    with _cli(broker, "bob").session() as bob:
        r = bob("tenants", "list")
        assert (r.rc, r.stdout) == (1, ""), r
        assert r.stderr == _refusal("Unauthorized to validateBothTenantOperationAndSuperUser for originalPrincipal "
                                    "[null] and clientAppId [bob] about operation [LIST_TENANTS] "), r
    r = _cli(broker, None).run("tenants", "list")
    assert (r.rc, r.stdout, r.stderr) == (1, "", _refusal("Authentication required")), r
