"""Record-level work of log compaction on magic-v2 batches (sans-IO: bytes in, bytes out).

Kafka's cleaner semantics (MemoryRecords.filterTo), which kop/offset/compaction.py drives:

* A record is kept when it has a key, is the latest record of that key, and is not an expired tombstone.
  Keyless records are dropped (Kafka counts them as invalid and drops them too; compacted topics refuse
  them at produce time, see ``has_null_key``).
* A rewritten batch keeps its base offset, partition leader epoch, attributes, producer id/epoch/base
  sequence AND its lastOffsetDelta: the batch still spans [base, base + lastOffsetDelta], so the entry's
  ``index`` (offset of the last record) is unchanged, a consumer's next fetch offset stays correct, and
  an idempotent producer's last sequence (baseSequence + lastOffsetDelta) survives compaction. Each
  surviving record keeps its offset delta, so offsets are never renumbered; compaction leaves gaps.
* Tombstones (null value) get a delete horizon the first time a cleaning pass keeps them (KIP-534):
  attribute bit 6 is set and baseTimestamp becomes ``now + delete.retention.ms``; record timestamp deltas
  are rebased so every record keeps its absolute timestamp. A later pass drops the batch's tombstones once
  ``now >= horizon``. Using the cleaning time, not the record timestamp, means a producer's clock cannot
  make a tombstone vanish before readers had delete.retention.ms to see it.
* Batches whose records are all kept (and that need no horizon) are kept byte for byte; a rewritten batch
  is recompressed with its original codec and gets a new CRC. Control batches are kept unchanged.

Records are sliced out of the decompressed payload rather than decoded and re-encoded: a surviving record
is copied as is, only its timestamp delta is rewritten when a horizon rebases the batch.
"""

from __future__ import annotations

import struct
from collections.abc import Callable
from typing import NamedTuple

from .compression import BytesLike, CompressionError, compress, decompress
from .records import (
    BATCH_HEADER,
    COMPRESSION_MASK,
    CONTROL_BIT,
    DELETE_HORIZON_BIT,
    HEADER_SIZE,
    MIN_BATCH_LENGTH,
    TIMESTAMP_TYPE_BIT,
    BatchHeader,
    CorruptRecordError,
    _write_varint,
    crc32c,
    parse_batch_header,
)

_CRC = struct.Struct(">I")


class RecordSpan(NamedTuple):
    """Where one record sits in a batch's decompressed payload, and what compaction needs of it."""

    offset_delta: int
    timestamp_delta: int
    key: bytes | None
    is_tombstone: bool  # null value
    start: int  # the record's length varint
    rest: int  # just after the timestamp delta (offset delta, key, value, headers follow)
    stop: int  # end of the record


def _varint(data: bytes, pos: int) -> tuple[int, int]:
    """Zig-zag varint at pos -> (value, next pos); IndexError when truncated."""
    b = data[pos]
    if b < 0x80:
        return (b >> 1) ^ -(b & 1), pos + 1
    raw = b & 0x7F
    shift = 7
    pos += 1
    while True:
        b = data[pos]
        pos += 1
        raw |= (b & 0x7F) << shift
        if b < 0x80:
            return (raw >> 1) ^ -(raw & 1), pos
        shift += 7
        if shift > 63:
            raise CorruptRecordError("varint longer than 10 bytes")


def payload_of(batch: BytesLike) -> tuple[BatchHeader, bytes]:
    """(header, decompressed records payload) of one batch."""
    view = batch if type(batch) is memoryview else memoryview(batch)
    if len(view) < HEADER_SIZE:
        raise CorruptRecordError("truncated record batch header")
    header = parse_batch_header(view)
    end = 12 + header.batch_length
    if end > len(view) or header.batch_length < MIN_BATCH_LENGTH:
        raise CorruptRecordError("record batch length does not match its bytes")
    try:
        data = decompress(header.attributes & COMPRESSION_MASK, view[HEADER_SIZE:end])
    except CompressionError as exc:
        raise CorruptRecordError(str(exc)) from None
    return header, data


def record_spans(data: bytes, count: int) -> list[RecordSpan]:
    """Walk `count` records of a decompressed payload (headers are skipped, not parsed)."""
    out: list[RecordSpan] = []
    pos = 0
    n = len(data)
    try:
        for _ in range(count):
            start = pos
            length, pos = _varint(data, pos)
            stop = pos + length
            if length <= 0 or stop > n:
                raise CorruptRecordError("record runs past the end of the batch")
            ts_delta, pos = _varint(data, pos + 1)  # +1: the attributes byte
            rest = pos
            offset_delta, pos = _varint(data, pos)
            klen, pos = _varint(data, pos)
            if klen < 0:
                key = None
            else:
                key = data[pos:pos + klen]
                pos += klen
            vlen, pos = _varint(data, pos)
            if pos > stop or (vlen >= 0 and pos + vlen > stop):
                raise CorruptRecordError("record fields run past the record")
            out.append(RecordSpan(offset_delta, ts_delta, key, vlen < 0, start, rest, stop))
            pos = stop
    except IndexError:
        raise CorruptRecordError("record data is truncated") from None
    if pos != n:
        raise CorruptRecordError(f"{n - pos} bytes after the last of {count} records")
    return out


