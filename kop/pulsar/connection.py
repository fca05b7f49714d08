"""One Pulsar client connection: frames in (kop/pulsar/codec), commands run in arrival order, frames out.

Commands are handled one after another by one task per connection, so their effects keep the client's order
(SENDs are appended in the order they came; their receipts follow as the appends complete, in that order).
Handlers of each command family live in their own module and are registered in ``HANDLERS``.

Bad input, as Pulsar's broker answers it: a frame that puts the stream out of step (garbage, a Kafka or HTTP
client on this port, a frame over the size limit) closes the connection; a wrong checksum on a SEND is answered
SEND_ERROR ChecksumError; an unknown or unsupported command is answered ERROR (when it has a request id we can
name) or ignored, and the connection stays. Nothing a client sends reaches other connections: each has its own
reader, queue and task, and an exception in a handler closes only this connection.
Differences from Pulsar's ServerCnx: no authentication (the security issue), no proxying, no broker-side
keep-alive pings of idle clients (the client pings us; we answer).
"""

from __future__ import annotations

import asyncio
import logging
from collections import deque
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

from kop.pulsar.codec import commands as c
from kop.pulsar.codec.framing import (
    ChecksumMismatch,
    Frame,
    FrameError,
    FrameReader,
    UnknownCommand,
    encode_command,
)

if TYPE_CHECKING:
    from kop.pulsar.handler import PulsarProtocolHandler
    from kop.pulsar.produce import Producer
    from kop.pulsar.subscription import Consumer

log = logging.getLogger(__name__)

# Frame overhead Pulsar allows beyond maxMessageSize (its broker: maxMessageSize + 10 KiB).
FRAME_OVERHEAD = 10 * 1024
# Commands queued before the connection stops reading (a client pipelining faster than we handle).
MAX_QUEUED = 1000
# Bytes written but not yet sent before dispatch to this connection waits (a slow consumer).
HIGH_WATER = 4 * 1024 * 1024

Handler = Callable[["PulsarConnection", Frame], Awaitable[None]]
HANDLERS: dict[int, Handler] = {}


def serves(*types: int) -> Callable[[Handler], Handler]:
    """Register a command handler (used by the command-family modules)."""

    def register(fn: Handler) -> Handler:
        for t in types:
            HANDLERS[t] = fn
        return fn

    return register


class PulsarConnection(asyncio.Protocol):
    def __init__(self, handler: PulsarProtocolHandler) -> None:
        self.handler = handler
        self.reader = FrameReader(handler.config.maxMessageSize + FRAME_OVERHEAD)
        self.transport: asyncio.Transport | None = None
        self.peer = "?"
        self.queue: deque[tuple[Frame, bool]] = deque()  # (frame, its checksum failed)
        self.checksum_failed = False  # of the command being handled
        self.wakeup = asyncio.Event()
        self.task: asyncio.Task[None] | None = None
        self.closed = False
        self.connected = False  # CONNECT seen
        self.protocol_version = 0
        self.producers: dict[int, Producer] = {}
        self.consumers: dict[int, Consumer] = {}
        self.can_write = asyncio.Event()
        self.can_write.set()
        self.paused_reading = False

    # ------------------------------------------------------------------ asyncio.Protocol
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]
        peer = transport.get_extra_info("peername")
        self.peer = f"{peer[0]}:{peer[1]}" if peer else "?"
        self.handler.connections.add(self)
        self.task = asyncio.get_running_loop().create_task(self._run())

    def data_received(self, data: bytes) -> None:
        self.reader.feed(data)
        while not self.closed:
            bad = False
            try:
                frame = self.reader.next_frame()
            except ChecksumMismatch as e:
                frame, bad = e.frame, True
            except UnknownCommand as e:
                log.info("pulsar %s: unknown command type %s, ignored", self.peer, e.type)
                continue
            except FrameError as e:
                log.info("pulsar %s: closing, bad frame: %s", self.peer, e)
                self.close()
                return
            if frame is None:
                break
            self.queue.append((frame, bad))
            self.wakeup.set()
        if len(self.queue) > MAX_QUEUED and self.transport is not None and not self.paused_reading:
            self.paused_reading = True
            self.transport.pause_reading()

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
                frame, self.checksum_failed = self.queue.popleft()
                if self.paused_reading and len(self.queue) < MAX_QUEUED // 2 and self.transport is not None:
                    self.paused_reading = False
                    self.transport.resume_reading()
                await self._handle(frame)
        except asyncio.CancelledError:
            pass
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
        fn = HANDLERS.get(t)
        if fn is None:
            self._not_supported(frame)
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
        self.closed = True
        self.handler.connections.discard(self)
        if self.transport is not None:
            self.transport.close()
        if self.task is not None and self.task is not asyncio.current_task():
            self.task.cancel()
        self.can_write.set()
        for producer in list(self.producers.values()):
            producer.close()
        self.producers.clear()
        for consumer in list(self.consumers.values()):
            consumer.subscription.remove_consumer(consumer)
        self.consumers.clear()
