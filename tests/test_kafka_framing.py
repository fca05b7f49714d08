"""Size-prefixed frames without sockets: split anywhere, several per read, limits enforced, memory that follows
the bytes received; and against a broker, peers that announce the largest frame and send one byte."""

import socket
import time

import pytest

from kop.kafka.framing import FIRST_STEP, GROWTH_FACTOR, FrameError, FrameReader
from tests.support.net import read_vm_hwm_kib


def frame(payload: bytes) -> bytes:
    return len(payload).to_bytes(4, "big") + payload


def test_frames_split_at_every_byte():
    data = frame(b"hello") + frame(b"x" * 1000) + frame(b"z")
    for cut in range(len(data)):
        r = FrameReader(10_000)
        got = r.feed(data[:cut]) + r.feed(data[cut:])
        assert [bytes(f) for f in got] == [b"hello", b"x" * 1000, b"z"]
        assert not r.mid_frame


def test_oversized_and_negative_sizes_are_refused_before_allocation():
    r = FrameReader(100)
    with pytest.raises(FrameError, match="invalid request size 101"):
        r.feed((101).to_bytes(4, "big"))
    r = FrameReader(100)
    with pytest.raises(FrameError, match="invalid request size -1"):
        r.feed(b"\xff\xff\xff\xff")
    r = FrameReader(100)
    with pytest.raises(FrameError):
        r.feed(b"\x00\x00\x00\x00")


def test_partial_frame_is_pending():
    r = FrameReader(100)
    assert r.feed(frame(b"abcdef")[:7]) == []
    assert r.mid_frame


# ---- memory follows the bytes received ----------------------------------------------------------------------


def test_an_announced_size_alone_allocates_nothing_and_a_byte_only_the_first_step():
    """A frame's buffer is allocated when its first bytes are read, at most FIRST_STEP, and grows only when what
    it has is filled; the completed frame is still one buffer of exactly the announced size."""
    charged: list[int] = []
    size = 100 << 20
    r = FrameReader(size, on_alloc=charged.append)
    assert r.feed(size.to_bytes(4, "big")) == []
    assert r.allocated == 0 and charged == []
    r.feed(b"x")
    assert r.allocated == FIRST_STEP == sum(charged)
    r.feed(b"y" * (FIRST_STEP - 1))  # fills the first step exactly: no growth before more bytes come
    assert r.allocated == FIRST_STEP
    r.feed(b"z")
    assert r.allocated == FIRST_STEP * GROWTH_FACTOR
    got = 2 + FIRST_STEP - 1
    while got < size:  # memory held stays within GROWTH_FACTOR x the bytes received (+ the first step)
        n = min(size - got, 3 << 20)
        out = r.feed(b"w" * n)
        got += n
        if out:
            break
        assert r.allocated <= GROWTH_FACTOR * got + FIRST_STEP
    (frame,) = out
    assert len(frame) == size and sum(charged) == size and r.allocated == 0
    assert frame[:2] == b"xy" and frame[FIRST_STEP] == ord("z") and frame[-1] == ord("w")


def test_growth_keeps_bytes_when_a_view_is_still_alive():
    """A bytearray cannot be resized while a memoryview of it exists (the transport may keep one): then the
    reader grows a copy, and no byte is lost."""
    r = FrameReader(1 << 22)
    r.feed((FIRST_STEP + 10).to_bytes(4, "big"))
    r.feed(b"a" * FIRST_STEP)
    held = r.get_buffer()  # a view of the full first step (zero length left): growth must copy
    assert len(held) == 10
    held2 = memoryview(r._frame)  # type: ignore[arg-type]  # pins the current buffer
    del held
    (frame,) = r.feed(b"b" * 10)
    assert bytes(frame) == b"a" * FIRST_STEP + b"b" * 10
    del held2


def test_small_frames_get_one_buffer_of_their_size():
    r = FrameReader(1 << 20)
    payload = bytes(range(256)) * 100
    (f,) = r.feed(frame(payload))
    assert type(f) is bytearray and bytes(f) == payload


def test_the_limit_can_change_between_frames_and_names_its_setting():
    """The hook the security work uses for sasl.server.max.receive.size before authentication."""
    r = FrameReader(1 << 20)
    r.max_size, r.limit_name = 512 * 1024, "sasl.server.max.receive.size"
    with pytest.raises(FrameError, match=r"limit 524288, sasl.server.max.receive.size"):
        r.feed((512 * 1024 + 1).to_bytes(4, "big"))


# ---- against a broker: 50 peers announcing the largest frame ------------------------------------------------

ANNOUNCERS = 50
RSS_BOUND_KIB = 64 * 1024


def _produce_consume(bootstrap: str, topic: str, n: int = 2000) -> None:
    from confluent_kafka import Consumer, Producer

    p = Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 5})
    for i in range(n):
        p.produce(topic, b"v%06d" % i)
    assert p.flush(60) == 0
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": f"g-{topic}", "auto.offset.reset": "earliest"})
    try:
        c.subscribe([topic])
        got: list[bytes] = []
        deadline = time.monotonic() + 120  # liveness only
        while len(got) < n:
            for m in c.consume(num_messages=1000, timeout=1.0):
                assert not m.error(), m.error()
                got.append(m.value())
            assert time.monotonic() < deadline, f"consumer stalled at {len(got)} of {n}"
        assert got == [b"v%06d" % i for i in range(n)]
    finally:
        c.close()


def test_peers_announcing_the_largest_frame_cost_what_they_send(kop_broker):
    """50 connections each announce socketRequestMaxBytes (100 MiB) and send one byte: the broker's peak RSS grows
    by less than 64 MiB (the code that allocated announced sizes grew by 100 MiB per connection: 5 GiB), and a
    normal producer and consumer work meanwhile. The same producer/consumer work runs once before the
    baseline, so the allocator's own growth from it is not counted."""
    broker = kop_broker()
    max_bytes = 100 * 1024 * 1024  # socketRequestMaxBytes' default
    _produce_consume(broker.bootstrap, "warm-up")
    assert broker.pid is not None
    baseline = read_vm_hwm_kib(broker.pid)
    assert baseline is not None
    host, port = broker.bootstrap.rsplit(":", 1)
    peers = []
    try:
        for _ in range(ANNOUNCERS):
            s = socket.create_connection((host, int(port)), timeout=30)
            s.sendall(max_bytes.to_bytes(4, "big") + b"\x00")
            peers.append(s)
        _produce_consume(broker.bootstrap, "while-announced")
        peak = read_vm_hwm_kib(broker.pid)
        assert peak is not None
        grown = peak - baseline
        assert grown < RSS_BOUND_KIB, f"peak RSS grew by {grown} KiB with {ANNOUNCERS} announced frames"
        assert broker.alive()
    finally:
        for s in peers:
            s.close()
