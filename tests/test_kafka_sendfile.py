"""kop/kafka/sendfile.py's DirectWriter on a real loopback TCP connection and real files: an answer of buffers and
file spans arrives byte for byte and in order, also when it is far larger than the socket's buffers (what the
socket does not take comes back read, for the transport to send after); a span whose file was cut short raises
instead of sending fewer bytes than the frame announced."""

from __future__ import annotations

import os
import socket
import threading
from pathlib import Path

import pytest

from kop.kafka.sendfile import DirectWriter, FileEnded, read_spans, span_bytes
from kop.storage.api import FileRef, FileSpan, StorageError


def _tcp_pair() -> tuple[socket.socket, socket.socket]:
    with socket.socket() as server:  # small buffers both sides: the writer must wait for the reader
        server.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 64 << 10)
        server.bind(("127.0.0.1", 0))
        server.listen(1)
        a = socket.socket()
        a.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 64 << 10)
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


def test_what_the_socket_does_not_take_comes_back_and_follows_in_order(tmp_path: Path) -> None:
    """A 4 MiB answer into small socket buffers: the writer sends what fits without waiting, the rest comes
    back as buffers (spans read), and the two together are the answer, byte for byte."""
    parts, want = _answer(tmp_path)
    assert span_bytes(parts) == len(want) - sum(len(p) for p in parts if not isinstance(p, FileSpan))
    assert b"".join(read_spans(parts)) == want  # the copy path reads the same bytes
    a, b = _tcp_pair()
    got = bytearray()
    reader = threading.Thread(target=_read_all, args=(b, got))
    reader.start()
    try:
        writer = DirectWriter(a.fileno())
        rest = writer.send(parts)
        writer.close()
        assert rest and not any(isinstance(p, FileSpan) for p in rest)  # the socket was full before the end
        a.setblocking(True)
        for buf in rest:  # what the transport does with the rest
            a.sendall(buf)
        a.shutdown(socket.SHUT_WR)
        reader.join(60)
        assert bytes(got) == want
        # An answer the socket takes whole comes back empty.
        c, d = _tcp_pair()
        w2 = DirectWriter(c.fileno())
        assert w2.send([b"abc", parts[2], b"def"]) == []
        w2.close()
        c.close()
        d.settimeout(30)
        assert _recv(d, 6 + parts[2].length) == b"abc" + parts[2].read() + b"def"
        d.close()
    finally:
        a.close()
        b.close()


def _read_all(sock: socket.socket, into: bytearray) -> None:
    sock.settimeout(60)
    while chunk := sock.recv(1 << 16):
        into += chunk


def _recv(sock: socket.socket, n: int) -> bytes:
    out = bytearray()
    while len(out) < n:
        chunk = sock.recv(n - len(out))
        assert chunk
        out += chunk
    return bytes(out)


def test_a_file_cut_short_raises_rather_than_send_less(tmp_path: Path) -> None:
    path = tmp_path / "ledger"
    path.write_bytes(os.urandom(100_000))
    ref = FileRef(os.open(path, os.O_RDONLY))
    span = FileSpan(ref, 50_000, 40_000)
    os.truncate(path, 60_000)
    with pytest.raises(StorageError):
        span.read()
    a, b = _tcp_pair()
    try:
        writer = DirectWriter(a.fileno())
        with pytest.raises(FileEnded):
            writer.send([b"x" * 10, span, b"y"])
        writer.close()
    finally:
        a.close()
        b.close()
