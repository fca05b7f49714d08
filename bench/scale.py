"""Scale scenarios, run the same way against each broker; each returns a dict of metrics (report.METRICS).

* scale-offset-search: topics of 10^3 ... 10^7 records of 100 B (one partition each, written with
  kafka-producer-perf-test, acks=1, batch.size=64 KiB - about 600 records per batch, so 10^7 records are
  ~16 000 batches, i.e. ledger entries on our side); then, for each topic, N Fetch requests at random offsets
  (the same seeded offsets on both brokers), each on a fresh connection so no cursor or session cache can
  answer: the offset -> entry search runs every time. The time is from the Fetch being written to the last
  byte of its answer (partition_max_bytes=1: the broker returns just the batch holding the offset). Each
  answer is checked to hold the asked offset.
* scale-1000-connections: 1 000 asyncio sockets opened at once, each doing ApiVersions + Metadata + Produce
  (one 10-record batch, acks=1) while all stay open; the wall time until the last is served, the p99 per
  connection, the errors (exceptions or error codes), and the records in the log afterwards.
* scale-10k-partitions: 100 topics x 100 partitions created with CreateTopics calls of 20 topics each (Kafka's
  controller refuses one operation of more than 10 000 records, so neither one 10 000-partition topic nor all
  100 topics in one call is possible there; the same calls go to both brokers), timed until Metadata
  shows every partition with a leader; Metadata for all topics (size and time, median of 10) and for one
  topic (median of 50); then 5 records into each partition of 20 of the topics (2 000 partitions), and a
  confluent-kafka consumer assigned all 2 000 partitions reads the 10 000 records: the time to read all.
"""

from __future__ import annotations

import asyncio
import random
import statistics
import time

from bench.tools import BenchError, run_producer
from bench.wire import (
    Conn,
    fetch_request,
    first_batch_base_offset,
    last_offset_in,
    metadata_request,
    produce_request,
    record_batch,
)


def _ms(seconds: list[float]) -> float:
    return statistics.median(seconds) * 1000


# ---- random-offset fetch -----------------------------------------------------------------------------------------

def build_search_topics(tools, bootstrap: str, prefix: str, sizes: list[int]) -> float:
    """Write the topics (one per size); returns the seconds it took (reported, not compared)."""
    t0 = time.monotonic()
    for n in sizes:
        run_producer(tools, bootstrap, f"{prefix}-{n}", n, 100, "1", "none", 1, linger_ms=20, batch_size=65536)
    return time.monotonic() - t0


async def _random_fetches(bootstrap: str, topic: str, n: int, samples: int, seed: int) -> list[float]:
    rng = random.Random(seed)
    times = []
    for _ in range(samples):
        off = rng.randrange(n)
        async with await Conn.open(bootstrap) as c:
            await c.negotiate()
            resp, _, dt = await c.timed(fetch_request(topic, 0, off, 1), cap=12)
            (t,) = resp.responses
            (p,) = t.partitions
            base, last = first_batch_base_offset(p.records), last_offset_in(p.records)
            if p.error_code != 0 or base is None or last is None or not base <= off <= last:
                raise BenchError(f"{bootstrap} {topic}: Fetch at {off} answered error {p.error_code}, "
                                 f"batch {base}..{last}")
            times.append(dt)
    return times


def offset_search(bootstrap: str, prefix: str, sizes: list[int], samples: int, seed: int = 5) -> dict[str, float]:
    out = {}
    for n in sizes:
        times = asyncio.run(_random_fetches(bootstrap, f"{prefix}-{n}", n, samples, seed + n))
        out[f"search_ms_{n}"] = _ms(times)
    return out


# ---- 1 000 connections --------------------------------------------------------------------------------------------

async def _connections(bootstrap: str, topic: str, count: int, records_each: int) -> dict[str, float]:
    batch = record_batch(records_each, 100)
    start = asyncio.Event()
    errors: list[str] = []
    durations: list[float] = []

    async def one(i: int) -> Conn | None:
        await start.wait()
        t0 = time.perf_counter()
        try:
            c = await Conn.open(bootstrap, timeout=120)
            await c.negotiate()
            md, _ = await c.call(metadata_request([topic]), cap=12)
            if md.topics[0].error_code != 0:
                errors.append(f"Metadata error {md.topics[0].error_code}")
            resp, _ = await c.call(produce_request(topic, 0, batch, acks=1), cap=9)
            code = resp.responses[0].partition_responses[0].error_code
            if code != 0:
                errors.append(f"Produce error {code}")
            durations.append(time.perf_counter() - t0)
            return c
        except (TimeoutError, OSError, asyncio.IncompleteReadError, ConnectionError) as e:
            errors.append(repr(e)[:120])
            return None

    tasks = [asyncio.create_task(one(i)) for i in range(count)]
    await asyncio.sleep(0)
    t0 = time.perf_counter()
    start.set()
    conns = await asyncio.gather(*tasks)
    wall = time.perf_counter() - t0
    await asyncio.gather(*(c.close() for c in conns if c is not None))
    durations.sort()
    p99 = durations[min(len(durations) - 1, int(len(durations) * 0.99))] if durations else float("nan")
    return {"connections": float(count), "conn_s": wall, "conn_p99_ms": p99 * 1000, "conn_errors": float(len(errors)),
            "_first_errors": errors[:5]}


