"""Secured listeners end to end (issue #14): a broker subprocess with an SSL listener (client certificates
asked for, mapped by sslPrincipalMappingRules) and a SASL_SSL listener (PLAIN with users and Pulsar tokens,
SCRAM-SHA-256/512, OAUTHBEARER against a JWKS this test serves over HTTP on 127.0.0.1). The CA and every
certificate are made here with `cryptography`. Real clients produce and consume over each: kafka-python,
confluent-kafka, aiokafka and the Kafka 4.x Java tools. Then the bad input: plaintext bytes on a TLS port,
an untrusted or missing client certificate where one is required, wrong passwords, expired and forged
tokens - each a closed connection or Kafka's error, with no secret in the broker's log."""

from __future__ import annotations

import asyncio
import json
import socket
import ssl
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import jwt
import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.x509.oid import NameOID

from kop.config import BrokerConfig
from kop.security.metadata_stores import MetadataScramCredentialStore
from kop.security.sasl.scram import ScramCredential
from kop.server.storage import open_embedded_storage
from tests.support.broker import KopBroker
from tests.support.certs import CertAuthority, name
from tests.support.clients import send_one_or_error
from tests.support.net import free_port
from tests.support.wire import WireClient
from tests.test_security_sasl_oauthbearer import AUDIENCE, ISSUER, IdP

TOKEN_SECRET = b"0123456789abcdef0123456789abcdef"  # HS256 secret of the Pulsar tokens
PASSWORDS = {"alice": "alice-secret", "carol": "carol-scram-secret"}
RULES = "RULE:^CN=([A-Za-z]+),O=kop-clients$/$1/L,DEFAULT"


def pulsar_token(sub: str, exp_in: int = 300, key: bytes = TOKEN_SECRET) -> str:
    return jwt.encode({"sub": sub, "exp": int(time.time()) + exp_in}, key, algorithm="HS256")


class IdPServer:
    """GET /jwks.json (the broker's keys) and POST /token (client_credentials, for the Java client)."""

    def __init__(self) -> None:
        self.idp = IdP()
        idp = self.idp

        class Handler(BaseHTTPRequestHandler):
            def _json(self, body: dict) -> None:
                data = json.dumps(body).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def do_GET(self) -> None:  # noqa: N802
                self._json(idp.jwks())

            def do_POST(self) -> None:  # noqa: N802
                self.rfile.read(int(self.headers.get("Content-Length", 0)))
                self._json({"access_token": idp.token(sub="java-app"), "token_type": "Bearer", "expires_in": 300})

            def log_message(self, *args: object) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()


@dataclass
class Secured:
    broker: KopBroker
    ssl_port: int
    sasl_port: int
    dir: Path
    idp: IdPServer

    @property
    def ssl_bootstrap(self) -> str:
        return f"127.0.0.1:{self.ssl_port}"

    @property
    def sasl_bootstrap(self) -> str:
        return f"127.0.0.1:{self.sasl_port}"

    def path(self, name: str) -> str:
        return str(self.dir / name)


def write_pki(d: Path) -> None:
    ca = CertAuthority()
    (d / "ca.pem").write_bytes(ca.cert.public_bytes(serialization.Encoding.PEM))
    broker = ca.issue(name((NameOID.COMMON_NAME, "kop-broker")), dns=["localhost"], ips=["127.0.0.1"])
    (d / "broker.pem").write_bytes(broker.cert_pem)
    (d / "broker.key").write_bytes(broker.key_pem)
    client = ca.issue(name((NameOID.ORGANIZATION_NAME, "kop-clients"), (NameOID.COMMON_NAME, "Alice")))
    (d / "client.pem").write_bytes(client.cert_pem)
    (d / "client.key").write_bytes(client.key_pem)
    (d / "client-keystore.pem").write_bytes(client.key_pem + client.cert_pem)  # Java's PEM keystore
    rogue_ca = CertAuthority("rogue CA")
    rogue = rogue_ca.issue(name((NameOID.ORGANIZATION_NAME, "kop-clients"), (NameOID.COMMON_NAME, "mallory")))
    (d / "rogue.pem").write_bytes(rogue.cert_pem)
    (d / "rogue.key").write_bytes(rogue.key_pem)


