"""Kafka 4.4's admin surface on our broker, byte for byte: DescribeLogDirs (kop/kafka/apis/describe_log_dirs.py),
ListConfigResources (list_config_resources.py), the broker configs DescribeConfigs lists (configs_common.py),
the topic configs Kafka 4.3/4.4 added (kop/topics/topic_config.py), and the decoder limits on a live connection.

Requests are encoded and responses decoded with kafka-python's classes (tests/support/wire.py), independent of
our codec. The same behaviour through Kafka's own tools, on ours and on Apache Kafka, is
tests/e2e/test_admin_44.py.
"""

from __future__ import annotations

import os
import socket
import struct

import pytest
from kafka.protocol.admin import DescribeConfigsRequest, DescribeLogDirsRequest, ListConfigResourcesRequest

from kop.config import BrokerConfig
from kop.kafka.apis.configs_common import BROKER_SYNONYM, broker_configs
from kop.topics.topic_config import TOPIC_CONFIGS
from tests.support.clients import create_topic
from tests.support.wire import Negotiated, WireClient

TOPIC, BROKER, BROKER_LOGGER, CLIENT_METRICS, GROUP = 2, 4, 8, 16, 32
UNSUPPORTED_VERSION = 35
TYPE_INT, TYPE_LIST = 3, 7
INT_MAX = 2**31 - 1


@pytest.fixture(scope="module")
def broker(tmp_path_factory):
    from tests.support.broker import KopBroker

    b = KopBroker(tmp_path_factory.mktemp("kop-admin-44"), {"allowAutoTopicCreation": "false"}).start()
    yield b
    b.stop()


def produce(bootstrap: str, topic: str, partition: int, values: list[bytes]) -> None:
    from kafka import KafkaProducer

    p = KafkaProducer(bootstrap_servers=bootstrap, linger_ms=0, acks="all")
    try:
        for v in values:
            p.send(topic, value=v, partition=partition).get(timeout=30)
    finally:
        p.close()


def log_dirs(bootstrap: str, version: int, topics: dict[str, list[int]] | None):
    T = DescribeLogDirsRequest.DescribableLogDirTopic
    req = DescribeLogDirsRequest(topics=None if topics is None else [T(topic=t, partitions=ps)
                                                                      for t, ps in topics.items()])
    with WireClient(bootstrap) as c:
        return c.send(req, version=version)


def sizes(result) -> dict[tuple[str, int], int]:
    return {(t.name, p.partition_index): p.partition_size for t in result.topics for p in t.partitions}


# ---------------------------------------------------------------------------------------------- DescribeLogDirs


def test_describe_log_dirs_reports_the_data_dir_and_the_ledgers_real_sizes(broker):
    topic = "logdirs-sizes"
    create_topic(broker.bootstrap, topic, 3)
    produce(broker.bootstrap, topic, 0, [b"x" * 1000] * 3)
    resp = log_dirs(broker.bootstrap, 5, {topic: [0, 1, 2, 7], "no-such-topic": [0]})
    assert resp.error_code == 0
    (result,) = resp.results
    assert result.error_code == 0
    assert result.log_dir == os.path.abspath(broker.data_dir)
    assert 0 < result.usable_bytes <= result.total_bytes
    assert result.is_cordoned is False
    got = sizes(result)
    # Partition 7 and the unknown topic are left out, as Kafka leaves out partitions it has no log of.
    assert set(got) == {(topic, 0), (topic, 1), (topic, 2)}
    assert got[(topic, 1)] == got[(topic, 2)] == 0
    assert got[(topic, 0)] >= 3000  # three batches of a 1000-byte value each
    for t in result.topics:
        for p in t.partitions:
            assert (p.offset_lag, p.is_future_key) == (0, False)
    # The size is the managed ledger's: it grows by what the next batch stores.
    before = got[(topic, 0)]
    produce(broker.bootstrap, topic, 0, [b"y" * 5000])
    after = sizes(log_dirs(broker.bootstrap, 5, {topic: [0]}).results[0])[(topic, 0)]
    assert 5000 <= after - before < 5000 + 200


def test_describe_log_dirs_all_topics_and_every_version(broker):
    topic = "logdirs-all"
    create_topic(broker.bootstrap, topic, 2)
    produce(broker.bootstrap, topic, 1, [b"z" * 10])
    for version in range(1, 6):
        resp = log_dirs(broker.bootstrap, version, None)
        (result,) = resp.results
        got = sizes(result)
        assert got[(topic, 1)] > 0 and got[(topic, 0)] == 0, version
        if version >= 4:
            assert result.total_bytes > 0
        else:
            assert result.total_bytes == -1  # not on the wire below v4: the schema's default
    # Internal topics are described too, as Kafka describes every log it holds.
    assert any(name == "__consumer_offsets" for name, _ in sizes(log_dirs(broker.bootstrap, 5, None).results[0]))


# ----------------------------------------------------------------------------------------- ListConfigResources


