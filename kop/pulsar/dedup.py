"""Message de-duplication by producer name and sequence id (`brokerDeduplicationEnabled`), per partition.

Pulsar's rule (MessageDeduplication): the broker remembers, per producer name, the highest sequence id pushed
(in flight included) and the highest persisted. A SEND whose sequence id is not above the persisted one is a
duplicate: it is not stored and its receipt names no entry (ledger -1, entry -1); one above the persisted id but
not above the pushed one may be a resend of a message still being written (its fate unknown): it gets a
SEND_ERROR, and the client sends it again later. After a failed append the producer's pushed id goes back to
the persisted one, and its later SENDs on that connection are refused until the client reconnects and resends
them (Pulsar fences the topic and disconnects its producers), so no later message is stored behind a hole.
PRODUCER_SUCCESS tells a producer that comes back its `last_sequence_id`, so the client resumes after it.

Persistence, as Pulsar does: a snapshot in a cursor named `pulsar.dedup` of the partition's managed ledger, whose
properties map producer names to their highest persisted sequence id (kop/managed_ledger/cursor.py; written
coalesced after appends), plus a replay of the entries after it. Every entry a Pulsar producer appends keeps its
producer name and the SEND's highest sequence id in its MessageMetadata (kop/offset/entry_format.py), and the
snapshot says up to which offset it is complete (the property "" - never a producer's name: an unnamed producer
gets one from the broker); whoever loads the state next - this broker after a restart, or the broker that took
the partition over when its owner died or lost its session - reads the entries from there to the end and takes
each producer's highest sequence id. So a producer that resends after an owner change or a crash gets the right
`last_sequence_id` and its resends are dropped, not stored twice. The snapshot is made when the first
de-duplicated producer comes (before any of its SENDs), so there is always one to replay from. Differences: a
chunked message's chunks before its last are stored with the sequence id before the message's (only the last
chunk is checked and recorded, as Pulsar does); a snapshot written before this replay existed has no offset and
is taken as it is.
"""

from __future__ import annotations

import asyncio
import logging
from typing import TYPE_CHECKING

from kop.aio import SingleFlight
from kop.managed_ledger.cursor import CursorInfo
from kop.offset.entry_format import producer_and_sequence_of

if TYPE_CHECKING:
    from kop.pulsar.subscription import PartitionState

log = logging.getLogger(__name__)

CURSOR = "pulsar.dedup"
SNAPSHOT_OFFSET = ""  # the snapshot's property: the offset up to which it is complete (entries from it are replayed)
REPLAY_BYTES = 1 << 20  # per read of the replay
NOT_DUP, DUP, UNKNOWN = 0, 1, 2  # Pulsar's MessageDupStatus


