"""The Pulsar port authorized by the broker's one Authorizer (kop/pulsar/authorize.py), against a real broker.

The broker runs with authenticationEnabled, authorizationEnabled, HS256 tokens and superUserRoles=admin; its
Kafka listener is SASL_PLAINTEXT with PLAIN and tokens (KoP's `token:<jwt>` password). The ACLs are made the
way an operator makes them: kafka-python's admin client, authenticated as the super user `admin`, over the
Kafka CreateAcls/DeleteAcls APIs - so the ACLs the Pulsar port enforces are the Kafka side's, in the
metadata store. Pulsar clients are the real `pulsar-client` with a token; GET_TOPICS_OF_NAMESPACE and
GET_LAST_MESSAGE_ID go through raw frames (tests/support/pulsar_wire.py), which the client does not expose.
"""

from __future__ import annotations

import base64
import itertools
import time
import uuid
from collections.abc import Iterator

import jwt
import pulsar
import pytest
from kafka import KafkaConsumer, KafkaProducer
from kafka.admin import (
    ACL,
    ACLFilter,
    ACLOperation,
    ACLPermissionType,
    ACLResourcePatternType,
    KafkaAdminClient,
    ResourcePattern,
    ResourcePatternFilter,
    ResourceType,
)
from kafka.errors import TopicAuthorizationFailedError

from kop.pulsar.authorize import topic_of_ledger
from kop.pulsar.codec import commands as c
from kop.topics.names import TopicName
from tests.support.broker import KopBroker
from tests.support.pulsar_wire import WireClient

SECRET = b"pulsar-authz-secret-0123456789ab"
NS = "persistent://public/default/"


def token(sub: str) -> str:
    return jwt.encode({"sub": sub, "exp": int(time.time()) + 3600}, SECRET, algorithm="HS256")


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[KopBroker]:
    base = tmp_path_factory.mktemp("pulsar-authz")
    b = KopBroker(base, {})
    b.overrides.update({
        "kafkaListeners": f"SASL_PLAINTEXT://127.0.0.1:{b.port}",
        "authenticationEnabled": "true", "saslAllowedMechanisms": "PLAIN",
        "authenticationProviders": "org.apache.pulsar.broker.authentication.AuthenticationProviderToken",
        "tokenSecretKey": "data:;base64," + base64.b64encode(SECRET).decode(),
        "authorizationEnabled": "true", "superUserRoles": "admin",
        "allowAutoTopicCreation": "true", "defaultNumPartitions": "1", "groupInitialRebalanceDelayMs": "0",
    })
    b.start()
    try:
        yield b
    finally:
        b.stop()


def kafka_security(role: str) -> dict[str, str]:
    return dict(security_protocol="SASL_PLAINTEXT", sasl_mechanism="PLAIN", sasl_plain_username="public/default",
                sasl_plain_password=f"token:{token(role)}")


@pytest.fixture(scope="module")
def admin(broker: KopBroker) -> Iterator[KafkaAdminClient]:
    a = KafkaAdminClient(bootstrap_servers=broker.bootstrap, **kafka_security("admin"))
    try:
        yield a
    finally:
        a.close()


def acl(role: str, op: ACLOperation, rtype: ResourceType, name: str,
        permission: ACLPermissionType = ACLPermissionType.ALLOW) -> ACL:
    return ACL(principal=f"User:{role}", host="*", operation=op, permission_type=permission,
               resource_pattern=ResourcePattern(rtype, name, ACLResourcePatternType.LITERAL))


def grant(admin: KafkaAdminClient, *acls: ACL) -> None:
    result = admin.create_acls(list(acls))
    assert not result["failed"], result


def revoke(admin: KafkaAdminClient, role: str, rtype: ResourceType, name: str) -> None:
    f = ACLFilter(principal=f"User:{role}", host="*", operation=ACLOperation.ANY,
                  permission_type=ACLPermissionType.ANY,
                  resource_pattern=ResourcePatternFilter(rtype, name, ACLResourcePatternType.LITERAL))
    [(_, deleted, error)] = admin.delete_acls([f])
    assert deleted and error.errno == 0, (deleted, error)


def client(broker: KopBroker, role: str) -> pulsar.Client:
    return pulsar.Client(broker.pulsar_url, authentication=pulsar.AuthenticationToken(token(role)),
                         operation_timeout_seconds=15)


def unique(stem: str) -> str:
    return f"{stem}-{uuid.uuid4().hex[:8]}"


