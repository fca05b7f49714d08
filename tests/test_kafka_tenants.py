"""KoP's multi-tenant metadata (kafkaEnableMultiTenantMetadata, kop/topics/scope.py) against a real broker.

A SASL/PLAIN login with a Pulsar token names its tenant (`A`, namespace = kafkaNamespace) or
`tenant/namespace` as the username: its short topic names, group ids and transactional ids live there. The
broker runs with a SASL_PLAINTEXT listener (PLAIN with tokens and a users file), the Pulsar port, ACLs on and
`superUserRoles=admin` (so the functional tests run as a super user and the ACL tests use other roles).
Clients: confluent-kafka (librdkafka takes topic names with '/', which kafka-python refuses), kafka-python's
admin client for ACLs, and the real pulsar-client for the Pulsar side.
"""

from __future__ import annotations

import base64
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import confluent_kafka as ck
import jwt
import pulsar
import pytest
from confluent_kafka import TopicPartition
from confluent_kafka.admin import AdminClient
from kafka import KafkaAdminClient
from kafka.admin import (
    ACL,
    ACLOperation,
    ACLPermissionType,
    ACLResourcePatternType,
    ResourcePattern,
    ResourceType,
)
from kafka.protocol.sasl import SaslAuthenticateRequest, SaslHandshakeRequest

from kop.protocol import api_info
from kop.protocol.errors import ErrorCode
from tests.support.acl_brokers import RawClient
from tests.support.broker import KopBroker
from tests.support.wire import WireClient

SECRET = b"tenant-test-secret-0123456789abcd"


def token(sub: str) -> str:
    return jwt.encode({"sub": sub, "exp": int(time.time()) + 3600}, SECRET, algorithm="HS256")


def start(base: Path, **overrides: str) -> KopBroker:
    users = base / "users.txt"
    base.mkdir(parents=True, exist_ok=True)
    users.write_text("bob=bob-secret\n")
    b = KopBroker(base, {})
    b.overrides.update({
        "kafkaListeners": f"SASL_PLAINTEXT://127.0.0.1:{b.port}",
        "authenticationEnabled": "true", "saslAllowedMechanisms": "PLAIN", "saslPlainUsersFile": str(users),
        "authenticationProviders": "org.apache.pulsar.broker.authentication.AuthenticationProviderToken",
        "tokenSecretKey": "data:;base64," + base64.b64encode(SECRET).decode(),
        "authorizationEnabled": "true", "superUserRoles": "admin,bob",
        "allowAutoTopicCreation": "true", "defaultNumPartitions": "1", "groupInitialRebalanceDelayMs": "0",
        **overrides,
    })
    return b.start()


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[KopBroker]:
    b = start(tmp_path_factory.mktemp("tenants"))
    try:
        yield b
    finally:
        b.stop()


def login(broker: KopBroker, username: str, role: str = "admin") -> dict[str, str]:
    """librdkafka settings of a PLAIN token login (username = tenant[/namespace]) or, for `bob`, a users-file one."""
    password = "bob-secret" if username == "bob" else f"token:{token(role)}"
    return {"bootstrap.servers": broker.bootstrap, "security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "PLAIN",
            "sasl.username": username, "sasl.password": password}


def unique(stem: str) -> str:
    return f"{stem}-{uuid.uuid4().hex[:8]}"


def produce(conf: dict[str, str], topic: str, values: list[bytes]) -> None:
    errors: list[object] = []
    p = ck.Producer({**conf, "allow.auto.create.topics": True})
    for v in values:
        p.produce(topic, v, on_delivery=lambda err, msg: err and errors.append(err))
    assert p.flush(60) == 0
    assert not errors, errors


