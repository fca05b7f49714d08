"""The two storage interfaces every backend implements: a ledger store and a metadata store.

They mirror the split Pulsar makes between the BookKeeper client (ledgers of entries) and its
MetadataStore (small versioned values at paths). The embedded backends (local files, sqlite) are the
default; BookKeeper and ZooKeeper backends implement the same interfaces later. Whatever a backend
stores (entry bytes, metadata values) must be byte-identical across backends, so that the layers above
(managed ledger, offsets) cannot tell which backend they run on.
"""

from __future__ import annotations

import abc
import asyncio
import os
from collections.abc import Sequence
from dataclasses import dataclass

Buffer = bytes | bytearray | memoryview


class StorageError(Exception):
    """Base class of storage failures."""


class LedgerFencedError(StorageError):
    """The ledger was opened for recovery by another owner (or closed); writes are refused."""


class LedgerClosedError(StorageError):
    """A write to a ledger that is closed."""


class NoSuchLedgerError(StorageError):
    pass


class LedgerDamagedError(StorageError):
    """Entries first_entry..last_entry of a ledger cannot be served as stored: a checksum mismatch, or
    bytes missing from a sealed ledger (file truncated). Entries before them are intact and readable;
    the partition answers KAFKA_STORAGE_ERROR for the damaged range only. byte_start..byte_end is where
    the damaged frames are (or would be) in the ledger's file, for the operator."""

    def __init__(self, ledger_id: int, first_entry: int, last_entry: int, byte_start: int, byte_end: int,
                 reason: str) -> None:
        self.ledger_id = ledger_id
        self.first_entry = first_entry
        self.last_entry = last_entry
        self.byte_start = byte_start
        self.byte_end = byte_end
        self.reason = reason
        super().__init__(f"ledger {ledger_id}: entries {first_entry}..{last_entry} damaged "
                         f"(bytes {byte_start}..{byte_end}): {reason}")


class FileRef:
    """An open file descriptor that its holders share and that is closed when the last of them drops it.
    A zero-copy read hands out a dup() of the ledger file's descriptor rather than the store's own: the store
    closes its descriptor when the ledger is deleted (retention) or its read handle evicted, possibly while an
    answer that refers to the file still waits to be written, and a reused descriptor number would then send
    another file's bytes."""

    __slots__ = ("fd",)

    def __init__(self, fd: int) -> None:
        self.fd = fd

    def __del__(self) -> None:
        try:
            os.close(self.fd)
        except OSError:
            pass


class FileSpan:
    """`length` bytes of a file at `offset`, to be sent to a socket from the page cache (os.sendfile) without
    being read into the process. len() is its length, so a list of buffers and spans sums as the bytes it
    sends."""

    __slots__ = ("file", "offset", "length")

    def __init__(self, file: FileRef, offset: int, length: int) -> None:
        self.file = file
        self.offset = offset
        self.length = length

    def __len__(self) -> int:
        return self.length

    def read(self) -> bytes:
        """The span's bytes read into memory (the copy path, when a span cannot be sent from its file);
        StorageError when the file is shorter than the span (truncated meanwhile)."""
        data = os.pread(self.file.fd, self.length, self.offset)
        if len(data) != self.length:
            raise StorageError(f"short read at {self.offset}: {len(data)} of {self.length} bytes (file truncated?)")
        return data


class FileEntry:
    """One entry of a zero-copy read: its first bytes (`head`, read into memory: the headers a reader parses
    and the start of the payload) and the span of the file that holds the rest (None when `head` is all)."""

    __slots__ = ("head", "rest")

    def __init__(self, head: bytes, rest: FileSpan | None) -> None:
        self.head = head
        self.rest = rest

    def __len__(self) -> int:
        return len(self.head) + (self.rest.length if self.rest is not None else 0)


class BadVersionError(StorageError):
    """Compare-and-set failed: the stored version is not the one expected."""


class NoSuchNodeError(StorageError):
    pass


class NodeExistsError(StorageError):
    pass


class NotEmptyError(StorageError):
    """delete() of a node that still has children (ZooKeeper's NotEmpty)."""


