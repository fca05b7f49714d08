"""Ledger metadata in ZooKeeper exactly where and how BookKeeper keeps it, so that BookKeeper's own tools
(the shell, the auditor, bookie garbage collection) see our ledgers as theirs (docs/bookkeeper.md, Layout in ZooKeeper).

* Paths (HierarchicalLedgerManager, the "hybrid" layout of BookKeeper >= 4.7): an id below 2^31-1 is
  written as 10 zero-padded digits split 2-4-4, ``/ledgers/00/0000/L0042``; a larger one as 19 digits
  split 3-4-4-4-4, ``/ledgers/000/0000/0000/0002/L1234``.
* Value = ``b"BookieMetadataFormatVersion\\t3\\n"`` then a varint length and a ``LedgerMetadataFormat``
  protobuf (proto2): quorumSize=1 (write quorum), ensembleSize=2, length=3, lastEntryId=4, state=5
  (OPEN=1, IN_RECOVERY=2, CLOSED=3), segment=6 {ensembleMember=1 repeated "host:port",
  firstEntryId=2}, digestType=7 (CRC32=1, HMAC=2, CRC32C=3, DUMMY=4), password=8, ackQuorumSize=9,
  ctime=10, customMetadata=11 {key=1, value=2 bytes}, cToken=12. Only format 3 is read and written:
  every BookKeeper since 4.9 writes it; older formats are refused with a clear error.
* Ledger ids: an EPHEMERAL_SEQUENTIAL znode ``/ledgers/idgen/ID-<10 digits>`` is created, its sequence
  number is the id, and it is deleted again (ZkLedgerIdGenerator). Ids from 2^31-1 on would need the
  long-id scheme (``/ledgers/idgen-long``), which a cluster reaches only after two billion ledgers: refused.
* The bookies register as ephemeral ``/ledgers/available/<host:port>`` (read-only ones under
  ``available/readonly``); their data, when present, is a BookieServiceInfoFormat protobuf whose
  endpoints give the address when the bookie id is not itself ``host:port``.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field, replace

from kop.storage.api import StorageError
from kop.storage.protobuf import (
    LEN,
    VARINT,
    ProtobufError,
    as_int64,
    decode_varint,
    encode_varint,
    field_bytes,
    field_string,
    field_varint,
    iter_fields,
)

LEDGERS_ROOT = "/ledgers"
FORMAT_HEADER_V3 = b"BookieMetadataFormatVersion\t3\n"
_HEADER_PREFIX = b"BookieMetadataFormatVersion\t"
MAX_SHORT_LEDGER_ID = 2**31 - 1
LAYOUT = b"2\norg.apache.bookkeeper.meta.HierarchicalLedgerManagerFactory:1"

OPEN, IN_RECOVERY, CLOSED = 1, 2, 3


class MetadataFormatError(StorageError):
    """Ledger metadata we cannot parse (another format version, or damaged)."""


def ledger_path(ledger_id: int, root: str = LEDGERS_ROOT) -> str:
    """The metadata znode of a ledger in BookKeeper's hybrid hierarchical layout."""
    if ledger_id < 0:
        raise ValueError(f"ledger id {ledger_id} < 0")
    if ledger_id < MAX_SHORT_LEDGER_ID:
        s = f"{ledger_id:010d}"
        return f"{root}/{s[0:2]}/{s[2:6]}/L{s[6:10]}"
    s = f"{ledger_id:019d}"
    return f"{root}/{s[0:3]}/{s[3:7]}/{s[7:11]}/{s[11:15]}/L{s[15:19]}"


def ledger_id_from_path(levels: list[str]) -> int | None:
    """The id of the ledger whose path below the root has these levels (None if it is not one)."""
    if not levels or not levels[-1].startswith("L"):
        return None
    digits = "".join(levels[:-1]) + levels[-1][1:]
    widths = [len(x) for x in levels]
    if not digits.isdigit() or widths not in ([2, 4, 5], [3, 4, 4, 4, 5]):
        return None
    return int(digits)


@dataclass(slots=True)
class Segment:
    """An ensemble and the first entry written to it; a ledger's ensembles change at bookie failures."""

    first_entry_id: int
    ensemble: list[str]


