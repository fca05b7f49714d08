"""Produce (key 0): v3-v12 served; v0-v12 advertised.

- v0-v2 stay in the advertised range because older librdkafka decides which compression codecs a broker
  supports from it (KAFKA-18659), but such requests are refused, as in Kafka 4.x. v13 (topic ids) is not
  advertised, so clients keep naming topics.
- acks 0, 1 and -1 (all). With one ledger store there are no followers: acks=1 and acks=all both answer
  when the entry is durable under the store's policy (KoP did the same with BookKeeper's ack quorum).
  acks=0 gets no response at all.
- Each partition must carry exactly one magic-v2 batch (as Kafka requires since v3). The batch is kept
  opaque: header checks and CRC32C, never a per-record walk, compressed batches stay compressed. Only
  bytes outside the CRC are touched (partition leader epoch), except for LogAppendTime topics where the
  max timestamp and timestamp-type bit are rewritten and the CRC recomputed, as Kafka does.
- Idempotent producers: sequence checks and de-duplication of retried batches (the partition's producer
  state, kop/offset/producer_state.py). A stale epoch gets INVALID_PRODUCER_EPOCH (KIP-588: abortable
  for the client; PRODUCER_FENCED comes from the coordinator's APIs, not from Produce).
- Transactional batches (attributes bit 4) are accepted and open the producer's transaction on the
  partition; the request must carry its transactional id (else TRANSACTIONAL_ID_AUTHORIZATION_FAILED,
  as Kafka without one). The first batch of a transaction on a partition is verified with the
  transaction coordinator when one is running (`services.transactions.verify_partition`, KIP-890 part
  1); TRANSACTION_ABORTABLE becomes INVALID_TXN_STATE below v11, and the coordinator's retriable errors
  (or a verifier that fails) NOT_ENOUGH_REPLICAS, as Kafka maps them. A non-transactional batch of a producer
  whose transaction is open gets INVALID_TXN_STATE. A transactional v12 request is treated like v11
  (verification only, no implicit partition add): transaction.version 2 is not advertised, so clients
  do not expect it. Client-sent control batches are refused with INVALID_RECORD (only WriteTxnMarkers
  writes markers).
- Auto-creation on produce follows allowAutoTopicCreation.
- Per-record validation as Kafka's LogValidator: on compacted topics every record needs a key
  (INVALID_RECORD), and CreateTime timestamps must lie within message.timestamp.before.max.ms /
  after.max.ms of the broker clock (INVALID_TIMESTAMP). A batch with such records is refused whole, and
  v8+ answers name each offending record (`record_errors`: batch index and message) with Kafka's
  `error_message`, so a producer can fail exactly those records. The batch is walked record by record
  only where a check needs it: on compacted topics, when before.max.ms is set, or when the header's max
  timestamp is past the after.max.ms bound (otherwise the header's max timestamp, as every producer
  writes it, bounds the records: a batch whose header understates its records' timestamps is not caught).
- compression.type other than `producer` recompresses a batch sent in another codec (Kafka does the
  same), at the topic's compression.*.level; that costs a decompress + compress per batch. Measured per
  118 KB batch of 1000 100-byte records (one core): lz4 at Kafka's default level 9 (high compression,
  as Kafka) 4.3 ms, zstd 3 0.9 ms, gzip 9.3 ms, snappy 0.4 ms; batches from 64 KB up are recompressed
  in a worker thread so the event loop keeps serving.
"""

from __future__ import annotations

import asyncio
import logging
import struct
import time
from typing import TYPE_CHECKING, Any, NamedTuple

from kop.kafka import authorize
from kop.kafka.apis.common import LEADER_EPOCH
from kop.kafka.context import PartitionError, RequestContext
from kop.kafka.idempotence import BatchRecord, SequenceError
from kop.protocol import api_info
from kop.protocol.compaction import COMPRESSION_MASK, HEADER_SIZE, payload_of, record_spans
from kop.protocol.compression import Compression, compress
from kop.protocol.errors import ErrorCode
from kop.protocol.records import CorruptRecordError, crc32c, iter_batches
from kop.topics.manager import TopicError
from kop.topics.topic_config import LONG_MAX, effective

