"""Kafka record batches <-> Pulsar messages, with KoP's field mapping (seed 004, storage.md §8).

Kafka -> Pulsar (``kafka_to_pulsar``): one Kafka batch becomes one Pulsar *batch* entry with one
SingleMessageMetadata per record, so a Kafka batch of N records is N Pulsar messages sharing one
message id (ledger, entry) and told apart by batch index, and a Pulsar consumer's permits, acks and
batch indexes count the same N:

    key        -> ordering_key (bytes) and partition_key
    timestamp  -> event_time (per message) and publish_time (the entry's: the first record's)
    headers    -> properties (values as UTF-8 text)
    null value -> null_value = true, empty payload

Pulsar -> Kafka (``pulsar_to_kafka``): an entry of N messages (batched or not) becomes one Kafka batch
of N records at offsets base..base+N-1:

    ordering_key, else partition_key (base64-decoded when flagged)  -> key
    event_time if set, else publish_time                              -> timestamp
    properties                                                        -> headers
    null_value                                                        -> null value

and for batched messages only the SingleMessageMetadata's own fields count (a message without an event time
takes the entry's publish time). KoP reads only the entry-level key, event time and properties of a batch,
which Pulsar clients copy from the batch's *first* message (Java's BatchMessageContainerImpl, the C++
client's batch container): read that way, a keyless message batched after a keyed one gets the other's key
(seen with pulsar-client against the handler), so we never fall back to the entry's fields for them.

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

Cost: the conversion is per record in Python (decode the Kafka records, one protobuf object per
message); docs/pulsar.md has the measured microseconds per message each way.
"""

from __future__ import annotations

import base64
import binascii
import struct
import time
from typing import Any, NamedTuple

from kop.protocol import compression as kafka_compression
from kop.protocol.records import (
    BATCH_HEADER,
    COMPRESSION_MASK,
    HEADER_SIZE,
    MAGIC,
    MIN_BATCH_LENGTH,
    decode_records,
    parse_batch_header,
    update_crc,
)

from .codec import batch as pbatch
from .codec.commands import pb
from .codec.framing import DEFAULT_MAX_MESSAGE_SIZE

__all__ = ["PulsarEntry", "ConversionError", "kafka_to_pulsar", "pulsar_to_kafka", "key_of", "unbatched"]


class ConversionError(ValueError):
    """An entry or batch that cannot be converted (corrupt, or over the size limit)."""


class PulsarEntry(NamedTuple):
    """A Pulsar entry built from a Kafka batch: metadata + (possibly compressed) batch payload.
    ``framing.encode_headers_and_payload(entry.metadata, entry.payload)`` gives its wire/stored bytes."""

    metadata: pb.MessageMetadata
    payload: bytes
    num_messages: int


# ---- Kafka -> Pulsar ---------------------------------------------------------------------------------


def _partition_key(key: bytes) -> tuple[str, bool]:
    """(partition_key text, whether it is base64): UTF-8 keys stay readable."""
    try:
        return key.decode("utf-8"), False
    except UnicodeDecodeError:
        return base64.b64encode(key).decode("ascii"), True


