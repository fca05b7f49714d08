"""Producer state of one partition: idempotence, transactions, the last stable offset, aborted transactions.

Sans-IO: ``ProducerStateTable`` is fed batch headers and marker decisions and answers questions; the
partition log (kop/offset/partition_log.py) does the I/O (appends, snapshots, replay) around it.

Two views of a transaction are kept, because a batch's offset is only assigned when the managed ledger
issues its add (which may be after a ledger roll, not when the produce request is checked):

* the *producer* view (``ProducerEntry.in_txn``), updated when a batch or marker is accepted, answers
  the produce checks: sequences and epochs (Kafka's ProducerAppendInfo), "a non-transactional batch
  while a transaction is open" (INVALID_TXN_STATE), "first transactional batch of a transaction on this
  partition" (KIP-890 part 1 verification);
* the *log* view, updated by ``on_issue`` when the add is issued (the index interceptor calls it with the
  offsets the entry takes), holds what the offsets need: ``ongoing`` = first offset of each open
  transaction; ``completing`` = transactions whose marker is issued but not yet durable (they still hold
  the last stable offset back, like Kafka's "unreplicated" completed transactions); ``aborted`` = Kafka's
  aborted-transaction index (producer id, first offset, last offset = marker offset, last stable offset),
  for non-empty aborted transactions only.

Last stable offset = min(first offset of any ongoing or completing transaction, high watermark), never
below the log start offset.

Idempotence (Java producers are idempotent by default, KIP-679): the last five batches of each producer
are remembered; a batch matching one of them is a duplicate, answered with the original offset. Checks
happen when the append is *issued*, so pipelined batches of one producer are validated against each
other. A batch in flight is never pushed out (only durable ones are, past five), and the last sequence of
those pushed out is kept (``ProducerEntry.floor_seq``): a client keeps five batches in flight, which push
every durable one out, so when all five fail (a ledger that lost its ack quorum) and are forgotten, the
producer's place is that floor, not "no batch yet" - which answered the client's resend
OUT_OF_ORDER_SEQUENCE_NUMBER, fatal for it (issue #24, the bookie-quorum fault).
"""

from __future__ import annotations

import asyncio
import bisect
import struct
import time
from collections import deque
from dataclasses import dataclass, field
from typing import NamedTuple, TypedDict

from kop.protocol.errors import ErrorCode

Buffer = bytes | bytearray | memoryview

MAX_BATCHES_PER_PRODUCER = 5
INT32_MAX = 2**31 - 1
SNAPSHOT_VERSION = 2  # 2 added each producer's floor sequence; 1 is still read (its floor is unknown: -1)
SNAPSHOT_MAX_PRODUCERS = 500
SNAPSHOT_MAX_ABORTED = 3000  # ~45 bytes each in JSON: the snapshot stays well under 200 KB

# Control record types (Kafka's ControlRecordType): the key is int16 version 0 + int16 type.
ABORT, COMMIT = 0, 1
_PID_EPOCH_SEQ = struct.Struct(">qhi")  # producerId, producerEpoch, baseSequence at byte 43
_ATTRIBUTES = struct.Struct(">h")  # at byte 21
_TRANSACTIONAL, _CONTROL = 0x10, 0x20


# One producer in a snapshot: producer id, epoch, coordinator epoch, last timestamp, in transaction (0/1),
# last seen (ms), its last batches as [first sequence, last sequence, base offset], and (version 2) its
# floor sequence (ProducerEntry.floor_seq).
SnapshotProducer = tuple[int, int, int, int, int, int, list[list[int]], int]


class ProducerStateSnapshot(TypedDict):
    """The JSON a partition's producer state is stored as (the managed-ledger property kop.producerState)."""

    v: int  # SNAPSHOT_VERSION
    offset: int  # the state is as of this offset: replay from it on rebuilds the rest
    producers: list[SnapshotProducer]
    ongoing: list[list[int]]  # [producer id, first offset] of the open transactions
    aborted: list[list[int]]  # AbortedTxn rows, oldest first
    dropped_aborted: int  # older aborted transactions that did not fit


