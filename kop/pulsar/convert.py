"""Kafka record batches <-> Pulsar messages, with KoP's field mapping (seed 004, storage.md §8).

Kafka -> Pulsar (``kafka_to_pulsar``): one Kafka batch becomes one Pulsar *batch* entry with one
SingleMessageMetadata per record, so a Kafka batch of N records is N Pulsar messages sharing one
message id (ledger, entry) and told apart by batch index, and a Pulsar consumer's permits, acks and
batch indexes count the same N:

    key        -> partition_key and ordering_key (bytes); with an ORDERING_KEY_HEADER, that is the ordering key
    timestamp  -> event_time (per message) and publish_time (the entry's: the first record's)
    headers    -> properties (values as UTF-8 text)
    null value -> null_value = true, empty payload
    a DELIVER_AT_HEADER -> the entry's deliver_at_time (the first record's; the header is not a property)

Pulsar -> Kafka (``pulsar_to_kafka``): an entry of N messages (batched or not) becomes one Kafka batch
of N records at offsets base..base+N-1:

    partition_key (base64-decoded when flagged), else ordering_key    -> key
    an ordering_key that is not the key                               -> ORDERING_KEY_HEADER
    event_time if set, else publish_time                              -> timestamp
    properties                                                        -> headers
    null_value                                                        -> null value
    deliver_at_time (the entry's)                                     -> DELIVER_AT_HEADER on every record

and for batched messages only the SingleMessageMetadata's own fields count (a message without an event time
takes the entry's publish time). KoP reads only the entry-level key, event time and properties of a batch,
which Pulsar clients copy from the batch's *first* message (Java's BatchMessageContainerImpl, the C++
client's batch container): read that way, a keyless message batched after a keyed one gets the other's key
(seen with pulsar-client against the handler), so we never fall back to the entry's fields for them.

Partition key and ordering key (issue #22): Pulsar keeps them apart and its consumers read each; a Kafka record has
one key. The key is the partition key (what Pulsar calls a message's key, routes and compacts by), and an ordering
key that differs from it travels in the record header ``pulsar.ordering_key`` - visible to Kafka consumers, only on
records whose two keys differ, never a Pulsar property. A message with only one of the two keys comes back with it
as both (docs/pulsar.md says why). The producer name is not in the batch: the stored entry keeps it
(kop/offset/entry_format.py NamedEntry) and ``kafka_to_pulsar(producer_name=...)`` puts it back.

Where we differ from KoP, and why:
- A key that is valid UTF-8 goes into partition_key as that text (partition_key_b64_encoded unset);
  only other keys are base64-encoded with the flag. KoP always base64-encodes, which makes
  ``msg.partition_key()`` in the Python/C++ client return base64 text for ordinary string keys. Both
  forms come back to the same Kafka key bytes.
- The entry-level ordering/partition key is set only when every record of the batch has the same key
  (KoP copies the first record's): it is what Key_Shared dispatch hashes, and a key copied from one
  record would come back as the key of the batch's keyless records.
- Header values that are not UTF-8 are decoded with replacement characters (Pulsar properties are
  strings; KoP does the same lossy decode); a null header value becomes "".
- Kafka control batches (transaction markers) have no Pulsar message: ``kafka_to_pulsar`` returns
  None and the handler skips the entry (their offsets still count, as in Kafka). Records of Kafka
  transactions convert like any others (the producer id/epoch as the Pulsar txnid); what a Pulsar
  consumer is sent is decided by the dispatcher (kop/pulsar/subscription.py): only batches below the
  partition's last stable offset, never those of aborted transactions.

Confluent's 5-byte prefix (issue #25; docs/pulsar.md "Schema ids"): a Kafka record written by a Confluent
serializer starts with the magic byte 0 and its schema's global id (big-endian int32); a Pulsar message has no
such prefix, its entry names the writer schema by version (MessageMetadata.schema_version). The conversion turns
one into the other when the caller knows the topic's ids (kop/schemas/api.py ``TopicSchemaIds``):
- ``pulsar_to_kafka(..., schema_id=N)`` writes 0x00 + N before every non-null value (the producer's version has
  Confluent id N), so a Kafka consumer's Confluent deserializer reads a Pulsar producer's messages;
- ``kafka_to_pulsar(..., schema_ids={id: version})`` removes the 5 bytes from every value that starts with 0x00 +
  an id of the map and sets the entry's schema_version to the version of the *first* such record. A batch whose
  records name different ids (a producer that changed schema within one batch) still goes out as one entry: every
  known prefix is removed and the entry names the first record's version, so the records of the other versions
  are decoded with that one's writer schema. Values that do not start with 0x00 + a known id go out as stored;
  ids (1 .. 2^31 - 1) the map lacks are reported in ``PulsarEntry.unknown_ids`` (at most ``MAX_UNKNOWN_IDS``
  distinct ones) so that the caller can look them up and convert again. With ``schema_ids=None`` nothing is read.

Encrypted messages and chunks (issue #22): an entry whose payload the broker must not open (``opaque.is_opaque``)
is stored as one Kafka record holding the payload and the entry's metadata, and comes back unchanged
(kop/pulsar/opaque.py); ``pulsar_to_kafka`` and ``kafka_to_pulsar`` hand such entries there first.

Cost: the conversion is per record, both ways on a flat loop that reads and writes the bytes itself (no decoded
Record or protobuf object per message; protobuf objects only for the entry's metadata, and for entries the fast
paths leave to the general code: non-batched messages, unknown fields). Those two loops run in C
(kop/pulsar/_native.c, built by ``pip install -e .``/setup.py) when the extension is there; their Python versions
here (``_records_to_batch_py``, ``_batch_to_records_py``) are the reference the C output is tested against byte for
byte, and what runs when the extension was not built (one log line says so) or declines an entry (anything
malformed or unusual: the Python path then converts it or raises the precise error). docs/pulsar.md has the
measured microseconds per message each way, docs/benchmarks.md what it costs the broker per MB.
"""

