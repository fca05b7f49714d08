"""Embedded ledger store: one append-only file per ledger, for a single machine.

Layout under the store directory::

    LOCK                 flock()ed by the owning process: two brokers on one directory would corrupt it
    ledger-ids           "next=<n>": ids below n may have been handed out (reserved in blocks; never reused)
    ledger-ids.lock      flock()ed while a block is reserved: the worker processes of one node (kop/node/)
                         share the directory, each reserving disjoint blocks
    <id>.log             the entries, each framed (below); append-only while the ledger is open
    <id>.idx             sidecar index, written when the ledger is sealed; its presence means CLOSED

Frame of one entry (big-endian, 16 bytes + payload)::

    u32 crc32c(length · entry_id · payload) · u32 length · u64 entry_id · payload

The CRC covers everything after itself, so one CRC call over the frame tail checks it. At open, an
unsealed ledger (its writer crashed) is scanned from the start: every complete frame whose CRC and entry id
match is kept, and the first torn or garbage frame ends the ledger (the tail is cut off when the ledger is
recovered). Writes are ordered, so every acknowledged entry precedes any torn one.

Sidecar index: ``b"KOPLIDX1" · u64 count · u64 data_end · u64 payload_bytes · count × u64 frame start (LE)
· u32 crc32c(all before)``. Loading it is one read and one array copy, so opening a big closed ledger does
not read its data.

Durability (``fsync``): ``always`` - an append completes after fdatasync; concurrent appends to a ledger
are coalesced into one pwritev + one fdatasync run in a worker thread (group commit), so the event loop
never blocks on the disk. ``interval`` - appends complete after the write; a background task fdatasyncs
dirty ledgers every ``fsync_interval_ms``. ``none`` - page cache only: survives a process kill, not a
machine crash. In ``interval``/``none`` the write itself runs inline (a page-cache copy is microseconds,
cheaper than a thread hop).

Reads are inline ``os.pread`` calls: served from the page cache they cost microseconds, less than handing
them to a thread; a range of entries is read with one pread and returned as memoryview slices. A zero-copy
read (``read_spans``, issue 27: Kafka fetches on plain TCP, entries averaging SPAN_MIN_ENTRY bytes or more)
returns each entry's first bytes (its headers) and the rest as a FileSpan of a dup() of the file's
descriptor, which the Kafka connection sends with sendfile. Unverified, it preads only the heads; verified
(``verify_reads``), it preads the range a chunk at a time into the store's scratch buffer, checks every
frame's CRC there and takes the heads from it: the bodies then go from the same page-cache pages the check
just read, so each byte is copied once, into a buffer that is warm in the cache, instead of into a fresh
buffer and again out to the socket (issue 27: those two copies were most of the broker's CPU per MB consumed).

Damage (issue #12): every read checks each frame's CRC (``verify_reads``, on by default; the cost on the
fetch path is in docs/benchmarks.md). A sealed ledger whose file is shorter than its index says (entries
cut off), a frame whose CRC does not match, or bytes after the last entry of a sealed ledger are recorded
as ``Damage`` in the store (``damage``; admin internal stats and metrics show it) and reads of a damaged
entry raise LedgerDamagedError, while the entries before it are still served: a read that meets a damaged
entry returns the intact ones before it. Recovery of an unsealed ledger tells a torn tail (cut off, logged
once with the ledger, the entries and bytes dropped) from a damaged entry in the middle (a bad frame that
valid frames follow: kept in place and marked damaged, so acknowledged entries after it are not cut off).
``check_ledger_file`` verifies one file offline (``kop storage check``).

Fencing: ``open_ledger(id, recover=True)`` on a ledger whose writer is still open fences that writer
(appends not yet written fail with LedgerFencedError; the batch being written finishes) and seals the
ledger at its last durable entry, as BookKeeper's open-with-recovery does.
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import logging
import os
import struct
import sys
import time
from array import array
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, Literal, TypeVar

from fastcrc import crc32 as _crc32

from kop.aio import SingleFlight
from kop.storage.api import (
    Buffer,
    FileEntry,
    FileRef,
    FileSpan,
    LedgerClosedError,
    LedgerDamagedError,
    LedgerFencedError,
    LedgerStore,
    NoSuchLedgerError,
    ReadHandle,
    StorageError,
    WriteHandle,
)

log = logging.getLogger(__name__)

FsyncPolicy = Literal["always", "interval", "none"]
FSYNC_POLICIES: tuple[str, ...] = ("always", "interval", "none")
DAMAGED_LEDGER_POLICIES: tuple[str, ...] = ("serve-intact", "refuse-start")
_RESYNC_WINDOW = 64 << 20  # how far past a bad frame recovery looks for the next valid one

_crc32c = _crc32.iscsi
_FRAME = struct.Struct(">IIQ")  # crc, length, entry id
_LEN_ID = struct.Struct(">IQ")
_CRC = struct.Struct(">I")
HEADER_SIZE = _FRAME.size  # 16
MAX_ENTRY_SIZE = 0xFFFFFFFF
_IDX_MAGIC = b"KOPLIDX1"
_IDX_HEAD = struct.Struct("<8sQQQ")
_IOV_MAX = min(os.sysconf("SC_IOV_MAX") if hasattr(os, "sysconf") else 1024, 1024)
#: Zero-copy reads (read_spans) only for entries of at least this size on average: each entry costs a pread of
#: its head and a sendfile, ~5 us, where read_range costs one pread for the whole range and the copies, ~0.2 ms
#: per MB; spans cost more CPU per MB below ~32 KiB entries and less above (`python bench/zero_copy.py --micro`,
#: docs/benchmarks.md "Zero-copy fetch").
SPAN_MIN_ENTRY = 32 << 10
#: A verified zero-copy read checks its entries in chunks of about this many bytes, read into one reused buffer
#: (LocalLedgerStore.scratch): no fresh allocation per fetch (page faults, munmap), and a chunk that fits the CPU's
#: cache is still there when its CRC is computed. An entry larger than this is read alone, into a buffer of its own.
SCRATCH_BYTES = 1 << 20
#: A verified zero-copy read only for a budget (the fetch's partition limit, what is left of its answer's) of at
#: least this many bytes; smaller reads take the copy path. Measured (docs/benchmarks.md "Verified zero copy"):
#: franz-go reading 8 MiB per partition cost the broker 0.36 CPU ms/MB with spans against 0.72 by the copy path,
#: kafka-consumer-perf-test reading its default 1 MiB per partition (64 KiB batches) 1.10 against 0.89. Not pinned
#: down why; likely: an answer of a few MiB goes through buffers the allocator reuses, warm in the cache, cheaper
#: than a sendfile per batch, while tens of MiB read into fresh memory (page faults) and written cost more.
VERIFIED_SPAN_MIN_BUDGET = 4 << 20
_ID_BLOCK = 1000  # ledger ids reserved per persisted counter write
_BIG_ENDIAN_HOST = sys.byteorder == "big"

_OPEN, _CLOSING, _FENCED, _FAILED, _CLOSED = range(5)


_T = TypeVar("_T")


def _fsync_dir(path: str) -> None:
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _reserve_block(id_path: str, at_least: int) -> int:
    """Reserve the ledger ids [start, start + _ID_BLOCK) and return start: at least `at_least` and at least
    what the counter file says, under an flock of its own, so that processes sharing the directory (the
    workers of one node) never hand out the same id. Always synced, whatever the fsync policy: reusing a
    ledger id would splice two ledgers together."""
    fd = os.open(id_path + ".lock", os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        stored = 0
        with contextlib.suppress(FileNotFoundError, ValueError), open(id_path) as f:
            stored = int(f.read().strip().removeprefix("next="))
        start = max(at_least, stored)
        _write_atomic(id_path, f"next={start + _ID_BLOCK}\n".encode(), True)
        return start
    finally:
        os.close(fd)  # releases the flock


def _write_atomic(path: str, data: bytes, sync: bool) -> None:
    """Write a small file so that readers see either the old or the new content, never a mix."""
    tmp = path + ".tmp"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view) :]
        if sync:
            os.fdatasync(fd)
    finally:
        os.close(fd)
    os.replace(tmp, path)
    if sync:
        _fsync_dir(os.path.dirname(path) or ".")


def _pwritev_all(fd: int, bufs: list[Buffer], offset: int) -> int:
    """pwritev every buffer at `offset`, in IOV_MAX chunks, resuming after short writes."""
    total = 0
    i = 0
    n = len(bufs)
    while i < n:
        chunk = bufs[i : i + _IOV_MAX]
        want = sum(map(len, chunk))
        done = os.pwritev(fd, chunk, offset)
        offset += done
        total += done
        if done == want:
            i += len(chunk)
            continue
        # Short write (rare on regular files): skip what was written and retry from the cut.
        rest: list[Buffer] = []
        for b in chunk:
            if done >= len(b):
                done -= len(b)
                continue
            rest.append(memoryview(b)[done:] if done else b)
            done = 0
        bufs = rest + list(bufs[i + len(chunk) :])
        i = 0
        n = len(bufs)
    return total


def _frame_at(fd: int, pos: int, eid: int, size: int) -> int | None:
    """End of the frame at `pos` when it is complete, carries entry id `eid` and its CRC matches."""
    if pos + HEADER_SIZE > size:
        return None
    head = os.pread(fd, HEADER_SIZE, pos)
    if len(head) < HEADER_SIZE:
        return None
    crc, length, got = _FRAME.unpack(head)
    stop = pos + HEADER_SIZE + length
    if got != eid or stop > size:
        return None
    body = os.pread(fd, length, pos + HEADER_SIZE)
    if len(body) != length or _crc32c(body, _crc32c(head[4:])) != crc:
        return None
    return stop


def _resync(fd: int, pos: int, eid: int, size: int) -> int | None:
    """After a bad frame for entry `eid` at `pos`: the start of a valid frame for entry eid + 1 further
    on, or None (then the bad frame is a torn tail). First where the bad frame's own length points, then
    by searching the next _RESYNC_WINDOW bytes for the entry id (a damaged length field)."""
    head = os.pread(fd, HEADER_SIZE, pos)
    if len(head) == HEADER_SIZE:
        _, length, got = _FRAME.unpack(head)
        nxt = pos + HEADER_SIZE + length
        if got == eid and _frame_at(fd, nxt, eid + 1, size) is not None:
            return nxt
    window = os.pread(fd, min(size - pos, _RESYNC_WINDOW), pos)
    needle = struct.pack(">Q", eid + 1)
    at = window.find(needle, HEADER_SIZE + 8)
    while at >= 0:
        if _frame_at(fd, pos + at - 8, eid + 1, size) is not None:
            return pos + at - 8
        at = window.find(needle, at + 1)
    return None


@dataclass
class ScanResult:
    """What a walk over a ledger file's frames found."""

    starts: array  # frame start of every entry kept (damaged ones included, to keep entry ids in place)
    end: int  # end of the last kept frame
    payload: int  # payload bytes of the kept entries
    size: int  # file size: bytes end..size are a torn tail (unsealed) or garbage
    bad: dict[int, tuple[int, int]]  # damaged entries kept in place: entry id -> (frame start, frame end)


