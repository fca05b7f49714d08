"""One plain Kafka-protocol connection from this broker to another, one request at a time: what the transaction
coordinator's markers (transactions/markers.py) and the share-partition leader's state calls
(share/persister.py) send between brokers. Their calls are few and small, so a lock per connection is enough;
the connection is opened on first use and again after it closed."""

from __future__ import annotations

import asyncio
import struct

from kop.protocol import decode_response, encode_request
from kop.protocol.model import Struct


class BrokerLink:
    def __init__(self, host: str, port: int, client_id: str) -> None:
        self.host, self.port, self.client_id = host, port, client_id
        self.reader: asyncio.StreamReader | None = None
        self.writer: asyncio.StreamWriter | None = None
        self.lock = asyncio.Lock()
        self.correlation = 0

    async def request(self, body: Struct, api_key: int, version: int) -> Struct:
        async with self.lock:
            if self.writer is None or self.writer.is_closing():
                self.reader, self.writer = await asyncio.open_connection(self.host, self.port)
            assert self.reader is not None
            self.correlation += 1
            self.writer.write(encode_request(api_key, version, self.correlation, self.client_id, body))
            await self.writer.drain()
            (size,) = struct.unpack(">i", await self.reader.readexactly(4))
            correlation, response = decode_response(api_key, version, await self.reader.readexactly(size))
            if correlation != self.correlation:
                raise ConnectionError(f"correlation id {correlation}, expected {self.correlation}")
            return response

    def close(self) -> None:
        if self.writer is not None:
            self.writer.close()
        self.reader = self.writer = None
