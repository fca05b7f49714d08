"""Dynamic broker configs (kop/topics/broker_configs.py; IncrementalAlterConfigs, AlterConfigs and
DescribeConfigs on BROKER resources in kop/kafka/apis/): Kafka's rules without I/O, the store shared by the
brokers of a cluster on one metadata store, and the wire on a broker of ours - refusals with Kafka's codes and
messages, sources and synonyms in Kafka's order, a dynamic message.max.bytes refusing a produce at once, and the
configs surviving a restart. The same through kafka-configs, on ours and on Apache Kafka:
tests/e2e/test_broker_configs.py.
"""

from __future__ import annotations

import asyncio

import pytest
from kafka.protocol.admin import AlterConfigsRequest, DescribeConfigsRequest, IncrementalAlterConfigsRequest

from kop.config import BrokerConfig
from kop.storage.local.metadata import SqliteMetadataStore
from kop.topics.broker_configs import BrokerConfigError, BrokerConfigs, is_dynamic, java_set, validate
from kop.topics.topic_config import effective
from tests.support.clients import create_topic
from tests.support.wire import Negotiated

TOPIC, BROKER = 2, 4
SET, DELETE, APPEND, SUBTRACT = 0, 1, 2, 3
INVALID_CONFIG, INVALID_REQUEST = 40, 42
DYNAMIC_TOPIC, DYNAMIC_BROKER, DYNAMIC_DEFAULT, STATIC, DEFAULT = 1, 2, 3, 4, 5


# ------------------------------------------------------------------------------------------- Kafka's rules


@pytest.mark.parametrize("props,per_broker,message", [
    ({"broker.id": "2"}, True, "Cannot update these configs dynamically: [broker.id]"),
    ({"log.retention.hours": "1", "num.partitions": "3", "message.max.bytes": "1"}, True,
     "Cannot update these configs dynamically: [log.retention.hours, num.partitions]"),
    ({"ssl.keystore.location": "/x"}, True, "These security configs can be dynamically updated only per-listener "
     "using the listener prefix: [ssl.keystore.location]"),
    ({"message.max.bytes": "big"}, False,
     "Invalid value big for configuration message.max.bytes: Not a number of type INT"),
    ({"message.max.bytes": "-1"}, False,
     "Invalid value -1 for configuration message.max.bytes: Value must be at least 0"),
    ({"log.segment.bytes": "1000"}, False,
     "Invalid value 1000 for configuration log.segment.bytes: Value must be at least 1048576"),
    ({"compression.type": "brotli"}, False, "Invalid value brotli for configuration compression.type: String must "
     "be one of: uncompressed, zstd, lz4, snappy, gzip, producer"),
    ({"log.cleanup.policy": "delete,keep"}, False,
     "Invalid value keep for configuration log.cleanup.policy: String must be one of: compact, delete"),
    ({"log.preallocate": "yes"}, False,
     "Invalid value yes for configuration log.preallocate: Expected value to be either true or false"),
    ({"listener.name.plaintext.ssl.keystore.location": "/x"}, False, "Cannot update these configs at default "
     "cluster level, broker id must be specified: [listener.name.plaintext.ssl.keystore.location]"),
    ({"listeners": "PLAINTEXT://:1"}, False,
     "Cannot update these configs at default cluster level, broker id must be specified: [listeners]"),
])
def test_refusals_are_kafkas(props: dict[str, str], per_broker: bool, message: str) -> None:
    with pytest.raises(BrokerConfigError) as e:
        validate(props, per_broker)
    assert (e.value.error, e.value.message) == ("INVALID_REQUEST", message)


def test_what_kafka_accepts() -> None:
    validate({"message.max.bytes": "2048", "log.retention.ms": "-1", "log.cleanup.policy": "compact,delete",
              "compression.gzip.level": "-1", "log.cleaner.threads": "2", "max.connections": "100",
              "my.custom.property": "anything"}, per_broker=False)
    validate({"listeners": "PLAINTEXT://:9092", "listener.name.plaintext.ssl.keystore.location": "/x",
              "listener.name.plaintext.max.connections": "5"}, per_broker=True)
    validate({"listener.name.plaintext.max.connections": "5"}, per_broker=False)  # a cluster-level listener one
    assert not is_dynamic("broker.id") and not is_dynamic("num.partitions") and not is_dynamic("log.retention.hours")
    assert is_dynamic("message.max.bytes") and is_dynamic("log.remote.copy.lag.ms") and is_dynamic("custom.x")
    # java.util.HashSet's iteration order (checked with Java 17): by bucket, the table grown by add() or sized for
    # the collection it was made from
    fourteen = ["broker.id", "num.partitions", "log.retention.hours", "log.dirs", "zookeeper.connect", "node.id",
                "process.roles", "log.segment.delete.delay.ms", "x.y", "auto.create.topics.enable",
                "offsets.topic.replication.factor", "transaction.state.log.min.isr",
                "group.initial.rebalance.delay.ms", "controller.listener.names"]
    assert java_set(fourteen) == (
        "[log.retention.hours, node.id, num.partitions, x.y, auto.create.topics.enable, "
        "group.initial.rebalance.delay.ms, offsets.topic.replication.factor, transaction.state.log.min.isr, "
        "zookeeper.connect, process.roles, controller.listener.names, broker.id, log.segment.delete.delay.ms, "
        "log.dirs]")
    assert java_set(fourteen[:5], presized_for=30) == (
        "[log.retention.hours, num.partitions, zookeeper.connect, broker.id, log.dirs]")


