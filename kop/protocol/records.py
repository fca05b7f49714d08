"""Kafka record batches (magic v2): header walk, CRC, offset stamping, and record-level codecs.

Hot path (produce/fetch): batches stay opaque bytes. ``iter_batches`` parses each 61-byte header
with one precompiled Struct, checks framing and the CRC-32C (in C, on a zero-copy slice) and yields
``(BatchHeader, memoryview)``; nothing here looks at individual records.

Rare paths (time index, compaction, coordinator, tests): ``decode_records`` decompresses and parses
records; ``build_batch`` writes a valid batch.

Layout (byte offsets): 0 baseOffset q, 8 batchLength i (bytes after this field), 12
partitionLeaderEpoch i, 16 magic b, 17 crc I, 21 attributes h, 23 lastOffsetDelta i,
27 baseTimestamp q, 35 maxTimestamp q, 43 producerId q, 51 producerEpoch h, 53 baseSequence i,
57 recordsCount i, 61 records. The CRC covers bytes 21..end, so baseOffset, batchLength and
partitionLeaderEpoch can be rewritten without recomputing it.
"""

from __future__ import annotations

import struct
import time
from collections.abc import Iterable, Iterator
from typing import Any, NamedTuple

from .compression import BytesLike, CompressionError, compress, decompress
from .errors import ErrorCode

try:
    from fastcrc.crc32 import iscsi as _crc32c_impl
except ImportError:  # pragma: no cover - fastcrc is a declared dependency
    from crc32c import crc32c as _crc32c_fallback

    _crc32c_impl = _crc32c_fallback

BATCH_HEADER = struct.Struct(">qiibIhiqqqhii")
HEADER_SIZE = BATCH_HEADER.size  # 61
#: batchLength of a batch with no records: everything after the batchLength field.
MIN_BATCH_LENGTH = HEADER_SIZE - 12  # 49
CRC_OFFSET = 17
ATTRIBUTES_OFFSET = 21
MAGIC = 2

COMPRESSION_MASK = 0x07
TIMESTAMP_TYPE_BIT = 0x08  # 1 = LogAppendTime
TRANSACTIONAL_BIT = 0x10
CONTROL_BIT = 0x20
DELETE_HORIZON_BIT = 0x40

_Q = struct.Struct(">q")
_I = struct.Struct(">i")
_CRC = struct.Struct(">I")


def crc32c(data: BytesLike) -> int:
    """CRC-32C (Castagnoli) of any bytes-like object, without copying memoryview slices."""
    return _crc32c_impl(data)


class CorruptRecordError(Exception):
    """A produce records blob that is not a valid sequence of magic-v2 batches.

    ``error`` is the Kafka error *name* to answer with (``ErrorCode[err.error]``): CORRUPT_MESSAGE
    for broken framing or CRC, INVALID_RECORD for well-formed but unacceptable batches.
    """

    def __init__(self, reason: str, error: str = "CORRUPT_MESSAGE") -> None:
        super().__init__(reason)
        self.reason = reason
        self.error = error

    @property
    def code(self) -> ErrorCode:
        return ErrorCode[self.error]


class BatchHeader(NamedTuple):
    """The 61-byte magic-v2 batch header, field by field."""

    base_offset: int
    batch_length: int
    partition_leader_epoch: int
    magic: int
    crc: int
    attributes: int
    last_offset_delta: int
    base_timestamp: int
    max_timestamp: int
    producer_id: int
    producer_epoch: int
    base_sequence: int
    records_count: int

    @property
    def first_timestamp(self) -> int:
        return self.base_timestamp

    @property
    def compression(self) -> int:
        return self.attributes & COMPRESSION_MASK

    @property
    def timestamp_type(self) -> int:
        """0 = CreateTime, 1 = LogAppendTime."""
        return (self.attributes & TIMESTAMP_TYPE_BIT) >> 3

    @property
    def is_transactional(self) -> bool:
        return bool(self.attributes & TRANSACTIONAL_BIT)

    @property
    def is_control(self) -> bool:
        return bool(self.attributes & CONTROL_BIT)

    @property
    def has_delete_horizon(self) -> bool:
        return bool(self.attributes & DELETE_HORIZON_BIT)

    @property
    def size(self) -> int:
        """Total bytes of the batch, including the offset and length fields."""
        return self.batch_length + 12

    @property
    def last_offset(self) -> int:
        return self.base_offset + self.last_offset_delta


