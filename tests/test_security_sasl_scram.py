"""kop/security/sasl/scram.py: SCRAM-SHA-256/512 server, driven by real clients' SCRAM implementations
(kafka-python's ScramClient, aiokafka's ScramAuthenticator) so the test proves they interoperate."""

from __future__ import annotations

import asyncio
import base64

import pytest
from aiokafka.conn import ScramAuthenticator
from kafka.admin import UserScramCredentialUpsertion
from kafka.net.sasl.scram import ScramClient

from kop.security.principal import KafkaPrincipal
from kop.security.sasl import Challenge, Failure, IllegalSaslState, Success
from kop.security.sasl.scram import (
    InMemoryScramCredentialStore,
    ScramCredential,
    ScramServer,
)

MECHS = ["SCRAM-SHA-256", "SCRAM-SHA-512"]


def store_with(user: str, password: str, mechanism: str, iterations: int = 4096) -> InMemoryScramCredentialStore:
    store = InMemoryScramCredentialStore()
    asyncio.run(store.put(user, mechanism, ScramCredential.from_password(mechanism, password,
                                                                         iterations=iterations)))
    return store


def ev(server: ScramServer, data: bytes):
    return asyncio.run(server.evaluate(data))


@pytest.mark.parametrize("mechanism", MECHS)
def test_kafka_python_client_authenticates(mechanism):
    store = store_with("alice", "alice-secret", mechanism)
    client, server = ScramClient("alice", "alice-secret", mechanism), ScramServer(mechanism, store)
    first = ev(server, client.first_message())
    assert isinstance(first, Challenge)
    client.process_server_first_message(first.data)
    final = ev(server, client.final_message())
    assert isinstance(final, Success) and final.principal == KafkaPrincipal.user("alice")
    client.process_server_final_message(final.data)  # raises if our server signature were wrong
    with pytest.raises(IllegalSaslState):
        ev(server, client.final_message())


@pytest.mark.parametrize("mechanism", MECHS)
def test_aiokafka_client_and_a_name_with_escapes(mechanism):
    user = "a,b=c"  # sent as n=a=2Cb=3Dc
    store = store_with(user, "pw", mechanism, iterations=8192)
    client, server = ScramAuthenticator(loop=None, sasl_plain_username=user, sasl_plain_password="pw",
                                        sasl_mechanism=mechanism), ScramServer(mechanism, store)
    first = client.first_message()
    assert "=2C" in first and "=3D" in first
    step = ev(server, first.encode())
    client.process_server_first_message(step.data.decode())
    assert ",i=8192" in step.data.decode()
    done = ev(server, client.final_message().encode())
    assert done.principal == KafkaPrincipal.user(user)
    client.process_server_final_message(done.data.decode())


def test_credentials_from_kafka_pythons_alter_user_scram_credentials_payload():
    """The admin path: the client sends (salt, iterations, salted password); we derive the keys."""
    up = UserScramCredentialUpsertion("carol", "SCRAM-SHA-512", "carol-pw", iterations=4096)
    cred = ScramCredential.from_salted_password("SCRAM-SHA-512", up.salted_password, up.salt, up.iterations)
    store = InMemoryScramCredentialStore()
    asyncio.run(store.put("carol", "SCRAM-SHA-512", cred))
    assert ScramCredential.from_json(cred.to_json()) == cred
    client, server = ScramClient("carol", "carol-pw", "SCRAM-SHA-512"), ScramServer("SCRAM-SHA-512", store)
    client.process_server_first_message(ev(server, client.first_message()).data)
    assert isinstance(ev(server, client.final_message()), Success)
    assert asyncio.run(store.describe()) == {"carol": {"SCRAM-SHA-512": 4096}}
    assert asyncio.run(store.delete("carol", "SCRAM-SHA-512")) is True
    assert asyncio.run(store.delete("carol", "SCRAM-SHA-512")) is False


def _failure(step) -> Failure:
    assert isinstance(step, Failure), step
    return step


def test_wrong_password_fails_with_the_generic_message():
    store = store_with("alice", "alice-secret", "SCRAM-SHA-256")
    client, server = ScramClient("alice", "guess", "SCRAM-SHA-256"), ScramServer("SCRAM-SHA-256", store)
    client.process_server_first_message(ev(server, client.first_message()).data)
    f = _failure(ev(server, client.final_message()))
    assert f.reason == "Invalid client credentials"
    assert f.client_message("SCRAM-SHA-256") == ("Authentication failed during authentication due to invalid "
                                                 "credentials with SASL mechanism SCRAM-SHA-256")


