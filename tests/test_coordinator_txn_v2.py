"""Transaction version 2 (KIP-890 part 2) in the coordinator's rules (kop/coordinator/transactions/state.py),
sans-IO: the epoch bump of every EndTxn v5, its retries, the implicit add that opens the next transaction,
the abort of an Empty transaction, the producer id rotation of an exhausted epoch, the ClientTransactionVersion
kept through the log - and the classic (TV1) path unchanged beside it."""

from __future__ import annotations

from kop.coordinator.transactions import records as trec
from kop.coordinator.transactions.state import MAX_EPOCH, TransactionStateMachine, TxnState
from kop.protocol.errors import ErrorCode as E

S = TxnState
T = "txn-v2"
P = ("t", 0)


def machine() -> TransactionStateMachine:
    m = TransactionStateMachine(900000)
    r = m.init_producer_id(T, 60000, -1, -1, 1000, 7)
    assert r.error == 0 and r.transit is not None
    m.complete(r.transit)
    return m


def implicit_add(m: TransactionStateMachine, epoch: int, now: int = 2000) -> None:
    err, t = m.add_partitions(T, 7, epoch, [P], now, tv2=True)
    assert err == 0 and t is not None
    m.complete(t)


def end(m: TransactionStateMachine, epoch: int, commit: bool, new_pid: int | None = None) -> None:
    """EndTxn v5 through its markers: Prepare, then Complete."""
    err, t = m.end_txn(T, 7 if new_pid is None else m.txns[T].producer_id, epoch, commit, 3000, True, new_pid)
    assert err == 0 and t is not None
    m.complete(t)
    done = m.complete_markers(T, 4000)
    assert done is not None
    m.complete(done)


def test_every_end_bumps_the_epoch_and_the_markers_carry_it() -> None:
    m = machine()
    implicit_add(m, 0)
    txn = m.txns[T]
    assert (txn.state, txn.client_tv, txn.partitions) == (S.ONGOING, 2, {P})
    err, t = m.end_txn(T, 7, 0, True, 3000, tv2=True)
    assert err == 0 and t is not None
    assert (t.state, t.producer_epoch, t.last_producer_epoch) == (S.PREPARE_COMMIT, 1, 0)
    m.complete(t)  # the markers are written with the transaction's epoch: 1 now, fencing epoch 0
    assert m.txns[T].producer_epoch == 1
    done = m.complete_markers(T, 4000)
    assert done is not None and (done.state, done.producer_epoch) == (S.COMPLETE_COMMIT, 1)
    m.complete(done)
    # the next transaction: the produce with the new epoch adds its partition to a new Ongoing transaction
    implicit_add(m, 1, now=5000)
    assert (m.txns[T].state, m.txns[T].start_ms) == (S.ONGOING, 5000)
    end(m, 1, False)
    assert (m.txns[T].state, m.txns[T].producer_epoch) == (S.COMPLETE_ABORT, 2)


def test_retries_and_zombies_of_a_tv2_end() -> None:
    m = machine()
    implicit_add(m, 0)
    err, t = m.end_txn(T, 7, 0, True, 3000, tv2=True)
    assert err == 0 and t is not None
    m.complete(t)
    # while the markers are written: a retry (the epoch before the bump) waits; the bumped epoch is not an end
    assert m.end_txn(T, 7, 0, True, 3000, tv2=True) == (E.CONCURRENT_TRANSACTIONS, None)
    assert m.end_txn(T, 7, 1, True, 3000, tv2=True)[0] == E.PRODUCER_FENCED
    done = m.complete_markers(T, 4000)
    assert done is not None
    m.complete(done)
    assert m.end_txn(T, 7, 0, True, 3000, tv2=True) == (0, None)  # the retry after completion succeeds
    assert m.end_txn(T, 7, 0, False, 3000, tv2=True)[0] == E.INVALID_TXN_STATE  # not the other direction
    # the old epoch is fenced from the partitions (the produce-side add) once the end bumped it
    assert m.add_partitions(T, 7, 0, [P], 5000, tv2=True)[0] == E.PRODUCER_FENCED
    assert m.add_partitions(T, 7, 1, [P], 5000, tv2=True)[0] == 0
    # while markers are being written the next transaction cannot start yet (the produce retries)
    m2 = machine()
    implicit_add(m2, 0)
    err, t = m2.end_txn(T, 7, 0, False, 3000, tv2=True)
    assert t is not None
    m2.complete(t)
    assert m2.add_partitions(T, 7, 1, [P], 5000, tv2=True)[0] == E.CONCURRENT_TRANSACTIONS


