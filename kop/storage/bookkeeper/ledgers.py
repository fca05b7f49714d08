"""The ledger store over real bookies: an asyncio BookKeeper ledger client (docs/bookkeeper.md).

Ledger ids, metadata and bookie discovery live in ZooKeeper at BookKeeper's own paths (metadata.py), so
BookKeeper's shell lists and reads our ledgers and the bookies' garbage collector keeps their data.
Entries travel over the v2 protocol (protocol.py, client.py), with CRC32C digests.

Write path (one writer per ledger, entry ids assigned at append time, from 0):

* Entry e goes to its write set, ensemble positions (e + k) mod E for k < Qw, of the current ensemble.
  It is acknowledged once Qa distinct bookies of that set answered OK; acknowledgements are delivered in
  entry order, and the last add confirmed (LAC) - the highest entry acknowledged with all before it -
  rides on every later entry ("piggy-backed"), which is how readers and recovery learn it.
* Ensemble change: when a bookie fails (connection lost, timeout, an error answer other than EFENCED),
  it is replaced by another writable bookie; the metadata gets a new segment starting at LAC + 1
  (compare-and-set on the znode version), then every entry still pending is re-sent to the replacement
  where its write set has the replaced position. Appends issued meanwhile wait and go to the new
  ensemble. With E=3, Qw=3, Qa=2 an entry keeps being acknowledged by the two live bookies while this
  happens. The replacement is never a bookie of the ensemble, one that failed on this ledger, or one
  in quarantine (failed on any ledger of this store within ``quarantine_seconds``); a bookie that has
  registered again since it failed (restarted) is neither. There is no falling back to them, so a
  ledger never swaps back and forth between dead bookies that are still registered (registrations
  outlive their bookie by a ZooKeeper session): until a failed bookie comes back, a ledger changes its
  ensemble at most (registered bookies - E) times. No replacement: one WARNING line for the ledger, the
  handle fails with NotEnoughBookiesError, every pending append fails with it, and the managed ledger
  rolls over - to a ledger that cannot be created either (creation honours the quarantine too) until
  enough bookies are back; the producer retries. The metadata changed under us: the handle is fenced
  (LedgerFencedError). ``ensemble_changes`` counts the changes (kop_bookkeeper_ensemble_changes).
* EFENCED from any bookie: another owner opened the ledger with recovery; the handle is fenced.
* close(): appends issued before it complete (or fail); then the metadata becomes CLOSED with
  lastEntryId = LAC and the length at LAC, by compare-and-set.

Open with recovery (the new owner of a ledger; BookKeeper's LedgerRecoveryOp):

1. Read the metadata; CLOSED: done. OPEN: CAS to IN_RECOVERY.
2. Fence: READ entry -1 with FLAG_DO_FENCING on every bookie of the last ensemble; from then on the old
   writer's adds fail with EFENCED there. The answers carry each bookie's last entry, whose header has
   the writer's LAC; enough bookies must answer (for every write-quorum window, fewer than Qa silent).
3. From max(LAC, first entry of the last segment - 1) + 1 on, read each entry (fencing reads) from its
   write set; a found entry is written back to its write set with FLAG_RECOVERY_ADD (Qa acks), so it is
   replicated before the ledger is sealed with it; an entry is missing once Qw - Qa + 1 bookies say it
   does not exist. The first missing entry ends the ledger.
4. CAS the metadata to CLOSED with the last recovered entry and its cumulative length.

Reads go to the first bookie of an entry's write set and fall back to the others; every entry's digest
and ids are checked. Readers of a ledger this store writes follow the writer's LAC; readers of someone
else's open ledger (recover=False) get the LAC the bookies hold.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
import time
from collections import deque
from collections.abc import Sequence
from typing import Any

from kop.storage.api import (
    BadVersionError,
    Buffer,
    LedgerClosedError,
    LedgerFencedError,
    LedgerStore,
    NodeExistsError,
    NoSuchLedgerError,
    NoSuchNodeError,
    ReadHandle,
    StorageError,
    WriteHandle,
)
from kop.storage.bookkeeper import protocol as p
from kop.storage.bookkeeper.client import BookiePool
from kop.storage.bookkeeper.metadata import (
    CLOSED,
    IN_RECOVERY,
    LEDGERS_ROOT,
    MAX_SHORT_LEDGER_ID,
    OPEN,
    LedgerMetadata,
    Segment,
    decode_bookie_address,
    ledger_id_from_path,
    ledger_path,
    new_ctoken,
)
from kop.storage.zookeeper.metadata import ZooKeeperError, ZooKeeperMetadataStore

log = logging.getLogger(__name__)

_OPEN, _CLOSING, _FENCED, _FAILED, _CLOSED = range(5)


class NotEnoughBookiesError(StorageError):
    """Fewer writable bookies than the ensemble (or a replacement) needs."""


def parse_metadata_service_uri(uri: str) -> tuple[str, str]:
    """(ZooKeeper host list, ledgers root) from BookKeeper's metadataServiceUri,
    ``zk+hierarchical://h1:2181;h2:2181/ledgers`` (``zk://`` and ``zk+null://`` mean the same default
    hierarchical layout). A bare ``host:port[,host:port]`` is taken as ZooKeeper with root /ledgers."""
    text = uri.strip()
    if "://" not in text:
        hosts, _, root = text.partition("/")
        return hosts, "/" + root.strip("/") if root.strip("/") else LEDGERS_ROOT
    scheme, _, rest = text.partition("://")
    if scheme not in ("zk", "zk+hierarchical", "zk+null"):
        raise ValueError(f"unsupported metadata service {scheme!r} in {uri!r} (the hierarchical ZooKeeper "
                         "layout, zk+hierarchical://, is the one supported)")
    hosts, _, root = rest.partition("/")
    hosts = hosts.replace(";", ",")
    if not hosts:
        raise ValueError(f"no ZooKeeper servers in {uri!r}")
    return hosts, "/" + root.strip("/") if root.strip("/") else LEDGERS_ROOT


def _as_parts(data: Buffer | Sequence[Buffer]) -> tuple[tuple[Buffer, ...], int]:
    if isinstance(data, bytes | bytearray | memoryview):
        return (data,), len(data)
    parts = tuple(data)
    return parts, sum(map(len, parts))


def _write_set(entry_id: int, ensemble_size: int, write_quorum: int) -> list[int]:
    return [(entry_id + k) % ensemble_size for k in range(write_quorum)]


class _AddOp:
    __slots__ = ("entry_id", "parts", "size", "length", "future", "acked", "sent", "prefix", "quorum")

    def __init__(self, entry_id: int, parts: tuple[Buffer, ...], size: int, length: int,
                 future: asyncio.Future[int]) -> None:
        self.entry_id = entry_id
        self.parts = parts
        self.size = size
        self.length = length  # cumulative ledger length including this entry
        self.future = future
        self.acked: set[int] = set()  # ensemble positions that answered OK
        self.sent = False
        self.prefix = b""
        self.quorum = False


class BookKeeperLedgerStore(LedgerStore):
    """Ledgers on bookies, metadata in ZooKeeper. Create with ``await BookKeeperLedgerStore.connect(uri)``
    (or give it a ZooKeeperMetadataStore of the BookKeeper cluster's ZooKeeper, root = ledgers path)."""

    def __init__(self, zk: ZooKeeperMetadataStore, *, ledgers_root: str = LEDGERS_ROOT,
                 ensemble_size: int = 3, write_quorum: int = 3, ack_quorum: int = 2, password: bytes = b"",
                 request_timeout: float = 10.0, connect_timeout: float = 10.0, quarantine_seconds: float = 60.0,
                 custom_metadata: dict[str, bytes] | None = None, owns_zk: bool = False) -> None:
        if not ensemble_size >= write_quorum >= ack_quorum >= 1:
            raise ValueError(f"need ensemble >= write quorum >= ack quorum >= 1, got "
                             f"{ensemble_size}/{write_quorum}/{ack_quorum}")
        self.zk = zk
        self.root = ledgers_root.rstrip("/") or LEDGERS_ROOT
        self.ensemble_size = ensemble_size
        self.write_quorum = write_quorum
        self.ack_quorum = ack_quorum
        self.password = password
        self.master_key = p.master_key(password)
        self.quarantine_seconds = quarantine_seconds
        self.custom_metadata = {"application": b"kop"} if custom_metadata is None else dict(custom_metadata)
        self.pool = BookiePool(connect_timeout=connect_timeout, request_timeout=request_timeout)
        self._owns_zk = owns_zk
        self._writers: dict[int, BKWriteHandle] = {}
        self._quarantined: dict[str, float] = {}  # bookie id -> monotonic time it may be used again
        # bookie id -> the session of its registration when it was first seen in quarantine (a new
        # session means the bookie was restarted: the quarantine is lifted)
        self._quarantined_session: dict[str, int | None] = {}
        self._tasks: set[asyncio.Task[None]] = set()
        # bookie id -> how many times it came back (registered with a new session) out of quarantine: a
        # ledger excludes the bookies that failed on it only until they came back
        self.generation: dict[str, int] = {}
        self._closed = False
        self.ensemble_changes = 0  # counters for tests and metrics (kop_bookkeeper_ensemble_changes)
        self.ensemble_change_failures = 0  # ledgers stopped for want of a replacement
        self.recoveries = 0

    @classmethod
    async def connect(cls, metadata_service_uri: str, **kwargs: Any) -> BookKeeperLedgerStore:
        """Connect to the BookKeeper cluster whose metadata service is ``metadata_service_uri``
        (``zk+hierarchical://host:port/ledgers``), with its own ZooKeeper session (as Pulsar's
        BookKeeper client has its own)."""
        hosts, root = parse_metadata_service_uri(metadata_service_uri)
        zk = await ZooKeeperMetadataStore.connect(hosts)
        try:
            return cls(zk, ledgers_root=root, owns_zk=True, **kwargs)
        except BaseException:
            await zk.close()
            raise

    # ---- bookies

    async def writable_bookies(self) -> list[str]:
        """Bookies registered as writable under <root>/available (read-only ones are in a child)."""
        names = await self.zk.children(f"{self.root}/available")
        out = []
        for name in names:
            if name == "readonly":
                continue
            if ":" not in name:  # a custom bookie id: its address is in the registration
                got = await self.zk.get(f"{self.root}/available/{name}")
                if got is None:
                    continue
                self.pool.set_address(name, decode_bookie_address(name, got[0]))
            out.append(name)
        return out

    def _quarantine(self, bookie_id: str) -> None:
        self._quarantined[bookie_id] = time.monotonic() + self.quarantine_seconds
        if bookie_id not in self._quarantined_session and not self._closed:
            self._quarantined_session[bookie_id] = None
            task = asyncio.get_running_loop().create_task(self._note_session(bookie_id))
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)

    async def _note_session(self, bookie_id: str) -> None:
        """Remember which ZooKeeper session the failed bookie's registration has (see _in_quarantine)."""
        with contextlib.suppress(StorageError):
            session = await self.zk.ephemeral_owner(f"{self.root}/available/{bookie_id}")
            if bookie_id in self._quarantined and self._quarantined_session.get(bookie_id) is None:
                self._quarantined_session[bookie_id] = session

    def quarantined(self) -> list[str]:
        """Bookies in quarantine now (failed recently), for logs and tests."""
        now = time.monotonic()
        return sorted(b for b, until in self._quarantined.items() if until > now)

    async def _in_quarantine(self, bookie_id: str, now: float) -> bool:
        """Whether a registered bookie is still in quarantine. Lifted when the time is up, and when the
        bookie's registration belongs to another ZooKeeper session than the one it had when first seen
        here in quarantine: it was restarted (or its session expired and it registered again), so its
        failure is history. A killed bookie's registration lingers with its old session, so it stays in."""
        until = self._quarantined.get(bookie_id)
        if until is None:
            return False
        if until <= now:
            del self._quarantined[bookie_id]
            self._quarantined_session.pop(bookie_id, None)
            return False
        try:
            session = await self.zk.ephemeral_owner(f"{self.root}/available/{bookie_id}")
        except StorageError:
            return True
        seen = self._quarantined_session.get(bookie_id)
        if seen is None:
            self._quarantined_session[bookie_id] = session
        elif session is not None and session != seen:
            log.info("bookie %s registered again: out of quarantine", bookie_id)
            self.generation[bookie_id] = self.generation.get(bookie_id, 0) + 1
            del self._quarantined[bookie_id]
            del self._quarantined_session[bookie_id]
            return False
        return True

    async def _choose(self, count: int, exclude: set[str]) -> list[str]:
        """`count` writable bookies, none in `exclude` nor in quarantine. No falling back to quarantined
        bookies: a bookie that just failed is most likely dead with its registration still there, and a
        ledger placed on it would fail at once (and an ensemble change onto it would be undone by the
        next one: the storm of issue #24). Not enough: NotEnoughBookiesError; the caller's client
        retries, and a bookie that comes back (registers again) is usable at once."""
        now = time.monotonic()
        candidates = [b for b in await self.writable_bookies() if b not in exclude]
        healthy = [b for b in candidates if not await self._in_quarantine(b, now)]
        if len(healthy) >= count:
            return random.sample(healthy, count)
        held = sorted(set(candidates) - set(healthy))
        raise NotEnoughBookiesError(f"need {count} writable bookie(s) besides {sorted(exclude)}, found "
                                    f"{sorted(healthy)}" + (f" (in quarantine: {held})" if held else ""))

    # ---- metadata

    async def _new_ledger_id(self) -> int:
        for attempt in range(3):
            try:
                path = await self.zk.create(f"{self.root}/idgen/ID-", b"", ephemeral=True, sequential=True)
                break
            except ZooKeeperError:
                # The answer was lost with the connection. Asking again is safe here (unlike for most
                # sequential creates): a node left behind is ephemeral and only makes an id unused.
                if attempt == 2:
                    raise
        with contextlib.suppress(NoSuchNodeError):
            await self.zk.delete(path)
        ledger_id = int(path.rsplit("ID-", 1)[1])
        if ledger_id >= MAX_SHORT_LEDGER_ID:
            raise StorageError("ledger ids beyond 2^31-1 (BookKeeper's idgen-long scheme) are not supported")
        return ledger_id

    async def read_metadata(self, ledger_id: int) -> tuple[LedgerMetadata, int]:
        got = await self.zk.get(ledger_path(ledger_id, self.root))
        if got is None:
            raise NoSuchLedgerError(f"no ledger {ledger_id}")
        return LedgerMetadata.decode(got[0]), got[1].version

    async def _write_metadata(self, ledger_id: int, md: LedgerMetadata, version: int) -> int:
        stat = await self.zk.put(ledger_path(ledger_id, self.root), md.encode(), expected_version=version)
        return stat.version

    # ---- LedgerStore

    def _check_open(self) -> None:
        if self._closed:
            raise StorageError("ledger store is closed")

    async def create_ledger(self) -> BKWriteHandle:
        self._check_open()
        for _ in range(10):
            ensemble = await self._choose(self.ensemble_size, set())
            ledger_id = await self._new_ledger_id()
            md = LedgerMetadata(
                ensemble_size=self.ensemble_size, write_quorum=self.write_quorum, ack_quorum=self.ack_quorum,
                segments=[Segment(0, ensemble)], state=OPEN, last_entry_id=-1, length=0,
                digest_type=p.DIGEST_CRC32C, password=self.password, ctime=int(time.time() * 1000),
                custom=dict(self.custom_metadata), ctoken=new_ctoken(),
            )
            try:
                # The metadata exists before any entry is written: bookies garbage-collect data of
                # ledgers without metadata (docs/bookkeeper.md, Layout in ZooKeeper).
                await self.zk.put(ledger_path(ledger_id, self.root), md.encode(), expected_version=-1)
            except NodeExistsError:
                log.warning("ledger id %d already has metadata (ZooKeeper restored?); taking another", ledger_id)
                continue
            handle = BKWriteHandle(self, ledger_id, md, 0)
            self._writers[ledger_id] = handle
            return handle
        raise StorageError("could not allocate a fresh ledger id")

    async def open_ledger(self, ledger_id: int, recover: bool = True) -> BKReadHandle:
        self._check_open()
        md, version = await self.read_metadata(ledger_id)
        if md.is_closed:
            return BKReadHandle(self, ledger_id, md, md.last_entry_id, md.length)
        if recover:
            md = await self._recover(ledger_id, md, version)
            return BKReadHandle(self, ledger_id, md, md.last_entry_id, md.length)
        writer = self._writers.get(ledger_id)
        if writer is not None and writer._state in (_OPEN, _CLOSING):
            return BKReadHandle(self, ledger_id, md, -1, 0, writer=writer)
        lac, length = await self._read_lac(ledger_id, md)
        return BKReadHandle(self, ledger_id, md, lac, length)

    async def delete_ledger(self, ledger_id: int) -> None:
        """Delete the metadata; the bookies drop the data at their next garbage collection."""
        self._check_open()
        writer = self._writers.pop(ledger_id, None)
        if writer is not None:
            writer._fail(NoSuchLedgerError(f"ledger {ledger_id} was deleted"), _FAILED)
        try:
            await self.zk.delete(ledger_path(ledger_id, self.root))
        except NoSuchNodeError:
            raise NoSuchLedgerError(f"no ledger {ledger_id}") from None

    async def list_ledgers(self) -> list[int]:
        """Every ledger of the cluster's metadata (the hierarchical levels walked in parallel)."""
        self._check_open()
        ids: list[int] = []

        async def walk(path: str, levels: list[str]) -> None:
            names = await self.zk.children(path)
            subdirs = []
            for name in names:
                if not levels and not name.isdigit():
                    continue  # available, cookies, LAYOUT, idgen, ... at the root
                if name.startswith("L"):
                    lid = ledger_id_from_path([*levels, name])
                    if lid is not None:
                        ids.append(lid)
                elif name.isdigit() and len(levels) < 4:
                    subdirs.append(name)
            await asyncio.gather(*(walk(f"{path}/{n}", [*levels, n]) for n in subdirs))

        await walk(self.root, [])
        return sorted(ids)

    async def close(self) -> None:
        """Wait for pending appends (bounded), then drop connections. Open ledgers stay open (as a
        crashed writer leaves them); the next owner recovers them."""
        if self._closed:
            return
        self._closed = True
        for writer in list(self._writers.values()):
            with contextlib.suppress(Exception):
                await asyncio.wait_for(writer._drain(), self.pool.request_timeout * 2)
            writer._fail(StorageError("ledger store is closed"), _FAILED)
        self._writers.clear()
        for task in list(self._tasks):
            task.cancel()
        await self.pool.close()
        if self._owns_zk:
            await self.zk.close()

    # ---- reading entries

    def _read_entry(self, ledger_id: int, md: LedgerMetadata, entry_id: int, *, fence: bool = False,
                    ) -> asyncio.Future[p.Entry]:
        """Read one entry from its write set: the first bookie, then the next on any failure (bookies
        that failed recently last)."""
        fut: asyncio.Future[p.Entry] = self.pool.loop.create_future()
        ensemble = md.ensemble_for(entry_id)
        order = [ensemble[i] for i in _write_set(entry_id, md.ensemble_size, md.write_quorum)]
        if self._quarantined:  # bookies that failed recently are asked last
            now = time.monotonic()
            order.sort(key=lambda b: self._quarantined.get(b, 0) > now)
        errors: list[str] = []
        frame = p.encode_read(ledger_id, entry_id, fence_key=self.master_key if fence else None)
        key = (p.READ_ENTRY, ledger_id, entry_id)

        def attempt(i: int) -> None:
            bookie = order[i]

            def done(rc: int, body: memoryview | None) -> None:
                if fut.done():
                    return
                if rc == p.EOK and body is not None:
                    try:
                        fut.set_result(p.decode_entry(body, ledger_id, entry_id))
                        return
                    except p.DigestError as e:
                        errors.append(f"{bookie}: {e}")
                else:
                    errors.append(f"{bookie}: {p.rc_name(rc)}")
                if i + 1 < len(order):
                    attempt(i + 1)
                else:
                    fut.set_exception(StorageError(f"ledger {ledger_id}: cannot read entry {entry_id} "
                                                   f"({'; '.join(errors)})"))

            self.pool.connection(bookie).send(key, (frame,), done)

        attempt(0)
        return fut

    async def read_entries(self, ledger_id: int, md: LedgerMetadata, first: int, last: int) -> list[memoryview]:
        futs = [self._read_entry(ledger_id, md, e) for e in range(first, last + 1)]
        try:
            entries = await asyncio.gather(*futs)
        except BaseException:
            for f in futs:
                if f.done() and not f.cancelled():
                    f.exception()  # retrieved: only the first failure is reported
            raise
        return [e.payload for e in entries]

    def _read_all(self, ledger_id: int, bookies: list[str], entry_id: int, fence: bool,
                  ) -> asyncio.Future[list[tuple[int, p.Entry | None]]]:
        """Send the same READ to every bookie in `bookies`; (rc, entry) of each, in their order. A digest
        failure counts as EIO."""
        loop = self.pool.loop
        fut: asyncio.Future[list[tuple[int, p.Entry | None]]] = loop.create_future()
        results: list[tuple[int, p.Entry | None] | None] = [None] * len(bookies)
        left = [len(bookies)]
        frame = p.encode_read(ledger_id, entry_id, fence_key=self.master_key if fence else None)
        key = (p.READ_ENTRY, ledger_id, entry_id)
        for i, bookie in enumerate(bookies):
            def done(rc: int, body: memoryview | None, i: int = i) -> None:
                entry = None
                if rc == p.EOK and body is not None:
                    try:
                        entry = p.decode_entry(body, ledger_id, None if entry_id < 0 else entry_id)
                    except p.DigestError:
                        rc = p.EIO
                results[i] = (rc, entry)
                left[0] -= 1
                if left[0] == 0 and not fut.done():
                    fut.set_result(results)  # type: ignore[arg-type]

            self.pool.connection(bookie).send(key, (frame,), done)
        return fut

    async def _read_lac(self, ledger_id: int, md: LedgerMetadata) -> tuple[int, int]:
        """(LAC, length at LAC) of an open ledger as its bookies know it, without fencing."""
        answers = await self._read_all(ledger_id, md.last_ensemble, p.LAST_ADD_CONFIRMED, fence=False)
        lac = max([e.lac for rc, e in answers if rc == p.EOK and e is not None] + [-1])
        if lac < 0:
            return -1, 0
        entry = await self._read_entry(ledger_id, md, lac)
        return lac, entry.length

    # ---- recovery

    async def _recover(self, ledger_id: int, md: LedgerMetadata, version: int) -> LedgerMetadata:
        self.recoveries += 1
        for _ in range(10):
            if md.is_closed:
                return md
            if md.state == OPEN:
                marked = md.copy(state=IN_RECOVERY)
                try:
                    version = await self._write_metadata(ledger_id, marked, version)
                    md = marked
                except BadVersionError:
                    md, version = await self.read_metadata(ledger_id)
                    continue
            last, length = await self._fence_and_recover(ledger_id, md)
            closed = md.copy(state=CLOSED, last_entry_id=last, length=length)
            try:
                await self._write_metadata(ledger_id, closed, version)
                log.info("ledger %d recovered and closed at entry %d", ledger_id, last)
                return closed
            except BadVersionError:
                md, version = await self.read_metadata(ledger_id)  # closed by a concurrent recovery?
        raise StorageError(f"ledger {ledger_id}: recovery kept racing with metadata changes")

    async def _fence_and_recover(self, ledger_id: int, md: LedgerMetadata) -> tuple[int, int]:
        ensemble = md.last_ensemble
        e_size, qw, qa = md.ensemble_size, md.write_quorum, md.ack_quorum
        answers = await self._read_all(ledger_id, ensemble, p.LAST_ADD_CONFIRMED, fence=True)
        valid = set()
        lac = -1
        for i, (rc, entry) in enumerate(answers):
            if rc == p.EUA:
                raise StorageError(f"ledger {ledger_id}: the bookies refuse our password (EUA)")
            if rc == p.EOK and entry is not None:
                valid.add(i)
                lac = max(lac, entry.lac)
            elif rc in (p.ENOENTRY, p.ENOLEDGER):
                valid.add(i)
        for start in range(e_size):
            silent = sum(1 for k in range(qw) if (start + k) % e_size not in valid)
            if silent >= qa:
                raise StorageError(f"ledger {ledger_id}: cannot recover, too few bookies answered the fencing "
                                   f"read ({[p.rc_name(rc) for rc, _ in answers]} from {ensemble})")
        first_of_segment = md.segments[-1].first_entry_id
        last = max(lac, first_of_segment - 1)
        length = 0
        if last >= 0:
            length = (await self._read_entry(ledger_id, md, last, fence=True)).length
        # Read forward until an entry is missing; write each found entry back to its whole write set.
        window = 16
        pending_adds: list[asyncio.Future[None]] = []
        next_id = last + 1
        done = False
        while not done:
            reads = [self._recover_read(ledger_id, md, e) for e in range(next_id, next_id + window)]
            for e, read in zip(range(next_id, next_id + window), reads, strict=True):
                entry = await read
                if entry is None:
                    done = True
                    break
                pending_adds.append(self._recovery_add(ledger_id, md, entry))
                last, length = e, entry.length
            next_id += window
            window = min(window * 2, 256)
        for r in reads:  # the rest of the last window: not needed
            if not r.done():
                r.cancel()
            elif not r.cancelled():
                r.exception()
        if pending_adds:
            await asyncio.gather(*pending_adds)
        return last, length

    def _recover_read(self, ledger_id: int, md: LedgerMetadata, entry_id: int) -> asyncio.Future[p.Entry | None]:
        """A recovery read: fencing READs to the whole write set; the entry as soon as one has it, None
        once Qw - Qa + 1 bookies say it does not exist, an error if neither can be decided."""
        fut: asyncio.Future[p.Entry | None] = self.pool.loop.create_future()
        ensemble = md.ensemble_for(entry_id)
        positions = _write_set(entry_id, md.ensemble_size, md.write_quorum)
        needed_missing = md.write_quorum - md.ack_quorum + 1
        answered = [0, 0]  # answers, "no such entry" answers
        errors: list[str] = []
        frame = p.encode_read(ledger_id, entry_id, fence_key=self.master_key, flags=p.FLAG_HIGH_PRIORITY)
        key = (p.READ_ENTRY, ledger_id, entry_id)
        for pos in positions:
            bookie = ensemble[pos]

            def done(rc: int, body: memoryview | None, bookie: str = bookie) -> None:
                answered[0] += 1
                if fut.done():
                    return
                if rc == p.EOK and body is not None:
                    try:
                        fut.set_result(p.decode_entry(body, ledger_id, entry_id))
                        return
                    except p.DigestError as e:
                        errors.append(f"{bookie}: {e}")
                elif rc in (p.ENOENTRY, p.ENOLEDGER):
                    answered[1] += 1
                    if answered[1] >= needed_missing:
                        fut.set_result(None)
                        return
                else:
                    errors.append(f"{bookie}: {p.rc_name(rc)}")
                if answered[0] == len(positions):
                    fut.set_exception(StorageError(
                        f"ledger {ledger_id}: recovery cannot tell whether entry {entry_id} exists "
                        f"({answered[1]} said no, errors: {'; '.join(errors)})"))

            self.pool.connection(bookie).send(key, (frame,), done)
        return fut

    def _recovery_add(self, ledger_id: int, md: LedgerMetadata, entry: p.Entry) -> asyncio.Future[None]:
        """Write a recovered entry to its write set of the last ensemble with FLAG_RECOVERY_ADD (fenced
        bookies accept it); done at Qa acknowledgements."""
        loop = self.pool.loop
        fut: asyncio.Future[None] = loop.create_future()
        ensemble = md.last_ensemble
        positions = _write_set(entry.entry_id, md.ensemble_size, md.write_quorum)
        payload = entry.payload
        prefix = p.encode_add(self.master_key, ledger_id, entry.entry_id, entry.entry_id - 1, entry.length,
                              (payload,), len(payload), flags=p.FLAG_RECOVERY_ADD)
        acks = [0]
        failures: list[str] = []
        key = (p.ADD_ENTRY, ledger_id, entry.entry_id)
        for pos in positions:
            bookie = ensemble[pos]

            def done(rc: int, body: memoryview | None, bookie: str = bookie) -> None:
                if fut.done():
                    return
                if rc == p.EOK:
                    acks[0] += 1
                    if acks[0] >= md.ack_quorum:
                        fut.set_result(None)
                    return
                failures.append(f"{bookie}: {p.rc_name(rc)}")
                if len(failures) > md.write_quorum - md.ack_quorum:
                    fut.set_exception(StorageError(
                        f"ledger {ledger_id}: recovery could not re-replicate entry {entry.entry_id} "
                        f"({'; '.join(failures)})"))

            self.pool.connection(bookie).send(key, (prefix, payload), done)
        return fut