def add_scram_users(data_dir: Path) -> None:
    async def main() -> None:
        storage = await open_embedded_storage(data_dir, BrokerConfig())
        store = MetadataScramCredentialStore(storage.metadata_store)
        for mech in ("SCRAM-SHA-256", "SCRAM-SHA-512"):
            await store.put("carol", mech, ScramCredential.from_password(mech, PASSWORDS["carol"], iterations=8192))
        await storage.close()

    asyncio.run(main())


@pytest.fixture(scope="module")
def secured(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Secured]:
    d = tmp_path_factory.mktemp("secured")
    write_pki(d)
    (d / "users.txt").write_text(f"alice={PASSWORDS['alice']}\n")
    (d / "token.key").write_bytes(TOKEN_SECRET)
    idp = IdPServer()
    ssl_port, sasl_port = free_port(), free_port()
    broker = KopBroker(d / "broker", {
        "kafkaListeners": f"SSL://127.0.0.1:{ssl_port},EXTERNAL://127.0.0.1:{sasl_port}",
        "kafkaProtocolMap": "EXTERNAL:SASL_SSL",
        "tlsCertificateFilePath": d / "broker.pem", "tlsKeyFilePath": d / "broker.key",
        "tlsTrustCertsFilePath": d / "ca.pem", "sslPrincipalMappingRules": RULES,
        "authenticationEnabled": "true",
        "authenticationProviders": "org.apache.pulsar.broker.authentication.AuthenticationProviderToken",
        "tokenSecretKey": f"file://{d / 'token.key'}", "saslPlainUsersFile": d / "users.txt",
        "saslAllowedMechanisms": "PLAIN,SCRAM-SHA-256,SCRAM-SHA-512,OAUTHBEARER",
        "saslOauthbearerJwksEndpointUrl": f"{idp.url}/jwks.json", "saslOauthbearerExpectedIssuer": ISSUER,
        "saslOauthbearerExpectedAudience": AUDIENCE, "messagingProtocols": "kafka",
        "groupInitialRebalanceDelayMs": "0",
    }, port=ssl_port)
    add_scram_users(broker.data_dir)
    broker.start()
    yield Secured(broker, ssl_port, sasl_port, d, idp)
    broker.stop()
    idp.close()
    log = broker.log_path.read_text(errors="replace")
    for secret in (*PASSWORDS.values(), TOKEN_SECRET.decode()):
        assert secret not in log, "a secret reached the broker's log"


# ------------------------------------------------------------------------------------- client settings

def kafka_python_sasl(s: Secured, mech: str, user: str = "", password: str = "", provider=None) -> dict:
    conf = dict(bootstrap_servers=s.sasl_bootstrap, security_protocol="SASL_SSL", ssl_cafile=s.path("ca.pem"),
                sasl_mechanism=mech)
    if provider is not None:
        conf["sasl_oauth_token_provider"] = provider
    else:
        conf.update(sasl_plain_username=user, sasl_plain_password=password)
    return conf


def roundtrip_kafka_python(conf: dict, topic: str, value: bytes) -> None:
    from kafka import KafkaConsumer, KafkaProducer

    p = KafkaProducer(**conf)
    p.send(topic, value).get(timeout=60)
    p.close()
    # stops at the value; the timeout (no record for 60 s) only guards against a hang
    c = KafkaConsumer(topic, auto_offset_reset="earliest", consumer_timeout_ms=60000, **conf)
    got = []
    for m in c:
        got.append(m.value)
        if m.value == value:
            break
    c.close()
    assert value in got


def roundtrip_confluent(conf: dict, topic: str, value: bytes) -> None:
    import confluent_kafka as ck

    p = ck.Producer(conf)
    p.produce(topic, value)
    assert p.flush(60) == 0
    c = ck.Consumer({**conf, "group.id": f"g-{topic}", "auto.offset.reset": "earliest"})
    c.subscribe([topic])
    got = []
    for _ in range(60):
        m = c.poll(1)
        if m is not None and m.error() is None:
            got.append(m.value())
            if value in got:
                break
    c.close()
    assert value in got