def parse_batch_header(batch: BytesLike, offset: int = 0) -> BatchHeader:
    """Parse the header at ``offset`` without any validation (struct.error if too short)."""
    return tuple.__new__(BatchHeader, BATCH_HEADER.unpack_from(batch, offset))


def iter_batches(blob: BytesLike, *, check_crc: bool = True, fresh: bool = True
                 ) -> Iterator[tuple[BatchHeader, memoryview]]:
    """Walk a records blob batch by batch, yielding ``(header, zero-copy slice of the batch)``.

    Raises CorruptRecordError on: a truncated batch, batchLength < 49, magic != 2 (message
    formats v0/v1 are not supported), a CRC-32C mismatch, an unknown compression codec, a
    recordsCount <= 0, or (``fresh=True``, i.e. a producer's batch) lastOffsetDelta !=
    recordsCount - 1. Slices of a writable buffer are writable, so offsets can be stamped in place.
    """
    view = blob if type(blob) is memoryview else memoryview(blob)
    end = len(view)
    pos = 0
    unpack = BATCH_HEADER.unpack_from
    new = tuple.__new__
    while pos < end:
        if end - pos < HEADER_SIZE:
            raise CorruptRecordError(f"truncated record batch: {end - pos} bytes left, header needs 61")
        header = new(BatchHeader, unpack(view, pos))
        if header[3] != MAGIC:
            raise CorruptRecordError(
                f"record batch magic {header.magic} is not supported (only message format v2)",
                "INVALID_RECORD")
        length = header[1]
        if length < MIN_BATCH_LENGTH:
            raise CorruptRecordError(f"record batch length {length} is below the minimum {MIN_BATCH_LENGTH}")
        stop = pos + 12 + length
        if stop > end:
            raise CorruptRecordError(f"truncated record batch: needs {12 + length} bytes, {end - pos} left")
        batch = view[pos:stop]
        if check_crc:
            actual = _crc32c_impl(view[pos + ATTRIBUTES_OFFSET:stop])
            if actual != header[4]:
                raise CorruptRecordError(
                    f"record batch CRC mismatch: stored {header.crc:#010x}, computed {actual:#010x}")
        if header[5] & COMPRESSION_MASK > 4:
            raise CorruptRecordError(f"unknown compression codec {header.attributes & COMPRESSION_MASK}")
        count = header[12]
        if count <= 0:
            raise CorruptRecordError(f"record batch has {count} records", "INVALID_RECORD")
        if fresh and header[6] != count - 1:
            raise CorruptRecordError(
                f"lastOffsetDelta {header.last_offset_delta} does not match {count} records", "INVALID_RECORD")
        yield header, batch
        pos = stop


def validate_crc(batch: BytesLike) -> bool:
    """Whether the stored CRC-32C matches bytes 21..end of the batch."""
    view = batch if type(batch) is memoryview else memoryview(batch)
    if len(view) < HEADER_SIZE:
        return False
    (stored,) = _CRC.unpack_from(view, CRC_OFFSET)
    return _crc32c_impl(view[ATTRIBUTES_OFFSET:]) == stored


def update_crc(batch: BytesLike) -> None:
    """Recompute and store the CRC after editing CRC-covered fields (attributes, timestamps, ...)."""
    view = batch if type(batch) is memoryview else memoryview(batch)
    _CRC.pack_into(view, CRC_OFFSET, _crc32c_impl(view[ATTRIBUTES_OFFSET:]))


def stamp_base_offset(batch: BytesLike, offset: int) -> None:
    """Write baseOffset (bytes 0..7) in place; the CRC does not cover it."""
    _Q.pack_into(batch, 0, offset)


