"""kop/kafka/sasl.py, kop/kafka/apis/sasl_handshake.py, sasl_authenticate.py and the connection's SASL path:
a broker in this process with a PLAINTEXT and a SASL_PLAINTEXT listener, driven by real clients
(kafka-python, confluent-kafka, aiokafka) and by a byte-level wire client (kafka-python's own protocol
classes, not our codec) for the bad input: requests before authentication, unknown mechanisms, garbage
tokens, oversized frames, v0 raw tokens, out-of-turn SaslAuthenticate, KIP-368 expiry and
re-authentication. The SaslSession state machine is also checked alone with an injected clock."""

from __future__ import annotations

import asyncio
import itertools
import socket
import struct
from pathlib import Path

import pytest
from kafka.protocol.metadata import ApiVersionsRequest, MetadataRequest
from kafka.protocol.sasl import SaslAuthenticateRequest, SaslHandshakeRequest

from kop.config import BrokerConfig, ConfigError
from kop.kafka.handler import KafkaProtocolHandler
from kop.kafka.listeners import SaslMechanisms
from kop.kafka.sasl import SaslSession, State
from kop.protocol.errors import ErrorCode
from kop.security.metadata_stores import MetadataScramCredentialStore
from kop.security.principal import ANONYMOUS, KafkaPrincipal
from kop.security.sasl.scram import ScramCredential
from kop.server.service import BrokerService
from kop.server.storage import open_embedded_storage
from tests.support.wire import WireClient

USERS = "alice=alice-secret\nbob=bob-secret\n# a comment\n"


def users_file(tmp_path: Path) -> str:
    p = tmp_path / "users.txt"
    p.write_text(USERS)
    return str(p)


class Broker:
    def __init__(self, svc: BrokerService, handler: KafkaProtocolHandler) -> None:
        self.svc, self.handler = svc, handler
        ports = {lst.split("://")[0]: lst.split("://")[1] for lst in handler.listeners()}
        self.plain, self.sasl = ports["PLAINTEXT"], ports["SASL_PLAINTEXT"]

    def principals(self) -> set[str]:
        return {str(c.principal) for c in self.handler.connections}


async def start_broker(tmp_path: Path, **overrides: str) -> Broker:
    cfg = BrokerConfig.from_strings({
        "kafkaListeners": "PLAINTEXT://127.0.0.1:0,SASL_PLAINTEXT://127.0.0.1:0", "webServicePort": "-1",
        "messagingProtocols": "kafka", "groupInitialRebalanceDelayMs": "0", "localStoreFsyncPolicy": "none",
        "authenticationEnabled": "true", "saslAllowedMechanisms": "PLAIN,SCRAM-SHA-256,SCRAM-SHA-512",
        "saslPlainUsersFile": users_file(tmp_path), "failedAuthenticationDelayMs": "50", **overrides,
    })
    storage = await open_embedded_storage(tmp_path / "data", cfg)
    svc = BrokerService(cfg, storage)
    handler = KafkaProtocolHandler()
    handler.initialize(cfg)
    await svc.start([handler])
    store = MetadataScramCredentialStore(storage.metadata_store)
    for mech in ("SCRAM-SHA-256", "SCRAM-SHA-512"):
        await store.put("carol", mech, ScramCredential.from_password(mech, "carol-secret", iterations=4096))
    return Broker(svc, handler)


def run(tmp_path: Path, body, **overrides: str) -> None:
    async def main() -> None:
        broker = await start_broker(tmp_path, **overrides)
        try:
            await body(broker)
        finally:
            await broker.svc.stop()

    asyncio.run(main())


def plain_token(user: str, password: str, authzid: str = "") -> bytes:
    return f"{authzid}\0{user}\0{password}".encode()


def frame(request, version: int, correlation_id: int = 99) -> bytes:
    """A request's bytes, for sending without waiting for (or expecting) an answer."""
    request.API_VERSION = version
    request.with_header(correlation_id=correlation_id, client_id="kop-tests")
    return request.encode(version=version, header=True, framed=True)


def closed(c: WireClient) -> bool:
    """The broker closed the connection (EOF or reset), with nothing more to read."""
    c.sock.settimeout(30)
    try:
        return c.sock.recv(1) == b""
    except ConnectionResetError:
        return True


# ---------------------------------------------------------------------------------------- real clients

