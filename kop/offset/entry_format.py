"""The bytes of one stored entry: broker entry metadata, then KoP's "kafka" entry format.

Layout (Pulsar's broker entry metadata and KoP's kafka entry format, docs/architecture.md; big-endian lengths)::

    u16 0x0e02 · u32 size · BrokerEntryMetadata{broker_timestamp=1 uint64, index=2 uint64}
    [u16 0x0e01 · u32 crc32c]                    (optional; Pulsar clients may add it, we never do)
    u32 metadataSize · MessageMetadata{producer_name=1 "" (a Pulsar producer's name), sequence_id=2 0, publish_time=3 ms,
                                       properties=4 [KeyValue{key=1 "entry.format", value=2 "kafka"}],
                                       num_messages_in_batch=11 N}
    the Kafka record batch, exactly as the producer sent it

`producer_name` is "" for every writer but a Pulsar producer, whose SEND is appended as a ``NamedEntry`` (issue #22):
Pulsar keeps the producer's name per entry and its consumers read it back (``producer_name_of``). Such an entry's
`sequence_id` is the SEND's highest sequence id, as Pulsar stores it: a broker that takes the partition over
replays the entries after the de-duplication snapshot to learn each producer's last one
(``producer_and_sequence_of``, kop/pulsar/dedup.py).

`index` is the offset of the batch's LAST record (Pulsar's AppendIndexMetadataInterceptor), so
base offset = index - last_offset_delta. These are the bytes a KoP broker with entryFormat=kafka and the
broker-entry-metadata interceptors writes, so the same ledgers read back on either side.

Encoding is on the produce hot path: the constant parts are precomputed byte strings and the two
timestamp varints are computed once per millisecond. Parsing is on the fetch hot path: it reads two
varints and returns the batch as a memoryview slice (no copy).
"""

from __future__ import annotations

import struct
from dataclasses import dataclass, field
from typing import NamedTuple

from kop.protocol.records import TIMESTAMP_TYPE_BIT
from kop.storage.protobuf import (
    LEN,
    VARINT,
    ProtobufError,
    decode_varint,
    encode_varint,
    field_string,
    iter_fields,
)

Buffer = bytes | bytearray | memoryview

BROKER_ENTRY_METADATA_MAGIC = 0x0E02
CHECKSUM_MAGIC = 0x0E01
ENTRY_FORMAT_KEY = "entry.format"
KAFKA_ENTRY_FORMAT = "kafka"

_U32 = struct.Struct(">I")
_BEM_HEAD = b"\x0e\x02"
# MessageMetadata parts: producer_name="" (1), sequence_id=0 (2) | publish_time (3) | properties (4), N (11)
_MD_PREFIX = b"\x0a\x00\x10\x00\x18"
_KV_FORMAT = field_string(1, ENTRY_FORMAT_KEY) + field_string(2, KAFKA_ENTRY_FORMAT)
_MD_PROPERTIES = b"\x22" + encode_varint(len(_KV_FORMAT)) + _KV_FORMAT
_MD_NUM_TAG = b"\x58"  # field 11, varint
_SMALL = [bytes((i,)) for i in range(128)]


class EntryFormatError(ValueError):
    """An entry that is not broker entry metadata + kafka-format payload."""


def _varint(value: int) -> bytes:
    if value < 128:
        return _SMALL[value]
    return encode_varint(value)


class NamedEntry(NamedTuple):
    """A record batch appended with its producer's name (a Pulsar SEND, UTF-8) and sequence id (its varint):
    what the managed ledger hands the index interceptor (kop/offset/interceptor.py), which writes both into the
    entry's MessageMetadata and stores the batch alone. A tuple of buffers, so that it is the managed ledger's
    `Sequence[Buffer]` to the type checker; its size is counted once the interceptor has unwrapped it."""

    batch: Buffer
    producer_name: bytes
    sequence_id: bytes = b"\x00"


class EntryHeaderEncoder:
    """Builds the bytes that precede the record batch. One per partition log (it caches the varint of
    the current millisecond, which both timestamps share)."""

    __slots__ = ("_ms", "_ms_varint")

    def __init__(self) -> None:
        self._ms = -1
        self._ms_varint = b""

    def encode(self, broker_timestamp: int, index: int, num_messages: int, producer_name: bytes = b"",
               sequence_id: bytes = b"\x00") -> bytes:
        if broker_timestamp != self._ms:
            self._ms = broker_timestamp
            self._ms_varint = encode_varint(broker_timestamp)
        ts = self._ms_varint
        bem = b"\x08" + ts + b"\x10" + _varint(index)
        prefix = _MD_PREFIX if not producer_name else b"".join(
            (b"\x0a", _varint(len(producer_name)), producer_name, b"\x10", sequence_id, b"\x18"))
        md = prefix + ts + _MD_PROPERTIES + _MD_NUM_TAG + _varint(num_messages)
        return b"".join((_BEM_HEAD, _U32.pack(len(bem)), bem, _U32.pack(len(md)), md))


