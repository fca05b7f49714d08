"""Sans-IO: Pulsar's basic provider (kop/security/basic.py), the provider table of kop/config.py, and the
AuthenticationService rules (anonymousUserRole, methods, HTTP) of kop/security/authn.py.

The apr1 expectations were made with `openssl passwd -apr1 -salt <salt> <password>` (OpenSSL 3.0), the DES
one with glibc's crypt(3): implementations independent of ours."""

from __future__ import annotations

import base64
import logging
from pathlib import Path

import pytest
from cryptography.x509.oid import NameOID

from kop.config import BrokerConfig, ConfigError
from kop.security.authn import NO_ANONYMOUS, Authenticated, AuthenticationFailed, Authenticators, common_name
from kop.security.basic import FAILED, BasicAuthFailed, BasicUsers, apr1_crypt, parse_users, read_conf, verify
from tests.support.certs import CertAuthority, name

PROVIDER = "org.apache.pulsar.broker.authentication.AuthenticationProvider"
HUNTER2 = "$apr1$s4ltS4lt$WqSRSiuEvAv7Y9YmJUhP31"  # openssl passwd -apr1 -salt s4ltS4lt hunter2
DES_PW = "abzlUXK5ed5rs"  # crypt("pw", "ab")


@pytest.mark.parametrize(("password", "salt", "expected"), [
    (b"hunter2", "s4ltS4lt", HUNTER2),
    (b"p", "ab", "$apr1$ab$vv77ghmKwCAoaGfFCKWSr/"),
    (b"hunter2", "s4ltS4ltTOOLONG", HUNTER2),  # the salt is cut at 8 characters
])
def test_apr1_matches_openssl(password: bytes, salt: str, expected: str) -> None:
    assert apr1_crypt(password, salt) == expected


def test_verify_follows_pulsars_rules() -> None:
    assert verify(HUNTER2, "hunter2") and not verify(HUNTER2, "hunter3")
    assert verify(DES_PW, "pw") and not verify(DES_PW, "pX")
    assert not verify("$apr1$s4ltS4lt", "hunter2")  # apr1 without its hash part
    # bcrypt and SHA-crypt hashes never verify on Pulsar (only apr1 and DES crypt are checked)
    assert not verify("$2y$05$abcdefghijklmnopqrstuuJ0Lh6aYcJdH0vW8y3mO4bq6n3cvPu3K", "pw")
    assert not verify("$6$salt$" + "x" * 86, "pw")


def test_users_file_lines(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING):
        users = parse_users(f"alice:{HUNTER2}\n\nbob:{DES_PW}:\ncarol:$2y$05$whatever\n")
    assert users == {"alice": HUNTER2, "bob": DES_PW, "carol": "$2y$05$whatever"}
    assert "'carol' has a hash Pulsar's basic provider never accepts" in caplog.text
    for bad in ("alice", "alice:a:b", ":hash", "alice:"):
        with pytest.raises(ConfigError, match="basicAuthConf: line 1 is not user:hash"):
            parse_users(bad)


def test_basic_credentials_command_and_http() -> None:
    users = BasicUsers({"alice": HUNTER2, "bob": DES_PW})
    assert users.authenticate("alice:hunter2") == "alice"
    assert users.authenticate("bob:pw") == "bob"
    assert users.authenticate("alice:hunter2:") == "alice"  # Java's split drops trailing empty fields
    for wrong in ("alice:nope", "mallory:hunter2"):
        with pytest.raises(BasicAuthFailed, match=FAILED):
            users.authenticate(wrong)
    for invalid in ("alice:hunt:er2", "bob::x", "bob:", "bob::", ""):  # Pulsar splits on every ':'
        with pytest.raises(BasicAuthFailed, match="Base64 decoded params are invalid"):
            users.authenticate(invalid)
    header = "Basic " + base64.b64encode(b"alice:hunter2").decode()
    assert users.authenticate_header(header) == "alice"
    assert users.authenticate_header(header.replace("Basic", "basic")) == "alice"
    with pytest.raises(BasicAuthFailed, match='started with "Basic "'):
        users.authenticate_header("Bearer x")
    with pytest.raises(BasicAuthFailed, match="Base64 decoding"):
        users.authenticate_header("Basic !!!")
    with pytest.raises(BasicAuthFailed, match="Base64 encoded token is not found"):
        users.authenticate_header(header.replace(" ", "  "))  # Pulsar splits the header on every ' '


