"""A pulsar-client LZ4 batch larger than one LZ4 block (64 KiB), stored as a Kafka LZ4 batch at SEND
(kop/pulsar/convert.py + kop/protocol/compression.py), read by every Kafka client we test with: the Java console
consumer, confluent-kafka (librdkafka) and kafka-python.

The Java client decompresses each block of a Kafka LZ4 frame by itself (KafkaLZ4BlockInputStream), so a frame
whose second block refers back into the first - what the lz4 library writes unless told otherwise - fails there
while the Python clients read it fine; small batches never show it. Hence batches of ~190 KiB here.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import pulsar
import pytest

from tests.support.broker import KopBroker
from tests.support.clients import consume_confluent, consume_kafka_python, end_offsets

N = 300
SIZE = 640  # 300 x 640 B = 192 000 B in one batch: three 64 KiB blocks


def value(i: int) -> bytes:
    # compressible (so that blocks find matches in their predecessors), and different per message
    return (f"message-{i:05d}-".encode() + b"abcdefgh" * 80)[:SIZE]


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[KopBroker]:
    b = KopBroker(tmp_path_factory.mktemp("kop-pulsar-lz4"))
    b.start()
    yield b
    b.stop()


@pytest.fixture(scope="module")
def topic(broker: KopBroker) -> str:
    name = f"lz4-{uuid.uuid4().hex[:10]}"
    client = pulsar.Client(broker.pulsar_url, operation_timeout_seconds=60)
    try:
        producer = client.create_producer(
            name, compression_type=pulsar.CompressionType.LZ4, batching_enabled=True, batching_max_messages=N,
            batching_max_allowed_size_in_bytes=1024 * 1024, batching_max_publish_delay_ms=60_000)
        ids = []
        for i in range(N):
            producer.send_async(value(i), lambda res, mid: ids.append((res, mid)))
        producer.flush()
        producer.close()
    finally:
        client.close()
    assert len(ids) == N and all(res == pulsar.Result.Ok for res, _ in ids)
    assert len({(m.ledger_id(), m.entry_id()) for _, m in ids}) == 1  # one entry: one Kafka LZ4 batch
    assert end_offsets(broker.bootstrap, name, 1) == {0: N}
    return name


@pytest.mark.parametrize("consume", [consume_confluent, consume_kafka_python], ids=["confluent-kafka", "kafka-python"])
def test_python_kafka_clients_read_the_converted_lz4_batch(broker: KopBroker, topic: str, consume) -> None:  # noqa: ANN001
    got = consume(broker.bootstrap, topic, {0: N})
    assert [(g.offset, g.value) for g in got] == [(i, value(i)) for i in range(N)]


def test_the_java_console_consumer_reads_the_converted_lz4_batch(broker: KopBroker, topic: str, java_tools) -> None:  # noqa: ANN001
    out = java_tools.run(
        "kafka-console-consumer", "--bootstrap-server", broker.bootstrap, "--topic", topic, "--partition", "0",
        "--offset", "earliest", "--max-messages", str(N), "--timeout-ms", "60000",
        "--formatter-property", "print.offset=true", check=True).lines
    rows = [line for line in out if line.startswith("Offset:")]
    assert rows == [f"Offset:{i}\t{value(i).decode()}" for i in range(N)], out[-20:]
