"""Size-prefixed Kafka frames, received straight into their own buffers (sans-IO).

asyncio's BufferedProtocol asks for a buffer before each read; FrameReader hands out the unfilled tail of
the 4-byte size prefix, then of a bytearray that becomes the frame, so payload bytes are written once, by the
kernel, into a buffer the broker owns and may patch in place (base offsets, leader epochs). This measured
~5x less CPU than `data_received` plus concatenation when the framing was written.

Memory follows the bytes received, not the size announced: a peer can announce socketRequestMaxBytes in
four bytes and then send nothing. The buffer starts at FIRST_STEP bytes (or the frame's size, if smaller: almost
every request, including the Produce requests of the usual clients, fits and is received exactly as before,
in one buffer of its own size) and grows by up to GROWTH_FACTOR times, never past MAX_STEP at once,
only when the bytes already given to it have all arrived. So a frame costs at most
~GROWTH_FACTOR x its received bytes + FIRST_STEP, and the final buffer is still exactly the frame:
records stay memoryview slices of it. Growth happens in get_buffer(), when the transport has released the
previous read's view (a bytearray cannot be resized while viewed); growing in place lets the allocator move
pages (mremap) rather than copy them for large buffers.

`allocated` counts the bytes this reader holds for a frame not yet complete, so the connection can charge them
to the broker-wide bound (queuedMaxRequestBytes); `on_alloc` is called with each increase.

`max_size` is the largest frame accepted. It may be changed between frames: once SASL exists, the security
layer sets it to `sasl.server.max.receive.size` (Kafka: 512 KiB) until a connection is authenticated, and back
to socketRequestMaxBytes afterwards (not done yet: there is no authentication). `limit_name` names the setting
in the error message.

No sockets here: tests drive it with plain bytes.
"""

from __future__ import annotations

from collections.abc import Callable

#: First buffer of a frame (or the whole frame when smaller). 256 KiB: a Java producer's request (16 KiB
#: batches), librdkafka's and every non-Produce request fit, so they are received into one buffer as before.
FIRST_STEP = 256 << 10
#: Each growth multiplies the buffer by up to this (so at most this x the bytes received are held) ...
GROWTH_FACTOR = 4
#: ... and adds at most this many bytes at once.
MAX_STEP = 16 << 20

_ZEROS = bytes(MAX_STEP)  # source of the zero bytes a buffer grows by (calloc'd: untouched pages cost nothing)
_ZEROS_VIEW = memoryview(_ZEROS)


class FrameError(Exception):
    """The peer sent a size that cannot be a Kafka request; the connection must be closed."""


class FrameReader:
    __slots__ = ("max_size", "limit_name", "on_alloc", "_size_buf", "_size_got", "_frame", "_frame_size",
                 "_frame_got", "frames", "allocated")

    def __init__(self, max_size: int, limit_name: str = "socketRequestMaxBytes",
                 on_alloc: Callable[[int], None] | None = None) -> None:
        self.max_size = max_size
        self.limit_name = limit_name
        self.on_alloc = on_alloc
        self._size_buf = bytearray(4)
        self._size_got = 0
        self._frame: bytearray | None = None
        self._frame_size = 0  # announced size of the frame being received; 0 between frames
        self._frame_got = 0
        self.frames: list[bytearray] = []  # complete frames not yet taken
        self.allocated = 0  # bytes held for the frame being received

    def get_buffer(self) -> memoryview:
        if self._frame_size == 0:
            return memoryview(self._size_buf)[self._size_got :]
        frame = self._frame
        if frame is None:
            frame = self._grow(min(self._frame_size, FIRST_STEP))
        elif self._frame_got == len(frame):
            cap = len(frame)
            frame = self._grow(min(self._frame_size, cap * GROWTH_FACTOR, cap + MAX_STEP))
        return memoryview(frame)[self._frame_got :]

    def _grow(self, new_len: int) -> bytearray:
        """Grow the frame buffer to `new_len` bytes (in place when no view of it is alive); the buffer."""
        frame = self._frame
        old = 0 if frame is None else len(frame)
        if frame is None:
            frame = self._frame = bytearray(new_len)
        else:
            try:
                frame += _ZEROS_VIEW[: new_len - old]
            except BufferError:  # a view of it is still alive somewhere: grow a copy instead
                grown = bytearray(new_len)
                grown[:old] = frame
                frame = self._frame = grown
        self.allocated += new_len - old
        if self.on_alloc is not None:
            self.on_alloc(new_len - old)
        return frame

    def buffer_updated(self, n: int) -> None:
        """`n` bytes were written into the last buffer handed out."""
        if self._frame_size == 0:
            self._size_got += n
            if self._size_got < 4:
                return
            size = int.from_bytes(self._size_buf, "big", signed=True)
            self._size_got = 0
            if size < 0 or size > self.max_size:
                raise FrameError(f"invalid request size {size} (limit {self.max_size}, {self.limit_name})")
            if size == 0:
                raise FrameError("empty request frame")
            self._frame_size = size  # the buffer is allocated by the next get_buffer(), as bytes arrive
            self._frame_got = 0
            return
        self._frame_got += n
        if self._frame_got == self._frame_size:
            assert self._frame is not None
            self.frames.append(self._frame)
            self._frame = None
            self._frame_size = 0
            self.allocated = 0

    def feed(self, data: bytes) -> list[bytearray]:
        """Convenience for tests and non-buffered transports: copy bytes in, return completed frames."""
        view = memoryview(data)
        while view:
            buf = self.get_buffer()
            n = min(len(buf), len(view))
            buf[:n] = view[:n]
            del buf
            view = view[n:]
            self.buffer_updated(n)
        out, self.frames = self.frames, []
        return out

    @property
    def mid_frame(self) -> bool:
        return self._frame_size > 0 or self._size_got > 0
