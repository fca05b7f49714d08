"""kop/net/acceptor.py: one Acceptor counts the connections of every listener it serves together (the broker's
Kafka and Pulsar listeners), with Kafka's behaviour per address (accepted and closed at once)."""

from __future__ import annotations

import asyncio

from kop.config import BrokerConfig
from kop.net.acceptor import Acceptor, listen, normalize_ip


class Proto(asyncio.Protocol):
    def __init__(self, acceptor: Acceptor, opened: list[Proto]) -> None:
        self.acceptor, self.opened = acceptor, opened
        self.ip, self.counted = "", False

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport
        self.opened.append(self)

    def connection_lost(self, exc: Exception | None) -> None:
        self.acceptor.connection_closed(self)


def test_addresses_are_counted_as_plain_ipv4() -> None:
    assert normalize_ip("::ffff:127.0.0.1") == "127.0.0.1"
    assert normalize_ip("::1") == "::1"
    assert normalize_ip("not-an-ip") == "not-an-ip"


async def _until(predicate) -> None:
    for _ in range(3000):  # liveness only: fails instead of hanging
        if predicate():
            return
        await asyncio.sleep(0.01)
    raise AssertionError("condition not reached")


async def _closed(port: int) -> bool:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        return await asyncio.wait_for(reader.read(1), 30) == b""
    finally:
        writer.close()


async def test_one_count_spans_every_listener() -> None:
    acceptor = Acceptor(BrokerConfig.from_strings({"maxConnectionsPerIp": "2"}))
    a, b = listen("127.0.0.1", 0)[0], listen("127.0.0.1", 0)[0]
    opened: list[Proto] = []
    tasks = [acceptor.serve(s, lambda: Proto(acceptor, opened), "test-accept") for s in (a, b)]
    writers = []
    try:
        for sock in (a, b):  # one connection on each listener: the address's two
            _, w = await asyncio.open_connection("127.0.0.1", sock.getsockname()[1])
            writers.append(w)
        await _until(lambda: len(opened) == 2)
        assert acceptor.ip_counts == {"127.0.0.1": 2} and acceptor.connection_count == 2
        assert await _closed(b.getsockname()[1]), "a third connection of the address was served"
        assert acceptor.connections_rejected == 1
        opened[0].transport.close()  # its slot is given back
        await _until(lambda: acceptor.connection_count == 1)
        _, w = await asyncio.open_connection("127.0.0.1", b.getsockname()[1])
        writers.append(w)
        await _until(lambda: len(opened) == 3)
        assert acceptor.ip_counts == {"127.0.0.1": 2}
    finally:
        for w in writers:
            w.close()
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        a.close()
        b.close()