def test_basic_auth_conf_forms(tmp_path: Path) -> None:
    text = f"alice:{HUNTER2}\n".encode()
    (tmp_path / "htpasswd").write_bytes(text)
    b64 = base64.b64encode(text).decode()
    for form in (str(tmp_path / "htpasswd"), f"file://{tmp_path / 'htpasswd'}", f"data:;base64,{b64}", b64):
        assert read_conf(form) == text
        assert BasicUsers.from_config(form).users == {"alice": HUNTER2}
    with pytest.raises(ConfigError, match="bad value for basicAuthConf"):
        BasicUsers.from_config(str(tmp_path / "missing!"))


def config(**overrides: str) -> BrokerConfig:
    return BrokerConfig.load(overrides={"authenticationEnabled": "true", **overrides})


def test_unknown_provider_is_a_start_up_error_naming_it() -> None:
    sasl = "org.apache.pulsar.broker.authentication.AuthenticationProviderSasl"
    with pytest.raises(ConfigError, match=f"authenticationProviders: this broker does not implement {sasl}"):
        config(authenticationProviders=f"{PROVIDER}Token,{sasl}", tokenSecretKey="c2VjcmV0")
    with pytest.raises(ConfigError, match="com.example.MyProvider"):
        config(authenticationProviders="com.example.MyProvider")
    # Pulsar loads no provider without authenticationEnabled, so the list is not checked then
    BrokerConfig.load(overrides={"authenticationProviders": sasl})
    with pytest.raises(ConfigError, match="basicAuthConf"):
        config(authenticationProviders=f"{PROVIDER}Basic")
    with pytest.raises(ConfigError, match="tlsTrustCertsFilePath"):
        config(authenticationProviders=f"{PROVIDER}Tls")
    ok = config(authenticationProviders=f" {PROVIDER}Token, {PROVIDER}Basic,{PROVIDER}Tls ", tokenSecretKey="c2VjcmV0",
                basicAuthConf="data:;base64,", tlsTrustCertsFilePath="/ca.pem")
    assert ok.authentication_providers == [f"{PROVIDER}Token", f"{PROVIDER}Basic", f"{PROVIDER}Tls"]


def authenticators(anonymous: str = "") -> Authenticators:
    return Authenticators(anonymous_role=anonymous, basic=BasicUsers({"alice": HUNTER2}), methods=["basic"])


def test_connect_anonymous_role_follows_pulsar() -> None:
    strict, open_ = authenticators(), authenticators("guest")
    assert strict.connect("basic", b"alice:hunter2", None).role == "alice"
    for auth in (strict, open_):  # a configured method's failure is never anonymous
        with pytest.raises(AuthenticationFailed, match=FAILED):
            auth.connect("basic", b"alice:wrong", None)
    for method in ("", "none", "token", "tls"):  # no credentials, or a method with no provider here
        with pytest.raises(AuthenticationFailed, match=NO_ANONYMOUS):
            strict.connect(method, b"", None)
        assert open_.connect(method, b"", None) == Authenticated("guest", "anonymous")


def test_http_anonymous_role_follows_pulsar() -> None:
    strict, open_ = authenticators(), authenticators("guest")
    good = "Basic " + base64.b64encode(b"alice:hunter2").decode()
    bad = "Basic " + base64.b64encode(b"alice:wrong").decode()
    assert strict.http(good, None, None).role == "alice"
    assert strict.http(good, "basic", None).role == "alice"
    with pytest.raises(AuthenticationFailed, match="Authentication required"):
        strict.http(None, None, None)
    with pytest.raises(AuthenticationFailed, match=f"basic: {FAILED}"):
        strict.http(bad, None, None)
    assert open_.http(None, None, None).role == "guest"
    assert open_.http(bad, None, None).role == "guest"  # Pulsar: refused credentials without a method header
    with pytest.raises(AuthenticationFailed, match=FAILED):
        open_.http(bad, "basic", None)  # naming the method, its failure stands
    with pytest.raises(AuthenticationFailed, match=r"Unsupported authentication method: \[token\]"):
        open_.http(good, "token", None)


def test_tls_role_is_the_first_common_name() -> None:
    ca = CertAuthority()
    issued = ca.issue(name((NameOID.ORGANIZATION_NAME, "kop"), (NameOID.COMMON_NAME, "outer"),
                           (NameOID.COMMON_NAME, "client-app")))
    assert common_name(issued.cert) == "client-app"  # RFC 2253 order: the most specific RDN first
    with pytest.raises(AuthenticationFailed, match="unable to authenticate with TLS certificate"):
        common_name(ca.issue(name((NameOID.ORGANIZATION_NAME, "kop"))).cert)
    with pytest.raises(AuthenticationFailed, match="Failed to get TLS certificates"):
        common_name(None)