class SequenceError(Exception):
    """A batch or marker refused with Kafka's error name (`error`; `code` is its number)."""

    def __init__(self, error: str, message: str) -> None:
        super().__init__(message)
        self.error = error
        self.message = message

    @property
    def code(self) -> ErrorCode:
        return ErrorCode[self.error]


@dataclass(slots=True)
class BatchRecord:
    first_seq: int
    last_seq: int
    base_offset: asyncio.Future[int] | int  # a future while the append is in flight


@dataclass(slots=True)
class ProducerEntry:
    epoch: int
    # the last MAX_BATCHES_PER_PRODUCER durable batches, and every batch after them still in flight (`_trim`)
    batches: deque[BatchRecord] = field(default_factory=deque)
    last_seen_ms: int = 0
    last_timestamp: int = -1
    coordinator_epoch: int = -1
    in_txn: bool = False  # producer view: a transactional batch was accepted and no marker since
    # The last sequence of the durable batches pushed out of `batches` (all older than those in it): where
    # the producer stands when every remembered batch failed and was forgotten. -1: none pushed out yet.
    floor_seq: int = -1

    @property
    def last_seq(self) -> int:
        return self.batches[-1].last_seq if self.batches else self.floor_seq


class AbortedTxn(NamedTuple):
    """One entry of the aborted-transaction index (Kafka's AbortedTxn, without its version field)."""

    producer_id: int
    first_offset: int
    last_offset: int  # the ABORT marker's offset
    last_stable_offset: int


def _next_seq(seq: int, count: int) -> int:
    """Sequences wrap at Int32.MAX like Kafka's."""
    n = seq + count
    return n - INT32_MAX - 1 if n > INT32_MAX else n


def _trim(entry: ProducerEntry) -> None:
    """Push the oldest batches out past MAX_BATCHES_PER_PRODUCER, durable ones only (Kafka remembers five;
    a batch in flight stays until it is durable or forgotten, so a failure never leaves a floor above it)."""
    batches = entry.batches
    while len(batches) > MAX_BATCHES_PER_PRODUCER and isinstance(batches[0].base_offset, int):
        entry.floor_seq = batches.popleft().last_seq


def _varint(view: memoryview, pos: int) -> tuple[int, int]:
    shift = value = 0
    while True:
        b = view[pos]
        pos += 1
        value |= (b & 0x7F) << shift
        if not b & 0x80:
            return (value >> 1) ^ -(value & 1), pos
        shift += 7
        if shift > 63:
            raise ValueError("varint too long")


def control_marker(batch: Buffer) -> tuple[int, int]:
    """(control type, coordinator epoch) of a control batch's single record: ABORT 0 / COMMIT 1 (others
    are KRaft's), and the EndTransactionMarker value's coordinator epoch (-1 when the value is too short).
    The record: length, attributes (int8), timestampDelta, offsetDelta, key length, key = int16 version +
    int16 type, value length, value = int16 version + int32 coordinator epoch. ValueError when it does not
    parse."""
    view = memoryview(batch)
    try:
        _, pos = _varint(view, 61)  # record length
        pos += 1  # attributes
        _, pos = _varint(view, pos)  # timestamp delta
        _, pos = _varint(view, pos)  # offset delta
        key_len, pos = _varint(view, pos)
        if key_len < 4 or pos + key_len > len(view):
            raise ValueError("control record key is too short")
        kind = int(struct.unpack_from(">h", view, pos + 2)[0])
        pos += key_len
        value_len, pos = _varint(view, pos)
        epoch = -1
        if value_len >= 6 and pos + 6 <= len(view):
            epoch = int(struct.unpack_from(">i", view, pos + 2)[0])
        return kind, epoch
    except IndexError:
        raise ValueError("control record is truncated") from None