def test_an_empty_tv2_transaction_can_be_aborted_but_not_committed() -> None:
    m = machine()
    assert m.end_txn(T, 7, 0, True, 3000, tv2=True)[0] == E.INVALID_TXN_STATE
    end(m, 0, False)
    assert (m.txns[T].state, m.txns[T].producer_epoch, m.txns[T].partitions) == (S.COMPLETE_ABORT, 1, set())
    # TV1 keeps Kafka's classic answer
    m1 = machine()
    assert m1.end_txn(T, 7, 0, False, 3000)[0] == E.INVALID_TXN_STATE


def test_an_exhausted_epoch_moves_to_the_next_producer_id_after_the_markers() -> None:
    m = machine()
    m.txns[T].producer_epoch = MAX_EPOCH - 1
    implicit_add(m, MAX_EPOCH - 1)
    assert m.end_needs_producer_id(T, tv2=True) and not m.end_needs_producer_id(T, tv2=False)
    err, t = m.end_txn(T, 7, MAX_EPOCH - 1, True, 3000, True, 8)
    assert err == 0 and t is not None and (t.producer_id, t.producer_epoch, t.next_producer_id) == (7, MAX_EPOCH, 8)
    m.complete(t)
    done = m.complete_markers(T, 4000)
    assert done is not None
    assert (done.producer_id, done.producer_epoch, done.last_producer_id, done.next_producer_id) == (8, 0, 7, -1)
    m.complete(done)
    # a retry of that end, by the old id at the old epoch, is recognised
    assert m.end_txn(T, 7, MAX_EPOCH - 1, True, 5000, tv2=True) == (0, None)
    assert m.end_txn(T, 9, 0, True, 5000, tv2=True)[0] == E.INVALID_PRODUCER_ID_MAPPING


def test_tv1_ends_keep_the_epoch() -> None:
    m = machine()
    err, t = m.add_partitions(T, 7, 0, [P], 2000)
    assert t is not None
    m.complete(t)
    assert m.txns[T].client_tv == 0
    err, t = m.end_txn(T, 7, 0, True, 3000)
    assert err == 0 and t is not None and t.producer_epoch == 0
    m.complete(t)
    done = m.complete_markers(T, 4000)
    assert done is not None
    m.complete(done)
    assert m.end_txn(T, 7, 0, True, 3000) == (0, None)  # a TV1 retry: the same epoch
    assert m.end_txn(T, 7, 1, True, 3000)[0] == E.PRODUCER_FENCED


def test_the_client_version_survives_the_log() -> None:
    """A TV2 transaction is written in Kafka's value version 1 with ClientTransactionVersion 2 (and the next
    producer id of a rotation); a reload keeps them, so a retried end is still recognised after it."""
    m = machine()
    implicit_add(m, 0)
    err, t = m.end_txn(T, 7, 0, True, 3000, tv2=True)
    assert t is not None
    raw = trec.encode_value(t.value(), 1)
    value = trec.decode_value(raw)
    assert (value.client_transaction_version, value.producer_epoch, value.status) == (2, 1, int(S.PREPARE_COMMIT))
    loaded = TransactionStateMachine(900000)
    loaded.replay(T, value)
    assert loaded.txns[T].client_tv == 2
    assert loaded.end_txn(T, 7, 0, True, 3000, tv2=True) == (E.CONCURRENT_TRANSACTIONS, None)


def test_a_zombie_at_the_epoch_before_an_end_is_fenced_by_init_producer_id() -> None:
    """KIP-360's InitProducerId with the producer's (id, epoch): after a TV2 end, the epoch before the bump is
    not taken for a retry of the last bump (Kafka's prepareComplete moves lastProducerEpoch up)."""
    m = machine()
    implicit_add(m, 0)
    end(m, 0, True)
    assert m.init_producer_id(T, 60000, 7, 0, 5000).error == E.PRODUCER_FENCED
    r = m.init_producer_id(T, 60000, 7, 1, 5000)
    assert (r.error, r.producer_epoch) == (0, 2)