if TYPE_CHECKING:
    from kop.metrics import BrokerMetrics, PartitionCounters
    from kop.offset.api import PartitionLog

log = logging.getLogger(__name__)

API_KEY = 0
VERSIONS = (0, 12)
REQUEST_FLOOR = 3

_EPOCH_BYTES = struct.pack(">i", LEADER_EPOCH)


class _PartitionError(Exception):
    def __init__(self, error: str, message: str | None = None,
                 record_errors: list[tuple[int, str]] | None = None) -> None:
        super().__init__(message or error)
        self.error = error
        self.message = message
        self.record_errors = record_errors or []


class _Issued(NamedTuple):
    """One partition's append, started (or found to be a retry of one of the producer's last batches)."""

    plog: PartitionLog
    log_append_time: int
    append: asyncio.Future[int] | None  # the append's base offset; None for a duplicate
    duplicate: BatchRecord | None  # the earlier batch a retry duplicates: answered with its offsets
    counters: PartitionCounters | None = None  # counted once durable; a duplicate appends nothing
    nbytes: int = 0
    nrecords: int = 0
    issued: float = 0.0  # monotonic time the append was issued (produce_publish latency)


async def handle(ctx: RequestContext, req: Any) -> Any:
    R = api_info(API_KEY).response_class
    acks = req.acks
    # Appends of pipelined produce requests on one connection must be issued in arrival order; each request
    # waits until the previous one has issued its appends (not until they are durable).
    prev = ctx.conn.produce_chain
    issued: asyncio.Future[None] = asyncio.get_running_loop().create_future()
    ctx.conn.produce_chain = issued
    denied = authorize.produce_denied(ctx, req)  # {name: error} of topics this principal may not write to
    try:
        if prev is not None and not prev.done():
            await prev
        results: list[tuple[Any, list[tuple[int, Any]]]] = []
        for td in req.topic_data:
            parts: list[tuple[int, Any]] = []
            for pd in td.partition_data:
                parts.append((pd.index, _PartitionError(denied[td.name]) if td.name in denied
                              else await _issue(ctx, td.name, pd.index, pd.records, acks,
                                                getattr(req, "transactional_id", None))))
            results.append((td.name, parts))
    finally:
        if not issued.done():
            issued.set_result(None)
    if acks not in (-1, 0, 1):
        pass  # every partition already carries INVALID_REQUIRED_ACKS
    responses = []
    for name, parts in results:
        presps = []
        for index, outcome in parts:
            presps.append(await _finish(R, index, outcome, ctx.metrics))
        responses.append(R.TopicProduceResponse(name=name, partition_responses=presps))
    if acks == 0:
        return None
    return R(responses=responses, throttle_time_ms=0)


