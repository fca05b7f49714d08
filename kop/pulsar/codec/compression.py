"""Pulsar's payload compression (MessageMetadata.compression): NONE 0, LZ4 1, ZLIB 2, ZSTD 3, SNAPPY 4.

Pulsar's codecs differ from Kafka's (kop/protocol/compression.py) in framing, which is why this is
its own module: LZ4 is one raw LZ4 *block* (no frame, no size prefix; the size is
MessageMetadata.uncompressed_size), ZLIB is the zlib container (Kafka's "gzip" is the gzip one),
SNAPPY is one raw snappy block (no xerial framing), ZSTD is a plain zstd frame. Kafka's decoders are
reused where the bytes agree (snappy raw, zstd, zlib).

Decompression is bounded: the metadata's uncompressed_size must be within ``limit`` and the output
must have exactly that size, so a small hostile payload cannot inflate into gigabytes.
"""

from __future__ import annotations

import zlib

import cramjam
import lz4.block
import zstandard

from kop.protocol import compression as kafka_compression
from kop.protocol.compression import BytesLike
from kop.storage.protobuf import ProtobufError, decode_varint

NONE, LZ4, ZLIB, ZSTD, SNAPPY = 0, 1, 2, 3, 4
NAMES = {NONE: "NONE", LZ4: "LZ4", ZLIB: "ZLIB", ZSTD: "ZSTD", SNAPPY: "SNAPPY"}


class CompressionError(ValueError):
    """A payload that does not decompress to its announced size, or an unknown codec."""


def compress(codec: int, data: BytesLike) -> bytes:
    """Compress ``data``; the caller records ``len(data)`` as uncompressed_size."""
    if codec == NONE:
        return bytes(data)
    if codec == LZ4:
        packed: bytes = lz4.block.compress(data, store_size=False)
        return packed
    if codec == ZLIB:
        return zlib.compress(data)
    if codec == ZSTD:
        return zstandard.ZstdCompressor().compress(bytes(data))
    if codec == SNAPPY:
        return bytes(cramjam.snappy.compress_raw(bytes(data)))
    raise CompressionError(f"unknown compression type {codec}")


def decompress(codec: int, data: BytesLike, uncompressed_size: int, limit: int) -> bytes:
    """Decompress a payload to exactly ``uncompressed_size`` bytes (which must be <= ``limit``)."""
    if codec == NONE:
        return bytes(data)
    if codec not in NAMES:
        raise CompressionError(f"unknown compression type {codec}")
    if uncompressed_size > limit:
        raise CompressionError(f"uncompressed size {uncompressed_size} is over the {limit}-byte limit")
    try:
        out = _decompress(codec, data, uncompressed_size)
    except CompressionError:
        raise
    except Exception as exc:  # each library has its own error types
        raise CompressionError(f"{NAMES[codec]} payload is corrupt: {exc}") from None
    if len(out) != uncompressed_size:
        raise CompressionError(
            f"{NAMES[codec]} payload inflated to {len(out)} bytes, metadata says {uncompressed_size}")
    return out


def _decompress(codec: int, data: BytesLike, size: int) -> bytes:
    if codec == LZ4:
        unpacked: bytes = lz4.block.decompress(data, uncompressed_size=size)
        return unpacked
    if codec == ZLIB:
        return zlib.decompressobj().decompress(data, size + 1)  # +1: notices output beyond the size
    if codec == ZSTD:
        # A streaming read, bounded: a frame header's content size is not trusted for allocation.
        chunks = []
        got = 0
        with zstandard.ZstdDecompressor().stream_reader(bytes(data)) as reader:
            while got <= size and (chunk := reader.read(size + 1 - got)):
                chunks.append(chunk)
                got += len(chunk)
        return b"".join(chunks)
    # SNAPPY: the raw block starts with its uncompressed length; check it before inflating.
    view = memoryview(data)
    try:
        announced, _ = decode_varint(view, 0)
    except ProtobufError:
        raise CompressionError("snappy payload is truncated") from None
    if announced != size:
        raise CompressionError(f"snappy block announces {announced} bytes, metadata says {size}")
    return kafka_compression.snappy_decompress(view)