def make_topic(broker: KopBroker, name: str) -> None:
    """Created (and given one message) by the super user over Pulsar: it may auto-create."""
    su = client(broker, "admin")
    try:
        su.create_producer(NS + name).send(b"seed")
    finally:
        su.close()


def wire(broker: KopBroker, role: str) -> WireClient:
    w = WireClient(broker.pulsar_port)
    w.send(c.command(c.CONNECT, client_version="authz-test", protocol_version=21, auth_method_name="token",
                     auth_data=token(role).encode()))
    w.expect(c.CONNECTED)
    return w


def test_a_role_without_acls_can_do_nothing(broker: KopBroker) -> None:
    topic = unique("closed")
    make_topic(broker, topic)
    cl = client(broker, "nobody")
    try:
        with pytest.raises(pulsar.AuthorizationError):
            cl.create_producer(NS + topic)
        with pytest.raises(pulsar.AuthorizationError):
            cl.subscribe(NS + topic, "s")
        with pytest.raises(pulsar.AuthorizationError):
            cl.get_topic_partitions(NS + topic)  # PARTITIONED_METADATA
        # nor may it create a topic by naming it
        with pytest.raises(pulsar.AuthorizationError):
            cl.create_producer(NS + unique("never-made"))
    finally:
        cl.close()
    w = wire(broker, "nobody")
    try:  # the raw answers are Pulsar's: AuthorizationError and its messages
        w.send(c.command(c.LOOKUP, topic=NS + topic, request_id=1))
        got = w.expect(c.LOOKUP_RESPONSE)
        assert (got.response, got.error, got.message) == (
            c.pb.CommandLookupTopicResponse.Failed, c.ServerError.AuthorizationError, "Client is not authorized to Lookup")
        w.send(c.command(c.PARTITIONED_METADATA, topic=NS + topic, request_id=2))
        got = w.expect(c.PARTITIONED_METADATA_RESPONSE)
        assert (got.error, got.message) == (c.ServerError.AuthorizationError,
                                            "Client is not authorized to Get Partition Metadata")
        w.send(c.command(c.PRODUCER, topic=NS + topic, producer_id=1, request_id=3))
        got = w.expect(c.ERROR)
        assert (got.request_id, got.error, got.message) == (3, c.ServerError.AuthorizationError,
                                                            "Client is not authorized to Produce")
        w.send(c.command(c.GET_TOPICS_OF_NAMESPACE, namespace="public/default", request_id=4))
        assert not any(topic in t for t in w.expect(c.GET_TOPICS_OF_NAMESPACE_RESPONSE).topics)
    finally:
        w.close()
    log = broker.log_path.read_text(errors="replace")
    assert "Client is not authorized to Produce with role User:nobody" in log


def test_write_lets_a_role_produce_and_read_on_topic_and_group_lets_it_consume(
        broker: KopBroker, admin: KafkaAdminClient) -> None:
    topic = unique("rw")
    make_topic(broker, topic)
    grant(admin, acl("writer", ACLOperation.WRITE, ResourceType.TOPIC, topic))
    cl = client(broker, "writer")
    try:
        cl.create_producer(NS + topic).send(b"from writer")
        with pytest.raises(pulsar.AuthorizationError):  # WRITE is not READ
            cl.subscribe(NS + topic, "writer-sub")
    finally:
        cl.close()
    # READ on the topic alone is not enough for a durable subscription: its group is needed too
    grant(admin, acl("reader", ACLOperation.READ, ResourceType.TOPIC, topic))
    cl = client(broker, "reader")
    try:
        with pytest.raises(pulsar.AuthorizationError):
            cl.subscribe(NS + topic, "reader-sub")
        with pytest.raises(pulsar.AuthorizationError):
            cl.create_producer(NS + topic)
        # a Reader (non-durable subscription, random name) needs only the topic, like Kafka's assign()
        reader = cl.create_reader(NS + topic, pulsar.MessageId.earliest)
        assert reader.read_next(timeout_millis=30000).data() == b"seed"
        grant(admin, acl("reader", ACLOperation.READ, ResourceType.GROUP, "reader-sub"))
        consumer = cl.subscribe(NS + topic, "reader-sub", initial_position=pulsar.InitialPosition.Earliest)
        got = [consumer.receive(timeout_millis=30000).data() for _ in range(2)]
        assert got == [b"seed", b"from writer"]
        # a group ACL is for that group only
        with pytest.raises(pulsar.AuthorizationError):
            cl.subscribe(NS + topic, "another-sub")
    finally:
        cl.close()
    w = wire(broker, "reader")
    try:  # namespace listing: the topics the role may DESCRIBE (READ implies it), and no other
        w.send(c.command(c.GET_TOPICS_OF_NAMESPACE, namespace="public/default", request_id=1))
        listed = w.expect(c.GET_TOPICS_OF_NAMESPACE_RESPONSE).topics
        assert list(listed) == [f"{NS}{topic}"]
    finally:
        w.close()


