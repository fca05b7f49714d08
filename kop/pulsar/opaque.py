"""Encrypted and chunked Pulsar messages, stored as they were sent (issue #22; docs/pulsar.md "Encrypted and
chunked messages").

Apache Pulsar's broker never opens a payload: an encrypted one (MessageMetadata.encryption_keys set: the client
compressed, then encrypted it, batch and all) and a chunk of a chunked message (num_chunks_from_msg > 1: a slice
of the compressed message) are stored and dispatched byte for byte, and the consumer's client decrypts or
reassembles them. Converting such a payload into Kafka records is impossible (it is ciphertext, or a fraction of
a message), so an *opaque* entry is stored as a Kafka batch of exactly one record:

    value   = the payload as sent (ciphertext, or the chunk's bytes)
    key     = the message's key (partition key, else ordering key), as for any Pulsar message
    timestamp = event time, else publish time
    headers = the message's properties (Pulsar does not encrypt them), then
              ``pulsar.encrypted`` = the names of the keys it is encrypted with, comma-separated (encrypted only),
              ``pulsar.chunk`` = "<chunk id>/<number of chunks>/<uuid>" (chunks only),
              ``pulsar.metadata`` = the entry's MessageMetadata, serialized as the producer sent it

A SEND that is neither but cannot be converted (a payload that does not decompress, or decompresses to more than
``maxMessageSize``; a batch whose messages do not parse) is stored the same way, with a ``pulsar.unconverted``
header saying why, rather than refused: Pulsar's broker stores it, and its consumers' clients decide what it is.

The batch's attributes carry ``OPAQUE_BIT`` (bit 7, the first bit Kafka leaves unused; Kafka's clients and our
compaction keep attributes as they are). An encrypted batch of N messages takes N offsets (lastOffsetDelta = N-1,
one record at the first: the rest are a gap, as after a compaction), so Pulsar's message counts and Kafka offsets
stay in step. Dispatch (``entry_of``) sends ``pulsar.metadata`` and the value back unchanged: the Pulsar consumer
gets what the producer sent, encryption keys, algorithm, parameters, chunk fields, replicated_from and all.

A Kafka consumer sees one record per entry whose value is the opaque payload and whose headers say what it is:
never plaintext it could mistake for the message. Only batches with the bit are read this way; a Kafka producer's
record that happens to carry a ``pulsar.metadata`` header is an ordinary record.
"""

from __future__ import annotations

import struct
from typing import Any

from google.protobuf.message import DecodeError

from kop.protocol.records import (
    BATCH_HEADER,
    HEADER_SIZE,
    MAGIC,
    MIN_BATCH_LENGTH,
    BatchHeader,
    CorruptRecordError,
    read_varint,
    update_crc,
)

from .codec import batch as pbatch
from .codec.commands import pb

METADATA_HEADER = "pulsar.metadata"
ENCRYPTED_HEADER = "pulsar.encrypted"
CHUNK_HEADER = "pulsar.chunk"
UNCONVERTED_HEADER = "pulsar.unconverted"
OPAQUE_BIT = 0x80  # in a stored batch's attributes: its one record holds an opaque Pulsar entry
_METADATA_KEY = METADATA_HEADER.encode("ascii")

__all__ = ["METADATA_HEADER", "ENCRYPTED_HEADER", "CHUNK_HEADER", "UNCONVERTED_HEADER", "OPAQUE_BIT", "is_opaque",
           "message_count", "to_kafka", "entry_of"]


def is_opaque(md: pb.MessageMetadata) -> bool:
    """Whether the broker must store the entry's payload unopened: it is encrypted, or a chunk of a message the
    client split (Pulsar's clients set the chunk fields only when a message has more than one chunk)."""
    return bool(md.encryption_keys) or md.num_chunks_from_msg > 1


MIN_BATCHED_MESSAGE = 4  # bytes each message of a batch takes at least (its u32 metadata size)


