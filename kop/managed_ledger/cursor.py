"""Durable cursors (a Pulsar subscription's position) persisted in the metadata store in Pulsar's layout.

A cursor is what Pulsar's ManagedCursorImpl keeps: the mark-delete position M (every entry up to M is
acknowledged) and the individually deleted ranges after it. It lives at
``/managed-ledgers/<managed ledger>/<URL-encoded cursor name>`` as a ``ManagedCursorInfo`` protobuf with
Pulsar's field numbers (MLDataFormats.proto): ``cursorsLedgerId=1`` (always -1 here: the position is inline),
``markDeleteLedgerId=2``, ``markDeleteEntryId=3``, ``individualDeletedMessages=4`` (``MessageRange{lowerEndpoint=1,
upperEndpoint=2}`` of ``NestedPositionInfo{ledgerId=1, entryId=2}``, open-closed ``(lower, upper]``),
``properties=5`` (``LongProperty{name=1, value=2}``), ``lastActive=6``.

How it differs from Pulsar, and why: Pulsar writes each mark-delete to a cursor *ledger* and keeps the znode as a
snapshot; we always write the znode inline (what Pulsar does on a clean close, ``cursorsLedgerId=-1``): one small
versioned put per persisted change, and the handler coalesces acks so at most one put is in flight per cursor.
No BookKeeper ledger per subscription means nothing to recover or garbage-collect. The ranges are capped at
``MAX_RANGES`` (Pulsar's ``managedLedgerMaxUnackedRangesToPersistInMetadataStore`` default, 1000); beyond it the
oldest ranges are dropped, which can only cause redelivery (at-least-once), never loss. The property
``kop.nextOffset`` records the Kafka offset after M, so a cursor resumes without reading the entry at M
(an entry that retention may have deleted).
"""

from __future__ import annotations

import time
import urllib.parse
from dataclasses import dataclass, field

from kop.managed_ledger.ledger import ML_ROOT, Position
from kop.storage.api import MetadataStore
from kop.storage.protobuf import LEN, VARINT, as_int64, field_bytes, field_string, field_varint, iter_fields

MAX_RANGES = 1000
NEXT_OFFSET = "kop.nextOffset"


@dataclass(slots=True)
class CursorInfo:
    mark_delete: Position | None = None
    ranges: list[tuple[Position, Position]] = field(default_factory=list)  # (lower, upper] each
    properties: dict[str, int] = field(default_factory=dict)
    last_active: int = 0

    def encode(self) -> bytes:
        out = field_varint(1, -1 & 0xFFFFFFFFFFFFFFFF)
        if self.mark_delete is not None:
            out += field_varint(2, self.mark_delete.ledger_id & 0xFFFFFFFFFFFFFFFF)
            out += field_varint(3, self.mark_delete.entry_id & 0xFFFFFFFFFFFFFFFF)
        for lower, upper in self.ranges[-MAX_RANGES:]:
            out += field_bytes(4, field_bytes(1, _pos(lower)) + field_bytes(2, _pos(upper)))
        for name, value in self.properties.items():
            out += field_bytes(5, field_string(1, name) + field_varint(2, value & 0xFFFFFFFFFFFFFFFF))
        out += field_varint(6, self.last_active or int(time.time() * 1000))
        return out

    @classmethod
    def decode(cls, buf: bytes) -> CursorInfo:
        info = cls()
        ml, me = None, None
        for number, wire, value, _fs, fe in iter_fields(buf):
            payload = buf[value:fe] if wire == LEN else b""
            if wire == VARINT and number == 2:
                ml = as_int64(value)
            elif wire == VARINT and number == 3:
                me = as_int64(value)
            elif wire == LEN and number == 4:
                ends: dict[int, Position] = {}
                for n, w, v, _s, e in iter_fields(payload):
                    if w == LEN and n in (1, 2):
                        ends[n] = _decode_pos(payload[v:e])
                if 1 in ends and 2 in ends:
                    info.ranges.append((ends[1], ends[2]))
            elif wire == LEN and number == 5:
                name, val = "", 0
                for n, w, v, _s, e in iter_fields(payload):
                    if n == 1 and w == LEN:
                        name = bytes(payload[v:e]).decode()
                    elif n == 2 and w == VARINT:
                        val = as_int64(v)
                info.properties[name] = val
            elif wire == VARINT and number == 6:
                info.last_active = as_int64(value)
        if ml is not None and me is not None:
            info.mark_delete = Position(ml, me)
        return info


def _pos(p: Position) -> bytes:
    return field_varint(1, p.ledger_id & 0xFFFFFFFFFFFFFFFF) + field_varint(2, p.entry_id & 0xFFFFFFFFFFFFFFFF)


def _decode_pos(buf: bytes) -> Position:
    ledger, entry = -1, -1
    for n, w, v, _s, _e in iter_fields(buf):
        if w == VARINT and n == 1:
            ledger = as_int64(v)
        elif w == VARINT and n == 2:
            entry = as_int64(v)
    return Position(ledger, entry)


def cursor_path(ledger_name: str, cursor_name: str) -> str:
    return f"{ML_ROOT}/{ledger_name}/{urllib.parse.quote(cursor_name, safe='')}"


class CursorStore:
    """Load, save (versioned, so two owners never overwrite each other silently) and delete cursors."""

    def __init__(self, store: MetadataStore) -> None:
        self.store = store

    async def names(self, ledger_name: str) -> list[str]:
        return [urllib.parse.unquote(c) for c in await self.store.children(f"{ML_ROOT}/{ledger_name}")]

    async def load(self, ledger_name: str, cursor_name: str) -> tuple[CursorInfo, int] | None:
        got = await self.store.get(cursor_path(ledger_name, cursor_name))
        if got is None:
            return None
        return CursorInfo.decode(got[0]), got[1].version

    async def save(self, ledger_name: str, cursor_name: str, info: CursorInfo, version: int) -> int:
        """Write `info` over `version` (-1: create); returns the new version."""
        stat = await self.store.put(cursor_path(ledger_name, cursor_name), info.encode(), expected_version=version)
        return stat.version

    async def delete(self, ledger_name: str, cursor_name: str) -> None:
        path = cursor_path(ledger_name, cursor_name)
        if await self.store.exists(path):
            await self.store.delete(path)
