"""kop/pulsar/session.py with authenticationEnabled: the Pulsar port takes Pulsar tokens (the same token
settings as the Kafka side's PLAIN tokens), through the real Python Pulsar client; a missing, expired or
forged token is an AuthenticationError and a closed connection, and never reaches the log."""

from __future__ import annotations

import base64
import time
from pathlib import Path

import jwt
import pulsar
import pytest

from tests.support.broker import KopBroker

SECRET = b"pulsar-token-secret-0123456789ab"


def token(sub: str, exp_in: int = 300, key: bytes = SECRET) -> str:
    return jwt.encode({"sub": sub, "exp": int(time.time()) + exp_in}, key, algorithm="HS256")


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
        for credential in bad:
            auth = pulsar.AuthenticationToken(credential) if credential else None
            c = pulsar.Client(broker.pulsar_url, authentication=auth, operation_timeout_seconds=5,
                              connection_timeout_ms=5000)
            try:
                with pytest.raises(Exception):  # noqa: B017 - the client's error class varies by cause
                    c.create_producer("persistent://public/default/authed")
            finally:
                c.close()
        log = broker.log_path.read_text(errors="replace")
        assert "authenticated principal=User:pulsar-app method=token" in log
        assert "token has expired" in log and "token signature does not verify" in log
        assert "is not enabled (only 'token' is)" in log  # no token at all
        assert good not in log and SECRET.decode() not in log
    finally:
        broker.stop()