def test_a_deny_wins_over_an_allow(broker: KopBroker, admin: KafkaAdminClient) -> None:
    topic = unique("denied")
    make_topic(broker, topic)
    grant(admin, acl("mixed", ACLOperation.ALL, ResourceType.TOPIC, topic),
          acl("mixed", ACLOperation.WRITE, ResourceType.TOPIC, topic, ACLPermissionType.DENY))
    cl = client(broker, "mixed")
    try:
        with pytest.raises(pulsar.AuthorizationError):
            cl.create_producer(NS + topic)
        assert cl.get_topic_partitions(NS + topic) == [f"{NS}{topic}"]  # DESCRIBE still allowed
    finally:
        cl.close()


def test_a_super_user_may_do_everything(broker: KopBroker) -> None:
    topic = unique("su")
    cl = client(broker, "admin")
    try:
        cl.create_producer(NS + topic).send(b"by the super user")  # auto-created: CREATE is implied
        consumer = cl.subscribe(NS + topic, "any-group", initial_position=pulsar.InitialPosition.Earliest)
        assert consumer.receive(timeout_millis=30000).data() == b"by the super user"
    finally:
        cl.close()


def test_one_acl_governs_kafka_and_pulsar_and_its_removal_stops_new_producers_and_consumers(
        broker: KopBroker, admin: KafkaAdminClient) -> None:
    topic = unique("both")
    make_topic(broker, topic)
    grant(admin, acl("app", ACLOperation.WRITE, ResourceType.TOPIC, topic),
          acl("app", ACLOperation.READ, ResourceType.TOPIC, topic),
          acl("app", ACLOperation.READ, ResourceType.GROUP, "app-group"))
    # Kafka: the ACL on `topic` lets app produce and consume with group app-group
    kp = KafkaProducer(bootstrap_servers=broker.bootstrap, **kafka_security("app"))
    kp.send(topic, b"over kafka").get(timeout=30)
    kp.close()
    kc = KafkaConsumer(topic, bootstrap_servers=broker.bootstrap, group_id="app-group", auto_offset_reset="earliest",
                       consumer_timeout_ms=30000, **kafka_security("app"))
    assert [m.value for m in itertools.islice(kc, 2)] == [b"seed", b"over kafka"]  # the timeout: a hang guard
    kc.close()
    # Pulsar: the same ACL, under the topic's Pulsar name
    cl = client(broker, "app")
    try:
        producer = cl.create_producer(NS + topic)
        producer.send(b"over pulsar")
        consumer = cl.subscribe(NS + topic, "app-group", initial_position=pulsar.InitialPosition.Earliest)
        assert consumer.receive(timeout_millis=30000).data() == b"seed"
        revoke(admin, "app", ResourceType.TOPIC, topic)
        # new producers and consumers are refused, on both protocols
        with pytest.raises(pulsar.AuthorizationError):
            cl.create_producer(NS + topic)
        with pytest.raises(pulsar.AuthorizationError):
            cl.subscribe(NS + topic, "app-group")
        kp = KafkaProducer(bootstrap_servers=broker.bootstrap, max_block_ms=15000, **kafka_security("app"))
        with pytest.raises(TopicAuthorizationFailedError):
            kp.send(topic, b"refused").get(timeout=30)
        kp.close()
        # as in Pulsar, the producer and consumer opened before stay open
        producer.send(b"still open")
        assert consumer.receive(timeout_millis=30000).data() == b"over kafka"
    finally:
        cl.close()


