"""A tiny hand-rolled protobuf (proto2 wire format) codec, and Pulsar's ManagedLedgerInfo on top of it.

Why hand-rolled: the messages we store are few and small with fixed schemas (ManagedLedgerInfo here,
BrokerEntryMetadata and MessageMetadata in kop/offset/entry_format.py); a protobuf dependency plus a protoc
build step would cost more than these ~150 lines, and the hot path (one BrokerEntryMetadata per append)
is faster with precomputed byte templates than with any generic message object.

Field numbers are Pulsar's (``MLDataFormats.proto``), so the bytes at ``/managed-ledgers/<name>`` are the
ones a Pulsar broker would write: ``ManagedLedgerInfo{ledgerInfo=1 repeated LedgerInfo{ledgerId=1,
entries=2, size=3, timestamp=4, offloadContext=5}, terminatedPosition=2 NestedPositionInfo{ledgerId=1,
entryId=2}, properties=3 repeated KeyValue{key=1, value=2}}``. Fields we do not interpret (offload
context, anything newer) are kept as raw bytes and written back unchanged.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field

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


# ---- ManagedLedgerInfo ----------------------------------------------------------------------------------


@dataclass(slots=True)
class LedgerInfo:
    """One ledger of a managed ledger. entries/size/timestamp are unset (None) for the current ledger,
    as Pulsar leaves them; timestamp (ms) is set when the ledger is closed, retention ages from it."""

    ledger_id: int
    entries: int | None = None
    size: int | None = None
    timestamp: int | None = None
    unknown: bytes = b""

    def encode(self) -> bytes:
        out = field_varint(1, self.ledger_id)
        if self.entries is not None:
            out += field_varint(2, self.entries)
        if self.size is not None:
            out += field_varint(3, self.size)
        if self.timestamp is not None:
            out += field_varint(4, self.timestamp)
        return out + self.unknown

    @classmethod
    def decode(cls, buf: Buffer, start: int = 0, end: int | None = None) -> LedgerInfo:
        info = cls(-1)
        unknown = bytearray()
        seen_id = False
        for number, wire, value, fs, fe in iter_fields(buf, start, end):
            if wire == VARINT and number == 1:
                info.ledger_id = as_int64(value)
                seen_id = True
            elif wire == VARINT and number == 2:
                info.entries = as_int64(value)
            elif wire == VARINT and number == 3:
                info.size = as_int64(value)
            elif wire == VARINT and number == 4:
                info.timestamp = as_int64(value)
            else:
                unknown += buf[fs:fe]
        if not seen_id:
            raise ProtobufError("LedgerInfo without ledgerId")
        info.unknown = bytes(unknown)
        return info


@dataclass(slots=True)
class ManagedLedgerInfo:
    ledgers: list[LedgerInfo] = field(default_factory=list)
    terminated_position: tuple[int, int] | None = None
    properties: dict[str, str] = field(default_factory=dict)
    unknown: bytes = b""

    def encode(self) -> bytes:
        parts = [field_bytes(1, li.encode()) for li in self.ledgers]
        if self.terminated_position is not None:
            lid, eid = self.terminated_position
            parts.append(field_bytes(2, field_varint(1, lid) + field_varint(2, eid)))
        for k, v in self.properties.items():
            parts.append(field_bytes(3, field_string(1, k) + field_string(2, v)))
        parts.append(self.unknown)
        return b"".join(parts)

    @classmethod
    def decode(cls, buf: Buffer) -> ManagedLedgerInfo:
        info = cls()
        unknown = bytearray()
        for number, wire, value, fs, fe in iter_fields(buf):
            if number == 1 and wire == LEN:
                info.ledgers.append(LedgerInfo.decode(buf, value, fe))
            elif number == 2 and wire == LEN:
                pos = [0, -1]
                for n, w, v, _, _ in iter_fields(buf, value, fe):
                    if w == VARINT and n in (1, 2):
                        pos[n - 1] = as_int64(v)
                info.terminated_position = (pos[0], pos[1])
            elif number == 3 and wire == LEN:
                key = val = ""
                for n, w, v, _, e in iter_fields(buf, value, fe):
                    if w == LEN and n == 1:
                        key = bytes(buf[v:e]).decode()
                    elif w == LEN and n == 2:
                        val = bytes(buf[v:e]).decode()
                info.properties[key] = val
            else:
                unknown += buf[fs:fe]
        info.unknown = bytes(unknown)
        return info
