"""kop/security/sasl/plain.py and kop/security/tokens.py: SASL/PLAIN against configured users and, KoP's
way, against Pulsar tokens (``token:<jwt>``), with keys in Pulsar's formats."""

from __future__ import annotations

import asyncio
import base64
import time

import jwt
import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from kafka.net.sasl.plain import SaslMechanismPlain

from kop.security.principal import KafkaPrincipal
from kop.security.sasl import Failure, IllegalSaslState, Success, session_lifetime_ms
from kop.security.sasl.plain import PlainServer, PulsarTokenCredentials, StaticUsers
from kop.security.tokens import InvalidToken, PulsarTokenValidator, bearer_token, read_key_value

SECRET = b"0123456789abcdef0123456789abcdef"  # 256 bits, as `pulsar tokens create-secret-key`


def run(server: PlainServer, data: bytes):
    return asyncio.run(server.evaluate(data))


def plain(user: str, password: str, authzid: str = "") -> bytes:
    return f"{authzid}\0{user}\0{password}".encode()


# --- configured users (Kafka's JAAS user_<name>) --------------------------------------------------------

USERS = StaticUsers({"alice": "alice-secret", "bob": "bob-secret"})


def test_kafka_python_plain_client_is_accepted():
    client = SaslMechanismPlain(sasl_plain_username="alice", sasl_plain_password="alice-secret")
    step = run(PlainServer(USERS), client.auth_bytes())  # kafka-python sends authzid = username
    assert step == Success(KafkaPrincipal.user("alice"), b"")
    client.receive(step.data)
    assert client.is_authenticated()


@pytest.mark.parametrize("data, message", [
    (plain("alice", "wrong"), "Authentication failed: Invalid username or password"),
    (plain("mallory", "x"), "Authentication failed: Invalid username or password"),
    (plain("", "x"), "Authentication failed: username not specified"),
    (plain("alice", ""), "Authentication failed: password not specified"),
    (plain("alice", "alice-secret", authzid="bob"),
     "Authentication failed: Client requested an authorization id that is different from username"),
    (b"alice\0alice-secret", "Invalid SASL/PLAIN response: expected 3 tokens, got 2"),
    (b"a\0b\0c\0d\0e", "Invalid SASL/PLAIN response: expected 3 tokens, got 4"),
])
def test_plain_failures_carry_kafkas_messages(data, message):
    step = run(PlainServer(USERS), data)
    assert isinstance(step, Failure)
    assert step.client_message("PLAIN") == message
    assert "secret" not in step.reason


def test_no_second_token_after_the_exchange():
    server = PlainServer(USERS)
    assert isinstance(run(server, plain("alice", "alice-secret")), Success)
    with pytest.raises(IllegalSaslState):
        run(server, plain("alice", "alice-secret"))


# --- Pulsar tokens --------------------------------------------------------------------------------------


def hs_token(claims: dict, key: bytes = SECRET, alg: str = "HS256") -> str:
    return jwt.encode(claims, key, algorithm=alg)


def test_secret_key_formats_as_pulsar_accepts(tmp_path):
    (tmp_path / "secret.key").write_bytes(SECRET)
    b64 = base64.b64encode(SECRET).decode()
    for value in (f"file://{tmp_path}/secret.key", f"file:{tmp_path}/secret.key", f"data:;base64,{b64}", b64):
        assert read_key_value(value) == SECRET
        v = PulsarTokenValidator(secret_key=value)
        assert v.validate(hs_token({"sub": "alice"})).role == "alice"


def test_token_plain_principal_is_the_sub_and_username_the_tenant():
    exp = int(time.time()) + 600
    server = PlainServer(PulsarTokenCredentials(PulsarTokenValidator(secret_key=SECRET)))
    token = hs_token({"sub": "alice", "exp": exp})
    step = run(server, plain("public/default", f"token:{token}", authzid="ignored"))
    assert step == Success(KafkaPrincipal.user("alice"), b"", exp * 1000, tenant="public/default")
    lifetime, ends = session_lifetime_ms(exp * 1000 - 5000, 0, step.expires_at_ms)
    assert lifetime == 5000 and ends == exp * 1000


def test_token_plain_checks_the_tenant_with_multi_tenant_metadata():
    """With kafkaEnableMultiTenantMetadata the username must name a tenant (namespace = kafkaNamespace) or
    tenant/namespace; it comes out as tenant/namespace. Without it, the username is kept as it is."""
    token = hs_token({"sub": "alice"})
    checked = PulsarTokenCredentials(PulsarTokenValidator(secret_key=SECRET), default_namespace="default")
    assert run(PlainServer(checked), plain("A", f"token:{token}")).tenant == "A/default"
    assert run(PlainServer(checked), plain("A/ns", f"token:{token}")).tenant == "A/ns"
    step = run(PlainServer(checked), plain("a/b/c", f"token:{token}"))
    assert isinstance(step, Failure) and step.public
    assert step.reason == "Authentication failed: username 'a/b/c' must name a tenant or tenant/namespace"
    unchecked = PulsarTokenCredentials(PulsarTokenValidator(secret_key=SECRET))
    assert run(PlainServer(unchecked), plain("a/b/c", f"token:{token}")).tenant == "a/b/c"