def encode_entry_header(broker_timestamp: int, index: int, num_messages: int,
                        publish_time: int | None = None) -> bytes:
    """The header for one batch (a convenience for tools and tests; the log uses EntryHeaderEncoder)."""
    if publish_time is None or publish_time == broker_timestamp:
        return EntryHeaderEncoder().encode(broker_timestamp, index, num_messages)
    bem = b"\x08" + encode_varint(broker_timestamp) + b"\x10" + encode_varint(index)
    md = _MD_PREFIX + encode_varint(publish_time) + _MD_PROPERTIES + _MD_NUM_TAG + encode_varint(num_messages)
    return b"".join((_BEM_HEAD, _U32.pack(len(bem)), bem, _U32.pack(len(md)), md))


def _skip_field(data: Buffer, pos: int, end: int) -> int:
    for _number, _wire, _value, _start, field_end in iter_fields(data, pos, end):
        return field_end
    return end


def parse_entry(data: Buffer) -> tuple[int, int, int]:
    """(broker_timestamp, index, offset of the record batch in `data`) - the hot-path parse.
    broker_timestamp/index are -1 when the entry carries no broker entry metadata (or lacks the field).
    Raises EntryFormatError when the entry is cut short before the batch starts."""
    try:
        ts = index = -1
        pos = 0
        if data[0] == 0x0E and data[1] == 0x02:
            end = 6 + _U32.unpack_from(data, 2)[0]
            pos = 6
            while pos < end:
                key = data[pos]
                if key == 0x08:
                    ts, pos = decode_varint(data, pos + 1)
                elif key == 0x10:
                    index, pos = decode_varint(data, pos + 1)
                else:  # a field added by a newer writer: skip it
                    pos = _skip_field(data, pos, end)
            pos = end
        if data[pos] == 0x0E and data[pos + 1] == 0x01:
            pos += 6
        start = pos + 4 + _U32.unpack_from(data, pos)[0]
    except (IndexError, struct.error, ProtobufError) as e:
        raise EntryFormatError(f"entry headers are truncated or malformed: {e}") from None
    if start > len(data):
        raise EntryFormatError("entry headers are truncated")
    return ts, index, start


def index_and_start(data: Buffer) -> tuple[int, int]:
    """(index, offset of the record batch in `data`): parse_entry without the broker timestamp, for the
    fetch path, which needs only these two per batch. The layout every KoP writer produces (broker entry
    metadata holding field 1 then field 2, both varints, and no checksum) is read from a copy of its few
    header bytes, the index varint backwards from its end - the generic varint decoder was most of a small
    batch's read cost in a profile (issue 27). Anything else goes through parse_entry, which also raises
    its EntryFormatError for a truncated or malformed entry."""
    try:
        if data[0] == 0x0E and data[1] == 0x02:
            end = 6 + _U32.unpack_from(data, 2)[0]
            h = bytes(data[6 : end + 2])  # the metadata's fields, then what follows them (checksum magic?)
            i = end - 7  # the last byte of the metadata: the end of the index varint
            if h[0] == 0x08 and h[i] < 0x80 and not (h[i + 1] == 0x0E and h[i + 2] == 0x01):
                index = h[i]
                i -= 1
                while h[i] & 0x80:
                    index = (index << 7) | (h[i] & 0x7F)
                    i -= 1
                # h[i] must be field 2's tag, right after field 1's varint (all continuation bytes but its last)
                if h[i] == 0x10 and i >= 2 and h[i - 1] < 0x80 and (i < 3 or min(h[1 : i - 1]) >= 0x80):
                    start = end + 4 + _U32.unpack_from(data, end)[0]
                    if start <= len(data):
                        return index, start
    except (IndexError, struct.error):
        pass  # parse_entry says what is wrong
    _, index, start = parse_entry(data)
    return index, start


