"""The partition's producer state with transactions (kop/offset/producer_state.py), sans-IO: the last
stable offset, the aborted-transaction index, epochs and markers, snapshots."""

import struct

import pytest

from kop.offset.producer_state import (
    ABORT,
    COMMIT,
    AbortedTxn,
    ProducerStateTable,
    SequenceError,
    control_marker,
    control_type,
)
from kop.protocol.records import build_batch


def txn_batch(pid: int, epoch: int = 0, seq: int = 0, n: int = 1) -> bytes:
    return build_batch([(b"k", b"v")] * n, producer_id=pid, producer_epoch=epoch, base_sequence=seq,
                       is_transactional=True)


def marker(pid: int, commit: bool, epoch: int = 0, coordinator_epoch: int = 0) -> bytes:
    return build_batch([(struct.pack(">hh", 0, COMMIT if commit else ABORT), struct.pack(">hi", 0, coordinator_epoch))],
                       producer_id=pid, producer_epoch=epoch, is_transactional=True, is_control=True)


def test_control_type_reads_the_marker_key():
    assert control_type(marker(1, True)) == COMMIT
    assert control_type(marker(1, False)) == ABORT
    assert control_marker(marker(1, False, coordinator_epoch=7)) == (ABORT, 7)
    bad = bytearray(build_batch([(b"\x00", b"")], is_control=True))
    with pytest.raises(ValueError):
        control_type(bad)


def test_lso_is_held_by_the_oldest_open_transaction_until_its_marker_is_durable():
    t = ProducerStateTable()
    assert t.last_stable_offset(10, 0) == 10
    t.on_issue(10, 12, txn_batch(1, n=3))
    t.on_issue(13, 13, txn_batch(2))
    t.on_issue(14, 15, txn_batch(1, seq=3, n=2))  # a later batch of an open transaction: no change
    assert t.ongoing == {1: 10, 2: 13}
    assert t.last_stable_offset(16, 0) == 10
    t.on_issue(16, 16, marker(1, commit=True))
    assert t.last_stable_offset(16, 0) == 10  # the marker is not durable yet
    t.durable(16)
    assert t.last_stable_offset(17, 0) == 13
    t.on_issue(17, 17, marker(2, commit=False))
    t.durable(17)
    assert t.last_stable_offset(18, 0) == 18
    assert t.aborted == [AbortedTxn(2, 13, 17, 18)]


def test_lso_never_below_log_start_nor_above_the_high_watermark():
    t = ProducerStateTable()
    t.on_issue(5, 5, txn_batch(1))
    assert t.last_stable_offset(4, 0) == 4  # (cannot happen: the batch is not durable) bounded anyway
    assert t.last_stable_offset(9, 7) == 7


def test_aborted_index_answers_overlapping_ranges_sorted_by_first_offset():
    t = ProducerStateTable()
    t.on_issue(0, 0, txn_batch(1))
    t.on_issue(1, 1, txn_batch(2))
    t.on_issue(2, 2, marker(2, commit=False))  # aborted (2: 1..2); 1 still open -> its LSO is 0
    t.on_issue(3, 3, marker(1, commit=False))  # aborted (1: 0..3)
    t.on_issue(4, 4, txn_batch(3))
    t.on_issue(5, 5, marker(3, commit=True))
    t.durable(5)
    assert t.aborted == [AbortedTxn(2, 1, 2, 0), AbortedTxn(1, 0, 3, 4)]
    found = t.aborted_between(0, 6)
    assert [(a.producer_id, a.first_offset) for a in found] == [(1, 0), (2, 1)]
    assert [a.producer_id for a in t.aborted_between(3, 6)] == [1]  # began before the fetch offset
    assert t.aborted_between(4, 6) == []
    assert [a.producer_id for a in t.aborted_between(0, 1)] == [1]  # upper bound excludes 2's first offset
    assert t.is_aborted(1, 0) and t.is_aborted(2, 1) and not t.is_aborted(3, 4) and not t.is_aborted(2, 0)
    t.prune(3)
    assert [a.producer_id for a in t.aborted] == [1]
    assert not t.is_aborted(2, 1)


