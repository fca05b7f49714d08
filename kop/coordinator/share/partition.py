"""One share-partition's delivery state (KIP-932's SharePartition), sans-IO: times are the caller's `now` (ms).

A share group consumes a topic-partition cooperatively: each record is handed to one consumer at a time
under an acquisition lock, and that consumer acknowledges it. The state covers the in-flight window
[start_offset, end_offset) - Kafka's SPSO and SPEO: every offset below the SPSO is done (acknowledged or
archived) and every offset from the SPEO on has never been delivered. Within the window each offset has a
state (AVAILABLE, ACQUIRED, ACKNOWLEDGED, ARCHIVED), a delivery count and, while ACQUIRED, its owner and
lock deadline. The rules are Kafka's (SharePartition):

- Acquiring an offset adds one to its delivery count and locks it for `lock_ms` to the member.
- ACCEPT makes it ACKNOWLEDGED, REJECT (and GAP: an offset with no record) ARCHIVED, RELEASE AVAILABLE again;
  a lock that times out releases it too. A released record whose delivery count reached `delivery_limit`
  is ARCHIVED instead (Kafka's share.delivery.count.limit, 5 by default): it is not delivered again.
- Only the member holding the lock may acknowledge an offset; any other acknowledgement is refused whole
  with INVALID_RECORD_STATE (nothing of that batch is applied, as Kafka validates before it applies).
- The SPSO moves over the done prefix of the window, so the state kept is only the in-flight records.
- At most `max_in_flight` offsets are in the window (Kafka's group.share.partition.max.record.locks,
  2000): acquisition stops there until the SPSO moves.
- Dead-letter queue (share.version 2, KIP-1191): with `dlq` on (the group names a DLQ topic), a REJECTed
  record and one archived at the delivery limit are also listed in `dead` - (first, last, delivery count,
  cause) runs with Kafka's cause messages - which the coordinator writes to the DLQ topic (dlq.py).
The record batches themselves stay opaque: acquisition is told which offset ranges the log holds (one
range per stored batch) and answers the ranges acquired, as ShareFetch's AcquiredRecords.
"""

from __future__ import annotations

import enum
from collections.abc import Iterable
from dataclasses import dataclass

from kop.protocol.errors import ErrorCode

DEFAULT_LOCK_MS = 30_000
DEFAULT_DELIVERY_LIMIT = 5
DEFAULT_MAX_IN_FLIGHT = 2000
#: Kafka's ShareGroupDLQManager causes, the DLQ record's __dlq.errors.message header
CLIENT_REJECT = "Offset rejected by client."
DELIVERY_COUNT_EXCEEDED = "Offset delivery count exceeded the threshold."
DeadRun = tuple[int, int, int, str]  # (first offset, last offset, delivery count, cause)


class RecordState(enum.IntEnum):
    """Kafka's RecordState ids (the same numbers are written in its share-state records)."""
    AVAILABLE = 0
    ACQUIRED = 1
    ACKNOWLEDGED = 2
    ARCHIVED = 4


class AckType(enum.IntEnum):
    """ShareFetch/ShareAcknowledge AcknowledgeTypes (RENEW: v2, KIP-1222)."""
    GAP = 0
    ACCEPT = 1
    RELEASE = 2
    REJECT = 3
    RENEW = 4  # keep the records, their lock starting again


_ACK_TYPES = frozenset(int(t) for t in AckType)


@dataclass(slots=True)
class _InFlight:
    state: RecordState = RecordState.AVAILABLE
    delivery_count: int = 0
    member: str | None = None
    deadline: int = 0


@dataclass(frozen=True, slots=True)
class Acquired:
    """A run of acquired offsets with one delivery count (ShareFetch's AcquiredRecords)."""
    first: int
    last: int
    delivery_count: int


