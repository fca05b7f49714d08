"""Pulsar's named listeners (kop/cluster/listeners.py): parsing the keys, the registration entries, and the one
selection rule both lookups use."""

from __future__ import annotations

import re

import pytest

from kop.cluster import listeners as nl
from kop.config import BrokerConfig, ConfigError
from kop.pulsar.handler import PulsarProtocolHandler

ADVERTISED = ("internal:pulsar://10.0.0.5:6650,internal:pulsar+ssl://10.0.0.5:6651,"
              "external:pulsar://broker-0.example.com:16650")


def test_parse_keeps_each_listeners_addresses_and_the_first_is_internal_by_default() -> None:
    parsed = nl.parse(ADVERTISED)
    assert parsed.internal == "internal"
    assert parsed.by_name["external"] == {"pulsar": ("broker-0.example.com", 16650)}
    assert parsed.internal_address(nl.TLS) == ("10.0.0.5", 6651)
    assert parsed.entries() == [("pulsar@internal", "10.0.0.5", 6650), ("pulsar+ssl@internal", "10.0.0.5", 6651),
                                ("pulsar@external", "broker-0.example.com", 16650)]
    assert nl.parse(ADVERTISED, "external").internal == "external"
    assert nl.parse("").by_name == {} and nl.parse("").internal is None


@pytest.mark.parametrize("advertised, internal, error", [
    ("internal", "", "is not <name>:"),
    ("internal:kafka://h:1", "", "is not <name>:"),
    ("internal:pulsar://h:x", "", "is not <name>:"),
    ("internal:pulsar://h:0", "", "no valid port"),
    ("a:pulsar://h:1,a:pulsar://g:2", "", "two pulsar addresses"),
    ("a:http://h:80", "", "no pulsar:// or pulsar+ssl://"),
    ("a:pulsar://h:1", "b", "internalListenerName: 'b' is not a listener"),
    ("", "b", "internalListenerName: 'b' is not a listener of advertisedListeners (none)"),
])
def test_malformed_keys_are_refused_with_the_key_named(advertised: str, internal: str, error: str) -> None:
    with pytest.raises(nl.ListenerError, match=re.escape(error)):
        nl.parse(advertised, internal)


def test_select_answers_the_named_listener_the_unnamed_default_or_refuses_an_unknown_name() -> None:
    registered = [("pulsar", "10.0.0.5", 6650), ("pulsar+ssl", "10.0.0.5", 6651), *nl.parse(ADVERTISED).entries()]
    assert nl.select(registered, None) == ("pulsar://10.0.0.5:6650", "pulsar+ssl://10.0.0.5:6651")
    assert nl.select(registered, "external") == ("pulsar://broker-0.example.com:16650", None)
    with pytest.raises(nl.UnknownListener) as refused:
        nl.select(registered, "nosuch")
    # Pulsar 5.0's words, the broker named by its id: host:port of its web service
    broker = nl.broker_id("http://10.0.0.5:8080/", "10.0.0.5:9092")
    assert refused.value.refusal(broker) == "The broker '10.0.0.5:8080' does not have 'nosuch' listener configured."
    assert nl.broker_id(None, "10.0.0.5:9092") == "10.0.0.5:9092"  # no admin web service: its registration key
    assert nl.select([("pulsar", "::1", 6650)], None) == ("pulsar://[::1]:6650", None)


def test_the_pulsar_handler_refuses_to_start_with_bad_listeners() -> None:
    cfg = BrokerConfig.from_strings({"advertisedListeners": "internal:pulsar://h:1", "internalListenerName": "x"})
    with pytest.raises(ConfigError, match="internalListenerName"):
        PulsarProtocolHandler().initialize(cfg)
