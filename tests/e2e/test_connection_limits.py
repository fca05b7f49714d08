"""Connection limits answer as Apache Kafka's acceptor does (kafka.network.ConnectionQuotas, Kafka 4.x):

- maxConnectionsPerIp (max.connections.per.ip) reached for an address: a new connection from it is accepted and
  closed at once, before any answer; "Rejected connection from <ip>, ..." is logged; other addresses are not
  affected; maxConnectionsPerIpOverrides gives one address its own limit.
- maxConnections (max.connections) reached: nothing is closed; the broker stops accepting, so a new connection
  waits in the listen backlog, and is served as soon as another one closes.

The same tests run against Apache Kafka (KOP_E2E_TARGET=kafka) with Kafka's own keys; what only we have (the log
line's wording, the kop_server_connections_rejected metric) is checked on ours only.
"""

from __future__ import annotations

import select
import socket
import urllib.request

from kafka.protocol.metadata import ApiVersionsRequest

from tests.support.net import wait_until
from tests.support.wire import WireClient


def _metric(target, broker, name: str) -> float | None:
    if not target.is_kop:
        return None
    text = urllib.request.urlopen(broker.admin_url + "/metrics", timeout=30).read().decode()
    for line in text.splitlines():
        if line.startswith(name + " "):
            return float(line.split()[1])
    raise AssertionError(f"no {name} in /metrics")


def _client(bootstrap: str, source: str = "127.0.0.1") -> WireClient:
    """A connected WireClient whose socket is bound to `source` (any 127/8 address reaches the loopback)."""
    host, port = bootstrap.rsplit(":", 1)
    c = WireClient.__new__(WireClient)
    c.sock = socket.create_connection((host, int(port)), timeout=30, source_address=(source, 0))
    c.client_id = "limits"
    c._correlation_id = 0
    return c


def _api_versions(c: WireClient) -> int:
    return c.send(ApiVersionsRequest(client_software_name="t", client_software_version="1"), version=3).error_code


def _closed_without_answer(c: WireClient) -> bool:
    """Send ApiVersions and read: the broker must close the connection, not answer."""
    try:
        c.sock.sendall(_raw_api_versions())
        return c.sock.recv(1) == b""
    except (ConnectionResetError, BrokenPipeError):
        return True


def _raw_api_versions() -> bytes:
    req = ApiVersionsRequest(client_software_name="t", client_software_version="1")
    req.API_VERSION = 3
    req.with_header(correlation_id=1, client_id="limits")
    return req.encode(version=3, header=True, framed=True)


def _active(target, broker, n: int) -> bool:
    """Whether the broker has seen closes down to `n` open connections (Kafka: a fresh connection is accepted)."""
    if target.is_kop:
        return _metric(target, broker, "kop_server_active_connections") == n
    try:
        c = _client(broker.bootstrap)
    except OSError:
        return False
    try:
        return not _closed_without_answer(c)
    finally:
        c.close()


def test_per_address_limit_closes_the_new_connection_at_once(target):
    broker = target.dedicated_broker({"max.connections.per.ip": "2"}, maxConnectionsPerIp=2)
    held = [_client(broker.bootstrap) for _ in range(2)]
    try:
        assert all(_api_versions(c) == 0 for c in held)
        extra = _client(broker.bootstrap)  # the TCP handshake succeeds (Kafka accepts, then closes)
        assert _closed_without_answer(extra)
        extra.close()
        if target.is_kop:
            wait_until("the rejection logged", lambda: "Rejected connection from 127.0.0.1, address already has "
                       "the configured maximum of 2 connections" in broker.log_path.read_text(), timeout=30)
            assert _metric(target, broker, "kop_server_connections_rejected_total") == 1
        other = _client(broker.bootstrap, source="127.0.0.2")  # another address has its own count
        assert _api_versions(other) == 0
        other.close()
        assert all(_api_versions(c) == 0 for c in held)  # the connections already open are not affected
        held.pop().close()
        # Its slot is free once the broker has seen the close.
        wait_until("a slot for 127.0.0.1", lambda: _active(target, broker, 1), timeout=30)
        again = _client(broker.bootstrap)
        assert _api_versions(again) == 0
        held.append(again)
    finally:
        for c in held:
            c.close()


def test_per_address_overrides(target):
    overrides = "127.0.0.1:3,localhost:3"
    broker = target.dedicated_broker({"max.connections.per.ip": "1", "max.connections.per.ip.overrides": overrides},
                                     maxConnectionsPerIp=1, maxConnectionsPerIpOverrides=overrides)
    held = [_client(broker.bootstrap) for _ in range(3)]
    try:
        assert all(_api_versions(c) == 0 for c in held)
        extra = _client(broker.bootstrap)
        assert _closed_without_answer(extra)
        extra.close()
        one = _client(broker.bootstrap, source="127.0.0.3")  # no override: the default of 1
        assert _api_versions(one) == 0
        two = _client(broker.bootstrap, source="127.0.0.3")
        assert _closed_without_answer(two)
        one.close()
        two.close()
    finally:
        for c in held:
            c.close()


def test_total_limit_makes_new_connections_wait_not_fail(target):
    broker = target.dedicated_broker({"max.connections": "3"}, maxConnections=3)
    held = [_client(broker.bootstrap) for _ in range(3)]
    waiting = None
    try:
        assert all(_api_versions(c) == 0 for c in held)
        waiting = _client(broker.bootstrap)  # connects (the kernel's backlog), is not accepted yet
        waiting.sock.sendall(_raw_api_versions())
        assert _api_versions(held[0]) == 0  # the broker is serving; the new connection's request waits
        if target.is_kop:
            assert _metric(target, broker, "kop_server_active_connections") == 3
        assert select.select([waiting.sock], [], [], 0)[0] == []  # neither answered nor closed
        held.pop().close()  # a slot frees: the waiting connection is accepted and answered
        waiting.sock.settimeout(60)
        size = int.from_bytes(waiting._recv_exact(4), "big")
        assert int.from_bytes(waiting._recv_exact(size)[:4], "big") == 1  # our correlation id
        if target.is_kop:
            assert _metric(target, broker, "kop_server_connections_rejected_total") == 0
    finally:
        for c in held:
            c.close()
        if waiting is not None:
            waiting.close()
