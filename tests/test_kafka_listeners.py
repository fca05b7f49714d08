"""kop/kafka/listeners.py and kop/net/tls.py: each listener's protocol and TLS context, and the SASL
mechanisms' credentials, built from the configuration (certificates made here with `cryptography`)."""

from __future__ import annotations

import asyncio
import base64
import ssl
import time
from pathlib import Path

import jwt
import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.x509.oid import NameOID

from kop.config import BrokerConfig, ConfigError
from kop.kafka.listeners import SaslMechanisms, listener_security, read_users_file
from kop.security.sasl import Failure, Success
from tests.support.certs import CertAuthority, name

SECRET = b"k" * 32


def pki(d: Path) -> dict[str, str]:
    ca = CertAuthority()
    (d / "ca.pem").write_bytes(ca.cert.public_bytes(serialization.Encoding.PEM))
    cert = ca.issue(name((NameOID.COMMON_NAME, "broker")), ips=["127.0.0.1"])
    (d / "b.pem").write_bytes(cert.cert_pem)
    (d / "b.key").write_bytes(cert.key_pem)
    return {"tlsCertificateFilePath": str(d / "b.pem"), "tlsKeyFilePath": str(d / "b.key")}


def config(**kv: str) -> BrokerConfig:
    return BrokerConfig.from_strings(kv)


def test_protocols_and_client_certificate_modes(tmp_path: Path) -> None:
    keys = pki(tmp_path)
    listeners = {"kafkaListeners": "A://127.0.0.1:0,B://127.0.0.1:0,PLAINTEXT://127.0.0.1:0",
                 "kafkaProtocolMap": "A:SSL,B:SASL_SSL", "authenticationEnabled": "true",
                 "saslPlainUsersFile": str(tmp_path / "u")}
    (tmp_path / "u").write_text("x=y\n")
    sec = listener_security(config(**listeners, **keys))
    assert {n: s.protocol for n, s in sec.items()} == {"A": "SSL", "B": "SASL_SSL", "PLAINTEXT": "PLAINTEXT"}
    assert sec["PLAINTEXT"].ssl_context is None and not sec["A"].sasl and sec["B"].sasl
    assert sec["A"].ssl_context.verify_mode == ssl.CERT_NONE  # no trust bundle: certificates not asked for
    trusted = {**keys, "tlsTrustCertsFilePath": str(tmp_path / "ca.pem")}
    sec = listener_security(config(**listeners, **trusted))
    assert sec["A"].ssl_context.verify_mode == ssl.CERT_OPTIONAL  # requested
    assert sec["B"].ssl_context.verify_mode == ssl.CERT_NONE  # SASL_SSL: the principal comes from SASL
    sec = listener_security(config(**listeners, **trusted, tlsRequireTrustedClientCertOnConnect="true"))
    assert sec["A"].ssl_context.verify_mode == ssl.CERT_REQUIRED
    only13 = listener_security(config(**listeners, **keys, tlsProtocols="TLSv1.3"))["A"].ssl_context
    assert only13.minimum_version == ssl.TLSVersion.TLSv1_3


def test_bad_tls_files_and_settings_stop_start_up(tmp_path: Path) -> None:
    keys = pki(tmp_path)
    ssl_listener = {"kafkaListeners": "SSL://127.0.0.1:0"}
    (tmp_path / "garbage.pem").write_text("not a certificate")
    with pytest.raises(ConfigError, match="tlsCertificateFilePath/tlsKeyFilePath"):
        listener_security(config(**ssl_listener, **{**keys, "tlsCertificateFilePath": str(tmp_path / "garbage.pem")}))
    with pytest.raises(ConfigError, match="tlsTrustCertsFilePath"):
        listener_security(config(**ssl_listener, **keys, tlsTrustCertsFilePath=str(tmp_path / "missing.pem")))
    with pytest.raises(ConfigError, match="tlsCiphers"):
        listener_security(config(**ssl_listener, **keys, tlsCiphers="NO-SUCH-CIPHER"))
    with pytest.raises(ConfigError, match="tlsProtocols"):
        config(**ssl_listener, **keys, tlsProtocols="SSLv3")
    with pytest.raises(ConfigError, match="tlsRequireTrustedClientCertOnConnect"):
        config(**ssl_listener, **keys, tlsRequireTrustedClientCertOnConnect="true")


