"""A tiny blocking Kafka wire client for tests that must control requests byte for byte (e.g. sending the
same idempotent Produce twice). It encodes and decodes with kafka-python 3.x's generated protocol classes,
which are independent of our own codec (kop.protocol) - so a test does not check our codec with itself.

    with WireClient("127.0.0.1:9092") as c:
        resp = c.send(InitProducerIdRequest(transactional_id=None, transaction_timeout_ms=60000), version=1)
"""

from __future__ import annotations

import socket
import struct

from kafka.protocol.api_message import ApiMessage


def recv_exact(sock: socket.socket, n: int) -> bytes:
    """Exactly `n` bytes from `sock`; ConnectionError when the peer closes first."""
    buf = bytearray()
    while len(buf) < n:
        chunk = sock.recv(n - len(buf))
        if not chunk:
            raise ConnectionError(f"connection closed after {len(buf)} of {n} bytes")
        buf += chunk
    return bytes(buf)

class WireClient:
    def __init__(self, bootstrap: str, client_id: str = "kop-tests-wire", timeout: float = 30) -> None:
        host, port = bootstrap.rsplit(":", 1)
        self.sock = socket.create_connection((host, int(port)), timeout=timeout)
        self.client_id = client_id
        self._correlation_id = 0

    def send(self, request: ApiMessage, version: int) -> ApiMessage:
        self.submit(request, version)
        return self.receive(request, version)

    def submit(self, request: ApiMessage, version: int) -> None:
        """Write one request without reading its answer (pipelining: receive() them in order later)."""
        self._correlation_id += 1
        request.API_VERSION = version
        request.with_header(correlation_id=self._correlation_id, client_id=self.client_id)
        self.sock.sendall(request.encode(version=version, header=True, framed=True))

    def receive(self, request: ApiMessage, version: int) -> ApiMessage:
        """The answer to `request`, submitted with `version`: the next one on the connection."""
        size = struct.unpack(">i", self._recv_exact(4))[0]
        payload = self._recv_exact(size)
        response_class = request.header.get_response_class()
        response = response_class.decode(payload, version=version, header=True)
        assert response.header.correlation_id == request.header.correlation_id, "correlation id mismatch"
        return response

    def _recv_exact(self, n: int) -> bytes:
        return recv_exact(self.sock, n)

    def close(self) -> None:
        self.sock.close()

    def __enter__(self) -> WireClient:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


# ---- higher-level helpers (each negotiates versions with ApiVersions) --------------------------------------