def test_rs256_public_key_in_pulsars_der_form(tmp_path):
    priv = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    der = priv.public_key().public_bytes(serialization.Encoding.DER,
                                         serialization.PublicFormat.SubjectPublicKeyInfo)
    (tmp_path / "public.key").write_bytes(der)
    v = PulsarTokenValidator(public_key=f"file://{tmp_path}/public.key")
    assert v.validate(jwt.encode({"sub": "svc"}, priv, algorithm="RS256")).role == "svc"
    # A token signed with the HMAC algorithm and the public key's bytes as secret (key confusion) fails,
    # and so does an HS256 token: a public-key broker accepts only its key's family.
    with pytest.raises(InvalidToken):
        v.validate(hs_token({"sub": "svc"}))
    other = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    with pytest.raises(InvalidToken, match="signature"):
        v.validate(jwt.encode({"sub": "svc"}, other, algorithm="RS256"))
    ec_key = ec.generate_private_key(ec.SECP256R1())
    ec_pem = ec_key.public_key().public_bytes(serialization.Encoding.PEM,
                                              serialization.PublicFormat.SubjectPublicKeyInfo)
    ev = PulsarTokenValidator(public_key=ec_pem, public_alg="ES256")
    assert ev.validate(jwt.encode({"sub": "e"}, ec_key, algorithm="ES256")).role == "e"


# Tokens are made when the test runs, not at collection: a whole suite can take longer than a time claim's
# margin, and "not valid yet" made at collection is valid by the time the test runs.
@pytest.mark.parametrize("make_token, reason", [
    (lambda: hs_token({"sub": "alice", "exp": int(time.time()) - 60}), "expired"),
    (lambda: hs_token({"sub": "alice", "nbf": int(time.time()) + 600}), "not valid yet"),
    (lambda: hs_token({"sub": "alice"}, key=b"another-secret-another-secret-32"), "signature"),
    (lambda: jwt.encode({"sub": "alice"}, None, algorithm="none"), "algorithm"),
    (lambda: hs_token({"role": "alice"}), "'sub'"),
    (lambda: "not-a-jwt", "malformed"),
], ids=["expired", "not-valid-yet", "signature", "alg-none", "no-sub", "malformed"])
def test_refused_tokens(make_token, reason):
    token = make_token()
    server = PlainServer(PulsarTokenCredentials(PulsarTokenValidator(secret_key=SECRET)))
    step = run(server, plain("public", f"token:{token}"))
    assert isinstance(step, Failure) and step.public
    assert reason in step.reason
    assert token not in step.reason


def test_password_must_be_method_colon_credential():
    server = PlainServer(PulsarTokenCredentials(PulsarTokenValidator(secret_key=SECRET)))
    assert "token:<jwt>" in run(server, plain("public", hs_token({"sub": "a"}))).reason
    step = run(PlainServer(PulsarTokenCredentials(PulsarTokenValidator(secret_key=SECRET))),
               plain("public", "tls:abc"))
    assert isinstance(step, Failure) and "'tls'" in step.reason


def test_role_claim_list_audience_and_clock_skew():
    v = PulsarTokenValidator(secret_key=SECRET, auth_claim="roles", audience_claim="aud", audience="kop")
    assert v.validate(hs_token({"roles": ["admin", "x"], "aud": ["kop", "y"]})).role == "admin"
    with pytest.raises(InvalidToken, match="aud"):
        v.validate(hs_token({"roles": "admin", "aud": "pulsar"}))
    just_expired = hs_token({"sub": "a", "exp": int(time.time()) - 5})
    assert PulsarTokenValidator(secret_key=SECRET, allowed_clock_skew_seconds=60).validate(just_expired)
    with pytest.raises(ValueError):
        PulsarTokenValidator(secret_key=SECRET, audience_claim="aud")


def test_bearer_header():
    assert bearer_token("Bearer abc.def") == "abc.def"
    assert bearer_token("bearer  abc ") == "abc"
    assert bearer_token("Basic abc") is None and bearer_token(None) is None and bearer_token("Bearer ") is None


def test_session_lifetime_rules():
    assert session_lifetime_ms(1000, 0, None) == (0, None)  # nothing expires
    assert session_lifetime_ms(1000, 60_000, None) == (60_000, 61_000)
    assert session_lifetime_ms(1000, 60_000, 11_000) == (10_000, 11_000)
    # An expired credential: 0 is sent and the session is over now (KAFKA-13848).
    assert session_lifetime_ms(5000, 0, 4000) == (0, 5000)