def stamp_partition_leader_epoch(batch: BytesLike, epoch: int) -> None:
    """Write partitionLeaderEpoch (bytes 12..15) in place; the CRC does not cover it."""
    _I.pack_into(batch, 12, epoch)


# ---------------------------------------------------------------------------------------------
# Record level (rare paths)


class Record(NamedTuple):
    """One record as stored in a batch: deltas relative to the batch's base offset/timestamp."""

    offset_delta: int
    timestamp_delta: int
    key: bytes | None
    value: bytes | None
    headers: list[tuple[str, bytes | None]]
    attributes: int = 0


class AbsoluteRecord(NamedTuple):
    """A record with its absolute offset and timestamp (what a consumer sees)."""

    offset: int
    timestamp: int
    key: bytes | None
    value: bytes | None
    headers: list[tuple[str, bytes | None]]


def read_varint(data: Any, pos: int) -> tuple[int, int]:
    """Zig-zag varint (up to 64 bits) at ``pos``; IndexError when truncated, CorruptRecordError when longer
    than 10 bytes."""
    shift = 0
    raw = 0
    while True:
        b = data[pos]
        pos += 1
        raw |= (b & 0x7F) << shift
        if not b & 0x80:
            break
        shift += 7
        if shift > 63:
            raise CorruptRecordError("varint longer than 10 bytes")
    return (raw >> 1) ^ -(raw & 1), pos


def _write_varint(out: bytearray, value: int) -> None:
    raw = (value << 1) ^ (value >> 63)
    raw &= 0xFFFFFFFFFFFFFFFF
    while raw > 0x7F:
        out.append((raw & 0x7F) | 0x80)
        raw >>= 7
    out.append(raw)


def _read_blob(data: bytes, pos: int) -> tuple[bytes | None, int]:
    size, pos = read_varint(data, pos)
    if size < 0:
        return None, pos
    stop = pos + size
    if stop > len(data):
        raise CorruptRecordError("record field runs past the end of the batch")
    return data[pos:stop], stop


def decode_records(batch: BytesLike) -> list[Record]:
    """Decompress (if needed) and parse every record of one batch.

    Raises CorruptRecordError for malformed record data, a bad codec, or a record count that
    does not match the header.
    """
    view = batch if type(batch) is memoryview else memoryview(batch)
    if len(view) < HEADER_SIZE:
        raise CorruptRecordError("truncated record batch header")
    header = parse_batch_header(view)
    if header.magic != MAGIC:
        raise CorruptRecordError(f"record batch magic {header.magic} is not supported", "INVALID_RECORD")
    payload = view[HEADER_SIZE:12 + header.batch_length]
    try:
        data = decompress(header.compression, payload)
    except CompressionError as exc:
        raise CorruptRecordError(str(exc)) from None
    records: list[Record] = []
    pos = 0
    try:
        for _ in range(header.records_count):
            length, pos = read_varint(data, pos)
            stop = pos + length
            if length < 0 or stop > len(data):
                raise CorruptRecordError("record runs past the end of the batch")
            attributes = data[pos]
            pos += 1
            timestamp_delta, pos = read_varint(data, pos)
            offset_delta, pos = read_varint(data, pos)
            key, pos = _read_blob(data, pos)
            value, pos = _read_blob(data, pos)
            count, pos = read_varint(data, pos)
            if count < 0 or count > stop - pos:
                raise CorruptRecordError(f"record has an invalid header count {count}")
            headers: list[tuple[str, bytes | None]] = []
            for _ in range(count):
                hkey, pos = _read_blob(data, pos)
                if hkey is None:
                    raise CorruptRecordError("record header key is null")
                hvalue, pos = _read_blob(data, pos)
                headers.append((hkey.decode("utf-8"), hvalue))
            if pos != stop:
                raise CorruptRecordError("record length does not match its fields")
            records.append(Record(offset_delta, timestamp_delta, key, value, headers, attributes))
    except IndexError:
        raise CorruptRecordError("record data is truncated") from None
    except UnicodeDecodeError:
        raise CorruptRecordError("record header key is not UTF-8") from None
    if pos != len(data):
        raise CorruptRecordError(f"{len(data) - pos} bytes after the last of {header.records_count} records")
    return records


