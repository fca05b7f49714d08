"""Broker configuration: KoP key names, typed values, and start-up refusal of anything unknown or bad."""

import pytest

from kop.config import BrokerConfig, ConfigError, Listener, parse_overrides, read_properties


def test_defaults_listen_on_9092_and_advertise_loopback():
    c = BrokerConfig.load()
    assert c.listeners == (Listener("PLAINTEXT", "0.0.0.0", 9092),)
    assert c.advertised_listeners == (Listener("PLAINTEXT", "127.0.0.1", 9092),)
    assert (c.kafkaTenant, c.kafkaNamespace) == ("public", "default")
    assert c.allowAutoTopicCreation is True


def test_overrides_are_typed():
    c = BrokerConfig.load(overrides={"managedLedgerMaxEntriesPerLedger": "10", "allowAutoTopicCreation": "false"})
    assert c.managedLedgerMaxEntriesPerLedger == 10
    assert c.allowAutoTopicCreation is False


def test_unknown_key_names_the_key_and_suggests():
    with pytest.raises(ConfigError, match="managedLedgerMaxEntriesPerLedgr.*did you mean 'managedLedgerMaxEntriesPerLedger'"):
        BrokerConfig.load(overrides={"managedLedgerMaxEntriesPerLedgr": "5"})


@pytest.mark.parametrize("key", ["requestTimeoutMs", "maxPendingResponseBytes"])
def test_a_removed_key_is_ignored_with_a_warning(key, caplog, tmp_path):
    """Validated once but read nowhere (issue #21): a config that still names one loads as before, and the log
    says the key is not read and what bounds that now. Unknown keys are still refused."""
    f = tmp_path / "broker.conf"
    f.write_text(f"{key}=30000\ndefaultNumPartitions=3\n")
    with caplog.at_level("WARNING", logger="kop.config"):
        c = BrokerConfig.load(f, overrides={key: "1"})
    assert c.defaultNumPartitions == 3
    assert key not in BrokerConfig.keys() and not hasattr(c, key)
    assert [r.getMessage() for r in caplog.records if key in r.getMessage()], "no warning names the key"
    assert all("no longer read" in r.getMessage() for r in caplog.records if key in r.getMessage())
    with pytest.raises(ConfigError, match="unknown config key"):
        BrokerConfig.load(overrides={key + "s": "1"})


@pytest.mark.parametrize(
    "key,value",
    [
        ("defaultNumPartitions", "zero"),
        ("defaultNumPartitions", "0"),
        ("allowAutoTopicCreation", "maybe"),
        ("kafkaListeners", "localhost:9092"),
        ("kafkaListeners", "PLAINTEXT://h:99999"),
        ("localStoreFsyncPolicy", "sometimes"),
        ("kafkaAdvertisedListeners", "OTHER://h:1"),
        ("socketRequestMaxBytes", "10"),
        ("queuedMaxRequestBytes", "1000"),
        ("maxConnectionsPerIp", "0"),  # 0 only with overrides, as in Kafka
        ("maxConnectionsPerIpOverrides", "127.0.0.1"),
        ("maxConnectionsPerIpOverrides", "h:many"),
        ("maxConnections", "-1"),
    ],
)
def test_bad_values_name_the_key(key, value):
    with pytest.raises(ConfigError, match=key):
        BrokerConfig.load(overrides={key: value})


def test_connection_limit_overrides_parse_as_kafka_writes_them():
    c = BrokerConfig.load(overrides={"maxConnectionsPerIp": "0",
                                     "maxConnectionsPerIpOverrides": "hostA:100, 127.0.0.1:200,[::1]:3"})
    assert c.ip_overrides == {"hostA": 100, "127.0.0.1": 200, "::1": 3}
    assert BrokerConfig.load(overrides={"queuedMaxRequestBytes": "-1"}).queuedMaxRequestBytes == -1


def test_config_file_and_override_precedence(tmp_path):
    f = tmp_path / "broker.conf"
    f.write_text("# comment\n\nkafkaListeners=PLAINTEXT://127.0.0.1:19092\ndefaultNumPartitions = 4\n")
    c = BrokerConfig.load(f, {"defaultNumPartitions": "6"})
    assert c.listeners[0].port == 19092
    assert c.defaultNumPartitions == 6


def test_bad_config_file_line(tmp_path):
    f = tmp_path / "broker.conf"
    f.write_text("this is not a property\n")
    with pytest.raises(ConfigError, match="broker.conf:1"):
        read_properties(f)


def test_missing_config_file():
    with pytest.raises(ConfigError, match="cannot read config file"):
        BrokerConfig.load("/nonexistent/broker.conf")


def test_override_syntax():
    assert parse_overrides(["a=b=c"]) == {"a": "b=c"}
    with pytest.raises(ConfigError):
        parse_overrides(["novalue"])


def test_shipped_standalone_conf_loads():
    from pathlib import Path

    c = BrokerConfig.load(Path(__file__).parent.parent / "conf" / "standalone.conf")
    assert c.listeners[0].port == 9092


def test_explicit_advertised_listeners():
    c = BrokerConfig.load(overrides={
        "kafkaListeners": "PLAINTEXT://0.0.0.0:9092,INTERNAL://0.0.0.0:9093",
        "kafkaAdvertisedListeners": "PLAINTEXT://broker.example:9092,INTERNAL://10.0.0.1:9093",
        "kafkaProtocolMap": "INTERNAL:PLAINTEXT",
    })
    assert [str(a) for a in c.advertised_listeners] == ["PLAINTEXT://broker.example:9092", "INTERNAL://10.0.0.1:9093"]