from __future__ import annotations

import base64
import binascii
import logging
import struct
import time
from typing import TYPE_CHECKING, Any, NamedTuple, Protocol

from kop.protocol import compression as kafka_compression
from kop.protocol.records import (
    BATCH_HEADER,
    COMPRESSION_MASK,
    HEADER_SIZE,
    MAGIC,
    MIN_BATCH_LENGTH,
    parse_batch_header,
    update_crc,
)

from .codec import batch as pbatch
from .codec.commands import pb
from .codec.framing import DEFAULT_MAX_MESSAGE_SIZE
from .opaque import entry_of, is_opaque, to_kafka

if TYPE_CHECKING:
    from _typeshed import ReadableBuffer


# (Pulsar batch payload, the first record's key, whether every record has it, the schema version of the first
# record whose Confluent prefix was removed (-1: none), ids of prefixes the map lacked)
Converted = tuple[bytes, bytes | None, bool, int, tuple[int, ...]]
MAX_UNKNOWN_IDS = 16  # distinct unknown ids reported per batch: garbage values cannot make a long list


class _NativeLoops(Protocol):
    """kop/pulsar/_native.c (typed in _native.pyi): each loop returns None when it declines a batch."""

    def records_to_batch(self, data: ReadableBuffer, count: int, fixed_ts: int | None, base_ts: int, base_seq: int,
                         ids: dict[int, int] | None = None, /) -> Converted | None: ...

    def batch_to_records(self, data: ReadableBuffer, count: int, publish_time: int, prefix: bytes | None = None,
                         /) -> tuple[bytes, int, int, int] | None: ...


_native: _NativeLoops | None
try:
    from . import _native as _built

    _native = _built
except ImportError as _exc:  # not built (no compiler at install, or a checkout without build_ext --inplace)
    _native = None
    logging.getLogger(__name__).warning(
        "kop.pulsar._native is not built (%s): the Kafka <-> Pulsar conversion runs in Python (several times the "
        "CPU per message); `pip install -e .` builds it", _exc)

__all__ = ["PulsarEntry", "ConversionError", "kafka_to_pulsar", "pulsar_to_kafka", "key_of", "unbatched",
           "unconverted_to_kafka",
           "confluent_prefix", "ORDERING_KEY_HEADER", "DELIVER_AT_HEADER"]


class ConversionError(ValueError):
    """An entry or batch that cannot be converted (corrupt, or over the size limit)."""


class PulsarEntry(NamedTuple):
    """A Pulsar entry built from a Kafka batch: metadata + (possibly compressed) batch payload.
    ``framing.encode_headers_and_payload(entry.metadata, entry.payload)`` gives its wire/stored bytes."""

    metadata: pb.MessageMetadata
    payload: bytes
    num_messages: int
    unknown_ids: tuple[int, ...] = ()  # Confluent ids in value prefixes that ``schema_ids`` did not have
    opaque: bool = False  # stored as sent (kop/pulsar/opaque.py): metadata and payload go out unchanged


# ---- Kafka -> Pulsar ---------------------------------------------------------------------------------

# A Pulsar message's ordering key, in the Kafka record of a message whose ordering key is not its key (issue #22):
# the key is the partition key, this header the ordering key (a null value: none). Read back from any record, so a
# Kafka producer may set it too; never a Pulsar property.
ORDERING_KEY_HEADER = "pulsar.ordering_key"
ORDERING_KEY_HEADER_BYTES = ORDERING_KEY_HEADER.encode("ascii")
# A Pulsar entry's deliver_at_time (delayed delivery, issue #22), in every Kafka record of the entry: decimal epoch
# milliseconds. Kafka consumers see it (Kafka has no delay: they get the record at once); read back into the entry's
# deliver_at_time when the batch's first record has it (a Kafka producer may set it too), then never a property.
DELIVER_AT_HEADER = "pulsar.deliver_at"
DELIVER_AT_HEADER_BYTES = DELIVER_AT_HEADER.encode("ascii")


def _partition_key(key: bytes) -> tuple[str, bool]:
    """(partition_key text, whether it is base64): UTF-8 keys stay readable."""
    try:
        return key.decode("utf-8"), False
    except UnicodeDecodeError:
        return base64.b64encode(key).decode("ascii"), True