def consume(conf: dict[str, str], topic: str, group: str | None = None, want: int | None = None,
            commit: bool = False) -> list[bytes]:
    """The records of partition 0 (assigned, or through `group` when given): `want` of them, or, assigned,
    as many as the offsets say."""
    c = ck.Consumer({**conf, "group.id": group or unique("reader"), "auto.offset.reset": "earliest",
                     "enable.auto.commit": False})
    try:
        if group is None:
            low, high = c.get_watermark_offsets(TopicPartition(topic, 0), timeout=30)
            want = high - low if want is None else want
            c.assign([TopicPartition(topic, 0, low)])
        else:
            c.subscribe([topic])
        got: list[bytes] = []
        deadline = time.monotonic() + 60
        while len(got) < (want or 0) and time.monotonic() < deadline:
            m = c.poll(1)
            if m is not None and m.error() is None:
                got.append(m.value())
        if commit:
            c.commit(asynchronous=False)
        return got
    finally:
        c.close()


def topic_names(conf: dict[str, str]) -> set[str]:
    return set(AdminClient(conf).list_topics(timeout=30).topics)


# ---------------------------------------------------------------------------------------- topics

def test_tenant_logins_have_their_own_short_topic_names(broker: KopBroker) -> None:
    t = unique("t")
    produce(login(broker, "A"), t, [b"a1", b"a2"])
    produce(login(broker, "B/ns"), t, [b"b1"])
    produce(login(broker, "bob"), t, [b"d1"])  # a users-file login: the default namespace
    assert consume(login(broker, "A"), t) == [b"a1", b"a2"]
    assert consume(login(broker, "A/default"), t) == [b"a1", b"a2"]  # the same namespace spelled out
    assert consume(login(broker, "B/ns"), t) == [b"b1"]
    assert consume(login(broker, "bob"), t) == [b"d1"]
    assert consume(login(broker, "public"), t) == [b"d1"]  # a token login naming the default tenant
    # explicit spellings name any topic, from any login
    assert consume(login(broker, "bob"), f"A/default/{t}") == [b"a1", b"a2"]
    assert consume(login(broker, "A"), f"persistent://B/ns/{t}") == [b"b1"]
    assert consume(login(broker, "B/ns"), f"public/default/{t}") == [b"d1"]

    # Metadata for all topics: a tenant login lists its own namespace under short names, the default login
    # every topic (others as tenant/ns/topic)
    a_sees = topic_names(login(broker, "A"))
    assert t in a_sees and "__consumer_offsets" in a_sees and not any("/" in n for n in a_sees)
    assert {t, f"A/default/{t}", f"B/ns/{t}"} <= topic_names(login(broker, "bob"))
    assert t in topic_names(login(broker, "B/ns"))

    # the topics are Pulsar's persistent://A/default/t and persistent://B/ns/t: a Pulsar client reads them
    client = pulsar.Client(broker.pulsar_url, authentication=pulsar.AuthenticationToken(token("admin")),
                           operation_timeout_seconds=30)
    try:
        for full, expected in ((f"persistent://A/default/{t}", [b"a1", b"a2"]), (f"persistent://B/ns/{t}", [b"b1"]),
                               (f"persistent://public/default/{t}", [b"d1"])):
            reader = client.create_reader(full, pulsar.MessageId.earliest)
            assert [reader.read_next(30_000).data() for _ in expected] == expected
            assert not reader.has_message_available()
            reader.close()
    finally:
        client.close()


def test_responses_echo_the_spelling_asked_for(broker: KopBroker) -> None:
    t = unique("echo")
    admin = AdminClient(login(broker, "A"))
    futures = admin.create_topics([ck.admin.NewTopic(t, 1, 1)], request_timeout=30)
    futures[t].result(30)
    # a second create of the same short name says so in the client's spelling
    with pytest.raises(ck.KafkaException) as e:
        admin.create_topics([ck.admin.NewTopic(t, 1, 1)], request_timeout=30)[t].result(30)
    assert e.value.args[0].code() == ck.KafkaError.TOPIC_ALREADY_EXISTS and f"'{t}'" in e.value.args[0].str()
    md = admin.list_topics(t, timeout=30)
    assert t in md.topics and md.topics[t].error is None
    res = admin.describe_configs([ck.admin.ConfigResource("topic", t)])
    [(resource, fut)] = res.items()
    assert "retention.ms" in fut.result(30)
    assert t not in topic_names(login(broker, "B/ns"))  # tenant B has no such topic
    admin.delete_topics([t], request_timeout=30)[t].result(30)
    assert f"A/default/{t}" not in topic_names(login(broker, "bob"))