async def _issue(ctx: RequestContext, topic_name: str, partition: int, records: Any,
                 acks: int, transactional_id: str | None) -> _Issued | _PartitionError:
    """Validate and start the append; returns the started append or the partition's error. Nothing here
    waits for durability."""
    t0 = time.monotonic()
    try:
        if acks not in (-1, 0, 1):
            raise _PartitionError("INVALID_REQUIRED_ACKS")
        h = ctx.handler
        try:
            topic = await ctx.lookup_topic(topic_name, auto_create=True)
        except TopicError as e:
            raise _PartitionError(e.error, e.message) from None
        if topic is None:
            raise _PartitionError("UNKNOWN_TOPIC_OR_PARTITION", f"Topic {topic_name} does not exist")
        if topic.internal:
            raise _PartitionError("INVALID_TOPIC_EXCEPTION", "Cannot append to an internal topic")
        if not 0 <= partition < topic.partitions:
            raise _PartitionError("UNKNOWN_TOPIC_OR_PARTITION", f"Partition {partition} does not exist")
        if records is None or len(records) == 0:
            raise _PartitionError("INVALID_RECORD", "No record batch in the request")
        cfg = h.config
        max_bytes = int(effective(topic.configs, "max.message.bytes", cfg))
        try:
            batches = list(iter_batches(records))
        except CorruptRecordError as e:
            raise _PartitionError(e.error if hasattr(e, "error") else "CORRUPT_MESSAGE", str(e)) from None
        if len(batches) != 1:
            raise _PartitionError("INVALID_RECORD", "Produce v3+ must carry exactly one record batch per partition")
        hdr, batch = batches[0]
        if len(batch) > max_bytes:
            raise _PartitionError(
                "MESSAGE_TOO_LARGE", f"The batch is {len(batch)} bytes, larger than max.message.bytes={max_bytes}"
            )
        if hdr.is_control:
            raise _PartitionError("INVALID_RECORD", "Clients may not write control batches")
        append_time = effective(topic.configs, "message.timestamp.type", cfg) == "LogAppendTime"
        _validate_records(topic.configs, cfg, hdr, batch, f"{topic_name}-{partition}", append_time)
        codec = _TOPIC_CODECS.get(effective(topic.configs, "compression.type", cfg))
        if codec is not None and codec != hdr.compression and not hdr.is_control:
            level = _level(topic.configs, codec, cfg)
            if len(batch) >= _THREAD_RECOMPRESS_BYTES:  # lz4 level 9 / gzip run at ~13-30 MB/s: off the loop
                batch = await asyncio.to_thread(recompress_batch, batch, codec, level)
            else:
                batch = recompress_batch(batch, codec, level)
        # partitionLeaderEpoch is outside the CRC: stamp ours so consumers see one consistent epoch.
        batch[12:16] = _EPOCH_BYTES
        log_append_time = -1
        max_ts = hdr.max_timestamp
        if append_time:
            log_append_time = int(time.time() * 1000)
            restamp_log_append_time(batch, log_append_time)
            max_ts = log_append_time
        plog = await ctx.partition_log(topic, partition)
        ledger = topic.name.ledger_name(partition)
        states = await h.producer_state(ledger, plog)
        txn = hdr.is_transactional
        if txn:
            await _verify_transactional(ctx, plog, states, hdr, transactional_id, ctx.topics.kafka_name(topic.name),
                                        partition)
        try:
            dup = states.check(hdr.producer_id, hdr.producer_epoch, hdr.base_sequence, hdr.records_count, txn)
        except SequenceError as e:
            raise _PartitionError(e.error, e.message) from None
        if dup is not None:
            return _Issued(plog, log_append_time, None, dup)
        fut = plog.append_nowait(batch, hdr.last_offset_delta, max_ts)
        rec = states.record(hdr.producer_id, hdr.producer_epoch, hdr.base_sequence, hdr.records_count, fut,
                            txn, max_ts)
        if rec is not None:
            fut.add_done_callback(lambda f, rec=rec, pid=hdr.producer_id: _settle(states, pid, rec, f))
        t1 = time.monotonic()
        h.metrics.produce_encode.observe(t1 - t0)
        counters = h.metrics.partition(topic.name.canonical, partition, ledger)
        return _Issued(plog, log_append_time, fut, None, counters, len(batch), hdr.records_count, t1)
    except _PartitionError as e:
        return e
    except PartitionError as e:  # NOT_LEADER_OR_FOLLOWER (cluster mode), deleted meanwhile
        return _PartitionError(e.code.name, e.message)