def test_unknown_user_and_wrong_mechanism_look_the_same_as_a_wrong_password_to_the_client():
    store = store_with("alice", "pw", "SCRAM-SHA-256")
    for user, mech in (("nobody", "SCRAM-SHA-256"), ("alice", "SCRAM-SHA-512")):
        f = _failure(ev(ScramServer(mech, store), ScramClient(user, "pw", mech).first_message()))
        assert not f.public and "Invalid user credentials" in f.reason


def test_too_few_iterations_are_refused():
    store = store_with("alice", "pw", "SCRAM-SHA-256", iterations=4095)
    f = _failure(ev(ScramServer("SCRAM-SHA-256", store), ScramClient("alice", "pw", "SCRAM-SHA-256").first_message()))
    assert f.reason == "Iterations 4095 is less than the minimum 4096 for SCRAM-SHA-256"


def test_replayed_final_message_fails_against_a_new_exchange():
    store = store_with("alice", "pw", "SCRAM-SHA-256")
    client, server = ScramClient("alice", "pw", "SCRAM-SHA-256"), ScramServer("SCRAM-SHA-256", store)
    first = client.first_message()
    client.process_server_first_message(ev(server, first).data)
    final = client.final_message()
    assert isinstance(ev(server, final), Success)
    # An eavesdropper replays both client messages: the new exchange has a new server nonce.
    replay = ScramServer("SCRAM-SHA-256", store)
    assert isinstance(ev(replay, first), Challenge)
    assert _failure(ev(replay, final)).reason == "Invalid client nonce in the final client message."


def test_nonce_and_proof_tampering():
    store = store_with("alice", "pw", "SCRAM-SHA-256")
    client, server = ScramClient("alice", "pw", "SCRAM-SHA-256"), ScramServer("SCRAM-SHA-256", store)
    client.process_server_first_message(ev(server, client.first_message()).data)
    good = client.final_message().decode()
    nonce = good.split(",")[1][2:]
    # A nonce that only ends with the server's (Kafka's weaker check) is still refused.
    assert "nonce" in _failure(ev(server, good.replace(nonce, "x" + nonce).encode())).reason

    server = ScramServer("SCRAM-SHA-256", store)
    client = ScramClient("alice", "pw", "SCRAM-SHA-256")
    client.process_server_first_message(ev(server, client.first_message()).data)
    proof = base64.b64decode(client.final_message().decode().rsplit("p=", 1)[1])
    forged = bytes([proof[0] ^ 1]) + proof[1:]
    msg = client.final_message().decode().rsplit("p=", 1)[0] + "p=" + base64.b64encode(forged).decode()
    assert _failure(ev(server, msg.encode())).reason == "Invalid client credentials"


@pytest.mark.parametrize("first", [
    b"y,,n=alice,r=abc",  # client supports channel binding: not offered by Kafka
    b"p=tls-unique,,n=alice,r=abc",  # channel binding demanded
    b"n,,n=,r=abc",
    b"n,,r=abc,n=alice",
    b"garbage",
    b"",
])
def test_malformed_or_channel_bound_first_messages(first):
    store = store_with("alice", "pw", "SCRAM-SHA-256")
    assert "Invalid SCRAM client first message" in _failure(ev(ScramServer("SCRAM-SHA-256", store), first)).reason


def test_channel_binding_value_must_be_the_gs2_header():
    store = store_with("alice", "pw", "SCRAM-SHA-256")
    server = ScramServer("SCRAM-SHA-256", store, nonce_factory=lambda: "SRV")
    step = ev(server, b"n,,n=alice,r=CLI")
    assert step.data.startswith(b"r=CLISRV,s=") and step.data.endswith(b",i=4096")
    f = _failure(ev(server, b"c=" + base64.b64encode(b"y,,") + b",r=CLISRV,p=AAAA"))
    assert "channel binding" in f.reason


def test_authzid_must_equal_the_user_and_tokenauth_is_refused():
    store = store_with("alice", "pw", "SCRAM-SHA-256")
    f = _failure(ev(ScramServer("SCRAM-SHA-256", store), b"n,a=bob,n=alice,r=abc"))
    assert f.public and "authorization id" in f.client_message("SCRAM-SHA-256")
    assert isinstance(ev(ScramServer("SCRAM-SHA-256", store), b"n,a=alice,n=alice,r=abc"), Challenge)
    f = _failure(ev(ScramServer("SCRAM-SHA-256", store), b"n,,n=alice,r=abc,tokenauth=true"))
    assert "delegation tokens" in f.reason
    # Other extensions are accepted and ignored, as Kafka does.
    assert isinstance(ev(ScramServer("SCRAM-SHA-256", store), b"n,,n=alice,r=abc,foo=bar"), Challenge)