def test_bad_usernames_fail_authentication_cleanly(broker: KopBroker) -> None:
    for username, why in (("a/b/c", "must name a tenant or tenant/namespace"),
                          ("bad tenant", "does not name a valid tenant"),
                          ("A/bad ns", "does not name a valid namespace"),
                          ("/ns", "does not name a valid tenant")):
        w = WireClient(broker.bootstrap)
        w.send(SaslHandshakeRequest(mechanism="PLAIN"), 1)
        r = w.send(SaslAuthenticateRequest(auth_bytes=f"\0{username}\0token:{token('admin')}".encode()), 1)
        assert r.error_code == ErrorCode.SASL_AUTHENTICATION_FAILED, username
        assert why in r.error_message, r.error_message
        w.close()
    # the broker is unharmed
    t = unique("after")
    produce(login(broker, "A"), t, [b"ok"])
    assert consume(login(broker, "A"), t) == [b"ok"]


# ---------------------------------------------------------------------------------------- ACLs

def grant(broker: KopBroker, role: str, rtype: ResourceType, name: str, *ops: ACLOperation) -> None:
    a = KafkaAdminClient(bootstrap_servers=broker.bootstrap, security_protocol="SASL_PLAINTEXT",
                         sasl_mechanism="PLAIN", sasl_plain_username="bob", sasl_plain_password="bob-secret")
    try:
        result = a.create_acls([ACL(principal=f"User:{role}", host="*", operation=op,
                                    permission_type=ACLPermissionType.ALLOW,
                                    resource_pattern=ResourcePattern(rtype, name, ACLResourcePatternType.LITERAL))
                                for op in ops])
        assert not result["failed"], result
    finally:
        a.close()


def produce_error(conf: dict[str, str], topic: str) -> int | None:
    """The error code of producing one record (None: delivered)."""
    errors: list[ck.KafkaError] = []
    p = ck.Producer({**conf, "message.timeout.ms": 15000})
    p.produce(topic, b"x", on_delivery=lambda err, msg: errors.append(err))
    p.flush(30)
    assert errors, "no delivery report"
    return None if errors[0] is None else errors[0].code()


def test_acls_name_a_tenants_topics_by_their_global_names(broker: KopBroker) -> None:
    t = unique("acl")
    produce(login(broker, "bob"), t, [b"default"])
    produce(login(broker, "A"), t, [b"tenant"])
    grant(broker, "app", ResourceType.TOPIC, t, ACLOperation.WRITE, ACLOperation.DESCRIBE)
    # an ACL on `t` is the default namespace's topic: it opens that, and not tenant A's `t`
    assert produce_error(login(broker, "public", "app"), t) is None
    assert produce_error(login(broker, "A", "app"), t) == ck.KafkaError.TOPIC_AUTHORIZATION_FAILED
    # tenant A's `t` is the resource A/default/t, for tenant A's short name and every explicit spelling
    grant(broker, "app2", ResourceType.TOPIC, f"A/default/{t}", ACLOperation.WRITE, ACLOperation.DESCRIBE)
    assert produce_error(login(broker, "A", "app2"), t) is None
    assert produce_error(login(broker, "B/ns", "app2"), f"persistent://A/default/{t}") is None
    assert produce_error(login(broker, "public", "app2"), t) == ck.KafkaError.TOPIC_AUTHORIZATION_FAILED
    assert produce_error(login(broker, "B/ns", "app2"), t) == ck.KafkaError.TOPIC_AUTHORIZATION_FAILED


# ---------------------------------------------------------------------------------------- the flag

