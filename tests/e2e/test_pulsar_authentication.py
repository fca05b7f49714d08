"""Basic (htpasswd) and TLS client-certificate authentication, and `anonymousUserRole`, as Apache Pulsar answers them.

A Pulsar-side module (tests/e2e/conftest.py): the same assertions on Apache Pulsar standalone (`pulsar`, 5.0),
which proves them right, and on our broker (`kop`, `kop-bk`: kop/security/authn.py behind kop/pulsar/session.py
and kop/admin/auth.py). Each target is started once for the module with AuthenticationProviderBasic (`basicAuthConf`,
a `data:` URL of an htpasswd file: alice with an apr1 hash, bob with a DES crypt one), AuthenticationProviderTls
(client certificates of a CA made here, on brokerServicePortTls and webServicePortTls), anonymousUserRole=guest, and
authorization on with the super users alice and tls-admin. So a role that authenticates but is no super user (bob,
tls-user, guest) is refused by the authorizer, which proves which role the broker gave it.

What Pulsar answers (and ours with it): refused credentials on the binary protocol end the connection with
AuthenticationError, which pulsar-client (C++) retries until its operation timeout, so the client raises
`pulsar.Timeout` ("Pulsar error: TimeOut") - a wrong password never falls back to the anonymous role there, while a
client that names no method (no credentials, or a certificate without AuthenticationTLS) is the anonymous role. The
admin REST tries every provider when the request names none and falls back to the anonymous role when all refuse; a
request naming its method (X-Pulsar-Auth-Method-Name) gets 401 instead (its body no contract: Pulsar 5.0's is
Jetty's HTML page; what is checked is that it gives nothing back). Listing the clusters and the broker health
check are a super user's (401 with Pulsar's reason for others).
"""

from __future__ import annotations

import base64
import json
import ssl
import urllib.error
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import pulsar
import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.x509.oid import NameOID

from tests.support.certs import CertAuthority, name
from tests.support.net import free_port

PULSAR_SIDE_TARGETS = ("pulsar", "kop", "kop-bk")

PROVIDER = "org.apache.pulsar.broker.authentication.AuthenticationProvider"
HTPASSWD = b"alice:$apr1$s4ltS4lt$WqSRSiuEvAv7Y9YmJUhP31\nbob:abzlUXK5ed5rs\n"  # hunter2 (openssl), pw (glibc)
COMMON = {
    "authenticationEnabled": "true", "authorizationEnabled": "true", "superUserRoles": "alice,tls-admin",
    "authenticationProviders": f"{PROVIDER}Basic,{PROVIDER}Tls", "anonymousUserRole": "guest",
    "basicAuthConf": "data:;base64," + base64.b64encode(HTPASSWD).decode(),
}
# the reference's own admin client (standalone creates public/default with it): alice, over basic
BROKER_CLIENT = {
    "brokerClientAuthenticationPlugin": "org.apache.pulsar.client.impl.auth.AuthenticationBasic",
    "brokerClientAuthenticationParameters": json.dumps({"userId": "alice", "password": "hunter2"}),
}
TIMEOUT = "Pulsar error: TimeOut"


@pytest.fixture(scope="module")
def certs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """ca.pem, the broker's certificate (localhost, 127.0.0.1) and the clients tls-admin (a super user) and
    tls-user (not one)."""
    d = tmp_path_factory.mktemp("pulsar-authentication-certs")
    ca = CertAuthority()
    (d / "ca.pem").write_bytes(ca.cert.public_bytes(serialization.Encoding.PEM))
    for stem, cn, host in (("broker", "localhost", True), ("admin", "tls-admin", False), ("user", "tls-user", False)):
        issued = ca.issue(name((NameOID.ORGANIZATION_NAME, "kop"), (NameOID.COMMON_NAME, cn)),
                          dns=["localhost"] if host else None, ips=["127.0.0.1"] if host else None)
        (d / f"{stem}.pem").write_bytes(issued.cert_pem)
        (d / f"{stem}.key").write_bytes(issued.key_pem)
    return d


@pytest.fixture(scope="module")
def tls_ports() -> dict[str, tuple[int, int]]:
    """Per target, its (brokerServicePortTls, webServicePortTls): the three brokers live side by side."""
    return {}