def kafka_to_pulsar(kafka_batch: Any, *, producer_name: str = "", compression: int = 0,
                    now_ms: int | None = None) -> PulsarEntry | None:
    """One Kafka magic-v2 batch (as stored) -> one Pulsar batch entry, or None for a control batch.

    ``compression`` is the Pulsar codec for the batch payload (the Kafka compression is undone).
    Raises ConversionError for a corrupt batch.
    """
    view = memoryview(kafka_batch)
    try:
        header = parse_batch_header(view)
        if header.is_control:
            return None
        records = decode_records(view)
    except Exception as exc:  # struct.error, CorruptRecordError
        raise ConversionError(f"Kafka batch does not decode: {exc}") from None
    log_append = header.timestamp_type == 1
    base_ts = header.base_timestamp
    new_smm = pb.SingleMessageMetadata
    items = []
    first_key: bytes | None = None
    same_key = True
    for i, rec in enumerate(records):
        smm = new_smm()
        key = rec.key
        if key is not None:
            smm.ordering_key = key
            text, b64 = _partition_key(key)
            smm.partition_key = text
            if b64:
                smm.partition_key_b64_encoded = True
        if i == 0:
            first_key = key
        elif key != first_key:
            same_key = False
        ts = header.max_timestamp if log_append else base_ts + rec.timestamp_delta
        if ts > 0:
            smm.event_time = ts
        if rec.headers:
            props = smm.properties
            for hkey, hvalue in rec.headers:
                props.add(key=hkey, value="" if hvalue is None else hvalue.decode("utf-8", "replace"))
        value = rec.value
        if value is None:
            smm.null_value = True
            value = b""
        if header.base_sequence >= 0:
            smm.sequence_id = header.base_sequence + rec.offset_delta
        items.append((smm, value))
    first_ts = header.max_timestamp if log_append else base_ts
    if first_ts < 0:
        first_ts = int(time.time() * 1000) if now_ms is None else now_ms
    md = pb.MessageMetadata(
        producer_name=producer_name,
        sequence_id=max(header.base_sequence, 0),
        publish_time=first_ts,
        num_messages_in_batch=len(items),
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
    payload = pbatch.compressed(compression, pbatch.encode_batch(items), md)
    return PulsarEntry(md, payload, len(items))


def unbatched(entry: PulsarEntry) -> PulsarEntry:
    """A one-message batch entry as a plain (non-batched) entry: the message's fields move to the entry
    metadata and ``num_messages_in_batch`` goes. The handler dispatches one-record Kafka batches this way so
    that what a Pulsar producer sent unbatched comes back unbatched - with the id its SEND_RECEIPT named
    (batch index -1): the C++ client compares batch indexes when it filters after a seek or a reader's start
    id, and a batch index 0 would not match a receipt's -1. Compressed payloads are returned unchanged."""
    md = entry.metadata
    if entry.num_messages != 1 or md.compression != 0:
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
            out.properties.extend(smm.properties)
    return PulsarEntry(out, bytes(value), 1)


# ---- Pulsar -> Kafka ---------------------------------------------------------------------------------


def _decode_partition_key(text: str, b64: bool) -> bytes:
    if b64:
        try:
            return base64.b64decode(text, validate=True)
        except (binascii.Error, ValueError):
            pass  # not base64 after all: keep the text, as the Java client's getKeyBytes would fail
    return text.encode("utf-8")


def key_of(md: Any, entry: pb.MessageMetadata | None = None) -> bytes | None:
    """The Kafka key of a message: ordering key, else partition key; a batched message's own
    (SingleMessageMetadata) keys first, then the entry's (``entry``)."""
    for source in (md, entry):
        if source is None:
            continue
        if source.HasField("ordering_key"):
            return source.ordering_key
        if source.HasField("partition_key"):
            return _decode_partition_key(source.partition_key, source.partition_key_b64_encoded)
        if source.null_partition_key:
            return None
    return None


_Q = struct.Struct(">q")


def _varint(out: bytearray, value: int) -> None:
    raw = ((value << 1) ^ (value >> 63)) & 0xFFFFFFFFFFFFFFFF
    while raw > 0x7F:
        out.append((raw & 0x7F) | 0x80)
        raw >>= 7
    out.append(raw)


def pulsar_to_kafka(metadata: pb.MessageMetadata, payload: Any, base_offset: int, *,
                    compression: int = 0, limit: int = DEFAULT_MAX_MESSAGE_SIZE) -> bytes | None:
    """One Pulsar entry (metadata + payload as stored or sent) -> one Kafka magic-v2 batch whose records
    sit at base_offset .. base_offset + N - 1 (N = messages in the entry). Messages a compaction marked
    ``compacted_out`` keep their offset but have no record (a gap, as in a compacted Kafka log); an
    entry with nothing left gives None.

    ``compression`` is the Kafka codec of the result. Raises ConversionError.
    """
    try:
        msgs = pbatch.messages(metadata, payload, limit)
    except pbatch.BatchError as exc:
        raise ConversionError(str(exc)) from None
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
            ts = entry_time
            props = entry_props
            null = metadata.null_value
        else:
            if smm.compacted_out:
                continue
            # A batched message's fields are its own only: clients copy the *first* message's metadata onto
            # the batch entry, so the entry's key, event time and properties belong to that message.
            key = key_of(smm)
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
        else:
            _varint(rec, len(value))
            rec += value
        _varint(rec, len(props))
        for kv in props:
            hk = kv.key.encode("utf-8")
            hv = kv.value.encode("utf-8")
            _varint(rec, len(hk))
            rec += hk
            _varint(rec, len(hv))
            rec += hv
        _varint(body, len(rec))
        body += rec
        written += 1
    if not written:
        return None
    last_delta = len(msgs) - 1
    data = kafka_compression.compress(compression, body) if compression else body
    out = bytearray(HEADER_SIZE)
    BATCH_HEADER.pack_into(
        out, 0, base_offset, MIN_BATCH_LENGTH + len(data), -1, MAGIC, 0, compression & COMPRESSION_MASK,
        last_delta, base_ts, max_ts, -1, -1, -1, written)
    out += data
    update_crc(out)
    return bytes(out)
