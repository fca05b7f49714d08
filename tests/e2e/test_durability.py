"""Acceptance (b): SIGKILL durability.

An acks=all confluent-kafka producer writes continuously; its delivery callbacks record the offset of every
acknowledged record. Mid-run the broker gets SIGKILL (no shutdown code runs), is restarted on the same data,
and the producer (still running, retrying what was in flight) is flushed. Then:

* every acknowledged record is readable at the offset it was acknowledged with, byte-identical;
* each partition's log is 0..end-1 with no gap;
* a new producer's records continue each partition's sequence right at the old end offset, no gap;
* `idempotent`: additionally no record is stored twice (the retried in-flight batches were deduplicated,
  so the broker recovered its producer state after the crash).
"""

from __future__ import annotations

import time

import pytest

from tests.support.clients import STALL_TIMEOUT, consume_confluent, create_topic, end_offsets

PARTITIONS = 2
KILL_AFTER_ACKS = 20_000  # acknowledged records before the SIGKILL
PRODUCED_AFTER_KILL = 5_000  # records handed to the producer while the broker is down
PHASE2 = 2_000
MAX_UNACKED = 5_000  # produced but not yet acknowledged, before the kill


def _producer(bootstrap: str, idempotent: bool):
    from confluent_kafka import Producer

    return Producer(
        {
            "bootstrap.servers": bootstrap,
            "acks": "all",
            "enable.idempotence": idempotent,
            "linger.ms": 2,
            "batch.size": 16384,
            "message.timeout.ms": 300000,
            "retry.backoff.ms": 100,
            "reconnect.backoff.ms": 100,
            "reconnect.backoff.max.ms": 1000,
        }
    )


@pytest.mark.slow
@pytest.mark.parametrize("mode", ["plain", "idempotent"])
def test_sigkill_keeps_every_acknowledged_record(target, mode: str) -> None:
    idempotent = mode == "idempotent"
    broker = target.dedicated_broker()
    topic = target.topic("dur")
    create_topic(broker.bootstrap, topic, PARTITIONS)

    acked: dict[tuple[int, int], bytes] = {}  # (partition, offset) -> value
    failed: list[str] = []

    def on_delivery(err, msg) -> None:
        if err is None:
            key = (msg.partition(), msg.offset())
            assert key not in acked, f"offset {key} acknowledged twice"
            acked[key] = msg.value()
        else:
            failed.append(f"{msg.value()!r}: {err}")

    producer = _producer(broker.bootstrap, idempotent)
    i = 0
    killed_at = None
    deadline = time.monotonic() + STALL_TIMEOUT
    while killed_at is None or i < killed_at + PRODUCED_AFTER_KILL:
        if killed_at is None and i - len(acked) - len(failed) >= MAX_UNACKED:
            producer.poll(0.005)  # flow control: keep the run going until the kill, not all queued up front
            continue
        try:
            producer.produce(topic, value=b"phase1-%08d" % i, key=b"%d" % i, partition=i % PARTITIONS, on_delivery=on_delivery)
            i += 1
        except BufferError:
            producer.poll(0.01)
        producer.poll(0)
        if killed_at is None and len(acked) >= KILL_AFTER_ACKS:
            broker.kill()
            killed_at = i
        if time.monotonic() > deadline:
            raise AssertionError(f"only {len(acked)} acknowledgements after {STALL_TIMEOUT}s (produced {i})")
    acked_before_restart = len(acked)
    assert acked_before_restart >= KILL_AFTER_ACKS

    broker.restart()
    left = producer.flush(STALL_TIMEOUT)
    assert left == 0, f"{left} records still queued {STALL_TIMEOUT}s after the restart"
    # Records that were in flight may fail (they were never acknowledged); that is allowed, losing acked ones is not.

    ends = end_offsets(broker.bootstrap, topic, PARTITIONS)
    max_acked = {p: max((o for (q, o) in acked if q == p), default=-1) for p in range(PARTITIONS)}
    for p in range(PARTITIONS):
        assert ends[p] >= max_acked[p] + 1, f"partition {p}: end offset {ends[p]} < highest acknowledged {max_acked[p]} + 1"

    # Phase 2: a fresh producer continues the sequence.
    acked2: dict[tuple[int, int], bytes] = {}
    errors2: list[str] = []

    def on_delivery2(err, msg) -> None:
        if err is None:
            acked2[(msg.partition(), msg.offset())] = msg.value()
        else:
            errors2.append(str(err))

    p2 = _producer(broker.bootstrap, idempotent)
    for j in range(PHASE2):
        p2.produce(topic, value=b"phase2-%08d" % j, partition=j % PARTITIONS, on_delivery=on_delivery2)
        p2.poll(0)
    assert p2.flush(STALL_TIMEOUT) == 0
    assert not errors2, f"phase-2 delivery errors: {errors2[:5]}"
    for p in range(PARTITIONS):
        offsets = sorted(o for (q, o) in acked2 if q == p)
        assert offsets == list(range(ends[p], ends[p] + PHASE2 // PARTITIONS)), (
            f"partition {p}: phase-2 offsets {offsets[:3]}..{offsets[-3:]} do not continue at {ends[p]}"
        )

    final_ends = end_offsets(broker.bootstrap, topic, PARTITIONS)
    assert final_ends == {p: ends[p] + PHASE2 // PARTITIONS for p in range(PARTITIONS)}

    got = consume_confluent(broker.bootstrap, topic, final_ends)
    log: dict[int, list[bytes]] = {p: [] for p in range(PARTITIONS)}
    for g in got:
        assert g.offset == len(log[g.partition]), f"partition {g.partition}: gap or reorder at offset {g.offset}"
        log[g.partition].append(g.value)
    assert {p: len(v) for p, v in log.items()} == final_ends

    lost = [(k, v) for k, v in {**acked, **acked2}.items() if log[k[0]][k[1]] != v]
    assert not lost, (
        f"{len(lost)} acknowledged records not at their acknowledged offset "
        f"(acked {len(acked)} in phase 1, {acked_before_restart} before the restart); first: "
        + ", ".join(f"{k}: want {v!r} got {log[k[0]][k[1]]!r}" for k, v in lost[:5])
    )

    if idempotent:
        seen: dict[bytes, tuple[int, int]] = {}
        dups = []
        for p, values in log.items():
            for off, v in enumerate(values):
                if v in seen:
                    dups.append((v, seen[v], (p, off)))
                seen[v] = (p, off)
        assert not dups, f"idempotent producer: {len(dups)} records stored twice, e.g. {dups[:5]}"