@dataclass
class Secured:
    service_url: str  # pulsar://
    tls_url: str  # pulsar+ssl://localhost:<brokerServicePortTls>
    admin_url: str  # http://
    https_url: str  # https://localhost:<webServicePortTls>
    certs: Path

    def client(self, tls: bool = False, timeout: int = 30, **kw: object) -> pulsar.Client:
        if tls:
            kw.update(tls_trust_certs_file_path=str(self.certs / "ca.pem"), tls_validate_hostname=True)
        return pulsar.Client(self.tls_url if tls else self.service_url, operation_timeout_seconds=timeout,
                             connection_timeout_ms=timeout * 1000,
                             logger=pulsar.ConsoleLogger(pulsar.LoggerLevel.Error), **kw)

    def certificate(self, stem: str) -> pulsar.AuthenticationTLS:
        return pulsar.AuthenticationTLS(str(self.certs / f"{stem}.pem"), str(self.certs / f"{stem}.key"))

    def https(self, stem: str | None) -> ssl.SSLContext:
        context = ssl.create_default_context(cafile=str(self.certs / "ca.pem"))
        if stem is not None:
            context.load_cert_chain(str(self.certs / f"{stem}.pem"), str(self.certs / f"{stem}.key"))
        return context


@pytest.fixture
def endpoint(target, certs: Path, tls_ports: dict[str, tuple[int, int]]) -> Secured:
    service_tls, web_tls = tls_ports.setdefault(target.kind, (free_port(), free_port()))
    tls = {"brokerServicePortTls": str(service_tls), "webServicePortTls": str(web_tls),
           "tlsCertificateFilePath": str(certs / "broker.pem"), "tlsKeyFilePath": str(certs / "broker.key"),
           "tlsTrustCertsFilePath": str(certs / "ca.pem")}
    ep = target.pulsar_broker({**COMMON, **tls, **BROKER_CLIENT}, **COMMON, **tls)
    return Secured(ep.service_url, f"pulsar+ssl://localhost:{service_tls}", ep.admin_url,
                   f"https://localhost:{web_tls}", certs)


def round_trip(client: pulsar.Client, topic: str) -> bytes:
    """Produce one message and consume it back; the payload received."""
    try:
        client.create_producer(topic).send(b"hello")
        consumer = client.subscribe(topic, "s", initial_position=pulsar.InitialPosition.Earliest)
        return consumer.receive(timeout_millis=30000).data()
    finally:
        client.close()


def produce_error(client: pulsar.Client, topic: str) -> tuple[type, str]:
    """The class and message of the error creating a producer raises (the client is closed)."""
    try:
        with pytest.raises(pulsar.PulsarException) as refused:
            client.create_producer(topic)
        return refused.type, str(refused.value)
    finally:
        client.close()


def test_basic_and_tls_roles_on_the_pulsar_port(target, endpoint: Secured) -> None:
    topic = f"persistent://public/default/{target.topic('authn')}"
    alice = endpoint.client(authentication=pulsar.AuthenticationBasic("alice", "hunter2"))
    assert round_trip(alice, topic) == b"hello"
    assert round_trip(endpoint.client(tls=True, authentication=endpoint.certificate("admin")), topic) == b"hello"
    # authenticated, no super user: the authorizer refuses the role the credentials named
    refused = (pulsar.AuthorizationError, "Pulsar error: AuthorizationError")
    assert produce_error(endpoint.client(authentication=pulsar.AuthenticationBasic("bob", "pw")), topic) == refused
    assert produce_error(endpoint.client(tls=True, authentication=endpoint.certificate("user")), topic) == refused
    # no credentials: the anonymous role guest, also no super user
    assert produce_error(endpoint.client(), topic) == refused
    assert produce_error(endpoint.client(tls=True), topic) == refused


def test_refused_credentials_on_the_pulsar_port_time_out_the_client(target, endpoint: Secured) -> None:
    """The broker answers AuthenticationError and closes; the client reconnects until its operation timeout
    (3 s here). The four run side by side, so the test takes one timeout."""
    topic = f"persistent://public/default/{target.topic('refused')}"
    clients = [
        endpoint.client(timeout=3, authentication=pulsar.AuthenticationBasic("alice", "wrong")),
        endpoint.client(timeout=3, authentication=pulsar.AuthenticationBasic("nobody", "hunter2")),
        # a password with ':' inside is refused: Pulsar splits user:password on every ':'
        endpoint.client(timeout=3, authentication=pulsar.AuthenticationBasic("alice", "hunter2:x")),
        # the TLS port takes basic credentials too, and refuses them the same way
        endpoint.client(tls=True, timeout=3, authentication=pulsar.AuthenticationBasic("alice", "wrong")),
    ]
    with ThreadPoolExecutor(len(clients)) as pool:
        errors = list(pool.map(lambda c: produce_error(c, topic), clients))
    assert errors == [(pulsar.Timeout, TIMEOUT)] * len(clients)


