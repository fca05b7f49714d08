"""kop/net/tls.py and the acceptor's TLS path: a client that stalls its TLS handshake holds only its own
slot - the accept loop keeps serving other clients - and shutdown cancels the handshakes under way."""

from __future__ import annotations

import asyncio
import ssl
from pathlib import Path

from cryptography.hazmat.primitives import serialization
from cryptography.x509.oid import NameOID

from kop.config import BrokerConfig
from kop.net.acceptor import Acceptor, listen
from kop.net.tls import server_context
from tests.support.certs import CertAuthority, name


class Proto(asyncio.Protocol):
    def __init__(self, acceptor: Acceptor, opened: list[Proto]) -> None:
        self.acceptor, self.opened = acceptor, opened
        self.ip, self.counted = "", False

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport
        self.opened.append(self)
        transport.write(b"hello")  # over TLS

    def connection_lost(self, exc: Exception | None) -> None:
        self.acceptor.connection_closed(self)


async def _until(predicate) -> None:
    for _ in range(3000):  # liveness only: fails instead of hanging
        if predicate():
            return
        await asyncio.sleep(0.01)
    raise AssertionError("condition not reached")


async def test_a_stalled_handshake_does_not_block_accepting(tmp_path: Path) -> None:
    ca = CertAuthority()
    (tmp_path / "ca.pem").write_bytes(ca.cert.public_bytes(serialization.Encoding.PEM))
    cert = ca.issue(name((NameOID.COMMON_NAME, "broker")), ips=["127.0.0.1"])
    (tmp_path / "b.pem").write_bytes(cert.cert_pem)
    (tmp_path / "b.key").write_bytes(cert.key_pem)
    cfg = BrokerConfig.from_strings({"tlsCertificateFilePath": str(tmp_path / "b.pem"),
                                     "tlsKeyFilePath": str(tmp_path / "b.key")})
    acceptor = Acceptor(cfg)
    opened: list[Proto] = []
    (sock,) = listen("127.0.0.1", 0)
    port = sock.getsockname()[1]
    task = acceptor.serve(sock, lambda: Proto(acceptor, opened), "tls-accept", ssl=server_context(cfg, False))
    try:
        # A peer that connects and says nothing: its handshake waits, in a task of its own.
        _, stalled = await asyncio.open_connection("127.0.0.1", port)
        await _until(lambda: len(acceptor._handshakes) == 1)
        # Another client still gets in, and over TLS.
        client_ctx = ssl.create_default_context(cafile=str(tmp_path / "ca.pem"))
        reader, writer = await asyncio.open_connection("127.0.0.1", port, ssl=client_ctx)
        assert await asyncio.wait_for(reader.readexactly(5), 30) == b"hello"
        assert len(opened) == 1 and acceptor.connection_count == 2
        # Plaintext bytes: the handshake fails, counted, the slot is freed.
        _, plain = await asyncio.open_connection("127.0.0.1", port)
        plain.write(b"\x00\x00\x00\x0a" + bytes(10))
        await _until(lambda: acceptor.tls_handshake_failures == 1)
        await _until(lambda: acceptor.connection_count == 2)
        # Shutdown: the stalled handshake is cancelled and its slot given back.
        await acceptor.cancel_handshakes()
        assert acceptor.connection_count == 1 and not acceptor._handshakes
        writer.close()
        stalled.close()
        plain.close()
        await _until(lambda: acceptor.connection_count == 0)
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        sock.close()
