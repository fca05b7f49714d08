"""Produce and consume the same deterministic records with the three Python clients (kafka-python,
confluent-kafka, aiokafka), and compare what comes back byte for byte.

Every helper raises (AssertionError / the client's exception) on a delivery error, a gap, or when the
data does not come back within a liveness deadline; none of them measures time as a test criterion.
"""

from __future__ import annotations

import asyncio
import hashlib
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

CLIENTS = ("kafka-python", "confluent-kafka", "aiokafka")
CODECS = ("none", "gzip", "snappy", "lz4", "zstd")

# How long a consumer may go without reaching the expected end before the helper gives up (liveness only).
STALL_TIMEOUT = 120.0


@dataclass(frozen=True, slots=True)
class Rec:
    """One record as produced (partition chosen explicitly so per-partition order is known)."""

    partition: int
    key: bytes | None
    value: bytes | None
    headers: tuple[tuple[str, bytes], ...]
    timestamp: int  # CreateTime, ms


@dataclass(frozen=True, slots=True)
class Got:
    """One record as consumed."""

    partition: int
    offset: int
    key: bytes | None
    value: bytes | None
    headers: tuple[tuple[str, bytes], ...]
    timestamp: int
    create_time: bool  # timestamp type is CreateTime


def make_records(n: int, partitions: int, base_ts: int, tag: str = "r") -> list[Rec]:
    """Deterministic records: record i goes to partition i % partitions; timestamps base_ts + i.
    Values are hex digests (compressible about 2:1); every 1000th record has an empty header value and every
    997th an empty value, to cover the edges."""
    out = []
    for i in range(n):
        digest = hashlib.blake2b(f"{tag}{i}".encode(), digest_size=32).hexdigest().encode()
        value = b"" if i % 997 == 996 else b"%s-%08d-" % (tag.encode(), i) + digest
        headers: tuple[tuple[str, bytes], ...] = (
            ("idx", b"%d" % i),
            ("bin", b"" if i % 1000 == 999 else bytes([i % 256, 0, 255]) + digest[:8]),
        )
        out.append(Rec(i % partitions, b"key-%08d" % i, value, headers, base_ts + i))
    return out


def by_partition(records: Iterable[Rec], partitions: int) -> list[list[Rec]]:
    out: list[list[Rec]] = [[] for _ in range(partitions)]
    for r in records:
        out[r.partition].append(r)
    return out


def assert_consumed_exactly(
    got: Sequence[Got], expected: Sequence[Sequence[Rec]], start_offsets: Sequence[int] | None = None
) -> None:
    """Per partition p: offsets start..start+len(expected[p])-1 in order, no gap, no duplicate, and each
    record byte-identical (key, value, headers, CreateTime timestamp) to what was produced."""
    per: list[list[Got]] = [[] for _ in expected]
    for g in got:
        per[g.partition].append(g)
    for p, (exp, seen) in enumerate(zip(expected, per, strict=True)):
        start = start_offsets[p] if start_offsets else 0
        offsets = [g.offset for g in seen]
        want = list(range(start, start + len(exp)))
        if offsets != want:
            first_bad = next((i for i, (a, b) in enumerate(zip(offsets, want, strict=False)) if a != b), min(len(offsets), len(want)))
            raise AssertionError(
                f"partition {p}: consumed {len(offsets)} offsets, expected {len(want)} ({start}..{start + len(exp) - 1});"
                f" first difference at position {first_bad}: got {offsets[first_bad:first_bad + 5]}"
                f" want {want[first_bad:first_bad + 5]}"
            )
        for g, r in zip(seen, exp, strict=True):
            if (g.key, g.value, g.headers, g.timestamp, g.create_time) != (r.key, r.value, r.headers, r.timestamp, True):
                raise AssertionError(
                    f"partition {p} offset {g.offset}: consumed\n  {g}\nbut produced\n  {r}"
                )


# ---- kafka-python ------------------------------------------------------------------------------------


