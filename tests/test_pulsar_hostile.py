"""Hostile peers on the Pulsar port get the broker-wide defences the Kafka ports have (issue #12):

- memory follows bytes received: 50 connections announcing the largest allowed Pulsar frame (maxMessageSize + 10
  KiB) and sending one byte raise the broker's peak RSS by less than 64 MiB while a pulsar-client producer and
  consumer work;
- the connection limits are the broker's (kop/net/acceptor.py): Kafka and Pulsar connections from one address
  count together against maxConnectionsPerIp, and one over it on the Pulsar port is closed before any answer.
"""

from __future__ import annotations

import socket
import uuid

import pulsar

from kop.pulsar.codec import commands as c
from kop.pulsar.codec.framing import FRAME_PADDING, encode_command
from tests.support.broker import KopBroker
from tests.support.net import read_vm_hwm_kib, wait_until

ANNOUNCERS = 50
_CONNECT = encode_command(c.command(c.CONNECT, client_version="limits", protocol_version=21))
RSS_BOUND_KIB = 64 * 1024


def _round_trip(broker: KopBroker, n: int) -> None:
    topic = f"t-{uuid.uuid4().hex[:10]}"
    client = pulsar.Client(broker.pulsar_url, operation_timeout_seconds=30)
    try:
        consumer = client.subscribe(topic, "s", initial_position=pulsar.InitialPosition.Earliest)
        producer = client.create_producer(topic)
        for i in range(n):
            producer.send_async(b"v%06d" % i, None)
        producer.flush()
        got = []
        for _ in range(n):
            m = consumer.receive(30000)
            got.append(m.data())
            consumer.acknowledge(m)
        assert got == [b"v%06d" % i for i in range(n)]
    finally:
        client.close()


def test_pulsar_peers_announcing_the_largest_frame_cost_what_they_send(tmp_path) -> None:
    """Were each announced frame allocated (5 MiB + 10 KiB), 50 of them would take ~250 MiB."""
    broker = KopBroker(tmp_path, {}).start()
    try:
        _round_trip(broker, 500)  # the allocator's own growth from this work is in the baseline
        assert broker.pid is not None
        baseline = read_vm_hwm_kib(broker.pid)
        assert baseline is not None
        largest = 5 * 1024 * 1024 + FRAME_PADDING  # maxMessageSize's default + Pulsar's frame padding
        peers = []
        try:
            for _ in range(ANNOUNCERS):
                s = socket.create_connection(("127.0.0.1", broker.pulsar_port), timeout=30)
                s.sendall(largest.to_bytes(4, "big") + b"\x00")
                peers.append(s)
            _round_trip(broker, 500)
            peak = read_vm_hwm_kib(broker.pid)
            assert peak is not None
            grown = peak - baseline
            assert grown < RSS_BOUND_KIB, f"peak RSS grew by {grown} KiB with {ANNOUNCERS} announced Pulsar frames"
            assert broker.alive()
        finally:
            for s in peers:
                s.close()
    finally:
        broker.stop()


def _closed_without_answer(s: socket.socket) -> bool:
    """Send CONNECT and read: the broker must close the connection, not answer CONNECTED."""
    try:
        s.sendall(_CONNECT)
        return s.recv(1) == b""
    except (ConnectionResetError, BrokenPipeError):
        return True


def _connected(s: socket.socket) -> bool:
    s.sendall(_CONNECT)
    return len(s.recv(4096)) > 0


def test_kafka_and_pulsar_connections_count_together_per_address(tmp_path) -> None:
    broker = KopBroker(tmp_path, {"maxConnectionsPerIp": "2"}).start()
    host, kport = broker.bootstrap.rsplit(":", 1)
    socks: list[socket.socket] = []
    try:
        kafka = socket.create_connection((host, int(kport)), timeout=30, source_address=("127.0.0.1", 0))
        socks.append(kafka)
        first = socket.create_connection(("127.0.0.1", broker.pulsar_port), timeout=30, source_address=("127.0.0.1", 0))
        socks.append(first)
        assert _connected(first)
        third = socket.create_connection(("127.0.0.1", broker.pulsar_port), timeout=30, source_address=("127.0.0.1", 0))
        socks.append(third)
        assert _closed_without_answer(third), "a third connection of 127.0.0.1 (one Kafka, one Pulsar) was served"
        other = socket.create_connection(("127.0.0.1", broker.pulsar_port), timeout=30, source_address=("127.0.0.2", 0))
        socks.append(other)
        assert _connected(other), "another address is not affected"
        kafka.close()  # its slot is given back: a Pulsar connection of 127.0.0.1 is served again
        wait_until("a slot for 127.0.0.1", lambda: _try_connect(broker), timeout=30)
        assert "Rejected connection from 127.0.0.1" in broker.log_path.read_text(errors="replace")
    finally:
        for s in socks:
            s.close()
        broker.stop()


def _try_connect(broker: KopBroker) -> bool:
    s = socket.create_connection(("127.0.0.1", broker.pulsar_port), timeout=30, source_address=("127.0.0.1", 0))
    try:
        return _connected(s)
    except OSError:
        return False
    finally:
        s.close()
