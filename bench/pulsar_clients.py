"""pulsar-client against our broker's pulsar handler: produce and consume throughput, end-to-end latency.

    python bench/pulsar_clients.py [--messages 100000] [--size 100] [--rounds 3] [--pulsar-url pulsar://...]

Each round, on a fresh topic: a batched producer (LZ4, up to 1000 messages per batch, 5 ms delay) sends
`--messages` messages asynchronously and flushes (produce throughput); then one consumer reads and acknowledges
them all (consume throughput: Kafka -> Pulsar conversion at dispatch included); then 2000 unbatched sends, each
awaited, with a consumer receiving (end-to-end latency of one message: send -> receive, publish-time clock of
this process). `--pulsar-url` points it at another broker (an Apache Pulsar standalone) instead of starting ours,
so the same numbers can be taken side by side.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
import uuid
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import pulsar  # noqa: E402

from tests.support.broker import KopBroker  # noqa: E402


def one_round(url: str, messages: int, size: int) -> dict[str, float]:
    client = pulsar.Client(url, operation_timeout_seconds=60)
    try:
        topic = f"bench-{uuid.uuid4().hex[:8]}"
        consumer = client.subscribe(topic, "bench", initial_position=pulsar.InitialPosition.Earliest,
                                    receiver_queue_size=5000)
        producer = client.create_producer(topic, batching_enabled=True, batching_max_messages=1000,
                                          batching_max_publish_delay_ms=5, block_if_queue_full=True,
                                          max_pending_messages=20000, compression_type=pulsar.CompressionType.LZ4)
        payload = b"x" * size
        start = time.perf_counter()
        for _ in range(messages):
            producer.send_async(payload, None)
        producer.flush()
        produce_s = time.perf_counter() - start
        start = time.perf_counter()
        for _ in range(messages):
            consumer.acknowledge(consumer.receive(60000))
        consume_s = time.perf_counter() - start
        single = client.create_producer(topic)
        latencies = []
        for _ in range(2000):
            sent = time.perf_counter()
            single.send(payload)
            consumer.acknowledge(consumer.receive(60000))
            latencies.append((time.perf_counter() - sent) * 1000)
        latencies.sort()
        return {
            "produce msg/s": messages / produce_s,
            "consume msg/s": messages / consume_s,
            "e2e p50 ms": statistics.median(latencies),
            "e2e p99 ms": latencies[int(len(latencies) * 0.99) - 1],
        }
    finally:
        client.close()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--messages", type=int, default=100_000)
    parser.add_argument("--size", type=int, default=100)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--pulsar-url", default=None, help="an already running broker (default: start ours)")
    args = parser.parse_args()
    broker = None
    url = args.pulsar_url
    if url is None:
        broker = KopBroker(Path(tempfile.mkdtemp(prefix="kop-bench-pulsar-")), {"localStoreFsyncPolicy": "none"})
        broker.start()
        url = broker.pulsar_url
    try:
        rounds = [one_round(url, args.messages, args.size) for _ in range(args.rounds)]
    finally:
        if broker is not None:
            broker.stop()
    for key in rounds[0]:
        values = [r[key] for r in rounds]
        print(f"{key:>14}: median {statistics.median(values):10.2f}   rounds {', '.join(f'{v:.2f}' for v in values)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
