"""The managed ledger: one ordered log of entries made of a list of ledgers, after Pulsar's ManagedLedgerImpl.

State kept in the metadata store at ``/managed-ledgers/<name>`` as Pulsar's ManagedLedgerInfo protobuf
(kop/managed_ledger/protobuf.py), always written with a versioned compare-and-set: a BadVersion means
another owner opened this managed ledger, and this instance fences itself (all later operations fail).

Lifecycle (Pulsar's ManagedLedgerImpl; docs/architecture.md, Offsets):

* open: read the info; give the properties to the interceptor; open the last ledger *with recovery* (which
  fences a previous writer and seals it) and record its entries and size (an empty last ledger is dropped);
  give the interceptor the last entry of the log; create a fresh ledger, append it, CAS the info.
* add: entries are issued to the current ledger in call order; the interceptor's before_add runs at issue
  time (so broker entry metadata follows ledger order) and its after_add in acknowledgement order.
* rollover when the current ledger is full - entries >= max_entries_per_ledger, size >= max size, or
  age >= max rollover time (jittered); only with >= 1 entry and only once older than the minimum rollover
  time - checked when an add is issued, after it is acknowledged, and by a timer. Adds arriving during a
  rollover wait in a queue and go to the new ledger in order. A write failure fails the failed add and
  every add issued after it (so the interceptor can restore its counter without a gap) and rolls over.
* trim: whole closed ledgers from the front, never the current one; the info is CASed first, then the
  ledgers are deleted from the store (a crash in between leaks a ledger, never loses a referenced one).
* replace (compaction): a run of closed ledgers is swapped for rewritten, sealed ledgers (rewrite.py) with
  one CAS, then the old ones are deleted; a crash leaves the old list or the new one, never a mix. Ledger
  ids in the list are then no longer ascending: only list order means log order.
* close: wait for in-flight adds, seal the current ledger (dropped when empty), CAS the final info.

An operation that writes the info (set_properties, trim, replace) runs to its end when its caller is cancelled
(kop.aio.run_to_end): the store's write goes on once sent, so a caller stopped between it and recording the
new version left the instance one version behind its own write, and its next CAS fenced it for good (a Kafka
connection closed by a network cut cancelled a Produce inside the producer-state snapshot's set_properties;
the partition then refused every append and transaction marker until the broker restarted - issue #24).

Positions are (ledger id, entry id). Entries are also numbered by *ordinal* (0 = first retained entry),
which is what the binary searches bisect over ("position after N entries").
"""

from __future__ import annotations

import asyncio
import bisect
import contextlib
import functools
import logging
import random
import time
from collections import OrderedDict, deque
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, NamedTuple, cast

from kop.aio import run_to_end
from kop.managed_ledger.config import ManagedLedgerConfig
from kop.managed_ledger.protobuf import LedgerInfo, ManagedLedgerInfo
from kop.managed_ledger.rewrite import LedgerRewriter
from kop.storage.api import (
    BadVersionError,
    Buffer,
    FileEntry,
    LedgerDamagedError,
    NodeExistsError,
    NoSuchLedgerError,
    ReadHandle,
    StorageError,
    WriteHandle,
)

if TYPE_CHECKING:
    from kop.managed_ledger.factory import ManagedLedgerFactory

log = logging.getLogger(__name__)

SWITCH_FAILURE_LOG_S = 10.0

ML_ROOT = "/managed-ledgers"


class Position(NamedTuple):
    """(ledger id, entry id); tuples order like positions in the log."""

    ledger_id: int
    entry_id: int


class Entry(NamedTuple):
    ledger_id: int
    entry_id: int
    data: bytes | memoryview


class SpanEntry(NamedTuple):
    """An entry of ManagedLedger.read_entry_spans: its data is read (bytes) or partly left in its file (FileEntry)."""

    ledger_id: int
    entry_id: int
    data: bytes | memoryview | FileEntry


class ManagedLedgerError(StorageError):
    pass


class ManagedLedgerClosedError(ManagedLedgerError):
    pass


class ManagedLedgerFencedError(ManagedLedgerError):
    """The info was changed by another owner (compare-and-set failed): this instance stopped."""


class InvalidPositionError(ManagedLedgerError):
    """A position outside the retained entries (its ledger was trimmed, or it is beyond the end)."""


class EntryTooShort(Exception):  # noqa: N818 - a signal, not a failure
    """Raised by a search predicate that was given an entry prefix too short to decide; the search then
    reads the whole entry and asks again."""


def now_ms() -> int:
    return time.time_ns() // 1_000_000


class ManagedLedgerInterceptor:
    """Hooks into the add path and the metadata, like Pulsar's ManagedLedgerInterceptor. The defaults do
    nothing; kop/offset's index interceptor stamps broker entry metadata with them."""

    def on_properties_initialize(self, properties: Mapping[str, str]) -> None:
        """At open, with the properties read from the managed-ledger info."""

    def on_open(self, last_entry: Buffer | None) -> None:
        """At open, after recovery, with the last entry of the log (None when the log is empty)."""

    def before_add_entry(self, data: Buffer | Sequence[Buffer], num_messages: int) -> tuple[Any, Any]:
        """When an add is issued to a ledger, in ledger order: return (entry data to store, context)."""
        return data, None

    def after_add_entry(self, position: Position, context: Any) -> None:
        """When an add is durable, in order, before its caller resumes."""

    def on_adds_failed(self, first_context: Any) -> None:
        """The add with this context failed, and so did every add issued after it: restore the state to
        what it was before that add was issued."""

    def properties(self) -> Mapping[str, str]:
        """Properties merged into the managed-ledger info at every write of it."""
        return {}


