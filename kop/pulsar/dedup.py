"""Message de-duplication by producer name and sequence id (`brokerDeduplicationEnabled`), per partition.

Pulsar's rule (MessageDeduplication): the broker remembers, per producer name, the highest sequence id pushed
(in flight included) and the highest persisted. A SEND whose sequence id is not above the persisted one is a
duplicate: it is not stored and its receipt names no entry (ledger -1, entry -1); one above the persisted id but
not above the pushed one may be a resend of a message still being written (its fate unknown): it gets a
SEND_ERROR, and the client sends it again later. After a failed append the producer's pushed id goes back to
the persisted one, and its later SENDs on that connection are refused until the client reconnects and resends
them (Pulsar fences the topic and disconnects its producers), so no later message is stored behind a hole.
PRODUCER_SUCCESS tells a producer that comes back its `last_sequence_id`, so the client resumes after it.

Persistence, as Pulsar does, in a cursor named `pulsar.dedup` of the partition's managed ledger, whose
properties map producer names to their highest persisted sequence id (kop/managed_ledger/cursor.py; written
coalesced after appends). Difference: Pulsar also replays the entries after that cursor's position at recovery,
so a crash loses nothing; our entries are Kafka batches that do not carry the producer name, so the few
sequence ids appended after the last write of the cursor are forgotten by a crash (a resend of those is
stored again). A clean stop writes the cursor.
"""

from __future__ import annotations

import asyncio
import logging
from typing import TYPE_CHECKING

from kop.managed_ledger.cursor import CursorInfo

if TYPE_CHECKING:
    from kop.pulsar.subscription import PartitionState

log = logging.getLogger(__name__)

CURSOR = "pulsar.dedup"
NOT_DUP, DUP, UNKNOWN = 0, 1, 2  # Pulsar's MessageDupStatus


class Deduplication:
    def __init__(self, state: PartitionState) -> None:
        self.state = state
        self.pushed: dict[str, int] = {}
        self.persisted: dict[str, int] = {}
        self.version = -1
        self._loaded: asyncio.Future[None] | None = None
        self._dirty = False
        self._saver: asyncio.Task[None] | None = None

    async def load(self) -> None:
        if self._loaded is None:
            self._loaded = asyncio.get_running_loop().create_future()
            try:
                got = await self.state.handler.cursors.load(self.state.ledger_name, CURSOR)
                if got is not None:
                    self.persisted = dict(got[0].properties)
                    self.pushed = dict(self.persisted)
                    self.version = got[1]
                self._loaded.set_result(None)
            except BaseException as e:
                self._loaded.set_exception(e)
                self._loaded.exception()
                self._loaded = None
                raise
        await self._loaded

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

    def persisted_up_to(self, producer: str, highest: int) -> None:
        if highest > self.persisted.get(producer, -1):
            self.persisted[producer] = highest
            self._dirty = True
            if self._saver is None or self._saver.done():
                self._saver = asyncio.get_running_loop().create_task(self._save())

    def failed(self, producer: str) -> None:
        """An append failed: what was pushed after the last persisted id may be sent again (the producer's
        later SENDs on that connection are refused meanwhile: kop/pulsar/produce.py `send`)."""
        self.pushed[producer] = self.persisted.get(producer, -1)

    async def _save(self) -> None:
        cursors = self.state.handler.cursors
        while self._dirty:
            self._dirty = False
            try:
                self.version = await cursors.save(self.state.ledger_name, CURSOR,
                                                  CursorInfo(properties=dict(self.persisted)), self.version)
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