def test_without_multi_tenant_metadata_every_login_uses_the_default_namespace(tmp_path: Path) -> None:
    b = start(tmp_path / "off", kafkaEnableMultiTenantMetadata="false")
    try:
        t = unique("flat")
        produce(login(b, "A"), t, [b"a"])
        produce(login(b, "B/ns"), t, [b"b"])
        assert consume(login(b, "bob"), t) == [b"a", b"b"]
        assert consume(login(b, "bob"), f"public/default/{t}") == [b"a", b"b"]
        names = topic_names(login(b, "bob"))
        assert t in names and f"A/default/{t}" not in names and f"B/ns/{t}" not in names
        # the username is not checked then (KoP ignores it without multi-tenant metadata)
        assert consume(login(b, "a/b/c"), t) == [b"a", b"b"]
    finally:
        b.stop()


# ---------------------------------------------------------------------------------------- groups

def committed(conf: dict[str, str], group: str, topic: str) -> int:
    c = ck.Consumer({**conf, "group.id": group})
    try:
        [tp] = c.committed([TopicPartition(topic, 0)], timeout=30)
        return tp.offset
    finally:
        c.close()


def listed_groups(conf: dict[str, str]) -> set[str]:
    admin = AdminClient(conf)  # kept until the answer is in: a collected client cancels its requests
    result = admin.list_consumer_groups(request_timeout=30).result(30)
    assert not result.errors, result.errors
    return {g.group_id for g in result.valid}


def test_groups_are_per_tenant(broker: KopBroker) -> None:
    t, g = unique("gt"), unique("g")
    logins = {"A": 3, "B/ns": 2, "bob": 1}
    for user, n in logins.items():
        produce(login(broker, user), t, [f"{user}-{i}".encode() for i in range(n)])
    # the same group id in three tenants: three groups, each committing its own position
    for user, n in logins.items():
        assert len(consume(login(broker, user), t, group=g, want=n, commit=True)) == n
    for user, n in logins.items():
        assert committed(login(broker, user), g, t) == n, user
    # the default login reaches a tenant's group by its global id, as it names topics
    assert committed(login(broker, "bob"), f"A/default/{g}", f"A/default/{t}") == 3

    # ListGroups: a tenant lists its own groups under their ids; the default login lists every group
    assert g in listed_groups(login(broker, "A"))
    assert not any("/" in x for x in listed_groups(login(broker, "A")))
    assert {g, f"A/default/{g}", f"B/ns/{g}"} <= listed_groups(login(broker, "bob"))
    # DescribeGroups answers under the id asked for
    admin = AdminClient(login(broker, "B/ns"))
    [(gid, fut)] = admin.describe_consumer_groups([g], request_timeout=30).items()
    assert gid == g and fut.result(30).group_id == g

    # DeleteGroups deletes only the tenant's own group
    admin = AdminClient(login(broker, "A"))
    admin.delete_consumer_groups([g], request_timeout=30)[g].result(30)
    assert g not in listed_groups(login(broker, "A"))
    assert committed(login(broker, "A"), g, t) < 0  # no committed offset any more
    assert committed(login(broker, "B/ns"), g, t) == 2 and committed(login(broker, "bob"), g, t) == 1


def test_group_acls_name_global_ids(broker: KopBroker) -> None:
    t, g = unique("gacl"), unique("g")
    produce(login(broker, "A"), t, [b"x"])
    produce(login(broker, "bob"), t, [b"y"])
    grant(broker, "reader", ResourceType.TOPIC, t, ACLOperation.READ, ACLOperation.DESCRIBE)
    grant(broker, "reader", ResourceType.TOPIC, f"A/default/{t}", ACLOperation.READ, ACLOperation.DESCRIBE)
    grant(broker, "reader", ResourceType.GROUP, g, ACLOperation.READ, ACLOperation.DESCRIBE)
    # the ACL on group g is the default tenant's g: it lets the default login consume and commit ...
    assert consume(login(broker, "public", "reader"), t, group=g, want=1, commit=True) == [b"y"]
    # ... and not tenant A's g (= A/default/g)
    c = ck.Consumer({**login(broker, "A", "reader"), "group.id": g, "auto.offset.reset": "earliest"})
    try:
        c.subscribe([t])
        err = None
        deadline = time.monotonic() + 60
        while err is None and time.monotonic() < deadline:
            m = c.poll(1)
            if m is not None and m.error() is not None:
                err = m.error().code()
        assert err == ck.KafkaError.GROUP_AUTHORIZATION_FAILED
    finally:
        c.close()
    grant(broker, "reader", ResourceType.GROUP, f"A/default/{g}", ACLOperation.READ, ACLOperation.DESCRIBE)
    assert consume(login(broker, "A", "reader"), t, group=g, want=1, commit=True) == [b"x"]


