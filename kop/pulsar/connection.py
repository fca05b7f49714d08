"""One Pulsar client connection: frames in (kop/pulsar/codec), commands run in arrival order, frames out.

Commands are handled one after another by one task per connection, so their effects keep the client's order
(SENDs are appended in the order they came; their receipts follow as the appends complete, in that order).
Handlers of each command family live in their own module; the handler's table (kop/pulsar/commands_table.py, as
``PulsarProtocolHandler.commands``) says which function serves which command type.

Bad input, as Pulsar's broker answers it: a frame that puts the stream out of step (garbage, a Kafka or HTTP
client on this port, a frame over the size limit) closes the connection; a wrong checksum on a SEND is answered
SEND_ERROR ChecksumError; an unknown or unsupported command is answered ERROR (when it has a request id we can
name) or ignored, and the connection stays. Nothing a client sends reaches other connections: each has its own
reader, queue and task, and an exception in a handler closes only this connection.
Memory follows bytes received: the reader's buffer grows as bytes arrive (kop/pulsar/codec/framing.py), and every
byte received is charged to the broker-wide request-bytes bound (queuedMaxRequestBytes, kop/net/request_bytes.py,
shared with the Kafka handler) until its command has been handled; while the bound is reached, reading pauses here
as on every Kafka connection, and the one connection that may finish its frame then (the bound's "holder") reads
no further than that frame's end.
Differences from Pulsar's ServerCnx: token, basic and tls authentication only (kop/pulsar/session.py; authorization in
kop/pulsar/authorize.py), no proxying, no broker-side keep-alive pings of idle clients (the client pings us; we
answer).
"""

from __future__ import annotations

import asyncio
import logging
import threading
from collections import deque
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any, cast

from kop.pulsar.codec import commands as c
from kop.pulsar.codec.framing import (
    ChecksumMismatch,
    Frame,
    FrameError,
    FrameReader,
    UnknownCommand,
    encode_command,
)
from kop.security.principal import ANONYMOUS, KafkaPrincipal

if TYPE_CHECKING:
    from kop.pulsar.handler import PulsarProtocolHandler
    from kop.pulsar.nonpersistent import NPConsumer, NPProducer
    from kop.pulsar.produce import Producer
    from kop.pulsar.subscription import Consumer
    from kop.pulsar.waiters import Withdrawable

log = logging.getLogger(__name__)

# Frame overhead Pulsar allows beyond maxMessageSize (its broker: maxMessageSize + 10 KiB).
FRAME_OVERHEAD = 10 * 1024
# Commands queued before the connection stops reading (a client pipelining faster than we handle).
MAX_QUEUED = 1000
# Bytes written but not yet sent before dispatch to this connection waits (a slow consumer).
HIGH_WATER = 4 * 1024 * 1024

# Most bytes taken in by one read (asyncio's and uvloop's own read size for a plain Protocol).
READ_SIZE = 256 * 1024
# Where reads land before the frame reader copies them: one buffer per thread (per event loop), since a read is
# copied out (buffer_updated) before the next one begins.
_read_buffers = threading.local()

# What serves one command type (kop/pulsar/commands_table.py): the connection and the decoded frame in.
CommandHandler = Callable[["PulsarConnection", Frame], Awaitable[None]]


def non_utf8_field(msg: Any) -> str | None:
    """The name of a string field (at any depth) whose bytes are not UTF-8, else None. Protobuf's Python runtime
    does not validate proto2 strings: it hands such a field over as bytes where every handler expects str (found
    by the fuzzer: tracebacks in LOOKUP, PRODUCER, GET_TOPICS_OF_NAMESPACE). Pulsar's Java decoder would read
    them with replacement characters; a client that sends them is broken, so the connection is closed."""
    for f, v in msg.ListFields():
        if f.type == f.TYPE_STRING:
            if any(isinstance(x, bytes) for x in (v if f.is_repeated else (v,))):
                return str(f.name)
        elif f.type == f.TYPE_MESSAGE:
            for sub in v if f.is_repeated else (v,):
                bad = non_utf8_field(sub)
                if bad is not None:
                    return bad
    return None


def _read_buffer() -> memoryview:
    buf = getattr(_read_buffers, "view", None)
    if buf is None:
        buf = _read_buffers.view = memoryview(bytearray(READ_SIZE))
    return buf