def kafka_to_pulsar(kafka_batch: Any, *, producer_name: str = "", compression: int = 0,
                    now_ms: int | None = None, schema_ids: dict[int, int] | None = None) -> PulsarEntry | None:
    """One Kafka magic-v2 batch (as stored) -> one Pulsar batch entry, or None for a control batch.

    ``compression`` is the Pulsar codec for the batch payload (the Kafka compression is undone).
    ``schema_ids`` (Confluent id -> the topic's Pulsar schema version): values with a prefix naming one of them go
    out without it, and the entry's schema_version is the first such record's (see the module docstring).
    A DELIVER_AT_HEADER on the first record of several becomes the entry's deliver_at_time here; a one-record
    batch's stays a property until ``unbatched``. Raises ConversionError for a corrupt batch.
    """
    view = memoryview(kafka_batch)
    try:
        header = parse_batch_header(view)
        if header.is_control:
            return None
        if header.magic != MAGIC:
            raise ValueError(f"record batch magic {header.magic} is not supported")
        data = kafka_compression.decompress(header.compression, view[HEADER_SIZE:12 + header.batch_length])
        opaque = entry_of(header, data)  # an encrypted or chunked Pulsar entry, stored as sent (opaque.py)
        if opaque is not None:
            return PulsarEntry(*opaque, opaque=True)
        log_append = header.timestamp_type == 1
        payload, first_key, same_key, version, unknown = _records_to_batch(
            data, header.records_count, header.max_timestamp if log_append else None,
            header.base_timestamp, header.base_sequence, schema_ids)
    except ConversionError:
        raise
    except Exception as exc:  # struct.error, IndexError (truncated), a codec error, a header key not UTF-8
        raise ConversionError(f"Kafka batch does not decode: {exc}") from None
    first_ts = header.max_timestamp if log_append else header.base_timestamp
    if first_ts < 0:
        first_ts = int(time.time() * 1000) if now_ms is None else now_ms
    md = pb.MessageMetadata(
        producer_name=producer_name,
        sequence_id=max(header.base_sequence, 0),
        publish_time=first_ts,
        num_messages_in_batch=header.records_count,
    )
    if same_key and first_key is not None:
        md.ordering_key = first_key
        text, b64 = _partition_key(first_key)
        md.partition_key = text
        if b64:
            md.partition_key_b64_encoded = True
    if header.is_transactional and header.producer_id >= 0:
        # KoP's convention: the Kafka producer id/epoch stand in for the Pulsar transaction id.
        md.txnid_most_bits = header.producer_id
        md.txnid_least_bits = max(header.producer_epoch, 0)
    if version >= 0:
        md.schema_version = version.to_bytes(8, "big", signed=True)  # Pulsar's LongSchemaVersion
    # a DELIVER_AT_HEADER: a one-record batch's is lifted by `unbatched`, which decodes its message anyway
    if header.records_count > 1 and _first_record_has_header(data, DELIVER_AT_HEADER_BYTES):
        payload = _lift_deliver_at(md, payload, header.records_count)
    payload = pbatch.compressed(compression, payload, md)
    return PulsarEntry(md, payload, header.records_count, unknown)


def _first_record_has_header(data: Any, name: bytes) -> bool:
    """Whether the first record of a batch's records section has a header `name`: a few varints, whatever the
    batch's size (a search of the whole payload would cost a tenth of the conversion; this, some microseconds, is
    spent on batches of several records only)."""

    def varint(pos: int) -> tuple[int, int]:
        b = data[pos]
        return ((b >> 1) ^ -(b & 1), pos + 1) if b < 0x80 else _zigzag(data, pos)

    try:
        _, pos = varint(0)  # record length
        _, pos = varint(pos + 1)  # after the attributes: timestamp delta
        _, pos = varint(pos)  # offset delta
        size, pos = varint(pos)  # key
        size, pos = varint(pos + max(size, 0))  # value
        count, pos = varint(pos + max(size, 0))
        for _ in range(count):
            size, pos = varint(pos)
            if data[pos:pos + size] == name:
                return True
            size, pos = varint(pos + size)
            pos += max(size, 0)
    except IndexError:  # truncated: the conversion itself says what is wrong
        return False
    return False


def _split_deliver_at(props: Any) -> tuple[list[Any], int | None]:
    """(the properties but DELIVER_AT_HEADER ones with an integer value, the first such value or None)."""
    kept = []
    at = None
    for kv in props:
        if kv.key == DELIVER_AT_HEADER and kv.value.lstrip("-").isdigit():
            if at is None:
                at = int(kv.value)
        else:
            kept.append(kv)
    return kept, at


def _lift_deliver_at(md: pb.MessageMetadata, payload: bytes, count: int) -> bytes:
    """The batch payload without DELIVER_AT_HEADER properties, their value (the first record's) in the entry's
    deliver_at_time: a Pulsar entry has one delivery time, and a Pulsar producer's records all carry the same.
    A value that is not an integer stays a property. Raises ConversionError."""
    try:
        msgs = pbatch.decode_batch(payload, count)
    except pbatch.BatchError as exc:
        raise ConversionError(str(exc)) from None
    found = False
    for smm, _value in msgs:
        if smm is None:  # decode_batch gives every message its metadata
            continue
        kept, at = _split_deliver_at(smm.properties)
        if at is not None:
            if not found:
                md.deliver_at_time = at
                found = True
            del smm.properties[:]
            smm.properties.extend(kept)
    if not found:
        return payload
    return pbatch.encode_batch((smm, value) for smm, value in msgs if smm is not None)


# The hot loop of dispatch: Kafka records -> Pulsar batch messages without protobuf objects. Each message is
# u32 size · SingleMessageMetadata · payload, its metadata written here field by field in field-number order
# (the bytes protobuf's serializer gives: tests/test_pulsar_convert.py compares them), so a record costs a few
# varint reads and one join instead of a decoded Record plus a SingleMessageMetadata object.
_U32 = struct.Struct(">I")
_SMALL_UVARINTS = [bytes([i]) for i in range(0x80)]