# ---------------------------------------------------------------------------------------- transactional ids

def raw_login(broker: KopBroker, username: str) -> RawClient:
    c = RawClient(broker.bootstrap, "127.0.0.1")
    c.call(17, 1, api_info(17).request_class(mechanism="PLAIN"))
    r = c.call(36, 2, api_info(36).request_class(auth_bytes=f"\0{username}\0token:{token('admin')}".encode()))
    assert r.error_code == 0, r
    return c


def listed_transactions(broker: KopBroker, username: str) -> set[str]:
    L = api_info(66).request_class
    with raw_login(broker, username) as c:
        r = c.call(66, 1, L(state_filters=[], producer_id_filters=[], duration_filter=-1))
    assert r.error_code == 0
    return {s.transactional_id for s in r.transaction_states}


def test_transactional_ids_are_per_tenant(broker: KopBroker) -> None:
    t, tid = unique("tx"), unique("tid")
    a = ck.Producer({**login(broker, "A"), "transactional.id": tid})
    a.init_transactions(30)
    a.begin_transaction()
    a.produce(t, b"from-a")
    a.flush(30)
    # the default tenant's producer with the same id is another transaction: it does not fence A's
    d = ck.Producer({**login(broker, "bob"), "transactional.id": tid})
    d.init_transactions(30)
    d.begin_transaction()
    d.produce(t, b"from-default")
    d.flush(30)
    D = api_info(65).request_class
    with raw_login(broker, "A") as c:
        [st] = c.call(65, 0, D(transactional_ids=[tid])).transaction_states
    assert (st.error_code, st.transactional_id, st.transaction_state) == (0, tid, "Ongoing")
    assert [x.topic for x in st.topics] == [t]  # the partitions under the tenant's own spelling
    assert tid in listed_transactions(broker, "A") and not any("/" in x for x in listed_transactions(broker, "A"))
    assert {tid, f"A/default/{tid}"} <= listed_transactions(broker, "public")  # a default-namespace login
    a.commit_transaction(30)
    d.commit_transaction(30)
    committed_conf = {"isolation.level": "read_committed"}
    # want=1: the commit marker takes an offset too
    assert consume({**login(broker, "A"), **committed_conf}, t, want=1) == [b"from-a"]
    assert consume({**login(broker, "bob"), **committed_conf}, t, want=1) == [b"from-default"]


def test_kip848_regex_subscriptions_see_the_tenants_own_topics(broker: KopBroker) -> None:
    """A tenant's consumer-protocol group matches its regex against its own namespace's short names."""
    u = uuid.uuid4().hex[:8]
    produce(login(broker, "A"), f"rx-{u}-a", [b"tenant"])
    produce(login(broker, "bob"), f"rx-{u}-d", [b"default"])

    def read(user: str) -> list[tuple[str, bytes]]:
        c = ck.Consumer({**login(broker, user), "group.id": unique("rx"), "group.protocol": "consumer",
                         "auto.offset.reset": "earliest", "topic.metadata.refresh.interval.ms": 1000})
        try:
            c.subscribe([f"^rx-{u}-.*"])
            got: list[tuple[str, bytes]] = []
            deadline = time.monotonic() + 60
            while not got and time.monotonic() < deadline:
                m = c.poll(1)
                if m is not None and m.error() is None:
                    got.append((m.topic(), m.value()))
            for _ in range(3):  # nothing else arrives
                m = c.poll(1)
                if m is not None and m.error() is None:
                    got.append((m.topic(), m.value()))
            return got
        finally:
            c.close()

    assert read("A") == [(f"rx-{u}-a", b"tenant")]
    assert read("bob") == [(f"rx-{u}-d", b"default")]