def scan_ledger(fd: int, chunk: int = 4 << 20) -> ScanResult:
    """Walk the frames of a ledger file from the start. A frame that is cut short, has a wrong entry id or
    a wrong CRC ends the walk - unless a valid frame of the next entry follows it (_resync), then it is a
    damaged entry in the middle, kept in place and listed in `bad`. Read-only, with pread in chunks (not
    mmap: a file truncated while it is mapped would kill the reader with SIGBUS), so the inspect tool can
    scan live files."""
    size = os.fstat(fd).st_size
    starts = array("q")
    bad: dict[int, tuple[int, int]] = {}
    pos = 0
    payload = 0
    eid = 0
    buf = b""
    buf_at = 0  # file offset of buf[0]
    while pos + HEADER_SIZE <= size:
        if pos + HEADER_SIZE > buf_at + len(buf):
            buf, buf_at = os.pread(fd, chunk, pos), pos
            if len(buf) < HEADER_SIZE:
                break
        crc, length, got = _FRAME.unpack_from(buf, pos - buf_at)
        stop = pos + HEADER_SIZE + length
        ok = got == eid and stop <= size
        if ok and stop > buf_at + len(buf):
            buf, buf_at = os.pread(fd, max(chunk, stop - pos), pos), pos
            ok = len(buf) >= stop - pos
        if ok and _crc32c(memoryview(buf)[pos - buf_at + 4 : stop - buf_at]) != crc:
            ok = False
        if not ok:
            nxt = _resync(fd, pos, eid, size)
            if nxt is None:
                break
            bad[eid] = (pos, nxt)
            stop = nxt
            length = nxt - pos - HEADER_SIZE
        starts.append(pos)
        payload += length
        pos = stop
        eid += 1
    return ScanResult(starts, pos, payload, size, bad)


def scan_frames(fd: int, chunk: int = 4 << 20) -> tuple[array, int, int, int]:
    """(frame starts of the kept entries, end of the last one, their payload bytes, file size): scan_ledger
    without the damage list."""
    r = scan_ledger(fd, chunk)
    return r.starts, r.end, r.payload, r.size


@dataclass(frozen=True)
class Damage:
    """One damaged place in a ledger file. first_entry..last_entry are -1 when no entry is affected
    (bytes after the last entry of a sealed ledger)."""

    ledger_id: int
    kind: str  # checksum | truncated | missing | trailing-garbage
    first_entry: int
    last_entry: int
    byte_start: int
    byte_end: int
    detail: str

    def describe(self) -> str:
        where = (f"entries {self.first_entry}..{self.last_entry}" if self.first_entry >= 0
                 else "no entry (after the last one)")
        return f"ledger {self.ledger_id}: {self.kind}: {where}, bytes {self.byte_start}..{self.byte_end}: {self.detail}"

    def as_dict(self) -> dict[str, Any]:
        return {"ledgerId": self.ledger_id, "kind": self.kind, "firstEntry": self.first_entry,
                "lastEntry": self.last_entry, "byteStart": self.byte_start, "byteEnd": self.byte_end,
                "detail": self.detail}

    def error(self) -> LedgerDamagedError:
        return LedgerDamagedError(self.ledger_id, self.first_entry, self.last_entry, self.byte_start,
                                  self.byte_end, f"{self.kind}: {self.detail}")