def _uvarint(value: int) -> bytes:
    if value < 0x80:
        return _SMALL_UVARINTS[value]
    out = bytearray()
    while value > 0x7F:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def _zigzag(data: bytes, pos: int) -> tuple[int, int]:
    """A Kafka (zig-zag) varint of more than one byte at ``pos``."""
    shift = raw = 0
    while True:
        b = data[pos]
        pos += 1
        raw |= (b & 0x7F) << shift
        if not b & 0x80:
            return (raw >> 1) ^ -(raw & 1), pos
        shift += 7
        if shift > 63:
            raise ConversionError("Kafka batch does not decode: varint longer than 10 bytes")


def _text_field(tag: bytes, text: bytes) -> bytes:
    return tag + _uvarint(len(text)) + text


def _properties(data: bytes, pos: int, count: int, stop: int) -> tuple[bytes, int, bool, bytes | None]:
    """Kafka record headers at ``pos`` -> (SingleMessageMetadata.properties (field 1) bytes, the position after
    them, whether an ORDERING_KEY_HEADER was there, its value: the ordering key, None for none). The last such
    header counts; none of them becomes a property."""
    if count < 0 or count > stop - pos:
        raise ConversionError(f"Kafka batch does not decode: record has an invalid header count {count}")
    out = []
    has_ordering = False
    ordering: bytes | None = None
    for _ in range(count):
        klen, pos = _zigzag(data, pos)
        if klen < 0:
            raise ConversionError("Kafka batch does not decode: record header key is null")
        hkey = data[pos:pos + klen]
        hkey.decode("utf-8")  # a key that is not UTF-8 makes the batch corrupt, as decode_records says
        pos += klen
        vlen, pos = _zigzag(data, pos)
        if hkey == ORDERING_KEY_HEADER_BYTES:
            has_ordering = True
            ordering = None if vlen < 0 else data[pos:pos + vlen]
            pos += max(vlen, 0)
            continue
        if vlen < 0:
            hvalue = b""
        else:
            hvalue = data[pos:pos + vlen]
            pos += vlen
            try:
                hvalue.decode("utf-8")
            except UnicodeDecodeError:
                hvalue = hvalue.decode("utf-8", "replace").encode("utf-8")
        kv = _text_field(b"\x0a", hkey) + _text_field(b"\x12", hvalue)
        out.append(b"\x0a" + _uvarint(len(kv)) + kv)
    return b"".join(out), pos, has_ordering, ordering


def _tail_fields(vlen: int, ts: int, seq: int) -> tuple[bytes, bytes]:
    """(payload_size + event_time fields, sequence_id + null_value fields) of a message's metadata."""
    head = b"\x18" + _uvarint(max(vlen, 0)) + (b"\x28" + _uvarint(ts) if ts > 0 else b"")
    tail = (b"\x40" + _uvarint(seq) if seq >= 0 else b"") + (b"\x48\x01" if vlen < 0 else b"")
    return head, tail


def _plain_smm(vlen: int, ts: int, seq: int) -> bytes:
    """The metadata of a message without key or properties."""
    head, tail = _tail_fields(vlen, ts, seq)
    return head + tail


def _key_fields(key: bytes, head: bytes, tail: bytes) -> bytes:
    """The metadata fields after the properties of a message with a key (partition key 2, payload size and
    event time 3 and 5 = ``head``, base64 flag 6, ordering key 7, sequence id and null value 8 and 9 = ``tail``:
    field-number order)."""
    n = _uvarint(len(key))
    try:
        key.decode("utf-8")  # a UTF-8 key is the partition key as it is (see _partition_key)
        return b"".join((b"\x12", n, key, head, b"\x3a", n, key, tail))
    except UnicodeDecodeError:
        return b"".join((_text_field(b"\x12", base64.b64encode(key)), head, b"\x30\x01\x3a", n, key, tail))


def _split_key_fields(key: bytes | None, ordering: bytes | None, head: bytes, tail: bytes) -> bytes:
    """_key_fields for a record whose ordering key is its own (ORDERING_KEY_HEADER): the partition key from the key
    (when there is one), the ordering key from the header (when it is not null)."""
    out: list[bytes] = []
    flag = b""
    if key is not None:
        try:
            key.decode("utf-8")
            out += (b"\x12", _uvarint(len(key)), key)
        except UnicodeDecodeError:
            out.append(_text_field(b"\x12", base64.b64encode(key)))
            flag = b"\x30\x01"
    out += (head, flag)
    if ordering is not None:
        out += (b"\x3a", _uvarint(len(ordering)), ordering)
    out.append(tail)
    return b"".join(out)


def _records_to_batch(data: Any, count: int, fixed_ts: int | None, base_ts: int, base_seq: int,
                      ids: dict[int, int] | None = None) -> Converted:
    """(Pulsar batch payload, the first record's key, whether every record has that key, the version of the first
    record whose Confluent prefix went, unknown ids) from a Kafka batch's uncompressed records: the C loop, else
    (not built, or it declined the batch) the Python one."""
    if _native is not None:
        done = _native.records_to_batch(data, count, fixed_ts, base_ts, base_seq, ids)
        if done is not None:
            return done
    return _records_to_batch_py(bytes(data), count, fixed_ts, base_ts, base_seq, ids)