def has_null_key(batch: BytesLike) -> bool:
    """Whether any record of the (possibly compressed) batch has a null key: Kafka refuses such records
    for topics with cleanup.policy=compact (INVALID_RECORD, "Compacted topic cannot accept message
    without key in topic partition t-0."). Control batches carry keys of their own and are not checked.
    Raises CorruptRecordError when the records cannot be parsed."""
    header, data = payload_of(batch)
    if header.attributes & CONTROL_BIT:
        return False
    return any(span.key is None for span in record_spans(data, header.records_count))


def batch_keys(batch: BytesLike) -> tuple[BatchHeader, list[RecordSpan]]:
    """The header and record spans of one batch (compaction's key-map pass)."""
    header, data = payload_of(batch)
    return header, record_spans(data, header.records_count)


class FilterOutcome(NamedTuple):
    """What filter_batch decided for one batch."""

    batch: bytes | None  # the rewritten batch; None when `kept` says keep as is or drop
    kept: int  # records kept
    dropped: int
    tombstones_kept: int
    tombstones_dropped: int
    horizon: int | None  # the batch's delete horizon after filtering (None: it holds no tombstone)

    @property
    def unchanged(self) -> bool:
        return self.batch is None and self.kept > 0


def filter_batch(batch: BytesLike, base_offset: int, keep: Callable[[int, bytes], bool], now_ms: int,
                 delete_retention_ms: int) -> FilterOutcome:
    """Apply compaction to one batch whose first offset is `base_offset` (stored batches do not carry
    a meaningful baseOffset field: the log knows it). `keep(offset, key)` says whether the record at
    `offset` is the latest of its key (and otherwise wanted); keyless records and expired tombstones are
    dropped on top.

    Outcome: batch None and kept > 0 - keep the stored batch unchanged; batch None and kept == 0 - drop
    the whole batch; otherwise the new batch bytes (same base offset and lastOffsetDelta)."""
    view = batch if type(batch) is memoryview else memoryview(batch)
    header, data = payload_of(view)
    if header.attributes & CONTROL_BIT:
        return FilterOutcome(None, header.records_count, 0, 0, 0, None)
    spans = record_spans(data, header.records_count)
    base = base_offset
    horizon = header.base_timestamp if header.attributes & DELETE_HORIZON_BIT else None
    retain_deletes = horizon is None or now_ms < horizon
    kept: list[RecordSpan] = []
    tomb_kept = tomb_dropped = 0
    for span in spans:
        if span.key is None or not keep(base + span.offset_delta, span.key):
            continue
        if span.is_tombstone:
            if not retain_deletes:
                tomb_dropped += 1
                continue
            tomb_kept += 1
        kept.append(span)
    dropped = len(spans) - len(kept)
    if not kept:
        return FilterOutcome(None, 0, dropped, 0, tomb_dropped, None)
    new_horizon = horizon
    if tomb_kept and horizon is None:
        new_horizon = now_ms + delete_retention_ms
    if not dropped and new_horizon == horizon:
        return FilterOutcome(None, len(kept), 0, tomb_kept, 0, horizon if tomb_kept else None)
    rebuilt = rebuild_batch(header._replace(base_offset=base), data, kept, new_horizon)
    return FilterOutcome(rebuilt, len(kept), dropped, tomb_kept, tomb_dropped, new_horizon if tomb_kept else None)


def rebuild_batch(header: BatchHeader, data: bytes, kept: list[RecordSpan], horizon: int | None) -> bytes:
    """A batch holding the `kept` records of `data` (the decompressed payload described by `header`):
    base offset, lastOffsetDelta, epoch, producer fields and codec preserved; with `horizon`, the delete
    horizon bit is set and baseTimestamp = horizon, timestamp deltas rebased."""
    old_base_ts = header.base_timestamp
    attributes = header.attributes
    if horizon is not None:
        base_ts = horizon
        attributes |= DELETE_HORIZON_BIT
    else:
        base_ts = old_base_ts
    out = bytearray()
    max_ts = None
    mv = memoryview(data)
    for span in kept:
        ts = old_base_ts + span.timestamp_delta
        if max_ts is None or ts > max_ts:
            max_ts = ts
        if base_ts == old_base_ts:
            out += mv[span.start:span.stop]
        else:  # a new [length][attributes][timestamp delta] in front of the unchanged rest
            head = bytearray((data[_after_length(data, span.start)],))
            _write_varint(head, ts - base_ts)
            tail = mv[span.rest:span.stop]
            _write_varint(out, len(head) + len(tail))
            out += head
            out += tail
    if attributes & TIMESTAMP_TYPE_BIT or max_ts is None:
        max_ts = header.max_timestamp  # LogAppendTime: the broker's append time stays the batch's time
    codec = attributes & COMPRESSION_MASK
    payload = compress(codec, out) if codec else bytes(out)
    buf = bytearray(HEADER_SIZE)
    BATCH_HEADER.pack_into(
        buf, 0, header.base_offset, MIN_BATCH_LENGTH + len(payload), header.partition_leader_epoch,
        header.magic, 0, attributes, header.last_offset_delta, base_ts, max_ts, header.producer_id,
        header.producer_epoch, header.base_sequence, len(kept))
    buf += payload
    _CRC.pack_into(buf, 17, crc32c(memoryview(buf)[21:]))
    return bytes(buf)


def _after_length(data: bytes, pos: int) -> int:
    """Position just after the length varint at pos (the record's attributes byte)."""
    while data[pos] & 0x80:
        pos += 1
    return pos + 1
