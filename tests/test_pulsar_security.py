"""The Pulsar port secured: kop/pulsar/session.py with authenticationEnabled takes Pulsar tokens (the same token
settings as the Kafka side's PLAIN tokens), through the real Python Pulsar client; a missing, expired or
forged token is an AuthenticationError and a closed connection, and never reaches the log; and
brokerServicePortTls: pulsar+ssl:// with a certificate of a CA made by the test."""

from __future__ import annotations

import base64
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import jwt
import pulsar
import pytest

from tests.support.broker import KopBroker

SECRET = b"pulsar-token-secret-0123456789ab"


def token(sub: str, exp_in: int = 300, key: bytes = SECRET) -> str:
    return jwt.encode({"sub": sub, "exp": int(time.time()) + exp_in}, key, algorithm="HS256")


def _refused(url: str, credential: str | None) -> Exception | None:
    """The error creating a producer with this token (None: no authentication) gave, None when it was let in."""
    auth = pulsar.AuthenticationToken(credential) if credential else None
    c = pulsar.Client(url, authentication=auth, operation_timeout_seconds=5, connection_timeout_ms=5000)
    try:
        c.create_producer("persistent://public/default/authed")
    except Exception as e:  # noqa: BLE001 - the client's error class varies by cause
        return e
    finally:
        c.close()
    return None


def test_pulsar_clients_need_a_valid_token(tmp_path: Path) -> None:
    broker = KopBroker(tmp_path, {
        "authenticationEnabled": "true",
        "authenticationProviders": "org.apache.pulsar.broker.authentication.AuthenticationProviderToken",
        "tokenSecretKey": "data:;base64," + base64.b64encode(SECRET).decode(),
    }).start()
    try:
        good = token("pulsar-app")
        client = pulsar.Client(broker.pulsar_url, authentication=pulsar.AuthenticationToken(good),
                               operation_timeout_seconds=30)
        try:
            producer = client.create_producer("persistent://public/default/authed")
            producer.send(b"hello")
            consumer = client.subscribe("persistent://public/default/authed", "s",
                                        initial_position=pulsar.InitialPosition.Earliest)
            assert consumer.receive(timeout_millis=30000).data() == b"hello"
        finally:
            client.close()
        bad = [None, token("late", exp_in=-60), token("forged", key=b"f" * 32), "not-a-token"]
        # Side by side: a refused client retries until its operation timeout, so one after the other the
        # four would wait that out four times over.
        with ThreadPoolExecutor(len(bad)) as pool:
            refusals = list(pool.map(lambda credential: _refused(broker.pulsar_url, credential), bad))
        assert all(refusals), refusals
        log = broker.log_path.read_text(errors="replace")
        assert "authenticated principal=User:pulsar-app method=token" in log
        assert "token has expired" in log and "token signature does not verify" in log
        assert "No anonymous role, and no authentication provider configured (method 'none'" in log  # no token
        assert good not in log and SECRET.decode() not in log
    finally:
        broker.stop()


def test_pulsar_over_tls_with_a_token(tmp_path: Path) -> None:
    """brokerServicePortTls: pulsar+ssl:// with the broker certificate of a CA made here; LOOKUP hands the
    client our pulsar+ssl:// address (brokerServiceUrlTls), so it stays on TLS."""
    from cryptography.hazmat.primitives import serialization
    from cryptography.x509.oid import NameOID

    from tests.support.certs import CertAuthority, name
    from tests.support.net import free_port

    ca = CertAuthority()
    (tmp_path / "ca.pem").write_bytes(ca.cert.public_bytes(serialization.Encoding.PEM))
    cert = ca.issue(name((NameOID.COMMON_NAME, "kop-broker")), dns=["localhost"], ips=["127.0.0.1"])
    (tmp_path / "broker.pem").write_bytes(cert.cert_pem)
    (tmp_path / "broker.key").write_bytes(cert.key_pem)
    tls_port = free_port()
    broker = KopBroker(tmp_path / "b", {
        "brokerServicePortTls": tls_port, "tlsCertificateFilePath": tmp_path / "broker.pem",
        "tlsKeyFilePath": tmp_path / "broker.key", "authenticationEnabled": "true",
        "authenticationProviders": "org.apache.pulsar.broker.authentication.AuthenticationProviderToken",
        "tokenSecretKey": "data:;base64," + base64.b64encode(SECRET).decode(),
    }).start()
    try:
        client = pulsar.Client(f"pulsar+ssl://localhost:{tls_port}", tls_trust_certs_file_path=str(tmp_path / "ca.pem"),
                               tls_validate_hostname=True, authentication=pulsar.AuthenticationToken(token("tls-app")),
                               operation_timeout_seconds=30)
        try:
            producer = client.create_producer("persistent://public/default/over-tls")
            producer.send(b"secret payload")
            consumer = client.subscribe("persistent://public/default/over-tls", "s",
                                        initial_position=pulsar.InitialPosition.Earliest)
            assert consumer.receive(timeout_millis=30000).data() == b"secret payload"
        finally:
            client.close()
        # A client that does not trust our CA does not get in.
        untrusting = pulsar.Client(f"pulsar+ssl://localhost:{tls_port}", operation_timeout_seconds=5,
                                   connection_timeout_ms=5000,
                                   authentication=pulsar.AuthenticationToken(token("tls-app")))
        try:
            with pytest.raises(Exception):  # noqa: B017 - the client's error class varies by cause
                untrusting.create_producer("persistent://public/default/over-tls")
        finally:
            untrusting.close()
        log = broker.log_path.read_text(errors="replace")
        assert f"pulsar+ssl://127.0.0.1:{tls_port}" in log  # the listener line
        assert "authenticated principal=User:tls-app method=token" in log
    finally:
        broker.stop()