@dataclass(slots=True)
class LedgerMetadata:
    ensemble_size: int
    write_quorum: int
    ack_quorum: int
    segments: list[Segment]
    state: int = OPEN
    last_entry_id: int = -1
    length: int = 0
    digest_type: int = 3  # CRC32C
    password: bytes = b""
    ctime: int | None = None
    custom: dict[str, bytes] = field(default_factory=dict)
    ctoken: int = 0
    unknown: bytes = b""  # fields of newer BookKeepers, written back unchanged

    @property
    def is_closed(self) -> bool:
        return self.state == CLOSED

    @property
    def last_ensemble(self) -> list[str]:
        return self.segments[-1].ensemble

    def ensemble_for(self, entry_id: int) -> list[str]:
        """The ensemble that holds `entry_id`: the last segment starting at or before it."""
        chosen = self.segments[0].ensemble
        for seg in self.segments:
            if seg.first_entry_id > entry_id:
                break
            chosen = seg.ensemble
        return chosen

    def bookies(self) -> set[str]:
        return {b for seg in self.segments for b in seg.ensemble}

    def copy(self, **changes: object) -> LedgerMetadata:
        segs = [Segment(s.first_entry_id, list(s.ensemble)) for s in self.segments]
        return replace(self, segments=segs, custom=dict(self.custom), **changes)  # type: ignore[arg-type]

    # ---- format v3

    def encode(self) -> bytes:
        body = [
            field_varint(1, self.write_quorum),
            field_varint(2, self.ensemble_size),
            field_varint(3, self.length),
            field_varint(4, self.last_entry_id),
            field_varint(5, self.state),
        ]
        for seg in self.segments:
            inner = b"".join(field_string(1, b) for b in seg.ensemble) + field_varint(2, seg.first_entry_id)
            body.append(field_bytes(6, inner))
        body.append(field_varint(7, self.digest_type))
        body.append(field_bytes(8, self.password))
        body.append(field_varint(9, self.ack_quorum))
        if self.ctime is not None:
            body.append(field_varint(10, self.ctime))
        for k, v in self.custom.items():
            body.append(field_bytes(11, field_string(1, k) + field_bytes(2, v)))
        body.append(field_varint(12, self.ctoken))
        body.append(self.unknown)
        msg = b"".join(body)
        return FORMAT_HEADER_V3 + encode_varint(len(msg)) + msg

    @classmethod
    def decode(cls, data: bytes) -> LedgerMetadata:
        if not data.startswith(_HEADER_PREFIX):
            raise MetadataFormatError("ledger metadata without the BookieMetadataFormatVersion header")
        nl = data.find(b"\n")
        version = data[len(_HEADER_PREFIX):nl]
        if version != b"3":
            raise MetadataFormatError(f"ledger metadata format {version.decode(errors='replace')} "
                                      "(only format 3, written by BookKeeper >= 4.9, is supported)")
        try:
            size, pos = decode_varint(data, nl + 1)
            end = pos + size
            if end > len(data):
                raise ProtobufError("truncated ledger metadata")
            return cls._decode_message(data, pos, end)
        except ProtobufError as e:
            raise MetadataFormatError(f"damaged ledger metadata: {e}") from None

    @classmethod
    def _decode_message(cls, buf: bytes, start: int, end: int) -> LedgerMetadata:
        md = cls(ensemble_size=0, write_quorum=0, ack_quorum=0, segments=[])
        ack = None
        unknown = bytearray()
        for number, wire, value, fs, fe in iter_fields(buf, start, end):
            if wire == VARINT and number in (1, 2, 3, 4, 5, 7, 9, 10, 12):
                v = as_int64(value)
                if number == 1:
                    md.write_quorum = v
                elif number == 2:
                    md.ensemble_size = v
                elif number == 3:
                    md.length = v
                elif number == 4:
                    md.last_entry_id = v
                elif number == 5:
                    md.state = v
                elif number == 7:
                    md.digest_type = v
                elif number == 9:
                    ack = v
                elif number == 10:
                    md.ctime = v
                else:
                    md.ctoken = v
            elif wire == LEN and number == 6:
                members: list[str] = []
                first = 0
                for n, w, v, _, e in iter_fields(buf, value, fe):
                    if n == 1 and w == LEN:
                        members.append(buf[v:e].decode())
                    elif n == 2 and w == VARINT:
                        first = as_int64(v)
                md.segments.append(Segment(first, members))
            elif wire == LEN and number == 8:
                md.password = bytes(buf[value:fe])
            elif wire == LEN and number == 11:
                key, val = "", b""
                for n, w, v, _, e in iter_fields(buf, value, fe):
                    if n == 1 and w == LEN:
                        key = buf[v:e].decode()
                    elif n == 2 and w == LEN:
                        val = bytes(buf[v:e])
                md.custom[key] = val
            else:
                unknown += buf[fs:fe]
        md.ack_quorum = md.write_quorum if ack is None else ack  # absent: readers use Qw (BookKeeper)
        md.unknown = bytes(unknown)
        if not md.segments or md.ensemble_size <= 0 or md.write_quorum <= 0:
            raise ProtobufError("ledger metadata without ensembles or quorum sizes")
        return md


def new_ctoken() -> int:
    """A random creator token (a positive int64), as BookKeeper sets to recognise its own create."""
    return int.from_bytes(os.urandom(8), "big") & ((1 << 63) - 1)


def decode_bookie_address(bookie_id: str, data: bytes | None) -> tuple[str, int]:
    """(host, port) of a bookie: the first ``bookie-rpc`` endpoint of its BookieServiceInfoFormat
    registration (endpoints=6 {id=1, port=2, host=3, protocol=4}), else its id read as host:port."""
    if data:
        try:
            for number, wire, value, _, fe in iter_fields(data):
                if number != 6 or wire != LEN:
                    continue
                host, port, proto = "", 0, ""
                for n, w, v, _, e in iter_fields(data, value, fe):
                    if n == 2 and w == VARINT:
                        port = v
                    elif n == 3 and w == LEN:
                        host = data[v:e].decode()
                    elif n == 4 and w == LEN:
                        proto = data[v:e].decode()
                if host and port and proto in ("", "bookie-rpc"):
                    return host, port
        except (ProtobufError, UnicodeDecodeError):
            pass
    name, _, digits = bookie_id.rpartition(":")
    if not name or not digits.isdigit():
        raise StorageError(f"cannot tell the address of bookie {bookie_id!r}")
    return name, int(digits)
