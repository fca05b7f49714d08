"""kop/protocol/compression.py: the Kafka codecs, read back by what Kafka clients use to read them.

LZ4 is the one with a trap: the Java client (KafkaLZ4BlockInputStream) decompresses each block of the frame on
its own, without the previous block as a dictionary, so frames must have independent blocks (the FLG byte's
block-independence bit, as Kafka's own writer sets it) - the lz4 library links them by default, which only
shows in batches over one 64 KiB block.
"""

from __future__ import annotations

import random
import struct

import lz4.block
import lz4.frame
import pytest
from kafka.codec import lz4_decode

from kop.protocol import compression as kc


def _blocks_decoded_alone(frame: bytes) -> bytes:
    """The frame read the way the Java client reads it: header, then every block decompressed by itself."""
    assert frame[:4] == b"\x04\x22\x4d\x18"
    flg = frame[4]
    assert flg >> 6 == 1  # version 01
    assert flg & 0x20, "blocks are linked: the Java client cannot read them"
    pos = 6 + (8 if flg & 0x08 else 0) + 1
    out = []
    while True:
        (size,) = struct.unpack_from("<I", frame, pos)
        pos += 4
        if size == 0:
            return b"".join(out)
        raw = size & 0x7FFFFFFF
        block = frame[pos:pos + raw]
        pos += raw + (4 if flg & 0x10 else 0)
        out.append(block if size & 0x80000000 else lz4.block.decompress(block, uncompressed_size=64 * 1024))


@pytest.mark.parametrize("size", [0, 100, 64 * 1024, 64 * 1024 + 1, 300_000])
@pytest.mark.parametrize("level", [None, 9])
def test_lz4_frames_have_independent_blocks(size: int, level: int | None) -> None:
    rnd = random.Random(size)
    # compressible with matches across block boundaries (a repeated 1 KiB record), plus some noise
    unit = rnd.randbytes(200) + b"x" * 824
    data = (unit * (size // len(unit) + 1))[:size]
    frame = kc.compress(kc.Compression.LZ4, bytearray(data), level)
    assert _blocks_decoded_alone(frame) == data
    assert lz4_decode(frame) == data  # kafka-python's reader
    assert kc.decompress(kc.Compression.LZ4, memoryview(frame)) == data
    assert lz4.frame.decompress(frame) == data


@pytest.mark.parametrize("codec", list(kc.Compression))
def test_every_codec_round_trips_any_bytes_like(codec: kc.Compression) -> None:
    data = b"record batch " * 10_000
    for form in (data, bytearray(data), memoryview(data)):
        assert kc.decompress(codec, kc.compress(codec, form)) == data


def test_corrupt_lz4_is_a_compression_error() -> None:
    frame = kc.compress(kc.Compression.LZ4, b"x" * 100_000)
    with pytest.raises(kc.CompressionError):
        kc.decompress(kc.Compression.LZ4, frame[:-10])
