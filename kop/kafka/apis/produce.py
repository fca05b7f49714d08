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
- Idempotent producers: sequence checks and de-duplication of retried batches (kop.kafka.idempotence).
  Transactional batches are refused (transactions are not implemented; InitProducerId refuses
  transactional ids) with INVALID_RECORD, and so are client-sent control batches.
- Auto-creation on produce follows allowAutoTopicCreation.
- Topics with cleanup.policy=compact refuse records without a key (INVALID_RECORD, Kafka's message); only
  there are batches decompressed and walked record by record, as Kafka's validator does.
"""

from __future__ import annotations

import asyncio
import logging
import struct
import time
from typing import TYPE_CHECKING, Any, NamedTuple

from kop.kafka.apis.common import LEADER_EPOCH
from kop.kafka.context import PartitionError, RequestContext
from kop.kafka.idempotence import BatchRecord, SequenceError
from kop.protocol import api_info
from kop.protocol.compaction import has_null_key
from kop.protocol.errors import ErrorCode
from kop.protocol.records import CorruptRecordError, crc32c, iter_batches
from kop.topics.manager import TopicError
from kop.topics.topic_config import effective

if TYPE_CHECKING:
    from kop.metrics import BrokerMetrics, PartitionCounters
    from kop.offset.api import PartitionLog

log = logging.getLogger(__name__)

API_KEY = 0
VERSIONS = (0, 12)
REQUEST_FLOOR = 3

_EPOCH_BYTES = struct.pack(">i", LEADER_EPOCH)


class _PartitionError(Exception):
    def __init__(self, error: str, message: str | None = None) -> None:
        super().__init__(message or error)
        self.error = error
        self.message = message


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
    try:
        if prev is not None and not prev.done():
            await prev
        results: list[tuple[Any, list[tuple[int, Any]]]] = []
        for td in req.topic_data:
            parts: list[tuple[int, Any]] = []
            for pd in td.partition_data:
                parts.append((pd.index, await _issue(ctx, td.name, pd.index, pd.records, acks)))
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
                 acks: int) -> _Issued | _PartitionError:
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
        if hdr.is_transactional:
            raise _PartitionError("INVALID_RECORD", "Transactional batches are not supported by this broker")
        if "compact" in effective(topic.configs, "cleanup.policy", cfg):
            # Kafka's LogValidator: compaction needs a key on every record (this decompresses the batch).
            try:
                keyless = has_null_key(batch)
            except CorruptRecordError as e:
                raise _PartitionError(e.error, str(e)) from None
            if keyless:
                raise _PartitionError("INVALID_RECORD", "Compacted topic cannot accept message without key in "
                                      f"topic partition {topic_name}-{partition}.")
        # partitionLeaderEpoch is outside the CRC: stamp ours so consumers see one consistent epoch.
        batch[12:16] = _EPOCH_BYTES
        log_append_time = -1
        max_ts = hdr.max_timestamp
        if effective(topic.configs, "message.timestamp.type", cfg) == "LogAppendTime":
            log_append_time = int(time.time() * 1000)
            restamp_log_append_time(batch, log_append_time)
            max_ts = log_append_time
        plog = await ctx.partition_log(topic, partition)
        ledger = topic.name.ledger_name(partition)
        states = await h.producer_state(ledger, plog)
        try:
            dup = states.check(hdr.producer_id, hdr.producer_epoch, hdr.base_sequence, hdr.records_count)
        except SequenceError as e:
            raise _PartitionError(e.error, e.message) from None
        if dup is not None:
            return _Issued(plog, log_append_time, None, dup)
        fut = plog.append_nowait(batch, hdr.last_offset_delta, max_ts)
        rec = states.record(hdr.producer_id, hdr.producer_epoch, hdr.base_sequence, hdr.records_count, fut)
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
