"""kop/topics/topic_config.py: Kafka 4.x's topic configs, their validation, and the managed-ledger settings
segment.bytes / segment.ms give (the end-to-end checks against Apache Kafka are in
tests/e2e/test_topic_configs.py; this is the sans-IO part)."""

from __future__ import annotations

import pytest

from kop.config import BrokerConfig
from kop.managed_ledger import ManagedLedgerConfig
from kop.security.acl import ResourceType, authorized_operations
from kop.security.principal import ANONYMOUS
from kop.topics.topic_config import (
    TOPIC_CONFIGS,
    TYPE_BOOLEAN,
    InvalidConfig,
    described,
    effective,
    ledger_config,
    split_list,
    validate_topic_configs,
)
from tests.e2e.test_topic_configs import ALL_SET, CASES, CASES_44, KAFKA_44_TOPIC_CONFIGS, KAFKA_TOPIC_CONFIGS

SCHEMA_VALIDATION = {"confluent.value.schema.validation", "confluent.key.schema.validation"}
KAFKAS = KAFKA_TOPIC_CONFIGS | KAFKA_44_TOPIC_CONFIGS


def test_the_names_are_kafkas_and_confluents_two_extensions() -> None:
    assert {n for n, d in TOPIC_CONFIGS.items() if not d.extension} == KAFKAS
    assert {n for n, d in TOPIC_CONFIGS.items() if d.extension} == SCHEMA_VALIDATION


@pytest.mark.parametrize("name", sorted(SCHEMA_VALIDATION))
def test_schema_validation_configs_are_booleans_defaulting_to_false(name: str) -> None:
    d = TOPIC_CONFIGS[name]
    assert (d.type, d.default(BrokerConfig()), d.honoured, d.read_only) == (TYPE_BOOLEAN, "false", True, False)
    validate_topic_configs({name: "true"})
    validate_topic_configs({name: " False "})
    with pytest.raises(InvalidConfig) as e:
        validate_topic_configs({name: "yes"})
    assert str(e.value) == f"Invalid value yes for configuration {name}: Expected value to be either true or false"


def test_extensions_are_described_only_when_set_or_asked_for() -> None:
    """A plain topic describes exactly Kafka's configs (the differential tests compare them with Apache Kafka)."""
    assert {n for n, _ in described({})} == KAFKAS
    assert {n for n, _ in described({"confluent.key.schema.validation": "true"})} == \
        KAFKAS | {"confluent.key.schema.validation"}
    assert {n for n, _ in described({}, {"confluent.value.schema.validation"})} == \
        KAFKAS | {"confluent.value.schema.validation"}
    assert [n for n, _ in described({})] == sorted(KAFKAS)


@pytest.mark.parametrize("name,value,expected", CASES + CASES_44)
def test_validation_messages_are_kafkas(name: str, value: str, expected: str | None) -> None:
    if expected is None:
        validate_topic_configs({name: value})
    else:
        with pytest.raises(InvalidConfig) as e:
            validate_topic_configs({name: value})
        assert str(e.value) == expected


def test_all_valid_together_and_the_lag_conflict() -> None:
    validate_topic_configs(ALL_SET)
    with pytest.raises(InvalidConfig, match=r"min.compaction.lag.ms \(10\) > max.compaction.lag.ms \(5\)"):
        validate_topic_configs({"min.compaction.lag.ms": "10", "max.compaction.lag.ms": "5"})


def test_defaults_and_trimming() -> None:
    cfg = BrokerConfig()
    assert effective({}, "compression.type", cfg) == "producer"
    assert effective({"segment.ms": " 5 "}, "segment.ms", cfg) == "5"
    assert int(effective({}, "segment.bytes", cfg)) <= 2**31 - 1  # an INT on the wire, like Kafka's
    assert split_list("") == [] and split_list("compact, delete") == ["compact", "delete"]
    for d in TOPIC_CONFIGS.values():
        validate_topic_configs({d.name: d.default(cfg)})  # every default is itself valid


def test_segment_configs_become_rollover_limits() -> None:
    base = ManagedLedgerConfig(max_size_per_ledger_mb=2048, min_rollover_time_ms=600_000,
                               max_rollover_time_ms=14_400_000)
    assert ledger_config({}, base) is base
    assert ledger_config({"retention.ms": "1"}, base) is base
    c = ledger_config({"segment.bytes": str(3 << 20), "segment.ms": "1000"}, base)
    assert (c.max_size_per_ledger_bytes, c.max_rollover_time_ms, c.min_rollover_time_ms) == (3 << 20, 1000, 0)
    c = ledger_config({"segment.ms": "60000"}, base)
    assert (c.max_size_per_ledger_mb, c.max_rollover_time_ms, c.min_rollover_time_ms) == (2048, 60000, 0)


def test_authorized_operations_without_an_authorizer() -> None:
    """The bitfields Kafka answers without an authorizer (kop/kafka/authorize.py gives these when
    authorizationEnabled is false; with an authorizer tests/e2e/test_acl_matrix.py compares them with Kafka)."""
    assert authorized_operations(None, ANONYMOUS, "", ResourceType.TOPIC, "t") == 3576  # Apache Kafka 4.x's
    assert authorized_operations(None, ANONYMOUS, "", ResourceType.CLUSTER, "kafka-cluster") == 8096
    assert authorized_operations(None, ANONYMOUS, "", ResourceType.GROUP, "g") == 3400  # READ DELETE DESCRIBE *_CONFIGS