def produce_kafka_python(bootstrap: str, topic: str, records: Sequence[Rec], codec: str, **config) -> None:
    from kafka import KafkaProducer

    producer = KafkaProducer(
        bootstrap_servers=bootstrap,
        compression_type=None if codec == "none" else codec,
        acks="all",
        linger_ms=20,
        batch_size=64 * 1024,
        max_request_size=4 * 1024 * 1024,
        request_timeout_ms=30000,
        **config,
    )
    try:
        futures = [
            producer.send(
                topic, key=r.key, value=r.value, headers=list(r.headers), partition=r.partition, timestamp_ms=r.timestamp
            )
            for r in records
        ]
        producer.flush(timeout=STALL_TIMEOUT)
        for f in futures:
            f.get(timeout=STALL_TIMEOUT)  # raises the delivery error, if any
    finally:
        producer.close(timeout=10)


def consume_kafka_python(bootstrap: str, topic: str, end_offsets: dict[int, int], start: dict[int, int] | None = None) -> list[Got]:
    from kafka import KafkaConsumer, TopicPartition

    consumer = KafkaConsumer(
        bootstrap_servers=bootstrap,
        enable_auto_commit=False,
        auto_offset_reset="none",
        max_partition_fetch_bytes=4 * 1024 * 1024,
        fetch_max_bytes=16 * 1024 * 1024,
        max_poll_records=10000,
        request_timeout_ms=30000,
    )
    got: list[Got] = []
    try:
        tps = [TopicPartition(topic, p) for p in end_offsets]
        consumer.assign(tps)
        for tp in tps:
            consumer.seek(tp, (start or {}).get(tp.partition, 0))
        remaining = {p for p, end in end_offsets.items() if end > (start or {}).get(p, 0)}
        last_progress = time.monotonic()
        while remaining:
            batch = consumer.poll(timeout_ms=1000)
            for tp, msgs in batch.items():
                for m in msgs:
                    got.append(
                        Got(tp.partition, m.offset, m.key, m.value, tuple(m.headers or ()), m.timestamp, m.timestamp_type == 0)
                    )
                    last_progress = time.monotonic()
            for p in list(remaining):
                if consumer.position(TopicPartition(topic, p)) >= end_offsets[p]:
                    remaining.discard(p)
            if time.monotonic() - last_progress > STALL_TIMEOUT:
                raise AssertionError(f"kafka-python consumer stalled; partitions not finished: {sorted(remaining)}")
    finally:
        consumer.close()
    return got


# ---- confluent-kafka ------------------------------------------------------------------------------------


def produce_confluent(bootstrap: str, topic: str, records: Sequence[Rec], codec: str, **config) -> None:
    from confluent_kafka import Producer

    conf = {
        "bootstrap.servers": bootstrap,
        "compression.type": codec,
        "acks": "all",
        "linger.ms": 20,
        "batch.size": 64 * 1024,
        "queue.buffering.max.messages": 500000,
        "queue.buffering.max.kbytes": 256 * 1024,
        "message.timeout.ms": int(STALL_TIMEOUT * 1000),
    }
    conf.update(config)
    producer = Producer(conf)
    errors: list[str] = []

    def on_delivery(err, msg) -> None:
        if err is not None:
            errors.append(f"{msg.topic()}[{msg.partition()}]: {err}")

    for r in records:
        while True:
            try:
                producer.produce(
                    topic, key=r.key, value=r.value, headers=list(r.headers), partition=r.partition,
                    timestamp=r.timestamp, on_delivery=on_delivery,
                )
                break
            except BufferError:
                producer.poll(0.05)
        producer.poll(0)
    left = producer.flush(STALL_TIMEOUT)
    assert left == 0, f"confluent-kafka: {left} messages not delivered"
    assert not errors, f"confluent-kafka delivery errors ({len(errors)}): {errors[:5]}"