# long: the per-record loop of every Pulsar dispatch, kept flat (inlined varint reads, no helper call per
# field) because each call costs as much as the field it reads; each step names its field. The reference of
# _native.records_to_batch.
def _records_to_batch_py(data: bytes, count: int, fixed_ts: int | None, base_ts: int, base_seq: int,
                         ids: dict[int, int] | None = None) -> Converted:
    parts: list[bytes] = []
    version = -1
    unknown: list[int] = []
    add = parts.append
    pack = _U32.pack
    end = len(data)
    pos = 0
    first_key: bytes | None = None
    same_key = True
    plain: dict[tuple[int, int], bytes] = {}
    tails: dict[tuple[int, int], tuple[bytes, bytes]] = {}
    for i in range(count):
        b = data[pos]  # record length
        if b < 0x80:
            length, pos = (b >> 1) ^ -(b & 1), pos + 1
        elif (b2 := data[pos + 1]) < 0x80:
            raw = (b & 0x7F) | (b2 << 7)
            length, pos = (raw >> 1) ^ -(raw & 1), pos + 2
        else:
            length, pos = _zigzag(data, pos)
        stop = pos + length
        if length < 0 or stop > end:
            raise ConversionError("Kafka batch does not decode: record runs past the end of the batch")
        b = data[pos + 1]  # after the attributes byte: timestamp delta
        if b < 0x80:
            tsd, pos = (b >> 1) ^ -(b & 1), pos + 2
        else:
            tsd, pos = _zigzag(data, pos + 1)
        b = data[pos]  # offset delta
        if b < 0x80:
            delta, pos = (b >> 1) ^ -(b & 1), pos + 1
        elif (b2 := data[pos + 1]) < 0x80:
            raw = (b & 0x7F) | (b2 << 7)
            delta, pos = (raw >> 1) ^ -(raw & 1), pos + 2
        else:
            delta, pos = _zigzag(data, pos)
        b = data[pos]  # key
        if b < 0x80:
            klen, pos = (b >> 1) ^ -(b & 1), pos + 1
        elif (b2 := data[pos + 1]) < 0x80:
            raw = (b & 0x7F) | (b2 << 7)
            klen, pos = (raw >> 1) ^ -(raw & 1), pos + 2
        else:
            klen, pos = _zigzag(data, pos)
        if klen < 0:
            key = None
        else:
            key = data[pos:pos + klen]
            pos += klen
        b = data[pos]  # value
        if b < 0x80:
            vlen, pos = (b >> 1) ^ -(b & 1), pos + 1
        elif (b2 := data[pos + 1]) < 0x80:
            raw = (b & 0x7F) | (b2 << 7)
            vlen, pos = (raw >> 1) ^ -(raw & 1), pos + 2
        else:
            vlen, pos = _zigzag(data, pos)
        if vlen < 0:
            value = b""
        else:
            value = data[pos:pos + vlen]
            pos += vlen
        b = data[pos]  # header count
        if b < 0x80:
            hcount, pos = (b >> 1) ^ -(b & 1), pos + 1
        elif (b2 := data[pos + 1]) < 0x80:
            raw = (b & 0x7F) | (b2 << 7)
            hcount, pos = (raw >> 1) ^ -(raw & 1), pos + 2
        else:
            hcount, pos = _zigzag(data, pos)
        has_ordering = False
        ordering = None
        if hcount:
            props, pos, has_ordering, ordering = _properties(data, pos, hcount, stop)
        else:
            props = b""
        if pos != stop:
            raise ConversionError("Kafka batch does not decode: record length does not match its fields")
        okey = ordering if has_ordering else key  # the record's ordering key: what Key_Shared hashes
        if i == 0:
            first_key = okey
        elif okey != first_key:
            same_key = False
        if ids is not None and vlen >= 5 and value[0] == 0:  # Confluent's prefix: magic 0, id (big-endian)
            sid = (value[1] << 24) | (value[2] << 16) | (value[3] << 8) | value[4]
            known = ids.get(sid)
            if known is not None:
                value = value[5:]
                vlen -= 5
                if version < 0:
                    version = known
            elif 0 < sid < 0x80000000 and sid not in unknown and len(unknown) < MAX_UNKNOWN_IDS:
                unknown.append(sid)
        ts = fixed_ts if fixed_ts is not None else base_ts + tsd
        seq = base_seq + delta if base_seq >= 0 else -1
        if key is None and not hcount and seq < 0:  # the common record: framed metadata of (size, time) only
            framed = plain.get((vlen, ts))
            if framed is None:
                smm = _plain_smm(vlen, ts, -1)
                framed = plain[(vlen, ts)] = pack(len(smm)) + smm
            add(framed)
            add(value)
            continue
        fields = tails.get((vlen, ts)) if seq < 0 else None
        if fields is None:
            fields = _tail_fields(vlen, ts, seq)
            if seq < 0:  # a sequence id differs per record: not worth keeping
                tails[(vlen, ts)] = fields
        if has_ordering:
            smm = props + _split_key_fields(key, ordering, *fields)
        else:
            smm = props + (fields[0] + fields[1] if key is None else _key_fields(key, *fields))
        add(pack(len(smm)))
        add(smm)
        add(value)
    if pos != end:
        raise ConversionError(f"Kafka batch does not decode: {end - pos} bytes after the last of {count} records")
    return b"".join(parts), first_key, same_key, version, tuple(unknown)