def test_a_cluster_default_set_through_one_broker_applies_on_the_others(tmp_path) -> None:
    """Two brokers on one metadata store (cluster mode's ZooKeeper): what one sets for every broker the other
    applies on its next re-read; per-broker values win over the default, and stay with their broker."""

    async def run() -> None:
        store = SqliteMetadataStore(tmp_path)
        cfg1, cfg2 = BrokerConfig(kafkaBrokerId=1), BrokerConfig(kafkaBrokerId=2)
        b1, b2 = BrokerConfigs(cfg1, store), BrokerConfigs(cfg2, store)
        await b1.reload()
        await b2.reload()
        await b1.alter("", lambda c: {**c, "log.retention.ms": "60000", "compression.type": "zstd"})
        await b2.reload()
        assert effective({}, "retention.ms", cfg2) == "60000"
        assert effective({}, "compression.type", cfg2) == "zstd"
        assert effective({"retention.ms": "5"}, "retention.ms", cfg2) == "5"  # a topic's own value wins
        await b2.alter("2", lambda c: {**c, "log.retention.ms": "1000"})
        await b1.reload()
        assert effective({}, "retention.ms", cfg2) == "1000"
        assert effective({}, "retention.ms", cfg1) == "60000"
        with pytest.raises(BrokerConfigError) as e:
            await b1.alter("2", lambda c: c)
        assert e.value.message == "Unexpected broker id, expected 1, but received 2"
        await b1.alter("", lambda c: {}, validate_only=True)  # validate only: nothing changes
        await b2.reload()
        assert effective({}, "compression.type", cfg2) == "zstd"
        await b1.alter("", lambda c: {})
        await b2.reload()
        assert effective({}, "compression.type", cfg2) == "producer"
        await store.close()

    asyncio.run(run())


# ------------------------------------------------------------------------------------------------ the wire


@pytest.fixture(scope="module")
def broker(tmp_path_factory):
    from tests.support.broker import KopBroker

    b = KopBroker(tmp_path_factory.mktemp("kop-broker-configs"), {"allowAutoTopicCreation": "false"}).start()
    yield b
    b.stop()


def incremental(broker, *resources, validate_only: bool = False) -> list[tuple[int, str | None]]:
    R = IncrementalAlterConfigsRequest.AlterConfigsResource
    req = IncrementalAlterConfigsRequest(
        resources=[R(resource_type=t, resource_name=n,
                     configs=[R.AlterableConfig(name=k, config_operation=op, value=v) for k, op, v in ops])
                   for t, n, ops in resources],
        validate_only=validate_only)
    with Negotiated(broker.bootstrap) as c:
        return [(r.error_code, r.error_message) for r in c.call(req, cap=1).responses]


def legacy(broker, name: str, configs: dict[str, str | None]) -> tuple[int, str | None]:
    R = AlterConfigsRequest.AlterConfigsResource
    req = AlterConfigsRequest(resources=[R(resource_type=BROKER, resource_name=name, configs=[
        R.AlterableConfig(name=k, value=v) for k, v in configs.items()])], validate_only=False)
    with Negotiated(broker.bootstrap) as c:
        (r,) = c.call(req, cap=2).responses
    return r.error_code, r.error_message


def describe(broker, rtype: int, name: str, keys: list[str] | None = None):
    R = DescribeConfigsRequest.DescribeConfigsResource
    req = DescribeConfigsRequest(resources=[R(resource_type=rtype, resource_name=name, configuration_keys=keys)],
                                 include_synonyms=True, include_documentation=False)
    with Negotiated(broker.bootstrap) as c:
        (res,) = c.call(req, cap=4).results
    return res


def entries(broker, rtype: int, name: str, keys: list[str] | None = None) -> dict:
    res = describe(broker, rtype, name, keys)
    assert res.error_code == 0, res.error_message
    return {e.name: (e.value, e.config_source, e.read_only, [(s.name, s.value, s.source) for s in e.synonyms])
            for e in res.configs}


