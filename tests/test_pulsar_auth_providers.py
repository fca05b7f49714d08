"""Basic (htpasswd) and TLS client-certificate authentication and `anonymousUserRole` on our broker (issue #22),
with the real pulsar-client and HTTP: kop/security/authn.py behind kop/pulsar/session.py and kop/admin/auth.py.

One broker: AuthenticationProviderBasic (alice with an apr1 hash, bob with a DES crypt one) and
AuthenticationProviderTls on brokerServicePortTls (client certificates of a CA made here), anonymousUserRole=guest,
authorizationEnabled with superUserRoles=alice,tls-client - so a role that authenticates but is no super user
(bob, guest) is refused by the authorizer, which shows the role it was given."""

from __future__ import annotations

import base64
import ssl
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pulsar
import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.x509.oid import NameOID

from tests.support.broker import KopBroker
from tests.support.certs import CertAuthority, name
from tests.support.net import free_port

PROVIDERS = "org.apache.pulsar.broker.authentication.AuthenticationProvider"
HTPASSWD = b"alice:$apr1$s4ltS4lt$WqSRSiuEvAv7Y9YmJUhP31\nbob:abzlUXK5ed5rs\n"  # hunter2 (openssl), pw (glibc)
TOPIC = "persistent://public/default/basic-auth"


@pytest.fixture(scope="module")
def certs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    d = tmp_path_factory.mktemp("pauth-certs")
    ca = CertAuthority()
    (d / "ca.pem").write_bytes(ca.cert.public_bytes(serialization.Encoding.PEM))
    for stem, subject, hosts in (("broker", "kop-broker", True), ("client", "tls-client", False)):
        issued = ca.issue(name((NameOID.ORGANIZATION_NAME, "kop"), (NameOID.COMMON_NAME, subject)),
                          dns=["localhost"] if hosts else None, ips=["127.0.0.1"] if hosts else None)
        (d / f"{stem}.pem").write_bytes(issued.cert_pem)
        (d / f"{stem}.key").write_bytes(issued.key_pem)
    return d


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory, certs: Path) -> Iterator[KopBroker]:
    b = KopBroker(tmp_path_factory.mktemp("pauth"), {
        "webServicePort": 0, "webServicePortTls": free_port(), "brokerServicePortTls": free_port(),
        "tlsCertificateFilePath": certs / "broker.pem", "tlsKeyFilePath": certs / "broker.key",
        "tlsTrustCertsFilePath": certs / "ca.pem",
        "authenticationEnabled": "true", "authenticationProviders": f"{PROVIDERS}Basic,{PROVIDERS}Tls",
        "basicAuthConf": "data:;base64," + base64.b64encode(HTPASSWD).decode(), "anonymousUserRole": "guest",
        "authorizationEnabled": "true", "superUserRoles": "alice,tls-client",
    }).start()
    try:
        yield b
    finally:
        b.stop()


def round_trip(client: pulsar.Client, topic: str) -> None:
    try:
        client.create_producer(topic).send(b"hello")
        consumer = client.subscribe(topic, "s", initial_position=pulsar.InitialPosition.Earliest)
        assert consumer.receive(timeout_millis=30000).data() == b"hello"
    finally:
        client.close()


def refused(client: pulsar.Client, error: type[Exception] = Exception) -> None:
    try:
        with pytest.raises(error):
            client.create_producer(TOPIC)
    finally:
        client.close()


def test_basic_users_on_the_pulsar_port(broker: KopBroker) -> None:
    round_trip(pulsar.Client(broker.pulsar_url, authentication=pulsar.AuthenticationBasic("alice", "hunter2"),
                             operation_timeout_seconds=30), TOPIC)
    # bob's DES crypt password authenticates him; he is no super user, so the authorizer refuses him
    refused(pulsar.Client(broker.pulsar_url, authentication=pulsar.AuthenticationBasic("bob", "pw"),
                          operation_timeout_seconds=30), pulsar.AuthorizationError)
    refused(pulsar.Client(broker.pulsar_url, authentication=pulsar.AuthenticationBasic("alice", "wrong"),
                          operation_timeout_seconds=3, connection_timeout_ms=3000))
    log = broker.log_path.read_text(errors="replace")
    assert "authenticated principal=User:alice method=basic" in log
    assert "authenticated principal=User:bob method=basic" in log
    assert "authentication failed: Unknown user or invalid password" in log
    assert "hunter2" not in log  # the password never reaches the log


def test_clients_without_credentials_are_the_anonymous_role(broker: KopBroker) -> None:
    refused(pulsar.Client(broker.pulsar_url, operation_timeout_seconds=30), pulsar.AuthorizationError)
    log = broker.log_path.read_text(errors="replace")
    assert "authenticated principal=User:guest method=anonymous" in log
    assert "Client is not authorized to" in log and "with role User:guest" in log


def get(url: str, headers: dict[str, str], context: ssl.SSLContext | None = None) -> int:
    try:
        with urllib.request.urlopen(urllib.request.Request(url, headers=headers), timeout=30, context=context) as resp:
            return resp.status
    except urllib.error.HTTPError as e:
        return e.code


def test_admin_rest_basic_and_anonymous(broker: KopBroker) -> None:
    url = broker.admin_url + "/admin/v2/persistent/public/default"
    alice = "Basic " + base64.b64encode(b"alice:hunter2").decode()
    wrong = "Basic " + base64.b64encode(b"alice:wrong").decode()
    assert get(url, {"Authorization": alice}) == 200
    assert get(url, {"Authorization": alice, "X-Pulsar-Auth-Method-Name": "basic"}) == 200
    assert get(url, {}) == 403  # guest: authenticated, but not a super user
    assert get(url, {"Authorization": wrong}) == 403  # as Pulsar: refused credentials fall back to guest
    assert get(url, {"Authorization": wrong, "X-Pulsar-Auth-Method-Name": "basic"}) == 401


def test_tls_client_certificate_names_the_role(broker: KopBroker, certs: Path) -> None:
    url = f"pulsar+ssl://localhost:{broker.overrides['brokerServicePortTls']}"
    tls = dict(tls_trust_certs_file_path=str(certs / "ca.pem"), tls_validate_hostname=True)
    round_trip(pulsar.Client(url, authentication=pulsar.AuthenticationTLS(str(certs / "client.pem"),
                                                                          str(certs / "client.key")),
                             operation_timeout_seconds=30, **tls), "persistent://public/default/tls-auth")
    assert "authenticated principal=User:tls-client method=tls" in broker.log_path.read_text(errors="replace")


def test_admin_rest_over_https_takes_the_client_certificate(broker: KopBroker, certs: Path) -> None:
    url = f"https://localhost:{broker.overrides['webServicePortTls']}/admin/v2/persistent/public/default"
    context = ssl.create_default_context(cafile=str(certs / "ca.pem"))
    assert get(url, {}, context) == 403  # no certificate: guest
    context.load_cert_chain(str(certs / "client.pem"), str(certs / "client.key"))
    assert get(url, {}, context) == 200  # tls-client, a super user
    assert get(url, {"X-Pulsar-Auth-Method-Name": "tls"}, context) == 200
