"""Raw Kafka requests with our own codec (kop.protocol) for the transaction tests of the partition side:
transactional batches and WriteTxnMarkers written by hand, read back by real clients."""

from __future__ import annotations

import socket
import struct
from typing import Any

from kop.protocol import api_info, decode_response, encode_request
from kop.protocol.records import build_batch


class RawClient:
    def __init__(self, bootstrap: str, timeout: float = 30) -> None:
        host, port = bootstrap.rsplit(":", 1)
        self.sock = socket.create_connection((host, int(port)), timeout=timeout)
        self.cid = 0

    def call(self, key: int, version: int, **fields: Any) -> Any:
        self.cid += 1
        body = api_info(key).request_class(**fields)
        self.sock.sendall(encode_request(key, version, self.cid, "kop-txn-tests", body))
        size = struct.unpack(">i", self._exact(4))[0]
        cid, resp = decode_response(key, version, self._exact(size))
        assert cid == self.cid
        return resp

    def _exact(self, n: int) -> bytes:
        buf = bytearray()
        while len(buf) < n:
            chunk = self.sock.recv(n - len(buf))
            if not chunk:
                raise ConnectionError("closed")
            buf += chunk
        return bytes(buf)

    def close(self) -> None:
        self.sock.close()

    # ---- helpers

    def init_producer_id(self) -> tuple[int, int]:
        r = self.call(22, 1, transactional_id=None, transaction_timeout_ms=60000)
        assert r.error_code == 0, r
        return r.producer_id, r.producer_epoch

    def produce(self, topic: str, partition: int, batch: bytes, transactional_id: str | None = None,
                version: int = 9) -> Any:
        R = api_info(0).request_class
        r = self.call(0, version, transactional_id=transactional_id, acks=-1, timeout_ms=30000, topic_data=[
            R.TopicProduceData(name=topic, partition_data=[R.PartitionProduceData(index=partition, records=batch)])])
        return r.responses[0].partition_responses[0]

    def marker(self, topic: str, partitions: list[int], pid: int, epoch: int, commit: bool,
               coordinator_epoch: int = 0) -> list[int]:
        R = api_info(27).request_class
        r = self.call(27, 1, markers=[R.WritableTxnMarker(
            producer_id=pid, producer_epoch=epoch, transaction_result=commit, coordinator_epoch=coordinator_epoch,
            topics=[R.WritableTxnMarker.WritableTxnMarkerTopic(name=topic, partition_indexes=partitions)])])
        return [p.error_code for p in r.markers[0].topics[0].partitions]

    def fetch(self, topic: str, partition: int, offset: int, committed: bool, version: int = 12,
              max_wait_ms: int = 0, min_bytes: int = 0) -> Any:
        R = api_info(1).request_class
        r = self.call(1, version, replica_id=-1, max_wait_ms=max_wait_ms, min_bytes=min_bytes, max_bytes=1 << 20,
                      isolation_level=1 if committed else 0, session_id=0, session_epoch=-1, topics=[
                          R.FetchTopic(topic=topic, partitions=[R.FetchTopic.FetchPartition(
                              partition=partition, fetch_offset=offset, partition_max_bytes=1 << 20)])])
        return r.responses[0].partitions[0]

    def list_offset(self, topic: str, partition: int, timestamp: int, committed: bool) -> Any:
        R = api_info(2).request_class
        r = self.call(2, 7, replica_id=-1, isolation_level=1 if committed else 0, topics=[
            R.ListOffsetsTopic(name=topic, partitions=[R.ListOffsetsTopic.ListOffsetsPartition(
                partition_index=partition, timestamp=timestamp)])])
        return r.topics[0].partitions[0]

    def describe_producers(self, topic: str, partitions: list[int]) -> Any:
        R = api_info(61).request_class
        r = self.call(61, 0, topics=[R.TopicRequest(name=topic, partition_indexes=partitions)])
        return r.topics[0].partitions


def txn_batch(pid: int, epoch: int, seq: int, values: list[bytes], transactional: bool = True) -> bytes:
    return build_batch([(b"k", v) for v in values], producer_id=pid, producer_epoch=epoch, base_sequence=seq,
                       is_transactional=transactional)


def batches_of(records: Any) -> list[tuple[int, Any, list[bytes]]]:
    """(base offset, header, values) of each batch in a fetched records blob."""
    from kop.protocol.records import decode_records, iter_batches

    out = []
    for h, b in iter_batches(bytes(records) if records else b"", fresh=False):
        out.append((h.base_offset, h, [r.value for r in decode_records(b)]))
    return out