def test_real_clients_produce_and_consume_with_plain_and_scram(tmp_path: Path) -> None:
    def kafka_python(bootstrap: str) -> None:
        from kafka import KafkaConsumer, KafkaProducer

        for mech, user, pw in (("PLAIN", "alice", "alice-secret"), ("SCRAM-SHA-256", "carol", "carol-secret"),
                               ("SCRAM-SHA-512", "carol", "carol-secret")):
            sec = dict(security_protocol="SASL_PLAINTEXT", sasl_mechanism=mech, sasl_plain_username=user,
                       sasl_plain_password=pw)
            p = KafkaProducer(bootstrap_servers=bootstrap, **sec)
            p.send("kp", mech.encode()).get(timeout=30)
            p.close()
        c = KafkaConsumer("kp", bootstrap_servers=bootstrap, auto_offset_reset="earliest", consumer_timeout_ms=10000,
                          security_protocol="SASL_PLAINTEXT", sasl_mechanism="SCRAM-SHA-512",
                          sasl_plain_username="carol", sasl_plain_password="carol-secret")
        got = [m.value for m in itertools.islice(c, 3)]  # the timeout only guards against a hang
        c.close()
        assert got == [b"PLAIN", b"SCRAM-SHA-256", b"SCRAM-SHA-512"]

    def confluent(bootstrap: str) -> None:
        import confluent_kafka as ck

        for mech, user, pw in (("PLAIN", "bob", "bob-secret"), ("SCRAM-SHA-256", "carol", "carol-secret")):
            conf = {"bootstrap.servers": bootstrap, "security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": mech,
                    "sasl.username": user, "sasl.password": pw}
            p = ck.Producer(conf)
            p.produce("ck", mech.encode())
            assert p.flush(30) == 0
            c = ck.Consumer({**conf, "group.id": f"g-{mech}", "auto.offset.reset": "earliest"})
            c.subscribe(["ck"])
            got = []
            for _ in range(60):
                m = c.poll(1)
                if m is not None and m.error() is None:
                    got.append(m.value())
                if mech.encode() in got:
                    break
            c.close()
            assert mech.encode() in got

    async def aiokafka(bootstrap: str) -> None:
        from aiokafka import AIOKafkaConsumer, AIOKafkaProducer

        sec = dict(security_protocol="SASL_PLAINTEXT", sasl_mechanism="SCRAM-SHA-256",
                   sasl_plain_username="carol", sasl_plain_password="carol-secret")
        p = AIOKafkaProducer(bootstrap_servers=bootstrap, **sec)
        await p.start()
        await p.send_and_wait("ak", b"aio")
        await p.stop()
        c = AIOKafkaConsumer("ak", bootstrap_servers=bootstrap, auto_offset_reset="earliest", **sec)
        await c.start()
        try:
            m = await asyncio.wait_for(c.getone(), 30)
        finally:
            await c.stop()
        assert m.value == b"aio"

    async def body(b: Broker) -> None:
        await asyncio.to_thread(kafka_python, b.sasl)
        await asyncio.to_thread(confluent, b.sasl)
        # aiokafka runs on its own loop in a thread: the broker's loop must stay free to serve it.
        await asyncio.to_thread(asyncio.run, aiokafka(b.sasl))
        auth = b.svc.metrics.authentications
        assert auth[("PLAIN", "success")] >= 2 and auth[("SCRAM-SHA-256", "success")] >= 3
        assert auth[("SCRAM-SHA-512", "success")] >= 2
        assert not any(result == "failure" for _, result in auth)

    run(tmp_path, body)


def test_connection_principal_is_the_authenticated_user(tmp_path: Path) -> None:
    async def body(b: Broker) -> None:
        plain = await asyncio.to_thread(WireClient, b.plain)
        sasl = await asyncio.to_thread(WireClient, b.sasl)
        await asyncio.to_thread(sasl.send, SaslHandshakeRequest(mechanism="PLAIN"), 1)
        r = await asyncio.to_thread(sasl.send, SaslAuthenticateRequest(auth_bytes=plain_token("alice", "alice-secret")),
                                    2)
        assert r.error_code == 0 and r.session_lifetime_ms == 0
        conns = {c.listener_name: c for c in b.handler.connections}
        assert conns["PLAINTEXT"].principal == ANONYMOUS
        assert conns["SASL_PLAINTEXT"].principal == KafkaPrincipal.user("alice")
        assert conns["SASL_PLAINTEXT"].client_host == "127.0.0.1"
        assert conns["SASL_PLAINTEXT"].tenant is None  # a users-file login names no tenant
        plain.close()
        sasl.close()

    run(tmp_path, body)


