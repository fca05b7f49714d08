"""Pulsar batch payloads: the messages inside one entry.

A batched entry's MessageMetadata has ``num_messages_in_batch`` (present only for batches) and
``compression``/``uncompressed_size``; its payload, once decompressed, is that many of::

    u32 size · SingleMessageMetadata(size bytes) · payload(SingleMessageMetadata.payload_size bytes)

A non-batched entry (the Python client's default producer) is one message: the payload is the message
and the entry's MessageMetadata carries its key, event time and properties.

``messages(metadata, payload)`` gives both kinds the same shape, ``(SingleMessageMetadata | None,
payload)`` per message, so callers handle one list; ``encode_batch`` writes the batch layout.
"""

from __future__ import annotations

import struct
from collections.abc import Iterable
from typing import cast

from google.protobuf.message import DecodeError

from kop.protocol.compression import BytesLike

from . import compression
from .commands import pb
from .framing import DEFAULT_MAX_MESSAGE_SIZE

_U32 = struct.Struct(">I")


class BatchError(ValueError):
    """A batch payload whose sizes or metadata do not add up (or that does not decompress)."""


def is_batch(metadata: pb.MessageMetadata) -> bool:
    return metadata.HasField("num_messages_in_batch")


def decode_batch(data: BytesLike, count: int) -> list[tuple[pb.SingleMessageMetadata | None, BytesLike]]:
    """Split an uncompressed batch payload into ``count`` (metadata, payload slice) pairs (the shape of
    ``messages``; the metadata is never None here)."""
    view = memoryview(data)
    end = len(view)
    pos = 0
    out: list[tuple[pb.SingleMessageMetadata | None, BytesLike]] = []
    new = pb.SingleMessageMetadata
    try:
        for _ in range(count):
            (size,) = _U32.unpack_from(view, pos)
            pos += 4
            stop = pos + size
            if stop > end:
                raise BatchError("single message metadata runs past the batch")
            smm = new()
            smm.MergeFromString(cast(bytes, view[pos:stop]))  # protobuf reads any buffer, without a copy
            pos = stop
            stop = pos + smm.payload_size
            if smm.payload_size < 0 or stop > end:
                raise BatchError(f"message payload of {smm.payload_size} bytes runs past the batch")
            out.append((smm, view[pos:stop]))
            pos = stop
    except struct.error:
        raise BatchError(f"batch of {count} messages is truncated after {len(out)}") from None
    except DecodeError as exc:
        raise BatchError(f"single message metadata does not parse: {exc}") from None
    if pos != end:
        raise BatchError(f"{end - pos} bytes after the last of {count} batched messages")
    return out


def encode_batch(items: Iterable[tuple[pb.SingleMessageMetadata, BytesLike]]) -> bytes:
    """The uncompressed batch payload; each metadata's payload_size is set from its payload."""
    parts: list[BytesLike] = []
    pack = _U32.pack
    for smm, payload in items:
        smm.payload_size = len(payload)
        raw = smm.SerializeToString()
        parts.append(pack(len(raw)))
        parts.append(raw)
        parts.append(payload)
    return b"".join(parts)


def decompress_payload(metadata: pb.MessageMetadata, payload: BytesLike,
                       limit: int = DEFAULT_MAX_MESSAGE_SIZE) -> BytesLike:
    """The entry payload decompressed per its metadata (the input itself when not compressed)."""
    if not metadata.compression:
        return payload
    try:
        return compression.decompress(metadata.compression, payload, metadata.uncompressed_size, limit)
    except compression.CompressionError as exc:
        raise BatchError(str(exc)) from None


def messages(metadata: pb.MessageMetadata, payload: BytesLike, limit: int = DEFAULT_MAX_MESSAGE_SIZE
             ) -> list[tuple[pb.SingleMessageMetadata | None, BytesLike]]:
    """Every message of an entry: batches as (SingleMessageMetadata, payload) pairs, a single message
    as [(None, payload)] (its fields are the entry metadata's). ``limit`` bounds decompression."""
    data = decompress_payload(metadata, payload, limit)
    if is_batch(metadata):
        count = metadata.num_messages_in_batch
        if count < 1:
            raise BatchError(f"batch announces {count} messages")
        return decode_batch(data, count)
    return [(None, data)]


def compressed(codec: int, data: bytes, metadata: pb.MessageMetadata) -> bytes:
    """Compress ``data`` with ``codec`` and record the codec and uncompressed size in ``metadata``."""
    if codec:
        metadata.compression = cast("pb.CompressionType.ValueType", codec)
        metadata.uncompressed_size = len(data)
        return compression.compress(codec, data)
    return data