def read_index_file(path: str) -> tuple[int, int, int] | None:
    """(entries, data end, payload bytes) from a sidecar index, None when absent or invalid."""
    try:
        with open(path, "rb") as f:
            raw = f.read()
    except FileNotFoundError:
        return None
    if len(raw) < _IDX_HEAD.size + 4 or _crc32c(raw[:-4]) != _CRC.unpack_from(raw, len(raw) - 4)[0]:
        return None
    magic, count, end, payload = _IDX_HEAD.unpack_from(raw, 0)
    if magic != _IDX_MAGIC or len(raw) != _IDX_HEAD.size + 8 * count + 4:
        return None
    return count, end, payload


class _LedgerFile:
    """The state of one ledger shared by its handles: fd, frame offsets of durable entries, seal flag."""

    __slots__ = ("ledger_id", "path", "idx_path", "fd", "starts", "end", "payload_bytes", "sealed", "writer",
                 "refs", "deleted", "sealing", "readable", "bad", "on_damage")

    def __init__(self, ledger_id: int, path: str, fd: int) -> None:
        self.ledger_id = ledger_id
        self.path = path
        self.idx_path = path[:-4] + ".idx"
        self.fd = fd
        self.starts = array("q")  # frame start offset of each durable entry
        self.end = 0  # file offset just after the last durable entry
        self.payload_bytes = 0
        self.sealed = False
        self.writer: LocalWriteHandle | None = None
        self.refs = 0
        self.deleted = False
        self.sealing: asyncio.Future[None] | None = None
        self.readable = -1  # entries >= this are cut off the file (truncated sealed ledger); -1: none are
        self.bad: dict[int, tuple[int, int]] = {}  # entries whose frame failed its check -> (start, end)
        self.on_damage: Callable[[Damage, bool], None] | None = None  # (damage, found when loading)

    @property
    def last_add_confirmed(self) -> int:
        return len(self.starts) - 1

    def check(self) -> None:
        if self.deleted:
            raise NoSuchLedgerError(f"ledger {self.ledger_id} was deleted")

    def _damage(self, d: Damage) -> LedgerDamagedError:
        if self.on_damage is not None:
            self.on_damage(d, False)
        return d.error()

    def _bounds(self, first: int, last: int) -> int:
        """`last` cut down to the entries before any known damage; LedgerDamagedError when `first` itself
        is damaged. Entries past the end of a ledger nobody writes are missing (a shorter file than the
        managed ledger recorded), which is damage too, not a caller's mistake."""
        n = len(self.starts)
        if first < 0 or last < first or (last >= n and self.writer is not None):
            raise StorageError(f"ledger {self.ledger_id}: entries {first}..{last} outside 0..{n - 1}")
        limit = n if self.readable < 0 else self.readable
        if last >= limit:
            if first >= limit:
                if limit < n:
                    raise self._damage(Damage(self.ledger_id, "truncated", limit, n - 1, self.starts[limit],
                                              self.end, f"file is {self._size()} bytes, the index says {self.end}"))
                raise self._damage(Damage(self.ledger_id, "missing", n, last, self.end, self.end,
                                          f"the file holds {n} entries, entry {last} was asked for"))
            last = limit - 1
        if self.bad:
            for e in sorted(self.bad):
                if first <= e <= last:
                    if e == first:
                        start, stop = self.bad[e]
                        raise self._damage(Damage(self.ledger_id, "checksum", e, e, start, stop,
                                                  "frame checksum mismatch"))
                    return e - 1
        return last

    def _size(self) -> int:
        try:
            return os.fstat(self.fd).st_size
        except OSError:
            return -1

    def _fit(self, first: int, last: int, max_bytes: int, overhead: int) -> int:
        """`last` cut down so that entries first..last hold at most max_bytes (not counting `overhead` bytes
        of each; -1: no limit), never below `first`. Payload bytes of entries first..k = end(k) - begin -
        HEADER_SIZE * (k - first + 1); it grows with k, so the last entry that fits is found by bisection
        without reading anything."""
        if max_bytes < 0:
            return last
        starts = self.starts
        n = len(starts)
        begin = starts[first]
        end = self.end
        per_entry = HEADER_SIZE + overhead

        def over(k: int) -> bool:
            stop_k = starts[k + 1] if k + 1 < n else end
            return stop_k - begin - per_entry * (k - first + 1) > max_bytes

        if over(last):
            lo, hi = first + 1, last + 1  # the first k in (first, last] that is over the limit
            while lo < hi:
                mid = (lo + hi) // 2
                if over(mid):
                    hi = mid
                else:
                    lo = mid + 1
            last = lo - 1
        return last

    def read_spans(self, first: int, last: int, max_bytes: int, overhead: int, head_bytes: int,
                   scratch: bytearray | None = None) -> list[FileEntry] | None:
        """read_range for a zero-copy send: per entry its first `head_bytes` (what the caller parses), the rest
        a FileSpan of a dup() of this file's descriptor (FileRef), shared by the entries of this read. The
        file's size is checked first, so a file cut short under its index answers StorageError here, as
        read_range's short pread does, rather than a short send later. Without `scratch` nothing is verified
        and each head is one pread; with it (verify_reads) every frame is checked first (_verified_spans).
        None when the entries average less than SPAN_MIN_ENTRY bytes, or a verified read's budget is below
        VERIFIED_SPAN_MIN_BUDGET (the caller reads them with read_range)."""
        self.check()
        last = self._fit(first, self._bounds(first, last), max_bytes, overhead)
        starts = self.starts
        n = len(starts)
        stop = starts[last + 1] if last + 1 < n else self.end
        if stop - starts[first] < SPAN_MIN_ENTRY * (last - first + 1):
            return None  # small entries: one pread of the range costs less than a pread and a sendfile each
        if scratch is not None and max_bytes < VERIFIED_SPAN_MIN_BUDGET:
            return None  # a small verified read: the copy path costs less (VERIFIED_SPAN_MIN_BUDGET)
        fd = self.fd
        if os.fstat(fd).st_size < stop:
            raise StorageError(f"ledger {self.ledger_id}: the file ends before byte {stop} (file truncated?)")
        try:
            ref = FileRef(os.dup(fd))
        except OSError:  # out of descriptors (each answer in flight holds one per ledger it reads): copy instead
            return None
        if scratch is not None:
            return self._verified_spans(ref, first, last, head_bytes, scratch)
        out: list[FileEntry] = []
        pread = os.pread
        for eid in range(first, last + 1):
            pos = starts[eid] + HEADER_SIZE
            size = (starts[eid + 1] if eid + 1 < n else self.end) - pos
            want = head_bytes if head_bytes < size else size
            head = pread(fd, want, pos)
            if len(head) != want:
                raise StorageError(f"ledger {self.ledger_id}: short read at {pos} (file truncated?)")
            out.append(FileEntry(head, FileSpan(ref, pos + want, size - want) if want < size else None))
        return out

    def _verified_spans(self, ref: FileRef, first: int, last: int, head_bytes: int, scratch: bytearray
                        ) -> list[FileEntry]:
        """read_spans with every frame checked as read_range checks it: entries first..last are read a chunk
        of whole frames at a time (one pread of up to len(scratch) bytes, a larger entry alone into a buffer of
        its own) into `scratch`, each frame's CRC, length and entry id checked there, and its head copied out
        of it; the rest of each entry is a span of the file, sent later from the page cache that the pread
        just checked. A damaged entry ends the read as in read_range: the intact entries before it are
        returned (the next read starts at it and gets the error), LedgerDamagedError when it is the first."""
        starts = self.starts
        n = len(starts)
        end = self.end
        fd = self.fd
        cap = len(scratch)
        out: list[FileEntry] = []
        append = out.append
        eid = first
        while eid <= last:
            begin = starts[eid]
            j = eid + 1  # the chunk: entries eid..j-1, whole frames within the buffer (at least one)
            while j <= last and (starts[j + 1] if j + 1 < n else end) - begin <= cap:
                j += 1
            stop = starts[j] if j < n else end
            buf = memoryview(scratch)[: stop - begin] if stop - begin <= cap else memoryview(bytearray(stop - begin))
            if os.preadv(fd, [buf], begin) != stop - begin:
                raise StorageError(f"ledger {self.ledger_id}: short read at {begin} (file truncated?)")
            prev = 0
            for k in range(eid, j):
                nxt = (starts[k + 1] if k + 1 < n else end) - begin
                crc, length, got = _FRAME.unpack_from(buf, prev)
                if _crc32c(buf[prev + 4 : nxt]) != crc or length != nxt - prev - HEADER_SIZE or got != k:
                    self.bad[k] = (begin + prev, begin + nxt)
                    err = self._damage(Damage(self.ledger_id, "checksum", k, k, begin + prev, begin + nxt,
                                              "frame checksum mismatch"))
                    if out:
                        return out
                    raise err
                pos = prev + HEADER_SIZE
                size = nxt - pos
                if head_bytes < size:
                    append(FileEntry(bytes(buf[pos : pos + head_bytes]), FileSpan(ref, begin + pos + head_bytes,
                                                                                  size - head_bytes)))
                else:
                    append(FileEntry(bytes(buf[pos:nxt]), None))
                prev = nxt
            eid = j
        return out

    def read_range(self, first: int, last: int, max_bytes: int, verify: bool, overhead: int = 0) -> list[memoryview]:
        """Entries first..last (fewer when max_bytes would be exceeded, not counting `overhead` bytes of
        each entry; always one) with one pread."""
        self.check()
        last = self._fit(first, self._bounds(first, last), max_bytes, overhead)
        starts = self.starts
        n = len(starts)
        begin = starts[first]
        stop = starts[last + 1] if last + 1 < n else self.end
        buf = os.pread(self.fd, stop - begin, begin)
        if len(buf) != stop - begin:
            raise StorageError(f"ledger {self.ledger_id}: short read at {begin} (file truncated?)")
        mv = memoryview(buf)
        offs = starts[first : last + 2]
        if len(offs) == last - first + 1:
            offs.append(stop)
        out: list[memoryview] = []
        prev = offs[0] - begin
        eid = first
        for nxt in offs[1:]:
            nxt -= begin
            if verify:
                crc, length, got = _FRAME.unpack_from(mv, prev)
                if _crc32c(mv[prev + 4 : nxt]) != crc or length != nxt - prev - HEADER_SIZE or got != eid:
                    # Serve what precedes the damaged entry; the next read starts at it and gets the error.
                    self.bad[eid] = (begin + prev, begin + nxt)
                    err = self._damage(Damage(self.ledger_id, "checksum", eid, eid, begin + prev, begin + nxt,
                                              "frame checksum mismatch"))
                    if out:
                        return out
                    raise err
            out.append(mv[prev + HEADER_SIZE : nxt])
            prev = nxt
            eid += 1
        return out

    def read_prefix(self, entry_id: int, max_bytes: int) -> bytes:
        self.check()
        self._bounds(entry_id, entry_id)  # raises for a known damaged entry; the prefix is not verified
        starts = self.starts
        start = starts[entry_id] + HEADER_SIZE
        stop = starts[entry_id + 1] if entry_id + 1 < len(starts) else self.end
        want = min(max_bytes, stop - start)
        buf = os.pread(self.fd, want, start)
        if len(buf) != want:
            raise StorageError(f"ledger {self.ledger_id}: short read at {start}")
        return buf

    # ---- open-time recovery

    def load_index(self) -> bool:
        """Load the sidecar index; False when it is missing or invalid (then the log is scanned)."""
        try:
            with open(self.idx_path, "rb") as f:
                raw = f.read()
        except FileNotFoundError:
            return False
        if len(raw) < _IDX_HEAD.size + 4 or _crc32c(raw[:-4]) != _CRC.unpack_from(raw, len(raw) - 4)[0]:
            return False
        magic, count, end, payload = _IDX_HEAD.unpack_from(raw, 0)
        if magic != _IDX_MAGIC or len(raw) != _IDX_HEAD.size + 8 * count + 4:
            return False
        starts = array("q")
        starts.frombytes(raw[_IDX_HEAD.size : -4])
        if _BIG_ENDIAN_HOST:
            starts.byteswap()
        self.starts, self.end, self.payload_bytes, self.sealed = starts, end, payload, True
        size = os.fstat(self.fd).st_size
        if size < end:
            # Sealed, then cut short (not by us: a seal never shrinks a ledger below its index). The index
            # still says where every entry was, so the entries before the cut are served; the rest are
            # damaged. Rebuilding by scanning would instead re-seal the ledger shorter and lose the evidence.
            k = next(i for i in range(len(starts)) if (starts[i + 1] if i + 1 < len(starts) else end) > size)
            self.readable = k
            if self.on_damage is not None:
                self.on_damage(Damage(self.ledger_id, "truncated", k, len(starts) - 1, starts[k], end,
                                      f"file is {size} bytes, the index says {end}"), True)
        elif size > end and self.on_damage is not None:
            self.on_damage(Damage(self.ledger_id, "trailing-garbage", -1, -1, end, size,
                                  f"{size - end} bytes after the last entry of a sealed ledger"), True)
        return True

    def scan(self) -> ScanResult:
        """Rebuild the offsets of the entries from the log (self.end..size is a torn tail or garbage)."""
        r = scan_ledger(self.fd)
        self.starts, self.end, self.payload_bytes, self.bad = r.starts, r.end, r.payload, dict(r.bad)
        return r

    def index_bytes(self) -> bytes:
        starts = self.starts
        if _BIG_ENDIAN_HOST:
            starts = array("q", starts)
            starts.byteswap()
        body = _IDX_HEAD.pack(_IDX_MAGIC, len(self.starts), self.end, self.payload_bytes) + starts.tobytes()
        return body + _CRC.pack(_crc32c(body))