def producer_and_sequence_of(data: Buffer) -> tuple[str, int]:
    """(producer name, sequence id) of a stored entry's MessageMetadata; ("", -1) for an entry without a producer
    name (every writer but a Pulsar producer)."""
    name = producer_name_of(data)
    if not name:
        return "", -1
    try:
        pos = 0
        if data[0] == 0x0E and data[1] == 0x02:
            pos = 6 + _U32.unpack_from(data, 2)[0]
        if data[pos] == 0x0E and data[pos + 1] == 0x01:
            pos += 6
        start = pos + 4
        end = start + _U32.unpack_from(data, pos)[0]
        for number, wire, value, _fs, _fe in iter_fields(data, start, end):
            if number == 2 and wire == VARINT:
                return name, value
    except (IndexError, struct.error, ProtobufError):
        pass
    return name, -1


def producer_name_of(data: Buffer) -> str:
    """The producer name a stored entry's MessageMetadata carries ("" for none: every writer but a Pulsar producer).
    Reads the entry's headers only (the name is their MessageMetadata's first field)."""
    try:
        pos = 0
        if data[0] == 0x0E and data[1] == 0x02:
            pos = 6 + _U32.unpack_from(data, 2)[0]
        if data[pos] == 0x0E and data[pos + 1] == 0x01:
            pos += 6
        pos += 4
        if data[pos] != 0x0A or data[pos + 1] == 0:
            return ""
        n, pos = decode_varint(data, pos + 1)
        return bytes(data[pos:pos + n]).decode("utf-8", "replace")
    except (IndexError, struct.error, ProtobufError):
        return ""


# Record batch header fields read without decoding the batch (byte offsets within the batch).
BATCH_TAIL = struct.Struct(">hiqq")  # attributes, lastOffsetDelta, baseTimestamp, maxTimestamp at byte 21
LAST_OFFSET_DELTA = struct.Struct(">i")  # lastOffsetDelta at byte 23


@dataclass(frozen=True, slots=True)
class EntryMeta:
    """What offset and time searches need from one entry's headers."""

    index: int  # offset of the last record
    last_offset_delta: int
    timestamp: int  # batch max timestamp; the broker timestamp for LogAppendTime batches
    broker_timestamp: int

    @property
    def base_offset(self) -> int:
        return self.index - self.last_offset_delta


def entry_meta(data: Buffer) -> EntryMeta:
    """The EntryMeta of a stored entry (a prefix holding the headers and the batch header is enough)."""
    ts, index, start = parse_entry(data)
    if index < 0:
        raise EntryFormatError("entry has no broker entry metadata index")
    try:
        attributes, lod, _, max_ts = BATCH_TAIL.unpack_from(data, start + 21)
    except struct.error:
        raise EntryFormatError("record batch header is truncated") from None
    return EntryMeta(index, lod, ts if attributes & TIMESTAMP_TYPE_BIT else max_ts, ts)


@dataclass(slots=True)
class MessageMetadata:
    """The fields of Pulsar's MessageMetadata that the kafka entry format uses (tools, tests)."""

    producer_name: str = ""
    sequence_id: int = 0
    publish_time: int = 0
    properties: dict[str, str] = field(default_factory=dict)
    num_messages_in_batch: int | None = None

    @property
    def entry_format(self) -> str | None:
        return self.properties.get(ENTRY_FORMAT_KEY)


@dataclass(slots=True)
class ParsedEntry:
    broker_timestamp: int | None
    index: int | None
    metadata: MessageMetadata
    batch: memoryview


def parse_entry_full(data: Buffer) -> ParsedEntry:
    """Every header field, for tools and tests (slower than parse_entry)."""
    mv = memoryview(data)
    ts, index, start = parse_entry(mv)
    pos = 0
    if mv[0] == 0x0E and mv[1] == 0x02:
        pos = 6 + _U32.unpack_from(mv, 2)[0]
    if mv[pos] == 0x0E and mv[pos + 1] == 0x01:
        pos += 6
    md = MessageMetadata()
    for number, wire, value, _, end in iter_fields(mv, pos + 4, start):
        if number == 1 and wire == LEN:
            md.producer_name = bytes(mv[value:end]).decode()
        elif number == 2 and wire == VARINT:
            md.sequence_id = value
        elif number == 3 and wire == VARINT:
            md.publish_time = value
        elif number == 4 and wire == LEN:
            key = val = ""
            for n, w, v, _, e in iter_fields(mv, value, end):
                if n == 1 and w == LEN:
                    key = bytes(mv[v:e]).decode()
                elif n == 2 and w == LEN:
                    val = bytes(mv[v:e]).decode()
            md.properties[key] = val
        elif number == 11 and wire == VARINT:
            md.num_messages_in_batch = value
    return ParsedEntry(None if ts < 0 else ts, None if index < 0 else index, md, mv[start:])
