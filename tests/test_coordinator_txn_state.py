"""The transaction coordinator's rules (kop/coordinator/transactions/state.py), sans-IO: Kafka's error codes
and epoch arithmetic, with a fake clock and no storage."""

from __future__ import annotations

import pytest

from kop.coordinator.transactions.state import MAX_EPOCH, TransactionStateMachine, TxnState
from kop.protocol.errors import ErrorCode as E

S = TxnState
T = "txn-a"


def init(m: TransactionStateMachine, tid: str = T, timeout: int = 60000, pid: int = -1, epoch: int = -1,
         now: int = 1000, new_pid: int | None = 7):
    res = m.init_producer_id(tid, timeout, pid, epoch, now, new_pid if m.needs_producer_id(tid) else None)
    if res.transit is not None:
        m.complete(res.transit)
    return res


def begin(m: TransactionStateMachine, parts=(("t", 0),), now: int = 2000) -> None:
    txn = m.txns[T]
    err, t = m.add_partitions(T, txn.producer_id, txn.producer_epoch, list(parts), now)
    assert err == 0
    if t is not None:
        m.complete(t)


def test_new_id_gets_a_producer_id_and_epoch_0_then_each_session_bumps() -> None:
    m = TransactionStateMachine(900000)
    r = init(m)
    assert (r.error, r.producer_id, r.producer_epoch) == (0, 7, 0)
    assert m.txns[T].state == S.EMPTY and m.txns[T].start_ms == -1
    r = init(m)
    assert (r.error, r.producer_id, r.producer_epoch) == (0, 7, 1)


def test_bad_timeouts_and_empty_id() -> None:
    m = TransactionStateMachine(900000)
    assert m.init_producer_id(T, 900001, -1, -1, 0, 1).error == E.INVALID_TRANSACTION_TIMEOUT
    assert m.init_producer_id(T, 0, -1, -1, 0, 1).error == E.INVALID_TRANSACTION_TIMEOUT
    assert m.init_producer_id("", 1000, -1, -1, 0, 1).error == E.INVALID_REQUEST
    assert T not in m.txns


def test_kip360_recovery_with_current_epoch_and_a_retried_bump() -> None:
    m = TransactionStateMachine(900000)
    init(m)  # epoch 0
    r = init(m, pid=7, epoch=0)
    assert (r.error, r.producer_epoch) == (0, 1)
    r = init(m, pid=7, epoch=0)  # the same bump again (its answer was lost): same epoch
    assert (r.error, r.producer_epoch) == (0, 1)
    assert init(m, pid=7, epoch=5).error == E.PRODUCER_FENCED
    assert init(m, pid=99, epoch=1).error == E.PRODUCER_FENCED


def test_epoch_exhaustion_rotates_the_producer_id() -> None:
    m = TransactionStateMachine(900000)
    init(m)
    m.txns[T].producer_epoch = MAX_EPOCH - 1
    assert m.needs_producer_id(T)
    r = init(m, new_pid=8)
    assert (r.error, r.producer_id, r.producer_epoch) == (0, 8, 0)


def test_add_partitions_errors_and_idempotence() -> None:
    m = TransactionStateMachine(900000)
    init(m)
    assert m.add_partitions("nope", 7, 0, [("t", 0)], 0)[0] == E.INVALID_PRODUCER_ID_MAPPING
    assert m.add_partitions(T, 8, 0, [("t", 0)], 0)[0] == E.INVALID_PRODUCER_ID_MAPPING
    assert m.add_partitions(T, 7, 1, [("t", 0)], 0)[0] == E.PRODUCER_FENCED
    begin(m, [("t", 0)], now=5000)
    txn = m.txns[T]
    assert txn.state == S.ONGOING and txn.start_ms == 5000
    assert m.add_partitions(T, 7, 0, [("t", 0)], 6000) == (0, None)  # already in: nothing to write
    err, t = m.add_partitions(T, 7, 0, [("u", 1)], 6000)
    assert err == 0 and t is not None and t.start_ms == 5000 and t.partitions == {("t", 0), ("u", 1)}
    # pending transit: a second request for the id waits
    assert m.add_partitions(T, 7, 0, [("v", 0)], 6000)[0] == E.CONCURRENT_TRANSACTIONS
    m.abandon(T)
    assert m.txns[T].partitions == {("t", 0)}


