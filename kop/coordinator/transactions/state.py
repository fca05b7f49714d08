"""The transaction coordinator's rules (Kafka 4.x, the classic "TV1" path), sans-IO.

Every request is decided here without I/O, in the manner of Kafka's TransactionMetadata: a request that
changes a transaction *prepares* a `Transit` (the transaction's next state) and marks the transaction
pending; the caller (kop/coordinator/transactions/coordinator.py) writes the transit to
__transaction_state and then calls `complete(transit)` (durable: the state moves) or `abandon(tid)` (the
write failed: nothing moved). While a transit is pending, other requests for the same id get
CONCURRENT_TRANSACTIONS, as in Kafka, so no two writes of one transaction race. Time is the caller's wall
clock in ms (`now`), since time stamps are written to the log and compared after restarts.

States and their ids are Kafka's (the id is what the log stores): Empty 0, Ongoing 1, PrepareCommit 2,
PrepareAbort 3, CompleteCommit 4, CompleteAbort 5, Dead 6, PrepareEpochFence 7. Error codes follow
Kafka's TransactionCoordinator case for case (research/transactions.md §3); the API modules map
PRODUCER_FENCED to INVALID_PRODUCER_EPOCH for versions older than the one that knows it.

Transaction version 2 (KIP-890 part 2) is decided per request, by the version the client sends, as Kafka
does: EndTxn v5 bumps the producer epoch when it ends a transaction (PrepareCommit/PrepareAbort carry the
bumped epoch, so the markers fence the old one; an exhausted epoch moves to a new producer id once the
markers are written) and answers the new epoch; a retried EndTxn is recognised by its epoch being one
below (or, after a rotation, by the previous producer id). Partitions join a TV2 transaction implicitly
(Produce v12+, TxnOffsetCommit v5: `add_partitions(..., tv2=True)`), which also opens the next transaction
after a completed one. An abort of an Empty TV2 transaction bumps the epoch too (a producer whose first
send failed). The transaction remembers the client's version (ClientTransactionVersion in the log).
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass, field, replace
from enum import IntEnum
from typing import TypedDict, Unpack

from kop.coordinator.transactions.records import TransactionLogValue
from kop.protocol.errors import ErrorCode

E = ErrorCode
NO_PRODUCER_ID = -1
NO_PRODUCER_EPOCH = -1
MAX_EPOCH = 32767  # Short.MAX_VALUE


class TxnState(IntEnum):
    EMPTY = 0
    ONGOING = 1
    PREPARE_COMMIT = 2
    PREPARE_ABORT = 3
    COMPLETE_COMMIT = 4
    COMPLETE_ABORT = 5
    DEAD = 6
    PREPARE_EPOCH_FENCE = 7

    @property
    def state_name(self) -> str:
        """The name DescribeTransactions and ListTransactions carry (Kafka's TransactionState names)."""
        return _NAMES[self]


_NAMES = {
    TxnState.EMPTY: "Empty", TxnState.ONGOING: "Ongoing", TxnState.PREPARE_COMMIT: "PrepareCommit",
    TxnState.PREPARE_ABORT: "PrepareAbort", TxnState.COMPLETE_COMMIT: "CompleteCommit",
    TxnState.COMPLETE_ABORT: "CompleteAbort", TxnState.DEAD: "Dead",
    TxnState.PREPARE_EPOCH_FENCE: "PrepareEpochFence",
}
STATE_BY_NAME = {name: state for state, name in _NAMES.items()}
S = TxnState
COMPLETED = (S.EMPTY, S.COMPLETE_COMMIT, S.COMPLETE_ABORT)

TopicPartition = tuple[str, int]


def epoch_exhausted(epoch: int) -> bool:
    """Kafka rotates the producer id once the epoch reaches Short.MAX_VALUE - 1 (one bump is kept in
    reserve for fencing)."""
    return epoch >= MAX_EPOCH - 1


@dataclass(slots=True)
class TxnMetadata:
    transactional_id: str
    producer_id: int
    producer_epoch: int
    timeout_ms: int
    state: TxnState = S.EMPTY
    partitions: set[TopicPartition] = field(default_factory=set)
    start_ms: int = -1
    last_update_ms: int = -1
    last_producer_id: int = NO_PRODUCER_ID  # the id before a rotation (KIP-360 recovery)
    last_producer_epoch: int = NO_PRODUCER_EPOCH  # the epoch before the last bump (a retried bump)
    pending: TxnState | None = None  # the state a transit being written moves to
    client_tv: int = 0  # the transaction version of the client's last request (2: KIP-890 part 2)
    next_producer_id: int = NO_PRODUCER_ID  # TV2: the id a transaction that exhausted its epoch moves to

    def value(self) -> TransactionLogValue:
        return to_value(self.producer_id, self.producer_epoch, self.timeout_ms, self.state, self.partitions,
                        self.last_update_ms, self.start_ms, self.client_tv, self.last_producer_id,
                        self.next_producer_id)


@dataclass(frozen=True, slots=True)
class Transit:
    """A transaction's next state, to be written to __transaction_state and then applied."""
    transactional_id: str
    producer_id: int
    producer_epoch: int
    timeout_ms: int
    state: TxnState
    partitions: frozenset[TopicPartition]
    start_ms: int
    last_update_ms: int
    last_producer_id: int = NO_PRODUCER_ID
    last_producer_epoch: int = NO_PRODUCER_EPOCH
    client_tv: int = 0
    next_producer_id: int = NO_PRODUCER_ID

    def value(self) -> TransactionLogValue:
        return to_value(self.producer_id, self.producer_epoch, self.timeout_ms, self.state, self.partitions,
                        self.last_update_ms, self.start_ms, self.client_tv, self.last_producer_id,
                        self.next_producer_id)


def to_value(pid: int, epoch: int, timeout_ms: int, state: TxnState, partitions: Iterable[TopicPartition],
             last_update_ms: int, start_ms: int, client_tv: int = 0, previous_pid: int = NO_PRODUCER_ID,
             next_pid: int = NO_PRODUCER_ID) -> TransactionLogValue:
    by_topic: dict[str, list[int]] | None = None
    if state != S.EMPTY:  # Kafka writes a null partition list for Empty
        by_topic = {}
        for t, p in sorted(partitions):
            by_topic.setdefault(t, []).append(p)
    return TransactionLogValue(pid, epoch, timeout_ms, int(state), by_topic, last_update_ms, start_ms, client_tv,
                               previous_pid, next_pid)


@dataclass(slots=True)
class InitResult:
    error: int
    producer_id: int = NO_PRODUCER_ID
    producer_epoch: int = NO_PRODUCER_EPOCH
    transit: Transit | None = None
    fencing: bool = False  # the transit aborts an ongoing transaction: answer CONCURRENT_TRANSACTIONS after it


@dataclass(slots=True)
class ListedTransaction:
    transactional_id: str
    producer_id: int
    state: str


class _TransitChanges(TypedDict, total=False):
    """What a transit may change of the transaction it starts from (Transit's fields)."""
    producer_id: int
    producer_epoch: int
    timeout_ms: int
    partitions: frozenset[TopicPartition]
    start_ms: int
    last_producer_id: int
    last_producer_epoch: int
    client_tv: int
    next_producer_id: int


class TransactionStateMachine:
    """The transactions of the __transaction_state partitions this broker has loaded (see the module
    docstring)."""

    def __init__(self, max_timeout_ms: int) -> None:
        self.max_timeout_ms = max_timeout_ms
        self.txns: dict[str, TxnMetadata] = {}

    # ------------------------------------------------------------------ transits
    def _prepare(self, txn: TxnMetadata, state: TxnState, now: int, **changes: Unpack[_TransitChanges]) -> Transit:
        t = Transit(txn.transactional_id, txn.producer_id, txn.producer_epoch, txn.timeout_ms, state,
                    frozenset(txn.partitions), txn.start_ms, now, txn.last_producer_id, txn.last_producer_epoch,
                    txn.client_tv, txn.next_producer_id)
        t = replace(t, **changes)
        txn.pending = state
        return t

    def complete(self, t: Transit) -> None:
        """The transit is durable: the transaction takes its state."""
        txn = self.txns.get(t.transactional_id)
        if txn is None:
            txn = self.txns[t.transactional_id] = TxnMetadata(t.transactional_id, t.producer_id, t.producer_epoch,
                                                               t.timeout_ms)
        txn.producer_id, txn.producer_epoch, txn.timeout_ms = t.producer_id, t.producer_epoch, t.timeout_ms
        txn.state, txn.partitions, txn.start_ms = t.state, set(t.partitions), t.start_ms
        txn.last_update_ms, txn.last_producer_id, txn.last_producer_epoch = (
            t.last_update_ms, t.last_producer_id, t.last_producer_epoch)
        txn.client_tv, txn.next_producer_id = t.client_tv, t.next_producer_id
        txn.pending = None

    def abandon(self, transactional_id: str) -> None:
        """The transit's write failed: the transaction stays as it was (and takes requests again)."""
        txn = self.txns.get(transactional_id)
        if txn is not None:
            txn.pending = None

    def replay(self, transactional_id: str, value: TransactionLogValue | None) -> None:
        """One record of __transaction_state, read at load (the latest per id wins)."""
        if value is None:
            self.txns.pop(transactional_id, None)
            return
        parts = {(t, p) for t, ps in (value.partitions or {}).items() for p in ps}
        try:
            state = TxnState(value.status)
        except ValueError:
            state = S.DEAD
        if state == S.DEAD:
            self.txns.pop(transactional_id, None)
            return
        self.txns[transactional_id] = TxnMetadata(
            transactional_id, value.producer_id, value.producer_epoch, value.timeout_ms, state, parts,
            value.start_ms, value.last_update_ms, value.previous_producer_id,
            client_tv=value.client_transaction_version, next_producer_id=value.next_producer_id)

    def drop(self, transactional_ids: Iterable[str]) -> None:
        for tid in transactional_ids:
            self.txns.pop(tid, None)

    # ------------------------------------------------------------------ InitProducerId
    def needs_producer_id(self, transactional_id: str) -> bool:
        """Whether InitProducerId for this id needs a fresh producer id (a new id, or an exhausted epoch);
        the caller allocates one (I/O) and passes it as `new_producer_id`."""
        txn = self.txns.get(transactional_id)
        return txn is None or (txn.state in COMPLETED and epoch_exhausted(txn.producer_epoch))

    def init_producer_id(self, transactional_id: str, timeout_ms: int, expected_pid: int, expected_epoch: int,
                         now: int, new_producer_id: int | None = None) -> InitResult:
        """InitProducerId with a transactional id. expected_pid/epoch: the KIP-360 fields (-1: none)."""
        if transactional_id == "":
            return InitResult(E.INVALID_REQUEST)
        if timeout_ms <= 0 or timeout_ms > self.max_timeout_ms:
            return InitResult(E.INVALID_TRANSACTION_TIMEOUT)
        txn = self.txns.get(transactional_id)
        if txn is None:
            if new_producer_id is None:
                raise ValueError("a new transactional id needs a producer id")
            txn = self.txns[transactional_id] = TxnMetadata(
                transactional_id, new_producer_id, NO_PRODUCER_EPOCH, timeout_ms, S.EMPTY, set(), -1, now)
        if txn.pending is not None:
            return InitResult(E.CONCURRENT_TRANSACTIONS)
        expected = expected_pid != NO_PRODUCER_ID or expected_epoch != NO_PRODUCER_EPOCH
        if expected and not (txn.producer_epoch == NO_PRODUCER_EPOCH or expected_pid == txn.producer_id
                             or (expected_pid == txn.last_producer_id and epoch_exhausted(expected_epoch))):
            return InitResult(E.PRODUCER_FENCED)
        if txn.state in (S.PREPARE_COMMIT, S.PREPARE_ABORT):
            return InitResult(E.CONCURRENT_TRANSACTIONS)
        if txn.state == S.ONGOING:
            # A new session of the id while a transaction is open: fence the old producer (epoch bump) and
            # abort its transaction; the client retries and gets the next epoch once the abort completes.
            return InitResult(E.CONCURRENT_TRANSACTIONS, transit=self._fence_and_abort(txn, now), fencing=True)
        if txn.state not in COMPLETED:
            return InitResult(E.CONCURRENT_TRANSACTIONS)
        if epoch_exhausted(txn.producer_epoch):
            if new_producer_id is None:
                raise ValueError("an exhausted epoch needs a new producer id")
            t = self._prepare(txn, S.EMPTY, now, producer_id=new_producer_id, producer_epoch=0,
                              last_producer_id=txn.producer_id if expected else NO_PRODUCER_ID,
                              last_producer_epoch=txn.producer_epoch if expected else NO_PRODUCER_EPOCH,
                              timeout_ms=timeout_ms, partitions=frozenset(), start_ms=-1)
            return InitResult(0, t.producer_id, t.producer_epoch, t)
        bumped = txn.producer_epoch + 1
        if not expected:
            epoch, last = bumped, NO_PRODUCER_EPOCH
        elif txn.producer_epoch == NO_PRODUCER_EPOCH or expected_epoch == txn.producer_epoch:
            epoch, last = bumped, txn.producer_epoch
        elif expected_epoch == txn.last_producer_epoch:
            epoch, last = txn.producer_epoch, txn.last_producer_epoch  # a retry of the last bump
        else:
            return InitResult(E.PRODUCER_FENCED)
        t = self._prepare(txn, S.EMPTY, now, producer_epoch=epoch, last_producer_epoch=last, timeout_ms=timeout_ms,
                          partitions=frozenset(), start_ms=-1)
        return InitResult(0, t.producer_id, t.producer_epoch, t)

    def _fence_and_abort(self, txn: TxnMetadata, now: int) -> Transit:
        """Bump the epoch (fencing the producer that holds the current one) and abort the open
        transaction with it: Kafka persists this as PrepareAbort with the bumped epoch."""
        epoch = txn.producer_epoch if txn.producer_epoch >= MAX_EPOCH else txn.producer_epoch + 1
        return self._prepare(txn, S.PREPARE_ABORT, now, producer_epoch=epoch)

    # ------------------------------------------------------------------ AddPartitionsToTxn / AddOffsetsToTxn
    def _check_producer(self, txn: TxnMetadata | None, pid: int, epoch: int) -> int:
        if txn is None or txn.producer_id != pid:
            return E.INVALID_PRODUCER_ID_MAPPING
        if txn.producer_epoch != epoch:
            return E.PRODUCER_FENCED
        if txn.pending is not None or txn.state in (S.PREPARE_COMMIT, S.PREPARE_ABORT):
            return E.CONCURRENT_TRANSACTIONS
        return 0

    def add_partitions(self, transactional_id: str, pid: int, epoch: int, partitions: Iterable[TopicPartition],
                       now: int, tv2: bool = False) -> tuple[int, Transit | None]:
        """(error, transit to write); (0, None): every partition is in the transaction already. `tv2`: an
        implicit add of a TV2 client (Produce v12+, TxnOffsetCommit v5), which marks the transaction TV2."""
        txn = self.txns.get(transactional_id)
        err = self._check_producer(txn, pid, epoch)
        if err:
            return err, None
        assert txn is not None
        parts = set(partitions)
        if txn.state == S.ONGOING and parts <= txn.partitions:
            return 0, None
        start = now if txn.state in COMPLETED else txn.start_ms
        tv = 2 if tv2 else txn.client_tv if txn.state == S.ONGOING else 0
        return 0, self._prepare(txn, S.ONGOING, now, partitions=frozenset(txn.partitions | parts), start_ms=start,
                                client_tv=tv)

    def verify(self, transactional_id: str, pid: int, epoch: int, partitions: Iterable[TopicPartition]
               ) -> tuple[int, dict[TopicPartition, int]]:
        """KIP-890 part 1 (AddPartitionsToTxn VerifyOnly, the produce-side check): (error, per partition
        NONE or INVALID_TXN_STATE when the partition is not in the open transaction)."""
        txn = self.txns.get(transactional_id)
        err = self._check_producer(txn, pid, epoch)
        if err:
            return err, {}
        assert txn is not None
        inside = txn.partitions if txn.state == S.ONGOING else set()
        return 0, {tp: 0 if tp in inside else E.INVALID_TXN_STATE for tp in partitions}

    # ------------------------------------------------------------------ EndTxn
    def end_needs_producer_id(self, transactional_id: str, tv2: bool) -> bool:
        """Whether a TV2 EndTxn would exhaust the epoch: the caller allocates the next producer id."""
        txn = self.txns.get(transactional_id)
        return tv2 and txn is not None and txn.state in (S.ONGOING, S.EMPTY) and epoch_exhausted(txn.producer_epoch)

    def _end_epoch_error(self, txn: TxnMetadata | None, pid: int, epoch: int) -> int:
        """Kafka's producer id and epoch checks of EndTxn. A TV2 transaction's epoch was bumped by the end
        being retried, so a retry carries the epoch below (or, after a rotation, the previous id)."""
        if txn is None:
            return E.INVALID_PRODUCER_ID_MAPPING
        bumped = txn.client_tv >= 2 and txn.producer_epoch == epoch + 1
        rotated = txn.client_tv >= 2 and txn.last_producer_id == pid and epoch == MAX_EPOCH - 1 and \
            txn.producer_epoch == 0
        if txn.producer_id != pid and not rotated:
            return E.INVALID_PRODUCER_ID_MAPPING
        if txn.client_tv < 2 or txn.state in (S.ONGOING, S.EMPTY):
            valid = epoch == txn.producer_epoch
        elif txn.state in (S.PREPARE_COMMIT, S.PREPARE_ABORT):
            valid = bumped
        else:
            valid = bumped or rotated
        return 0 if valid else E.PRODUCER_FENCED

    def end_txn(self, transactional_id: str, pid: int, epoch: int, commit: bool, now: int, tv2: bool = False,
                new_producer_id: int | None = None) -> tuple[int, Transit | None]:
        """(error, PrepareCommit/PrepareAbort transit to write); (0, None): a retry of a completed end.
        `tv2`: EndTxn v5, whose end bumps the epoch (a new producer id, `new_producer_id`, when exhausted)."""
        txn = self.txns.get(transactional_id)
        err = self._end_epoch_error(txn, pid, epoch)
        if err:
            return err, None
        assert txn is not None
        if txn.pending is not None:
            return E.CONCURRENT_TRANSACTIONS, None
        state = txn.state
        if state == S.ONGOING or (state == S.EMPTY and tv2 and not commit):
            target = S.PREPARE_COMMIT if commit else S.PREPARE_ABORT
            if not tv2:
                return 0, self._prepare(txn, target, now, client_tv=0)
            exhausted = epoch_exhausted(txn.producer_epoch)
            if exhausted and new_producer_id is None:
                raise ValueError("an exhausted epoch needs a new producer id")
            start = now if state == S.EMPTY else txn.start_ms
            return 0, self._prepare(txn, target, now, producer_epoch=txn.producer_epoch + 1,
                                    last_producer_epoch=txn.producer_epoch, client_tv=2, start_ms=start,
                                    next_producer_id=new_producer_id if exhausted and new_producer_id is not None
                                    else NO_PRODUCER_ID)
        if state == (S.COMPLETE_COMMIT if commit else S.COMPLETE_ABORT):
            return 0, None
        if state == (S.PREPARE_COMMIT if commit else S.PREPARE_ABORT):
            return E.CONCURRENT_TRANSACTIONS, None
        return E.INVALID_TXN_STATE, None  # Empty, or the other direction

    def complete_markers(self, transactional_id: str, now: int) -> Transit | None:
        """Every marker of a PrepareCommit/PrepareAbort transaction is written: its CompleteCommit /
        CompleteAbort transit (None if the transaction moved meanwhile)."""
        txn = self.txns.get(transactional_id)
        if txn is None or txn.pending is not None or txn.state not in (S.PREPARE_COMMIT, S.PREPARE_ABORT):
            return None
        done = S.COMPLETE_COMMIT if txn.state == S.PREPARE_COMMIT else S.COMPLETE_ABORT
        if txn.next_producer_id != NO_PRODUCER_ID:  # TV2, the epoch exhausted: the producer moves to the new id
            return self._prepare(txn, done, now, partitions=frozenset(), producer_id=txn.next_producer_id,
                                 producer_epoch=0, last_producer_id=txn.producer_id,
                                 last_producer_epoch=txn.producer_epoch, next_producer_id=NO_PRODUCER_ID)
        if txn.client_tv >= 2:  # Kafka's prepareComplete: the bumped epoch is no longer a retry's (KIP-360)
            return self._prepare(txn, done, now, partitions=frozenset(), last_producer_epoch=txn.producer_epoch)
        return self._prepare(txn, done, now, partitions=frozenset())

    # ------------------------------------------------------------------ timeouts and expiration
    def abort_timed_out(self, now: int, not_before: int = 0) -> list[Transit]:
        """Ongoing transactions past their timeout (counted from their first partition, or from
        `not_before` when later: when the coordinator served again after a pause, issue #24): each is
        fenced and aborted, as Kafka's abortTimedOutTransactions does (the zombie then gets PRODUCER_FENCED)."""
        out = []
        for txn in self.txns.values():
            if txn.state == S.ONGOING and txn.pending is None and \
                    max(txn.start_ms, not_before) + txn.timeout_ms < now:
                out.append(self._fence_and_abort(txn, now))
        return out

    def expired(self, now: int, expiration_ms: int) -> list[str]:
        """Ids not used for transactional.id.expiration.ms and not in a transaction: the caller writes
        their tombstones and then calls `remove`."""
        out = []
        for tid, txn in self.txns.items():
            if txn.state in COMPLETED and txn.pending is None and txn.last_update_ms + expiration_ms <= now:
                txn.pending = S.DEAD
                out.append(tid)
        return out

    def remove(self, transactional_id: str) -> None:
        txn = self.txns.get(transactional_id)
        if txn is not None and txn.pending == S.DEAD:
            del self.txns[transactional_id]

    # ------------------------------------------------------------------ DescribeTransactions / ListTransactions
    def describe(self, transactional_id: str) -> TxnMetadata | None:
        txn = self.txns.get(transactional_id)
        return None if txn is None or txn.state == S.DEAD else txn

    def list(self, ids: Iterable[str], states: Iterable[str], producer_ids: Iterable[int], duration_ms: int,
             pattern: str | None, now: int) -> tuple[list[str], list[ListedTransaction]]:
        """(unknown state filters, matching transactions), with Kafka's filters: states by name, producer
        ids, running longer than duration_ms (-1: any), transactional id pattern (v2, a regex)."""
        wanted_states = set()
        unknown = []
        for name in states:
            if name in STATE_BY_NAME:
                wanted_states.add(STATE_BY_NAME[name])
            else:
                unknown.append(name)
        pids = set(producer_ids)
        rx = re.compile(pattern) if pattern else None
        out = []
        for tid in ids:
            txn = self.txns.get(tid)
            if txn is None or txn.state == S.DEAD:
                continue
            if pids and txn.producer_id not in pids:
                continue
            if (wanted_states or unknown) and txn.state not in wanted_states:
                continue
            if duration_ms >= 0 and now - txn.start_ms <= duration_ms:
                continue
            if rx is not None and not rx.fullmatch(tid):
                continue
            out.append(ListedTransaction(tid, txn.producer_id, txn.state.state_name))
        return unknown, out