class ReadHandle(abc.ABC):
    """A ledger opened for reading. Entry ids are 0, 1, 2, ... up to last_add_confirmed."""

    ledger_id: int

    @property
    @abc.abstractmethod
    def last_add_confirmed(self) -> int:
        """Id of the last durable entry, -1 when empty."""

    @property
    @abc.abstractmethod
    def length(self) -> int:
        """Total bytes of the durable entries (payload bytes, not counting framing)."""

    @abc.abstractmethod
    async def read(self, first: int, last: int) -> list[bytes | memoryview]:
        """Entries first..last inclusive (all must be <= last_add_confirmed)."""

    async def read_up_to(self, first: int, last: int, max_bytes: int, overhead: int = 0) -> list[bytes | memoryview]:
        """Entries first..(at most) last, stopping before their total size would exceed max_bytes; the first
        entry is always returned. `overhead` bytes of each entry are not counted (headers the caller strips
        before sending). Backends that know entry sizes before reading (the local store) override this so
        a fetch never reads bytes it will not send; this default reads everything and cuts."""
        out: list[bytes | memoryview] = []
        total = 0
        for data in await self.read(first, last):
            total += len(data) - overhead
            if out and total > max_bytes:
                break
            out.append(data)
        return out

    async def read_spans(self, first: int, last: int, max_bytes: int, overhead: int, head_bytes: int
                         ) -> list[FileEntry] | None:
        """read_up_to for a zero-copy send: each entry's first `head_bytes` read, the rest left in the file as
        a FileSpan (checked first where the backend verifies reads, so a span never holds a damaged entry).
        None when this backend or this read cannot (no local file, small entries): the caller then reads
        with read_up_to."""
        return None

    async def read_prefix(self, entry_id: int, max_bytes: int) -> bytes | memoryview:
        """At least the first max_bytes of one entry (the whole entry when it is shorter). Binary searches
        only need an entry's headers; the local store reads just those bytes."""
        return (await self.read(entry_id, entry_id))[0]

    @abc.abstractmethod
    async def close(self) -> None: ...


class WriteHandle(ReadHandle):
    """A ledger open for appends by its single writer."""

    @abc.abstractmethod
    async def append(self, data: Buffer | Sequence[Buffer]) -> int:
        """Append one entry (a buffer, or parts that are concatenated) and return its entry id once it
        is durable under the store's durability policy. Appends complete in the order they were issued."""

    def append_nowait(self, data: Buffer | Sequence[Buffer]) -> asyncio.Future[int]:
        """Issue an append *now* and return a future of its entry id. The entry's place in the ledger is
        fixed by the call, not by when the caller awaits, so a caller can issue appends synchronously in
        the order it assigned them their offsets. The buffers must stay unmodified until the future is
        done. This default wraps append() in a task: tasks start in creation order, so it is correct for
        any append() that enqueues its entry before its first await."""
        return asyncio.ensure_future(self.append(data))

    @abc.abstractmethod
    async def close(self) -> None:
        """Seal the ledger: no more appends; the last entry id becomes final."""


class LedgerStore(abc.ABC):
    #: readiness (/ready): the monotonic time of a write failure no write has followed, and its error (a
    #: store that knows of none keeps None)
    write_failed_at: float | None = None
    last_write_error: str | None = None

    @abc.abstractmethod
    async def create_ledger(self) -> WriteHandle:
        """A new, empty ledger with a fresh, never-reused id."""

    @abc.abstractmethod
    async def open_ledger(self, ledger_id: int, recover: bool = True) -> ReadHandle:
        """Open an existing ledger for reading. With recover=True the ledger is fenced (its writer can no
        longer append) and sealed at its last durable entry, as BookKeeper's open-with-recovery does."""

    @abc.abstractmethod
    async def delete_ledger(self, ledger_id: int) -> None: ...

    async def list_ledgers(self) -> list[int]:
        """Ids of all stored ledgers, ascending (for garbage-collecting ledgers no managed ledger
        references after a crash between creating a ledger and recording it)."""
        raise NotImplementedError

    @abc.abstractmethod
    async def close(self) -> None:
        """Flush and release everything; later calls fail."""


@dataclass(frozen=True, slots=True)
class Stat:
    version: int  # starts at 0 on create, +1 on every successful put
    ephemeral: bool = False


class MetadataStore(abc.ABC):
    """Small values at '/'-separated paths with versioned compare-and-set (the ZooKeeper shape)."""

    @abc.abstractmethod
    async def get(self, path: str) -> tuple[bytes, Stat] | None: ...

    @abc.abstractmethod
    async def put(self, path: str, value: bytes, expected_version: int | None = None) -> Stat:
        """Create or update. expected_version=None: unconditional; -1: must not exist yet
        (NodeExistsError otherwise); n >= 0: the current version must be n (BadVersionError otherwise).
        Parents are created as needed."""

    @abc.abstractmethod
    async def delete(self, path: str, expected_version: int | None = None) -> None:
        """Delete one node (NoSuchNodeError if absent, BadVersionError on a version mismatch,
        NotEmptyError when it has children)."""

    @abc.abstractmethod
    async def children(self, path: str) -> list[str]:
        """Names (not paths) of the direct children, sorted; [] when there are none."""

    async def exists(self, path: str) -> bool:
        return await self.get(path) is not None

    async def delete_recursive(self, path: str) -> None:
        """Delete a node and everything below it (children first); absent nodes are ignored."""
        for child in await self.children(path):
            await self.delete_recursive(path.rstrip("/") + "/" + child)
        try:
            await self.delete(path)
        except NoSuchNodeError:
            pass

    @abc.abstractmethod
    async def close(self) -> None: ...