def test_end_txn_rules() -> None:
    m = TransactionStateMachine(900000)
    init(m)
    assert m.end_txn(T, 7, 0, True, 0) == (E.INVALID_TXN_STATE, None)  # Empty
    assert m.end_txn("nope", 7, 0, True, 0)[0] == E.INVALID_PRODUCER_ID_MAPPING
    begin(m)
    assert m.end_txn(T, 7, 3, True, 0)[0] == E.PRODUCER_FENCED
    err, t = m.end_txn(T, 7, 0, True, 3000)
    assert err == 0 and t is not None and t.state == S.PREPARE_COMMIT
    m.complete(t)
    assert m.end_txn(T, 7, 0, True, 0)[0] == E.CONCURRENT_TRANSACTIONS  # retry while markers are written
    assert m.end_txn(T, 7, 0, False, 0)[0] == E.INVALID_TXN_STATE  # other direction
    assert m.add_partitions(T, 7, 0, [("t", 0)], 0)[0] == E.CONCURRENT_TRANSACTIONS
    done = m.complete_markers(T, 4000)
    assert done is not None and done.state == S.COMPLETE_COMMIT and not done.partitions
    m.complete(done)
    assert m.end_txn(T, 7, 0, True, 0) == (0, None)  # retry after completion
    assert m.end_txn(T, 7, 0, False, 0)[0] == E.INVALID_TXN_STATE


def test_reinit_with_an_open_transaction_fences_and_aborts_it() -> None:
    m = TransactionStateMachine(900000)
    init(m)
    begin(m)
    r = init(m)
    assert r.error == E.CONCURRENT_TRANSACTIONS and r.fencing
    assert m.txns[T].state == S.PREPARE_ABORT and m.txns[T].producer_epoch == 1
    # the zombie (epoch 0) is fenced
    assert m.add_partitions(T, 7, 0, [("t", 1)], 0)[0] == E.PRODUCER_FENCED
    assert m.end_txn(T, 7, 0, True, 0)[0] == E.PRODUCER_FENCED
    assert init(m).error == E.CONCURRENT_TRANSACTIONS  # until the abort completes
    m.complete(m.complete_markers(T, 0))
    assert m.txns[T].state == S.COMPLETE_ABORT
    r = init(m)
    assert (r.error, r.producer_epoch) == (0, 2)


def test_timed_out_transactions_are_fenced_and_aborted() -> None:
    m = TransactionStateMachine(900000)
    init(m, timeout=1000)
    begin(m, now=10_000)
    assert m.abort_timed_out(10_500) == []
    (t,) = m.abort_timed_out(11_001)
    assert t.state == S.PREPARE_ABORT and t.producer_epoch == 1
    m.complete(t)
    assert m.end_txn(T, 7, 0, True, 0)[0] == E.PRODUCER_FENCED


def test_verify_only() -> None:
    m = TransactionStateMachine(900000)
    init(m)
    begin(m, [("t", 0)])
    assert m.verify(T, 7, 0, [("t", 0), ("t", 1)]) == (0, {("t", 0): 0, ("t", 1): E.INVALID_TXN_STATE})
    assert m.verify(T, 7, 1, [("t", 0)])[0] == E.PRODUCER_FENCED


def test_expiration_and_replay() -> None:
    m = TransactionStateMachine(900000)
    init(m, now=1000)
    assert m.expired(5000, 10_000) == []
    assert m.expired(11_000, 10_000) == [T]
    m.remove(T)
    assert T not in m.txns
    # replay: the latest value wins, a tombstone removes
    init(m, now=1000)
    begin(m)
    value = m.txns[T].value()
    m2 = TransactionStateMachine(900000)
    m2.replay(T, value)
    assert m2.txns[T].state == S.ONGOING and m2.txns[T].partitions == {("t", 0)}
    m2.replay(T, None)
    assert T not in m2.txns


@pytest.mark.parametrize(("states", "pids", "duration", "pattern", "expect"), [
    ([], [], -1, None, ["a", "b"]),
    (["Ongoing"], [], -1, None, ["b"]),
    (["Bogus"], [], -1, None, []),
    ([], [7], -1, None, ["a"]),
    ([], [], 9500, None, ["a"]),  # b runs 9000 ms; Empty "a" has start -1 and passes, as in Kafka
    ([], [], -1, "b.*", ["b"]),
])
def test_list_filters(states, pids, duration, pattern, expect) -> None:
    m = TransactionStateMachine(900000)
    m.complete(m.init_producer_id("a", 1000, -1, -1, 0, 7).transit)
    m.complete(m.init_producer_id("b", 1000, -1, -1, 0, 8).transit)
    m.complete(m.add_partitions("b", 8, 0, [("t", 0)], 1000)[1])
    unknown, found = m.list(["a", "b"], states, pids, duration, pattern, 10_000)
    assert sorted(t.transactional_id for t in found) == expect
    assert unknown == [s for s in states if s == "Bogus"]