def test_sources_and_synonyms_in_kafkas_order(broker) -> None:
    assert incremental(broker, (BROKER, "", [("log.retention.ms", SET, "86400000")]),
                       (BROKER, "1", [("log.retention.ms", SET, "3600000")])) == [(0, None), (0, None)]
    try:
        assert entries(broker, BROKER, "") == {
            "log.retention.ms": ("86400000", DYNAMIC_DEFAULT, False,
                                 [("log.retention.ms", "86400000", DYNAMIC_DEFAULT)])}
        mine = entries(broker, BROKER, "1", ["log.retention.ms", "broker.id", "message.max.bytes"])
        value, source, read_only, synonyms = mine["log.retention.ms"]
        assert (value, source, read_only) == ("3600000", DYNAMIC_BROKER, False)
        assert synonyms[:2] == [("log.retention.ms", "3600000", DYNAMIC_BROKER),
                                ("log.retention.ms", "86400000", DYNAMIC_DEFAULT)]
        assert [s for _, _, s in synonyms[2:]] in ([STATIC], [DEFAULT])
        assert mine["broker.id"][2] is True and mine["message.max.bytes"][2] is False  # read-only = not dynamic
        create_topic(broker.bootstrap, "bc-synonyms", 1)
        t = entries(broker, TOPIC, "bc-synonyms", ["retention.ms"])["retention.ms"]
        assert t[:2] == ("3600000", DYNAMIC_BROKER)
        assert t[3][:2] == [("log.retention.ms", "3600000", DYNAMIC_BROKER),
                            ("log.retention.ms", "86400000", DYNAMIC_DEFAULT)]
    finally:
        assert incremental(broker, (BROKER, "", [("log.retention.ms", DELETE, None)]),
                           (BROKER, "1", [("log.retention.ms", DELETE, None)])) == [(0, None), (0, None)]
    assert entries(broker, BROKER, "") == {}


def test_refusals_on_the_wire(broker) -> None:
    got = incremental(
        broker,
        (BROKER, "", [("broker.id", SET, "7")]),
        (BROKER, "2", [("message.max.bytes", SET, "1")]),
        (BROKER, "one", [("message.max.bytes", SET, "1")]),
        (BROKER, "", [("message.max.bytes", SET, "x")]),
        (BROKER, "", [("message.max.bytes", SET, None)]),
        (BROKER, "1", [("message.max.bytes", APPEND, "1")]),
        (BROKER, "", [("listeners", SET, "PLAINTEXT://:1")]),
    )
    assert got == [
        (INVALID_REQUEST, "Cannot update these configs dynamically: [broker.id]"),
        (INVALID_REQUEST, "Unexpected broker id, expected 1, but received 2"),
        (INVALID_REQUEST, "Node id must be an integer, but it is: one"),
        (INVALID_REQUEST, "Invalid value x for configuration message.max.bytes: Not a number of type INT"),
        (INVALID_REQUEST, "Null value not supported for : message.max.bytes"),
        (INVALID_CONFIG, "Config value append is not allowed for config key: message.max.bytes"),
        (INVALID_REQUEST, "Cannot update these configs at default cluster level, broker id must be specified: "
                          "[listeners]"),
    ]
    res = describe(broker, BROKER, "2")
    assert (res.error_code, res.error_message) == (
        INVALID_REQUEST, "Unexpected broker id, expected 1 or empty string, but received 2")
    assert incremental(broker, (BROKER, "", [("log.cleaner.threads", SET, "4")]), validate_only=True) == [(0, None)]
    assert entries(broker, BROKER, "") == {}


def test_list_operations_and_the_legacy_whole_set(broker) -> None:
    assert incremental(broker, (BROKER, "", [("log.cleanup.policy", APPEND, "compact")])) == [(0, None)]
    assert entries(broker, BROKER, "")["log.cleanup.policy"][0] == "delete,compact"
    assert incremental(broker, (BROKER, "", [("log.cleanup.policy", SUBTRACT, "delete")])) == [(0, None)]
    assert entries(broker, BROKER, "")["log.cleanup.policy"][0] == "compact"
    # AlterConfigs (legacy) replaces the resource's whole set: log.cleanup.policy goes.
    assert legacy(broker, "", {"log.cleaner.threads": "2", "custom.prop": "x"}) == (0, None)
    got = entries(broker, BROKER, "")
    assert set(got) == {"log.cleaner.threads", "custom.prop"}
    assert got["custom.prop"][0] is None  # a name Kafka does not know: sensitive, as Kafka describes it
    assert legacy(broker, "", {"log.retention.hours": "1"}) == (
        INVALID_REQUEST, "Cannot update these configs dynamically: [log.retention.hours]")
    assert legacy(broker, "", {}) == (0, None)
    assert entries(broker, BROKER, "") == {}


def test_a_dynamic_message_max_bytes_applies_at_once_and_survives_a_restart(broker) -> None:
    from kafka import KafkaProducer
    from kafka.errors import MessageSizeTooLargeError

    topic = "bc-max-bytes"
    create_topic(broker.bootstrap, topic, 1)

    def send(size: int) -> None:
        p = KafkaProducer(bootstrap_servers=broker.bootstrap, linger_ms=0, retries=0)
        try:
            p.send(topic, b"x" * size).get(timeout=30)
        finally:
            p.close()

    send(5000)
    assert incremental(broker, (BROKER, "", [("message.max.bytes", SET, "2000")])) == [(0, None)]
    with pytest.raises(MessageSizeTooLargeError):
        send(5000)
    send(500)
    broker.restart()
    with pytest.raises(MessageSizeTooLargeError):
        send(5000)
    assert entries(broker, TOPIC, topic, ["max.message.bytes"])["max.message.bytes"][:2] == ("2000", DYNAMIC_DEFAULT)
    assert incremental(broker, (BROKER, "", [("message.max.bytes", DELETE, None)])) == [(0, None)]
    send(5000)
