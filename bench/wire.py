"""A minimal asyncio Kafka wire client for the scale scenarios (many connections, raw Metadata and Fetch).

Why not a real client library here: the scale scenarios measure single requests - the bytes and time of one
Metadata response, one Fetch at a random offset on a fresh connection, 1 000 sockets each doing ApiVersions +
Metadata + Produce - which client libraries hide behind caches, retries and background threads. Requests are
encoded and responses decoded with kafka-python 3.x's generated protocol classes (independent of our own codec
in kop.protocol, so the bench does not measure our codec against itself).

    async with await Conn.open("127.0.0.1:9092") as c:
        await c.negotiate()
        resp, size = await c.call(MetadataRequest(...), cap=12)
"""

from __future__ import annotations

import asyncio
import struct
import time

from kafka.protocol.api_message import ApiMessage


class Conn:
    """One TCP connection; requests are sent one at a time (no pipelining: each call waits its answer)."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader = reader
        self.writer = writer
        self._cid = 0
        self.ranges: dict[int, tuple[int, int]] = {}

    @classmethod
    async def open(cls, bootstrap: str, timeout: float = 30) -> Conn:
        host, port = bootstrap.rsplit(":", 1)
        reader, writer = await asyncio.wait_for(asyncio.open_connection(host, int(port), limit=1 << 26), timeout)
        return cls(reader, writer)

    async def send(self, request: ApiMessage, version: int) -> tuple[ApiMessage, int]:
        """Send one request; returns (decoded response, response size in bytes without the length prefix)."""
        self._cid += 1
        request.API_VERSION = version
        request.with_header(correlation_id=self._cid, client_id="kop-bench")
        self.writer.write(request.encode(version=version, header=True, framed=True))
        (size,) = struct.unpack(">i", await self.reader.readexactly(4))
        payload = await self.reader.readexactly(size)
        response = request.header.get_response_class().decode(payload, version=version, header=True)
        if response.header.correlation_id != self._cid:
            raise ConnectionError("correlation id mismatch")
        return response, size

    async def negotiate(self) -> None:
        """ApiVersions v3: learn the broker's version ranges (call() picks the highest common version)."""
        from kafka.protocol.metadata import ApiVersionsRequest

        resp, _ = await self.send(ApiVersionsRequest(client_software_name="kop-bench", client_software_version="1"), 3)
        if resp.error_code != 0:
            raise ConnectionError(f"ApiVersions failed with error {resp.error_code}")
        self.ranges = {k.api_key: (k.min_version, k.max_version) for k in resp.api_keys}

    def version(self, request_class: type, cap: int) -> int:
        lo, hi = self.ranges[request_class.API_KEY]
        v = min(hi, cap, request_class.max_version)
        if v < lo:
            raise ValueError(f"no common version of {request_class.name}")
        return v

    async def call(self, request: ApiMessage, cap: int) -> tuple[ApiMessage, int]:
        return await self.send(request, self.version(type(request)[None], cap))

    async def timed(self, request: ApiMessage, cap: int) -> tuple[ApiMessage, int, float]:
        """call() and the seconds from write to the last byte of the answer."""
        t0 = time.perf_counter()
        resp, size = await self.call(request, cap)
        return resp, size, time.perf_counter() - t0

    async def close(self) -> None:
        self.writer.close()
        try:
            await self.writer.wait_closed()
        except (ConnectionError, OSError):
            pass

    async def __aenter__(self) -> Conn:
        return self

    async def __aexit__(self, *exc) -> None:
        await self.close()


# ---- request builders ---------------------------------------------------------------------------------------


def metadata_request(topics: list[str] | None) -> ApiMessage:
    """Metadata for the given topics, or all topics (None); never auto-creates."""
    from kafka.protocol.metadata import MetadataRequest

    T = MetadataRequest.MetadataRequestTopic
    return MetadataRequest(
        topics=None if topics is None else [T(topic_id=None, name=t) for t in topics],
        allow_auto_topic_creation=False,
        include_cluster_authorized_operations=False,
        include_topic_authorized_operations=False,
    )


def produce_request(topic: str, partition: int, batch: bytes, acks: int = 1) -> ApiMessage:
    from kafka.protocol.producer import ProduceRequest

    T = ProduceRequest.TopicProduceData
    return ProduceRequest(
        transactional_id=None, acks=acks, timeout_ms=30000,
        topic_data=[T(name=topic, partition_data=[T.PartitionProduceData(index=partition, records=batch)])],
    )


def fetch_request(topic: str, partition: int, offset: int, max_bytes: int) -> ApiMessage:
    """One partition, no fetch session, max_wait 0: answers at once with what is there."""
    from kafka.protocol.consumer import FetchRequest

    FT = FetchRequest.FetchTopic
    return FetchRequest(
        replica_id=-1, max_wait_ms=0, min_bytes=0, max_bytes=max_bytes, isolation_level=0, session_id=0,
        session_epoch=-1,
        topics=[FT(topic=topic, partitions=[FT.FetchPartition(
            partition=partition, current_leader_epoch=-1, fetch_offset=offset, log_start_offset=-1,
            partition_max_bytes=max_bytes)])],
        forgotten_topics_data=[], rack_id="",
    )


def record_batch(n: int, value_size: int) -> bytes:
    """A v2 record batch of n uncompressed records with value_size-byte values and no keys."""
    from kafka.record.default_records import DefaultRecordBatchBuilder

    b = DefaultRecordBatchBuilder(magic=2, compression_type=0, is_transactional=False, producer_id=-1,
                                  producer_epoch=-1, base_sequence=-1, batch_size=1 << 20)
    now = int(time.time() * 1000)
    value = b"x" * value_size
    for i in range(n):
        b.append(i, timestamp=now, key=None, value=value, headers=[])
    return bytes(b.build())


def first_batch_base_offset(records: bytes | None) -> int | None:
    """Base offset of the first record batch in a Fetch answer's records (None if there is none)."""
    if not records or len(records) < 12:
        return None
    return struct.unpack_from(">q", records, 0)[0]


def last_offset_in(records: bytes | None) -> int | None:
    """Offset of the last record in the last whole batch of a Fetch answer's records."""
    if not records:
        return None
    mv = memoryview(records)
    pos, last = 0, None
    while pos + 61 <= len(mv):
        base, length = struct.unpack_from(">qi", mv, pos)
        if pos + 12 + length > len(mv):
            break
        (delta,) = struct.unpack_from(">i", mv, pos + 23)
        last = base + delta
        pos += 12 + length
    return last