def get(url: str, headers: dict[str, str] | None = None, context: ssl.SSLContext | None = None) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(urllib.request.Request(url, headers=headers or {}), timeout=30,
                                    context=context) as resp:
            return resp.status, resp.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode()


def basic(user: str, password: str, method: str | None = None) -> dict[str, str]:
    headers = {"Authorization": "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()}
    return headers | ({"X-Pulsar-Auth-Method-Name": method} if method else {})


def list_tenants_refused(role: str) -> str:
    return (f"Unauthorized to validateBothTenantOperationAndSuperUser for originalPrincipal [null] and clientAppId "
            f"[{role}] about operation [LIST_TENANTS] ")


def assert_authentication_refused(answer: tuple[int, str], sent: dict[str, str]) -> None:
    """A refused authentication: 401, and a body that gives back nothing the client sent. The body itself is no
    contract - Pulsar 4.0 answered {"reason": "Authentication required"}, Pulsar 5.0 (Jetty 12) answers Jetty's HTML
    error page naming the provider's reason ("Unknown user or invalid password"), ours keeps the former."""
    status, body = answer
    assert status == 401, answer
    for header in (v for k, v in sent.items() if k == "Authorization"):
        encoded = header.removeprefix("Basic ")
        pair = base64.b64decode(encoded).decode()
        password = pair.split(":", 1)[1]
        # (a password of a letter or two is found in any page by chance)
        for secret in (encoded, pair, *([password] if len(password) >= 5 else [])):
            assert secret not in body, (secret, body)


def refusal(answer: tuple[int, str]) -> tuple[int, str]:
    status, body = answer
    return status, json.loads(body)["reason"]


def test_admin_rest_with_basic_credentials(endpoint: Secured) -> None:
    tenants, clusters = endpoint.admin_url + "/admin/v2/tenants", endpoint.admin_url + "/admin/v2/clusters"
    status, body = get(tenants, basic("alice", "hunter2"))
    assert status == 200 and "public" in json.loads(body)
    assert get(tenants, basic("alice", "hunter2", "basic"))[0] == 200
    assert get(tenants, basic("alice", "hunter2:"))[0] == 200  # Java's split drops the trailing empty field
    assert refusal(get(tenants, basic("bob", "pw"))) == (401, list_tenants_refused("bob"))
    assert get(clusters, basic("alice", "hunter2")) == (200, '["standalone"]')
    # Pulsar 5.0: listing the clusters is a super user's (4.0 let any authenticated role)
    assert refusal(get(clusters, basic("bob", "pw"))) == (401, (
        "Unauthorized to validateBothSuperuserAndClusterOperation for originalPrincipal [null] and clientAppId [bob] "
        "about operation [LIST_CLUSTERS] on cluster [null]"))
    status, body = get(endpoint.admin_url + "/admin/v2/brokers/health", basic("bob", "pw"))
    assert status == 401 and json.loads(body)["reason"].startswith(
        "Unauthorized to validateBothSuperuserAndBrokerOperation for originalPrincipal [null] and clientAppId [bob] "
        "about operation [HEALTH_CHECK] on broker [127.0.0.1:")
    assert get(endpoint.admin_url + "/admin/v2/brokers/health", basic("alice", "hunter2"))[0] == 200
    # refused credentials, naming no method: the anonymous role; naming basic: 401
    assert refusal(get(tenants, basic("alice", "wrong"))) == (401, list_tenants_refused("guest"))
    assert refusal(get(tenants, basic("nobody", "x"))) == (401, list_tenants_refused("guest"))
    assert refusal(get(tenants)) == (401, list_tenants_refused("guest"))
    for refused in (basic("alice", "wrong", "basic"), basic("nobody", "x", "basic"), basic("alice", "hunter2", "tls")):
        assert_authentication_refused(get(tenants, refused), refused)


def test_admin_rest_over_https_with_the_client_certificate(endpoint: Secured) -> None:
    tenants = endpoint.https_url + "/admin/v2/tenants"
    status, body = get(tenants, context=endpoint.https("admin"))
    assert status == 200 and "public" in json.loads(body)
    assert get(tenants, {"X-Pulsar-Auth-Method-Name": "tls"}, endpoint.https("admin"))[0] == 200
    assert refusal(get(tenants, context=endpoint.https("user"))) == (401, list_tenants_refused("tls-user"))
    assert refusal(get(tenants, context=endpoint.https(None))) == (401, list_tenants_refused("guest"))
    assert get(tenants, basic("alice", "hunter2"), endpoint.https(None))[0] == 200  # basic works over HTTPS too
    assert_authentication_refused(get(tenants, {"X-Pulsar-Auth-Method-Name": "tls"}, endpoint.https(None)), {})
