"""kop/security/sasl/oauthbearer.py and kop/security/jwks.py: OAUTHBEARER with KIP-768 validation against
a real JWKS endpoint served over HTTP on 127.0.0.1 by the test, and kafka-python's OAUTHBEARER client."""

from __future__ import annotations

import asyncio
import json
import ssl
import time

import jwt
import pytest
from aiohttp import web
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from cryptography.x509.oid import NameOID
from kafka.net.sasl.oauth import AbstractTokenProvider, SaslMechanismOAuth

from kop.security.jwks import JwksKeySource, JwksTokenValidator, TokenRejected
from kop.security.principal import KafkaPrincipal
from kop.security.sasl import Challenge, Failure, Success
from kop.security.sasl.oauthbearer import OAuthBearerServer, error_json
from tests.support.certs import CertAuthority, name

ISSUER, AUDIENCE = "https://idp.test", "kafka-test"


class IdP:
    """A small identity provider: RSA keys by kid, GET /jwks.json counted."""

    def __init__(self) -> None:
        self.keys: dict[str, object] = {"k1": rsa.generate_private_key(public_exponent=65537, key_size=2048)}
        self.gets = 0
        self.fail_next = 0

    def jwks(self) -> dict:
        out = []
        for kid, priv in self.keys.items():
            alg = "RS256" if isinstance(priv, rsa.RSAPrivateKey) else "ES256"
            algo = jwt.algorithms.RSAAlgorithm if alg == "RS256" else jwt.algorithms.ECAlgorithm
            jwk = algo.to_jwk(priv.public_key(), as_dict=True)
            out.append({**jwk, "kid": kid, "alg": alg, "use": "sig"})
        return {"keys": out}

    def token(self, kid: str = "k1", **overrides) -> str:
        now = int(time.time())
        claims = {"iss": ISSUER, "aud": AUDIENCE, "sub": "alice", "iat": now, "exp": now + 300,
                  "scope": "kafka"}
        claims.update(overrides)
        claims = {k: v for k, v in claims.items() if v is not None}
        priv = self.keys[kid]
        alg = "RS256" if isinstance(priv, rsa.RSAPrivateKey) else "ES256"
        return jwt.encode(claims, priv, algorithm=alg, headers={"kid": kid})

    async def handle(self, request: web.Request) -> web.Response:
        self.gets += 1
        if self.fail_next:
            self.fail_next -= 1
            return web.Response(status=503)
        return web.json_response(self.jwks())


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def with_idp(test, server_ssl=None):
    """Run ``test(idp, url)`` inside a loop that also serves the IdP on an ephemeral loopback port
    (HTTPS when ``server_ssl`` is given)."""

    async def main():
        idp = IdP()
        app = web.Application()
        app.router.add_get("/jwks.json", idp.handle)
        runner = web.AppRunner(app)
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0, ssl_context=server_ssl)
        await site.start()
        port = site._server.sockets[0].getsockname()[1]
        scheme = "https" if server_ssl else "http"
        try:
            return await test(idp, f"{scheme}://localhost:{port}/jwks.json")
        finally:
            await runner.cleanup()

    return asyncio.run(main())


def validator(url: str, clock=None, **kw) -> JwksTokenValidator:
    source = JwksKeySource(url, clock=clock or time.monotonic, retry_backoff_ms=10, retry_backoff_max_ms=100)
    return JwksTokenValidator(source, expected_audience={AUDIENCE, "other"}, expected_issuer=ISSUER, **kw)


class Provider(AbstractTokenProvider):
    def __init__(self, token: str, extensions: dict | None = None) -> None:
        self._token, self._ext = token, extensions or {}

    def token(self):
        return self._token

    def extensions(self):
        return self._ext


def test_kafka_python_oauth_client_authenticates():
    async def t(idp, url):
        client = SaslMechanismOAuth(sasl_oauth_token_provider=Provider(idp.token(), {"traceId": "abc"}))
        server = OAuthBearerServer(validator(url))
        step = await server.evaluate(client.auth_bytes())
        assert isinstance(step, Success)
        assert step.principal == KafkaPrincipal.user("alice") and step.data == b""
        assert step.extensions == {"traceId": "abc"}
        client.receive(step.data)
        assert client.is_authenticated()
        return step.expires_at_ms

    exp = with_idp(t)
    assert exp > time.time() * 1000


