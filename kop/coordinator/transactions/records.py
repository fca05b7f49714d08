"""The records the transaction coordinator keeps in __transaction_state, in Apache Kafka's own layouts.

Kafka's tools read this topic (ConsoleConsumer with `org.apache.kafka.tools.consumer.TransactionLogMessageFormatter`),
so key and value follow Kafka's TransactionLogKey / TransactionLogValue schemas byte for byte:

* key: int16 version 0, then TransactionalId (int16-length string). Kafka writes version 0.
* value: int16 version, then ProducerId int64, ProducerEpoch int16, TransactionTimeoutMs int32,
  TransactionStatus int8 (the state's id), TransactionPartitions (nullable array of [Topic string,
  PartitionIds int32 array]; null in Empty), TransactionLastUpdateTimestampMs int64,
  TransactionStartTimestampMs int64. Version 1 is flexible (compact lengths, tagged fields: 0
  PreviousProducerId, 1 NextProducerId, 2 ClientTransactionVersion - Kafka writes only the last, and only
  when it is not 0). Kafka 4.x writes version 0 while the finalized `transaction.version` is 0, version 1
  from level 1; this broker finalizes no `transaction.version` (clients stay on the classic TV1 path,
  research/transactions.md §2), so it writes version 0, as such a Kafka 4.x cluster does. Both are read.
* a tombstone (null value) removes an expired transactional id.

Written by hand from those layouts (coordinator record schemas are not among the request/response
schemas kop.protocol generates its codec from); the primitives are the group coordinator's.
"""

from __future__ import annotations

from dataclasses import dataclass

from kop.coordinator.records import RecordError, _Reader, _Writer

KEY_VERSION = 0
VALUE_VERSION = 0


@dataclass(frozen=True, slots=True)
class TransactionLogValue:
    producer_id: int
    producer_epoch: int
    timeout_ms: int
    status: int  # kop.coordinator.transactions.state.TxnState
    partitions: dict[str, list[int]] | None  # None: Empty (Kafka writes null there)
    last_update_ms: int
    start_ms: int
    client_transaction_version: int = 0
    previous_producer_id: int = -1
    next_producer_id: int = -1


def encode_key(transactional_id: str) -> bytes:
    w = _Writer(False)
    w.int16(KEY_VERSION)
    w.string(transactional_id)
    return bytes(w.out)


def decode_key(data: bytes | memoryview) -> str:
    """The transactional id of a key; RecordError for another key version or trailing bytes."""
    r = _Reader(data, 0, False)
    version = r.int16()
    if version != 0:
        raise RecordError(f"unknown transaction log key version {version}")
    tid = r.string()
    if r.pos != len(data):
        raise RecordError(f"{len(data) - r.pos} bytes after a transaction log key")
    return tid or ""


def encode_value(v: TransactionLogValue, version: int = VALUE_VERSION) -> bytes:
    if version not in (0, 1):
        raise RecordError(f"transaction log value version {version} is not written here")
    w = _Writer(version >= 1)
    w.int16(version)
    w.int64(v.producer_id)
    w.int16(v.producer_epoch)
    w.int32(v.timeout_ms)
    w.out.append(v.status & 0xFF)
    if v.partitions is None:
        if w.flexible:
            w.uvarint(0)
        else:
            w.int32(-1)
    else:
        w.array_len(len(v.partitions))
        for topic, parts in v.partitions.items():
            w.string(topic)
            w.array_len(len(parts))
            for p in parts:
                w.int32(p)
            w.no_tags()
    w.int64(v.last_update_ms)
    w.int64(v.start_ms)
    if w.flexible:
        tags: list[tuple[int, bytes]] = []
        if v.previous_producer_id != -1:
            tags.append((0, v.previous_producer_id.to_bytes(8, "big", signed=True)))
        if v.next_producer_id != -1:
            tags.append((1, v.next_producer_id.to_bytes(8, "big", signed=True)))
        if v.client_transaction_version != 0:
            tags.append((2, v.client_transaction_version.to_bytes(2, "big", signed=True)))
        w.uvarint(len(tags))
        for tag, raw in tags:
            w.uvarint(tag)
            w.uvarint(len(raw))
            w.out += raw
    return bytes(w.out)


def decode_value(data: bytes | memoryview) -> TransactionLogValue:
    version = _Reader(data, 0, False).int16()
    if version not in (0, 1):
        raise RecordError(f"unknown transaction log value version {version}")
    r = _Reader(data, 2, version >= 1)
    pid = r.int64()
    epoch = r.int16()
    timeout = r.int32()
    status = r._take(1)[0]
    n = r.uvarint() - 1 if r.flexible else r.int32()
    partitions: dict[str, list[int]] | None = None
    if n >= 0:
        if n > len(data):
            raise RecordError(f"bad array length {n}")
        partitions = {}
        for _ in range(n):
            topic = r.string() or ""
            partitions[topic] = [r.int32() for _ in range(r.array_len())]
            r.skip_tags()
    last_update = r.int64()
    start = r.int64()
    prev = nxt = -1
    ctv = 0
    if r.flexible:
        for _ in range(r.uvarint()):
            tag = r.uvarint()
            raw = r._take(r.uvarint())
            if tag == 0 and len(raw) == 8:
                prev = int.from_bytes(raw, "big", signed=True)
            elif tag == 1 and len(raw) == 8:
                nxt = int.from_bytes(raw, "big", signed=True)
            elif tag == 2 and len(raw) == 2:
                ctv = int.from_bytes(raw, "big", signed=True)
    return TransactionLogValue(pid, epoch, timeout, status, partitions, last_update, start, ctv, prev, nxt)