async def roundtrip_aiokafka(conf: dict, topic: str, value: bytes) -> None:
    from aiokafka import AIOKafkaConsumer, AIOKafkaProducer

    p = AIOKafkaProducer(**conf)
    await p.start()
    try:
        await p.send_and_wait(topic, value)
    finally:
        await p.stop()
    c = AIOKafkaConsumer(topic, auto_offset_reset="earliest", **conf)
    await c.start()
    try:
        m = await asyncio.wait_for(c.getone(), 60)
    finally:
        await c.stop()
    assert m.value == value


def java_roundtrip(java_tools, bootstrap: str, props: dict[str, str], d: Path, topic: str,
                   jvm_opts: list[str] | None = None) -> None:
    cfg = d / f"java-{topic}.properties"
    cfg.write_text("".join(f"{k}={v}\n" for k, v in props.items()))
    opts = None if jvm_opts is None else ["-Xmx256m", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1", *jvm_opts]
    java_tools.run("kafka-console-producer", "--bootstrap-server", bootstrap, "--topic", topic,
                   "--command-config", cfg, input="java-1\njava-2\n", check=True, jvm_opts=opts)
    r = java_tools.run("kafka-console-consumer", "--bootstrap-server", bootstrap, "--topic", topic,
                       "--command-config", cfg, "--from-beginning", "--max-messages", "2", "--timeout-ms", "60000",
                       check=True, jvm_opts=opts)
    assert r.lines == ["java-1", "java-2"], r.stderr[-3000:]


def java_ssl(s: Secured) -> dict[str, str]:
    return {"ssl.truststore.type": "PEM", "ssl.truststore.location": s.path("ca.pem")}


def plain_jaas(user: str, password: str) -> str:
    return f'org.apache.kafka.common.security.plain.PlainLoginModule required username="{user}" password="{password}";'


def scram_jaas(user: str, password: str) -> str:
    return f'org.apache.kafka.common.security.scram.ScramLoginModule required username="{user}" password="{password}";'


# ------------------------------------------------------------------------------------- SSL and mTLS

def test_ssl_and_mtls_with_every_client(secured: Secured, java_tools) -> None:
    s = secured
    base = dict(bootstrap_servers=s.ssl_bootstrap, security_protocol="SSL", ssl_cafile=s.path("ca.pem"))
    roundtrip_kafka_python(base, "ssl-kp", b"no client certificate")
    roundtrip_kafka_python({**base, "ssl_certfile": s.path("client.pem"), "ssl_keyfile": s.path("client.key")},
                           "mtls-kp", b"with a client certificate")
    ck = {"bootstrap.servers": s.ssl_bootstrap, "security.protocol": "SSL", "ssl.ca.location": s.path("ca.pem")}
    roundtrip_confluent(ck, "ssl-ck", b"librdkafka without a certificate")
    roundtrip_confluent({**ck, "ssl.certificate.location": s.path("client.pem"),
                         "ssl.key.location": s.path("client.key")}, "mtls-ck", b"librdkafka")
    from aiokafka.helpers import create_ssl_context

    asyncio.run(roundtrip_aiokafka(dict(bootstrap_servers=s.ssl_bootstrap, security_protocol="SSL",
                                        ssl_context=create_ssl_context(cafile=s.path("ca.pem"))),
                                   "ssl-ak", b"aiokafka without a certificate"))
    ctx = create_ssl_context(cafile=s.path("ca.pem"), certfile=s.path("client.pem"), keyfile=s.path("client.key"))
    asyncio.run(roundtrip_aiokafka(dict(bootstrap_servers=s.ssl_bootstrap, security_protocol="SSL", ssl_context=ctx),
                                   "mtls-ak", b"aiokafka"))
    java_roundtrip(java_tools, s.ssl_bootstrap, {"security.protocol": "SSL", **java_ssl(s)}, s.dir, "ssl-java")
    java_roundtrip(java_tools, s.ssl_bootstrap, {
        "security.protocol": "SSL", **java_ssl(s), "ssl.keystore.type": "PEM",
        "ssl.keystore.location": s.path("client-keystore.pem")}, s.dir, "mtls-java")
    log = s.broker.log_path.read_text(errors="replace")
    # The certificate's subject O=kop-clients,CN=Alice is mapped by the rule to the lower-cased CN.
    assert "principal=User:alice mechanism=SSL" in log


def test_tls_bad_input_is_refused_without_harm(secured: Secured) -> None:
    s = secured
    # Plaintext Kafka bytes on the TLS port: the handshake fails, the connection is closed.
    with socket.create_connection(("127.0.0.1", s.ssl_port), timeout=30) as sock:
        sock.sendall(b"\x00\x00\x00\x0a\x00\x12\x00\x00\x00\x00\x00\x01\x00\x00")
        received = b""
        while chunk := sock.recv(100):  # perhaps a TLS alert, then EOF: never a Kafka answer
            received += chunk
        assert not received.startswith(b"\x00\x00")
    # A certificate from another CA: refused in the handshake.
    ctx = ssl.create_default_context(cafile=s.path("ca.pem"))
    ctx.load_cert_chain(s.path("rogue.pem"), s.path("rogue.key"))
    with pytest.raises((ssl.SSLError, ConnectionError, OSError)):
        with socket.create_connection(("127.0.0.1", s.ssl_port), timeout=30) as raw, \
                ctx.wrap_socket(raw, server_hostname="127.0.0.1") as tls:
            tls.sendall(b"\x00\x00\x00\x01\x00")
            assert tls.recv(1) == b""
            raise ConnectionError("closed")
    # The broker still serves everyone else.
    roundtrip_kafka_python(dict(bootstrap_servers=s.ssl_bootstrap, security_protocol="SSL",
                                ssl_cafile=s.path("ca.pem")), "ssl-after-bad", b"still fine")


# ------------------------------------------------------------------------------------- SASL_SSL

def test_sasl_ssl_plain_users_and_tokens(secured: Secured, java_tools) -> None:
    s = secured
    roundtrip_kafka_python(kafka_python_sasl(s, "PLAIN", "alice", PASSWORDS["alice"]), "plain-kp", b"users")
    token = pulsar_token("app-role")
    roundtrip_kafka_python(kafka_python_sasl(s, "PLAIN", "public/default", f"token:{token}"), "token-kp", b"token")
    ck = {"bootstrap.servers": s.sasl_bootstrap, "security.protocol": "SASL_SSL", "ssl.ca.location": s.path("ca.pem"),
          "sasl.mechanism": "PLAIN"}
    roundtrip_confluent({**ck, "sasl.username": "alice", "sasl.password": PASSWORDS["alice"]}, "plain-ck", b"u")
    roundtrip_confluent({**ck, "sasl.username": "public", "sasl.password": f"token:{token}"}, "token-ck", b"t")
    from aiokafka.helpers import create_ssl_context

    for user, password, topic in (("public", f"token:{token}", "token-ak"), ("alice", PASSWORDS["alice"], "plain-ak")):
        asyncio.run(roundtrip_aiokafka(dict(
            bootstrap_servers=s.sasl_bootstrap, security_protocol="SASL_SSL",
            ssl_context=create_ssl_context(cafile=s.path("ca.pem")), sasl_mechanism="PLAIN",
            sasl_plain_username=user, sasl_plain_password=password), topic, b"aio"))
    for user, password, topic in (("public", f"token:{token}", "token-java"),
                                  ("alice", PASSWORDS["alice"], "plain-java")):
        java_roundtrip(java_tools, s.sasl_bootstrap, {
            "security.protocol": "SASL_SSL", **java_ssl(s), "sasl.mechanism": "PLAIN",
            "sasl.jaas.config": plain_jaas(user, password)}, s.dir, topic)
    log = s.broker.log_path.read_text(errors="replace")
    assert "principal=User:app-role mechanism=PLAIN" in log and "principal=User:alice mechanism=PLAIN" in log


def test_sasl_ssl_scram(secured: Secured, java_tools) -> None:
    s = secured
    for mech in ("SCRAM-SHA-256", "SCRAM-SHA-512"):
        tag = mech[-3:]
        roundtrip_kafka_python(kafka_python_sasl(s, mech, "carol", PASSWORDS["carol"]), f"scram-kp-{tag}", b"kp")
        roundtrip_confluent({"bootstrap.servers": s.sasl_bootstrap, "security.protocol": "SASL_SSL",
                             "ssl.ca.location": s.path("ca.pem"), "sasl.mechanism": mech, "sasl.username": "carol",
                             "sasl.password": PASSWORDS["carol"]}, f"scram-ck-{tag}", b"ck")
        java_roundtrip(java_tools, s.sasl_bootstrap, {
            "security.protocol": "SASL_SSL", **java_ssl(s), "sasl.mechanism": mech,
            "sasl.jaas.config": scram_jaas("carol", PASSWORDS["carol"])}, s.dir, f"scram-java-{tag}")
    from aiokafka.helpers import create_ssl_context

    for mech in ("SCRAM-SHA-256", "SCRAM-SHA-512"):
        asyncio.run(roundtrip_aiokafka(dict(
            bootstrap_servers=s.sasl_bootstrap, security_protocol="SASL_SSL",
            ssl_context=create_ssl_context(cafile=s.path("ca.pem")), sasl_mechanism=mech,
            sasl_plain_username="carol", sasl_plain_password=PASSWORDS["carol"]), f"scram-ak-{mech[-3:]}", b"aio"))


def test_sasl_ssl_oauthbearer(secured: Secured, java_tools) -> None:
    s = secured
    from kafka.net.sasl.oauth import AbstractTokenProvider

    class Provider(AbstractTokenProvider):
        def token(self) -> str:
            return s.idp.idp.token(sub="kp-app")

    roundtrip_kafka_python(kafka_python_sasl(s, "OAUTHBEARER", provider=Provider()), "oauth-kp", b"kp")

    def oauth_cb(_config: str) -> tuple[str, float]:
        return s.idp.idp.token(sub="ck-app"), time.time() + 300

    roundtrip_confluent({"bootstrap.servers": s.sasl_bootstrap, "security.protocol": "SASL_SSL",
                         "ssl.ca.location": s.path("ca.pem"), "sasl.mechanism": "OAUTHBEARER",
                         "oauth_cb": oauth_cb}, "oauth-ck", b"ck")
    from aiokafka.abc import AbstractTokenProvider as AioProvider
    from aiokafka.helpers import create_ssl_context

    class AioTokens(AioProvider):
        async def token(self) -> str:
            return s.idp.idp.token(sub="ak-app")

    asyncio.run(roundtrip_aiokafka(dict(
        bootstrap_servers=s.sasl_bootstrap, security_protocol="SASL_SSL",
        ssl_context=create_ssl_context(cafile=s.path("ca.pem")), sasl_mechanism="OAUTHBEARER",
        sasl_oauth_token_provider=AioTokens()), "oauth-ak", b"aio"))
    token_url = f"{s.idp.url}/token"
    java_roundtrip(java_tools, s.sasl_bootstrap, {
        "security.protocol": "SASL_SSL", **java_ssl(s), "sasl.mechanism": "OAUTHBEARER",
        "sasl.login.callback.handler.class":
            "org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginCallbackHandler",
        "sasl.oauthbearer.token.endpoint.url": token_url,
        "sasl.jaas.config": 'org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule required '
                            'clientId="java" clientSecret="java-secret";'},
        s.dir, "oauth-java", jvm_opts=[f"-Dorg.apache.kafka.sasl.oauthbearer.allowed.urls={token_url}"])
    log = s.broker.log_path.read_text(errors="replace")
    for sub in ("kp-app", "ck-app", "ak-app", "java-app"):
        assert f"principal=User:{sub} mechanism=OAUTHBEARER" in log


def auth_error_of(conf: dict) -> object:
    """The error a confluent-kafka producer with `conf` reports first (it must report one)."""
    error = send_one_or_error(conf, "never")
    assert error is not None, "the record was acknowledged"
    return error


def test_sasl_ssl_refuses_bad_credentials(secured: Secured) -> None:
    import confluent_kafka as ck

    s = secured
    base = {"bootstrap.servers": s.sasl_bootstrap, "security.protocol": "SASL_SSL", "ssl.ca.location": s.path("ca.pem")}
    bad = [
        {"sasl.mechanism": "PLAIN", "sasl.username": "alice", "sasl.password": "wrong-password"},
        {"sasl.mechanism": "PLAIN", "sasl.username": "public",
         "sasl.password": f"token:{pulsar_token('late', exp_in=-60)}"},  # expired
        {"sasl.mechanism": "PLAIN", "sasl.username": "public",
         "sasl.password": f"token:{pulsar_token('forged', key=b'x' * 32)}"},  # forged
        {"sasl.mechanism": "SCRAM-SHA-256", "sasl.username": "carol", "sasl.password": "wrong-password"},
    ]
    idp = s.idp.idp
    for oauth in (idp.token(exp=int(time.time()) - 600), idp.token(iss="https://other-idp.test")):
        bad.append({"sasl.mechanism": "OAUTHBEARER",
                    "oauth_cb": lambda _config, token=oauth: (token, time.time() + 300)})
    errors = [auth_error_of({**base, **conf}) for conf in bad]
    assert [e.code() for e in errors] == [ck.KafkaError._AUTHENTICATION] * len(bad), errors
    assert not any("wrong-password" in str(e) for e in errors)  # the broker's message does not echo secrets
    log = s.broker.log_path.read_text(errors="replace")
    assert "token has expired" in log and "token signature does not verify" in log
    # OAUTHBEARER: the client hears {"status":"invalid_token"}, the log says why.
    assert "ExpiredSignatureError" in log and "InvalidIssuerError" in log
    # The metrics count them.
    import urllib.request

    text = urllib.request.urlopen(f"{s.broker.admin_url}/metrics", timeout=30).read().decode()
    failures = [ln for ln in text.splitlines() if ln.startswith("kop_server_authentications_total")
                and 'result="failure"' in ln]
    assert any('mechanism="PLAIN"' in ln for ln in failures) and any('SCRAM-SHA-256' in ln for ln in failures)


def test_required_client_certificates(tmp_path: Path) -> None:
    """tlsRequireTrustedClientCertOnConnect: no certificate, no connection."""
    write_pki(tmp_path)
    port = free_port()
    broker = KopBroker(tmp_path / "broker", {
        "kafkaListeners": f"SSL://127.0.0.1:{port}", "tlsCertificateFilePath": tmp_path / "broker.pem",
        "tlsKeyFilePath": tmp_path / "broker.key", "tlsTrustCertsFilePath": tmp_path / "ca.pem",
        "tlsRequireTrustedClientCertOnConnect": "true", "messagingProtocols": "kafka"}, port=port).start()
    try:
        ctx = ssl.create_default_context(cafile=str(tmp_path / "ca.pem"))
        with pytest.raises((ssl.SSLError, ConnectionError, OSError)):
            with socket.create_connection(("127.0.0.1", port), timeout=30) as raw, \
                    ctx.wrap_socket(raw, server_hostname="127.0.0.1") as tls:
                tls.sendall(b"\x00\x00\x00\x01\x00")
                if tls.recv(1) == b"":
                    raise ConnectionError("closed")
        roundtrip_kafka_python(dict(bootstrap_servers=f"127.0.0.1:{port}", security_protocol="SSL",
                                    ssl_cafile=str(tmp_path / "ca.pem"), ssl_certfile=str(tmp_path / "client.pem"),
                                    ssl_keyfile=str(tmp_path / "client.key")), "required", b"mtls")
    finally:
        broker.stop()


# ------------------------------------------------------------------------------------- against Apache Kafka

class TlsWire(WireClient):
    """tests/support/wire.py's client over TLS (kafka-python's protocol classes, not our codec)."""

    def __init__(self, bootstrap: str, cafile: str) -> None:
        host, port = bootstrap.rsplit(":", 1)
        ctx = ssl.create_default_context(cafile=cafile)
        self.sock = ctx.wrap_socket(socket.create_connection((host, int(port)), timeout=30), server_hostname=host)
        self.client_id = "kop-tests-tls"
        self._correlation_id = 0


def sasl_answers(bootstrap: str, cafile: str) -> list[tuple]:
    """What a broker answers to the SASL exchanges clients get wrong (and one they get right)."""
    from kafka.protocol.metadata import MetadataRequest
    from kafka.protocol.sasl import SaslAuthenticateRequest, SaslHandshakeRequest

    def closed(c: WireClient) -> bool:
        try:
            return c.sock.recv(1) == b""
        except (ConnectionResetError, ssl.SSLError):
            return True

    out: list[tuple] = []
    c = TlsWire(bootstrap, cafile)
    r = c.send(SaslHandshakeRequest(mechanism="GSSAPI"), 1)
    out.append(("unknown mechanism", r.error_code, list(r.mechanisms), closed(c)))
    for name_, token in (("wrong password", b"\0alice\0nope"), ("two fields", b"alice\0alice-secret"),
                         ("no password", b"\0alice\0"), ("no user", b"\0\0pw"),
                         ("authzid differs", b"bob\0alice\0alice-secret")):
        c = TlsWire(bootstrap, cafile)
        assert c.send(SaslHandshakeRequest(mechanism="PLAIN"), 1).error_code == 0
        r = c.send(SaslAuthenticateRequest(auth_bytes=token), 2)
        out.append((name_, r.error_code, r.error_message, closed(c)))
    c = TlsWire(bootstrap, cafile)
    assert c.send(SaslHandshakeRequest(mechanism="PLAIN"), 1).error_code == 0
    r = c.send(SaslAuthenticateRequest(auth_bytes=b"\0alice\0alice-secret"), 2)
    out.append(("good password", r.error_code, r.error_message, r.auth_bytes, r.session_lifetime_ms))
    r = c.send(SaslAuthenticateRequest(auth_bytes=b"\0alice\0alice-secret"), 2)
    out.append(("authenticate again", r.error_code))
    out.append(("then served", bool(c.send(MetadataRequest(topics=[]), 1).brokers)))
    c.close()
    return out


def test_sasl_answers_match_apache_kafka(tmp_path: Path, java_tools) -> None:
    """The same exchanges against Apache Kafka 4.x with the same user and mechanism give the same answers,
    and the kafka-python settings the tests above use work there too (so the tests are right)."""
    from tests.support.kafka_server import KafkaServer

    write_pki(tmp_path)
    (tmp_path / "broker-keystore.pem").write_bytes((tmp_path / "broker.key").read_bytes()
                                                   + (tmp_path / "broker.pem").read_bytes())
    (tmp_path / "users.txt").write_text("alice=alice-secret\n")
    kafka = KafkaServer(tmp_path / "kafka")
    sasl_port = free_port()
    kafka.extra.update({
        "listeners": f"PLAINTEXT://127.0.0.1:{kafka.port},CONTROLLER://127.0.0.1:{kafka.controller_port},"
                     f"SASL_SSL://127.0.0.1:{sasl_port}",
        "advertised.listeners": f"PLAINTEXT://127.0.0.1:{kafka.port},SASL_SSL://127.0.0.1:{sasl_port}",
        "listener.security.protocol.map": "CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT,SASL_SSL:SASL_SSL",
        "sasl.enabled.mechanisms": "PLAIN",
        "listener.name.sasl_ssl.plain.sasl.jaas.config":
            'org.apache.kafka.common.security.plain.PlainLoginModule required user_alice="alice-secret";',
        "ssl.keystore.type": "PEM", "ssl.keystore.location": str(tmp_path / "broker-keystore.pem"),
    })
    kop_port = free_port()
    kop = KopBroker(tmp_path / "kop", {
        "kafkaListeners": f"SASL_SSL://127.0.0.1:{kop_port}", "messagingProtocols": "kafka",
        "tlsCertificateFilePath": tmp_path / "broker.pem", "tlsKeyFilePath": tmp_path / "broker.key",
        "authenticationEnabled": "true", "saslPlainUsersFile": tmp_path / "users.txt",
    }, port=kop_port)
    ca = str(tmp_path / "ca.pem")
    with kafka:
        kop.start()
        try:
            ours, theirs = sasl_answers(kop.bootstrap, ca), sasl_answers(f"127.0.0.1:{sasl_port}", ca)
            assert ours == theirs
            conf = dict(security_protocol="SASL_SSL", ssl_cafile=ca, sasl_mechanism="PLAIN",
                        sasl_plain_username="alice", sasl_plain_password="alice-secret")
            roundtrip_kafka_python(dict(bootstrap_servers=f"127.0.0.1:{sasl_port}", **conf), "diff", b"kafka")
            roundtrip_kafka_python(dict(bootstrap_servers=kop.bootstrap, **conf), "diff", b"kop")
        finally:
            kop.stop()