def test_rejected_token_gets_the_json_challenge_then_fails():
    async def t(idp, url):
        client = SaslMechanismOAuth(sasl_oauth_token_provider=Provider(idp.token(aud="someone-else")))
        server = OAuthBearerServer(validator(url))
        step = await server.evaluate(client.auth_bytes())
        assert step == Challenge(b'{"status":"invalid_token"}')
        assert "InvalidAudienceError" in server.rejection
        client.receive(step.data)  # kafka-python answers the error with 0x01
        final = await server.evaluate(client.auth_bytes())
        assert final == Failure('{"status":"invalid_token"}', public=True)
        assert final.client_message("OAUTHBEARER") == '{"status":"invalid_token"}'

    with_idp(t)


def _rejected(idp_token_kwargs: dict, **validator_kw):
    async def t(idp, url):
        v = validator(url, **validator_kw)
        server = OAuthBearerServer(v)
        step = await server.evaluate(f"n,,\x01auth=Bearer {idp.token(**idp_token_kwargs)}\x01\x01".encode())
        return step if isinstance(step, Success) else server.rejection

    return with_idp(t)


@pytest.mark.parametrize("claims, why", [
    ({"iss": "https://evil.test"}, "InvalidIssuerError"),
    ({"aud": "nobody"}, "InvalidAudienceError"),
    ({"exp": int(time.time()) - 120}, "ExpiredSignatureError"),  # beyond the 30 s skew
    ({"iat": None}, '"iat"'),
    ({"exp": None}, '"exp"'),
    ({"sub": None}, '"sub"'),
    ({"sub": "   "}, "sub value must be a non-empty string"),
    ({"scope": ["a", "a"]}, "scope value must hold distinct"),
])
def test_claims_kafka_requires(claims, why):
    assert why in _rejected(claims)


def test_clock_skew_and_custom_claim_names():
    # Expired 10 s ago: inside the default 30 s skew, so accepted.
    assert isinstance(_rejected({"exp": int(time.time()) - 10}), Success)
    assert "ExpiredSignatureError" in _rejected({"exp": int(time.time()) - 10}, clock_skew_seconds=0)
    step = _rejected({"sub": None, "client_id": "svc", "scp": ["a", "b"]}, sub_claim_name="client_id",
                     scope_claim_name="scp")
    assert isinstance(step, Success) and step.principal == KafkaPrincipal.user("svc")


def test_forged_and_unsigned_tokens():
    async def t(idp, url):
        v = validator(url)

        async def ev(token):
            return await OAuthBearerServer(v).evaluate(f"n,,\x01auth=Bearer {token}\x01\x01".encode())

        good = jwt.decode(idp.token(), options={"verify_signature": False})
        unsigned = jwt.encode(good, None, algorithm="none", headers={"kid": "k1"})
        hmac_signed = jwt.encode(good, "secret", algorithm="HS256", headers={"kid": "k1"})
        other = rsa.generate_private_key(public_exponent=65537, key_size=2048)
        wrong_key = jwt.encode(good, other, algorithm="RS256", headers={"kid": "k1"})
        for token in (unsigned, hmac_signed, wrong_key):
            assert isinstance(await ev(token), Challenge)

    with_idp(t)


def test_unknown_kid_refreshes_once_and_is_rate_limited():
    async def t(idp, url):
        clock = Clock()
        v = validator(url, clock=clock)
        assert (await v.validate(idp.token())).principal == "alice"
        assert idp.gets == 1
        # The IdP rotates in a new key: the first token naming it triggers one fetch and succeeds.
        idp.keys["k2"] = ec.generate_private_key(ec.SECP256R1())
        assert (await v.validate(idp.token("k2", sub="bob"))).principal == "bob"
        assert idp.gets == 2
        # Made-up kids: one fetch per kid per minute, however many tokens name it.
        for _ in range(5):
            step = await OAuthBearerServer(v).evaluate(
                f"n,,\x01auth=Bearer {_forge_kid(idp, 'nope')}\x01\x01".encode())
            assert isinstance(step, Challenge)
        assert idp.gets == 3
        clock.now += 61
        await OAuthBearerServer(v).evaluate(f"n,,\x01auth=Bearer {_forge_kid(idp, 'nope')}\x01\x01".encode())
        assert idp.gets == 4
        # The scheduled refresh: after refresh.ms the next validation uses the keys it has and fetches
        # again in the background.
        clock.now += 3601
        await v.validate(idp.token())
        await v.keys.wait_background_refresh()
        assert idp.gets == 5
        # A scheduled refresh that fails keeps the previous keys.
        idp.fail_next = 100
        clock.now += 3601
        await v.validate(idp.token())
        await v.keys.wait_background_refresh()
        assert (await v.validate(idp.token())).principal == "alice"

    with_idp(t)


