"""A raw Pulsar-protocol socket for tests that must send what no real client sends (bad frames, unknown
commands, acks for ids never delivered), built on our sans-IO codec (kop/pulsar/codec)."""

from __future__ import annotations

import socket
import time
from typing import Any

from kop.pulsar.codec import commands as c
from kop.pulsar.codec.framing import Frame, FrameReader, encode_command, encode_message


class WireClient:
    def __init__(self, port: int, host: str = "127.0.0.1", timeout: float = 30) -> None:
        self.sock = socket.create_connection((host, port), timeout=timeout)
        self.reader = FrameReader(64 * 1024 * 1024)
        self.timeout = timeout

    def connect(self, protocol_version: int = 21) -> Any:
        self.send(c.command(c.CONNECT, client_version="wire-test", protocol_version=protocol_version))
        return self.expect(c.CONNECTED)

    def send(self, cmd: Any) -> None:
        self.sock.sendall(encode_command(cmd))

    def send_message(self, cmd: Any, metadata: Any, payload: bytes, checksum: bool = True) -> None:
        self.sock.sendall(encode_message(cmd, metadata, payload, checksum))

    def raw(self, data: bytes) -> None:
        self.sock.sendall(data)

    def recv(self) -> Frame | None:
        """The next frame; None when the broker closed the connection."""
        deadline = time.monotonic() + self.timeout
        while True:
            frame = self.reader.next_frame()
            if frame is not None:
                return frame
            self.sock.settimeout(max(deadline - time.monotonic(), 0.01))
            try:
                data = self.sock.recv(65536)
            except ConnectionResetError:
                return None
            if not data:
                return None
            self.reader.feed(data)

    def expect(self, type_: int) -> Any:
        """The inner command of the next frame of `type_` (PINGs from the broker are skipped)."""
        while True:
            frame = self.recv()
            assert frame is not None, f"connection closed while waiting for {c.type_name(type_)}"
            if frame.type == type_:
                return frame.inner
            if frame.type != c.PING:
                raise AssertionError(f"expected {c.type_name(type_)}, got {c.type_name(frame.type)}: {frame.inner}")

    def closed_by_peer(self) -> bool:
        """True when the broker closes the connection (reads until EOF; frames before it are dropped)."""
        while True:
            try:
                if self.recv() is None:
                    return True
            except TimeoutError:
                return False

    def close(self) -> None:
        self.sock.close()
