"""Connections to bookies: one TCP connection per bookie, shared by every ledger of a store, speaking the
v2 protocol (protocol.py).

Why callbacks rather than a future per request: an add goes to three bookies and its completion must run
in entry order; plain callbacks invoked straight from ``data_received`` cost a function call, a future
per replica would cost three objects and three loop iterations per entry on the hot path.

* Sending never waits: frames are queued and written, in order, once per event-loop iteration (one
  writev for all the requests of an iteration) - or once the connection is up. A request on a
  connection that failed is answered at once with ECONNECTION.
* v2 responses carry no request id: each (opcode, ledger id, entry id) key has a FIFO of callbacks.
* A connection that stops answering (requests outstanding and nothing received for ``request_timeout``)
  is aborted; every outstanding request is answered with ETIMEOUT, so the ledger replaces the bookie.
  One timer per pool checks all connections twice a second, instead of a timer per request.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections import deque
from collections.abc import Callable, Iterable
from typing import cast

from kop.storage.api import Buffer
from kop.storage.bookkeeper import protocol as p

log = logging.getLogger(__name__)

# (rc, body after the 24-byte response header: the entry of an OK READ, else empty)
Callback = Callable[[int, memoryview | None], None]
Key = tuple[int, int, int]  # (opcode, ledger id, entry id)

_CONNECTING, _CONNECTED, _CLOSED = range(3)


class BookieConnection(asyncio.Protocol):
    def __init__(self, pool: BookiePool, bookie_id: str) -> None:
        self.pool = pool
        self.bookie_id = bookie_id
        self._loop = pool.loop
        self._state = _CONNECTING
        self._transport: asyncio.Transport | None = None
        self._queued: list[Buffer] = []  # frames not written yet (connecting, or until the flush)
        self._flush_scheduled = False
        self._pending: dict[Key, deque[Callback]] = {}
        self.outstanding = 0
        self.last_progress = time.monotonic()
        self._buf = bytearray()
        self.requests = 0  # counters for tests and metrics
        self.responses = 0

    @property
    def closed(self) -> bool:
        return self._state == _CLOSED

    def send(self, key: Key, frame: Iterable[Buffer], callback: Callback) -> None:
        """Write one request (its frame given as parts) and register the callback of its answer."""
        if self._state == _CLOSED:
            self._loop.call_soon(callback, p.ECONNECTION, None)
            return
        queue = self._pending.get(key)
        if queue is None:
            self._pending[key] = queue = deque()
        queue.append(callback)
        if self.outstanding == 0:
            self.last_progress = time.monotonic()
        self.outstanding += 1
        self.requests += 1
        self._queued.extend(frame)
        if self._state == _CONNECTED and not self._flush_scheduled:
            self._flush_scheduled = True
            self._loop.call_soon(self._flush)

    def _flush(self) -> None:
        """Write everything sent during this loop iteration at once: one writev for many requests
        instead of a syscall per request (an add to three bookies would be three per entry)."""
        self._flush_scheduled = False
        if self._state == _CONNECTED and self._queued:
            assert self._transport is not None
            queued, self._queued = self._queued, []
            self._transport.writelines(queued)

    # ---- asyncio.Protocol

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        transport = cast(asyncio.Transport, transport)  # uvloop's transports are not asyncio.Transport instances
        if self._state == _CLOSED:  # aborted while connecting
            transport.abort()
            return
        self._transport = transport
        self._state = _CONNECTED
        self.last_progress = time.monotonic()
        if self._queued:
            transport.writelines(self._queued)
            self._queued = []

    def data_received(self, data: bytes) -> None:
        if self._buf:
            self._buf += data
            buf = bytes(self._buf)  # entries handed out are views of this; the bytearray must stay resizable
            self._buf = bytearray()
        else:
            buf = data
        n = len(buf)
        pos = 0
        view = memoryview(buf)
        pending = self._pending
        while n - pos >= 4:
            size = p.frame_length(buf, pos)
            end = pos + 4 + size
            if end > n:
                break
            try:
                opcode, rc, ledger_id, entry_id, rest = p.decode_response(view[pos + 4 : end])
            except Exception:
                log.warning("bookie %s sent an unreadable response; closing the connection", self.bookie_id)
                self.abort(p.ECONNECTION)
                return
            pos = end
            queue = pending.get((opcode, ledger_id, entry_id))
            if not queue:
                log.debug("bookie %s: unexpected response %s for %d/%d", self.bookie_id, opcode, ledger_id,
                          entry_id)
                continue
            callback = queue.popleft()
            if not queue:
                del pending[(opcode, ledger_id, entry_id)]
            self.outstanding -= 1
            self.responses += 1
            try:
                callback(rc, rest)
            except Exception:
                log.exception("bookie response callback failed")
            if self._state == _CLOSED:  # a callback closed this connection: the rest is void
                return
        self.last_progress = time.monotonic()
        if pos < n:
            self._buf = bytearray(view[pos:])

    def connection_lost(self, exc: Exception | None) -> None:
        if self._state != _CLOSED:
            log.info("connection to bookie %s lost%s", self.bookie_id, f": {exc}" if exc else "")
        self._fail_all(p.ECONNECTION)

    # ---- failure

    def abort(self, rc: int) -> None:
        """Drop the connection now; every outstanding request is answered with `rc`."""
        transport = self._transport
        self._fail_all(rc)
        if transport is not None:
            transport.abort()

    def _fail_all(self, rc: int) -> None:
        self._state = _CLOSED
        self.pool._forget(self)
        pending, self._pending = self._pending, {}
        self._queued = []
        self.outstanding = 0
        for queue in pending.values():
            for callback in queue:
                try:
                    callback(rc, None)
                except Exception:
                    log.exception("bookie response callback failed")


class BookiePool:
    """Connections by bookie id, created on first use. Addresses come from the bookies' registrations
    (set_address) or, failing that, from the id itself (host:port)."""

    def __init__(self, *, connect_timeout: float = 10.0, request_timeout: float = 10.0) -> None:
        self.loop = asyncio.get_running_loop()
        self.connect_timeout = connect_timeout
        self.request_timeout = request_timeout
        self._connections: dict[str, BookieConnection] = {}
        self._addresses: dict[str, tuple[str, int]] = {}
        self._tasks: set[asyncio.Task[None]] = set()
        self._timer: asyncio.TimerHandle | None = None
        self._closed = False

    def set_address(self, bookie_id: str, address: tuple[str, int]) -> None:
        self._addresses[bookie_id] = address

    def address(self, bookie_id: str) -> tuple[str, int]:
        addr = self._addresses.get(bookie_id)
        if addr is None:
            from kop.storage.bookkeeper.metadata import decode_bookie_address

            addr = decode_bookie_address(bookie_id, None)
        return addr

    def connection(self, bookie_id: str) -> BookieConnection:
        conn = self._connections.get(bookie_id)
        if conn is not None:
            return conn
        conn = BookieConnection(self, bookie_id)
        if self._closed:
            conn._state = _CLOSED
            return conn
        self._connections[bookie_id] = conn
        task = self.loop.create_task(self._connect(conn))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        if self._timer is None:
            self._timer = self.loop.call_later(0.5, self._check_timeouts)
        return conn

    async def _connect(self, conn: BookieConnection) -> None:
        try:
            host, port = self.address(conn.bookie_id)
            await asyncio.wait_for(self.loop.create_connection(lambda: conn, host, port), self.connect_timeout)
        except Exception as e:
            if not conn.closed:
                log.info("cannot connect to bookie %s: %r", conn.bookie_id, e)
                conn._fail_all(p.ECONNECTION)

    def _forget(self, conn: BookieConnection) -> None:
        if self._connections.get(conn.bookie_id) is conn:
            del self._connections[conn.bookie_id]

    def _check_timeouts(self) -> None:
        self._timer = None
        if self._closed:
            return
        now = time.monotonic()
        for conn in list(self._connections.values()):
            if conn.outstanding and now - conn.last_progress > self.request_timeout:
                log.warning("bookie %s: no answer for %.1fs; closing the connection", conn.bookie_id,
                            now - conn.last_progress)
                conn.abort(p.ETIMEOUT)
        if self._connections:
            self._timer = self.loop.call_later(0.5, self._check_timeouts)

    def drop(self, bookie_id: str) -> None:
        """Close the connection to a bookie (outstanding requests fail with ECONNECTION)."""
        conn = self._connections.get(bookie_id)
        if conn is not None:
            conn.abort(p.ECONNECTION)

    async def close(self) -> None:
        self._closed = True
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        for conn in list(self._connections.values()):
            conn.abort(p.ECONNECTION)
        for task in list(self._tasks):
            task.cancel()
            with contextlib.suppress(BaseException):
                await task
