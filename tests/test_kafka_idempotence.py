"""Idempotent-producer sequence rules (Kafka's): duplicates answered with the original offsets, gaps and
stale epochs refused with Kafka's error codes."""

import asyncio

import pytest

from kop.kafka.idempotence import ProducerStateTable, SequenceError


def test_first_batch_must_start_at_zero():
    t = ProducerStateTable()
    with pytest.raises(SequenceError) as e:
        t.check(7, 0, 5, 1)
    assert e.value.error == "UNKNOWN_PRODUCER_ID"
    assert t.check(7, 0, 0, 3) is None


def test_duplicate_of_any_of_last_five_is_recognised():
    t = ProducerStateTable()
    seq = 0
    for i in range(6):
        assert t.check(1, 0, seq, 2) is None
        t.record(1, 0, seq, 2, 100 + 2 * i)
        seq += 2
    # batches 1..5 are remembered (the first one fell out of the window)
    dup = t.check(1, 0, 2, 2)
    assert dup is not None and dup.base_offset == 102
    with pytest.raises(SequenceError) as e:
        t.check(1, 0, 0, 2)
    assert e.value.error == "OUT_OF_ORDER_SEQUENCE_NUMBER"


def test_gap_is_out_of_order():
    t = ProducerStateTable()
    t.record(1, 0, 0, 5, 0)
    with pytest.raises(SequenceError) as e:
        t.check(1, 0, 6, 1)
    assert e.value.error == "OUT_OF_ORDER_SEQUENCE_NUMBER"
    assert t.check(1, 0, 5, 1) is None


def test_epochs():
    t = ProducerStateTable()
    t.record(1, 3, 0, 1, 0)
    with pytest.raises(SequenceError) as e:
        t.check(1, 2, 1, 1)
    assert e.value.error == "INVALID_PRODUCER_EPOCH"
    with pytest.raises(SequenceError):
        t.check(1, 4, 1, 1)  # a new epoch must restart at 0
    assert t.check(1, 4, 0, 1) is None


def test_sequence_wraps_at_int32_max():
    t = ProducerStateTable()
    t.record(1, 0, 0, 1, 0)
    t.producers[1].batches[-1].last_seq = 2**31 - 1
    assert t.check(1, 0, 0, 1) is None


def test_non_idempotent_batches_are_not_checked():
    t = ProducerStateTable()
    assert t.check(-1, -1, -1, 10) is None
    assert t.record(-1, -1, -1, 10, 0) is None


def test_failed_append_is_forgotten_so_the_retry_is_not_a_duplicate():
    t = ProducerStateTable()
    rec = t.record(1, 0, 0, 1, 0)
    t.forget(1, rec)
    assert t.check(1, 0, 0, 1) is None


async def test_when_every_remembered_batch_fails_the_producer_stands_after_the_last_durable_one():
    """Five batches in flight push the durable ones out of the window; all five fail (a stopped ledger fails
    every later add with the first): the next sequence is the one after the newest durable batch pushed out."""
    loop = asyncio.get_running_loop()
    t = ProducerStateTable()
    for seq in range(8):
        t.record(1, 0, seq, 1, seq)
    in_flight = [t.record(1, 0, seq, 1, loop.create_future()) for seq in range(8, 13)]
    assert t.producers[1].floor_seq == 7
    for rec in in_flight:
        t.forget(1, rec)
    assert t.producers[1].last_seq == 7
    with pytest.raises(SequenceError) as e:
        t.check(1, 0, 9, 1)
    assert e.value.error == "OUT_OF_ORDER_SEQUENCE_NUMBER"
    assert t.check(1, 0, 8, 1) is None


async def test_a_batch_in_flight_is_never_pushed_out():
    """A client sending more than five batches at once (or one sent before the failure of those before it was
    known): the oldest in flight stays remembered until it is durable or forgotten, so when it fails the
    producer stands before it, not at a floor above it."""
    loop = asyncio.get_running_loop()
    t = ProducerStateTable()
    t.record(1, 0, 0, 1, 0)
    in_flight = [t.record(1, 0, seq, 1, loop.create_future()) for seq in range(1, 8)]
    assert [b.first_seq for b in t.producers[1].batches] == list(range(1, 8))  # 0 is durable: pushed out
    assert t.producers[1].floor_seq == 0
    t.settled(1, in_flight[0], 1)  # durable now: pushed out too, the others stay while in flight
    assert [b.first_seq for b in t.producers[1].batches] == list(range(2, 8)) and t.producers[1].floor_seq == 1
    for rec in in_flight[1:]:
        t.forget(1, rec)
    assert t.check(1, 0, 2, 1) is None


def test_a_new_epoch_forgets_the_floor_of_the_old_one():
    t = ProducerStateTable()
    for seq in range(6):
        t.record(1, 0, seq, 1, seq)
    rec = t.record(1, 1, 0, 1, -1)
    t.forget(1, rec)
    assert t.check(1, 1, 0, 1) is None


async def test_producer_ids_idle_for_the_expiration_are_forgotten(tmp_path):
    """producerIdExpirationMs (Kafka's producer.id.expiration.ms): the seam's producer tables forget producers that
    wrote nothing for that long, so their next non-zero sequence gets UNKNOWN_PRODUCER_ID; others are kept."""
    from kop.offset import open_embedded_storage
    from kop.topics.partition import ProducerTables

    tables = ProducerTables()
    storage = await open_embedded_storage(tmp_path)
    try:
        plog = await storage.open_log("t/ns/persistent/p-partition-0")
        table = await tables.of(plog)
        table.record(1, 0, 0, 3, 0)
        table.record(2, 0, 0, 3, 3)
        table.producers[1].last_seen_ms = 10_000
        table.producers[2].last_seen_ms = 10_500
        tables.expire(11_000 - 1000)  # producer 1 idle for exactly the limit: kept
        assert table.check(1, 0, 3, 1) is None
        tables.expire(11_001 - 1000)
        with pytest.raises(SequenceError) as e:
            table.check(1, 0, 3, 1)
        assert e.value.error == "UNKNOWN_PRODUCER_ID"
        assert table.check(2, 0, 3, 1) is None
    finally:
        await storage.close()
