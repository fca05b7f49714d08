"""kop/kafka/sendfile.py's DirectWriter on a real loopback TCP connection and real files: an answer of buffers and
file spans arrives byte for byte and in order, also when it is far larger than the socket's buffers (the writer
waits for the socket, or with a small-window reader hands the rest, read, to the transport), on asyncio's loop
and on uvloop (the broker's); a span whose file was cut short raises
instead of sending fewer bytes than the frame announced."""

from __future__ import annotations

import asyncio
import os
import socket
import threading
from collections.abc import Callable
from pathlib import Path

import pytest
import uvloop

from kop.kafka.sendfile import DirectWriter, FileEnded, read_spans, span_bytes
from kop.storage.api import FileRef, FileSpan, StorageError

LOOPS: dict[str, Callable[[], asyncio.AbstractEventLoop]] = {"asyncio": asyncio.new_event_loop,
                                                             "uvloop": uvloop.new_event_loop}


def _tcp_pair(buffers: int = 64 << 10) -> tuple[socket.socket, socket.socket]:
    """A loopback TCP connection; `buffers`: both sides' socket buffers (0: the kernel's autotuning)."""
    with socket.socket() as server:
        if buffers:
            server.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, buffers)
        server.bind(("127.0.0.1", 0))
        server.listen(1)
        a = socket.socket()
        if buffers:
            a.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, buffers)
        a.connect(server.getsockname())
        b, _ = server.accept()
    a.setblocking(False)
    return a, b


def _answer(tmp_path: Path) -> tuple[list, bytes]:
    """Buffers and spans of two files, alternating, and the bytes they make."""
    data = os.urandom(3 << 20)
    other = os.urandom(1 << 20)
    (tmp_path / "a").write_bytes(data)
    (tmp_path / "b").write_bytes(other)
    fa = FileRef(os.open(tmp_path / "a", os.O_RDONLY))
    fb = FileRef(os.open(tmp_path / "b", os.O_RDONLY))
    parts: list = [b"\x00\x00\x10\x00head", memoryview(b"--8 bytes")[1:]]
    want = [b"\x00\x00\x10\x00head", b"-8 bytes"]
    pos = 0
    for i in range(40):  # spans of 1 B to ~150 KiB, with small buffers between them (a batch's header each)
        n = 1 + (i * 37_813) % 150_000
        parts += [FileSpan(fa, pos, n), b"h%02d" % i]
        want += [data[pos:pos + n], b"h%02d" % i]
        pos += n
        if i % 7 == 0:
            parts.append(FileSpan(fb, i * 1000, 5000))
            want.append(other[i * 1000 : i * 1000 + 5000])
    return parts, b"".join(want)


@pytest.mark.parametrize("loop_name", sorted(LOOPS))
@pytest.mark.parametrize("small", [True, False], ids=["small-window", "roomy"])
def test_an_answer_larger_than_the_socket_buffers_arrives_whole_and_in_order(tmp_path: Path, loop_name: str,
                                                                              small: bool) -> None:
    """A 4 MiB answer: the writer sends what fits, waits for the socket and goes on; with a small window (64 KiB
    buffers: every wake-up sends less than MIN_BURST) it hands the rest, read, to the caller after one wake-up.
    Either way what arrives is the answer, byte for byte and in order (the rest sent after, as the transport
    would)."""
    parts, want = _answer(tmp_path)
    assert span_bytes(parts) == len(want) - sum(len(p) for p in parts if not isinstance(p, FileSpan))
    assert b"".join(read_spans(parts)) == want  # the copy path reads the same bytes
    a, b = _tcp_pair(64 << 10 if small else 0)
    loop = LOOPS[loop_name]()
    got = bytearray()
    reader = threading.Thread(target=_read_all, args=(b, got))
    reader.start()
    try:
        async def main() -> list:
            done: asyncio.Future[tuple[list, BaseException | None]] = loop.create_future()
            writer = DirectWriter(loop, a.fileno())
            if writer.send(parts, lambda rest, error: done.set_result((rest, error))):
                return []
            rest, error = await done
            assert error is None
            writer.close()
            return rest

        rest = loop.run_until_complete(main())
        if small:
            assert rest and not any(isinstance(p, FileSpan) for p in rest)  # given up after a small wake-up
        a.setblocking(True)
        for buf in rest:  # what the transport does with the rest
            a.sendall(buf)
        a.shutdown(socket.SHUT_WR)
        reader.join(60)
        assert bytes(got) == want
    finally:
        loop.close()
        a.close()
        b.close()


def _read_all(sock: socket.socket, into: bytearray) -> None:
    sock.settimeout(60)
    while chunk := sock.recv(1 << 16):
        into += chunk




def test_a_file_cut_short_raises_rather_than_send_less(tmp_path: Path) -> None:
    path = tmp_path / "ledger"
    path.write_bytes(os.urandom(100_000))
    ref = FileRef(os.open(path, os.O_RDONLY))
    span = FileSpan(ref, 50_000, 40_000)
    os.truncate(path, 60_000)
    with pytest.raises(StorageError):
        span.read()
    a, b = _tcp_pair()
    loop = asyncio.new_event_loop()
    try:
        writer = DirectWriter(loop, a.fileno())
        with pytest.raises(FileEnded):
            writer.send([b"x" * 10, span, b"y"], lambda _rest, _error: None)
        writer.close()
    finally:
        loop.close()
        a.close()
        b.close()