class LocalReadHandle(ReadHandle):
    """A reader's view of a ledger; for an open ledger it follows the writer's last add confirmed."""

    def __init__(self, store: LocalLedgerStore, lf: _LedgerFile) -> None:
        self.ledger_id = lf.ledger_id
        self._store = store
        self._lf = lf
        self._closed = False
        lf.refs += 1

    @property
    def last_add_confirmed(self) -> int:
        return len(self._lf.starts) - 1

    @property
    def length(self) -> int:
        return self._lf.payload_bytes

    @property
    def is_sealed(self) -> bool:
        return self._lf.sealed

    async def read(self, first: int, last: int) -> list[bytes | memoryview]:
        return self._lf.read_range(first, last, -1, self._store.verify_reads)  # type: ignore[return-value]

    async def read_up_to(self, first: int, last: int, max_bytes: int, overhead: int = 0) -> list[bytes | memoryview]:
        return self._lf.read_range(first, last, max(0, max_bytes), self._store.verify_reads, overhead)  # type: ignore[return-value]

    async def read_spans(self, first: int, last: int, max_bytes: int, overhead: int, head_bytes: int
                         ) -> list[FileEntry] | None:
        store = self._store
        return self._lf.read_spans(first, last, max(0, max_bytes), overhead, head_bytes,
                                   store.scratch if store.verify_reads else None)

    async def read_prefix(self, entry_id: int, max_bytes: int) -> bytes | memoryview:
        return self._lf.read_prefix(entry_id, max_bytes)

    def entry_size(self, entry_id: int) -> int:
        """Payload size of a durable entry, known without reading it."""
        lf = self._lf
        starts = lf.starts
        stop = starts[entry_id + 1] if entry_id + 1 < len(starts) else lf.end
        return stop - starts[entry_id] - HEADER_SIZE

    async def close(self) -> None:
        if not self._closed:
            self._closed = True
            self._store._release(self._lf)


