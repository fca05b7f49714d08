"""One client connection: frames in, requests dispatched, responses out in request order.

Clients pipeline requests (a Java producer keeps up to five in flight), so each request runs as its own
task while responses are written strictly in arrival order. Reading pauses while too many requests or too
many unsent response bytes are queued, or the frames of unanswered requests exceed QUEUED_BYTES_LIMIT, so
neither a slow reader nor a fast writer can make the broker buffer without bound. Across all connections, the
bytes of requests being received or not yet answered are charged to the handler's RequestBytesBound
(queuedMaxRequestBytes, kop/kafka/request_bytes.py), which pauses reading everywhere when it is reached; a
frame's buffer grows with the bytes received (kop/kafka/framing.py), so an announced size alone costs nothing.
Record data is the one thing a few small requests can turn into many bytes (a pipelined Fetch each answered
with up to max_bytes), so a Fetch reads only when its data can go out soon: when it is the next answer to be
written, or while the data held by answered-but-unwritten Fetches stays under FETCH_HOLD_LIMIT, and never while
the transport is above its high-water mark (fetch_room). A client that stops reading then costs the broker
about one response, however many fetches it pipelines; a client with one fetch in flight (Java, librdkafka)
is always the next answer and never waits.
On plain-TCP listeners (`zero_copy`) a Fetch answer that holds spans of ledger files (issue 27) is written by a
DirectWriter (kop/kafka/sendfile.py: os.sendfile from the page cache) when the transport has nothing unsent -
else its spans are read and it goes through the transport - and until it is sent (or handed to the transport:
a slow reader) no later answer is written and no request read; an error while sending it closes the connection
(never a frame with other bytes).
A peer that sends something that cannot be a Kafka request (bad size, undecodable header or body, an API
we do not serve) gets one log line and a closed connection, as Apache Kafka does; nothing else is affected.

Security (docs/security.md): on SSL listeners the principal is the client certificate's, mapped by
sslPrincipalMappingRules (ANONYMOUS without one; a certificate no rule maps closes the connection). On SASL
listeners a SaslSession (kop/kafka/sasl.py) decides what may be served until the client has authenticated:
requests are then taken one at a time (Kafka mutes the channel likewise), frames are capped at
saslServerMaxReceiveSize, and after a v0 SaslHandshake the frames are bare mechanism tokens, answered as
bare size-prefixed frames. A failed authentication is answered, then the connection closes after
failedAuthenticationDelayMs. `client_host` is the peer address as Kafka's ACLs name hosts.
"""

from __future__ import annotations

import asyncio
import logging
import os
import socket
import time
from collections import deque
from collections.abc import Awaitable, Callable
from contextvars import ContextVar
from typing import TYPE_CHECKING, cast

from kop.kafka.context import RequestContext
from kop.kafka.framing import FrameError, FrameReader
from kop.kafka.sendfile import Buffer, DirectWriter, Part, read_spans, span_bytes
from kop.metrics import log_value as _quoted
from kop.offset.cursor_cache import CursorCache
from kop.protocol import (
    DecodeError,
    RequestHeader,
    Struct,
    decode_request,
    decode_request_header,
    encode_response,
)
from kop.protocol.messages import FetchRequest
from kop.security.acl.model import java_host_address
from kop.security.principal import ANONYMOUS, KafkaPrincipal, NoMatchingRule
from kop.storage.api import StorageError
from kop.topics.scope import NameScope

if TYPE_CHECKING:
    from kop.kafka.handler import KafkaProtocolHandler
    from kop.kafka.sasl import SaslSession

log = logging.getLogger("kop.kafka.connection")

API_VERSIONS_KEY = 18
FETCH_KEY = 1
RAW_SASL_TOKEN = -1  # the "API key" of a _Pending answering a bare SASL token (after SaslHandshake v0)
#: Bytes of record data that Fetch answers waiting behind an earlier answer (plus the transport's unsent
#: bytes) may hold per connection before further pipelined Fetches wait to read (fetch_room).
FETCH_HOLD_LIMIT = 4 << 20
#: Reading pauses while the request frames of unanswered requests add up to this many bytes (a producer
#: pipelining large Produce requests faster than they are stored); one frame is always read, whatever its size.
QUEUED_BYTES_LIMIT = 16 << 20

# The request a handler task is answering (each task runs in its own context copy), for fetch_room/hold.
_CURRENT: ContextVar[_Pending | None] = ContextVar("kop_current_request", default=None)