def unbatched(entry: PulsarEntry) -> PulsarEntry:
    """A one-message batch entry as a plain (non-batched) entry: the message's fields move to the entry
    metadata and ``num_messages_in_batch`` goes, and a DELIVER_AT_HEADER property becomes the entry's
    deliver_at_time. The handler dispatches one-record Kafka batches this way so
    that what a Pulsar producer sent unbatched comes back unbatched - with the id its SEND_RECEIPT named
    (batch index -1): the C++ client compares batch indexes when it filters after a seek or a reader's start
    id, and a batch index 0 would not match a receipt's -1. Compressed payloads are returned unchanged."""
    md = entry.metadata
    if entry.num_messages != 1 or md.compression != 0 or entry.opaque:
        return entry
    ((smm, value),) = pbatch.messages(md, entry.payload)
    out = pb.MessageMetadata()
    out.CopyFrom(md)
    out.ClearField("num_messages_in_batch")
    out.ClearField("ordering_key")
    out.ClearField("partition_key")
    out.ClearField("partition_key_b64_encoded")
    if smm is not None:
        for name in ("ordering_key", "partition_key", "partition_key_b64_encoded", "event_time", "null_value",
                     "null_partition_key"):
            if smm.HasField(name):
                setattr(out, name, getattr(smm, name))
        if smm.properties:
            kept, at = _split_deliver_at(smm.properties)
            out.properties.extend(kept)
            if at is not None:  # a DELIVER_AT_HEADER (kafka_to_pulsar leaves a one-record batch's to us)
                out.deliver_at_time = at
    return PulsarEntry(out, bytes(value), 1, entry.unknown_ids)


# ---- Pulsar -> Kafka ---------------------------------------------------------------------------------


def _decode_partition_key(text: str, b64: bool) -> bytes:
    if b64:
        try:
            return base64.b64decode(text, validate=True)
        except (binascii.Error, ValueError):
            pass  # not base64 after all: keep the text, as the Java client's getKeyBytes would fail
    return text.encode("utf-8")


def key_of(md: Any, entry: pb.MessageMetadata | None = None) -> bytes | None:
    """The Kafka key of a message: partition key (base64-decoded when flagged), else ordering key; a batched
    message's own (SingleMessageMetadata) keys first, then the entry's (``entry``)."""
    for source in (md, entry):
        if source is None:
            continue
        if source.HasField("partition_key"):
            return _decode_partition_key(source.partition_key, source.partition_key_b64_encoded)
        if source.HasField("ordering_key"):
            return source.ordering_key
        if source.null_partition_key:
            return None
    return None


def ordering_header(md: Any, key: bytes | None) -> bytes | None:
    """The ORDERING_KEY_HEADER value a message's Kafka record carries: its ordering key when it has one that is not
    its key (``key_of``), else None (no header)."""
    if md.HasField("ordering_key") and md.ordering_key != key:
        return bytes(md.ordering_key)
    return None


_Q = struct.Struct(">q")


def _varint(out: bytearray, value: int) -> None:
    raw = ((value << 1) ^ (value >> 63)) & 0xFFFFFFFFFFFFFFFF
    while raw > 0x7F:
        out.append((raw & 0x7F) | 0x80)
        raw >>= 7
    out.append(raw)


def _messages_to_records(metadata: pb.MessageMetadata, msgs: list[tuple[Any, Any]], prefix: bytes | None = None
                         ) -> tuple[bytearray, int, int, int]:
    """(Kafka records, how many, base timestamp, max timestamp) from an entry's messages as protobuf objects:
    the general path (a non-batched message, a batch the fast path declined, an entry with a deliver_at_time).
    ``prefix`` goes before every non-null value (Confluent's magic byte and schema id)."""
    deliver_at = (str(metadata.deliver_at_time).encode("ascii") if metadata.HasField("deliver_at_time") else None)
    entry_props = metadata.properties
    entry_time = metadata.event_time or metadata.publish_time  # of a non-batched message
    body = bytearray()
    rec = bytearray()
    base_ts = None
    max_ts = -1
    written = 0
    for delta, (smm, value) in enumerate(msgs):
        if smm is None:  # a non-batched message: the entry metadata is the message's
            key = key_of(metadata)
            ordering = ordering_header(metadata, key)
            ts = entry_time
            props = entry_props
            null = metadata.null_value
        else:
            if smm.compacted_out:
                continue
            # A batched message's fields are its own only: clients copy the *first* message's metadata onto
            # the batch entry, so the entry's key, event time and properties belong to that message.
            key = key_of(smm)
            ordering = ordering_header(smm, key)
            ts = smm.event_time or metadata.publish_time
            props = smm.properties
            null = smm.null_value
        if base_ts is None:
            base_ts = ts
        if ts > max_ts:
            max_ts = ts
        rec.clear()
        rec.append(0)  # record attributes
        _varint(rec, ts - base_ts)
        _varint(rec, delta)
        if key is None:
            rec.append(1)  # varint(-1)
        else:
            _varint(rec, len(key))
            rec += key
        if null:
            rec.append(1)
        elif prefix:
            _varint(rec, len(prefix) + len(value))
            rec += prefix
            rec += value
        else:
            _varint(rec, len(value))
            rec += value
        _varint(rec, len(props) + (ordering is not None) + (deliver_at is not None))
        for kv in props:
            hk = kv.key.encode("utf-8")
            hv = kv.value.encode("utf-8")
            _varint(rec, len(hk))
            rec += hk
            _varint(rec, len(hv))
            rec += hv
        if ordering is not None:
            _varint(rec, len(ORDERING_KEY_HEADER_BYTES))
            rec += ORDERING_KEY_HEADER_BYTES
            _varint(rec, len(ordering))
            rec += ordering
        if deliver_at is not None:
            _varint(rec, len(DELIVER_AT_HEADER_BYTES))
            rec += DELIVER_AT_HEADER_BYTES
            _varint(rec, len(deliver_at))
            rec += deliver_at
        _varint(body, len(rec))
        body += rec
        written += 1
    return body, written, base_ts or 0, max_ts