async def _verify_transactional(ctx: RequestContext, plog: PartitionLog, states: Any, hdr: Any,
                                transactional_id: str | None, topic_name: str, partition: int) -> None:
    """Checks a transactional batch needs before the sequence checks: a transactional id on the request
    (Kafka answers TRANSACTIONAL_ID_AUTHORIZATION_FAILED without one), a producer-state snapshot before the
    partition's first transaction (restart recovery), and - for the first batch of a transaction on this
    partition - the coordinator's word that the partition is in the transaction (KIP-890 part 1), when
    a coordinator is there to ask. `topic_name` is the broker-global Kafka name, as the coordinator keeps it."""
    if not transactional_id:
        raise _PartitionError("TRANSACTIONAL_ID_AUTHORIZATION_FAILED",
                              "A transactional batch needs the request's transactional id")
    if hdr.producer_id < 0 or hdr.producer_epoch < 0:
        raise _PartitionError("INVALID_RECORD", "A transactional batch needs a producer id and epoch")
    await plog.ensure_snapshot()
    verifier = getattr(getattr(ctx.handler, "service", None), "transactions", None)
    if verifier is None or not states.needs_verification(hdr.producer_id, hdr.producer_epoch):
        return
    try:
        code = ErrorCode(await verifier.verify_partition(ctx.names.global_id(transactional_id), hdr.producer_id, hdr.producer_epoch,
                                                         topic_name, partition))
    except Exception as e:  # noqa: BLE001 - the coordinator could not answer: the producer retries
        log.warning("verifying %s-%d for transactional id %s failed: %r", topic_name, partition, transactional_id, e)
        code = ErrorCode.NOT_ENOUGH_REPLICAS
    if code == ErrorCode.NONE:
        return
    if code in _COORDINATOR_RETRIABLE:
        code = ErrorCode.NOT_ENOUGH_REPLICAS  # Kafka's mapping: a producer knows no coordinator errors here
    if code == ErrorCode.TRANSACTION_ABORTABLE and ctx.version < 11:
        code = ErrorCode.INVALID_TXN_STATE  # TRANSACTION_ABORTABLE is known to Produce v11+ only
    raise _PartitionError(code.name, f"Partition {topic_name}-{partition} is not part of the transaction of "
                          f"producer {hdr.producer_id} epoch {hdr.producer_epoch} ({code.name})")


_COORDINATOR_RETRIABLE = frozenset({ErrorCode.COORDINATOR_NOT_AVAILABLE, ErrorCode.COORDINATOR_LOAD_IN_PROGRESS,
                                    ErrorCode.NOT_COORDINATOR, ErrorCode.CONCURRENT_TRANSACTIONS})
_THREAD_RECOMPRESS_BYTES = 64 << 10
_TOPIC_CODECS = {"uncompressed": Compression.NONE, "gzip": Compression.GZIP, "snappy": Compression.SNAPPY,
                 "lz4": Compression.LZ4, "zstd": Compression.ZSTD}  # "producer": None, kept as sent
_LEVEL_CONFIG = {Compression.GZIP: "compression.gzip.level", Compression.LZ4: "compression.lz4.level",
                 Compression.ZSTD: "compression.zstd.level"}


def _level(configs: dict[str, str], codec: int, cfg: Any) -> int | None:
    name = _LEVEL_CONFIG.get(Compression(codec))
    return None if name is None else int(effective(configs, name, cfg))


def _validate_records(configs: dict[str, str], cfg: Any, hdr: Any, batch: Any, tp: str, append_time: bool) -> None:
    """Kafka's per-record checks (key on compacted topics, CreateTime within the timestamp bounds); raises
    _PartitionError naming every offending record by its index in the batch."""
    compacted = "compact" in effective(configs, "cleanup.policy", cfg)
    check_ts = not append_time
    now = int(time.time() * 1000)
    before = int(effective(configs, "message.timestamp.before.max.ms", cfg))
    after = int(effective(configs, "message.timestamp.after.max.ms", cfg))
    lo = now - before if before < LONG_MAX else None
    hi = now + after
    walk = compacted or (check_ts and (lo is not None or hdr.max_timestamp > hi))
    if not walk or hdr.is_control:
        return
    try:
        header, data = payload_of(batch)
        spans = record_spans(data, header.records_count)
    except CorruptRecordError as e:
        raise _PartitionError(e.error if hasattr(e, "error") else "CORRUPT_MESSAGE", str(e)) from None
    errors: list[tuple[int, str]] = []
    bad_ts = False
    for i, span in enumerate(spans):
        if compacted and span.key is None:
            errors.append((i, f"Compacted topic cannot accept message without key in topic partition {tp}"))
            continue
        ts = header.base_timestamp + span.timestamp_delta
        if check_ts and ts != -1 and ((lo is not None and ts < lo) or ts > hi):
            bad_ts = True
            errors.append((i, f"Timestamp {ts} of message with offset {header.base_offset + span.offset_delta} is "
                              f"out of range. The timestamp should be within [{now - before}, {hi}]"))
    if not errors:
        return
    if bad_ts:
        raise _PartitionError("INVALID_TIMESTAMP", "One or more records have been rejected due to invalid "
                              "timestamp", errors)
    shown = ", ".join(f"RecordError(batchIndex={i}, message='{m}')" for i, m in errors[:3])
    raise _PartitionError("INVALID_RECORD", f"One or more records have been rejected due to {len(errors)} record "
                          f"errors in total, and only showing the first three errors at most: [{shown}]", errors)