class _Pending:
    __slots__ = ("correlation_id", "api_key", "version", "task", "started", "dequeued", "allowance", "held", "size",
                 "close_after")

    def __init__(self, correlation_id: int, api_key: int, version: int, task: asyncio.Future[Struct | bytes | None] | None
                 ) -> None:
        self.correlation_id = correlation_id
        self.api_key = api_key
        self.version = version
        self.task = task
        self.started = time.monotonic()
        self.dequeued = 0.0  # when the handler started (request queue time = dequeued - started)
        self.allowance = 0.0  # time the request may wait by design (a Fetch's max_wait), not "slow"
        self.held = 0  # record bytes its answer holds until written (KafkaConnection.hold)
        self.size = 0  # bytes of its request frame (held until it is answered)
        self.close_after = False  # close the connection once this answer is written (failed authentication)


class KafkaConnection(asyncio.BufferedProtocol):
    def __init__(self, handler: KafkaProtocolHandler, listener_name: str) -> None:
        self.handler = handler
        self.listener_name = listener_name
        cfg = handler.config
        self.reader = FrameReader(cfg.socketRequestMaxBytes, on_alloc=self._charge)
        self.security = handler.security_of(listener_name)
        self.sasl: SaslSession | None = handler.sasl_session() if self.security.sasl else None
        if self.sasl is not None:
            self.reader.max_size = cfg.saslServerMaxReceiveSize
            self.reader.limit_name = "saslServerMaxReceiveSize (before authentication)"
        self._deferred: deque[bytearray] = deque()  # frames read while a pre-authentication request runs
        self.ip = ""  # the peer's address as counted for maxConnectionsPerIp
        self.counted = False  # counted in the handler's connection limits (set by its accept loop)
        self._charged = 0  # bytes this connection has charged to handler.request_bytes
        self.transport: asyncio.Transport | None = None
        self.peer = "?"
        self.client_host = ""  # the peer address as ACL hosts name it (Java's InetAddress.getHostAddress())
        # who the peer is: ANONYMOUS on PLAINTEXT listeners; the certificate's or SASL's principal otherwise
        self.principal: KafkaPrincipal = ANONYMOUS
        # a tenant login's scope of Kafka names (kop/topics/scope.py); None: the broker's default scope
        self.names: NameScope | None = None
        self.client_id: str | None = None
        self.cursor_cache = CursorCache()
        self.last_active = time.monotonic()
        self._queue: deque[_Pending] = deque()
        self._max_queued = cfg.maxQueuedRequests
        self._write_paused = False
        self._read_paused = False
        self._closed = False
        # Kept: asyncio.get_running_loop()/ensure_future() cost a getpid() syscall each on Python 3.11.
        self._loop = asyncio.get_event_loop()
        self.closed_future: asyncio.Future[None] = self._loop.create_future()
        # Serialises the "issue" phase of produce requests on this connection (see kop.kafka.apis.produce).
        self.produce_chain: asyncio.Future[None] | None = None
        self._held = 0  # sum of .held over answered requests not yet written
        self._queued_bytes = 0  # sum of .size over the queue
        self._room_waiters: list[asyncio.Future[None]] = []
        # Zero-copy Fetch answers (kop/kafka/sendfile.py): on plain TCP, fetches read with zero_copy=True and
        # answers holding file spans go out through a DirectWriter; `_sending` while one waits for the socket.
        self.zero_copy = False
        self._writer: DirectWriter | None = None
        self._sending = False

    # ------------------------------------------------------------------ asyncio callbacks
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # a stream transport: uvloop's are not asyncio.Transport subclasses, but have its methods
        self.transport = cast(asyncio.Transport, transport)
        peer = transport.get_extra_info("peername")
        self.peer = f"{peer[0]}:{peer[1]}" if isinstance(peer, tuple) else str(peer)
        self.client_host = java_host_address(str(peer[0])) if isinstance(peer, tuple) else ""
        self.handler.connections.add(self)
        self.handler.metrics.connections_accepted += 1
        if self.security.protocol == "SSL":
            self._certificate_principal(transport)
        sock = transport.get_extra_info("socket")
        self.zero_copy = (self.handler.config.fetchZeroCopy and self.security.protocol in ("PLAINTEXT", "SASL_PLAINTEXT")
                          and transport.get_extra_info("sslcontext") is None and sock is not None
                          and sock.type == socket.SOCK_STREAM and hasattr(os, "sendfile"))
        if self.handler.request_bytes.reached:
            self.update_reading()

    def connection_lost(self, exc: Exception | None) -> None:
        if exc is not None and not self._closed:  # e.g. reset by the peer; our own aborts are logged there
            self._log_error(f"{type(exc).__name__}: {exc}")
        self._closed = True
        if self._writer is not None:
            self._writer.close()
            self._writer = None
        self._sending = False
        self.handler.connections.discard(self)
        self.handler.connection_closed(self)
        for p in self._queue:
            if p.task is not None and not p.task.done():
                p.task.cancel()
        self._queue.clear()
        self.handler.request_bytes.leave(self)
        self._release(self._charged, self.reader.allocated)  # the frame being received, every unanswered request
        self._wake_room()
        if not self.closed_future.done():
            self.closed_future.set_result(None)

    def _certificate_principal(self, transport: asyncio.BaseTransport) -> None:
        """SSL listeners: the principal of the client certificate (the handshake already verified it)."""
        ssl_object = transport.get_extra_info("ssl_object")
        cert = ssl_object.getpeercert(binary_form=True) if ssl_object is not None else None
        try:
            self.principal = self.handler.principal_mapper.principal(cert)
        except (NoMatchingRule, ValueError) as e:
            self.handler.metrics.authenticated("SSL", False)
            self.abort(f"client certificate refused: {e}")
            return
        if cert is not None:
            self.handler.metrics.authenticated("SSL", True)
            log.info("authenticated peer=%s listener=%s principal=%s mechanism=SSL", self.peer, self.listener_name,
                     _quoted(str(self.principal)))

    def get_buffer(self, sizehint: int) -> memoryview:
        return self.reader.get_buffer()

    def _charge(self, n: int) -> None:
        self._charged += n
        self.handler.request_bytes.add(n, self)

    def _release(self, n: int, partial: int = 0) -> None:
        if n:
            self._charged -= n
            self.handler.request_bytes.release(n, partial)

    @property
    def tenant(self) -> str | None:
        """KoP's PLAIN with tokens: `tenant/namespace` as the client's username named it; None otherwise.
        With kafkaEnableMultiTenantMetadata it is where the connection's short names live (`names`)."""
        return self.sasl.tenant if self.sasl is not None else None

    @property
    def mid_frame(self) -> bool:
        return self.reader.mid_frame

    def buffer_updated(self, nbytes: int) -> None:
        self.last_active = time.monotonic()
        try:
            self.reader.buffer_updated(nbytes)
        except FrameError as e:
            self.abort(str(e))
            return
        if self.reader.frames:
            frames, self.reader.frames = self.reader.frames, []
            for frame in frames:
                self.handler.request_bytes.complete(len(frame), self)
            for frame in frames:
                if self._closed:
                    return
                self._on_frame(frame)
        elif self.handler.request_bytes.reached:
            self.update_reading()  # the bound was reached while this frame was being received

    def eof_received(self) -> bool | None:
        # Let queued responses go out; the transport closes once they are written.
        return False

    def pause_writing(self) -> None:
        self._write_paused = True
        self.update_reading()

    def resume_writing(self) -> None:
        self._write_paused = False
        self.update_reading()
        self._wake_room()

    # ------------------------------------------------------------------ requests
    def _on_frame(self, frame: bytearray, deferred: bool = False) -> None:
        """Decode and dispatch one frame. Its bytes stay charged until its request is answered (_Pending.size);
        a frame that is refused releases them at once (abort() releases what the connection holds)."""
        sasl = self.sasl
        if sasl is not None and not sasl.authenticated:
            if self._queue or (self._deferred and not deferred):  # before authentication, one at a time
                self._deferred.append(frame)
                self.update_reading()
                return
            if sasl.raw:
                self._raw_token(frame)
                return
        view = memoryview(frame)
        try:
            header, body_offset = decode_request_header(view)
        except DecodeError as e:
            self.abort(f"undecodable request header: {e}")
            return
        self.client_id = header.client_id
        if sasl is not None:
            refused = sasl.gate(header.api_key)
            if refused is not None:
                self.abort(refused)
                return
        api = self.handler.apis.get(header.api_key)
        if api is None:
            self.abort(f"request for API key {header.api_key}, which this broker does not serve")
            return
        version = header.api_version
        if not api.min_version <= version <= api.max_version:
            if header.api_key == API_VERSIONS_KEY:
                # Clients send their newest ApiVersions first; answer in the v0 shape with
                # UNSUPPORTED_VERSION and our ranges so they retry with one we serve.
                p = _Pending(header.correlation_id, API_VERSIONS_KEY, 0, None)
                p.size = len(frame)
                p.task = self._loop.create_future()
                p.task.set_result(self.handler.api_versions_body(error="UNSUPPORTED_VERSION", sasl=self.sasl is not None))
                self._enqueue(p)
                return
            self.abort(
                f"{api.name} v{version} is not supported (this broker serves v{api.min_version}-v{api.max_version})"
            )
            return
        if version < api.request_floor:
            # Advertised for compatibility only (Produce v0-v2, KAFKA-18659); the request itself is refused.
            self.abort(f"{api.name} v{version} is no longer supported (minimum v{api.request_floor})")
            return
        try:
            request = decode_request(header.api_key, version, view, body_offset)
        except DecodeError as e:
            self.abort(f"undecodable {api.name} v{version} request: {e}")
            return
        except Exception as e:  # a codec bug must not take the broker down
            self.abort(f"failed to decode {api.name} v{version} request: {e!r}")
            return
        pending = _Pending(header.correlation_id, header.api_key, version, None)
        pending.size = len(frame)
        if type(request) is FetchRequest:  # (header.api_key == FETCH_KEY)
            pending.allowance = max(request.max_wait_ms, 0) / 1000
        pending.task = self._loop.create_task(self._run(api.handle, header, request, pending))
        self._enqueue(pending)

    def _raw_token(self, frame: bytearray) -> None:
        """A SASL token after a v0 SaslHandshake: no header; the answer is a bare size-prefixed frame."""
        pending = _Pending(-1, RAW_SASL_TOKEN, 0, None)
        pending.size = len(frame)
        pending.task = self._loop.create_task(self._run_raw(bytes(frame), pending))
        self._enqueue(pending)

    async def _run_raw(self, token: bytes, pending: _Pending) -> Struct | bytes | None:
        _CURRENT.set(pending)
        assert self.sasl is not None
        answer, close = await self.sasl.raw_token(token)
        if close:
            await self.authentication_failed()
        elif self.sasl.authenticated:
            self.authentication_succeeded()
        return answer

    def authentication_succeeded(self) -> None:
        """The SASL session completed (first authentication or KIP-368 re-authentication)."""
        sasl = self.sasl
        assert sasl is not None and sasl.principal is not None
        self.principal = sasl.principal
        if sasl.tenant and self.names is None and self.handler.config.kafkaEnableMultiTenantMetadata:
            tenant, _, namespace = sasl.tenant.partition("/")
            scope = NameScope(self.handler.service.topics, tenant, namespace or self.handler.config.kafkaNamespace)
            self.names = None if scope.default else scope
        self.reader.max_size = self.handler.config.socketRequestMaxBytes
        self.reader.limit_name = "socketRequestMaxBytes"
        self.handler.metrics.authenticated(sasl.mechanism or "?", True)
        log.info("authenticated peer=%s listener=%s principal=%s mechanism=%s%s", self.peer, self.listener_name,
                 _quoted(str(sasl.principal)), sasl.mechanism,
                 "" if self.names is None else f" tenant={_quoted(self.names.prefix[:-1])}")

    async def authentication_failed(self) -> None:
        """The SASL session failed: one log line (the reason never holds a secret), counted; the answer of
        the calling request goes out after failedAuthenticationDelayMs, then the connection closes."""
        sasl = self.sasl
        assert sasl is not None
        self.handler.metrics.authenticated(sasl.mechanism or "?", False)
        log.warning("authentication failed peer=%s listener=%s mechanism=%s reason=%s", self.peer,
                    self.listener_name, sasl.mechanism, _quoted(sasl.failure_reason or "?"))
        pending = _CURRENT.get()
        if pending is not None:
            pending.close_after = True
        delay = self.handler.config.failedAuthenticationDelayMs
        if delay > 0:
            await asyncio.sleep(delay / 1000)

    def close_after_response(self) -> None:
        """Close the connection once the calling request's answer is written."""
        pending = _CURRENT.get()
        if pending is not None:
            pending.close_after = True

    async def _run(self, handle: Callable[..., Awaitable[Struct | None]], header: RequestHeader, request: Struct,
                   pending: _Pending) -> Struct | bytes | None:
        """Notes when the handler starts, for the request-queue-time metric (one frame per request)."""
        pending.dequeued = time.monotonic()
        _CURRENT.set(pending)
        return await handle(RequestContext(self, header), request)

    # ------------------------------------------------------------------ fetch back-pressure
    def _has_room(self, pending: _Pending | None) -> bool:
        if self._write_paused or self._sending:
            return False
        if pending is None or (self._queue and self._queue[0] is pending):
            return True
        assert self.transport is not None
        return self._held + self.transport.get_write_buffer_size() < FETCH_HOLD_LIMIT

    async def fetch_room(self, budget: int) -> None:
        """Wait until the calling request may read up to `budget` bytes of record data (module docstring),
        and reserve them (hold() then sets what the answer really carries). The next answer to be written
        never waits for other answers, only for the transport to drain below its high-water mark, which a
        reading client always lets happen, so pipelined requests cannot deadlock on each other."""
        pending = _CURRENT.get()
        while not self._closed and not self._has_room(pending):
            fut = self._loop.create_future()
            self._room_waiters.append(fut)
            await fut
        self.hold(max(budget, 0))

    def hold(self, nbytes: int) -> None:
        """The calling request now holds `nbytes` of record data (its answer's, until written; 0 while a
        long poll waits)."""
        pending = _CURRENT.get()
        if pending is not None:
            released = nbytes < pending.held
            self._held += nbytes - pending.held
            pending.held = nbytes
            if released:
                self._wake_room()

    def _wake_room(self) -> None:
        if self._room_waiters:
            waiters, self._room_waiters = self._room_waiters, []
            for f in waiters:
                if not f.done():
                    f.set_result(None)

    def _enqueue(self, pending: _Pending) -> None:
        self._queue.append(pending)
        self._queued_bytes += pending.size
        assert pending.task is not None
        pending.task.add_done_callback(self._on_done)
        self.update_reading()

    def _on_done(self, _fut: asyncio.Future[Struct | bytes | None] | None) -> None:
        if self._sending:
            return  # a direct send holds the socket: the answers after it wait (_sent goes on with them)
        if self._queue and self._queue[0].task is not None and self._queue[0].task.done():
            self._wake_room()  # the next answer to be written changes
        while self._queue and self._queue[0].task is not None and self._queue[0].task.done():
            p = self._queue.popleft()
            self._held -= p.held
            self._queued_bytes -= p.size
            self._release(p.size)
            if self._closed:
                return
            task = p.task
            assert task is not None
            if task.cancelled():
                self.abort("request cancelled")
                return
            exc = task.exception()
            if exc is not None:
                self._log_error(f"{self.handler.api_name(p.api_key)} failed: {exc!r}", exc)
                self.abort(None)
                return
            body = task.result()
            if p.api_key == RAW_SASL_TOKEN:  # v0 SASL token: a bare size-prefixed answer, or none
                assert self.transport is not None
                if isinstance(body, bytes):
                    self.transport.writelines([len(body).to_bytes(4, "big"), body])
                if p.close_after:
                    self._close_after_write()
                    return
                continue
            if not isinstance(body, Struct):  # None: acks=0 produce, no response at all
                self.handler.record_request(self, p, time.monotonic())
                continue
            try:
                parts = encode_response(p.api_key, p.version, p.correlation_id, body)
            except Exception as e:
                self._log_error(f"cannot encode {self.handler.api_name(p.api_key)} response: {e!r}", e)
                self.abort(None)
                return
            assert self.transport is not None
            if p.api_key == FETCH_KEY and self.zero_copy and span_bytes(cast(list[Part], parts)):
                if not self._send_direct(cast(list[Part], parts)):
                    self.handler.record_request(self, p, time.monotonic())
                    return  # waiting for the socket (then _sent goes on with the queue), or closed
            else:
                self.transport.writelines(parts)
            self.handler.record_request(self, p, time.monotonic())
            if p.close_after:
                self._close_after_write()
                return
        if self._deferred and not self._queue:
            self._take_deferred()
        self.update_reading()

    def _send_direct(self, parts: list[Part]) -> bool:
        """Send a zero-copy Fetch answer (kop/kafka/sendfile.py); False while the rest waits for the socket (or
        when the connection was closed). Bytes of an earlier answer still in the transport would be overtaken:
        then the spans are read and the answer goes through the transport like any other."""
        transport = self.transport
        assert transport is not None
        writer = self._writer
        if writer is None:
            try:
                writer = self._writer = DirectWriter(self._loop, transport.get_extra_info("socket").fileno())
            except OSError:  # no descriptor for the socket's dup: this answer goes the copy path
                pass
        try:
            if writer is None or transport.get_write_buffer_size():
                transport.writelines(read_spans(parts))
                return True
            sent = writer.send(parts, self._sent)
            self._count_file_bytes()
            if sent:
                return True
        except (OSError, StorageError) as e:
            self.abort(f"fetch answer not sent from the ledger files: {e!r}")
            return False
        self._sending = True
        self.update_reading()
        return False

    def _sent(self, rest: list[Buffer], error: BaseException | None) -> None:
        """A direct send that had to wait is done (`rest`: what a slow reader leaves to the transport): go on
        with the answers queued behind it."""
        self._sending = False
        self._count_file_bytes()
        if error is not None:
            self.abort(f"fetch answer not sent from the ledger files: {error!r}")
            return
        if rest:
            assert self.transport is not None
            self.transport.writelines(rest)
        self._wake_room()
        self._on_done(None)

    def _count_file_bytes(self) -> None:
        writer = self._writer
        if writer is not None and writer.file_bytes:
            self.handler.metrics.fetch_sendfile_bytes += writer.file_bytes
            writer.file_bytes = 0

    def _close_after_write(self) -> None:
        """Close once what was written has gone out (a failed authentication's answer)."""
        self._closed = True
        self._deferred.clear()
        assert self.transport is not None
        self.transport.close()

    def _take_deferred(self) -> None:
        """Frames that arrived while a pre-authentication request ran: the next one now (and the rest once
        authenticated, when they are served like any other)."""
        while self._deferred and not self._closed:
            if self._queue and self.sasl is not None and not self.sasl.authenticated:
                break
            self._on_frame(self._deferred.popleft(), deferred=True)

    def update_reading(self) -> None:
        if self._closed or self.transport is None:
            return
        should_pause = (self._write_paused or self._sending or len(self._queue) >= self._max_queued
                        or self._queued_bytes >= QUEUED_BYTES_LIMIT or self.handler.draining
                        or (self.sasl is not None and not self.sasl.authenticated and bool(self._queue)))
        if should_pause:
            self.handler.request_bytes.leave(self)
        else:
            should_pause = not self.handler.request_bytes.may_read(self)
        if should_pause and not self._read_paused:
            self._read_paused = True
            self.transport.pause_reading()
        elif not should_pause and self._read_paused:
            self._read_paused = False
            self.transport.resume_reading()

    # ------------------------------------------------------------------ lifecycle
    @property
    def in_flight(self) -> int:
        return len(self._queue)

    def abort(self, reason: str | None, error: bool = True) -> None:
        """Close at once; `reason` is logged (one line) when given: a structured connection-error line
        (and the connection-errors counter) unless `error` is False (e.g. an idle connection)."""
        if self._closed:
            return
        if reason:
            if error:
                self._log_error(reason)
            else:
                log.info("connection closed peer=%s listener=%s client_id=%s reason=%s",
                         self.peer, self.listener_name, _quoted(self.client_id), _quoted(reason))
        self._closed = True
        if self.transport is not None:
            self.transport.abort()

    def _log_error(self, reason: str, exc: BaseException | None = None) -> None:
        """One structured line per connection error (key=value, greppable), counted in the metrics."""
        self.handler.metrics.connection_errors += 1
        log.warning("connection error peer=%s listener=%s client_id=%s reason=%s",
                    self.peer, self.listener_name, _quoted(self.client_id), _quoted(reason), exc_info=exc)

    async def drain_and_close(self, timeout: float) -> None:
        """Graceful shutdown: no new requests; in-flight ones finish or are failed after `timeout`."""
        self.update_reading()
        deadline = time.monotonic() + timeout
        while (self._queue or self._sending) and time.monotonic() < deadline and not self._closed:
            await asyncio.sleep(0.01)
        if self.transport is not None and not self._closed:
            if self._queue:
                self.abort("broker shutting down with requests still in flight")
            else:
                self._closed = True
                self.transport.close()
