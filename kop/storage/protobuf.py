"""A tiny hand-rolled protobuf (proto2 wire format) codec: the bytes of the metadata the stores keep.

Users: BookKeeper's ledger metadata (kop/storage/bookkeeper/metadata.py), Pulsar's ManagedLedgerInfo
(kop/managed_ledger/protobuf.py) and the entry headers (kop/offset/entry_format.py) - each a layer at or
above this one, so the codec sits in the storage layer they all import.

Why hand-rolled: the messages we store are few and small with fixed schemas (ManagedLedgerInfo,
BrokerEntryMetadata and MessageMetadata in kop/offset/entry_format.py); a protobuf dependency plus a protoc
build step would cost more than these ~150 lines, and the hot path (one BrokerEntryMetadata per append)
is faster with precomputed byte templates than with any generic message object.
"""

from __future__ import annotations

from collections.abc import Iterator

Buffer = bytes | bytearray | memoryview

VARINT, I64, LEN, I32 = 0, 1, 2, 5
_U64 = (1 << 64) - 1


class ProtobufError(ValueError):
    pass


def encode_varint(value: int) -> bytes:
    """Unsigned varint; negative values are written as 64-bit two's complement (protobuf int64)."""
    if value < 0:
        value &= _U64
    if value < 0x80:
        return bytes((value,))
    out = bytearray()
    while value >= 0x80:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def decode_varint(buf: Buffer, pos: int) -> tuple[int, int]:
    """(value, position after it). Raises ProtobufError on a truncated varint."""
    result = 0
    shift = 0
    try:
        while True:
            b = buf[pos]
            pos += 1
            result |= (b & 0x7F) << shift
            if b < 0x80:
                return result, pos
            shift += 7
            if shift > 63:
                raise ProtobufError("varint too long")
    except IndexError:
        raise ProtobufError("truncated varint") from None


def as_int64(value: int) -> int:
    return value - (1 << 64) if value >= 1 << 63 else value


def tag(field_number: int, wire_type: int) -> bytes:
    return encode_varint(field_number << 3 | wire_type)


def field_varint(field_number: int, value: int) -> bytes:
    return tag(field_number, VARINT) + encode_varint(value)


def field_bytes(field_number: int, value: Buffer) -> bytes:
    return tag(field_number, LEN) + encode_varint(len(value)) + bytes(value)


def field_string(field_number: int, value: str) -> bytes:
    return field_bytes(field_number, value.encode())


def iter_fields(buf: Buffer, start: int = 0, end: int | None = None) -> Iterator[tuple[int, int, int, int, int]]:
    """Yield (field number, wire type, value, field start, field end) for each field in buf[start:end].
    For LEN fields `value` is the offset of the payload (payload = buf[value:field end]); for fixed
    fields it is the offset of the bytes; for varints it is the decoded value."""
    pos = start
    end = len(buf) if end is None else end
    while pos < end:
        field_start = pos
        key, pos = decode_varint(buf, pos)
        number, wire = key >> 3, key & 7
        if wire == VARINT:
            value, pos = decode_varint(buf, pos)
        elif wire == LEN:
            length, pos = decode_varint(buf, pos)
            value = pos
            pos += length
        elif wire == I64:
            value = pos
            pos += 8
        elif wire == I32:
            value = pos
            pos += 4
        else:
            raise ProtobufError(f"unsupported wire type {wire}")
        if pos > end:
            raise ProtobufError("truncated field")
        yield number, wire, value, field_start, pos