def test_users_file(tmp_path: Path) -> None:
    p = tmp_path / "users"
    p.write_text("# comment\n\nalice=pa=ss\n bob = secret\n")
    assert read_users_file(str(p)) == {"alice": "pa=ss", "bob": " secret"}
    p.write_text("no-equals-sign\n")
    with pytest.raises(ConfigError, match=":1: expected user=password"):
        read_users_file(str(p))
    with pytest.raises(ConfigError, match="cannot read"):
        read_users_file(str(tmp_path / "absent"))


async def test_plain_takes_users_and_tokens_side_by_side(tmp_path: Path) -> None:
    (tmp_path / "users").write_text("alice=alice-pw\n")
    cfg = config(kafkaListeners="SASL_PLAINTEXT://127.0.0.1:0", authenticationEnabled="true",
                 saslPlainUsersFile=str(tmp_path / "users"),
                 authenticationProviders="org.apache.pulsar.broker.authentication.AuthenticationProviderToken",
                 tokenSecretKey="data:;base64," + base64.b64encode(SECRET).decode(),
                 saslAllowedMechanisms="PLAIN,SCRAM-SHA-256")
    mechs = SaslMechanisms(cfg, None)
    with pytest.raises(ConfigError, match="credential store"):
        await mechs.start()  # SCRAM without its store is a wiring bug, caught at start
    token = jwt.encode({"sub": "role-1", "exp": int(time.time()) + 60}, SECRET, algorithm="HS256")

    async def step(user: str, password: str, authzid: str = ""):
        server = mechs.server("PLAIN")
        assert server is not None
        return await server.evaluate(f"{authzid}\0{user}\0{password}".encode())

    ok = await step("tenant-a", f"token:{token}", authzid="ignored")  # KoP: the authzid is not checked
    # The tenant comes back as tenant/namespace, the namespace being kafkaNamespace when the username names none.
    assert isinstance(ok, Success) and (str(ok.principal), ok.tenant) == ("User:role-1", "tenant-a/default")
    ok = await step("alice", "alice-pw")
    assert isinstance(ok, Success) and str(ok.principal) == "User:alice" and ok.tenant is None
    bad = await step("alice", "alice-pw", authzid="bob")  # a users-file login keeps Kafka's authzid rule
    assert isinstance(bad, Failure)
    assert isinstance(await step("alice", "token:forged.jwt.value"), Failure)
    assert mechs.server("GSSAPI") is None and mechs.server("OAUTHBEARER") is None


def test_unreachable_jwks_fails_start_from_config() -> None:
    cfg = config(kafkaListeners="SASL_PLAINTEXT://127.0.0.1:0", authenticationEnabled="true",
                 saslAllowedMechanisms="OAUTHBEARER", saslOauthbearerJwksEndpointUrl="file:///nonexistent/jwks.json",
                 saslOauthbearerJwksEndpointRetryBackoffMaxMs="0")
    with pytest.raises(ConfigError, match="saslOauthbearerJwksEndpointUrl"):
        asyncio.run(SaslMechanisms(cfg, None).start())
    with pytest.raises(ConfigError, match="saslOauthbearerJwksEndpointUrl"):
        SaslMechanisms(config(kafkaListeners="SASL_PLAINTEXT://127.0.0.1:0", authenticationEnabled="true",
                              saslAllowedMechanisms="OAUTHBEARER", saslOauthbearerJwksEndpointUrl="ftp://x/jwks"),
                       None)
