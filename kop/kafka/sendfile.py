"""Writing an answer whose parts include file spans (zero-copy Fetch answers, issue 27) straight to the socket.

Why a writer of its own: asyncio's and uvloop's transports take buffers only, and uvloop has no loop.sendfile.
A Fetch answer read with zero_copy=True (kop/kafka/apis/fetch.py) holds, per batch, a FileSpan of the ledger
file (and, for batches stored before issue 27, the base offset and the rest of the batch header in memory).
KafkaConnection hands such an answer to its DirectWriter only when the transport has nothing unsent, so the
bytes reach the socket in the connection's order. The writer sends, synchronously and without waiting, what
the socket takes: runs of buffers with one sendmsg, each span with os.sendfile from its own dup'd descriptor
(kop.storage.api.FileRef), under TCP_CORK so that small parts and file bodies leave in full segments. What the
socket did not take (a slow reader: its buffer is full) is read into memory and given back for the transport,
which sends it after - the copy path's cost for that part only. Waiting for the socket in Python instead cost
more than the copy for a slow reader (kafka-consumer-perf-test: a wake-up and a few sendfile calls per batch).

The writer owns a dup() of the transport's socket: its descriptor number cannot be handed to another socket
while the writer holds it. A span whose file ends early (a ledger file truncated after the read checked its
size) or any socket error raises: the connection is closed, so a client never gets a frame with other bytes
than announced - it sees a cut connection, and retries.
"""

from __future__ import annotations

import contextlib
import os
import socket
from collections.abc import Sequence

from kop.storage.api import FileSpan

#: One part of an answer: bytes sent as they are, or a span of a file.
Part = bytes | bytearray | memoryview | FileSpan

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


def read_spans(parts: Sequence[Part]) -> list[bytes | bytearray | memoryview]:
    """The answer with its spans read into memory, for the transport (the copy path): when the transport still
    holds an earlier answer's bytes, a direct send would overtake them. StorageError for a file cut short."""
    return [part.read() if isinstance(part, FileSpan) else part for part in parts]


class DirectWriter:
    """Sends the start of one answer at a time straight to a connection's socket (module docstring)."""

    def __init__(self, fd: int) -> None:
        self._sock = socket.socket(fileno=os.dup(fd))
        self._sock.setblocking(False)

    def send(self, parts: Sequence[Part]) -> list[bytes | bytearray | memoryview]:
        """Send what the socket takes now; what it did not take comes back as buffers (spans read into memory),
        for the transport to send after it. Raises OSError (FileEnded: a span's file ended early) or
        StorageError (a span read for the rest ended early): the connection must then be closed."""
        i, off = 0, 0
        self._cork(1)
        try:
            i, off = self._pump(parts)
        finally:
            self._cork(0)
        if i == len(parts):
            return []
        first = parts[i]
        if isinstance(first, FileSpan):
            first = FileSpan(first.file, first.offset + off, first.length - off).read()
        elif off:
            first = memoryview(first)[off:]
        return [first, *read_spans(parts[i + 1:])]

    def _cork(self, on: int) -> None:
        if _CORK is not None:
            self._sock.setsockopt(socket.IPPROTO_TCP, _CORK, on)

    def _pump(self, parts: Sequence[Part]) -> tuple[int, int]:
        """Send until done or the socket is full: (index of the first part not all sent, bytes of it sent)."""
        i, off = 0, 0
        n_parts = len(parts)
        fd = self._sock.fileno()
        try:
            while i < n_parts:
                part = parts[i]
                if isinstance(part, FileSpan):
                    if off < part.length:
                        n = os.sendfile(fd, part.file.fd, part.offset + off, part.length - off)
                        if n == 0:
                            raise FileEnded(f"the file ended {part.length - off} bytes before the span sent from it")
                        off += n
                    if off >= part.length:
                        i, off = i + 1, 0
                    continue
                bufs: list[bytes | bytearray | memoryview] = [part]
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
                while i < j:  # advance over what was sent (whole parts, then into the first one left)
                    left = len(parts[i]) - off
                    if n < left:
                        off += n
                        break
                    n -= left
                    i, off = i + 1, 0
        except BlockingIOError:
            pass
        return i, off

    def close(self) -> None:
        """The connection is gone: close the socket's dup."""
        with contextlib.suppress(OSError):
            self._sock.close()