class BKReadHandle(ReadHandle):
    """A reader of a ledger: sealed (closed or recovered), someone else's open ledger at the LAC its
    bookies reported, or - with `writer` - this store's own open ledger, following its LAC."""

    def __init__(self, store: BookKeeperLedgerStore, ledger_id: int, md: LedgerMetadata, lac: int, length: int,
                 writer: BKWriteHandle | None = None) -> None:
        self.ledger_id = ledger_id
        self._store = store
        self._md = md
        self._lac = lac
        self._length = length
        self._writer = writer
        self._closed = False

    @property
    def metadata(self) -> LedgerMetadata:
        return self._writer._md if self._writer is not None else self._md

    @property
    def is_sealed(self) -> bool:
        return self._writer is None and self._md.is_closed

    @property
    def last_add_confirmed(self) -> int:
        return self._writer._lac if self._writer is not None else self._lac

    @property
    def length(self) -> int:
        return self._writer._length if self._writer is not None else self._length

    def _check_range(self, first: int, last: int) -> None:
        if self._closed:
            raise StorageError(f"ledger {self.ledger_id}: handle is closed")
        if first < 0 or last < first or last > self.last_add_confirmed:
            raise StorageError(f"ledger {self.ledger_id}: entries {first}..{last} outside "
                               f"0..{self.last_add_confirmed}")

    async def read(self, first: int, last: int) -> list[bytes | memoryview]:
        self._check_range(first, last)
        return await self._read(first, last)  # type: ignore[return-value]

    async def _read(self, first: int, last: int) -> list[memoryview]:
        try:
            return await self._store.read_entries(self.ledger_id, self.metadata, first, last)
        except StorageError:
            if self._writer is not None or not await self._refresh_metadata():
                raise
            return await self._store.read_entries(self.ledger_id, self._md, first, last)

    async def _refresh_metadata(self) -> bool:
        """After a read that no bookie of the write set could serve, read the ledger's metadata again;
        True when its ensembles changed. BookKeeper's recovery of a dead bookie (the shell's `recover`,
        the autorecovery daemon) copies that bookie's entries elsewhere and rewrites the ensembles in
        ZooKeeper: a reader holding the old ensembles would only ask bookies that are gone. (The Java
        client's read-only handles watch the metadata for this; one re-read on failure costs nothing
        while reads succeed.) Not for this store's own writer, whose metadata is authoritative."""
        try:
            md, _ = await self._store.read_metadata(self.ledger_id)
        except Exception as e:  # ZooKeeper away too: the read's own error is the one to report
            log.debug("ledger %d: re-reading metadata after a failed read: %r", self.ledger_id, e)
            return False
        if md.segments == self._md.segments:
            return False
        log.info("ledger %d: ensembles changed in ZooKeeper (re-replicated?), reading from %s",
                 self.ledger_id, sorted(md.bookies()))
        self._md = md
        return True

    async def read_up_to(self, first: int, last: int, max_bytes: int, overhead: int = 0) -> list[bytes | memoryview]:
        """Entries are read in growing batches sized from the ones already read, so that a fetch with a
        small byte budget does not pull a thousand entries over the network to send three."""
        self._check_range(first, last)
        out: list[bytes | memoryview] = []
        total = 0
        entry = first
        batch = 4
        while entry <= last:
            hi = min(last, entry + batch - 1)
            for data in await self._read(entry, hi):
                total += len(data) - overhead
                if out and total > max_bytes:
                    return out
                out.append(data)
            entry = hi + 1
            average = max(total / len(out), 1)
            batch = max(4, min(512, int((max_bytes - total) / average) + 1))
        return out

    async def close(self) -> None:
        self._closed = True


