"""Embedded metadata store: sqlite3 (stdlib) at ``<dir>/metadata.db``, WAL mode, versioned compare-and-set.

One table of nodes keyed by path, each with its parent path (for children()), value and version, the
ZooKeeper shape Pulsar's MetadataStore has. Parents are created on demand with an empty value.

Threading: every statement runs on ONE dedicated worker thread that owns the connection. Why not inline:
with ``synchronous=FULL`` (used when the fsync policy is ``always``) a commit fsyncs the WAL, milliseconds
the event loop must not stall for; the managed ledger's info write at rollover is on the produce path.
Why one thread: it serialises all operations, so a compare-and-set (read version, then write) is atomic
without extra locking, and sqlite's connection is used from a single thread as it prefers. Metadata
operations are rare (rollover, trim, topic changes), so the thread hop (~50 us) does not matter.

Failures: every sqlite error (a read-only file, a full disk) surfaces as StorageError, which the layers
above answer as KAFKA_STORAGE_ERROR instead of closing connections. Opening the store makes one write
(the probe table), so a store that cannot be written stops start-up with a clear message rather than a
broker that says it is ready and cannot record anything; ``probe_writable`` repeats that write for /ready.

Other processes (the offline inspect tool) may read the database while the broker writes: WAL readers
never block the writer. The worker processes of one node (kop/node/) all write it: every write is a
`BEGIN IMMEDIATE` transaction under a busy timeout, and compare-and-set is atomic across processes.

Watches (`watch_children_async`, `watch_data_async`, ZooKeeperMetadataStore's API, used by the topic manager
of a multi-process node) are polls: every 0.25 s the store asks sqlite's `PRAGMA data_version`, which moves
when another connection committed, and re-reads the watched nodes only then (or after a write of its own).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import sqlite3
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar

from kop.storage.api import (
    BadVersionError,
    MetadataStore,
    NodeExistsError,
    NoSuchNodeError,
    NotEmptyError,
    Stat,
    StorageError,
)

T = TypeVar("T")
log = logging.getLogger(__name__)

WATCH_POLL_SECONDS = 0.25

_SCHEMA = """
CREATE TABLE IF NOT EXISTS nodes (
    path    TEXT PRIMARY KEY,
    parent  TEXT NOT NULL,
    value   BLOB NOT NULL,
    version INTEGER NOT NULL,
    mtime   INTEGER NOT NULL  -- ms since the epoch of the last write (for tools; not part of the API)
) WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS nodes_by_parent ON nodes (parent, path);
"""


def check_path(path: str) -> str:
    """Validate a node path: absolute, '/'-separated, no empty segment, no trailing '/'."""
    if not path.startswith("/") or (path != "/" and (path.endswith("/") or "//" in path)):
        raise ValueError(f"invalid metadata path {path!r}")
    return path


def parent_of(path: str) -> str:
    head = path.rpartition("/")[0]
    return head or "/"


def _guarded(callback: Callable[..., object], *args: object) -> None:
    """Run a watch callback; one that raises is logged, not allowed to stop the poll."""
    try:
        callback(*args)
    except Exception:
        log.exception("metadata watch callback failed")


def _now_ms() -> int:
    return time.time_ns() // 1_000_000


class SqliteMetadataStore(MetadataStore):
    """MetadataStore on sqlite. `durable=True` (fsync policy ``always``) makes every commit fsync the
    WAL (synchronous=FULL); otherwise commits survive a process kill but not a power loss (NORMAL)."""

    def __init__(self, directory: str | os.PathLike[str], *, durable: bool = True,
                 filename: str = "metadata.db") -> None:
        self.directory = os.fspath(directory)
        os.makedirs(self.directory, exist_ok=True)
        self.path = os.path.join(self.directory, filename)
        self._durable = durable
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="kop-metadata")
        self._db: sqlite3.Connection | None = None
        self._closed = False
        # Polling watches: path -> [callback, last value seen]; "children" and "data" kinds apart.
        self._child_watches: dict[int, tuple[str, Callable[[list[str]], object], list[list[str]]]] = {}
        self._data_watches: dict[int, tuple[str, Callable[[bytes | None, Stat | None], object],
                                             list[tuple[bytes, Stat] | None]]] = {}
        self._watch_ids = 0
        self._writes = 0  # this process's writes: data_version does not move for them
        self._poller: asyncio.Task[None] | None = None
        try:
            self._executor.submit(self._connect).result()
            problem = self._executor.submit(self._probe).result()
        except sqlite3.Error as e:
            self._executor.shutdown(wait=False)
            raise StorageError(f"metadata store {self.path} cannot be opened: {e}") from e
        if problem is not None:
            self._executor.submit(self._close).result()
            self._executor.shutdown(wait=False)
            raise StorageError(problem)

    # ---- worker-thread side

    def _connect(self) -> None:
        db = sqlite3.connect(self.path, isolation_level=None, check_same_thread=True)
        db.execute("PRAGMA journal_mode=WAL")
        db.execute(f"PRAGMA synchronous={'FULL' if self._durable else 'NORMAL'}")
        db.execute("PRAGMA busy_timeout=5000")
        db.executescript(_SCHEMA)
        self._db = db

    def _probe(self) -> str | None:
        """One real write transaction (an upsert into a one-row table of its own): None when it commits."""
        try:
            self._tx(lambda db: db.execute(
                "CREATE TABLE IF NOT EXISTS write_probe (id INTEGER PRIMARY KEY, at INTEGER)"
            ).execute("INSERT OR REPLACE INTO write_probe VALUES (1, ?)", (_now_ms(),)))
        except sqlite3.Error as e:
            return f"metadata store {self.path} cannot be written: {e}"
        return None

    async def probe_writable(self) -> str | None:
        """None when the store can be written, else why not (readiness)."""
        if self._closed:
            return "metadata store is closed"
        return await asyncio.get_running_loop().run_in_executor(self._executor, self._probe)

    def _tx(self, fn: Callable[[sqlite3.Connection], T]) -> T:
        db = self._db
        assert db is not None
        db.execute("BEGIN IMMEDIATE")
        try:
            result = fn(db)
        except BaseException:
            if db.in_transaction:
                with contextlib.suppress(sqlite3.Error):
                    db.execute("ROLLBACK")
            raise
        try:
            db.execute("COMMIT")
        except BaseException:  # a full disk fails the commit: leave no transaction open behind it
            if db.in_transaction:
                with contextlib.suppress(sqlite3.Error):
                    db.execute("ROLLBACK")
            raise
        return result

    def _get(self, path: str) -> tuple[bytes, Stat] | None:
        assert self._db is not None
        row = self._db.execute("SELECT value, version FROM nodes WHERE path = ?", (path,)).fetchone()
        if row is None:
            return None
        return bytes(row[0]), Stat(row[1])

    def _put(self, path: str, value: bytes, expected_version: int | None) -> Stat:
        def body(db: sqlite3.Connection) -> Stat:
            row = db.execute("SELECT version FROM nodes WHERE path = ?", (path,)).fetchone()
            if row is None:
                if expected_version is not None and expected_version >= 0:
                    raise BadVersionError(f"{path}: expected version {expected_version}, node does not exist")
                self._create_parents(db, path)
                db.execute("INSERT INTO nodes (path, parent, value, version, mtime) VALUES (?, ?, ?, 0, ?)",
                           (path, parent_of(path), value, _now_ms()))
                return Stat(0)
            if expected_version == -1:
                raise NodeExistsError(f"{path} already exists")
            if expected_version is not None and expected_version != row[0]:
                raise BadVersionError(f"{path}: expected version {expected_version}, found {row[0]}")
            version = row[0] + 1
            db.execute("UPDATE nodes SET value = ?, version = ?, mtime = ? WHERE path = ?",
                       (value, version, _now_ms(), path))
            return Stat(version)

        return self._tx(body)

    @staticmethod
    def _create_parents(db: sqlite3.Connection, path: str) -> None:
        parent = parent_of(path)
        missing = []
        while parent != "/":
            if db.execute("SELECT 1 FROM nodes WHERE path = ?", (parent,)).fetchone():
                break
            missing.append(parent)
            parent = parent_of(parent)
        for p in reversed(missing):
            db.execute("INSERT INTO nodes (path, parent, value, version, mtime) VALUES (?, ?, x'', 0, ?)",
                       (p, parent_of(p), _now_ms()))

    def _delete(self, path: str, expected_version: int | None) -> None:
        def body(db: sqlite3.Connection) -> None:
            row = db.execute("SELECT version FROM nodes WHERE path = ?", (path,)).fetchone()
            if row is None:
                raise NoSuchNodeError(path)
            if expected_version is not None and expected_version != row[0]:
                raise BadVersionError(f"{path}: expected version {expected_version}, found {row[0]}")
            if db.execute("SELECT 1 FROM nodes WHERE parent = ? LIMIT 1", (path,)).fetchone():
                raise NotEmptyError(f"{path} has children")
            db.execute("DELETE FROM nodes WHERE path = ?", (path,))

        self._tx(body)

    def _children(self, path: str) -> list[str]:
        assert self._db is not None
        rows = self._db.execute("SELECT path FROM nodes WHERE parent = ? ORDER BY path", (path,)).fetchall()
        cut = len(path) + (0 if path == "/" else 1)
        return sorted(r[0][cut:] for r in rows)

    def _close(self) -> None:
        if self._db is not None:
            self._db.close()
            self._db = None

    # ---- async API

    async def _call(self, fn: Callable[..., T], *args: Any) -> T:
        if self._closed:
            raise StorageError("metadata store is closed")
        try:
            return await asyncio.get_running_loop().run_in_executor(self._executor, fn, *args)
        except sqlite3.Error as e:  # a read-only file, a full disk: a storage failure, not a crash
            raise StorageError(f"metadata store {self.path}: {e}") from e

    async def get(self, path: str) -> tuple[bytes, Stat] | None:
        return await self._call(self._get, check_path(path))

    async def put(self, path: str, value: bytes, expected_version: int | None = None) -> Stat:
        check_path(path)
        if path == "/":
            raise ValueError("cannot write the root node")
        self._writes += 1
        return await self._call(self._put, path, bytes(value), expected_version)

    async def delete(self, path: str, expected_version: int | None = None) -> None:
        self._writes += 1
        await self._call(self._delete, check_path(path), expected_version)

    async def children(self, path: str) -> list[str]:
        return await self._call(self._children, check_path(path))

    # ---- watches (polled; see the module docstring)

    async def watch_children_async(self, path: str, callback: Callable[[list[str]], object]) -> Callable[[], None]:
        """Call `callback(children)` now and after every change of `path`'s children. Returns a stop function."""
        check_path(path)
        names = await self.children(path)
        self._watch_ids += 1
        key = self._watch_ids
        self._child_watches[key] = (path, callback, [names])
        asyncio.get_running_loop().call_soon(_guarded, callback, names)
        self._start_poller()
        return lambda: self._child_watches.pop(key, None) and None

    async def watch_data_async(self, path: str,
                               callback: Callable[[bytes | None, Stat | None], object]) -> Callable[[], None]:
        """Call `callback(value, stat)` now and after every change of `path` (None, None: no such node)."""
        check_path(path)
        got = await self.get(path)
        self._watch_ids += 1
        key = self._watch_ids
        self._data_watches[key] = (path, callback, [got])
        asyncio.get_running_loop().call_soon(_guarded, callback, *(got if got is not None else (None, None)))
        self._start_poller()
        return lambda: self._data_watches.pop(key, None) and None

    def _start_poller(self) -> None:
        if self._poller is None and not self._closed:
            self._poller = asyncio.get_running_loop().create_task(self._poll(), name="metadata-watch-poll")

    def _data_version(self) -> int:
        assert self._db is not None
        return int(self._db.execute("PRAGMA data_version").fetchone()[0])

    async def _poll(self) -> None:
        seen = (-1, -1)
        while not self._closed:
            await asyncio.sleep(WATCH_POLL_SECONDS)
            try:
                now = (await self._call(self._data_version), self._writes)
                if now != seen:
                    seen = now
                    await self._recheck()
            except StorageError as e:
                if not self._closed:
                    log.warning("metadata watch poll failed: %s", e)

    async def _recheck(self) -> None:
        for path, callback, last in list(self._child_watches.values()):
            names = await self.children(path)
            if names != last[0]:
                last[0] = names
                _guarded(callback, names)
        for dpath, dcallback, dlast in list(self._data_watches.values()):
            got = await self.get(dpath)
            before = dlast[0]
            if (got is None) != (before is None) or (got is not None and before is not None
                                                    and (got[1].version, got[0]) != (before[1].version, before[0])):
                dlast[0] = got
                _guarded(dcallback, *(got if got is not None else (None, None)))

    async def close(self) -> None:
        if self._closed:
            return
        if self._poller is not None:
            self._poller.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._poller
            self._poller = None
        await self._call(self._close)
        self._closed = True
        self._executor.shutdown(wait=True)