def decode_records_absolute(batch: BytesLike) -> list[AbsoluteRecord]:
    """Records with absolute offsets and timestamps (LogAppendTime batches use maxTimestamp)."""
    view = batch if type(batch) is memoryview else memoryview(batch)
    header = parse_batch_header(view)
    log_append = header.timestamp_type == 1
    return [
        AbsoluteRecord(
            header.base_offset + r.offset_delta,
            header.max_timestamp if log_append else header.base_timestamp + r.timestamp_delta,
            r.key, r.value, r.headers)
        for r in decode_records(view)
    ]


def control_record_type(key: bytes | None) -> int:
    """The type of a control record from its key (version int16, type int16): 0 abort, 1 commit."""
    if key is None or len(key) < 4:
        raise CorruptRecordError("control record key is too short")
    kind: int = struct.unpack_from(">hh", key)[1]
    return kind


class NewRecord(NamedTuple):
    """A record to write with ``build_batch``; timestamp None means "now"."""

    key: bytes | None
    value: bytes | None
    headers: Iterable[tuple[str, bytes | None]] = ()
    timestamp: int | None = None


def _encode_record(out: bytearray, offset_delta: int, timestamp_delta: int, rec: NewRecord) -> None:
    body = bytearray(b"\x00")  # attributes: unused, always 0
    _write_varint(body, timestamp_delta)
    _write_varint(body, offset_delta)
    for blob in (rec.key, rec.value):
        if blob is None:
            _write_varint(body, -1)
        else:
            _write_varint(body, len(blob))
            body += blob
    headers = list(rec.headers)
    _write_varint(body, len(headers))
    for hkey, hvalue in headers:
        raw = hkey.encode("utf-8")
        _write_varint(body, len(raw))
        body += raw
        if hvalue is None:
            _write_varint(body, -1)
        else:
            _write_varint(body, len(hvalue))
            body += hvalue
    _write_varint(out, len(body))
    out += body


def build_batch(records: Iterable[Any], *, base_offset: int = 0, compression: int = 0,
                producer_id: int = -1, producer_epoch: int = -1, base_sequence: int = -1,
                timestamp_type: int = 0, is_transactional: bool = False, is_control: bool = False,
                partition_leader_epoch: int = -1) -> bytes:
    """Build one valid magic-v2 batch (varint records, optional compression, CRC-32C).

    ``records`` are NewRecord values or plain tuples ``(key, value[, headers[, timestamp]])``.
    Offsets are consecutive from ``base_offset``; base/max timestamps come from the records.
    """
    items = [r if isinstance(r, NewRecord) else NewRecord(*r) for r in records]
    if not items:
        raise ValueError("a record batch needs at least one record")
    now = int(time.time() * 1000)
    stamps = [now if r.timestamp is None else r.timestamp for r in items]
    base_ts = stamps[0]
    body = bytearray()
    for i, (rec, ts) in enumerate(zip(items, stamps, strict=True)):
        _encode_record(body, i, ts - base_ts, rec)
    payload = compress(compression, body) if compression else bytes(body)
    attributes = (compression & COMPRESSION_MASK) | (TIMESTAMP_TYPE_BIT if timestamp_type else 0)
    if is_transactional:
        attributes |= TRANSACTIONAL_BIT
    if is_control:
        attributes |= CONTROL_BIT
    out = bytearray(HEADER_SIZE)
    BATCH_HEADER.pack_into(
        out, 0, base_offset, MIN_BATCH_LENGTH + len(payload), partition_leader_epoch, MAGIC, 0,
        attributes, len(items) - 1, base_ts, max(stamps), producer_id, producer_epoch, base_sequence,
        len(items))
    out += payload
    update_crc(out)
    return bytes(out)