def test_a_marker_without_data_indexes_nothing():
    t = ProducerStateTable()
    t.begin_marker(9, 0, 0)
    t.on_issue(0, 0, marker(9, commit=False))
    t.durable(0)
    assert t.aborted == [] and t.last_stable_offset(1, 0) == 1


def test_failed_marker_append_restores_the_open_transaction():
    t = ProducerStateTable()
    t.on_issue(0, 0, txn_batch(1))
    m = marker(1, commit=False)
    t.on_issue(1, 1, m)
    t.unissue(1, m)
    assert t.ongoing == {1: 0} and t.aborted == [] and t.completing == {}
    t.unissue(0, txn_batch(1))
    assert t.ongoing == {}


def test_produce_checks_for_transactions():
    t = ProducerStateTable()
    assert t.needs_verification(1, 0)
    assert t.check(1, 0, 0, 2, transactional=True) is None
    t.record(1, 0, 0, 2, 0, transactional=True)
    assert not t.needs_verification(1, 0)
    with pytest.raises(SequenceError) as e:  # non-transactional write inside the transaction
        t.check(1, 0, 2, 1, transactional=False)
    assert e.value.error == "INVALID_TXN_STATE"
    t.begin_marker(1, 0, 0)
    assert t.needs_verification(1, 0)  # the next transaction is verified again
    assert t.check(1, 0, 2, 1, transactional=False) is None
    with pytest.raises(SequenceError) as e:
        t.check(-1, -1, -1, 1, transactional=True)
    assert e.value.error == "INVALID_RECORD"


def test_marker_epoch_and_coordinator_epoch_checks():
    t = ProducerStateTable()
    t.record(1, 5, 0, 1, 0, transactional=True)
    with pytest.raises(SequenceError) as e:
        t.begin_marker(1, 4, 0)
    assert e.value.error == "INVALID_PRODUCER_EPOCH" and e.value.code == 47
    t.begin_marker(1, 5, 3)
    with pytest.raises(SequenceError) as e:
        t.begin_marker(1, 5, 2)
    assert e.value.error == "TRANSACTION_COORDINATOR_FENCED" and e.value.code == 52
    t.begin_marker(1, 6, 3)  # a bumped epoch (the coordinator fenced the producer): accepted
    rebuilt = ProducerStateTable()  # replay learns the coordinator epoch from the marker's value
    rebuilt.replay(0, marker(1, False, epoch=6, coordinator_epoch=3))
    with pytest.raises(SequenceError) as e:
        rebuilt.begin_marker(1, 6, 2)
    assert e.value.error == "TRANSACTION_COORDINATOR_FENCED"
    with pytest.raises(SequenceError) as e:
        t.check(1, 5, 1, 1, transactional=True)
    assert e.value.error == "INVALID_PRODUCER_EPOCH"


def test_snapshot_round_trip_and_replay_rebuild_the_same_state():
    log = [txn_batch(1, n=2), txn_batch(2), marker(2, False), build_batch([(b"a", b"b")], producer_id=3,
           producer_epoch=0, base_sequence=0), txn_batch(1, seq=2), marker(1, True), txn_batch(4)]
    offsets = []
    off = 0
    for b in log:
        n = struct.unpack_from(">i", b, 23)[0] + 1
        offsets.append(off)
        off += n
    full = ProducerStateTable()
    for o, b in zip(offsets, log, strict=True):
        full.replay(o, b)
    full.durable(off - 1)
    # snapshot after the first four entries, replay the rest
    part = ProducerStateTable()
    for o, b in zip(offsets[:4], log[:4], strict=True):
        part.replay(o, b)
    part.durable(offsets[4] - 1)
    snap = part.to_snapshot(offsets[4])
    rebuilt = ProducerStateTable.from_snapshot(snap)
    for o, b in zip(offsets[4:], log[4:], strict=True):
        rebuilt.replay(o, b)
    rebuilt.durable(off - 1)
    assert rebuilt.ongoing == full.ongoing == {4: offsets[6]}
    assert rebuilt.aborted == full.aborted == [AbortedTxn(2, 2, 3, 0)]
    for pid in (1, 2, 3, 4):
        a, b = rebuilt.producers[pid], full.producers[pid]
        assert (a.epoch, a.last_seq, a.in_txn) == (b.epoch, b.last_seq, b.in_txn)
    assert rebuilt.producers[4].in_txn and not rebuilt.producers[1].in_txn