class Negotiated(WireClient):
    """A WireClient that learned the broker's ApiVersions ranges and picks the highest version both sides
    know, capped by what the test wants (e.g. Produce <= 9 so topics are addressed by name)."""

    def __init__(self, bootstrap: str, **kw) -> None:
        super().__init__(bootstrap, **kw)
        from kafka.protocol.metadata import ApiVersionsRequest

        resp = self.send(ApiVersionsRequest(client_software_name="kop-tests", client_software_version="1"), version=3)
        if resp.error_code != 0:
            raise AssertionError(f"ApiVersions v3 failed with error {resp.error_code}")
        self.ranges = {k.api_key: (k.min_version, k.max_version) for k in resp.api_keys}

    def version(self, request_class, cap: int) -> int:
        key = request_class.API_KEY
        if key not in self.ranges:
            raise AssertionError(f"broker does not advertise {request_class.name} (key {key})")
        lo, hi = self.ranges[key]
        v = min(hi, cap, request_class.max_version)
        if v < lo:
            raise AssertionError(f"no common version for {request_class.name}: broker {lo}..{hi}, test cap {cap}")
        return v

    def call(self, request: ApiMessage, cap: int) -> ApiMessage:
        return self.send(request, self.version(type(request)[None], cap))

    def init_producer_id(self, attempts: int = 100) -> tuple[int, int]:
        import time

        from kafka.protocol.producer import InitProducerIdRequest

        for _ in range(attempts):
            r = self.call(InitProducerIdRequest(transactional_id=None, transaction_timeout_ms=60000), cap=4)
            if r.error_code == 0:
                return r.producer_id, r.producer_epoch
            if r.error_code not in (14, 15):  # COORDINATOR_LOAD_IN_PROGRESS, COORDINATOR_NOT_AVAILABLE
                raise AssertionError(f"InitProducerId failed with error {r.error_code}")
            time.sleep(0.2)
        raise AssertionError("InitProducerId kept answering COORDINATOR_LOAD_IN_PROGRESS/NOT_AVAILABLE")

    def produce(self, topic: str, partition: int, batch: bytes, acks: int = -1):
        """One Produce request with one batch; returns the partition response."""
        resp = self.call(produce_request(topic, partition, batch, acks), cap=9)
        (t,) = resp.responses
        (p,) = t.partition_responses
        return p

    def fetch(self, topic: str, partition: int, offset: int, max_bytes: int = 1 << 20):
        """One Fetch (no session, max_wait 0); returns the partition data (error_code, high_watermark,
        log_start_offset, records)."""
        resp = self.call(fetch_request(topic, partition, offset, max_bytes), cap=12)
        if getattr(resp, "error_code", 0):
            raise AssertionError(f"Fetch top-level error {resp.error_code}")
        (t,) = resp.responses
        (p,) = t.partitions
        return p

    def list_offset(self, topic: str, partition: int, timestamp: int) -> tuple[int, int, int]:
        """ListOffsets for one partition: (error_code, offset, timestamp)."""
        from kafka.protocol.consumer import ListOffsetsRequest

        LT = ListOffsetsRequest.ListOffsetsTopic
        req = ListOffsetsRequest(
            replica_id=-1,
            isolation_level=0,
            topics=[LT(name=topic, partitions=[LT.ListOffsetsPartition(partition_index=partition, timestamp=timestamp, current_leader_epoch=-1)])],
        )
        resp = self.call(req, cap=9 if timestamp >= -3 else 10)
        (t,) = resp.topics
        (p,) = t.partitions
        return p.error_code, p.offset, p.timestamp


def batch_headers(records: bytes) -> list[dict]:
    """Parse the v2 batch headers in a Fetch response's records bytes (no decompression)."""
    import struct as _s

    out = []
    pos = 0
    mv = memoryview(records or b"")
    while pos + 61 <= len(mv):
        base_offset, length = _s.unpack_from(">qi", mv, pos)
        if pos + 12 + length > len(mv):
            break  # partial trailing batch (allowed by the protocol)
        magic = mv[pos + 16]
        attributes, last_offset_delta, first_ts, max_ts, pid, epoch, base_seq, count = _s.unpack_from(
            ">hiqqqhii", mv, pos + 21
        )
        out.append(
            {
                "base_offset": base_offset,
                "length": length,
                "magic": magic,
                "compression": attributes & 0x7,
                "last_offset_delta": last_offset_delta,
                "max_timestamp": max_ts,
                "producer_id": pid,
                "base_sequence": base_seq,
                "count": count,
            }
        )
        pos += 12 + length
    return out


def produce_request(topic: str, partition: int, batch: bytes, acks: int = -1) -> ApiMessage:
    """A Produce request (topics by name: send it at v9 or lower) with one batch for one partition."""
    from kafka.protocol.producer import ProduceRequest

    T = ProduceRequest.TopicProduceData
    return ProduceRequest(
        transactional_id=None,
        acks=acks,
        timeout_ms=30000,
        topic_data=[T(name=topic, partition_data=[T.PartitionProduceData(index=partition, records=batch)])],
    )


def fetch_request(topic: str, partition: int, offset: int, max_bytes: int = 1 << 20) -> ApiMessage:
    """A Fetch request (no session, max_wait 0, topics by name: v12 or lower) for one partition."""
    from kafka.protocol.consumer import FetchRequest

    FT = FetchRequest.FetchTopic
    return FetchRequest(
        replica_id=-1,
        max_wait_ms=0,
        min_bytes=0,
        max_bytes=max_bytes,
        isolation_level=0,
        session_id=0,
        session_epoch=-1,
        topics=[
            FT(
                topic=topic,
                partitions=[
                    FT.FetchPartition(
                        partition=partition,
                        current_leader_epoch=-1,
                        fetch_offset=offset,
                        log_start_offset=-1,
                        partition_max_bytes=max_bytes,
                    )
                ],
            )
        ],
        forgotten_topics_data=[],
        rack_id="",
    )
