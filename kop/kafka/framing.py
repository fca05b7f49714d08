"""Size-prefixed Kafka frames, received straight into their own buffers (sans-IO).

asyncio's BufferedProtocol asks for a buffer before each read; FrameReader hands out the unfilled tail of
the 4-byte size prefix, then of a bytearray allocated for exactly that frame, so payload bytes are written
once, by the kernel, into a buffer the broker owns and may patch in place (base offsets, leader epochs).
This measured ~5x less CPU than `data_received` plus concatenation when the framing was written.

No sockets here: tests drive it with plain bytes.
"""

from __future__ import annotations


class FrameError(Exception):
    """The peer sent a size that cannot be a Kafka request; the connection must be closed."""


class FrameReader:
    __slots__ = ("max_size", "_size_buf", "_size_got", "_frame", "_frame_got", "frames")

    def __init__(self, max_size: int) -> None:
        self.max_size = max_size
        self._size_buf = bytearray(4)
        self._size_got = 0
        self._frame: bytearray | None = None
        self._frame_got = 0
        self.frames: list[bytearray] = []  # complete frames not yet taken

    def get_buffer(self) -> memoryview:
        if self._frame is None:
            return memoryview(self._size_buf)[self._size_got :]
        return memoryview(self._frame)[self._frame_got :]

    def buffer_updated(self, n: int) -> None:
        """`n` bytes were written into the last buffer handed out."""
        if self._frame is None:
            self._size_got += n
            if self._size_got < 4:
                return
            size = int.from_bytes(self._size_buf, "big", signed=True)
            self._size_got = 0
            if size < 0 or size > self.max_size:
                raise FrameError(f"invalid request size {size} (limit {self.max_size})")
            if size == 0:
                raise FrameError("empty request frame")
            self._frame = bytearray(size)
            self._frame_got = 0
            return
        self._frame_got += n
        if self._frame_got == len(self._frame):
            self.frames.append(self._frame)
            self._frame = None

    def feed(self, data: bytes) -> list[bytearray]:
        """Convenience for tests and non-buffered transports: copy bytes in, return completed frames."""
        view = memoryview(data)
        while view:
            buf = self.get_buffer()
            n = min(len(buf), len(view))
            buf[:n] = view[:n]
            view = view[n:]
            self.buffer_updated(n)
        out, self.frames = self.frames, []
        return out

    @property
    def mid_frame(self) -> bool:
        return self._frame is not None or self._size_got > 0