def _forge_kid(idp: IdP, kid: str) -> str:
    claims = jwt.decode(idp.token(), options={"verify_signature": False})
    return jwt.encode(claims, idp.keys["k1"], algorithm="RS256", headers={"kid": kid})


def test_fetch_failures_are_retried():
    async def t(idp, url):
        idp.fail_next = 2
        v = validator(url)
        assert (await v.validate(idp.token())).principal == "alice"
        assert idp.gets == 3

    with_idp(t)


def test_jwks_over_https_with_a_private_ca(tmp_path):
    ca = CertAuthority()
    server = ca.issue(name((NameOID.COMMON_NAME, "localhost")), dns=["localhost"])
    (tmp_path / "s.pem").write_bytes(server.cert_pem)
    (tmp_path / "s.key").write_bytes(server.key_pem)
    (tmp_path / "ca.pem").write_bytes(ca.cert.public_bytes(serialization.Encoding.PEM))
    sctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    sctx.load_cert_chain(tmp_path / "s.pem", tmp_path / "s.key")

    async def t(idp, url):
        assert url.startswith("https://")
        trusted = JwksKeySource(url, ssl=ssl.create_default_context(cafile=str(tmp_path / "ca.pem")))
        assert (await JwksTokenValidator(trusted).validate(idp.token())).principal == "alice"
        # Without the CA the certificate is not trusted: no keys, the token is refused.
        untrusted = JwksKeySource(url, retry_backoff_ms=10, retry_backoff_max_ms=30)
        with pytest.raises(TokenRejected, match="cannot fetch the JWKS"):
            await JwksTokenValidator(untrusted).validate(idp.token())

    with_idp(t, server_ssl=sctx)


def test_jwks_from_a_file(tmp_path):
    idp = IdP()
    (tmp_path / "jwks.json").write_text(json.dumps(idp.jwks()))
    v = JwksTokenValidator(JwksKeySource(f"file://{tmp_path}/jwks.json"), expected_issuer=ISSUER)
    assert asyncio.run(v.validate(idp.token())).principal == "alice"


@pytest.mark.parametrize("message, reason", [
    (b"n,,\x01auth=Basic abc\x01\x01", "Invalid scheme"),
    (b"n,,\x01foo=bar\x01\x01", "'auth' not specified"),
    (b"n,,\x01auth=Bearer a b\x01\x01", "invalid 'auth' format"),
    (b"n,,auth=Bearer abc\x01\x01", "client first message"),
    (b"\x01", "client first message"),  # 0x01 with no error outstanding
])
def test_malformed_initial_responses(message, reason):
    step = asyncio.run(OAuthBearerServer(validator("http://127.0.0.1:9/unused")).evaluate(message))
    assert isinstance(step, Failure) and reason in step.reason


def test_authzid_must_be_the_principal():
    async def t(idp, url):
        v = validator(url)
        ok = await OAuthBearerServer(v).evaluate(f"n,a=alice,\x01auth=Bearer {idp.token()}\x01\x01".encode())
        bad = await OAuthBearerServer(v).evaluate(f"n,a=bob,\x01auth=Bearer {idp.token()}\x01\x01".encode())
        return ok, bad

    ok, bad = with_idp(t)
    assert isinstance(ok, Success)
    assert isinstance(bad, Failure) and bad.public and "(bob)" in bad.reason


def test_error_json_is_kafkas():
    assert error_json("invalid_token") == '{"status":"invalid_token"}'
    assert error_json("invalid_token", "s", "u") == '{"status":"invalid_token", "scope":"s", "openid-configuration":"u"}'