def consume_confluent(bootstrap: str, topic: str, end_offsets: dict[int, int], start: dict[int, int] | None = None) -> list[Got]:
    from confluent_kafka import TIMESTAMP_CREATE_TIME, Consumer, KafkaException, TopicPartition

    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"kop-tests-{topic}",  # required by the client; no group API is used with assign()
            "enable.auto.commit": False,
            "enable.auto.offset.store": False,
            "auto.offset.reset": "error",
            "fetch.max.bytes": 16 * 1024 * 1024,
            "max.partition.fetch.bytes": 4 * 1024 * 1024,
        }
    )
    got: list[Got] = []
    try:
        consumer.assign([TopicPartition(topic, p, (start or {}).get(p, 0)) for p in end_offsets])
        remaining = {p for p, end in end_offsets.items() if end > (start or {}).get(p, 0)}
        last_progress = time.monotonic()
        while remaining:
            msgs = consumer.consume(num_messages=10000, timeout=1.0)
            for m in msgs:
                if m.error():
                    raise KafkaException(m.error())
                ts_type, ts = m.timestamp()
                got.append(
                    Got(m.partition(), m.offset(), m.key(), m.value(), tuple(m.headers() or ()), ts, ts_type == TIMESTAMP_CREATE_TIME)
                )
                if m.offset() + 1 >= end_offsets[m.partition()]:
                    remaining.discard(m.partition())
                last_progress = time.monotonic()
            if time.monotonic() - last_progress > STALL_TIMEOUT:
                raise AssertionError(f"confluent-kafka consumer stalled; partitions not finished: {sorted(remaining)}")
    finally:
        consumer.close()
    return got


# ---- aiokafka ------------------------------------------------------------------------------------


def produce_aiokafka(bootstrap: str, topic: str, records: Sequence[Rec], codec: str, **config) -> None:
    asyncio.run(_produce_aiokafka(bootstrap, topic, records, codec, config))


async def _produce_aiokafka(bootstrap: str, topic: str, records: Sequence[Rec], codec: str, config: dict) -> None:
    from aiokafka import AIOKafkaProducer

    producer = AIOKafkaProducer(
        bootstrap_servers=bootstrap,
        compression_type=None if codec == "none" else codec,
        acks="all",
        linger_ms=20,
        max_batch_size=64 * 1024,
        max_request_size=4 * 1024 * 1024,
        request_timeout_ms=30000,
        **config,
    )
    await producer.start()
    try:
        futures = []
        for r in records:
            futures.append(
                await producer.send(
                    topic, key=r.key, value=r.value, headers=list(r.headers), partition=r.partition, timestamp_ms=r.timestamp
                )
            )
        await asyncio.wait_for(asyncio.gather(*futures), STALL_TIMEOUT)  # raises the first delivery error
    finally:
        await producer.stop()


def consume_aiokafka(bootstrap: str, topic: str, end_offsets: dict[int, int], start: dict[int, int] | None = None) -> list[Got]:
    return asyncio.run(_consume_aiokafka(bootstrap, topic, end_offsets, start or {}))


async def _consume_aiokafka(bootstrap: str, topic: str, end_offsets: dict[int, int], start: dict[int, int]) -> list[Got]:
    from aiokafka import AIOKafkaConsumer, TopicPartition

    consumer = AIOKafkaConsumer(
        bootstrap_servers=bootstrap,
        enable_auto_commit=False,
        auto_offset_reset="none",
        max_partition_fetch_bytes=4 * 1024 * 1024,
        fetch_max_bytes=16 * 1024 * 1024,
        request_timeout_ms=30000,
    )
    await consumer.start()
    got: list[Got] = []
    try:
        tps = [TopicPartition(topic, p) for p in end_offsets]
        consumer.assign(tps)
        for tp in tps:
            consumer.seek(tp, start.get(tp.partition, 0))
        remaining = {p for p, end in end_offsets.items() if end > start.get(p, 0)}
        last_progress = time.monotonic()
        while remaining:
            batch = await consumer.getmany(timeout_ms=1000, max_records=10000)
            for tp, msgs in batch.items():
                for m in msgs:
                    got.append(
                        Got(
                            tp.partition, m.offset, m.key, m.value, tuple(m.headers or ()), m.timestamp,
                            m.timestamp_type == 0,  # CreateTime
                        )
                    )
                    last_progress = time.monotonic()
            for p in list(remaining):
                if await consumer.position(TopicPartition(topic, p)) >= end_offsets[p]:
                    remaining.discard(p)
            if time.monotonic() - last_progress > STALL_TIMEOUT:
                raise AssertionError(f"aiokafka consumer stalled; partitions not finished: {sorted(remaining)}")
    finally:
        await consumer.stop()
    return got


PRODUCE = {"kafka-python": produce_kafka_python, "confluent-kafka": produce_confluent, "aiokafka": produce_aiokafka}
CONSUME = {"kafka-python": consume_kafka_python, "confluent-kafka": consume_confluent, "aiokafka": consume_aiokafka}