def message_count(md: pb.MessageMetadata, payload_size: int) -> int:
    """How many Pulsar messages the entry holds (what its offsets count): what the metadata says, at most as many
    as its uncompressed bytes can hold, so that a client's claim cannot make one SEND take billions of offsets."""
    if not pbatch.is_batch(md):
        return 1
    plain = md.uncompressed_size if md.compression else payload_size
    return max(1, min(md.num_messages_in_batch, plain // MIN_BATCHED_MESSAGE))


def _varint(out: bytearray, value: int) -> None:
    raw = ((value << 1) ^ (value >> 63)) & 0xFFFFFFFFFFFFFFFF
    while raw > 0x7F:
        out.append((raw & 0x7F) | 0x80)
        raw >>= 7
    out.append(raw)


def _blob(out: bytearray, data: bytes | None) -> None:
    if data is None:
        _varint(out, -1)
    else:
        _varint(out, len(data))
        out += data


def headers_of(md: pb.MessageMetadata, unconverted: str | None = None) -> list[tuple[bytes, bytes]]:
    """The record headers an opaque entry is stored with (see the module docstring)."""
    headers = [(kv.key.encode("utf-8"), kv.value.encode("utf-8")) for kv in md.properties]
    if unconverted is not None:
        headers.append((UNCONVERTED_HEADER.encode("ascii"), unconverted.encode("utf-8")))
    if md.encryption_keys:
        names = ",".join(k.key for k in md.encryption_keys)
        headers.append((ENCRYPTED_HEADER.encode("ascii"), names.encode("utf-8")))
    if md.num_chunks_from_msg > 1:
        chunk = f"{md.chunk_id}/{md.num_chunks_from_msg}/{md.uuid}"
        headers.append((CHUNK_HEADER.encode("ascii"), chunk.encode("utf-8")))
    headers.append((_METADATA_KEY, md.SerializeToString()))
    return headers


def to_kafka(md: pb.MessageMetadata, payload: Any, base_offset: int, key: bytes | None,
             unconverted: str | None = None) -> bytearray:
    """The Kafka batch storing an opaque entry (``is_opaque``): one uncompressed record, ``OPAQUE_BIT`` set,
    offsets for every message the entry holds. ``key``: the message's Kafka key (convert.key_of);
    ``unconverted``: why an entry that is not opaque could not be converted (``UNCONVERTED_HEADER``)."""
    ts = md.event_time or md.publish_time
    rec = bytearray(b"\x00")  # record attributes
    _varint(rec, 0)  # timestamp delta
    _varint(rec, 0)  # offset delta
    _blob(rec, key)
    _blob(rec, bytes(payload))
    headers = headers_of(md, unconverted)
    _varint(rec, len(headers))
    for hk, hv in headers:
        _blob(rec, hk)
        _blob(rec, hv)
    body = bytearray()
    _varint(body, len(rec))
    body += rec
    out = bytearray(HEADER_SIZE)
    BATCH_HEADER.pack_into(out, 0, base_offset, MIN_BATCH_LENGTH + len(body), -1, MAGIC, 0, OPAQUE_BIT,
                           message_count(md, len(payload)) - 1, ts, ts, -1, -1, -1, 1)
    out += body
    update_crc(out)
    return out


def _read_blob(data: Any, pos: int) -> tuple[bytes | None, int]:
    n, pos = read_varint(data, pos)
    if n < 0:
        return None, pos
    if pos + n > len(data):
        raise ValueError("record field runs past the batch")
    return bytes(data[pos:pos + n]), pos + n


def entry_of(header: BatchHeader, records: Any) -> tuple[pb.MessageMetadata, bytes, int] | None:
    """(MessageMetadata, payload, messages) of a stored opaque entry, from its batch header and its (uncompressed)
    records; None when the batch is not one (no ``OPAQUE_BIT``, not one record, no readable ``pulsar.metadata``):
    the caller converts it as any other batch."""
    if not header.attributes & OPAQUE_BIT or header.records_count != 1:
        return None
    try:
        _length, pos = read_varint(records, 0)
        pos += 1  # record attributes
        _ts_delta, pos = read_varint(records, pos)
        _offset_delta, pos = read_varint(records, pos)
        _key, pos = _read_blob(records, pos)
        value, pos = _read_blob(records, pos)
        count, pos = read_varint(records, pos)
        metadata = None
        for _ in range(count):
            hk, pos = _read_blob(records, pos)
            hv, pos = _read_blob(records, pos)
            if hk == _METADATA_KEY and hv is not None:
                metadata = hv
    except (IndexError, ValueError, CorruptRecordError, struct.error):
        return None
    if metadata is None:
        return None
    md = pb.MessageMetadata()
    try:
        md.MergeFromString(metadata)
    except DecodeError:
        return None
    payload = value or b""
    return md, payload, message_count(md, len(payload))