def list_config_resources(bootstrap: str, version: int, types: list[int]) -> tuple[int, list[tuple[int, str]]]:
    with WireClient(bootstrap) as c:
        resp = c.send(ListConfigResourcesRequest(resource_types=types), version=version)
    return resp.error_code, [(r.resource_type, r.resource_name) for r in resp.config_resources]


def test_list_config_resources_as_kafka_44(broker):
    topic = "lcr-topic"
    create_topic(broker.bootstrap, topic, 1)
    # v0 (ListClientMetricsResources): client-metrics subscriptions only, and none is set here.
    assert list_config_resources(broker.bootstrap, 0, []) == (0, [])
    assert list_config_resources(broker.bootstrap, 1, [CLIENT_METRICS]) == (0, [])
    # v1 without types: every type; brokers before topics (Kafka's order), topics sorted.
    err, listed = list_config_resources(broker.bootstrap, 1, [])
    assert err == 0
    assert listed[0] == (BROKER, "1")
    assert (TOPIC, topic) in listed and (TOPIC, "__consumer_offsets") in listed
    assert [rtype for rtype, _ in listed] == [BROKER] + [TOPIC] * (len(listed) - 1)
    assert list_config_resources(broker.bootstrap, 1, [BROKER]) == (0, [(BROKER, "1")])
    err, only_topics = list_config_resources(broker.bootstrap, 1, [TOPIC])
    assert err == 0 and only_topics == listed[1:]
    assert list_config_resources(broker.bootstrap, 1, [GROUP, BROKER_LOGGER]) == (0, [])
    # A type the version does not serve: UNSUPPORTED_VERSION and nothing listed, as Kafka.
    assert list_config_resources(broker.bootstrap, 1, [TOPIC, 99]) == (UNSUPPORTED_VERSION, [])


def alter_subscription(c):
    """IncrementalAlterConfigs v1 SET metrics on the client metrics subscription m1; its one result."""
    from kop.protocol import api_info

    req = api_info(44).request_class
    resource = req.AlterConfigsResource(resource_type=CLIENT_METRICS, resource_name="m1", configs=[
        req.AlterableConfig(name="metrics", config_operation=0, value="org.apache.kafka.")])
    return c.call(44, 1, req(resources=[resource], validate_only=False)).responses[0]


def describe_subscription(c):
    """DescribeConfigs v4 of the client metrics subscription m1; its one result."""
    from kop.protocol import api_info

    req = api_info(32).request_class
    resource = req.DescribeConfigsResource(resource_type=CLIENT_METRICS, resource_name="m1", configuration_keys=None)
    return c.call(32, 4, req(resources=[resource], include_synonyms=False, include_documentation=False)).results[0]


def test_both_need_their_cluster_permission_as_in_kafka(tmp_path):
    """DescribeLogDirs needs DESCRIBE on the cluster (refused: no results, and CLUSTER_AUTHORIZATION_FAILED from
    v3), ListConfigResources DESCRIBE_CONFIGS on it (refused: CLUSTER_AUTHORIZATION_FAILED, nothing listed), and
    a client metrics subscription DESCRIBE_CONFIGS / ALTER_CONFIGS on it."""
    from kop.protocol import api_info
    from tests.support.acl_brokers import ADMIN_HOST, PRINCIPAL, SUBJECT_HOST, RawClient, create_acls
    from tests.support.broker import KopBroker

    b = KopBroker(tmp_path, {"authorizationEnabled": "true", "allowEveryoneIfNoAclFound": "true"}).start()
    try:
        create_topic(b.bootstrap, "acl-logdirs", 1)
        # On the cluster: DENY DESCRIBE and DESCRIBE_CONFIGS to the subject's host, ALLOW ALL to the admin's
        # (with ACLs on a resource, no ACL found no longer means allowed).
        with RawClient(b.bootstrap, ADMIN_HOST) as c:
            resp = create_acls(c, [(4, "kafka-cluster", 3, PRINCIPAL, SUBJECT_HOST, 8, 2),
                                   (4, "kafka-cluster", 3, PRINCIPAL, SUBJECT_HOST, 10, 2),
                                   (4, "kafka-cluster", 3, PRINCIPAL, ADMIN_HOST, 2, 3)])
        assert [r.error_code for r in resp.results] == [0, 0, 0]
        LD, LC = api_info(35).request_class, api_info(74).request_class
        with RawClient(b.bootstrap, SUBJECT_HOST) as c:
            refused = c.call(35, 5, LD(topics=None))
            assert (refused.error_code, refused.results) == (31, [])
            assert c.call(35, 2, LD(topics=None)).results == []  # no error field before v3
            listed = c.call(74, 1, LC(resource_types=[]))
            assert (listed.error_code, listed.config_resources) == (31, [])
        with RawClient(b.bootstrap, ADMIN_HOST) as c:
            allowed = c.call(35, 5, LD(topics=None))
            assert allowed.error_code == 0 and allowed.results[0].topics
            assert c.call(74, 1, LC(resource_types=[4])).error_code == 0
            # a client metrics subscription: ALTER_CONFIGS / DESCRIBE_CONFIGS on the cluster, as Kafka
            assert alter_subscription(c).error_code == 0
            assert [(r.resource_type, r.resource_name) for r in c.call(74, 0, LC(resource_types=[])).config_resources] \
                == [(CLIENT_METRICS, "m1")]
            assert describe_subscription(c).error_code == 0
        with RawClient(b.bootstrap, SUBJECT_HOST) as c:  # no ALLOW for it on the cluster: both refused
            refused_alter = alter_subscription(c)
            assert (refused_alter.error_code, refused_alter.error_message) == (31, "Cluster authorization failed.")
            assert describe_subscription(c).error_code == 31
    finally:
        b.stop()