class Deduplication:
    def __init__(self, state: PartitionState) -> None:
        self.state = state
        self.pushed: dict[str, int] = {}
        self.persisted: dict[str, int] = {}
        self.version = -1
        self.covered = 0  # the offset up to which `persisted` is complete (the snapshot's SNAPSHOT_OFFSET)
        self._loaded = False
        self._loading: SingleFlight[str, None] = SingleFlight()
        self._dirty = False
        self._saver: asyncio.Task[None] | None = None

    async def load(self) -> None:
        """Load the state once; concurrent PRODUCERs share the load (kop.aio.SingleFlight: one of them cancelled
        with its connection cancels it for none of the others - awaited directly, the shared future was cancelled
        and stayed so, and every later PRODUCER of the partition ended its connection's command loop)."""
        if not self._loaded:
            await self._loading.run("", self._load_once)

    async def _load_once(self) -> None:
        if not self._loaded:
            await self._load()
            self._loaded = True

    async def _load(self) -> None:
        """The snapshot, then the entries after it (the module docstring); a first snapshot when there is none."""
        cursors, ledger = self.state.handler.cursors, self.state.ledger_name
        got = await cursors.load(ledger, CURSOR)
        if got is None:  # no de-duplicated producer here yet: snapshot the end, before its first SEND
            self.covered = self.state.plog.high_watermark
            try:
                self.version = await cursors.save(ledger, CURSOR, self._snapshot(), -1)
                return
            except Exception:  # made meanwhile (a previous owner still writing it): read it as any other
                got = await cursors.load(ledger, CURSOR)
                if got is None:
                    raise
        properties = dict(got[0].properties)
        start = properties.pop(SNAPSHOT_OFFSET, None)
        self.persisted, self.version = properties, got[1]
        if start is not None:
            self.covered = await self._replay(start)
        self.pushed = dict(self.persisted)

    async def _replay(self, start: int) -> int:
        """Each producer's highest sequence id in the entries from `start` on; returns the offset replayed to."""
        plog = self.state.plog
        offset, end, seen = max(start, plog.log_start_offset), plog.high_watermark, 0
        while offset < end:
            got = await plog.read(offset, REPLAY_BYTES)
            if not got.batches:
                break
            for fb in got.batches:
                name, seq = producer_and_sequence_of(fb.entry) if fb.entry is not None else ("", -1)
                if name and seq > self.persisted.get(name, -1):
                    self.persisted[name] = seq
                    seen += 1
            offset = got.next_offset
        if seen:
            log.info("%s: de-duplication replayed offsets %d..%d after its snapshot", self.state.ledger_name,
                     start, offset)
        return offset

    def _snapshot(self) -> CursorInfo:
        return CursorInfo(properties={**self.persisted, SNAPSHOT_OFFSET: self.covered})

    def last_sequence_id(self, producer: str) -> int:
        return self.persisted.get(producer, -1)

    def check(self, producer: str, sequence_id: int, highest: int) -> int:
        """Pulsar's MessageDeduplication.isDuplicate: NOT_DUP (`highest` is now the producer's pushed sequence
        id), DUP (a resend of what is stored: answered with a receipt naming no entry) or UNKNOWN: not above
        the pushed id but above the persisted one - a resend of a message whose first copy is still being
        written and may yet fail (a connection that dropped while its appends were pending, issue #24).
        Taking that for a duplicate loses the message when the first copy's append fails; Pulsar answers it
        with an error instead, and the client resends it later, when the first copy's fate is known."""
        if sequence_id > self.pushed.get(producer, -1):
            self.pushed[producer] = max(highest, sequence_id)
            return NOT_DUP
        return DUP if sequence_id <= self.persisted.get(producer, -1) else UNKNOWN

    def persisted_up_to(self, producer: str, highest: int, next_offset: int) -> None:
        """An entry of `producer` up to `highest` is durable, and so is everything before `next_offset` (appends
        complete in order)."""
        self.covered = max(self.covered, next_offset)
        if highest > self.pushed.get(producer, -1):
            # never pushed below persisted: a failure's reset (`failed`) may run before the callbacks of the
            # appends that were durable before it, and a resend of one of those must stay a duplicate
            self.pushed[producer] = highest
        if highest > self.persisted.get(producer, -1):
            self.persisted[producer] = highest
            self._dirty = True
            if self._saver is None or self._saver.done():
                self._saver = asyncio.get_running_loop().create_task(self._save())

    def not_pushed(self, producer: str, previous: int) -> None:
        """The message `check` just counted as pushed was never appended (its SEND was cancelled before): the
        pushed id goes back to `previous`, what it was before that check."""
        self.pushed[producer] = previous

    def failed(self, producer: str) -> None:
        """An append failed: what was pushed after the last persisted id may be sent again (the producer's
        later SENDs on that connection are refused meanwhile: kop/pulsar/produce.py `send`)."""
        self.pushed[producer] = self.persisted.get(producer, -1)

    async def _save(self) -> None:
        cursors = self.state.handler.cursors
        while self._dirty:
            self._dirty = False
            try:
                self.version = await cursors.save(self.state.ledger_name, CURSOR, self._snapshot(), self.version)
            except Exception as e:  # noqa: BLE001 - BadVersion (another owner) or a store outage
                log.warning("%s: de-duplication state not persisted: %s", self.state.ledger_name, e)
                try:
                    got = await cursors.load(self.state.ledger_name, CURSOR)
                    self.version = got[1] if got else -1
                except Exception:  # noqa: BLE001 - the next save tries again
                    pass
                return

    async def flush(self) -> None:
        if self._saver is not None and not self._saver.done():
            await self._saver
        if self._dirty:
            await self._save()