def control_type(batch: Buffer) -> int:
    """The control type of a control batch (see control_marker)."""
    return control_marker(batch)[0]


class ProducerStateTable:
    """Producer states of one partition (see the module docstring)."""

    def __init__(self) -> None:
        self.producers: dict[int, ProducerEntry] = {}
        self.ongoing: dict[int, int] = {}  # pid -> first offset of its open transaction (log view)
        self.completing: dict[int, tuple[int, int]] = {}  # marker offset -> (pid, first offset) until durable
        self.aborted: list[AbortedTxn] = []  # in marker-offset order
        self._aborted_last: list[int] = []  # last offsets of `aborted`, for bisection
        self._aborted_by_pid: dict[int, list[tuple[int, int]]] = {}
        self.snapshot_offset: int | None = None  # replay start of the stored snapshot (None: none stored)

    # ------------------------------------------------------------------ produce side

    def check(self, producer_id: int, epoch: int, first_seq: int, count: int,
              transactional: bool = False) -> BatchRecord | None:
        """Validate a batch about to be appended. Returns the earlier BatchRecord when the batch is a
        duplicate, None when it must be appended. Raises SequenceError with Kafka's error otherwise."""
        if producer_id < 0:
            if transactional:
                raise SequenceError("INVALID_RECORD", "A transactional batch needs a producer id")
            return None
        last_seq = _next_seq(first_seq, count - 1)
        entry = self.producers.get(producer_id)
        if entry is None:
            if first_seq != 0:
                # No state for this producer (never seen, or expired): Kafka answers UNKNOWN_PRODUCER_ID so
                # the client resets its sequence (KIP-360) instead of failing fatally.
                raise SequenceError(
                    "UNKNOWN_PRODUCER_ID", f"No state for producer {producer_id}; expected sequence 0, got {first_seq}"
                )
            return None
        if epoch < entry.epoch:
            raise SequenceError(
                "INVALID_PRODUCER_EPOCH", f"Epoch {epoch} of producer {producer_id} is older than {entry.epoch}"
            )
        if not transactional and entry.in_txn:
            raise SequenceError(
                "INVALID_TXN_STATE",
                f"Producer {producer_id} wrote a non-transactional batch while its transaction is open")
        if epoch > entry.epoch:
            if first_seq != 0:
                raise SequenceError(
                    "OUT_OF_ORDER_SEQUENCE_NUMBER",
                    f"A new epoch {epoch} of producer {producer_id} must start at sequence 0, got {first_seq}",
                )
            return None
        for b in entry.batches:
            if b.first_seq == first_seq and b.last_seq == last_seq:
                return b
        expected = _next_seq(entry.last_seq, 1)
        if first_seq != expected:
            raise SequenceError(
                "OUT_OF_ORDER_SEQUENCE_NUMBER",
                f"Out of order sequence number for producer {producer_id}: expected {expected}, got {first_seq}",
            )
        return None

    def needs_verification(self, producer_id: int, epoch: int) -> bool:
        """Whether a transactional batch would open a transaction here (KIP-890 part 1: the coordinator
        is asked before the first batch of a transaction on a partition)."""
        entry = self.producers.get(producer_id)
        return entry is None or not entry.in_txn or entry.epoch != epoch

    def record(self, producer_id: int, epoch: int, first_seq: int, count: int,
               base_offset: asyncio.Future[int] | int, transactional: bool = False,
               timestamp: int = -1) -> BatchRecord | None:
        if producer_id < 0:
            return None
        entry = self.producers.get(producer_id)
        if entry is None or epoch != entry.epoch:
            old = entry
            entry = ProducerEntry(epoch)  # a new epoch starts over (its transaction, if any, was ended)
            if old is not None:
                entry.coordinator_epoch = old.coordinator_epoch
            self.producers[producer_id] = entry
        rec = BatchRecord(first_seq, _next_seq(first_seq, count - 1), base_offset)
        entry.batches.append(rec)
        _trim(entry)
        entry.last_seen_ms = int(time.time() * 1000)
        if timestamp >= 0:
            entry.last_timestamp = timestamp
        if transactional:
            entry.in_txn = True
        return rec

    def settled(self, producer_id: int, rec: BatchRecord, base_offset: int) -> None:
        """A batch's append is durable at `base_offset`: it may now be pushed out of the window."""
        rec.base_offset = base_offset
        entry = self.producers.get(producer_id)
        if entry is not None:
            _trim(entry)

    def forget(self, producer_id: int, rec: BatchRecord) -> None:
        """Drop a batch whose append failed, so the client's retry is not mistaken for a duplicate. A log
        fails its adds in order, every later one with the first, so what stays is a prefix: the producer
        stands at the last batch left, or at `floor_seq` when none is (a batch in flight is never pushed out,
        so the floor is a durable one's)."""
        entry = self.producers.get(producer_id)
        if entry is not None:
            try:
                entry.batches.remove(rec)
            except ValueError:
                pass

    def expire(self, older_than_ms: int) -> None:
        """Forget idle producers (producer.id.expiration.ms), never one with an open transaction."""
        for pid in [pid for pid, e in self.producers.items()
                    if e.last_seen_ms < older_than_ms and not e.in_txn and pid not in self.ongoing]:
            del self.producers[pid]

    # ------------------------------------------------------------------ markers

    def begin_marker(self, producer_id: int, epoch: int, coordinator_epoch: int) -> None:
        """Accept a marker for writing (Kafka's checks of WriteTxnMarkers at the partition): an older
        coordinator epoch is fenced, an older producer epoch is INVALID_PRODUCER_EPOCH. A producer this
        partition never saw gets its marker all the same (Kafka writes it even with no data here)."""
        entry = self.producers.get(producer_id)
        if entry is not None:  # in Kafka's order: the producer epoch first
            if epoch < entry.epoch:
                raise SequenceError(
                    "INVALID_PRODUCER_EPOCH",
                    f"Marker epoch {epoch} of producer {producer_id} is older than {entry.epoch}")
            if coordinator_epoch < entry.coordinator_epoch:
                raise SequenceError(
                    "TRANSACTION_COORDINATOR_FENCED",
                    f"Coordinator epoch {coordinator_epoch} is older than {entry.coordinator_epoch} "
                    f"for producer {producer_id}")
        self._end_in_producer_view(producer_id, epoch, coordinator_epoch)

    def _end_in_producer_view(self, producer_id: int, epoch: int, coordinator_epoch: int) -> None:
        entry = self.producers.get(producer_id)
        if entry is None or epoch > entry.epoch:
            entry = ProducerEntry(epoch)  # a new epoch starts its sequences over
            self.producers[producer_id] = entry
        entry.in_txn = False
        entry.coordinator_epoch = max(entry.coordinator_epoch, coordinator_epoch)
        entry.last_seen_ms = int(time.time() * 1000)

    # ------------------------------------------------------------------ log side

    def on_issue(self, base_offset: int, last_offset: int, batch: Buffer) -> None:
        """The entry holding `batch` takes offsets base..last (called in log order for transactional and
        control batches, from the index interceptor or from replay)."""
        (attributes,) = _ATTRIBUTES.unpack_from(batch, 21)
        pid = _PID_EPOCH_SEQ.unpack_from(batch, 43)[0]
        if attributes & _CONTROL:
            try:
                kind = control_type(batch)
            except (ValueError, IndexError, struct.error):
                return  # we only store markers we built; anything else is not a transaction's end
            if kind in (ABORT, COMMIT):
                self.apply_marker(pid, kind == COMMIT, base_offset)
        elif attributes & _TRANSACTIONAL and pid not in self.ongoing:
            self.ongoing[pid] = base_offset

    def apply_marker(self, producer_id: int, commit: bool, offset: int) -> None:
        first = self.ongoing.pop(producer_id, None)
        if first is None:
            return  # no data of this transaction here: nothing to index
        self.completing[offset] = (producer_id, first)
        if not commit:
            others = [f for f in self.ongoing.values()]
            lso = min(others) if others else offset + 1
            self._add_aborted(AbortedTxn(producer_id, first, offset, lso))

    def unissue(self, base_offset: int, batch: Buffer) -> None:
        """The add that took `base_offset` failed: undo what on_issue did for it."""
        (attributes,) = _ATTRIBUTES.unpack_from(batch, 21)
        pid = _PID_EPOCH_SEQ.unpack_from(batch, 43)[0]
        if attributes & _CONTROL:
            done = self.completing.pop(base_offset, None)
            if done is not None:
                self.ongoing.setdefault(done[0], done[1])
            if self.aborted and self.aborted[-1].last_offset == base_offset:
                gone = self.aborted.pop()
                self._aborted_last.pop()
                ranges = self._aborted_by_pid.get(gone.producer_id)
                if ranges:
                    ranges.pop()
        elif self.ongoing.get(pid) == base_offset:
            del self.ongoing[pid]

    def _add_aborted(self, txn: AbortedTxn) -> None:
        self.aborted.append(txn)
        self._aborted_last.append(txn.last_offset)
        self._aborted_by_pid.setdefault(txn.producer_id, []).append((txn.first_offset, txn.last_offset))

    def durable(self, index: int) -> None:
        """Entries up to `index` are durable: completed transactions below it stop holding the LSO."""
        if self.completing:
            for off in [o for o in self.completing if o <= index]:
                del self.completing[off]

    def first_unstable_offset(self) -> int | None:
        firsts = list(self.ongoing.values()) + [first for _, first in self.completing.values()]
        return min(firsts) if firsts else None

    def last_stable_offset(self, high_watermark: int, log_start_offset: int) -> int:
        if not self.ongoing and not self.completing:
            return high_watermark
        first = self.first_unstable_offset()
        assert first is not None
        return min(max(first, log_start_offset), high_watermark)

    def aborted_between(self, fetch_offset: int, upper: int) -> list[AbortedTxn]:
        """Aborted transactions a read_committed fetch of [fetch_offset, upper) must carry: those whose
        last offset >= fetch_offset and first offset < upper, sorted by first offset (clients assume it)."""
        i = bisect.bisect_left(self._aborted_last, fetch_offset)
        found = [t for t in self.aborted[i:] if t.first_offset < upper]
        found.sort(key=lambda t: t.first_offset)
        return found

    def is_aborted(self, producer_id: int, offset: int) -> bool:
        """Whether a transactional batch of `producer_id` at `offset` belongs to an aborted transaction."""
        ranges = self._aborted_by_pid.get(producer_id)
        if not ranges:
            return False
        return any(first <= offset <= last for first, last in ranges)

    def prune(self, log_start_offset: int) -> None:
        """Drop aborted-index entries wholly below the log start (their data is gone)."""
        i = bisect.bisect_left(self._aborted_last, log_start_offset)
        if i:
            kept = self.aborted[i:]
            self.aborted, self._aborted_last, self._aborted_by_pid = [], [], {}
            for t in kept:
                self._add_aborted(t)

    # ------------------------------------------------------------------ rebuild

    def replay(self, base_offset: int, batch: Buffer) -> None:
        """Apply one stored batch (header fields only, plus a control record's type) while rebuilding."""
        (attributes,) = _ATTRIBUTES.unpack_from(batch, 21)
        pid, epoch, seq = _PID_EPOCH_SEQ.unpack_from(batch, 43)
        if pid < 0:
            return
        if attributes & _CONTROL:
            try:
                coordinator_epoch = control_marker(batch)[1]
            except ValueError:
                coordinator_epoch = -1
            self._end_in_producer_view(pid, epoch, coordinator_epoch)
            self.on_issue(base_offset, base_offset, batch)
            return
        lod = struct.unpack_from(">i", batch, 23)[0]
        ts = struct.unpack_from(">q", batch, 35)[0]
        # lastOffsetDelta + 1, not the record count: compaction removes records from a batch but keeps its
        # lastOffsetDelta, so the producer's last sequence stays base + lastOffsetDelta.
        transactional = bool(attributes & _TRANSACTIONAL)
        self.record(pid, epoch, seq, lod + 1, base_offset, transactional, ts)
        if transactional:
            self.on_issue(base_offset, base_offset + lod, batch)

    def to_snapshot(self, offset: int, max_producers: int = SNAPSHOT_MAX_PRODUCERS,
                    max_aborted: int = SNAPSHOT_MAX_ABORTED) -> ProducerStateSnapshot:
        """The state as of `offset` (the durable end: every entry below it is durable) as a JSON-able
        dict; replay from `offset` on rebuilds the rest. What belongs to entries at or past `offset`
        (appends in flight) is left out - replay will meet them - and transactions whose marker is still in
        flight count as ongoing.

        Bounded (the snapshot lives in the managed-ledger info, which ZooKeeper caps at 1 MB and which is
        rewritten at each ledger roll): producers with an open transaction and then the most recently seen
        ones up to `max_producers` (a forgotten producer's next batch gets UNKNOWN_PRODUCER_ID, and its
        client starts its sequence over, KIP-360), and the newest `max_aborted` aborted transactions;
        `dropped_aborted` in the result says how many older ones did not fit."""
        kept_pids = sorted(self.producers, key=lambda pid: (not (self.producers[pid].in_txn or pid in self.ongoing),
                                                            -self.producers[pid].last_seen_ms))[:max_producers]
        producers: list[SnapshotProducer] = []
        for pid in kept_pids:
            e = self.producers[pid]
            batches: list[list[int]] = []
            for b in e.batches:
                off = b.base_offset
                if not isinstance(off, int):
                    if not off.done() or off.cancelled() or off.exception() is not None:
                        continue
                    off = off.result()
                if off < offset:
                    batches.append([b.first_seq, b.last_seq, off])
            producers.append((pid, e.epoch, e.coordinator_epoch, e.last_timestamp, int(e.in_txn), e.last_seen_ms,
                              batches, e.floor_seq))
        ongoing = {pid: first for pid, first in self.ongoing.items() if first < offset}
        for marker, (pid, first) in self.completing.items():
            if marker >= offset:
                ongoing[pid] = first
        aborted = [list(t) for t in self.aborted if t.last_offset < offset]
        dropped = max(0, len(aborted) - max_aborted)
        return {"v": SNAPSHOT_VERSION, "offset": offset, "producers": producers,
                "ongoing": [[pid, first] for pid, first in ongoing.items()],
                "aborted": aborted[dropped:], "dropped_aborted": dropped}

    @classmethod
    def from_snapshot(cls, snap: ProducerStateSnapshot) -> ProducerStateTable:
        if snap.get("v") not in (1, SNAPSHOT_VERSION):
            raise ValueError(f"unknown producer-state snapshot version {snap.get('v')}")
        t = cls()
        for producer in snap["producers"]:
            pid, epoch, coord, last_ts, in_txn, seen, batches = producer[:7]
            e = ProducerEntry(epoch, last_seen_ms=seen, last_timestamp=last_ts, coordinator_epoch=coord,
                              in_txn=bool(in_txn), floor_seq=producer[7] if len(producer) > 7 else -1)
            for first, last, off in batches:
                e.batches.append(BatchRecord(first, last, off))
            _trim(e)
            t.producers[pid] = e
        t.ongoing = {pid: first for pid, first in snap["ongoing"]}
        for row in snap["aborted"]:
            t._add_aborted(AbortedTxn(*row))
        t.snapshot_offset = snap["offset"]
        return t