class LocalWriteHandle(LocalReadHandle, WriteHandle):
    """The single writer of an open ledger. Appends are queued and written by one flusher at a time, in
    order; everything queued while a write+fsync is in progress goes into the next one (group commit)."""

    def __init__(self, store: LocalLedgerStore, lf: _LedgerFile) -> None:
        super().__init__(store, lf)
        lf.writer = self
        self._loop = asyncio.get_running_loop()
        self._queue: list[tuple[bytes, tuple[Buffer, ...], int, asyncio.Future[int]]] = []
        self._next_id = len(lf.starts)
        self._state = _OPEN
        self._error: StorageError | None = None
        self._flusher: asyncio.Task[None] | None = None
        self._flush_scheduled = False
        self._always = store.fsync == "always"

    @property
    def pending(self) -> int:
        """Appends issued but not yet durable."""
        return self._next_id - len(self._lf.starts)

    def _refusal(self) -> StorageError:
        if self._state == _FENCED:
            return LedgerFencedError(f"ledger {self.ledger_id} is fenced")
        if self._state == _FAILED:
            assert self._error is not None
            return self._error
        return LedgerClosedError(f"ledger {self.ledger_id} is closed")

    def append_nowait(self, data: Buffer | Sequence[Buffer]) -> asyncio.Future[int]:
        fut: asyncio.Future[int] = self._loop.create_future()
        if self._state != _OPEN:
            fut.set_exception(self._refusal())
            return fut
        parts: tuple[Buffer, ...] = (data,) if isinstance(data, bytes | bytearray | memoryview) else tuple(data)
        length = 0
        for p in parts:
            length += len(p)
        if length > MAX_ENTRY_SIZE:
            fut.set_exception(StorageError(f"entry of {length} bytes is too large"))
            return fut
        eid = self._next_id
        self._next_id = eid + 1
        crc = _crc32c(_LEN_ID.pack(length, eid))
        for p in parts:
            crc = _crc32c(p, crc)
        self._queue.append((_FRAME.pack(crc, length, eid), parts, length, fut))
        if self._always:
            if self._flusher is None:
                self._flusher = self._loop.create_task(self._flush_loop())
        elif not self._flush_scheduled:
            self._flush_scheduled = True
            self._loop.call_soon(self._flush_inline)
        return fut

    async def append(self, data: Buffer | Sequence[Buffer]) -> int:
        return await self.append_nowait(data)

    def _take_batch(self) -> tuple[list, list[Buffer], int]:
        batch = self._queue
        self._queue = []
        iov: list[Buffer] = []
        size = 0
        for hdr, parts, length, _ in batch:
            iov.append(hdr)
            iov.extend(parts)
            size += HEADER_SIZE + length
        return batch, iov, size

    def _commit(self, batch: list, size: int) -> None:
        """The batch is written (and synced if required): publish it and complete its futures in order."""
        lf = self._lf
        starts = lf.starts
        pos = lf.end
        eid = len(starts)
        payload = 0
        for _, _, length, _ in batch:
            starts.append(pos)
            pos += HEADER_SIZE + length
            payload += length
        lf.end = pos
        lf.payload_bytes += payload
        if self._store.write_failed_at is not None:  # writes work again (readiness)
            self._store.write_failed_at = None
        for _, _, _, fut in batch:
            if not fut.done():
                fut.set_result(eid)
            eid += 1

    def _flush_inline(self) -> None:
        self._flush_scheduled = False
        if not self._queue or self._state == _FAILED:
            return
        batch, iov, size = self._take_batch()
        try:
            _pwritev_all(self._lf.fd, iov, self._lf.end)
        except Exception as e:
            self._fail(batch, e)
            return
        self._store.writes += 1
        self._commit(batch, size)
        if self._store.fsync == "interval":
            self._store._dirty.add(self._lf)

    async def _flush_loop(self) -> None:
        lf = self._lf
        try:
            while self._queue and self._state != _FAILED:
                batch, iov, size = self._take_batch()
                try:
                    await self._loop.run_in_executor(self._store._executor, _write_and_sync, lf.fd, iov, lf.end)
                except Exception as e:
                    self._fail(batch, e)
                    return
                self._store.writes += 1
                self._store.syncs += 1
                if lf.deleted:  # deleted or abandoned meanwhile: nothing is acknowledged any more
                    self._fail(batch, NoSuchLedgerError(f"ledger {self.ledger_id} is gone"))
                    return
                self._commit(batch, size)
        finally:
            self._flusher = None

    def _fail(self, batch: list, exc: BaseException) -> None:
        """A write or fsync failed: nothing of this batch or after it is acknowledged, and the ledger
        refuses further appends (the managed ledger rolls over to a new one)."""
        self._state = _FAILED
        self._error = StorageError(f"ledger {self.ledger_id}: write failed: {exc!r}")
        self._store.write_errors += 1
        self._store.last_write_error = str(self._error)
        self._store.write_failed_at = time.monotonic()
        log.error("ledger %d: write failed (%r): the appends of this batch are not acknowledged; the managed "
                  "ledger moves on to a new ledger", self.ledger_id, exc)
        self._error.__cause__ = exc
        for _, _, _, fut in batch + self._queue:
            if not fut.done():
                fut.set_exception(self._error)
        self._queue = []
        self._next_id = len(self._lf.starts)
        with contextlib.suppress(OSError):
            os.ftruncate(self._lf.fd, self._lf.end)  # best effort: the seal bounds the ledger anyway

    def _fence(self) -> None:
        if self._state in (_OPEN, _CLOSING):
            self._state = _FENCED
            err = LedgerFencedError(f"ledger {self.ledger_id} is fenced")
            for _, _, _, fut in self._queue:
                if not fut.done():
                    fut.set_exception(err)
            self._queue = []

    async def _drain(self) -> None:
        """Wait until everything queued is written (or failed)."""
        while True:
            if self._flusher is not None:
                await asyncio.shield(self._flusher)
            elif self._queue and not self._always:
                self._flush_inline()
            else:
                return

    async def close(self) -> None:
        """Seal the ledger: appends issued before close() still complete; later ones fail."""
        if self._state == _CLOSED:
            return
        if self._state == _OPEN:
            self._state = _CLOSING
        await self._drain()
        lf = self._lf
        if not lf.sealed and not lf.deleted:
            self._next_id = len(lf.starts)
            await self._store._seal(lf)
        self._state = _CLOSED
        lf.writer = None
        await super().close()


