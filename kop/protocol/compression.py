"""Record-batch compression codecs (attributes & 7): 1 gzip, 2 snappy, 3 lz4, 4 zstd.

The broker keeps batches compressed on the produce and fetch paths; this module is for the rare
paths that need records (compaction, index rebuilds, the group coordinator, tests).

Snappy comes in two shapes: Java producers write the xerial framing (a 16-byte header, then blocks
each prefixed by a big-endian int32 length), other clients may write one raw snappy block. Both are
accepted; we write xerial framing because every Kafka client can read it.
"""

from __future__ import annotations

import struct
import zlib
from enum import IntEnum
from typing import TypeAlias

import cramjam
import lz4.frame
import zstandard

#: the bytes the codec functions read: bytes, or a zero-copy view of them
BytesLike: TypeAlias = bytes | bytearray | memoryview


class Compression(IntEnum):
    NONE = 0
    GZIP = 1
    SNAPPY = 2
    LZ4 = 3
    ZSTD = 4


class CompressionError(Exception):
    """Compressed data that cannot be decompressed (or an unknown codec id)."""


XERIAL_MAGIC = b"\x82SNAPPY\x00"
_XERIAL_HEADER = XERIAL_MAGIC + struct.pack(">ii", 1, 1)  # magic, version 1, min compatible 1
_XERIAL_BLOCK = 32 * 1024  # Java's default xerial block size
_I32 = struct.Struct(">i")


def compress(codec: int, data: BytesLike, level: int | None = None) -> bytes:
    """Compress ``data`` (any bytes-like) with Kafka codec ``codec``; ``level`` is the Kafka topic config's
    (compression.gzip/lz4/zstd.level; None or gzip's -1 = the codec's default)."""
    if codec == Compression.NONE:
        return bytes(data)
    if codec == Compression.GZIP:
        obj = zlib.compressobj(6 if level is None or level < 0 else level, zlib.DEFLATED, 31)  # wbits 31: gzip container
        return obj.compress(data) + obj.flush()
    if codec == Compression.SNAPPY:
        return snappy_xerial_compress(data)
    if codec == Compression.LZ4:
        # Kafka's lz4 levels are 1 (fast) to 17 (high compression); the lz4 library's are 0 to 16.
        # Independent blocks, as Kafka writes them: the Java client's KafkaLZ4BlockInputStream decompresses every
        # 64 KiB block on its own, so a block that refers back to the previous one (the lz4 library's default,
        # block_linked=True) fails there for any batch over 64 KiB.
        return lz4.frame.compress(data, compression_level=0 if level is None or level <= 1 else min(level, 16),
                                  block_linked=False)
    if codec == Compression.ZSTD:
        return zstandard.ZstdCompressor(level=3 if level is None else level).compress(bytes(data))
    raise CompressionError(f"unknown compression codec {codec}")


def decompress(codec: int, data: BytesLike) -> bytes:
    """Decompress a batch payload; raises CompressionError for corrupt data or unknown codecs."""
    try:
        if codec == Compression.NONE:
            return bytes(data)
        if codec == Compression.GZIP:
            return zlib.decompress(data, 47)  # wbits 47: accept gzip or zlib containers
        if codec == Compression.SNAPPY:
            return snappy_decompress(data)
        if codec == Compression.LZ4:
            return lz4.frame.decompress(data)
        if codec == Compression.ZSTD:
            return _zstd_decompress(data)
    except CompressionError:
        raise
    except Exception as exc:  # each library raises its own error types
        raise CompressionError(f"{Compression(codec).name.lower()} payload is corrupt: {exc}") from None
    raise CompressionError(f"unknown compression codec {codec}")


def _zstd_decompress(data: BytesLike) -> bytes:
    # Streaming decompression: Java's zstd-jni output frames may not record the content size.
    out = []
    view = memoryview(data)
    while view:
        obj = zstandard.ZstdDecompressor().decompressobj()
        out.append(obj.decompress(view))
        if not obj.eof:
            raise CompressionError("zstd frame is truncated")
        view = memoryview(obj.unused_data)
    return b"".join(out)


def snappy_xerial_compress(data: BytesLike) -> bytes:
    view = memoryview(data)
    out = [_XERIAL_HEADER]
    for start in range(0, len(view), _XERIAL_BLOCK):
        block = bytes(cramjam.snappy.compress_raw(view[start:start + _XERIAL_BLOCK]))
        out.append(_I32.pack(len(block)))
        out.append(block)
    return b"".join(out)


def snappy_decompress(data: BytesLike) -> bytes:
    """Raw snappy, or the xerial framing Java producers write (detected by its magic header)."""
    view = memoryview(data)
    if bytes(view[:8]) != XERIAL_MAGIC:
        return bytes(cramjam.snappy.decompress_raw(view))
    pos = 16
    out = []
    while pos < len(view):
        if pos + 4 > len(view):
            raise CompressionError("xerial snappy block length is truncated")
        (size,) = _I32.unpack_from(view, pos)
        pos += 4
        if size < 0 or pos + size > len(view):
            raise CompressionError("xerial snappy block runs past the end of the payload")
        out.append(bytes(cramjam.snappy.decompress_raw(view[pos:pos + size])))
        pos += size
    return b"".join(out)
