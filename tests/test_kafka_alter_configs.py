"""AlterConfigs (legacy, whole-set) and IncrementalAlterConfigs on topic configs, through the wire with
kafka-python's request classes, read back with DescribeConfigs.

What the two APIs share (kop/kafka/apis/configs_common.py alter_resources): each resource answered on
its own, a broker id that is not this broker's refused (dynamic broker configs: tests/test_kafka_broker_configs.py),
unknown topics UNKNOWN_TOPIC_OR_PARTITION, validate_only changes nothing. What differs: the legacy API replaces the topic's whole set, the incremental one applies
SET/DELETE/APPEND/SUBTRACT to what is there.
"""

from __future__ import annotations

import pytest
from kafka.protocol.admin import AlterConfigsRequest, DescribeConfigsRequest, IncrementalAlterConfigsRequest

from tests.support.clients import create_topic
from tests.support.wire import Negotiated

TOPIC_RESOURCE, BROKER_RESOURCE, BROKER_LOGGER_RESOURCE = 2, 4, 8
SET, DELETE, APPEND, SUBTRACT = 0, 1, 2, 3
UNKNOWN_TOPIC_OR_PARTITION, INVALID_CONFIG, INVALID_REQUEST = 3, 40, 42


@pytest.fixture(scope="module")
def broker(tmp_path_factory):
    from tests.support.broker import KopBroker

    b = KopBroker(tmp_path_factory.mktemp("kop-alter-configs"), {"allowAutoTopicCreation": "false"}).start()
    yield b
    b.stop()


@pytest.fixture
def topic(broker, request) -> str:
    name = f"cfg-{request.node.name.replace('_', '-')[:60]}"
    create_topic(broker.bootstrap, name, 1)
    return name


def legacy(broker, *resources, validate_only: bool = False) -> list[tuple[int, str]]:
    R = AlterConfigsRequest.AlterConfigsResource
    req = AlterConfigsRequest(
        resources=[R(resource_type=t, resource_name=n,
                     configs=[R.AlterableConfig(name=k, value=v) for k, v in cfgs.items()])
                   for t, n, cfgs in resources],
        validate_only=validate_only,
    )
    with Negotiated(broker.bootstrap) as c:
        return [(r.error_code, r.resource_name) for r in c.call(req, cap=2).responses]


def incremental(broker, *resources, validate_only: bool = False) -> list[tuple[int, str]]:
    R = IncrementalAlterConfigsRequest.AlterConfigsResource
    req = IncrementalAlterConfigsRequest(
        resources=[R(resource_type=t, resource_name=n,
                     configs=[R.AlterableConfig(name=k, config_operation=op, value=v) for k, op, v in ops])
                   for t, n, ops in resources],
        validate_only=validate_only,
    )
    with Negotiated(broker.bootstrap) as c:
        return [(r.error_code, r.resource_name) for r in c.call(req, cap=1).responses]


def topic_level(broker, topic: str) -> dict[str, str]:
    """The topic's configs whose source is the topic itself (DYNAMIC_TOPIC_CONFIG = 1)."""
    R = DescribeConfigsRequest.DescribeConfigsResource
    req = DescribeConfigsRequest(resources=[R(resource_type=TOPIC_RESOURCE, resource_name=topic,
                                              configuration_keys=None)],
                                 include_synonyms=False, include_documentation=False)
    with Negotiated(broker.bootstrap) as c:
        (res,) = c.call(req, cap=4).results
    assert res.error_code == 0, res.error_message
    return {c.name: c.value for c in res.configs if c.config_source == 1}


def test_legacy_alter_replaces_the_whole_topic_level_set(broker, topic):
    assert legacy(broker, (TOPIC_RESOURCE, topic, {"retention.ms": "123456", "cleanup.policy": "compact"})) == [
        (0, topic)]
    assert topic_level(broker, topic) == {"retention.ms": "123456", "cleanup.policy": "compact"}
    # Naming only one config sends every other one back to its default.
    assert legacy(broker, (TOPIC_RESOURCE, topic, {"retention.ms": "999"})) == [(0, topic)]
    assert topic_level(broker, topic) == {"retention.ms": "999"}


def test_legacy_refusals_are_per_resource(broker, topic):
    got = legacy(
        broker,
        (TOPIC_RESOURCE, topic, {"retention.ms": None}),
        (TOPIC_RESOURCE, "no-such-topic", {"retention.ms": "1"}),
        (BROKER_RESOURCE, "0", {"log.retention.ms": "1"}),
        (BROKER_LOGGER_RESOURCE, "0", {"kafka": "DEBUG"}),
        (TOPIC_RESOURCE, topic, {"retention.ms": "not-a-number"}),
    )
    assert [e for e, _ in got] == [INVALID_CONFIG, UNKNOWN_TOPIC_OR_PARTITION, INVALID_REQUEST, INVALID_REQUEST,
                                   INVALID_CONFIG]
    assert topic_level(broker, topic) == {}


def test_validate_only_changes_nothing(broker, topic):
    assert legacy(broker, (TOPIC_RESOURCE, topic, {"retention.ms": "5"}), validate_only=True) == [(0, topic)]
    assert incremental(broker, (TOPIC_RESOURCE, topic, [("retention.ms", SET, "5")]), validate_only=True) == [
        (0, topic)]
    assert topic_level(broker, topic) == {}


def test_incremental_operations_apply_to_what_is_there(broker, topic):
    assert incremental(broker, (TOPIC_RESOURCE, topic, [("retention.ms", SET, "777"),
                                                        ("max.message.bytes", SET, "2048")])) == [(0, topic)]
    assert topic_level(broker, topic) == {"retention.ms": "777", "max.message.bytes": "2048"}
    # APPEND starts from the effective value (the default "delete"), SUBTRACT removes from the list.
    assert incremental(broker, (TOPIC_RESOURCE, topic, [("cleanup.policy", APPEND, "compact")])) == [(0, topic)]
    assert topic_level(broker, topic)["cleanup.policy"] == "delete,compact"
    assert incremental(broker, (TOPIC_RESOURCE, topic, [("cleanup.policy", SUBTRACT, "delete"),
                                                        ("retention.ms", DELETE, None)])) == [(0, topic)]
    assert topic_level(broker, topic) == {"max.message.bytes": "2048", "cleanup.policy": "compact"}


def test_incremental_refusals_leave_the_topic_unchanged(broker, topic):
    got = incremental(
        broker,
        (TOPIC_RESOURCE, topic, [("retention.ms", SET, "1"), ("no.such.config", SET, "1")]),
        (TOPIC_RESOURCE, topic, [("retention.ms", APPEND, "1")]),  # not a list config
        (TOPIC_RESOURCE, topic, [("retention.ms", 9, "1")]),  # no such operation
        (TOPIC_RESOURCE, topic, [("retention.ms", SET, None)]),
        (TOPIC_RESOURCE, "no-such-topic", [("retention.ms", SET, "1")]),
        (BROKER_RESOURCE, "0", [("log.retention.ms", SET, "1")]),
    )
    assert [e for e, _ in got] == [INVALID_CONFIG, INVALID_CONFIG, INVALID_REQUEST, INVALID_CONFIG,
                                   UNKNOWN_TOPIC_OR_PARTITION, INVALID_REQUEST]
    assert topic_level(broker, topic) == {}