def test_get_last_message_id_needs_describe(broker: KopBroker, admin: KafkaAdminClient) -> None:
    topic = unique("last")
    make_topic(broker, topic)
    grant(admin, acl("lm", ACLOperation.READ, ResourceType.TOPIC, topic),
          acl("lm", ACLOperation.READ, ResourceType.GROUP, "lm-sub"))
    w = wire(broker, "lm")
    try:
        w.send(c.command(c.SUBSCRIBE, topic=f"{NS}{topic}", subscription="lm-sub", subType=0,
                         consumer_id=1, request_id=1))
        w.expect(c.SUCCESS)
        w.send(c.command(c.GET_LAST_MESSAGE_ID, consumer_id=1, request_id=2))
        assert w.expect(c.GET_LAST_MESSAGE_ID_RESPONSE).last_message_id.entryId == 0
        revoke(admin, "lm", ResourceType.TOPIC, topic)
        w.send(c.command(c.GET_LAST_MESSAGE_ID, consumer_id=1, request_id=3))
        got = w.expect(c.ERROR)
        assert (got.request_id, got.error) == (3, c.ServerError.AuthorizationError)
    finally:
        w.close()


def test_auto_creation_needs_create(broker: KopBroker, admin: KafkaAdminClient) -> None:
    """WRITE on a topic that does not exist does not create it (Kafka's rule: CREATE on the cluster or topic)."""
    topic = unique("made")
    grant(admin, acl("maker", ACLOperation.WRITE, ResourceType.TOPIC, topic))
    cl = client(broker, "maker")
    try:
        with pytest.raises(pulsar.TopicNotFound):
            cl.create_producer(NS + topic)
        grant(admin, acl("maker", ACLOperation.CREATE, ResourceType.TOPIC, topic))
        cl.create_producer(NS + topic).send(b"created")
        assert cl.get_topic_partitions(NS + topic) == [f"{NS}{topic}"]
    finally:
        cl.close()


@pytest.mark.parametrize("name", [TopicName("public", "default", "t"), TopicName("ten", "ns", "a-partition-x.y"),
                                  TopicName("public", "default", "odd=name:1")])
def test_a_ledger_name_gives_its_topic_back(name: TopicName) -> None:
    """GET_LAST_MESSAGE_ID authorizes the topic of the consumer's partition, found from its ledger name."""
    for partition in (0, 7, 12):
        assert topic_of_ledger(name.ledger_name(partition)) == name
    assert topic_of_ledger("not/a-ledger") is None


def rest(broker: KopBroker, method: str, path: str, body: object = None) -> int:
    import json
    import urllib.request

    req = urllib.request.Request(broker.admin_url + path, method=method,
                                 data=None if body is None else json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json", "Authorization": "Bearer " + token("admin")})
    with urllib.request.urlopen(req, timeout=30) as r:
        return r.status


def test_a_pulsar_namespace_grant_is_a_kafka_acl_both_ports_enforce(broker: KopBroker, admin: KafkaAdminClient) -> None:
    """grant-permission on public/default (Pulsar's REST) lets the role produce over Kafka too, shows in Kafka's
    DescribeAcls as a PREFIXED binding on `public/default/`, and its revoke stops both ports."""
    topic, role = unique("granted"), unique("pulsar-granted")
    make_topic(broker, topic)
    assert rest(broker, "POST", f"/admin/v2/namespaces/public/default/permissions/{role}", ["produce"]) == 204
    kp = KafkaProducer(bootstrap_servers=broker.bootstrap, max_block_ms=15000, **kafka_security(role))
    kp.send(topic, b"over kafka, granted over pulsar").get(timeout=30)
    kp.close()
    f = ACLFilter(principal=f"User:{role}", host="*", operation=ACLOperation.ANY, permission_type=ACLPermissionType.ANY,
                  resource_pattern=ResourcePatternFilter(ResourceType.TOPIC, None, ACLResourcePatternType.ANY))
    acls, error = admin.describe_acls(f)
    assert error.errno == 0
    assert {(a.operation, a.resource_pattern.resource_name, a.resource_pattern.pattern_type) for a in acls} == {
        (ACLOperation.WRITE, "public/default/", ACLResourcePatternType.PREFIXED),
        (ACLOperation.CREATE, "public/default/", ACLResourcePatternType.PREFIXED)}
    assert rest(broker, "DELETE", f"/admin/v2/namespaces/public/default/permissions/{role}") == 204
    kp = KafkaProducer(bootstrap_servers=broker.bootstrap, max_block_ms=15000, **kafka_security(role))
    with pytest.raises(TopicAuthorizationFailedError):
        kp.send(topic, b"refused").get(timeout=30)
    kp.close()
    c = client(broker, role)
    try:
        with pytest.raises(pulsar.AuthorizationError):
            c.create_producer(NS + topic)
    finally:
        c.close()
