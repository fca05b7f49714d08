"""Size-prefixed frames without sockets: split anywhere, several per read, limits enforced."""

import pytest

from kop.kafka.framing import FrameError, FrameReader


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
