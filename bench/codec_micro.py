"""Micro-benchmark of the generated codec on the hot paths (not a test; numbers are machine-dependent).

Run: python bench/codec_micro.py  — prints the median per-operation time of each case, next to
kafka-python 3.0.12 doing the same work where it can.
"""

from __future__ import annotations

import statistics
import struct
import time
from collections.abc import Callable

from kafka.protocol.consumer.fetch import FetchResponse as KPFetchResponse
from kafka.protocol.producer.produce import ProduceRequest as KPProduceRequest
from kafka.record.default_records import DefaultRecordBatchBuilder

from kop.protocol import decode_request, decode_request_header, encode_request, encode_response, message_class
from kop.protocol.records import iter_batches


def bench(label: str, fn: Callable[[], object], rounds: int = 7, min_time: float = 0.05) -> float:
    n = 1
    while True:
        start = time.perf_counter()
        for _ in range(n):
            fn()
        if time.perf_counter() - start > min_time / 5:
            break
        n *= 2
    times = []
    for _ in range(rounds):
        start = time.perf_counter()
        for _ in range(n):
            fn()
        times.append((time.perf_counter() - start) / n)
    median = statistics.median(times)
    print(f"{label:<62} {median * 1e6:10.2f} µs")
    return median


def make_batch(size: int = 16 * 1024) -> bytes:
    builder = DefaultRecordBatchBuilder(magic=2, compression_type=0, is_transactional=False,
                                        producer_id=-1, producer_epoch=-1, base_sequence=-1, batch_size=1 << 22)
    for i in range(16):
        builder.append(i, timestamp=1_700_000_000_000, key=None, value=b"x" * (size // 16 - 20), headers=[])
    return bytes(builder.build())


def main() -> None:
    batch = make_batch()
    Produce = message_class("ProduceRequest")
    for partitions in (1, 100):
        request = Produce(acks=-1, timeout_ms=30000, topic_data=[Produce.TopicProduceData(
            name="bench-topic", partition_data=[Produce.PartitionProduceData(index=i, records=batch)
                                               for i in range(partitions)])])
        frame = memoryview(bytearray(encode_request(0, 9, 1, "bench-client", request)))[4:]

        def decode(frame: memoryview = frame) -> object:
            header, offset = decode_request_header(frame)
            return decode_request(header.api_key, header.api_version, frame, offset)

        bench(f"Produce v9 request header+decode, {partitions} x 16 KiB", decode)

        def walk(frame: memoryview = frame) -> None:
            header, offset = decode_request_header(frame)
            req = decode_request(header.api_key, header.api_version, frame, offset)
            for topic in req.topic_data:
                for p in topic.partition_data:
                    for _h, b in iter_batches(p.records):
                        struct.pack_into(">q", b, 0, 42)

        bench(f"  + iter_batches (CRC-32C) + stamp offsets, {partitions} x 16 KiB", walk)
        raw = bytes(frame)
        header, offset = decode_request_header(frame)
        bench(f"  kafka-python ProduceRequest.decode, {partitions} partitions",
              lambda raw=raw, offset=offset: KPProduceRequest.decode(raw[offset:], version=9))

    Fetch = message_class("FetchResponse")
    stored = memoryview(batch)

    def build_fetch() -> object:
        return Fetch(responses=[Fetch.FetchableTopicResponse(topic="bench-topic", partitions=[
            Fetch.PartitionData(partition_index=i, high_watermark=1000, last_stable_offset=1000,
                                log_start_offset=0, records=[struct.pack(">q", i), stored[8:]])
            for i in range(100)])])

    response = build_fetch()
    bench("Fetch v12 response encode, 100 x 16 KiB (parts)", lambda: encode_response(1, 12, 1, response))
    bench("Fetch v12 response build objects + encode, 100 x 16 KiB",
          lambda: encode_response(1, 12, 1, build_fetch()))
    kp = KPFetchResponse.decode(b"".join(encode_response(1, 12, 1, response))[9:], version=12)
    kp._header = None
    bench("  kafka-python FetchResponse.encode, same", lambda: kp.encode(version=12))

    Meta = message_class("MetadataResponse")
    meta = Meta(brokers=[Meta.MetadataResponseBroker(node_id=0, host="localhost", port=9092)],
                cluster_id="c", controller_id=0,
                topics=[Meta.MetadataResponseTopic(name=f"topic-{t}", topic_id=bytes(16), partitions=[
                    Meta.MetadataResponsePartition(partition_index=p, leader_id=0, leader_epoch=0,
                                                   replica_nodes=[0], isr_nodes=[0], offline_replicas=[])
                    for p in range(100)]) for t in range(10)])
    bench("Metadata v12 response encode, 10 topics x 100 partitions", lambda: encode_response(3, 12, 1, meta))
    meta_frame = memoryview(b"".join(encode_response(3, 12, 1, meta)))[4:]
    from kop.protocol import decode_response

    bench("Metadata v12 response decode, same", lambda: decode_response(3, 12, meta_frame))
    FetchReq = message_class("FetchRequest")
    freq = FetchReq(max_wait_ms=500, min_bytes=1, max_bytes=50 << 20, topics=[FetchReq.FetchTopic(
        topic="bench-topic", partitions=[FetchReq.FetchPartition(partition=i, fetch_offset=1000,
                                                                 partition_max_bytes=1 << 20)
                                         for i in range(100)])])
    fframe = memoryview(encode_request(1, 12, 1, "c", freq))[4:]
    bench("Fetch v12 request header+decode, 100 partitions",
          lambda: decode_request(1, 12, fframe, decode_request_header(fframe)[1]))
    hframe = fframe[:40]
    bench("Request header v2 decode", lambda: decode_request_header(hframe))


if __name__ == "__main__":
    main()
