"""Pulsar's ManagedLedgerInfo (the bytes at ``/managed-ledgers/<name>``), on the protobuf codec of
kop/storage/protobuf.py.

Field numbers are Pulsar's (``MLDataFormats.proto``): ``ManagedLedgerInfo{ledgerInfo=1 repeated
LedgerInfo{ledgerId=1, entries=2, size=3, timestamp=4, offloadContext=5}, terminatedPosition=2
NestedPositionInfo{ledgerId=1, entryId=2}, properties=3 repeated KeyValue{key=1, value=2}}``. Fields we
do not interpret (offload context, anything newer) are kept as raw bytes and written back unchanged.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from kop.storage.protobuf import (
    LEN,
    VARINT,
    Buffer,
    ProtobufError,
    as_int64,
    field_bytes,
    field_string,
    field_varint,
    iter_fields,
)


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