# ---------------------------------------------------------------------------------------- the wire

def test_api_versions_lists_sasl_apis_only_on_sasl_listeners(tmp_path: Path) -> None:
    def keys(bootstrap: str) -> set[int]:
        with WireClient(bootstrap) as c:
            r = c.send(ApiVersionsRequest(), 0)
            assert r.error_code == 0
            return {k.api_key for k in r.api_keys}

    async def body(b: Broker) -> None:
        assert {17, 36} <= await asyncio.to_thread(keys, b.sasl)
        assert not {17, 36} & await asyncio.to_thread(keys, b.plain)

    run(tmp_path, body)


def test_bad_input_gets_kafkas_errors_or_a_closed_connection(tmp_path: Path) -> None:
    def exchange(bootstrap: str) -> None:
        # A request other than ApiVersions/SaslHandshake before authentication: closed, no answer.
        c = WireClient(bootstrap)
        c.sock.sendall(frame(MetadataRequest(topics=[]), 1))
        assert closed(c)
        # An unknown mechanism: UNSUPPORTED_SASL_MECHANISM with the enabled list, then closed.
        c = WireClient(bootstrap)
        r = c.send(SaslHandshakeRequest(mechanism="GSSAPI"), 1)
        assert r.error_code == ErrorCode.UNSUPPORTED_SASL_MECHANISM
        assert list(r.mechanisms) == ["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"]
        assert closed(c)
        # A wrong password: SASL_AUTHENTICATION_FAILED with PLAIN's message, then closed.
        c = WireClient(bootstrap)
        assert c.send(SaslHandshakeRequest(mechanism="PLAIN"), 1).error_code == 0
        r = c.send(SaslAuthenticateRequest(auth_bytes=plain_token("alice", "wrong")), 1)
        assert (r.error_code, r.error_message) == (ErrorCode.SASL_AUTHENTICATION_FAILED,
                                                   "Authentication failed: Invalid username or password")
        assert closed(c)
        # Garbage SCRAM tokens: the generic message (it must not tell which users exist).
        for garbage in (b"\xff\x00garbage", b"n,,n=nobody,r=abc", b""):
            c = WireClient(bootstrap)
            c.send(SaslHandshakeRequest(mechanism="SCRAM-SHA-256"), 1)
            r = c.send(SaslAuthenticateRequest(auth_bytes=garbage), 2)
            assert r.error_code == ErrorCode.SASL_AUTHENTICATION_FAILED
            assert r.error_message == ("Authentication failed during authentication due to invalid credentials with "
                                       "SASL mechanism SCRAM-SHA-256")
            assert closed(c)
        # Another API while a v1 exchange is under way: closed.
        c = WireClient(bootstrap)
        c.send(SaslHandshakeRequest(mechanism="PLAIN"), 1)
        c.sock.sendall(frame(ApiVersionsRequest(), 0))
        assert closed(c)
        # A frame over saslServerMaxReceiveSize before authentication: closed as soon as its size is read.
        c = WireClient(bootstrap)
        c.sock.sendall(struct.pack(">i", 524289))
        assert closed(c)
        # Not Kafka at all (e.g. TLS on a plaintext SASL port): closed.
        c = WireClient(bootstrap)
        c.sock.sendall(b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03" + bytes(600))
        assert closed(c)
        # After authentication: a second SaslAuthenticate is ILLEGAL_SASL_STATE (the connection stays).
        c = WireClient(bootstrap)
        c.send(SaslHandshakeRequest(mechanism="PLAIN"), 1)
        assert c.send(SaslAuthenticateRequest(auth_bytes=plain_token("bob", "bob-secret")), 0).error_code == 0
        r = c.send(SaslAuthenticateRequest(auth_bytes=plain_token("bob", "bob-secret")), 0)
        assert r.error_code == ErrorCode.ILLEGAL_SASL_STATE
        assert c.send(MetadataRequest(topics=[]), 1).brokers  # still served
        c.close()

    async def body(b: Broker) -> None:
        await asyncio.to_thread(exchange, b.sasl)
        auth = b.svc.metrics.authentications
        assert auth[("PLAIN", "failure")] == 1 and auth[("SCRAM-SHA-256", "failure")] == 3
        assert auth[("?", "failure")] == 1  # the unknown mechanism (its name is not a label: a client picks it)
        # Other connections were not harmed, and no password reached the log (checked in the e2e test).
        assert await asyncio.to_thread(lambda: WireClient(b.plain).send(MetadataRequest(topics=[]), 1).brokers)

    run(tmp_path, body)


def test_v0_handshake_takes_raw_tokens(tmp_path: Path) -> None:
    """SaslHandshake v0: the tokens follow as bare size-prefixed frames (kafka-python <= 2.0, aiokafka 'auto')."""

    def raw(bootstrap: str, password: str) -> tuple[bytes | None, WireClient]:
        c = WireClient(bootstrap)
        assert c.send(SaslHandshakeRequest(mechanism="PLAIN"), 0).error_code == 0
        token = plain_token("alice", password)
        c.sock.sendall(struct.pack(">i", len(token)) + token)
        head = c.sock.recv(4)
        if len(head) < 4:
            return None, c
        return c._recv_exact(struct.unpack(">i", head)[0]), c

    def exchange(bootstrap: str) -> None:
        answer, c = raw(bootstrap, "alice-secret")
        assert answer == b""  # PLAIN's empty success token, as Kafka sends it
        assert c.send(MetadataRequest(topics=[]), 1).brokers
        c.close()
        answer, c = raw(bootstrap, "nope")
        assert answer is None and closed(c)

    async def body(b: Broker) -> None:
        await asyncio.to_thread(exchange, b.sasl)
        auth = b.svc.metrics.authentications
        assert (auth[("PLAIN", "success")], auth[("PLAIN", "failure")]) == (1, 1)

    run(tmp_path, body)


def test_kip368_session_expires_and_reauthentication_renews_it(tmp_path: Path) -> None:
    reauth_ms = 1500

    def login(c: WireClient, user: str = "alice", password: str = "alice-secret") -> int:
        assert c.send(SaslHandshakeRequest(mechanism="PLAIN"), 1).error_code == 0
        r = c.send(SaslAuthenticateRequest(auth_bytes=plain_token(user, password)), 1)
        assert r.error_code == 0, r.error_message
        return r.session_lifetime_ms

    def exchange(bootstrap: str) -> None:
        import time

        c = WireClient(bootstrap)
        assert login(c) == reauth_ms
        assert c.send(MetadataRequest(topics=[]), 1).brokers
        time.sleep(reauth_ms / 1000 + 0.3)  # let the session end (not a timed assertion)
        c.sock.sendall(frame(MetadataRequest(topics=[]), 1))
        assert closed(c)

        c = WireClient(bootstrap)
        login(c)
        time.sleep(1.1)  # re-authentication sooner than a second after the last is refused
        assert login(c) == reauth_ms  # same mechanism, same principal: renewed
        # A changed principal fails the re-authentication.
        time.sleep(1.1)
        assert c.send(SaslHandshakeRequest(mechanism="PLAIN"), 1).error_code == 0
        r = c.send(SaslAuthenticateRequest(auth_bytes=plain_token("bob", "bob-secret")), 1)
        assert r.error_code == ErrorCode.SASL_AUTHENTICATION_FAILED
        assert "Cannot change principals during re-authentication" in r.error_message
        assert closed(c)

    async def body(b: Broker) -> None:
        await asyncio.to_thread(exchange, b.sasl)

    run(tmp_path, body, connectionsMaxReauthMs=str(reauth_ms))


# ---------------------------------------------------------------------------------------- the state machine

def session(tmp_path: Path, clock: list[int], **overrides: str) -> SaslSession:
    cfg = BrokerConfig.from_strings({
        "kafkaListeners": "SASL_PLAINTEXT://127.0.0.1:0", "authenticationEnabled": "true",
        "saslPlainUsersFile": users_file(tmp_path), **overrides})
    return SaslSession(SaslMechanisms(cfg, None), cfg.connectionsMaxReauthMs, now_ms=lambda: clock[0])


async def test_session_states(tmp_path: Path) -> None:
    clock = [10_000]
    s = session(tmp_path, clock, connectionsMaxReauthMs="5000")
    assert s.gate(18) is None and s.gate(17) is None and s.gate(3) is not None
    assert s.handshake(1, "PLAIN").error == ErrorCode.NONE and s.state is State.AUTHENTICATE
    assert s.gate(36) is None and s.gate(18) is not None
    a = await s.authenticate(1, plain_token("alice", "alice-secret"))
    assert a.completed and a.session_lifetime_ms == 5000 and s.session_end_ms == 15_000
    assert s.principal == KafkaPrincipal.user("alice")
    assert s.gate(3) is None
    clock[0] = 10_500
    assert s.handshake(1, "PLAIN").error == ErrorCode.ILLEGAL_SASL_STATE  # < 1 s after the last one
    clock[0] = 15_000
    assert s.gate(3) is not None and s.gate(17) is None  # expired: only a handshake
    assert s.handshake(1, "SCRAM-SHA-256").error == ErrorCode.NONE
    a = await s.authenticate(1, plain_token("alice", "alice-secret"))
    assert a.error == ErrorCode.SASL_AUTHENTICATION_FAILED and "not supported for re-authentication" in a.message


async def test_session_v0_clients_are_not_held_to_a_lifetime(tmp_path: Path) -> None:
    clock = [0]
    s = session(tmp_path, clock, connectionsMaxReauthMs="1000")
    s.handshake(1, "PLAIN")
    a = await s.authenticate(0, plain_token("alice", "alice-secret"))
    assert a.completed and a.session_lifetime_ms == 0 and s.session_end_ms is None  # cannot re-authenticate
    clock[0] = 10_000
    assert s.gate(3) is None


def test_sasl_listener_without_authentication_refuses_to_start(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="authenticationEnabled=true"):
        BrokerConfig.from_strings({"kafkaListeners": "SASL_SSL://127.0.0.1:0", "tlsCertificateFilePath": "c",
                                   "tlsKeyFilePath": "k"})
    with pytest.raises(ConfigError, match="kafkaProtocolMap"):
        BrokerConfig.from_strings({"kafkaListeners": "EXTERNAL://127.0.0.1:0"})
    with pytest.raises(ConfigError, match="tlsCertificateFilePath"):
        BrokerConfig.from_strings({"kafkaListeners": "EXTERNAL://127.0.0.1:0", "kafkaProtocolMap": "EXTERNAL:SSL"})
    with pytest.raises(ConfigError, match="PLAIN needs"):
        BrokerConfig.from_strings({"kafkaListeners": "SASL_PLAINTEXT://127.0.0.1:0", "authenticationEnabled": "true"})
    with pytest.raises(ConfigError, match="saslAllowedMechanisms"):
        BrokerConfig.from_strings({"saslAllowedMechanisms": "PLAIN,GSSAPI"})


def test_unreachable_jwks_fails_start(tmp_path: Path) -> None:
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()  # nothing listens there
    cfg = BrokerConfig.from_strings({
        "kafkaListeners": "SASL_PLAINTEXT://127.0.0.1:0", "authenticationEnabled": "true",
        "saslAllowedMechanisms": "OAUTHBEARER", "saslOauthbearerJwksEndpointUrl": f"http://127.0.0.1:{port}/jwks",
        "saslOauthbearerJwksEndpointRetryBackoffMaxMs": "200"})
    mechanisms = SaslMechanisms(cfg, None)
    with pytest.raises(ConfigError, match="saslOauthbearerJwksEndpointUrl"):
        asyncio.run(mechanisms.start())


def test_real_clients_reauthenticate_before_the_session_ends(tmp_path: Path) -> None:
    """KIP-368 with clients that do it (kafka-python 3.x, librdkafka): sessions of 2 s, producing for longer;
    every client re-authenticates in time, so nothing is closed for an expired session."""
    import time

    def produce_for(bootstrap: str, seconds: float) -> int:
        import confluent_kafka as ck
        from kafka import KafkaProducer

        kp = KafkaProducer(bootstrap_servers=bootstrap, security_protocol="SASL_PLAINTEXT",
                           sasl_mechanism="SCRAM-SHA-256", sasl_plain_username="carol",
                           sasl_plain_password="carol-secret")
        cp = ck.Producer({"bootstrap.servers": bootstrap, "security.protocol": "SASL_PLAINTEXT",
                          "sasl.mechanism": "PLAIN", "sasl.username": "alice", "sasl.password": "alice-secret"})
        sent, end = 0, time.monotonic() + seconds
        while time.monotonic() < end:
            kp.send("reauth", b"kp").get(timeout=30)
            cp.produce("reauth", b"ck")
            assert cp.flush(30) == 0
            sent += 2
            time.sleep(0.2)
        kp.close()
        return sent

    async def body(b: Broker) -> None:
        sent = await asyncio.to_thread(produce_for, b.sasl, 7)
        assert sent > 0
        auth = b.svc.metrics.authentications
        # Each client's connections authenticated more than once: the sessions were renewed in place.
        assert auth[("SCRAM-SHA-256", "success")] >= 4 and auth[("PLAIN", "success")] >= 4
        assert not any(result == "failure" for _, result in auth)
        assert b.svc.metrics.connection_errors == 0

    run(tmp_path, body, connectionsMaxReauthMs="2000")


def test_plain_with_pulsar_tokens_names_role_and_tenant(tmp_path: Path) -> None:
    """KoP's PLAIN: username = tenant[/namespace], password token:<jwt>; the principal is the token's role.
    With a users file as well, other passwords are checked against it."""
    import base64
    import time

    import jwt

    secret = b"s" * 32

    def token(exp_in: int) -> str:
        return jwt.encode({"sub": "app-role", "exp": int(time.time()) + exp_in}, secret, algorithm="HS256")

    still_open: list[WireClient] = []

    def exchange(bootstrap: str) -> None:
        c = WireClient(bootstrap)
        c.send(SaslHandshakeRequest(mechanism="PLAIN"), 1)
        r = c.send(SaslAuthenticateRequest(auth_bytes=plain_token("public/default", f"token:{token(300)}")), 1)
        assert r.error_code == 0 and 0 < r.session_lifetime_ms <= 300_000  # the token's expiry bounds it
        still_open.append(c)  # checked below, on the broker's side
        for password, message in ((f"token:{token(-60)}", "Authentication failed: token has expired"),
                                  ("token:not-a-jwt", "Authentication failed: token is malformed: DecodeError")):
            d = WireClient(bootstrap)
            d.send(SaslHandshakeRequest(mechanism="PLAIN"), 1)
            r = d.send(SaslAuthenticateRequest(auth_bytes=plain_token("public", password)), 1)
            assert (r.error_code, r.error_message) == (ErrorCode.SASL_AUTHENTICATION_FAILED, message)
            assert closed(d)

    async def body(b: Broker) -> None:
        await asyncio.to_thread(exchange, b.sasl)
        conn = next(c for c in b.handler.connections if c.listener_name == "SASL_PLAINTEXT")
        assert (str(conn.principal), conn.tenant) == ("User:app-role", "public/default")
        still_open[0].close()
        # The users file still serves the other passwords.
        r = await asyncio.to_thread(lambda: (w := WireClient(b.sasl)).send(SaslHandshakeRequest(mechanism="PLAIN"), 1)
                                    and w.send(SaslAuthenticateRequest(auth_bytes=plain_token("bob", "bob-secret")), 1))
        assert r.error_code == 0

    run(tmp_path, body, authenticationProviders="org.apache.pulsar.broker.authentication.AuthenticationProviderToken",
        tokenSecretKey="data:;base64," + base64.b64encode(secret).decode())


def test_java_client_reauthenticates_before_the_session_ends(tmp_path: Path) -> None:
    """KIP-368 with Kafka's own client: a Java producer writing for ~8 s under 3 s sessions re-authenticates
    in place (SaslHandshake + SaslAuthenticate on the authenticated connection) and nothing is closed."""
    from tests.support.java import JavaTools

    tools = JavaTools()
    cfg = tmp_path / "client.properties"
    cfg.write_text("security.protocol=SASL_PLAINTEXT\nsasl.mechanism=SCRAM-SHA-256\n"
                   "sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required "
                   'username="carol" password="carol-secret";\n')

    async def body(b: Broker) -> None:
        r = await asyncio.to_thread(
            tools.run, "kafka-producer-perf-test", "--bootstrap-server", b.sasl, "--topic", "java-reauth",
            "--num-records", "4000", "--record-size", "100", "--throughput", "500", "--command-config", cfg,
            timeout=300)
        assert r.rc == 0, r.stderr[-3000:]
        assert "4000 records sent" in r.stdout
        auth = b.svc.metrics.authentications
        assert auth[("SCRAM-SHA-256", "success")] >= 4  # bootstrap + broker connection, each renewed
        assert not any(result == "failure" for _, result in auth)
        assert b.svc.metrics.connection_errors == 0  # no session ran out

    run(tmp_path, body, connectionsMaxReauthMs="3000")
