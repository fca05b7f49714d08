"""Pulsar's named listeners (`advertisedListeners`, `internalListenerName`, a client's `listenerName`), as Apache
Apache Pulsar (5.0) answers them.

A Pulsar-side module (tests/e2e/conftest.py): the reference and our broker both advertise `internal` at
127.0.0.1 and `external` at localhost, on the one port they serve. Checked: the binary LOOKUP answers the named
listener's address, the internal one without a name, and ServiceNotReady "The broker '<id>' does not have '<name>'
listener configured." for a name it lacks; the HTTP lookup the same through `listenerName` and `X-Pulsar-ListenerName` (500 for an
unknown name); a `pulsar-client` given `listener_name` produces and consumes. Each lookup uses its own topic: the
reference answered a named lookup with another name's address once when one topic was looked up under several
names in a row, which is not what this module is about.
"""

from __future__ import annotations

import json
import urllib.error
import urllib.request

import pulsar
import pytest

from kop.pulsar.codec import commands as c
from tests.support.pulsar_wire import WireClient

PULSAR_SIDE_TARGETS = ("pulsar", "kop", "kop-bk")

LISTENERS = {"advertisedListeners": "internal:pulsar://127.0.0.1:{brokerServicePort},"
                                    "external:pulsar://localhost:{brokerServicePort}",
             "internalListenerName": "internal"}


@pytest.fixture
def endpoint(target):
    return target.pulsar_broker(LISTENERS, **LISTENERS)


def port_of(endpoint) -> int:
    return int(endpoint.service_url.rsplit(":", 1)[1])


def refusal(endpoint, listener: str) -> str:
    """Pulsar 5.0's words for a listener the broker lacks, naming the broker by its id: host:port of its web
    service (Pulsar 4.0 said "the broker do not have <name> listener")."""
    broker = endpoint.admin_url.removeprefix("http://").rstrip("/")
    return f"The broker '{broker}' does not have '{listener}' listener configured."


def wire_lookup(endpoint, topic: str, listener: str | None):
    w = WireClient(port_of(endpoint))
    try:
        w.send(c.command(c.CONNECT, client_version="listeners-test", protocol_version=21))
        w.expect(c.CONNECTED)
        kw = {} if listener is None else {"advertised_listener_name": listener}
        w.send(c.command(c.LOOKUP, topic=topic, request_id=1, **kw))
        return w.expect(c.LOOKUP_RESPONSE)
    finally:
        w.close()


def http_lookup(endpoint, local: str, query: str = "", headers: dict[str, str] | None = None) -> tuple[int, dict]:
    req = urllib.request.Request(f"{endpoint.admin_url}/lookup/v2/topic/persistent/public/default/{local}{query}",
                                 headers=headers or {})
    try:
        with urllib.request.urlopen(req, timeout=60) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read() or b"{}")


def test_binary_lookup_answers_the_named_listeners_address(target, endpoint) -> None:
    port = port_of(endpoint)
    unnamed = wire_lookup(endpoint, f"persistent://public/default/{target.topic('l-none')}", None)
    assert unnamed.response == c.pb.CommandLookupTopicResponse.Connect
    assert unnamed.brokerServiceUrl == f"pulsar://127.0.0.1:{port}"  # the internal listener's
    external = wire_lookup(endpoint, f"persistent://public/default/{target.topic('l-ext')}", "external")
    assert external.brokerServiceUrl == f"pulsar://localhost:{port}"
    missing = wire_lookup(endpoint, f"persistent://public/default/{target.topic('l-missing')}", "nosuch")
    assert missing.response == c.pb.CommandLookupTopicResponse.Failed
    assert missing.error == c.ServerError.ServiceNotReady
    assert missing.message == refusal(endpoint, "nosuch")


def test_http_lookup_takes_the_listener_from_the_query_or_the_header(target, endpoint) -> None:
    port = port_of(endpoint)
    status, data = http_lookup(endpoint, target.topic("h-none"))
    assert status == 200 and data["brokerUrl"] == f"pulsar://127.0.0.1:{port}"
    status, data = http_lookup(endpoint, target.topic("h-query"), "?listenerName=external")
    assert status == 200 and data["brokerUrl"] == data["nativeUrl"] == f"pulsar://localhost:{port}"
    status, data = http_lookup(endpoint, target.topic("h-header"), headers={"X-Pulsar-ListenerName": "external"})
    assert status == 200 and data["brokerUrl"] == f"pulsar://localhost:{port}"
    status, data = http_lookup(endpoint, target.topic("h-missing"), "?listenerName=nosuch")
    assert status == 500 and refusal(endpoint, "nosuch") in data.get("reason", "")


def test_a_client_naming_a_listener_produces_and_consumes(target, endpoint) -> None:
    topic = f"persistent://public/default/{target.topic('l-client')}"
    client = pulsar.Client(endpoint.service_url, listener_name="external", operation_timeout_seconds=30,
                           logger=pulsar.ConsoleLogger(pulsar.LoggerLevel.Error))
    try:
        consumer = client.subscribe(topic, "s", initial_position=pulsar.InitialPosition.Earliest)
        client.create_producer(topic).send(b"over the external listener")
        assert consumer.receive(timeout_millis=30_000).data() == b"over the external listener"
    finally:
        client.close()