def _write_and_sync(fd: int, iov: list[Buffer], offset: int) -> None:
    _pwritev_all(fd, iov, offset)
    os.fdatasync(fd)


class LedgerDamagedAtStart(StorageError):
    """localStoreDamagedLedgerPolicy=refuse-start and the start-up check found damage."""

    def __init__(self, damage: list[Damage]) -> None:
        self.damage = damage
        listed = "; ".join(d.describe() for d in damage)
        super().__init__(f"damaged ledger files (localStoreDamagedLedgerPolicy=refuse-start; run "
                         f"`kop storage check --data-dir DIR` for details, or set it to serve-intact to serve "
                         f"the intact entries): {listed}")


class LocalLedgerStore(LedgerStore):
    """Ledgers as files in one directory (see the module docstring for the format and durability)."""

    def __init__(
        self,
        directory: str | os.PathLike[str],
        *,
        fsync: FsyncPolicy | str = "always",
        fsync_interval_ms: int = 1000,
        verify_reads: bool = True,
        io_threads: int = 4,
        damaged_ledger_policy: str = "serve-intact",
        exclusive: bool = True,
    ) -> None:
        """`exclusive=False`: do not lock the directory - a worker of a multi-process node (kop/node/),
        whose supervisor holds the lock for all of them and each of which writes only the ledgers of the
        partitions it owns. `verify_reads` re-checks the frame CRC on every read: on by default, because Kafka's broker serves
        a flipped byte as is and only clients that check CRCs notice (librdkafka does not by default); the
        cost on the fetch path is measured in docs/benchmarks.md. `damaged_ledger_policy`: "serve-intact"
        records damage found at start-up and serves the intact entries; "refuse-start" raises
        LedgerDamagedAtStart listing it (the start-up check reads every ledger's index and size, and scans
        every unsealed ledger; a flipped byte in a sealed ledger is only found when read)."""
        if fsync not in FSYNC_POLICIES:
            raise ValueError(f"fsync must be one of {FSYNC_POLICIES}, got {fsync!r}")
        if damaged_ledger_policy not in DAMAGED_LEDGER_POLICIES:
            raise ValueError(f"damaged_ledger_policy must be one of {DAMAGED_LEDGER_POLICIES}")
        self.directory = os.fspath(directory)
        self.fsync = fsync
        self.fsync_interval_ms = fsync_interval_ms
        self.verify_reads = verify_reads
        # The buffer a verified zero-copy read checks its chunks in (_LedgerFile._verified_spans): one per store,
        # reused by every read (reads run on the event loop, one at a time; nothing keeps a view of it).
        self.scratch = bytearray(SCRATCH_BYTES) if verify_reads else bytearray()
        os.makedirs(self.directory, exist_ok=True)
        try:
            self._lock_fd = os.open(os.path.join(self.directory, "LOCK"), os.O_RDWR | os.O_CREAT, 0o644)
        except OSError as e:
            raise StorageError(f"ledger directory {self.directory} cannot be written: {e.strerror or e}") from e
        try:
            if exclusive:
                fcntl.flock(self._lock_fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as e:
            os.close(self._lock_fd)
            raise StorageError(f"ledger directory {self.directory} is in use by another process") from e
        problem = self.probe_writable()  # a full disk, too: refuse to start rather than fail every produce
        if problem is not None:
            os.close(self._lock_fd)
            raise StorageError(problem)
        self._executor = ThreadPoolExecutor(max_workers=io_threads, thread_name_prefix="kop-ledger-io")
        self._files: dict[int, _LedgerFile] = {}
        self._opening: SingleFlight[int, _LedgerFile] = SingleFlight()
        self._dirty: set[_LedgerFile] = set()
        self._interval_task: asyncio.Task[None] | None = None
        self._closed = False
        # Counters for metrics and tests: batches written, fdatasync calls on ledger files.
        self.writes = 0
        self.syncs = 0
        # Damage found (admin internal stats, metrics) and recovery steps taken, by kind.
        self.damage: dict[tuple[int, str, int], Damage] = {}
        self.recovery: dict[str, int] = {"torn_tails": 0, "torn_bytes": 0, "damaged_entries_kept": 0,
                                         "ledgers_recovered": 0}
        self.write_errors = 0  # failed writes (ENOSPC, EIO, ...): produce answers KAFKA_STORAGE_ERROR
        self.last_write_error: str | None = None
        self.write_failed_at: float | None = None  # monotonic time of a write failure no write has followed
        self._id_path = os.path.join(self.directory, "ledger-ids")
        self._id_lock = asyncio.Lock()
        limit = 0
        with contextlib.suppress(FileNotFoundError, ValueError):
            with open(self._id_path) as f:
                limit = int(f.read().strip().removeprefix("next="))
        existing = self._scan_ids()
        self._next_id = max([limit, *(i + 1 for i in existing)])
        self._id_limit = self._next_id  # nothing reserved yet in this run
        try:
            self._check_at_start(existing, full=damaged_ledger_policy == "refuse-start")
        except BaseException:
            self._executor.shutdown(wait=False)
            os.close(self._lock_fd)
            raise
        if damaged_ledger_policy == "refuse-start" and self.damage:
            self._executor.shutdown(wait=False)
            os.close(self._lock_fd)
            raise LedgerDamagedAtStart(list(self.damage.values()))

    # ---- damage

    def record_damage(self, d: Damage, *, log_it: bool = False) -> bool:
        """Remember `d` (once); True when it is new. `log_it`: say it now (damage found at start-up or in
        recovery; damage a read meets is logged by the partition log, which knows the Kafka offsets)."""
        key = (d.ledger_id, d.kind, d.first_entry)
        if key in self.damage:
            return False
        self.damage[key] = d
        if log_it:
            log.error("damaged ledger file %s: %s", self._path(d.ledger_id), d.describe())
        return True

    def _on_damage(self, d: Damage, at_load: bool) -> None:
        self.record_damage(d, log_it=at_load)

    def _check_at_start(self, ids: list[int], full: bool) -> None:
        """Cheap structural check of every sealed ledger (its index against the file size: truncation and
        trailing garbage); with `full`, also scan every unsealed ledger for damaged entries."""
        for lid in ids:
            try:
                fd = os.open(self._path(lid), os.O_RDONLY)
            except FileNotFoundError:
                continue
            try:
                lf = _LedgerFile(lid, self._path(lid), fd)
                lf.on_damage = self._on_damage
                if not lf.load_index() and full:
                    for e, (start, stop) in scan_ledger(fd).bad.items():
                        self.record_damage(Damage(lid, "checksum", e, e, start, stop, "frame checksum mismatch "
                                                  "(unsealed ledger)"), log_it=True)
            finally:
                os.close(fd)

    # ---- helpers

    def _path(self, ledger_id: int) -> str:
        return os.path.join(self.directory, f"{ledger_id}.log")

    def _scan_ids(self) -> list[int]:
        ids = []
        for name in os.listdir(self.directory):
            stem, _, ext = name.partition(".")
            if ext in ("log", "idx") and stem.isdigit():
                ids.append(int(stem))
        return sorted(set(ids))

    def _check_open(self) -> None:
        if self._closed:
            raise StorageError("ledger store is closed")

    async def _run(self, fn: Callable[..., _T], *args: object) -> _T:
        """Run blocking disk work off the loop when it includes an fsync; inline when it cannot block long."""
        if self.fsync == "none":
            return fn(*args)
        return await asyncio.get_running_loop().run_in_executor(self._executor, fn, *args)

    async def _reserve_ids(self) -> None:
        async with self._id_lock:
            if self._next_id < self._id_limit:
                return
            start = await asyncio.get_running_loop().run_in_executor(
                self._executor, _reserve_block, self._id_path, self._next_id)
            self._next_id, self._id_limit = start, start + _ID_BLOCK

    def _ensure_interval_task(self) -> None:
        if self.fsync == "interval" and self._interval_task is None and not self._closed:
            self._interval_task = asyncio.get_running_loop().create_task(self._interval_sync())

    async def _interval_sync(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            await asyncio.sleep(self.fsync_interval_ms / 1000)
            await self._sync_dirty(loop)

    async def _sync_dirty(self, loop: asyncio.AbstractEventLoop) -> None:
        dirty, self._dirty = self._dirty, set()
        for lf in dirty:
            if not lf.deleted and lf.fd >= 0:
                with contextlib.suppress(OSError):
                    await loop.run_in_executor(self._executor, os.fdatasync, lf.fd)
                    self.syncs += 1

    async def _seal(self, lf: _LedgerFile) -> None:
        """Make the ledger CLOSED at its durable entries: cut any tail, write the sidecar index. Fencing
        and the writer's close() may race to seal; the second one waits for the first."""
        if lf.sealed:
            return
        if lf.sealing is not None:
            await asyncio.shield(lf.sealing)
            return
        lf.sealing = asyncio.get_running_loop().create_future()
        sync = self.fsync != "none"
        data = lf.index_bytes()
        fd = lf.fd

        def work() -> None:
            if os.fstat(fd).st_size > lf.end:
                os.ftruncate(fd, lf.end)
            if sync:
                os.fdatasync(fd)
            _write_atomic(lf.idx_path, data, sync)

        try:
            await self._run(work)
            lf.sealed = True
            self._dirty.discard(lf)
            lf.sealing.set_result(None)
        except BaseException as e:
            lf.sealing.set_exception(e)
            lf.sealing.exception()
            lf.sealing = None
            raise

    def _release(self, lf: _LedgerFile) -> None:
        lf.refs -= 1
        if lf.refs <= 0 and lf.writer is None:
            if self._files.get(lf.ledger_id) is lf:
                del self._files[lf.ledger_id]
            self._dirty.discard(lf)
            if lf.fd >= 0:
                os.close(lf.fd)
                lf.fd = -1

    async def _load(self, ledger_id: int) -> _LedgerFile:
        lf = self._files.get(ledger_id)
        if lf is not None:
            return lf

        async def load() -> _LedgerFile:
            path = self._path(ledger_id)
            try:
                fd = os.open(path, os.O_RDWR)
            except FileNotFoundError:
                raise NoSuchLedgerError(f"no ledger {ledger_id}") from None
            lf = _LedgerFile(ledger_id, path, fd)
            lf.on_damage = self._on_damage
            try:
                if not lf.load_index():
                    # Unsealed (crashed writer) or a damaged sidecar: rebuild from the frames. Scanning
                    # a large file is disk-bound, so it runs in a thread.
                    r = await asyncio.get_running_loop().run_in_executor(self._executor, lf.scan)
                    self._report_scan(lf, r)
            except BaseException:
                os.close(fd)
                raise
            self._files[ledger_id] = lf
            return lf

        return await self._opening.run(ledger_id, load)

    def _report_scan(self, lf: _LedgerFile, r: ScanResult) -> None:
        """Say once what recovering an unsealed ledger found: a torn tail (cut off when the ledger is
        sealed: writes that were never acknowledged) and damaged entries kept in place."""
        self.recovery["ledgers_recovered"] += 1
        n = len(r.starts)
        if r.size > r.end:
            self.recovery["torn_tails"] += 1
            self.recovery["torn_bytes"] += r.size - r.end
            log.warning("recovering ledger %d (%s): dropping a torn tail of %d bytes at bytes %d..%d after "
                        "entry %d (entries from %d on were never completely written, so never acknowledged); "
                        "%d entries kept", lf.ledger_id, lf.path, r.size - r.end, r.end, r.size, n - 1, n, n)
        for e, (start, stop) in sorted(r.bad.items()):
            self.recovery["damaged_entries_kept"] += 1
            self.record_damage(Damage(lf.ledger_id, "checksum", e, e, start, stop,
                                      "frame checksum mismatch found in recovery; valid entries follow, so it "
                                      "is kept in place (not cut off as a torn tail)"), log_it=True)

    def probe_writable(self) -> str | None:
        """None when a small synced write into the directory works, else why not (readiness: a full or
        read-only disk). Blocking: run it in a thread."""
        path = os.path.join(self.directory, ".write-probe")
        try:
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
            try:
                os.write(fd, b"\0" * 4096)
                os.fdatasync(fd)
            finally:
                os.close(fd)
                with contextlib.suppress(OSError):
                    os.unlink(path)
        except OSError as e:
            return f"ledger directory {self.directory} cannot be written: {e.strerror or e}"
        return None

    def damage_list(self) -> list[dict[str, Any]]:
        return [d.as_dict() for d in sorted(self.damage.values(), key=lambda d: (d.ledger_id, d.first_entry))]

    def damage_of(self, ledger_ids: set[int]) -> list[dict[str, Any]]:
        return [d.as_dict() for d in sorted(self.damage.values(), key=lambda d: (d.ledger_id, d.first_entry))
                if d.ledger_id in ledger_ids]

    # ---- LedgerStore

    async def create_ledger(self) -> LocalWriteHandle:
        self._check_open()
        if self._next_id >= self._id_limit:
            await self._reserve_ids()
        ledger_id = self._next_id
        self._next_id += 1
        path = self._path(ledger_id)
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o644)
        if self.fsync != "none":
            await self._run(_fsync_dir, self.directory)
        lf = _LedgerFile(ledger_id, path, fd)
        self._files[ledger_id] = lf
        self._ensure_interval_task()
        return LocalWriteHandle(self, lf)

    async def open_ledger(self, ledger_id: int, recover: bool = True) -> LocalReadHandle:
        self._check_open()
        lf = await self._load(ledger_id)
        if recover and not lf.sealed:
            writer = lf.writer
            if writer is not None:
                writer._fence()
                await writer._drain()
            if not lf.sealed and not lf.deleted:
                await self._seal(lf)
        lf.check()
        return LocalReadHandle(self, lf)

    async def delete_ledger(self, ledger_id: int) -> None:
        self._check_open()
        lf = self._files.pop(ledger_id, None)
        if lf is not None:
            writer = lf.writer
            if writer is not None:
                writer._fence()
                await writer._drain()
                lf.writer = None
            lf.deleted = True
            self._dirty.discard(lf)
            if lf.fd >= 0:
                os.close(lf.fd)
                lf.fd = -1
        found = False
        for p in (self._path(ledger_id), self._path(ledger_id)[:-4] + ".idx"):
            try:
                os.unlink(p)
                found = True
            except FileNotFoundError:
                pass
        if not found and lf is None:
            raise NoSuchLedgerError(f"no ledger {ledger_id}")

    async def list_ledgers(self) -> list[int]:
        self._check_open()
        return self._scan_ids()

    async def close(self) -> None:
        """Wait for queued writes, sync, release files. Open ledgers are left unsealed (as a crashed
        writer would leave them); the next open with recovery seals them."""
        if self._closed:
            return
        self._closed = True
        if self._interval_task is not None:
            self._interval_task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._interval_task
        for lf in list(self._files.values()):
            if lf.writer is not None:
                await lf.writer._drain()
                lf.writer._state = _CLOSED
                self._dirty.add(lf)
        if self.fsync != "none":
            await self._sync_dirty(asyncio.get_running_loop())
        for lf in list(self._files.values()):
            if lf.fd >= 0:
                os.close(lf.fd)
                lf.fd = -1
            lf.deleted = True  # any handle still held now fails instead of reading a recycled fd
        self._files.clear()
        self._executor.shutdown(wait=True)
        os.close(self._lock_fd)

    def abandon(self) -> None:
        """Release the OS resources without writing anything more, as a killed process would (for crash
        tests in one process: queued appends are simply lost, nothing is sealed or synced)."""
        self._closed = True
        if self._interval_task is not None:
            self._interval_task.cancel()
        for lf in self._files.values():
            lf.deleted = True  # a write+fsync still in a thread will not be acknowledged
            if lf.writer is not None:
                lf.writer._state = _FAILED
                lf.writer._error = StorageError("store abandoned")
                lf.writer._queue = []
        self._executor.shutdown(wait=True)  # no thread may still use an fd closed below
        for lf in self._files.values():
            if lf.fd >= 0:
                os.close(lf.fd)
                lf.fd = -1
        self._files.clear()
        os.close(self._lock_fd)


@dataclass
class LedgerCheck:
    """What `check_ledger_file` found in one ledger file."""

    ledger_id: int
    sealed: bool
    entries: int
    damage: list[Damage]
    torn_tail: tuple[int, int] | None  # bytes after the last entry of an unsealed ledger (dropped at recovery)
    starts: array  # frame start of every entry (to read the intact neighbours of a damaged run)
    end: int


def check_ledger_file(path: str, chunk: int = 4 << 20) -> LedgerCheck:
    """Verify every entry of one ledger file offline (`kop storage check`): a sealed ledger against its
    index (size, then each frame's length, entry id and CRC), an unsealed one by a recovery scan. Runs of
    consecutive damaged entries are merged into one Damage."""
    ledger_id = int(os.path.basename(path).partition(".")[0])
    fd = os.open(path, os.O_RDONLY)
    try:
        lf = _LedgerFile(ledger_id, path, fd)
        found: list[Damage] = []
        lf.on_damage = lambda d, _at_load: found.append(d)
        if not lf.load_index():
            r = scan_ledger(fd, chunk)
            damage = [Damage(ledger_id, "checksum", e, e, a, b, "frame checksum mismatch") for e, (a, b) in sorted(r.bad.items())]
            torn = (r.end, r.size) if r.size > r.end else None
            return LedgerCheck(ledger_id, False, len(r.starts), _merge(damage), torn, r.starts, r.end)
        starts, end = lf.starts, lf.end
        n = len(starts) if lf.readable < 0 else lf.readable
        bad: list[Damage] = []
        i = 0
        while i < n:  # read a chunk of whole frames, verify each
            begin = starts[i]
            j = i
            while j < n and (starts[j + 1] if j + 1 < len(starts) else end) - begin <= chunk:
                j += 1
            j = max(j, i + 1)
            stop = starts[j] if j < len(starts) else end
            buf = memoryview(os.pread(fd, stop - begin, begin))
            for k in range(i, j):
                a = starts[k] - begin
                b = (starts[k + 1] if k + 1 < len(starts) else end) - begin
                crc, length, got = _FRAME.unpack_from(buf, a)
                if got != k or length != b - a - HEADER_SIZE or _crc32c(buf[a + 4 : b]) != crc:
                    bad.append(Damage(ledger_id, "checksum", k, k, begin + a, begin + b, "frame checksum mismatch"))
            i = j
        return LedgerCheck(ledger_id, True, len(starts), _merge(bad) + found, None, starts, end)
    finally:
        os.close(fd)


def _merge(damage: list[Damage]) -> list[Damage]:
    out: list[Damage] = []
    for d in damage:
        prev = out[-1] if out else None
        if prev is not None and prev.kind == d.kind == "checksum" and prev.last_entry + 1 == d.first_entry:
            out[-1] = Damage(d.ledger_id, d.kind, prev.first_entry, d.last_entry, prev.byte_start, d.byte_end, d.detail)
        else:
            out.append(d)
    return out


def read_entry_at(path: str, check: LedgerCheck, entry_id: int) -> bytes | None:
    """The payload of an intact entry of a checked ledger file (None when it is damaged or absent)."""
    if not 0 <= entry_id < check.entries or any(d.first_entry <= entry_id <= d.last_entry for d in check.damage):
        return None
    start = check.starts[entry_id]
    stop = check.starts[entry_id + 1] if entry_id + 1 < check.entries else check.end
    with open(path, "rb") as f:
        f.seek(start + HEADER_SIZE)
        data = f.read(stop - start - HEADER_SIZE)
    return data if len(data) == stop - start - HEADER_SIZE else None