FailureHook = Callable[[BaseException], None]


class _AddOp:
    __slots__ = ("data", "num_messages", "future", "on_failed", "context", "size", "ledger_id", "done")

    def __init__(self, data: Buffer | Sequence[Buffer], num_messages: int, future: asyncio.Future,
                 on_failed: FailureHook | None = None) -> None:
        self.data = data
        self.num_messages = num_messages
        self.future = future
        self.on_failed = on_failed
        self.context: Any = None
        self.size = 0
        self.ledger_id = -1
        self.done = False


def _fail_op(op: _AddOp, err: BaseException) -> None:
    """Fail a taken add: its hook at once (add_entry_nowait), then its future."""
    if op.future.done():
        return
    if op.on_failed is not None:
        try:
            op.on_failed(err)
        except Exception:  # a writer's hook must not stop the adds after it from failing
            log.exception("an add's failure hook failed")
    op.future.set_exception(err)


def _size_of(data: Buffer | Sequence[Buffer]) -> int:
    if isinstance(data, bytes | bytearray | memoryview):
        return len(data)
    return sum(map(len, data))


_OPEN, _CLOSED, _FENCED = "open", "closed", "fenced"


class ManagedLedger:
    """Create through ManagedLedgerFactory.open()."""

    def __init__(self, factory: ManagedLedgerFactory, name: str, config: ManagedLedgerConfig,
                 interceptor: ManagedLedgerInterceptor | None) -> None:
        self.name = name
        self.config = config
        self.interceptor = interceptor
        self._factory = factory
        self._store = factory.ledger_store
        self._meta = factory.metadata_store
        self.path = f"{ML_ROOT}/{name}"
        self._loop = asyncio.get_running_loop()
        self._state = _OPEN
        self._ledgers: list[LedgerInfo] = []
        self._index_of: dict[int, int] = {}
        self._starts: list[int] = []  # ordinal of the first entry of each ledger
        self._properties: dict[str, str] = {}
        self._info_version = -1
        self._info_unknown = b""
        self._info_lock = asyncio.Lock()
        self._current: WriteHandle | None = None
        self._current_entries = 0  # acknowledged entries of the current ledger
        self._current_size = 0
        self._issued_entries = 0  # issued to the current ledger (acknowledged or in flight)
        self._issued_size = 0
        self._created_at = 0.0
        self._max_age_ms = float(config.max_rollover_time_ms)
        self._max_size_bytes = config.max_size_per_ledger_bytes
        self._timer: asyncio.TimerHandle | None = None
        self._pending: deque[_AddOp] = deque()  # waiting for a ledger
        self._inflight: deque[_AddOp] = deque()  # issued, not acknowledged
        self._inflight_empty: asyncio.Future[None] | None = None
        self._rolling = False
        # "ledger switch failed" is logged at most once per SWITCH_FAILURE_LOG_S (issue #24: while too few
        # bookies are writable every produce retry tries a switch): when it was, and how many were held.
        self._switch_failure_logged = float("-inf")
        self._switch_failures_held = 0
        self._roll_task: asyncio.Task[None] | None = None
        self._read_handles: OrderedDict[int, ReadHandle] = OrderedDict()
        self._last_confirmed: Position | None = None
        self.rollovers = 0  # ledger switches after open (metrics, tests)
        self.trimmed_ledgers = 0
        # Bumped whenever closed ledgers leave the list or are replaced (trim, compaction): ordinals and
        # positions found before a change may then name other entries, so multi-step searches re-check it.
        self.layout_version = 0
        self.replaced_ledgers = 0

    # ---------------------------------------------------------------------------------------- open

    async def _initialize(self) -> None:
        got = await self._meta.get(self.path)
        info = ManagedLedgerInfo()
        if got is not None:
            info = ManagedLedgerInfo.decode(got[0])
            self._info_version = got[1].version
        self._ledgers = info.ledgers
        self._properties = dict(info.properties)
        self._info_unknown = info.unknown
        if self.interceptor is not None:
            self.interceptor.on_properties_initialize(dict(self._properties))
        drop: list[int] = []
        for i, li in enumerate(self._ledgers):
            last = i == len(self._ledgers) - 1
            if not last and li.entries is not None and li.size is not None:
                continue
            # The last ledger (and any whose counts were never recorded) is recovered: fenced and sealed.
            rh = await self._store.open_ledger(li.ledger_id, recover=True)
            li.entries = rh.last_add_confirmed + 1
            li.size = rh.length
            if last:
                li.timestamp = now_ms()
            if li.entries == 0:
                drop.append(li.ledger_id)
                await rh.close()
            else:
                self._cache_handle(li.ledger_id, rh)
        if drop:
            # A crash right after a rollover leaves an empty last ledger; counted and said once.
            self._factory.recovery["empty_ledgers_dropped"] += len(drop)
            log.info("managed ledger %s: recovery dropped empty ledger(s) %s (0 entries, 0 bytes)", self.name, drop)
        self._ledgers = [li for li in self._ledgers if li.ledger_id not in drop]
        self._reindex()
        last_entry = None
        for li in reversed(self._ledgers):
            if li.entries:
                self._last_confirmed = Position(li.ledger_id, li.entries - 1)
                try:
                    last_entry = await self.read_entry(self._last_confirmed)
                except LedgerDamagedError as e:
                    # The interceptor then recovers its counter from the info's properties alone (exact
                    # after a clean close or a rollover, which is when a sealed ledger can be the last).
                    self._factory.recovery["damaged_last_entry"] += 1
                    log.error("managed ledger %s: the last entry is damaged (%s); recovering from the stored "
                              "properties %s", self.name, e, self._properties)
                break
        if self.interceptor is not None:
            self.interceptor.on_open(last_entry)
        handle = await self._store.create_ledger()
        self._ledgers.append(LedgerInfo(handle.ledger_id))
        try:
            await self._write_info()
        except BaseException as e:
            await self._forget_new_ledger(handle, e)
            raise
        self._set_current(handle)
        for ledger_id in drop:
            with contextlib.suppress(NoSuchLedgerError):
                await self._store.delete_ledger(ledger_id)

    # ---------------------------------------------------------------------------------------- state

    @property
    def is_open(self) -> bool:
        return self._state == _OPEN

    @property
    def fenced(self) -> bool:
        """Whether this instance fenced itself (its info changed under it): it takes no write any more; only
        opening the managed ledger again gives a writable one."""
        return self._state == _FENCED

    @property
    def properties(self) -> dict[str, str]:
        return dict(self._properties)

    @property
    def current_ledger_id(self) -> int | None:
        return self._current.ledger_id if self._current is not None else None

    @property
    def last_confirmed_position(self) -> Position | None:
        """Position of the last acknowledged entry (None when the log is empty)."""
        return self._last_confirmed

    @property
    def number_of_entries(self) -> int:
        """Acknowledged, retained entries."""
        if not self._ledgers:
            return 0
        return self._starts[-1] + self._entries_of(len(self._ledgers) - 1)

    @property
    def total_size(self) -> int:
        """Payload bytes of the acknowledged, retained entries."""
        total = 0
        for i in range(len(self._ledgers)):
            total += self._size_of_ledger(i)
        return total

    @property
    def rolling_over(self) -> bool:
        """A ledger switch is in progress (adds queue meanwhile)."""
        return self._rolling

    @property
    def pending_adds(self) -> int:
        return len(self._pending) + len(self._inflight)

    def ledgers(self) -> list[LedgerInfo]:
        """A snapshot of the ledger list; the current ledger shows its acknowledged entries and size."""
        out = []
        for i, li in enumerate(self._ledgers):
            out.append(LedgerInfo(li.ledger_id, self._entries_of(i), self._size_of_ledger(i), li.timestamp))
        return out

    def ledger_counts(self) -> list[tuple[int, int]]:
        """(ledger id, acknowledged entries) of each retained ledger, oldest first."""
        return [(li.ledger_id, self._entries_of(i)) for i, li in enumerate(self._ledgers)]

    def _is_current(self, i: int) -> bool:
        return self._current is not None and i == len(self._ledgers) - 1

    def _entries_of(self, i: int) -> int:
        if self._is_current(i):
            return self._current_entries
        return self._ledgers[i].entries or 0

    def _size_of_ledger(self, i: int) -> int:
        if self._is_current(i):
            return self._current_size
        return self._ledgers[i].size or 0

    def _reindex(self) -> None:
        self._index_of = {li.ledger_id: i for i, li in enumerate(self._ledgers)}
        starts = []
        n = 0
        for i, li in enumerate(self._ledgers):
            starts.append(n)
            if not self._is_current(i):
                n += li.entries or 0
        self._starts = starts

    def _check_open(self) -> None:
        if self._state == _FENCED:
            raise ManagedLedgerFencedError(f"managed ledger {self.name} is fenced")
        if self._state != _OPEN:
            raise ManagedLedgerClosedError(f"managed ledger {self.name} is closed")

    # ---------------------------------------------------------------------------------------- metadata

    async def _write_info(self) -> None:
        """CAS the info (callers hold _info_lock, or run before the ledger is shared)."""
        props = self._properties
        if self.interceptor is not None:
            props.update(self.interceptor.properties())
        ledgers = []
        for i, li in enumerate(self._ledgers):
            if self._is_current(i):
                ledgers.append(LedgerInfo(li.ledger_id, unknown=li.unknown))
            else:
                ledgers.append(li)
        data = ManagedLedgerInfo(ledgers, None, props, self._info_unknown).encode()
        try:
            stat = await self._meta.put(self.path, data, self._info_version)
        except (BadVersionError, NodeExistsError) as e:
            self._fence(e)
            raise ManagedLedgerFencedError(f"managed ledger {self.name} was changed by another owner") from e
        self._info_version = stat.version

    async def _forget_new_ledger(self, handle: WriteHandle, failure: BaseException) -> None:
        """A ledger just created whose recording in the info failed. It is deleted only when the store
        refused the write (a CAS conflict: the info never named it). After any other failure - the task
        cancelled by a stop, a lost connection, a closed store - the write may have landed although its
        await ended in an error, and deleting the ledger would leave the info naming a ledger that is gone
        ("no ledger N" at the next open: the partition could never be opened again). An unreferenced ledger
        kept here costs a file until the next start collects it (PartitionStorage.collect_garbage)."""
        with contextlib.suppress(Exception):
            await handle.close()
        if isinstance(failure, ManagedLedgerFencedError):
            with contextlib.suppress(Exception):
                await self._store.delete_ledger(handle.ledger_id)

    def _fence(self, cause: BaseException) -> None:
        self._state = _FENCED
        err = ManagedLedgerFencedError(f"managed ledger {self.name} is fenced: {cause}")
        self._fail_pending(err)

    async def set_properties(self, updates: Mapping[str, str], remove: Iterable[str] = ()) -> None:
        """Change properties and persist them (CAS); runs to its end (the module docstring)."""
        self._check_open()
        await run_to_end(self._set_properties(dict(updates), list(remove)))

    async def _set_properties(self, updates: Mapping[str, str], remove: Iterable[str]) -> None:
        async with self._info_lock:
            self._check_open()
            for k in remove:
                self._properties.pop(k, None)
            self._properties.update(updates)
            await self._write_info()

    # ---------------------------------------------------------------------------------------- add

    async def add_entry(self, data: Buffer | Sequence[Buffer], num_messages: int = 1) -> Position:
        position, _ = await self.add_entry_nowait(data, num_messages)
        return position

    def add_entry_nowait(self, data: Buffer | Sequence[Buffer], num_messages: int = 1,
                         on_failed: FailureHook | None = None) -> asyncio.Future[tuple[Position, Any]]:
        """Issue an add now; the future gives (position, interceptor context) once it is durable. Adds
        are stored and acknowledged in call order. Buffers must stay unmodified until then.

        `on_failed` is called with the error when the add, once taken, fails - at once, inside the call that
        fails it, before any other code runs. A future's callbacks run a loop turn later (two or three for the
        layers above), and an add issued in those turns would be stored behind the failed ones in the next
        ledger: a hole the writer's rules cannot mend (issue #24: an idempotent Kafka producer refused
        OUT_OF_ORDER_SEQUENCE_NUMBER, a Pulsar message stored twice). Whoever decides what may be appended
        next (producer state, de-duplication) learns of the failure there. An add refused at once (the
        ledger closed or fenced: nothing is stored after it either) gets only its failed future."""
        fut: asyncio.Future[tuple[Position, Any]] = self._loop.create_future()
        if self._state != _OPEN:
            try:
                self._check_open()
            except ManagedLedgerError as e:
                fut.set_exception(e)
            return fut
        op = _AddOp(data, num_messages, fut, on_failed)
        if self._current is not None and not self._rolling and not self._pending:
            if self._current_is_full():
                self._pending.append(op)
                self._start_rollover()
            else:
                self._issue(op)
        else:
            self._pending.append(op)
            if not self._rolling:
                self._start_rollover()
        return fut

    def _issue(self, op: _AddOp) -> None:
        current = self._current
        assert current is not None
        if self.interceptor is not None:
            data, op.context = self.interceptor.before_add_entry(op.data, op.num_messages)
        else:
            data = op.data
        op.data = data
        op.size = _size_of(data)
        op.ledger_id = current.ledger_id
        self._issued_entries += 1
        self._issued_size += op.size
        self._inflight.append(op)
        current.append_nowait(data).add_done_callback(functools.partial(self._on_stored, op))

    def _on_stored(self, op: _AddOp, f: asyncio.Future[int]) -> None:
        if op.done:  # already failed together with an earlier add
            if not f.cancelled():
                f.exception()  # read, so that asyncio does not log it as never retrieved (issue #24)
            return
        exc = ManagedLedgerError("add cancelled") if f.cancelled() else f.exception()
        if exc is not None:
            self._fail_inflight(exc)
            return
        head = self._inflight.popleft()
        assert head is op, "ledger acknowledged adds out of order"
        op.done = True
        op.data = b""
        entry_id = f.result()
        self._current_entries = entry_id + 1
        self._current_size += op.size
        position = Position(op.ledger_id, entry_id)
        self._last_confirmed = position
        if self.interceptor is not None:
            self.interceptor.after_add_entry(position, op.context)
        if not op.future.done():
            op.future.set_result((position, op.context))
        if not self._inflight and self._inflight_empty is not None:
            self._inflight_empty.set_result(None)
            self._inflight_empty = None
        if not self._rolling and self._state == _OPEN and self._current_is_full():
            self._start_rollover()

    def _fail_inflight(self, exc: BaseException) -> None:
        ops = list(self._inflight)
        self._inflight.clear()
        if ops and self.interceptor is not None:
            self.interceptor.on_adds_failed(ops[0].context)
        err = ManagedLedgerError(f"{self.name}: add failed: {exc}")
        err.__cause__ = exc
        for op in ops:
            op.done = True
            self._issued_entries -= 1
            self._issued_size -= op.size
            _fail_op(op, err)
        if self._inflight_empty is not None:
            self._inflight_empty.set_result(None)
            self._inflight_empty = None
        # Adds complete in call order, failures included: the adds queued behind the failed ones (waiting for a
        # rollover) fail with them rather than land in the next ledger behind a hole - a Pulsar producer's
        # resend of a failed message would then look like a duplicate of what was stored after it (issue #24).
        self._fail_pending(err)
        if self._state == _OPEN:
            self._start_rollover()  # the failed ledger takes no more adds; later adds go to a new one

    def _fail_pending(self, err: BaseException) -> None:
        pending, self._pending = self._pending, deque()
        for op in pending:
            _fail_op(op, err)

    # ---------------------------------------------------------------------------------------- rollover

    def _current_is_full(self) -> bool:
        """Pulsar's currentLedgerIsFull, on issued counts."""
        if self._issued_entries == 0:
            return False
        cfg = self.config
        age_ms = (time.monotonic() - self._created_at) * 1000
        if not (self._issued_entries >= cfg.max_entries_per_ledger
                or self._issued_size >= self._max_size_bytes
                or age_ms >= self._max_age_ms):
            return False
        return cfg.min_rollover_time_ms <= 0 or age_ms > cfg.min_rollover_time_ms

    def _set_current(self, handle: WriteHandle) -> None:
        self._current = handle
        self._current_entries = self._current_size = 0
        self._issued_entries = self._issued_size = 0
        self._created_at = time.monotonic()
        self._max_age_ms = self.config.max_rollover_time_ms * (1 + random.random() * self.config.rollover_time_jitter)
        self._reindex()
        if self._timer is not None:
            self._timer.cancel()
        self._timer = self._loop.call_later(self._max_age_ms / 1000 + 0.005, self._on_timer)

    def reconfigure(self, config: ManagedLedgerConfig) -> None:
        """New rollover limits for an open ledger (a topic's segment.bytes / segment.ms altered): they apply
        to the current ledger at once, rolling it over now when it is already past them."""
        self.config = config
        self._max_size_bytes = config.max_size_per_ledger_bytes
        if self._current is None or self._state != _OPEN:
            return
        self._max_age_ms = config.max_rollover_time_ms * (1 + random.random() * config.rollover_time_jitter)
        if self._timer is not None:
            self._timer.cancel()
        left = self._max_age_ms / 1000 - (time.monotonic() - self._created_at)
        self._timer = self._loop.call_later(max(left, 0) + 0.005, self._on_timer)
        if not self._rolling and self._current_is_full():
            self._start_rollover()

    def _on_timer(self) -> None:
        self._timer = None
        if self._state == _OPEN and not self._rolling and self._current_is_full():
            self._start_rollover()

    def _start_rollover(self) -> None:
        if self._rolling or self._state != _OPEN:
            return
        self._rolling = True
        self._roll_task = self._loop.create_task(self._rollover(), name=f"ml-rollover:{self.name}")

    async def _wait_inflight(self) -> None:
        while self._inflight:
            if self._inflight_empty is None:
                self._inflight_empty = self._loop.create_future()
            await asyncio.shield(self._inflight_empty)

    async def _rollover(self) -> None:
        try:
            async with self._info_lock:
                if self._state != _OPEN:
                    return
                await self._wait_inflight()
                await self._switch_ledger()
        except Exception as e:
            if self._state == _OPEN:
                now = time.monotonic()
                if now - self._switch_failure_logged >= SWITCH_FAILURE_LOG_S:
                    held = self._switch_failures_held
                    log.warning("managed ledger %s: ledger switch failed: %r%s", self.name, e,
                                f" ({held} more since the last such line)" if held else "")
                    self._switch_failure_logged, self._switch_failures_held = now, 0
                else:
                    self._switch_failures_held += 1
            err = e if isinstance(e, ManagedLedgerError) else ManagedLedgerError(f"{self.name}: {e!r}")
            self._fail_pending(err)
        finally:
            self._rolling = False
            self._roll_task = None
        self._issue_pending()

    async def _close_current(self) -> tuple[int | None, bool]:
        """Seal the current ledger and record its final counts; (its id, whether it was empty)."""
        old = self._current
        if old is None:
            return None, False
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        # Record the final counts before the first await: readers (ledger_counts, searches) must never
        # see the ledger without them. Nothing is in flight and nothing new is issued while we switch.
        li = self._ledgers[-1]
        li.entries = self._current_entries
        li.size = self._current_size
        li.timestamp = now_ms()
        self._current = None
        self._current_entries = self._current_size = 0
        self._issued_entries = self._issued_size = 0
        empty = li.entries == 0
        if empty:
            self._ledgers.pop()
        self._reindex()
        with contextlib.suppress(StorageError):  # a failed or fenced ledger keeps its durable entries
            await old.close()
        return old.ledger_id, empty

    async def _switch_ledger(self) -> None:
        old_id, old_empty = await self._close_current()
        handle = await self._store.create_ledger()
        self._ledgers.append(LedgerInfo(handle.ledger_id))
        self._current = handle  # so the info shows it as the current ledger
        self._reindex()
        try:
            await self._write_info()
        except BaseException as e:
            self._current = None
            self._ledgers.pop()
            self._reindex()
            await self._forget_new_ledger(handle, e)
            raise
        self._set_current(handle)
        if old_id is not None:
            self.rollovers += 1
            if old_empty:
                with contextlib.suppress(NoSuchLedgerError):
                    await self._store.delete_ledger(old_id)

    def _issue_pending(self) -> None:
        while self._pending and self._current is not None and self._state == _OPEN and not self._rolling:
            if self._current_is_full():
                self._start_rollover()
                return
            self._issue(self._pending.popleft())
        if self._pending and self._current is None and self._state == _OPEN and not self._rolling:
            self._start_rollover()

    async def rollover(self) -> None:
        """Switch to a new ledger now if the current one has entries (admin / tests)."""
        self._check_open()
        if self._issued_entries == 0:
            return
        self._start_rollover()
        while self._roll_task is not None:
            await asyncio.shield(self._roll_task)

    # ---------------------------------------------------------------------------------------- read

    def _cache_handle(self, ledger_id: int, handle: ReadHandle) -> None:
        self._read_handles[ledger_id] = handle
        while len(self._read_handles) > self.config.read_handle_cache_size:
            _, old = self._read_handles.popitem(last=False)
            self._loop.create_task(old.close())

    async def _handle(self, ledger_id: int) -> ReadHandle:
        current = self._current
        if current is not None and current.ledger_id == ledger_id:
            return current
        handle = self._read_handles.get(ledger_id)
        if handle is not None:
            self._read_handles.move_to_end(ledger_id)
            return handle
        if ledger_id not in self._index_of:
            raise InvalidPositionError(f"{self.name}: ledger {ledger_id} is not part of the log")
        handle = await self._store.open_ledger(ledger_id, recover=False)
        other = self._read_handles.get(ledger_id)
        if other is not None:  # opened concurrently
            await handle.close()
            return other
        self._cache_handle(ledger_id, handle)
        return handle

    def _locate(self, position: Position) -> int:
        i = self._index_of.get(position.ledger_id)
        if i is None or position.entry_id < 0 or position.entry_id >= self._entries_of(i):
            raise InvalidPositionError(f"{self.name}: no entry at {tuple(position)}")
        return i

    async def read_entry(self, position: Position) -> bytes | memoryview:
        self._locate(position)
        handle = await self._handle(position.ledger_id)
        return (await handle.read(position.entry_id, position.entry_id))[0]

    async def read_entry_prefix(self, position: Position, max_bytes: int) -> bytes | memoryview:
        """At least the first max_bytes of an entry (all of it when shorter)."""
        self._locate(position)
        handle = await self._handle(position.ledger_id)
        return await handle.read_prefix(position.entry_id, max_bytes)

    async def read_entries(self, start: Position, max_entries: int, max_bytes: int = -1,
                           overhead: int = 0) -> list[Entry]:
        """Up to max_entries acknowledged entries from `start` on, across ledgers, stopping before their
        total size would exceed max_bytes (-1: no limit; `overhead` bytes per entry are not counted); the
        first entry is always returned. `start` may
        be the position just after the last entry of a ledger (then reading goes on in the next one) or
        after the last entry of the log (then nothing is returned)."""
        return cast(list[Entry], await self._read_entries(start, max_entries, max_bytes, overhead, 0))

    async def read_entry_spans(self, start: Position, max_entries: int, max_bytes: int, overhead: int,
                               head_bytes: int) -> list[SpanEntry]:
        """read_entries for a zero-copy send: where the store can (the local store, entries large enough; their
        CRCs checked first when it verifies reads) an entry's data is a FileEntry - its first head_bytes read,
        the rest a span of the ledger's file; elsewhere the bytes, as read_entries gives them."""
        return await self._read_entries(start, max_entries, max_bytes, overhead, head_bytes)

    async def _read_entries(self, start: Position, max_entries: int, max_bytes: int, overhead: int,
                            head_bytes: int) -> list[SpanEntry]:
        i = self._index_of.get(start.ledger_id)
        if i is None or start.entry_id < 0 or start.entry_id > self._entries_of(i):
            raise InvalidPositionError(f"{self.name}: no entry at {tuple(start)}")
        entry = start.entry_id
        out: list[SpanEntry] = []
        new_entry = tuple.__new__  # Entry(...) without the namedtuple's Python-level __new__ (a fetch makes hundreds)
        left = max_entries
        limited = max_bytes >= 0
        budget = max_bytes
        while left > 0 and i < len(self._ledgers):
            count = self._entries_of(i)
            if entry >= count:
                i += 1
                entry = 0
                continue
            if limited and out and budget <= 0:
                break
            ledger_id = self._ledgers[i].ledger_id
            last = min(count - 1, entry + left - 1)
            handle = await self._handle(ledger_id)
            try:
                if limited:
                    spans = await handle.read_spans(entry, last, max(budget, 0), overhead, head_bytes) \
                        if head_bytes > 0 else None
                    datas = spans if spans is not None else \
                        await handle.read_up_to(entry, last, max(budget, 0), overhead)
                else:
                    datas = await handle.read(entry, last)
            except LedgerDamagedError:
                if out:  # serve the intact entries before the damage; the next read meets it first
                    return out
                raise
            for data in datas:
                if limited:
                    size = len(data) - overhead
                    if out and size > budget:
                        return out
                    budget -= size
                out.append(new_entry(SpanEntry, (ledger_id, entry, data)))
                entry += 1
            left -= len(datas)
            if limited and entry <= last:
                break  # the byte budget cut this ledger's range short
            # the ledger list may have changed (trim, rollover) while reading: find our ledger again
            i = self._index_of.get(ledger_id, -1)
            if i < 0:
                break
        return out

    # ---------------------------------------------------------------------------------------- ordinals

    def ordinal_of(self, position: Position) -> int:
        i = self._index_of.get(position.ledger_id)
        if i is None:
            raise InvalidPositionError(f"{self.name}: ledger {position.ledger_id} is not part of the log")
        return self._starts[i] + position.entry_id

    def position_of(self, ordinal: int) -> Position:
        """The position of the entry `ordinal` entries after the first retained one ("position after N
        entries"); ordinal == number_of_entries gives the position the next entry will take."""
        if ordinal < 0:
            raise InvalidPositionError(f"{self.name}: ordinal {ordinal}")
        i = bisect.bisect_right(self._starts, ordinal) - 1
        if i < 0:
            raise InvalidPositionError(f"{self.name}: empty")
        entry = ordinal - self._starts[i]
        count = self._entries_of(i)
        if entry > count or (entry == count and i != len(self._ledgers) - 1):
            raise InvalidPositionError(f"{self.name}: ordinal {ordinal} beyond the end")
        return Position(self._ledgers[i].ledger_id, entry)

    def next_position(self, position: Position) -> Position:
        """The position after `position`: the next entry, or the first of the next non-empty ledger,
        or the position the next add will take."""
        return self.position_of(self.ordinal_of(position) + 1)

    def first_position(self) -> Position | None:
        """Position of the first retained entry (None when there is none)."""
        for i, li in enumerate(self._ledgers):
            if self._entries_of(i):
                return Position(li.ledger_id, 0)
        return None

    async def find_newest_matching(
        self,
        predicate: Callable[[Buffer], bool],
        start: Position | None = None,
        prefix_bytes: int | None = None,
    ) -> Position | None:
        """Pulsar's OpFindNewest: the last entry (from `start`) for which predicate is true, where the
        predicate is true on a prefix of the log and false after it; None when it is false at the start.
        O(log N) single-entry reads. With prefix_bytes, the predicate is given only the first
        prefix_bytes of each entry and may raise EntryTooShort to get the whole entry."""
        total = self.number_of_entries
        lo = 0 if start is None else self.ordinal_of(start)
        hi = total - 1
        if hi < lo:
            return None

        async def test(ordinal: int) -> bool:
            position = self.position_of(ordinal)
            if prefix_bytes is not None:
                data = await self.read_entry_prefix(position, prefix_bytes)
                try:
                    return predicate(data)
                except EntryTooShort:
                    pass
            return predicate(await self.read_entry(position))

        if not await test(lo):
            return None
        if await test(hi):
            return self.position_of(hi)
        while hi - lo > 1:  # predicate(lo) is true, predicate(hi) is false
            mid = (lo + hi) // 2
            if await test(mid):
                lo = mid
            else:
                hi = mid
        return self.position_of(lo)

    async def find_position(self, predicate: Callable[[Buffer], bool], prefix_bytes: int | None = None) -> Position:
        """Pulsar's asyncFindPosition: the position after the newest entry matching the predicate (the
        first entry for which it is false), the first position when none matches, the position the next
        add will take when all match."""
        found = await self.find_newest_matching(predicate, None, prefix_bytes)
        if found is None:
            return self.first_position() or self.position_of(self.number_of_entries)
        return self.next_position(found)

    # ---------------------------------------------------------------------------------------- trim

    async def trim_by_retention(self, retention_ms: int, retention_bytes: int, keep_ledger: int | None = None) -> int:
        """Delete closed ledgers oldest first while each is expired (closed more than retention_ms ago) or
        the log without it still holds >= retention_bytes (Pulsar's and Kafka's size rule); stop at the
        first ledger that is neither, and at `keep_ledger` (a ledger a cursor has not consumed: Pulsar keeps
        it and every later one). Negative = unlimited. Never the current ledger. Returns the count."""
        self._check_open()
        return await run_to_end(self._trim_by_retention(retention_ms, retention_bytes, keep_ledger))

    async def _trim_by_retention(self, retention_ms: int, retention_bytes: int, keep_ledger: int | None) -> int:
        async with self._info_lock:
            self._check_open()
            now = now_ms()
            total = self.total_size
            to_delete = 0
            deleted_size = 0
            for i, li in enumerate(self._ledgers):
                if self._is_current(i) or li.ledger_id == keep_ledger:
                    break
                size = li.size or 0
                expired = retention_ms >= 0 and now - (li.timestamp or 0) > retention_ms
                over = retention_bytes >= 0 and total - deleted_size - size >= retention_bytes
                if not (expired or over):
                    break
                to_delete += 1
                deleted_size += size
            return await self._trim_locked(to_delete)

    async def trim_ledgers(self, count: int, ids: Sequence[int] | None = None) -> int:
        """Delete the first `count` closed ledgers (fewer if the current ledger comes first). With `ids`,
        only if those are still the first ledgers (0 otherwise): a caller that chose them across awaits
        must not trim whatever a compaction or another trim put in their place."""
        self._check_open()
        return await run_to_end(self._trim_ledgers(count, None if ids is None else list(ids)))

    async def _trim_ledgers(self, count: int, ids: Sequence[int] | None) -> int:
        async with self._info_lock:
            self._check_open()
            if ids is not None:
                if [li.ledger_id for li in self._ledgers[:len(ids)]] != list(ids):
                    return 0
                count = min(count, len(ids))
            return await self._trim_locked(count)

    async def _trim_locked(self, count: int) -> int:
        closed = len(self._ledgers) - (1 if self._current is not None else 0)
        count = min(count, closed)
        if count <= 0:
            return 0
        removed = self._ledgers[:count]
        self._ledgers = self._ledgers[count:]
        self._reindex()
        try:
            await self._write_info()
        except BaseException:
            if self._state == _OPEN:  # not fenced: restore the in-memory list
                self._ledgers = removed + self._ledgers
                self._reindex()
            raise
        for li in removed:
            handle = self._read_handles.pop(li.ledger_id, None)
            if handle is not None:
                await handle.close()
            with contextlib.suppress(NoSuchLedgerError):
                await self._store.delete_ledger(li.ledger_id)
        self.trimmed_ledgers += count
        self.layout_version += 1
        return count

    # ---------------------------------------------------------------------------------------- replace

    def rewriter(self, timestamp: int | None = None, window_bytes: int = 8 << 20) -> LedgerRewriter:
        """A writer of replacement ledgers (compaction), rolling by this managed ledger's size limits;
        `timestamp` becomes their close time for retention (default: now)."""
        self._check_open()
        return LedgerRewriter(self, self._store, self.config.max_entries_per_ledger,
                              self._max_size_bytes, now_ms() if timestamp is None else timestamp, window_bytes)

    async def replace_ledgers(self, old_ids: Sequence[int], new_ledgers: Sequence[LedgerInfo],
                              properties: Mapping[str, str] | None = None) -> bool:
        """Replace the run `old_ids` of closed ledgers (consecutive in the list, oldest first) by
        `new_ledgers` (sealed, with entries/size/timestamp; may be empty), together with property
        updates, in one compare-and-set of the info. Returns False, changing nothing, when the run is no
        longer in the list as given (trimmed or replaced meanwhile). The ledgers of the run are deleted
        after the CAS: a crash before it leaves the old list (the new ledgers are unreferenced garbage),
        a crash after it the new one (the old ledgers are garbage); never a mix. Readers holding a
        position in a replaced ledger get InvalidPositionError (or NoSuchLedgerError) and search again."""
        self._check_open()
        old = list(old_ids)
        if not old:
            return False
        return await run_to_end(self._replace_ledgers(old, list(new_ledgers), properties))

    async def _replace_ledgers(self, old: list[int], new_ledgers: Sequence[LedgerInfo],
                               properties: Mapping[str, str] | None) -> bool:
        async with self._info_lock:
            self._check_open()
            start = self._index_of.get(old[0])
            if start is None or [li.ledger_id for li in self._ledgers[start:start + len(old)]] != old:
                return False
            if any(self._is_current(i) for i in range(start, start + len(old))):
                return False
            kept = {li.ledger_id for li in new_ledgers}
            saved_ledgers, saved_props = self._ledgers, dict(self._properties)
            self._ledgers = self._ledgers[:start] + list(new_ledgers) + self._ledgers[start + len(old):]
            if properties:
                self._properties.update(properties)
            self._reindex()
            try:
                await self._write_info()
            except BaseException:
                if self._state == _OPEN:  # not fenced: restore the in-memory state
                    self._ledgers, self._properties = saved_ledgers, saved_props
                    self._reindex()
                raise
            self.layout_version += 1
            self.replaced_ledgers += len(old)
            last = self._last_confirmed
            if last is not None and last.ledger_id not in self._index_of:
                self._last_confirmed = None
                for i in range(len(self._ledgers) - 1, -1, -1):
                    n = self._entries_of(i)
                    if n:
                        self._last_confirmed = Position(self._ledgers[i].ledger_id, n - 1)
                        break
            for ledger_id in old:
                if ledger_id in kept:
                    continue
                handle = self._read_handles.pop(ledger_id, None)
                if handle is not None:
                    with contextlib.suppress(StorageError):
                        await handle.close()
                with contextlib.suppress(NoSuchLedgerError):
                    await self._store.delete_ledger(ledger_id)
        return True

    # ---------------------------------------------------------------------------------------- close

    async def close(self) -> None:
        """Wait for in-flight adds, seal the current ledger (dropped if empty), write the final info."""
        if self._state != _OPEN:
            await self._release()
            return
        async with self._info_lock:
            if self._state != _OPEN:
                await self._release()
                return
            self._state = _CLOSED
            if self._roll_task is not None:
                self._roll_task.cancel()
            await self._wait_inflight()
            self._fail_pending(ManagedLedgerClosedError(f"managed ledger {self.name} is closed"))
            old_id, empty = await self._close_current()
            try:
                await self._write_info()
            except ManagedLedgerFencedError:
                pass
            else:
                if empty and old_id is not None:
                    with contextlib.suppress(NoSuchLedgerError):
                        await self._store.delete_ledger(old_id)
            await self._release()

    async def _release(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        handles = list(self._read_handles.values())
        self._read_handles.clear()
        for h in handles:
            with contextlib.suppress(StorageError):
                await h.close()
        self._factory._forget(self)

    def abandon(self) -> None:
        """Stop all background work without writing anything (crash tests: what a killed process does)."""
        self._state = _CLOSED
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        if self._roll_task is not None:
            self._roll_task.cancel()
        err = ManagedLedgerClosedError(f"managed ledger {self.name} was abandoned")
        self._fail_pending(err)
        inflight, self._inflight = self._inflight, deque()
        for op in inflight:
            op.done = True
            if not op.future.done():
                op.future.set_exception(err)
        self._factory._forget(self)

    async def delete(self) -> None:
        """Close, then remove the info and every ledger."""
        await self.close()
        await self._factory.delete(self.name)