class SharePartition:
    """The delivery state of one topic-partition in one share group."""

    def __init__(self, start_offset: int, lock_ms: int = DEFAULT_LOCK_MS,
                 delivery_limit: int = DEFAULT_DELIVERY_LIMIT, max_in_flight: int = DEFAULT_MAX_IN_FLIGHT) -> None:
        self.start_offset = start_offset  # SPSO
        self.end_offset = start_offset  # SPEO: the first offset never acquired
        self.lock_ms = lock_ms
        self.delivery_limit = delivery_limit
        self.max_in_flight = max_in_flight
        self._offsets: dict[int, _InFlight] = {}  # offsets of [SPSO, SPEO) that are not plain new AVAILABLE
        self.dlq = False  # whether archived records go to the group's dead-letter queue
        self.dead: list[DeadRun] = []  # records for the DLQ, not yet taken by the coordinator

    # ------------------------------------------------------------------ reading
    def state(self, offset: int) -> tuple[RecordState, int]:
        """(state, delivery count) of an offset; below the SPSO every offset counts as ARCHIVED/done."""
        if offset < self.start_offset:
            return RecordState.ARCHIVED, 0
        f = self._offsets.get(offset)
        return (f.state, f.delivery_count) if f is not None else (RecordState.AVAILABLE, 0)

    def next_fetch_offset(self) -> int:
        """Where a fetch should read from: the first AVAILABLE offset of the window, else the SPEO."""
        for off in range(self.start_offset, self.end_offset):
            f = self._offsets.get(off)
            if f is None or f.state == RecordState.AVAILABLE:
                return off
        return self.end_offset

    def lag(self, high_watermark: int) -> int:
        """Records not yet consumed (KIP-1226's share-partition lag): those from the SPSO to the high watermark,
        less the acknowledged and archived ones of the in-flight window."""
        done = sum(1 for f in self._offsets.values() if f.state in (RecordState.ACKNOWLEDGED, RecordState.ARCHIVED))
        return max(high_watermark - self.start_offset - done, 0)

    def acquired_by(self, member: str) -> list[int]:
        return sorted(o for o, f in self._offsets.items() if f.state == RecordState.ACQUIRED and f.member == member)

    def next_deadline(self) -> int | None:
        """The earliest acquisition lock deadline, for the caller's timer."""
        deadlines = [f.deadline for f in self._offsets.values() if f.state == RecordState.ACQUIRED]
        return min(deadlines) if deadlines else None

    # ------------------------------------------------------------------ acquiring
    def acquire(self, member: str, ranges: Iterable[tuple[int, int]], max_records: int, now: int,
                strict: bool = False) -> list[Acquired]:
        """Acquire for `member` the AVAILABLE offsets of `ranges` (the log's batches in offset order, inclusive
        ranges), batch by batch until `max_records` are taken (the last batch is taken whole, as Kafka's
        batch-optimized mode may exceed the limit to keep batch boundaries; `strict`, its record-limit mode,
        stops at the limit) or the window is full."""
        taken: list[int] = []
        counts: dict[int, int] = {}
        for first, last in ranges:
            if len(taken) >= max_records:
                break
            if first > self.end_offset:
                if self.end_offset - self.start_offset >= self.max_in_flight:
                    break  # the window is full: the offsets past it are not a gap, they wait for the SPSO to move
                self.skip(self.end_offset, first - 1)  # offsets the log does not hold (compacted away)
            for off in range(max(first, self.start_offset), last + 1):
                if strict and len(taken) >= max_records:
                    break
                if off >= self.end_offset:
                    if off - self.start_offset >= self.max_in_flight:
                        break
                    self.end_offset = off + 1
                f = self._offsets.setdefault(off, _InFlight())
                if f.state != RecordState.AVAILABLE:
                    continue
                f.state, f.member, f.deadline = RecordState.ACQUIRED, member, now + self.lock_ms
                f.delivery_count += 1
                taken.append(off)
                counts[off] = f.delivery_count
        return _runs(taken, counts)

    def skip(self, first: int, last: int) -> None:
        """Offsets the log has but no consumer gets (control batches, records of aborted transactions): done
        without being delivered, so the SPSO passes them."""
        for off in range(max(first, self.start_offset), last + 1):
            f = self._offsets.setdefault(off, _InFlight())
            if f.state == RecordState.AVAILABLE:
                f.state = RecordState.ARCHIVED
        self.end_offset = max(self.end_offset, last + 1)
        self._advance()

    # ------------------------------------------------------------------ acknowledging
    def acknowledge(self, member: str, first: int, last: int, types: list[int], now: int = 0) -> int:
        """Apply one AcknowledgementBatch: `types` has one type for the whole range or one per offset.
        Answers 0, INVALID_REQUEST for a malformed batch (negative or reversed offsets, a type count that is
        neither 1 nor the range's length, an unknown type), or INVALID_RECORD_STATE when an offset is not
        ACQUIRED by this member - offsets past what was ever acquired, or below the start offset but for GAPs,
        included (then nothing of the batch is applied). The work is bounded by the in-flight window, whatever
        range a hostile batch names."""
        n = last - first + 1
        if first < 0 or n <= 0 or len(types) not in (1, n) or any(t not in _ACK_TYPES for t in types):
            return ErrorCode.INVALID_REQUEST
        if last >= self.end_offset:
            return ErrorCode.INVALID_RECORD_STATE
        if first < self.start_offset:  # done offsets: only GAPs may name them
            below = types[:1] if len(types) == 1 else types[:self.start_offset - first]
            if any(t != AckType.GAP for t in below):
                return ErrorCode.INVALID_RECORD_STATE
        lo = max(first, self.start_offset)

        def kind(off: int) -> int:
            return types[0] if len(types) == 1 else types[off - first]

        for off in range(lo, last + 1):
            f = self._offsets.get(off)
            if f is None or f.state != RecordState.ACQUIRED or f.member != member:
                return ErrorCode.INVALID_RECORD_STATE
        for off in range(lo, last + 1):
            f = self._offsets[off]
            k = kind(off)
            if k == AckType.ACCEPT:
                self._finish(f, RecordState.ACKNOWLEDGED)
            elif k == AckType.RENEW:
                f.deadline = now + self.lock_ms
            elif k == AckType.RELEASE:
                self._release(f, off)
            else:  # REJECT, GAP
                if k == AckType.REJECT:
                    self._dead(off, f.delivery_count, CLIENT_REJECT)
                self._finish(f, RecordState.ARCHIVED)
        self._advance()
        return 0

    def release_member(self, member: str) -> int:
        """A member left or its share session closed: its acquired records are released (AVAILABLE, or ARCHIVED
        at the delivery limit). Answers how many."""
        released = 0
        for off, f in self._offsets.items():
            if f.state == RecordState.ACQUIRED and f.member == member:
                self._release(f, off)
                released += 1
        self._advance()
        return released

    def expire_locks(self, now: int) -> int:
        """Release the records whose acquisition lock timed out by `now`; answers how many."""
        expired = 0
        for off, f in self._offsets.items():
            if f.state == RecordState.ACQUIRED and f.deadline <= now:
                self._release(f, off)
                expired += 1
        self._advance()
        return expired

    def _release(self, f: _InFlight, offset: int) -> None:
        if f.delivery_count >= self.delivery_limit:
            self._dead(offset, f.delivery_count, DELIVERY_COUNT_EXCEEDED)
            self._finish(f, RecordState.ARCHIVED)
        else:
            self._finish(f, RecordState.AVAILABLE)

    def _dead(self, offset: int, delivery_count: int, cause: str) -> None:
        """A record archived for the dead-letter queue (when the group has one), merged into the last run."""
        if not self.dlq:
            return
        if self.dead and self.dead[-1][1] == offset - 1 and self.dead[-1][2:] == (delivery_count, cause):
            self.dead[-1] = (self.dead[-1][0], offset, delivery_count, cause)
        else:
            self.dead.append((offset, offset, delivery_count, cause))

    def take_dead(self) -> list[DeadRun]:
        out, self.dead = self.dead, []
        return out

    @staticmethod
    def _finish(f: _InFlight, state: RecordState) -> None:
        f.state, f.member, f.deadline = state, None, 0

    def _advance(self) -> None:
        """Move the SPSO over the done (ACKNOWLEDGED / ARCHIVED) prefix, forgetting it."""
        off = self.start_offset
        while off < self.end_offset:
            f = self._offsets.get(off)
            if f is None or f.state not in (RecordState.ACKNOWLEDGED, RecordState.ARCHIVED):
                break
            del self._offsets[off]
            off += 1
        self.start_offset = off

    def snapshot(self) -> tuple[int, list[tuple[int, int, int, int]]]:
        """(start offset, state batches) to persist: runs of (first, last, state, delivery count) over the
        window's offsets with state, ACQUIRED ones as AVAILABLE (a lock does not survive a restart)."""
        out: list[tuple[int, int, int, int]] = []
        for off in sorted(self._offsets):
            f = self._offsets[off]
            state = RecordState.AVAILABLE if f.state == RecordState.ACQUIRED else f.state
            if out and out[-1][1] == off - 1 and out[-1][2:] == (state, f.delivery_count):
                out[-1] = (out[-1][0], off, int(state), f.delivery_count)
            else:
                out.append((off, off, int(state), f.delivery_count))
        return self.start_offset, out

    def restore(self, batches: Iterable[tuple[int, int, int, int]]) -> None:
        """Take back persisted state batches (over a SharePartition made at their start offset)."""
        for first, last, state, count in batches:
            for off in range(max(first, self.start_offset), last + 1):
                self._offsets[off] = _InFlight(RecordState(state), count)
            self.end_offset = max(self.end_offset, last + 1)
        self._advance()

    def reset_start(self, offset: int) -> None:
        """Move an idle share-partition to `offset` (AlterShareGroupOffsets, or the log start moved past it)."""
        self._offsets = {o: f for o, f in self._offsets.items() if o >= offset}
        self.start_offset = offset
        self.end_offset = max(self.end_offset, offset)


def _runs(offsets: list[int], counts: dict[int, int]) -> list[Acquired]:
    """Contiguous offsets with the same delivery count, as AcquiredRecords ranges."""
    out: list[Acquired] = []
    for off in offsets:
        c = counts[off]
        if out and out[-1].last == off - 1 and out[-1].delivery_count == c:
            out[-1] = Acquired(out[-1].first, off, c)
        else:
            out.append(Acquired(off, off, c))
    return out
