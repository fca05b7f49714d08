"""Writing replacement ledgers for a run of closed ledgers (log compaction).

A LedgerRewriter (from ManagedLedger.rewriter()) writes entries into fresh ledgers that no managed-ledger
info references yet, rolling to another ledger by the managed ledger's own size limits, then seals them.
ManagedLedger.replace_ledgers() then swaps them in with one compare-and-set of the info, and only after
that deletes the ledgers they replace. So a crash leaves either the old list or the new one:

* before the CAS, the new ledgers are unreferenced: LogStorage.collect_garbage() (kop/offset/storage.py) deletes them at start-up;
* after the CAS, the replaced ledgers are unreferenced until deleted: the same clean-up removes them.

Appends are pipelined (append_nowait, at most `window_bytes` in flight) so the store's group commit
makes one sync per batch of entries rather than one per entry.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections import deque
from collections.abc import Sequence
from typing import TYPE_CHECKING

from kop.managed_ledger.protobuf import LedgerInfo
from kop.storage.api import Buffer, LedgerStore, StorageError, WriteHandle

if TYPE_CHECKING:
    from kop.managed_ledger.ledger import ManagedLedger


def _size(data: Buffer | Sequence[Buffer]) -> int:
    if isinstance(data, bytes | bytearray | memoryview):
        return len(data)
    return sum(map(len, data))


class LedgerRewriter:
    def __init__(self, ml: ManagedLedger, store: LedgerStore, max_entries: int, max_bytes: int,
                 timestamp: int, window_bytes: int = 8 << 20) -> None:
        self.ml = ml
        self._store = store
        self._max_entries = max(1, max_entries)
        self._max_bytes = max(1, max_bytes)
        self._timestamp = timestamp
        self._window = window_bytes
        self._handle: WriteHandle | None = None
        self._entries = 0
        self._bytes = 0
        self._inflight: deque[tuple[asyncio.Future[int], int]] = deque()
        self._inflight_bytes = 0
        self._done: list[LedgerInfo] = []
        self._created: list[int] = []
        self._finished = False
        self.entries_written = 0
        self.bytes_written = 0

    @property
    def created_ledgers(self) -> list[int]:
        return list(self._created)

    async def add(self, data: Buffer | Sequence[Buffer]) -> None:
        """Append one entry to the current replacement ledger (rolling first when it is full). The
        buffers must stay unmodified until finish()."""
        if self._finished:
            raise StorageError("rewriter is finished")
        size = _size(data)
        if self._handle is not None and (self._entries >= self._max_entries or self._bytes >= self._max_bytes):
            await self._seal()
        if self._handle is None:
            self._handle = await self._store.create_ledger()
            self._created.append(self._handle.ledger_id)
            self._entries = self._bytes = 0
        fut = self._handle.append_nowait(data)
        self._inflight.append((fut, size))
        self._inflight_bytes += size
        self._entries += 1
        self._bytes += size
        self.entries_written += 1
        self.bytes_written += size
        while self._inflight_bytes > self._window:
            await self._settle_one()

    async def _settle_one(self) -> None:
        fut, size = self._inflight.popleft()
        self._inflight_bytes -= size
        await fut

    async def _seal(self) -> None:
        handle = self._handle
        if handle is None:
            return
        while self._inflight:
            await self._settle_one()
        await handle.close()
        self._done.append(LedgerInfo(handle.ledger_id, handle.last_add_confirmed + 1, handle.length,
                                     self._timestamp))
        self._handle = None

    async def finish(self) -> list[LedgerInfo]:
        """Wait for every entry, seal the last ledger; the infos to give replace_ledgers()."""
        await self._seal()
        self._finished = True
        return list(self._done)

    async def abort(self) -> None:
        """Drop everything written (best effort: what is left is garbage-collected at start-up)."""
        self._finished = True
        for fut, _ in self._inflight:
            with contextlib.suppress(Exception):
                await fut
        self._inflight.clear()
        handle, self._handle = self._handle, None
        if handle is not None:
            with contextlib.suppress(Exception):
                await handle.close()
        for ledger_id in self._created:
            with contextlib.suppress(Exception):
                await self._store.delete_ledger(ledger_id)
        self._created = []
        self._done = []
