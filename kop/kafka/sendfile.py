"""Writing an answer whose parts include file spans (zero-copy Fetch answers, issue 27) straight to the socket.

Why a writer of its own: asyncio's and uvloop's transports take buffers only, and uvloop has no loop.sendfile.
A Fetch answer read with zero_copy=True (kop/kafka/apis/fetch.py) holds, per batch, a FileSpan of the ledger
file (and, for batches stored before issue 27, the base offset and the rest of the batch header in memory).
KafkaConnection hands such an answer to its DirectWriter only when the transport has nothing unsent and no
other answer is being written, so bytes reach the socket in the connection's order; until the writer is done,
the connection writes nothing else and reads no more requests (back-pressure, as a paused transport).

The writer sends runs of buffers with one sendmsg and each span with os.sendfile from its own dup'd descriptor
(kop.storage.api.FileRef), under TCP_CORK so that small parts and file bodies leave in full segments. When the
socket is full it waits for it (loop.add_writer on its own descriptor) and goes on where it stopped - while each
wake-up sends at least MIN_BURST bytes. A reader with a small window (kafka-consumer-perf-test: the Java
consumer's 64 KiB receive buffer) would wake Python for every 20-60 KiB, which cost more CPU per MB than the
copy path (measured: 1.25 vs 0.93 ms/MB); then the rest is read into memory and handed to the transport, whose
flushing runs in C. A reader that takes a whole answer at once (franz-go) gets all of it from the files.

The writer owns a dup() of the transport's socket: the transport's close cannot hand the descriptor number to
another socket while a send waits. A span whose file ends early (a ledger file truncated after the read checked
its size) or any socket error raises: the connection is closed, so a client never gets a frame with other bytes
than announced - it sees a cut connection, and retries.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import socket
from collections.abc import Callable, Sequence

from kop.storage.api import FileSpan, StorageError

#: One part of an answer: bytes sent as they are, or a span of a file.
Part = bytes | bytearray | memoryview | FileSpan
Buffer = bytes | bytearray | memoryview

_IOV_MAX = min(os.sysconf("SC_IOV_MAX") if hasattr(os, "sysconf") else 1024, 1024)
_CORK = getattr(socket, "TCP_CORK", None)


class FileEnded(OSError):
    """A span's file ended before the span did (truncated since it was read)."""


def span_bytes(parts: Sequence[Part]) -> int:
    """Bytes of the answer that are spans of files (0: an answer of buffers only)."""
    total = 0
    for part in parts:
        if isinstance(part, FileSpan):
            total += part.length
    return total


def read_spans(parts: Sequence[Part]) -> list[Buffer]:
    """The answer with its spans read into memory, for the transport (the copy path): when the transport still
    holds an earlier answer's bytes, a direct send would overtake them. StorageError for a file cut short."""
    return [part.read() if isinstance(part, FileSpan) else part for part in parts]


#: A wake-up of a waiting send that sent less than this means a reader with a small window (a Java consumer's
#: 64 KiB receive buffer): waking Python per window costs more than the copy, so the rest goes to the transport.
MIN_BURST = 256 << 10


class DirectWriter:
    """Sends one answer at a time straight to a connection's socket (module docstring)."""

    def __init__(self, loop: asyncio.AbstractEventLoop, fd: int) -> None:
        self._loop = loop
        self._sock = socket.socket(fileno=os.dup(fd))
        self._sock.setblocking(False)
        self._parts: Sequence[Part] = ()
        self._i = 0
        self._off = 0
        self._waiting = False
        self._on_done: Callable[[list[Buffer], BaseException | None], None] | None = None
        self.file_bytes = 0  # bytes sent with sendfile so far (the connection moves them to its metrics)

    def send(self, parts: Sequence[Part], on_done: Callable[[list[Buffer], BaseException | None], None]) -> bool:
        """Start sending `parts`; True when all went out now. Otherwise the writer waits for the socket and
        on_done(rest, error) is called once it is done: rest [] when all went from here, else the buffers (spans
        read) left for the transport to send (a slow reader); error when the send failed (close the
        connection). Raises OSError when the send fails at once."""
        self._parts, self._i, self._off = parts, 0, 0
        self._cork(1)
        self._pump()
        if self._i == len(parts):
            self._cork(0)
            self._parts = ()
            return True
        self._on_done = on_done
        self._waiting = True
        self._loop.add_writer(self._sock.fileno(), self._writable)
        return False

    def _cork(self, on: int) -> None:
        if _CORK is not None:
            self._sock.setsockopt(socket.IPPROTO_TCP, _CORK, on)

    def _writable(self) -> None:
        rest: list[Buffer] = []
        error: BaseException | None = None
        try:
            sent = self._pump()
            if self._i < len(self._parts):
                if sent >= MIN_BURST:
                    return  # a fast reader: wait for it again
                rest = self._rest()
            self._cork(0)
        except (OSError, StorageError) as e:
            error = e
        self._stop_waiting()
        self._parts = ()
        on_done, self._on_done = self._on_done, None
        if on_done is not None:
            on_done(rest, error)

    def _rest(self) -> list[Buffer]:
        """What is left of the answer, spans read into memory."""
        parts, i, off = self._parts, self._i, self._off
        first = parts[i]
        if isinstance(first, FileSpan):
            first = FileSpan(first.file, first.offset + off, first.length - off).read()
        elif off:
            first = memoryview(first)[off:]
        return [first, *read_spans(parts[i + 1:])]

    def _stop_waiting(self) -> None:
        if self._waiting:
            self._waiting = False
            self._loop.remove_writer(self._sock.fileno())

    def _pump(self) -> int:
        """Send until done or the socket is full; the bytes sent. Raises OSError (FileEnded)."""
        parts, i, off = self._parts, self._i, self._off
        n_parts = len(parts)
        fd = self._sock.fileno()
        sent = 0
        try:
            while i < n_parts:
                part = parts[i]
                if isinstance(part, FileSpan):
                    if off < part.length:
                        n = os.sendfile(fd, part.file.fd, part.offset + off, part.length - off)
                        if n == 0:
                            raise FileEnded(f"the file ended {part.length - off} bytes before the span sent from it")
                        off += n
                        sent += n
                        self.file_bytes += n
                    if off >= part.length:
                        i, off = i + 1, 0
                    continue
                bufs: list[Buffer] = [part]
                j = i + 1
                while j < n_parts and len(bufs) < _IOV_MAX:
                    nxt = parts[j]
                    if isinstance(nxt, FileSpan):
                        break
                    bufs.append(nxt)
                    j += 1
                if off:
                    bufs[0] = memoryview(bufs[0])[off:]
                n = self._sock.sendmsg(bufs)
                sent += n
                while i < j:  # advance over what was sent (whole parts, then into the first one left)
                    left = len(parts[i]) - off
                    if n < left:
                        off += n
                        break
                    n -= left
                    i, off = i + 1, 0
        except BlockingIOError:
            pass
        finally:
            self._i, self._off = i, off
        return sent

    def close(self) -> None:
        """The connection is gone: stop waiting, drop the answer, close the socket's dup."""
        self._stop_waiting()
        self._parts = ()
        self._on_done = None
        with contextlib.suppress(OSError):
            self._sock.close()