class PulsarConnection(asyncio.BufferedProtocol):
    def __init__(self, handler: PulsarProtocolHandler) -> None:
        self.handler = handler
        self.reader = FrameReader(handler.config.maxMessageSize + FRAME_OVERHEAD)
        self.transport: asyncio.Transport | None = None
        self.peer = "?"
        self.queue: deque[tuple[Frame, bool, int]] = deque()  # (frame, its checksum failed, its size)
        self.checksum_failed = False  # of the command being handled
        self.wakeup = asyncio.Event()
        self.task: asyncio.Task[None] | None = None
        self.closed = False
        self.connected = False  # CONNECT seen
        self.principal: KafkaPrincipal = ANONYMOUS  # the authenticated role with authenticationEnabled
        self.protocol_version = 0
        self.client_version = ""  # CONNECT's, e.g. "Pulsar-CPP-v3.7.0", "Pulsar-Java-v4.0.7"
        # MESSAGE payloads start with broker entry metadata (kop/pulsar/session.py: config and the client's flag)
        self.broker_entry_metadata = False
        self.producers: dict[int, Producer] = {}
        # WaitForExclusive producers queued, persistent (pulsar/produce.py) or not (pulsar/nonpersistent.py)
        self.waiting_producers: dict[int, Withdrawable] = {}
        self.consumers: dict[int, Consumer] = {}
        # producers and consumers of non-persistent topics (kop/pulsar/nonpersistent_commands.py routes by these ids)
        self.np_producers: dict[int, NPProducer] = {}
        self.np_consumers: dict[int, NPConsumer] = {}
        self.can_write = asyncio.Event()
        self.can_write.set()
        self.paused_reading = False
        self.ip = ""
        self.counted = False  # counted in the broker's connection limits (set by the acceptor)
        self._charged = 0  # bytes charged to handler.request_bytes: the reader's buffer and queued commands

    # ------------------------------------------------------------------ asyncio.Protocol
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # A stream server hands its protocols a read-write transport (asyncio.Transport); the base type is
        # what asyncio.BaseProtocol declares.
        self.transport = cast(asyncio.Transport, transport)
        peer = transport.get_extra_info("peername")
        self.peer = f"{peer[0]}:{peer[1]}" if peer else "?"
        self.handler.connections.add(self)
        self.task = asyncio.get_running_loop().create_task(self._run())
        if self.handler.request_bytes.reached:
            self.update_reading()

    def get_buffer(self, sizehint: int) -> memoryview:
        """Up to READ_SIZE bytes; while the request-bytes bound is reached (only the holder reads then), no more
        than the rest of the frame being received, so the read that completes it brings in nothing of the next
        one: the bytes over the bound stay within that one frame (kop/net/request_bytes.py)."""
        buf = _read_buffer()
        if self.handler.request_bytes.reached:
            return buf[:min(self.reader.needed, READ_SIZE)]
        return buf

    def buffer_updated(self, nbytes: int) -> None:
        self.data_received(_read_buffer()[:nbytes])

    def data_received(self, data: bytes | memoryview) -> None:
        if self.closed:
            return
        bound = self.handler.request_bytes
        self._charged += len(data)
        bound.add(len(data), self)
        self.reader.feed(data)
        while not self.closed:
            bad = False
            before = self.reader.buffered
            try:
                frame = self.reader.next_frame()
            except ChecksumMismatch as e:
                frame, bad = e.frame, True
            except UnknownCommand as e:
                self._done(before - self.reader.buffered, partial=True)
                log.info("pulsar %s: unknown command type %s, ignored", self.peer, e.type)
                continue
            except FrameError as e:
                log.info("pulsar %s: closing, bad frame: %s", self.peer, e)
                self.close()
                return
            if frame is None:
                break
            size = before - self.reader.buffered
            bound.complete(size, self)  # received; charged until handled
            self.queue.append((frame, bad, size))
            self.wakeup.set()
        if len(self.queue) > MAX_QUEUED or self.paused_reading or bound.reached:
            self.update_reading()

    def _done(self, size: int, partial: bool = False) -> None:
        """A command of `size` bytes is handled (or dropped): its bytes are no longer held."""
        if size and not self.closed:
            self._charged -= size
            self.handler.request_bytes.release(size, size if partial else 0)

    @property
    def mid_frame(self) -> bool:
        return self.reader.buffered > 0

    def update_reading(self) -> None:
        """Pause or resume reading: too many queued commands, a draining broker, or the request-bytes bound."""
        if self.closed or self.transport is None:
            return
        bound = self.handler.request_bytes
        should_pause = len(self.queue) > MAX_QUEUED or (self.paused_reading and len(self.queue) >= MAX_QUEUED // 2)
        if should_pause or self.handler.draining:
            should_pause = True
            bound.leave(self)
        else:
            should_pause = not bound.may_read(self)
        if should_pause and not self.paused_reading:
            self.paused_reading = True
            self.transport.pause_reading()
        elif not should_pause and self.paused_reading:
            self.paused_reading = False
            self.transport.resume_reading()

    def eof_received(self) -> bool | None:
        return None  # close

    def connection_lost(self, exc: Exception | None) -> None:
        self.close()

    def pause_writing(self) -> None:
        self.can_write.clear()

    def resume_writing(self) -> None:
        self.can_write.set()

    # ------------------------------------------------------------------ commands
    async def _run(self) -> None:
        try:
            while not self.closed:
                if not self.queue:
                    self.wakeup.clear()
                    await self.wakeup.wait()
                    continue
                frame, self.checksum_failed, size = self.queue.popleft()
                try:
                    await self._handle(frame)
                finally:
                    self._done(size)
                if self.paused_reading:
                    self.update_reading()
        except asyncio.CancelledError:
            if not self.closed:  # not its close: a command's await ended by another request's cancellation
                log.warning("pulsar %s: closing, a command ended cancelled while its connection was open", self.peer)
                self.close()  # rather than an open connection that no longer reads its commands
        except Exception:  # a bug in a handler: this connection goes, the broker and the others stay
            log.exception("pulsar %s: closing after an unexpected error", self.peer)
            self.close()

    async def _handle(self, frame: Frame) -> None:
        t = frame.type
        if not self.connected and t != c.CONNECT:
            if t not in (c.PING, c.PONG):
                log.info("pulsar %s: %s before CONNECT, closing", self.peer, c.type_name(t))
                self.close()
            return
        fn = self.handler.commands.get(t)
        if fn is None:
            self._not_supported(frame)
            return
        if t != c.SEND:  # a SEND carries no string; its metadata's are checked where they are read
            bad = non_utf8_field(frame.inner)
            if bad is not None:
                log.info("pulsar %s: closing, %s has a string field %s that is not UTF-8", self.peer,
                         c.type_name(t), bad)
                self.close()
                return
        await fn(self, frame)

    def _not_supported(self, frame: Frame) -> None:
        """A command of our schema we do not serve: ERROR when it names a request, else ignored."""
        try:
            request_id = getattr(frame.inner, "request_id", None)
        except Exception:  # noqa: BLE001 - an odd command: nothing to answer
            request_id = None
        log.info("pulsar %s: %s not supported", self.peer, c.type_name(frame.type))
        if request_id is not None and frame.inner.HasField("request_id"):
            self.send(c.error(request_id, c.ServerError.NotAllowedError,
                              f"{c.type_name(frame.type)} is not supported by this broker"))

    # ------------------------------------------------------------------ output
    def send(self, cmd: Any) -> None:
        self.write(encode_command(cmd))

    def write(self, data: bytes) -> None:
        if not self.closed and self.transport is not None:
            self.transport.write(data)

    @property
    def backlogged(self) -> bool:
        return self.transport is not None and self.transport.get_write_buffer_size() > HIGH_WATER

    def close(self) -> None:
        if self.closed:
            return
        bound = self.handler.request_bytes
        bound.leave(self)
        if self._charged:  # the frame being received and every command not yet handled
            bound.release(self._charged, self.reader.buffered)
            self._charged = 0
        self.closed = True
        self.handler.connections.discard(self)
        self.handler.connection_closed(self)
        if self.transport is not None:
            self.transport.close()
        if self.task is not None and self.task is not asyncio.current_task():
            self.task.cancel()
        self.can_write.set()
        for waiter in list(self.waiting_producers.values()):  # first: closing a producer may promote a waiter
            waiter.withdraw()
        for producer in list(self.producers.values()):
            producer.close()
        self.producers.clear()
        for consumer in list(self.consumers.values()):
            consumer.subscription.remove_consumer(consumer)
        self.consumers.clear()
        for np_producer in list(self.np_producers.values()):
            np_producer.close()
        for np_consumer in list(self.np_consumers.values()):
            np_consumer.close()
        self.np_producers.clear()
        self.np_consumers.clear()
