"""The share-partition state machine (kop/coordinator/share/partition.py), sans-IO with a fake clock: acquisition,
acknowledgement types, lock time-outs, the delivery-count limit and the SPSO/SPEO window."""

from __future__ import annotations

from kop.coordinator.share.partition import AckType, Acquired, RecordState, SharePartition
from kop.protocol.errors import ErrorCode

BATCHES = [(0, 2), (3, 4), (5, 9)]  # three stored batches: offsets 0-9


def test_acquire_takes_whole_batches_up_to_max_records_and_locks_them() -> None:
    sp = SharePartition(0, lock_ms=1000)
    got = sp.acquire("a", BATCHES, max_records=4, now=0)
    # 4 records asked: the first batch (3) and the whole second (2) - batch boundaries are kept.
    assert got == [Acquired(0, 4, 1)]
    assert sp.state(4) == (RecordState.ACQUIRED, 1) and sp.end_offset == 5
    # Another member gets what is left, not what "a" holds.
    assert sp.acquire("b", BATCHES, max_records=100, now=0) == [Acquired(5, 9, 1)]
    assert sp.acquire("c", BATCHES, max_records=100, now=0) == []
    assert sp.next_deadline() == 1000


def test_accept_reject_and_gap_move_the_start_offset_release_redelivers() -> None:
    sp = SharePartition(0)
    sp.acquire("a", BATCHES, max_records=100, now=0)
    assert sp.acknowledge("a", 0, 2, [AckType.ACCEPT]) == 0
    assert sp.start_offset == 3
    # One type per offset: 3 released, 4 rejected.
    assert sp.acknowledge("a", 3, 4, [AckType.RELEASE, AckType.REJECT]) == 0
    assert sp.state(3) == (RecordState.AVAILABLE, 1) and sp.state(4) == (RecordState.ARCHIVED, 1)
    assert sp.start_offset == 3 and sp.next_fetch_offset() == 3
    # The released record is delivered again, with its delivery count up.
    assert sp.acquire("b", BATCHES, max_records=100, now=0) == [Acquired(3, 3, 2)]
    assert sp.acknowledge("b", 3, 3, [AckType.ACCEPT]) == 0
    assert sp.acknowledge("a", 5, 9, [AckType.GAP]) == 0
    assert sp.start_offset == 10 and sp.end_offset == 10


def test_only_the_lock_holder_acknowledges_and_a_refused_batch_changes_nothing() -> None:
    sp = SharePartition(0)
    sp.acquire("a", [(0, 2)], max_records=100, now=0)
    assert sp.acknowledge("b", 0, 2, [AckType.ACCEPT]) == ErrorCode.INVALID_RECORD_STATE
    assert sp.acknowledge("a", 0, 5, [AckType.ACCEPT]) == ErrorCode.INVALID_RECORD_STATE  # 3-5 not acquired
    assert sp.state(0) == (RecordState.ACQUIRED, 1) and sp.start_offset == 0
    assert sp.acknowledge("a", 0, 2, [1, 1]) == ErrorCode.INVALID_REQUEST  # neither one type nor one per offset
    assert sp.acknowledge("a", 0, 2, [9]) == ErrorCode.INVALID_REQUEST
    assert sp.acknowledge("a", 0, 2, [AckType.ACCEPT]) == 0
    assert sp.acknowledge("a", 0, 0, [AckType.ACCEPT]) == ErrorCode.INVALID_RECORD_STATE  # twice


def test_lock_time_out_with_a_fake_clock_makes_records_available_again() -> None:
    sp = SharePartition(0, lock_ms=500)
    sp.acquire("a", [(0, 1)], max_records=100, now=1000)
    assert sp.expire_locks(1499) == 0
    assert sp.state(0) == (RecordState.ACQUIRED, 1)
    assert sp.expire_locks(1500) == 2
    assert sp.state(0) == (RecordState.AVAILABLE, 1) and sp.next_deadline() is None
    # The late acknowledgement of the first holder is refused; the next member gets the records.
    assert sp.acknowledge("a", 0, 1, [AckType.ACCEPT]) == ErrorCode.INVALID_RECORD_STATE
    assert sp.acquire("b", [(0, 1)], max_records=100, now=2000) == [Acquired(0, 1, 2)]


