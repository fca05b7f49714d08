"""Shared helpers of the storage-level tests: running a coroutine, an embedded storage, a settled log.

Async tests (`async def test_...`) run directly under pytest-asyncio (pyproject.toml: asyncio_mode =
"auto"); `run` stays for tests that need a fresh event loop per step (a restart, a crash, a second
process) and `run_uvloop` for those that must run on the broker's own event loop.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Coroutine
from contextlib import asynccontextmanager
from typing import Any, TypeVar

import uvloop

from kop.managed_ledger import ManagedLedger, ManagedLedgerConfig
from kop.offset import open_embedded_storage
from kop.offset.interceptor import IndexInterceptor
from kop.offset.storage import LogStorage

T = TypeVar("T")


def run(coro: Coroutine[Any, Any, T]) -> T:
    """The coroutine on a fresh standard asyncio event loop."""
    return asyncio.run(coro)


def run_uvloop(coro: Coroutine[Any, Any, T]) -> T:
    """The coroutine on uvloop, the broker's event loop."""
    return uvloop.run(coro)


@asynccontextmanager
async def storage_at(path: Any, fsync: str = "none", **ml: Any) -> AsyncIterator[LogStorage]:
    """Embedded storage under `path` (managed-ledger settings as ManagedLedgerConfig keywords), closed
    at the end of the block."""
    storage = await open_embedded_storage(path, fsync=fsync,
                                          managed_ledger_config=ManagedLedgerConfig(**ml) if ml else None)
    try:
        yield storage
    finally:
        await storage.close()


async def settled(log: Any) -> Any:
    """Wait for a ledger switch the last append started in the background (`log`: a partition log or a
    managed ledger)."""
    ml = getattr(log, "ml", log)
    while ml.rolling_over:
        await asyncio.sleep(0.001)
    return log


async def open_bare(storage: LogStorage, name: str) -> tuple[ManagedLedger, IndexInterceptor]:
    """A managed ledger with the index interceptor and no partition log around it: what the parts of
    ManagedPartitionLog (kop/offset/offset_index.py, transactions.py, retention.py) are tested over.
    Append with `await ml.add_entry(batch, last_offset_delta + 1)`."""
    interceptor = IndexInterceptor()
    ml = await storage.factory.open(name, None, interceptor)
    return ml, interceptor