# ---- admin -------------------------------------------------------------------------------------------------


def create_topic(bootstrap: str, topic: str, partitions: int = 1, config: dict[str, str] | None = None) -> None:
    """CreateTopics through confluent-kafka's AdminClient, then wait until Metadata shows every partition
    with a leader."""
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": bootstrap})
    fs = admin.create_topics(
        [NewTopic(topic, num_partitions=partitions, replication_factor=1, config=dict(config or {}))],
        operation_timeout=30,
    )
    fs[topic].result(60)
    wait_for_leaders(bootstrap, topic, partitions)


def wait_for_leaders(bootstrap: str, topic: str, partitions: int, timeout: float = 60) -> None:
    from confluent_kafka.admin import AdminClient

    admin = AdminClient({"bootstrap.servers": bootstrap})
    deadline = time.monotonic() + timeout
    while True:
        md = admin.list_topics(topic, timeout=10).topics.get(topic)
        if md is not None and md.error is None and len(md.partitions) == partitions and all(
            p.leader >= 0 for p in md.partitions.values()
        ):
            return
        if time.monotonic() > deadline:
            raise AssertionError(f"topic {topic}: partitions/leaders not visible in Metadata: {md}")
        time.sleep(0.1)


def end_offsets(bootstrap: str, topic: str, partitions: int) -> dict[int, int]:
    from kafka import KafkaConsumer, TopicPartition

    c = KafkaConsumer(bootstrap_servers=bootstrap)
    try:
        res = c.end_offsets([TopicPartition(topic, p) for p in range(partitions)])
        return {tp.partition: off for tp, off in res.items()}
    finally:
        c.close()


def send_one_or_error(conf: dict, topic: str, timeout: float = 60) -> object | None:
    """Produce one record with a confluent-kafka producer built from `conf`: None once it is acknowledged, else
    the first error the client reported. librdkafka hands a broker's SASL refusal to error_cb as _AUTHENTICATION
    at once (kafka-python only times out bootstrapping, after 30 s or more, which would not show why); `timeout`
    guards against hangs and is not a timing assertion."""
    import confluent_kafka as ck

    errors: list = []
    acks: list = []
    p = ck.Producer({**conf, "error_cb": errors.append, "reconnect.backoff.max.ms": 1000})
    p.produce(topic, b"x", on_delivery=lambda err, _msg: acks.append(err))
    deadline = time.monotonic() + timeout
    while not errors and not acks and time.monotonic() < deadline:
        p.poll(0.2)
    p.purge()
    p.flush(0)
    if acks and acks[0] is None:
        return None
    if errors or acks:
        return errors[0] if errors else acks[0]
    raise AssertionError(f"neither an acknowledgement nor an error within {timeout}s")


def partition_records(bootstrap: str, topic: str,
                      partitions: Iterable[int]) -> dict[int, list[tuple[bytes | None, bytes | None]]]:
    """The (key, value) of every record (control records are not records) from each partition's log start to its end as
    of the call, read_uncommitted: what kafka-console-consumer prints of that partition. A test that reads an
    internal topic with a formatter then ends the tool's run with `--max-messages` (exact: the records are
    there) instead of an idle `--timeout-ms` (a fixed wait after the last record). The end is librdkafka's
    partition EOF (the high watermark, past any trailing control record)."""
    from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, TopicPartition

    wanted = list(partitions)
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "partition-records", "enable.auto.commit": False,
                  "enable.partition.eof": True})
    records: dict[int, list[tuple[bytes | None, bytes | None]]] = {p: [] for p in wanted}
    try:
        c.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in wanted])
        open_ = set(wanted)
        deadline = time.monotonic() + STALL_TIMEOUT
        while open_:
            assert time.monotonic() < deadline, f"{topic} {sorted(open_)}: no end within {STALL_TIMEOUT}s"
            msg = c.poll(1.0)
            if msg is None:
                continue
            if msg.error() is not None:
                assert msg.error().code() == KafkaError._PARTITION_EOF, msg.error()
                open_.discard(msg.partition())
            elif msg.partition() in open_:
                records[msg.partition()].append((msg.key(), msg.value()))
        return records
    finally:
        c.close()
