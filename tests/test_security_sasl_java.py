"""Our SASL servers against the client side of Kafka's own Java mechanisms (kafka-clients 4.x): the
exchange runs token by token through tests/support/SaslClientProbe.java, no sockets involved."""

from __future__ import annotations

import asyncio
import json
import subprocess
import time
from pathlib import Path

import jwt
import pytest
from cryptography.hazmat.primitives.asymmetric import rsa

from kop.security.jwks import JwksKeySource, JwksTokenValidator
from kop.security.principal import KafkaPrincipal
from kop.security.sasl import Failure, SaslServer, Success
from kop.security.sasl.oauthbearer import OAuthBearerServer
from kop.security.sasl.plain import PlainServer, StaticUsers
from kop.security.sasl.scram import InMemoryScramCredentialStore, ScramCredential, ScramServer
from tests.support.java import JavaToolsMissing, java_command

PROBE = Path(__file__).parent / "support" / "SaslClientProbe.java"
pytestmark = pytest.mark.java


def exchange(server: SaslServer, *args: str) -> tuple[object, list[str]]:
    """Run the Java client against ``server``; the server's last step and the client's output lines."""
    try:
        cmd = java_command(str(PROBE), list(args), jvm_opts=["-Xmx128m", "-XX:TieredStopAtLevel=1"])
    except JavaToolsMissing as e:
        pytest.fail(str(e))
    proc = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    lines: list[str] = []
    step = None
    try:
        while True:
            line = proc.stdout.readline().strip()
            lines.append(line)
            if not line.startswith("T "):
                break
            step = asyncio.run(server.evaluate(bytes.fromhex(line[2:])))
            if isinstance(step, Failure):
                break
            proc.stdin.write(f"S {step.data.hex()}\n")
            proc.stdin.flush()
    finally:
        proc.stdin.close()
        rest = proc.stdout.read()
        lines.extend(ln.strip() for ln in rest.splitlines() if ln.strip())
        proc.wait(timeout=120)
    assert proc.returncode == 0, proc.stderr.read()[-2000:]
    return step, lines


def test_java_plain_client():
    """Kafka's PLAIN client is the JDK's (it sends an empty authzid)."""
    step, lines = exchange(PlainServer(StaticUsers({"alice": "alice-secret"})), "PLAIN", "alice", "alice-secret")
    assert isinstance(step, Success) and step.principal == KafkaPrincipal.user("alice") and lines[-1] == "OK"
    step, _ = exchange(PlainServer(StaticUsers({"alice": "alice-secret"})), "PLAIN", "alice", "nope")
    assert isinstance(step, Failure)
    assert step.client_message("PLAIN") == "Authentication failed: Invalid username or password"


@pytest.mark.parametrize("mechanism", ["SCRAM-SHA-256", "SCRAM-SHA-512"])
def test_kafka_java_scram_client(mechanism):
    store = InMemoryScramCredentialStore()
    asyncio.run(store.put("alice", mechanism, ScramCredential.from_password(mechanism, "alice-secret")))
    step, lines = exchange(ScramServer(mechanism, store), mechanism, "alice", "alice-secret")
    assert isinstance(step, Success) and step.principal == KafkaPrincipal.user("alice")
    assert lines[-1] == "OK"  # the Java client verified our server signature

    step, lines = exchange(ScramServer(mechanism, store), mechanism, "alice", "wrong")
    assert isinstance(step, Failure) and step.reason == "Invalid client credentials"


def test_kafka_java_oauthbearer_client(tmp_path):
    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    jwk = {**jwt.algorithms.RSAAlgorithm.to_jwk(key.public_key(), as_dict=True), "kid": "k", "alg": "RS256"}
    (tmp_path / "jwks.json").write_text(json.dumps({"keys": [jwk]}))
    validator = JwksTokenValidator(JwksKeySource(f"file://{tmp_path}/jwks.json"))
    now = int(time.time())
    token = jwt.encode({"sub": "svc", "iat": now, "exp": now + 60}, key, algorithm="RS256", headers={"kid": "k"})
    step, lines = exchange(OAuthBearerServer(validator), "OAUTHBEARER", token, "svc")
    assert isinstance(step, Success) and step.principal == KafkaPrincipal.user("svc")
    assert step.extensions == {"traceId": "java"} and lines[-1] == "OK"

    expired = jwt.encode({"sub": "svc", "iat": now - 600, "exp": now - 300}, key, algorithm="RS256",
                         headers={"kid": "k"})
    server = OAuthBearerServer(validator)
    step, lines = exchange(server, "OAUTHBEARER", expired, "svc")
    # The Java client answers our JSON error with 0x01, and the exchange then fails with that JSON.
    assert isinstance(step, Failure) and step.client_message("OAUTHBEARER") == '{"status":"invalid_token"}'
    assert lines[-1] == "T 01"