# The hot loop of a Pulsar producer's SEND: a batch's SingleMessageMetadata read field by field (no protobuf
# object per message) and its Kafka record written at once. Anything it does not expect - an unknown field,
# text that is not UTF-8, sizes that do not add up - sends the whole entry to _messages_to_records, which
# either converts it or raises the precise error, so both paths give the same bytes and the same refusals
# (tests/test_pulsar_convert.py compares them).


def _zigzag_bytes(value: int) -> bytes:
    out = bytearray()
    _varint(out, value)
    return bytes(out)


_ZIGZAG = [_zigzag_bytes(_v) for _v in range(8192)]  # Kafka varints of small lengths and deltas, ready made


def _uv(data: bytes, pos: int) -> tuple[int, int]:
    """An unsigned protobuf varint at ``pos``."""
    shift = value = 0
    while True:
        b = data[pos]
        pos += 1
        value |= (b & 0x7F) << shift
        if b < 0x80:
            return value, pos
        shift += 7
        if shift > 63:
            raise ValueError("varint longer than 10 bytes")


def _zz(value: int) -> bytes:
    return _ZIGZAG[value] if 0 <= value < 8192 else _zigzag_bytes(value)


def _key_value(data: bytes, pos: int, end: int) -> tuple[bytes, bytes] | None:
    """A KeyValue (properties entry) as (key, value) UTF-8 bytes, None when it has anything else."""
    key = value = b""
    while pos < end:
        tag = data[pos]
        if tag not in (0x0A, 0x12):
            return None
        n, pos = _uv(data, pos + 1)
        text = data[pos:pos + n]
        pos += n
        text.decode("utf-8")  # UnicodeDecodeError: the caller declines the entry
        if tag == 0x0A:
            key = text
        else:
            value = text
    return (key, value) if pos == end else None


def _batch_to_records(data: Any, count: int, publish_time: int, prefix: bytes | None = None
                      ) -> tuple[Any, int, int, int] | None:
    """(Kafka records, how many, base timestamp, max timestamp) of an uncompressed Pulsar batch payload, or
    None to leave the entry to the general path: the C loop, else (not built, or it declined) the Python one.
    ``prefix`` goes before every non-null value."""
    if _native is not None:
        done = _native.batch_to_records(data, count, publish_time, prefix)
        if done is not None:
            return done
    return _batch_to_records_py(bytes(data), count, publish_time, prefix)


def _batch_to_records_py(data: bytes, count: int, publish_time: int, prefix: bytes | None = None
                         ) -> tuple[bytearray, int, int, int] | None:
    """The reference of _native.batch_to_records."""
    try:
        return _batch_to_records_unchecked(data, count, publish_time, prefix or b"")
    except (IndexError, ValueError, struct.error):  # UnicodeDecodeError is a ValueError
        return None