# --------------------------------------------------------------------------------------------- broker configs


def test_broker_configs_have_kafkas_types_and_fit_them():
    cfg = BrokerConfig()
    described = {name: (value, ctype, source) for name, value, ctype, source in broker_configs(cfg)}
    assert len(described) == len(broker_configs(cfg))  # no name twice
    # The default ledger rollover size is 2 GiB, past an INT: described at Kafka's INT bound.
    assert cfg.managedLedgerMaxSizePerLedgerMbytes * 1024 * 1024 > INT_MAX
    assert described["log.segment.bytes"][:2] == (str(INT_MAX), TYPE_INT)
    for name in ("listeners", "advertised.listeners", "log.cleanup.policy"):
        assert described[name][1] == TYPE_LIST, name
    for name, (value, ctype, _source) in described.items():
        if ctype == TYPE_INT:
            assert -(2**31) <= int(value) <= INT_MAX, name
    # Every broker-level synonym a topic's description names is itself a broker config.
    assert set(BROKER_SYNONYM.values()) <= set(described)
    assert described["log.remote.copy.lag.ms"] == ("0", 5, 5)  # DEFAULT_CONFIG
    assert described["max.decompressed.message.bytes"] == ("2147483639", TYPE_INT, 5)


def test_describe_broker_configs_on_the_wire(broker):
    R = DescribeConfigsRequest.DescribeConfigsResource
    req = DescribeConfigsRequest(resources=[R(resource_type=BROKER, resource_name="1", configuration_keys=None)],
                                 include_synonyms=True, include_documentation=False)
    with Negotiated(broker.bootstrap) as c:
        (res,) = c.call(req, cap=4).results
    assert res.error_code == 0
    entries = {e.name: e for e in res.configs}
    seg = entries["log.segment.bytes"]
    assert (seg.value, seg.config_type, seg.config_source) == (str(INT_MAX), TYPE_INT, 4)  # STATIC_BROKER_CONFIG
    lag = entries["log.remote.copy.lag.bytes"]
    assert (lag.value, lag.config_source) == ("-1", 5)  # DEFAULT_CONFIG
    assert [(s.name, s.value, s.source) for s in lag.synonyms] == [("log.remote.copy.lag.bytes", "-1", 5)]


# ------------------------------------------------------------------------------ the topic configs of 4.3 / 4.4

def test_the_44_topic_configs_types_and_defaults() -> None:
    cfg = BrokerConfig()
    got = {n: (TOPIC_CONFIGS[n].type, TOPIC_CONFIGS[n].default(cfg)) for n in (
        "max.decompressed.message.bytes", "remote.copy.lag.ms", "remote.copy.lag.bytes",
        "errors.deadletterqueue.group.enable")}
    assert got == {"max.decompressed.message.bytes": (3, "2147483639"), "remote.copy.lag.ms": (5, "0"),
                   "remote.copy.lag.bytes": (5, "-1"), "errors.deadletterqueue.group.enable": (1, "false")}


# -------------------------------------------------------------------------------------------- decoder limits


def test_a_request_over_the_collection_limit_closes_the_connection_and_harms_nobody(broker):
    """Kafka closes a connection whose request it cannot parse; 1 000 001 resource types is one (4.3+)."""
    count = 1_000_001
    n = count + 1  # a compact array's length is its count + 1, as an unsigned varint
    varint = bytearray()
    while n > 0x7F:
        varint.append((n & 0x7F) | 0x80)
        n >>= 7
    varint.append(n)
    body = bytes(varint) + bytes([TOPIC]) * count + b"\x00"
    client_id = b"limits"
    header = struct.pack(">hhih", 74, 1, 1, len(client_id)) + client_id + b"\x00"
    frame = header + body
    host, port = broker.bootstrap.rsplit(":", 1)
    with socket.create_connection((host, int(port)), timeout=30) as s:
        s.sendall(struct.pack(">i", len(frame)) + frame)
        assert s.recv(65536) == b""  # closed without an answer
    assert list_config_resources(broker.bootstrap, 1, [BROKER]) == (0, [(BROKER, "1")])
