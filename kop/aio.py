"""The asyncio building blocks the layers share: keyed single flight ("open once"), a periodic task, and a
request carried out to its end whatever becomes of the caller.

They sit at the bottom of the import graph (docs/architecture.md) so that every layer - the managed
ledger, the partition logs, the protocol handlers, the broker service, the group coordinator - can use them
without an import running upward.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable, Hashable
from typing import Any, Generic, TypeVar

K = TypeVar("K", bound=Hashable)
V = TypeVar("V")


class SingleFlight(Generic[K, V]):
    """Concurrent calls for one key share one run of the opener: the first caller runs it, later callers
    wait for its result (or its exception). Nothing is cached once the run ends - the caller keeps its own
    map of what is open and checks it before calling `run`.

    Waiters await the shared future through `asyncio.shield`, so a cancelled waiter never cancels the run
    the others wait for; nor does the first caller, whose run goes on as its own task (`run_to_end`): cancelled
    with it, the run ended the others' waits with a CancelledError of their own - a Pulsar connection's command
    loop ended so, leaving its connection open and deaf."""

    def __init__(self) -> None:
        self._pending: dict[K, asyncio.Future[V]] = {}

    def __contains__(self, key: K) -> bool:
        return key in self._pending

    async def run(self, key: K, opener: Callable[[], Awaitable[V]]) -> V:
        pending = self._pending.get(key)
        if pending is not None:
            return await asyncio.shield(pending)
        fut: asyncio.Future[V] = asyncio.get_running_loop().create_future()
        self._pending[key] = fut
        return await run_to_end(self._run(key, opener, fut))

    async def _run(self, key: K, opener: Callable[[], Awaitable[V]], fut: asyncio.Future[V]) -> V:
        try:
            value = await opener()
        except BaseException as e:
            fut.set_exception(e)
            fut.exception()  # retrieved: no "exception never retrieved" warning when nobody waited
            raise
        else:
            fut.set_result(value)
            return value
        finally:
            del self._pending[key]

    async def wait(self, key: K) -> None:
        """Wait until a run for `key` in progress (if any) has ended, whatever its outcome."""
        pending = self._pending.get(key)
        if pending is not None:
            with contextlib.suppress(Exception):
                await asyncio.shield(pending)

    async def wait_all(self) -> None:
        """Wait until every run in progress now has ended, whatever their outcomes."""
        for key in list(self._pending):
            await self.wait(key)


def _retrieve(task: asyncio.Future[V]) -> None:
    if not task.cancelled():
        task.exception()  # retrieved: its caller may be gone, and the outcome was logged where it matters


async def run_to_end(coro: Awaitable[V]) -> V:
    """Await `coro` as its own task, which a cancelled caller does not cancel.

    A Kafka connection cancels the tasks of its unanswered requests when it closes. Work that changes shared
    state in several steps (write a state record, then apply it; then start the markers) must not stop
    between them: a transaction left marked "being written" answers CONCURRENT_TRANSACTIONS to every later
    request for its id. Kafka finishes a request it has read whatever happens to the connection; so do the
    requests that run through here."""
    task = asyncio.ensure_future(coro)
    task.add_done_callback(_retrieve)
    return await asyncio.shield(task)


class PeriodicTask:
    """Runs `action` every `interval` seconds (the first run one interval after `start`) until `stop`.

    A run that raises is logged and the next one runs on schedule: a background chore (retention, the log
    cleaner, offset expiration, idle connections) must not die of one bad pass."""

    def __init__(self, name: str, interval: float, action: Callable[[], Awaitable[object]],
                 logger: logging.Logger | None = None) -> None:
        self.name = name
        self.interval = interval
        self.action = action
        self.log = logger or logging.getLogger(__name__)
        self._task: asyncio.Task[None] | None = None

    @property
    def running(self) -> bool:
        return self._task is not None and not self._task.done()

    def start(self) -> None:
        if self._task is None:
            self._task = asyncio.create_task(self._loop(), name=self.name)

    async def _loop(self) -> None:
        while True:
            await asyncio.sleep(self.interval)
            try:
                await self.action()
            except asyncio.CancelledError:
                raise
            except Exception:
                self.log.exception("%s pass failed", self.name)

    async def stop(self) -> None:
        """Cancel the loop and wait for it (a pass in progress is cancelled too)."""
        task, self._task = self._task, None
        if task is None:
            return
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError, Exception):
            await task


def describe_task(task: asyncio.Task[Any]) -> str:
    """Where `task` waits, innermost last: every coroutine of its await chain with file and line.

    Task.print_stack shows only the outermost coroutine of a suspended task, which says nothing about which
    of its awaits is stuck; following each coroutine's cr_await down to the future it waits on does."""
    lines = [repr(task)]
    aw: Any = task.get_coro()
    while aw is not None:
        frame = getattr(aw, "cr_frame", None) or getattr(aw, "gi_frame", None) or getattr(aw, "ag_frame", None)
        if frame is not None:
            lines.append(f"  {frame.f_code.co_filename}:{frame.f_lineno} in {frame.f_code.co_name}")
        nxt = getattr(aw, "cr_await", None) or getattr(aw, "gi_yieldfrom", None) or getattr(aw, "ag_await", None)
        if nxt is None and frame is None:  # a future's iterator: name the future itself
            lines.append(f"  waiting on {getattr(task, '_fut_waiter', None) or aw!r}")
        aw = nxt
    return "\n".join(lines)


def describe_threads() -> str:
    """The stack of every thread (the executors' jobs a task may be waiting on)."""
    import sys
    import threading
    import traceback

    names = {t.ident: t.name for t in threading.enumerate()}
    out = []
    for ident, frame in sys._current_frames().items():
        out.append(f"thread {names.get(ident, ident)}:\n" + "".join(traceback.format_stack(frame, limit=8)))
    return "\n".join(out)
