"""The CLIENT_METRICS config resource (kop/kafka/apis/client_metrics_configs.py), sans-IO: Kafka 4.4's
ClientMetricsConfigs validation (codes and messages), IncrementalAlterConfigs' operations, the description, and
the store round trip on the metadata store a broker restart reopens. Kafka's own tool against both brokers is
tests/e2e/test_admin_44.py."""

from __future__ import annotations

import pytest

from kop.kafka.apis import client_metrics_configs as cm
from kop.protocol.errors import ErrorCode
from kop.protocol.messages import AlterConfigsRequest, IncrementalAlterConfigsRequest
from kop.storage.local.metadata import SqliteMetadataStore

INVALID_REQUEST, INVALID_CONFIG = ErrorCode.INVALID_REQUEST, ErrorCode.INVALID_CONFIG


def refusal(name: str, configs: dict[str, str]) -> tuple[int, str]:
    with pytest.raises(cm.ClientMetricsError) as e:
        cm.validate(name, configs)
    return e.value.error, e.value.message


def test_valid_subscriptions_pass() -> None:
    cm.validate("m1", {})
    cm.validate("m1", {"metrics": "org.apache.kafka.producer.,org.apache.kafka.consumer.", "interval.ms": "100"})
    cm.validate("m1", {"interval.ms": "3600000", "metrics": "*", "match": ""})
    cm.validate("m1", {"match": "client_id=a.*, client_software_name = java ,client_source_port=90[0-9]+"})
    cm.validate("m1", {"match": "client_instance_id=b,client_software_version=1\\.2,client_source_address=10\\..*"})
    cm.validate("m1", {"match": "client_id=a="})  # Java's split drops the trailing empty string


def test_refusals_have_kafkas_codes_and_messages() -> None:
    assert refusal("", {}) == (INVALID_REQUEST, "Subscription name can't be empty")
    assert refusal("m1", {"intervals.ms": "5"}) == (INVALID_REQUEST, "Unknown client metrics configuration: intervals.ms")
    for bad in ("5", "99", "3600001"):
        assert refusal("m1", {"interval.ms": bad}) == (
            INVALID_REQUEST, f"Invalid value {bad} for interval.ms, interval must be between 100 and 3600000 (1 hour)")
    assert refusal("m1", {"interval.ms": "1m"}) == (
        INVALID_CONFIG, "Invalid value 1m for configuration interval.ms: Not a number of type INT")
    assert refusal("m1", {"interval.ms": "2147483648"})[0] == INVALID_CONFIG
    assert refusal("m1", {"metrics": "a,a"}) == (INVALID_CONFIG, "Configuration 'metrics' values must not be duplicated.")
    assert refusal("m1", {"metrics": "a,,b"}) == (INVALID_CONFIG, "Configuration 'metrics' values must not be empty.")
    for pattern in ("client_idx=a", "client_id", "client_id=", "=a", "client_id=a=b", "client_id=(", "client_id=[a"):
        assert refusal("m1", {"match": pattern}) == (INVALID_CONFIG, f"Illegal client matching pattern: {pattern}")
    # ConfigDef's parse (INVALID_CONFIG) comes before the interval's range (INVALID_REQUEST), as in Kafka
    assert refusal("m1", {"interval.ms": "5", "metrics": "a,a"})[0] == INVALID_CONFIG


def test_incremental_operations() -> None:
    current = {"metrics": "a,b", "interval.ms": "1000"}
    assert cm.apply_incremental(current, [("metrics", cm.APPEND, "b,c"), ("interval.ms", cm.DELETE, None)]) == {
        "metrics": "a,b,c"}
    assert cm.apply_incremental(current, [("metrics", cm.SUBTRACT, "a")]) == {"metrics": "b", "interval.ms": "1000"}
    assert cm.apply_incremental({}, [("match", cm.APPEND, "client_id=x")]) == {"match": "client_id=x"}
    assert cm.apply_incremental(current, [("metrics", cm.SET, None)]) == {"interval.ms": "1000"}
    assert current == {"metrics": "a,b", "interval.ms": "1000"}  # not changed in place
    with pytest.raises(cm.ClientMetricsError) as e:
        cm.apply_incremental(current, [("interval.ms", cm.APPEND, "5")])
    assert (e.value.error, e.value.message) == (INVALID_CONFIG,
                                                "Can't APPEND to key interval.ms because its type is not LIST.")


def test_described_as_kafka_44() -> None:
    assert cm.described({"metrics": "a , b", "interval.ms": " 60000"}) == [
        ("interval.ms", "60000", cm.SOURCE_CLIENT_METRICS, cm.TYPE_INT, "Metrics push interval in milliseconds"),
        ("match", "", cm.SOURCE_DEFAULT, cm.TYPE_LIST, "Client match criteria"),
        ("metrics", "a,b", cm.SOURCE_CLIENT_METRICS, cm.TYPE_LIST, "Telemetry metric name prefix list"),
    ]
    assert [v for _, v, _, _, _ in cm.described({})] == ["300000", "", ""]


def incremental(name: str, *ops: tuple[str, int, str | None]) -> IncrementalAlterConfigsRequest.AlterConfigsResource:
    R = IncrementalAlterConfigsRequest
    return R.AlterConfigsResource(resource_type=16, resource_name=name, configs=[
        R.AlterableConfig(name=n, config_operation=op, value=v) for n, op, v in ops])


async def test_stored_altered_listed_deleted_and_reopened(tmp_path) -> None:
    store = SqliteMetadataStore(tmp_path)
    assert await cm.names(store) == []
    assert await cm.alter(store, incremental("m/1", ("metrics", cm.SET, "x."), ("interval.ms", cm.SET, "60000")),
                          False) == (0, None)
    assert (await cm.alter(store, incremental("m2", ("interval.ms", cm.SET, "5")), False))[0] == INVALID_REQUEST
    assert await cm.alter(store, incremental("m2", ("metrics", cm.SET, "y.")), True) == (0, None)  # validate only
    assert await cm.names(store) == ["m/1"]
    legacy = AlterConfigsRequest.AlterConfigsResource(resource_type=16, resource_name="m3", configs=[
        AlterConfigsRequest.AlterableConfig(name="match", value="client_id=z")])
    assert await cm.alter(store, legacy, False) == (0, None)
    assert await cm.alter(store, incremental("..", ("metrics", cm.SET, "z")), False) == (0, None)
    assert await cm.names(store) == ["..", "m/1", "m3"]
    assert await cm.alter(store, incremental("..", ("metrics", cm.DELETE, None)), False) == (0, None)
    await store.close()

    store = SqliteMetadataStore(tmp_path)  # what a restarted broker reads
    assert await cm.names(store) == ["m/1", "m3"]
    assert (await cm.read(store, "m/1"))[0] == {"metrics": "x.", "interval.ms": "60000"}
    everything = [(n, cm.DELETE, None) for n in cm.CONFIGS]
    assert await cm.alter(store, incremental("m/1", *everything), False) == (0, None)
    assert await cm.alter(store, incremental("never", *everything), False) == (0, None)
    assert await cm.names(store) == ["m3"]
    await store.close()