def recompress_batch(batch: Any, codec: int, level: int | None) -> bytearray:
    """The batch with its records compressed by `codec` instead (compression.type on the topic): the same
    header fields, a new attributes codec, length and CRC."""
    header, data = payload_of(batch)
    out = bytearray(batch[:HEADER_SIZE])
    _ATTR_TS.pack_into(out, 21, (header.attributes & ~COMPRESSION_MASK) | codec)
    out += compress(codec, data, level)
    _LEN.pack_into(out, 8, len(out) - 12)
    _CRC.pack_into(out, 17, crc32c(out[21:]))
    return out


_LEN = struct.Struct(">i")
_ATTR_TS = struct.Struct(">h")
_TS = struct.Struct(">q")
_CRC = struct.Struct(">I")


def restamp_log_append_time(batch: Any, now_ms: int) -> None:
    """LogAppendTime topics: set the timestamp-type bit and the max timestamp to the broker's clock, then
    recompute the CRC (both fields are CRC-covered), as Kafka's broker does. Consumers then read every
    record's timestamp as the batch max timestamp."""
    (attrs,) = _ATTR_TS.unpack_from(batch, 21)
    _ATTR_TS.pack_into(batch, 21, attrs | 0x08)
    _TS.pack_into(batch, 35, now_ms)
    _CRC.pack_into(batch, 17, crc32c(batch[21:]))


def _settle(states: Any, pid: int, rec: Any, fut: asyncio.Future[int]) -> None:
    if fut.cancelled() or fut.exception() is not None:
        states.forget(pid, rec)
    else:
        rec.base_offset = fut.result()


async def _finish(R: Any, index: int, outcome: _Issued | _PartitionError, metrics: BrokerMetrics) -> Any:
    if isinstance(outcome, _PartitionError):
        return R.PartitionProduceResponse(
            index=index, error_code=ErrorCode[outcome.error], base_offset=-1, log_append_time_ms=-1,
            log_start_offset=-1, error_message=outcome.message,
            record_errors=[R.PartitionProduceResponse.BatchIndexAndErrorMessage(
                batch_index=i, batch_index_error_message=m) for i, m in outcome.record_errors],
        )
    plog, log_append_time = outcome.plog, outcome.log_append_time
    try:
        if outcome.duplicate is not None:
            base = outcome.duplicate.base_offset
            if not isinstance(base, int):
                base = await asyncio.shield(base)
        else:
            assert outcome.append is not None
            base = await outcome.append
    except Exception as e:
        log.error("append to %s failed: %r", plog.name, e)
        return R.PartitionProduceResponse(
            index=index, error_code=ErrorCode.KAFKA_STORAGE_ERROR, base_offset=-1, log_append_time_ms=-1,
            log_start_offset=-1, error_message=f"append failed: {e}",
        )
    counters = outcome.counters
    if counters is not None:  # counted once durable; a retried duplicate appends nothing and is not counted
        metrics.produce_publish.observe(time.monotonic() - outcome.issued)
        counters.bytes_in += outcome.nbytes
        counters.records_in += outcome.nrecords
        counters.batches_in += 1
    return R.PartitionProduceResponse(
        index=index, error_code=0, base_offset=base, log_append_time_ms=log_append_time,
        log_start_offset=plog.log_start_offset, error_message=None,
    )