def test_delivery_count_limit_archives_the_record() -> None:
    sp = SharePartition(0, lock_ms=10, delivery_limit=3)
    now = 0
    for attempt in range(1, 4):
        assert sp.acquire("a", [(0, 0), (1, 1)], max_records=100, now=now) == [Acquired(0, 1, attempt)]
        if attempt % 2:
            assert sp.acknowledge("a", 0, 1, [AckType.RELEASE]) == 0
        else:
            now += 10
            assert sp.expire_locks(now) == 2
    # Third delivery released: the limit is reached, so the records are archived and the SPSO passes them.
    assert sp.state(0) == (RecordState.ARCHIVED, 0) and sp.start_offset == 2
    assert sp.acquire("a", [(0, 0), (1, 1)], max_records=100, now=now) == []


def test_a_leaving_member_releases_what_it_holds() -> None:
    sp = SharePartition(0)
    sp.acquire("a", [(0, 1)], max_records=1, now=0)
    sp.acquire("b", [(2, 3)], max_records=1, now=0)
    assert sp.acquired_by("a") == [0, 1]
    assert sp.release_member("a") == 2
    assert sp.state(0) == (RecordState.AVAILABLE, 1) and sp.state(2) == (RecordState.ACQUIRED, 1)
    assert sp.next_fetch_offset() == 0


def test_window_is_bounded_and_gaps_and_control_batches_are_skipped() -> None:
    sp = SharePartition(10, max_in_flight=3)
    # Batches below the SPSO are not delivered; the window stops at 3 in-flight offsets.
    assert sp.acquire("a", [(5, 12), (13, 20)], max_records=100, now=0) == [Acquired(10, 12, 1)]
    assert sp.acquire("a", [(13, 20)], max_records=100, now=0) == []
    sp.acknowledge("a", 10, 12, [AckType.ACCEPT])
    # A gap in the log (offsets 13-14 compacted away) and a control batch (15) are passed over.
    assert sp.acquire("a", [(16, 17)], max_records=100, now=0) == [Acquired(16, 17, 1)]
    assert sp.start_offset == 16
    sp.skip(18, 18)
    sp.acknowledge("a", 16, 17, [AckType.ACCEPT])
    assert sp.start_offset == 19 == sp.next_fetch_offset()


def test_a_full_window_leaves_the_next_batches_available() -> None:
    """The window fills inside a batch; the following batches of the same read (handed to acquire one at a time,
    as ShareFetch does) start past the SPEO but are no gap: they stay AVAILABLE and come once the SPSO moves (the
    bench's 3 share consumers of 1 000+ records found them archived undelivered)."""
    sp = SharePartition(0, max_in_flight=3)
    assert sp.acquire("a", [(0, 1)], max_records=100, now=0) == [Acquired(0, 1, 1)]
    assert sp.acquire("b", [(2, 4)], max_records=100, now=0) == [Acquired(2, 2, 1)]
    assert sp.acquire("b", [(5, 6)], max_records=100, now=0) == []
    assert sp.state(3) == sp.state(5) == (RecordState.AVAILABLE, 0)
    sp.acknowledge("a", 0, 1, [AckType.ACCEPT])
    assert sp.next_fetch_offset() == 3
    assert sp.acquire("a", [(2, 4), (5, 6)], max_records=100, now=0) == [Acquired(3, 4, 1)]
    sp.acknowledge("b", 2, 2, [AckType.ACCEPT])
    assert sp.acquire("a", [(5, 6)], max_records=100, now=0) == [Acquired(5, 5, 1)]


def test_renew_restarts_the_lock_and_record_limit_mode_splits_a_batch() -> None:
    sp = SharePartition(0, lock_ms=100)
    # Record-limit mode (ShareFetch v2): exactly max_records, even inside a batch.
    assert sp.acquire("a", [(0, 4)], max_records=2, now=0, strict=True) == [Acquired(0, 1, 1)]
    assert sp.next_fetch_offset() == 2
    assert sp.acknowledge("a", 0, 1, [AckType.RENEW], now=80) == 0
    assert sp.expire_locks(100) == 0 and sp.state(0) == (RecordState.ACQUIRED, 1)
    assert sp.next_deadline() == 180
    assert sp.expire_locks(180) == 2 and sp.state(1) == (RecordState.AVAILABLE, 1)