class BKWriteHandle(BKReadHandle, WriteHandle):
    """The single writer of a ledger (see the module docstring for the write path)."""

    def __init__(self, store: BookKeeperLedgerStore, ledger_id: int, md: LedgerMetadata, version: int) -> None:
        super().__init__(store, ledger_id, md, -1, 0)
        self._loop = store.pool.loop
        self._version = version
        self._ensemble = list(md.last_ensemble)
        self._e, self._qw, self._qa = md.ensemble_size, md.write_quorum, md.ack_quorum
        self._next_id = 0
        self._issued_length = 0
        self._pending: deque[_AddOp] = deque()
        self._state = _OPEN
        self._error: StorageError | None = None
        self._failed: dict[int, str] = {}  # ensemble position -> bookie that failed there
        # every bookie that failed on this ledger (-> the store's generation of it then): never taken
        # back, unless it has come back (restarted) since
        self._ever_failed: dict[str, int] = {}
        self.ensemble_changes = 0
        self._changing: asyncio.Task[None] | None = None
        self._idle: asyncio.Future[None] | None = None

    @property
    def metadata(self) -> LedgerMetadata:
        return self._md

    @property
    def is_sealed(self) -> bool:
        return self._md.is_closed

    @property
    def last_add_confirmed(self) -> int:
        return self._lac

    @property
    def length(self) -> int:
        return self._length

    @property
    def pending(self) -> int:
        return len(self._pending)

    @property
    def ensemble(self) -> list[str]:
        return list(self._ensemble)

    def _check_range(self, first: int, last: int) -> None:
        if first < 0 or last < first or last > self._lac:
            raise StorageError(f"ledger {self.ledger_id}: entries {first}..{last} outside 0..{self._lac}")

    # ---- appends

    async def append(self, data: Buffer | Sequence[Buffer]) -> int:
        return await self.append_nowait(data)

    def append_nowait(self, data: Buffer | Sequence[Buffer]) -> asyncio.Future[int]:
        fut: asyncio.Future[int] = self._loop.create_future()
        if self._state != _OPEN:
            fut.set_exception(self._refusal())
            return fut
        parts, size = _as_parts(data)
        self._issued_length += size
        op = _AddOp(self._next_id, parts, size, self._issued_length, fut)
        self._next_id += 1
        self._pending.append(op)
        if self._changing is None:
            self._send(op)
        return fut

    def _refusal(self) -> StorageError:
        if self._state == _FENCED:
            return self._error or LedgerFencedError(f"ledger {self.ledger_id} is fenced")
        if self._state == _FAILED:
            return self._error or StorageError(f"ledger {self.ledger_id} failed")
        return LedgerClosedError(f"ledger {self.ledger_id} is closed")

    def _send(self, op: _AddOp) -> None:
        op.sent = True
        op.prefix = p.encode_add(self._store.master_key, self.ledger_id, op.entry_id, self._lac, op.length,
                                 op.parts, op.size)
        for pos in _write_set(op.entry_id, self._e, self._qw):
            self._send_to(op, pos)

    def _send_to(self, op: _AddOp, pos: int) -> None:
        bookie = self._ensemble[pos]
        self._store.pool.connection(bookie).send(
            (p.ADD_ENTRY, self.ledger_id, op.entry_id), (op.prefix, *op.parts),
            lambda rc, _body: self._on_add(op, pos, bookie, rc))

    def _on_add(self, op: _AddOp, pos: int, bookie: str, rc: int) -> None:
        if self._ensemble[pos] != bookie or self._state not in (_OPEN, _CLOSING):
            return  # the answer of a bookie replaced meanwhile, or the handle has stopped
        if rc == p.EOK:
            if not op.future.done():
                op.acked.add(pos)
                if not op.quorum and len(op.acked) >= self._qa:
                    op.quorum = True
                    self._complete()
        elif rc == p.EFENCED:
            self._fail(LedgerFencedError(f"ledger {self.ledger_id} was fenced by another owner "
                                         f"(bookie {bookie})"), _FENCED)
        elif rc == p.EUA:
            self._fail(StorageError(f"ledger {self.ledger_id}: bookie {bookie} refuses our key (EUA)"), _FAILED)
        else:
            # Even when the entry was acknowledged by the others: the bookie is missing this copy and
            # will miss the next ones (a hung bookie would otherwise only be noticed by chance).
            self._bookie_failed(pos, bookie, rc)

    def _complete(self) -> None:
        """Acknowledge, in entry order, every leading entry that has its ack quorum."""
        pending = self._pending
        while pending and pending[0].quorum:
            op = pending.popleft()
            self._lac = op.entry_id
            self._length = op.length
            op.parts = ()
            if not op.future.done():
                op.future.set_result(op.entry_id)
        self._maybe_idle()

    # ---- failures and ensemble changes

    def _bookie_failed(self, pos: int, bookie: str, rc: int) -> None:
        if self._state not in (_OPEN, _CLOSING) or self._failed.get(pos) == bookie:
            return
        log.warning("ledger %d: bookie %s failed an add (%s); replacing it", self.ledger_id, bookie,
                    p.rc_name(rc))
        self._store._quarantine(bookie)
        self._failed[pos] = bookie
        self._ever_failed[bookie] = self._store.generation.get(bookie, 0)
        if self._changing is None:
            self._changing = self._loop.create_task(self._change_ensemble())

    async def _change_ensemble(self) -> None:
        try:
            while self._failed and self._state in (_OPEN, _CLOSING):
                failed = dict(self._failed)
                first = self._lac + 1
                ensemble = list(self._ensemble)
                generation = self._store.generation
                exclude = set(ensemble) | {b for b, g in self._ever_failed.items() if generation.get(b, 0) == g}
                try:
                    replacements = await self._store._choose(len(failed), exclude)
                except NotEnoughBookiesError as e:
                    self._store.ensemble_change_failures += 1
                    log.warning("ledger %d: no bookie can replace %s (%s); the ledger stops at entry %d and "
                                "writes fail until enough bookies are writable", self.ledger_id,
                                sorted(failed.values()), e, self._lac)
                    self._fail(NotEnoughBookiesError(f"ledger {self.ledger_id}: ensemble change failed: no "
                                                     f"replacement for {sorted(failed.values())}: {e}"), _FAILED)
                    break  # not return: a close() waiting in _drain is woken below
                for pos, bookie in zip(sorted(failed), replacements, strict=True):
                    ensemble[pos] = bookie
                md = self._md.copy()
                if md.segments[-1].first_entry_id == first:
                    md.segments[-1].ensemble = ensemble  # nothing acknowledged on the previous one yet
                else:
                    md.segments.append(Segment(first, ensemble))
                await self._update_metadata(md)
                if self._state not in (_OPEN, _CLOSING):
                    break
                log.info("ledger %d: ensemble change at entry %d: %s -> %s", self.ledger_id, first,
                         self._ensemble, ensemble)
                self._store.ensemble_changes += 1
                self.ensemble_changes += 1
                self._ensemble = ensemble
                for pos, bookie in failed.items():
                    if self._failed.get(pos) == bookie:
                        del self._failed[pos]
                for op in list(self._pending):
                    if not op.sent:
                        continue
                    for pos in failed:
                        if pos in _write_set(op.entry_id, self._e, self._qw):
                            op.acked.discard(pos)
                            op.quorum = len(op.acked) >= self._qa
                            self._send_to(op, pos)
        except LedgerFencedError as e:
            self._fail(e, _FENCED)
        except Exception as e:
            err = StorageError(f"ledger {self.ledger_id}: ensemble change failed: {e}")
            err.__cause__ = e
            self._fail(err, _FAILED)
        finally:
            self._changing = None
        if self._state in (_OPEN, _CLOSING):
            for op in list(self._pending):
                if not op.sent:
                    self._send(op)
            self._complete()
        self._maybe_idle()  # a close() waiting for the pending appends may go on now

    async def _update_metadata(self, md: LedgerMetadata) -> None:
        """CAS the metadata. A version conflict while the ledger is still OPEN with our ensembles (we
        are the only writer) is retried; anything else means another owner took it: fenced."""
        for _ in range(5):
            try:
                self._version = await self._store._write_metadata(self.ledger_id, md, self._version)
                self._md = md
                return
            except BadVersionError:
                current, version = await self._store.read_metadata(self.ledger_id)
                if current.state != OPEN or [s.ensemble for s in current.segments] != \
                        [s.ensemble for s in self._md.segments]:
                    raise LedgerFencedError(f"ledger {self.ledger_id}: metadata changed by another client "
                                            f"(state {current.state})") from None
                self._version = version
        raise StorageError(f"ledger {self.ledger_id}: metadata update kept conflicting")

    def _fail(self, exc: StorageError, state: int) -> None:
        """Stop writing: every pending append fails with `exc`, in order; later appends are refused."""
        if self._state in (_FENCED, _FAILED, _CLOSED):
            return
        self._state = state
        self._error = exc
        pending, self._pending = self._pending, deque()
        for op in pending:
            if not op.future.done():
                op.future.set_exception(exc)
        log.info("ledger %d stopped at entry %d: %s", self.ledger_id, self._lac, exc)
        self._maybe_idle()

    def _maybe_idle(self) -> None:
        if self._idle is not None and not self._pending and self._changing is None and not self._idle.done():
            self._idle.set_result(None)

    async def _drain(self) -> None:
        """Wait until no append is pending and no ensemble change is running."""
        while self._pending or self._changing is not None:
            if self._changing is not None:
                with contextlib.suppress(BaseException):
                    await asyncio.shield(self._changing)
                continue
            self._idle = self._loop.create_future()
            await self._idle
            self._idle = None

    # ---- close

    async def close(self) -> None:
        """Seal the ledger: appends issued before close() still complete; later ones are refused. The
        metadata becomes CLOSED at the LAC (unless another owner fenced the ledger, which seals it)."""
        if self._state == _CLOSED:
            return
        if self._state == _OPEN:
            self._state = _CLOSING
        await self._drain()
        store = self._store
        try:
            if self._state == _FENCED:
                return
            closed = self._md.copy(state=CLOSED, last_entry_id=self._lac, length=self._length)
            for _ in range(5):
                try:
                    self._version = await store._write_metadata(self.ledger_id, closed, self._version)
                    self._md = closed
                    return
                except BadVersionError:
                    current, version = await store.read_metadata(self.ledger_id)
                    if current.is_closed and current.last_entry_id == self._lac:
                        self._md = current
                        return  # a recovery sealed it where we would have
                    if current.state != OPEN:
                        raise LedgerFencedError(f"ledger {self.ledger_id} was recovered by another owner "
                                                f"at entry {current.last_entry_id}") from None
                    self._version = version
            raise StorageError(f"ledger {self.ledger_id}: close kept conflicting with metadata changes")
        finally:
            if self._state != _FENCED:
                self._state = _CLOSED
            if store._writers.get(self.ledger_id) is self:
                del store._writers[self.ledger_id]