# long: the per-message loop of every Pulsar SEND, kept flat for the same reason as _records_to_batch: one
# branch per SingleMessageMetadata field, varints inlined, then the Kafka record written at once.
def _batch_to_records_unchecked(data: bytes, count: int, publish_time: int, prefix: bytes
                                ) -> tuple[bytearray, int, int, int] | None:
    body = bytearray()
    end = len(data)
    pos = 0
    base_ts = None
    max_ts = -1
    written = 0
    unpack = _U32.unpack_from
    zigzag = _ZIGZAG
    for delta in range(count):
        (size,) = unpack(data, pos)
        pos += 4
        md_end = pos + size
        if md_end > end:
            return None
        payload_size = event_time = 0
        ordering_key = partition_key = None
        b64 = compacted = null = False
        props: list[tuple[bytes, bytes]] = []
        while pos < md_end:
            tag = data[pos]
            b = data[pos + 1]
            if tag in (0x0A, 0x12, 0x3A):  # properties, partition_key, ordering_key: length-delimited
                if b < 0x80:
                    n, pos = b, pos + 2
                else:
                    n, pos = _uv(data, pos + 1)
                raw = data[pos:pos + n]
                pos += n
                if tag == 0x3A:
                    ordering_key = raw
                elif tag == 0x12:
                    raw.decode("utf-8")
                    partition_key = raw
                else:
                    kv = _key_value(data, pos - n, pos)
                    if kv is None:
                        return None
                    props.append(kv)
                continue
            if b < 0x80:
                value, pos = b, pos + 2
            elif (b2 := data[pos + 2]) < 0x80:  # sequence ids and sizes below 16 384
                value, pos = (b & 0x7F) | (b2 << 7), pos + 3
            elif (b3 := data[pos + 3]) < 0x80:
                value, pos = (b & 0x7F) | ((b2 & 0x7F) << 7) | (b3 << 14), pos + 4
            else:
                value, pos = _uv(data, pos + 1)
            if tag == 0x18:
                payload_size = value
            elif tag == 0x28:
                event_time = value
            elif tag == 0x40:  # sequence_id: not part of a Kafka record
                pass
            elif tag == 0x20:
                compacted = value != 0
            elif tag == 0x30:
                b64 = value != 0
            elif tag == 0x48:
                null = value != 0
            elif tag == 0x50:  # null_partition_key: no key either way
                pass
            else:
                return None
        stop = pos + payload_size
        if pos != md_end or payload_size >= 1 << 31 or stop > end:
            return None
        if compacted:
            pos = stop
            continue
        ordering = None
        key: bytes | None
        if partition_key is not None:
            key = _decode_partition_key(partition_key.decode("utf-8"), b64)
            if ordering_key is not None and ordering_key != key:
                ordering = ordering_key
        else:
            key = ordering_key
        ts = event_time or publish_time
        if base_ts is None:
            base_ts = ts
        if ts > max_ts:
            max_ts = ts
        d = ts - base_ts
        rec = [b"\x00", zigzag[d] if 0 <= d < 8192 else _zz(d), zigzag[delta] if delta < 8192 else _zz(delta)]
        if key is None:
            rec.append(b"\x01")
        else:
            rec += (_zz(len(key)), key)
        if null:
            rec.append(b"\x01")
        elif prefix:
            vsize = payload_size + len(prefix)
            rec += (zigzag[vsize] if vsize < 8192 else _zz(vsize), prefix, data[pos:stop])
        else:
            rec += (zigzag[payload_size] if payload_size < 8192 else _zz(payload_size), data[pos:stop])
        if ordering is not None:
            props.append((ORDERING_KEY_HEADER_BYTES, ordering))
        if props:
            rec.append(_zz(len(props)))
            for hk, hv in props:
                rec += (_zz(len(hk)), hk, _zz(len(hv)), hv)
        else:
            rec.append(b"\x00")
        one = b"".join(rec)
        n = len(one)
        body += zigzag[n] if n < 8192 else _zz(n)
        body += one
        written += 1
        pos = stop
    if pos != end:
        return None
    return body, written, base_ts or 0, max_ts


def unconverted_to_kafka(metadata: pb.MessageMetadata, payload: Any, reason: str) -> bytearray:
    """The Kafka batch storing, as it was sent, an entry ``pulsar_to_kafka`` refused with ConversionError
    ``reason`` (kop/pulsar/opaque.py): Pulsar's broker stores what it cannot read, its consumers' clients decide."""
    return to_kafka(metadata, payload, 0, key_of(metadata), reason)


def confluent_prefix(schema_id: int) -> bytes:
    """Confluent's wire-format prefix: the magic byte 0 and the schema's global id (big-endian int32)."""
    return b"\x00" + schema_id.to_bytes(4, "big", signed=True)


def pulsar_to_kafka(metadata: pb.MessageMetadata, payload: Any, base_offset: int, *,
                    compression: int = 0, limit: int = DEFAULT_MAX_MESSAGE_SIZE,
                    schema_id: int | None = None) -> bytearray | None:
    """One Pulsar entry (metadata + payload as stored or sent) -> one Kafka magic-v2 batch whose records
    sit at base_offset .. base_offset + N - 1 (N = messages in the entry). Messages a compaction marked
    ``compacted_out`` keep their offset but have no record (a gap, as in a compacted Kafka log); an
    entry with nothing left gives None.

    ``compression`` is the Kafka codec of the result. ``schema_id``: the Confluent id of the entry's schema
    version; every non-null value is then stored behind Confluent's prefix (``confluent_prefix``), for Kafka
    consumers' deserializers. An encrypted entry or a chunk is stored unopened instead (kop/pulsar/opaque.py).
    Raises ConversionError.
    """
    if is_opaque(metadata):  # encrypted, or a chunk: stored unopened (opaque.py), without a Confluent prefix
        return to_kafka(metadata, payload, base_offset, key_of(metadata))
    prefix = None if schema_id is None else confluent_prefix(schema_id)
    converted = None
    count = metadata.num_messages_in_batch if pbatch.is_batch(metadata) else 0
    if count >= 1 and not metadata.HasField("deliver_at_time"):  # the fast path writes no DELIVER_AT_HEADER
        try:
            data = pbatch.decompress_payload(metadata, payload, limit)
        except pbatch.BatchError as exc:
            raise ConversionError(str(exc)) from None
        converted = _batch_to_records(data, count, metadata.publish_time, prefix)
    if converted is None:  # not a batch, or one the fast path leaves to protobuf (it raises what is wrong)
        try:
            msgs = pbatch.messages(metadata, payload, limit)
        except pbatch.BatchError as exc:
            raise ConversionError(str(exc)) from None
        converted = _messages_to_records(metadata, msgs, prefix)
    body, written, base_ts, max_ts = converted
    last_delta = (count or 1) - 1
    if not written:
        return None
    data = kafka_compression.compress(compression, body) if compression else body
    out = bytearray(HEADER_SIZE)
    BATCH_HEADER.pack_into(
        out, 0, base_offset, MIN_BATCH_LENGTH + len(data), -1, MAGIC, 0, compression & COMPRESSION_MASK,
        last_delta, base_ts, max_ts, -1, -1, -1, written)
    out += data
    update_crc(out)
    return out  # mutable: the partition seam stamps the leader epoch (and LogAppendTime) in place, no copy