def test_snapshot_keeps_where_a_producer_stands_when_its_remembered_batches_are_in_flight():
    """A snapshot leaves out the batches still in flight; when that is all five remembered, the floor
    sequence says where the producer stands, so a rebuild after they failed takes the client's resend."""
    import asyncio

    loop = asyncio.new_event_loop()
    try:
        t = ProducerStateTable()
        for seq in range(6):
            t.record(1, 0, seq, 1, seq)
        for seq in range(6, 11):
            t.record(1, 0, seq, 1, loop.create_future())
        snap = t.to_snapshot(6)
        rebuilt = ProducerStateTable.from_snapshot(snap)
        assert not rebuilt.producers[1].batches
        assert rebuilt.check(1, 0, 6, 1) is None
        with pytest.raises(SequenceError):
            rebuilt.check(1, 0, 0, 1)
    finally:
        loop.close()


def test_a_version_1_snapshot_is_still_read():
    snap = {"v": 1, "offset": 3, "producers": [[1, 0, -1, 5, 0, 10, [[0, 2, 0]]]], "ongoing": [], "aborted": [],
            "dropped_aborted": 0}
    t = ProducerStateTable.from_snapshot(snap)  # type: ignore[arg-type]
    assert t.producers[1].last_seq == 2 and t.producers[1].floor_seq == -1
    assert t.check(1, 0, 3, 1) is None


def test_snapshot_counts_a_transaction_whose_marker_is_in_flight_as_open():
    t = ProducerStateTable()
    t.on_issue(0, 0, txn_batch(1))
    t.on_issue(1, 1, marker(1, False))  # issued, not durable
    snap = t.to_snapshot(1)  # the durable end is 1: the marker is past it
    assert snap["ongoing"] == [[1, 0]] and snap["aborted"] == []
    rebuilt = ProducerStateTable.from_snapshot(snap)
    rebuilt.replay(1, marker(1, False))
    assert rebuilt.aborted == [AbortedTxn(1, 0, 1, 2)]


def test_expiration_keeps_producers_with_open_transactions():
    t = ProducerStateTable()
    t.record(1, 0, 0, 1, 0, transactional=True)
    t.record(2, 0, 0, 1, 1)
    t.producers[1].last_seen_ms = t.producers[2].last_seen_ms = 0
    t.expire(10)
    assert 1 in t.producers and 2 not in t.producers


def test_snapshot_is_bounded():
    """Open transactions always kept, then the most recent producers; the newest aborted transactions."""
    t = ProducerStateTable()
    for pid in range(10):
        t.record(pid, 0, 0, 1, pid, transactional=(pid == 0))
        t.producers[pid].last_seen_ms = 1000 + pid
    t.on_issue(0, 0, txn_batch(0))
    for i in range(5):
        t.on_issue(10 + 2 * i, 10 + 2 * i, txn_batch(100 + i))
        t.on_issue(11 + 2 * i, 11 + 2 * i, marker(100 + i, commit=False))
    snap = t.to_snapshot(100, max_producers=3, max_aborted=2)
    assert [row[0] for row in snap["producers"]] == [0, 9, 8]
    assert [row[0] for row in snap["aborted"]] == [103, 104] and snap["dropped_aborted"] == 3