def connections(bootstrap: str, topic: str, count: int = 1000, records_each: int = 10) -> dict[str, float]:
    from tests.support.clients import create_topic, end_offsets

    create_topic(bootstrap, topic, 1)
    res = asyncio.run(_connections(bootstrap, topic, count, records_each))
    first = res.pop("_first_errors")
    if first:
        print(f"  {bootstrap}: {res['conn_errors']:.0f} connection errors, e.g. {first}", flush=True)
    stored = end_offsets(bootstrap, topic, 1)[0]
    expected = (count - int(res["conn_errors"])) * records_each
    if stored < expected:
        raise BenchError(f"{bootstrap}: {stored} records in {topic} after {expected} acknowledged")
    return res


# ---- 10 000 partitions ---------------------------------------------------------------------------------------------

def _wait_all_leaders(bootstrap: str, topics: list[str], partitions: int, timeout: float) -> None:
    from confluent_kafka.admin import AdminClient

    admin = AdminClient({"bootstrap.servers": bootstrap})
    deadline = time.monotonic() + timeout
    want = set(topics)
    while True:
        md = admin.list_topics(timeout=60)
        ok = {t for t in want if t in md.topics and md.topics[t].error is None
              and len(md.topics[t].partitions) == partitions
              and all(p.leader >= 0 for p in md.topics[t].partitions.values())}
        if ok == want:
            return
        if time.monotonic() > deadline:
            raise BenchError(f"{bootstrap}: {len(want - ok)} of {len(want)} topics without all leaders after {timeout}s")
        time.sleep(0.5)


async def _metadata_times(bootstrap: str, one_topic: str, all_n: int, one_n: int) -> tuple[list[float], int, list[float]]:
    async with await Conn.open(bootstrap) as c:
        await c.negotiate()
        await c.call(metadata_request(None), cap=12)  # warm: the first answer may build caches
        all_t, size = [], 0
        for _ in range(all_n):
            _, size, dt = await c.timed(metadata_request(None), cap=12)
            all_t.append(dt)
        one_t = []
        for _ in range(one_n):
            _, _, dt = await c.timed(metadata_request([one_topic]), cap=12)
            one_t.append(dt)
        return all_t, size, one_t


CREATE_CHUNK = 2000


def many_partitions(bootstrap: str, prefix: str, topics: int = 100, partitions: int = 100,
                    read_topics: int = 20, records_each: int = 5, timeout: float = 900) -> dict[str, float]:
    from confluent_kafka import Consumer, Producer, TopicPartition
    from confluent_kafka.admin import AdminClient, NewTopic

    names = [f"{prefix}-{i:03d}" for i in range(topics)]
    admin = AdminClient({"bootstrap.servers": bootstrap})
    t0 = time.monotonic()
    # CreateTopics in calls of at most CREATE_CHUNK partitions: Kafka's controller refuses one operation of more
    # than 10 000 records (POLICY_VIOLATION "excessively large batch operation"; a topic is 1 + its partitions).
    per_call = max(1, CREATE_CHUNK // partitions)
    for i in range(0, len(names), per_call):
        fs = admin.create_topics([NewTopic(t, num_partitions=partitions, replication_factor=1)
                                  for t in names[i:i + per_call]],
                                 operation_timeout=timeout, request_timeout=timeout)
        for f in fs.values():
            f.result(timeout)
    _wait_all_leaders(bootstrap, names, partitions, timeout)
    create_s = time.monotonic() - t0

    all_t, size, one_t = asyncio.run(_metadata_times(bootstrap, names[0], 10, 50))

    read = names[:read_topics]
    p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 20, "acks": "1"})
    for t in read:
        for part in range(partitions):
            for _i in range(records_each):
                p.produce(t, value=b"v" * 100, partition=part)
            p.poll(0)
    if p.flush(120) != 0:
        raise BenchError(f"{bootstrap}: records not delivered for the many-partition fetch")
    want = len(read) * partitions * records_each
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": f"{prefix}-reader", "enable.auto.commit": False,
                  "fetch.wait.max.ms": 100})
    try:
        t1 = time.monotonic()
        c.assign([TopicPartition(t, part, 0) for t in read for part in range(partitions)])
        got = 0
        while got < want:
            if time.monotonic() - t1 > timeout:
                raise BenchError(f"{bootstrap}: read {got} of {want} records from {len(read) * partitions} partitions")
            for m in c.consume(min(10000, want - got), timeout=1.0):
                if m.error() is None:
                    got += 1
        fetch_s = time.monotonic() - t1
    finally:
        c.close()
    try:  # the partitions must not weigh on anything that runs after (best effort, not timed)
        for f in admin.delete_topics(names, operation_timeout=120).values():
            f.result(180)
    except Exception as e:  # noqa: BLE001 - cleanup only
        print(f"  {bootstrap}: deleting the 10k-partition topics failed: {e!r}", flush=True)
    return {"create_s": create_s, "partitions": float(topics * partitions), "md_all_ms": _ms(all_t), "md_all_bytes": float(size), "md_one_ms": _ms(one_t),
            "fetch_many_s": fetch_s, "fetch_many_partitions": float(len(read) * partitions)}
