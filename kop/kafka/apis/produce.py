"""Produce (key 0): v3-v13 served; v0-v13 advertised.

- v0-v2 stay in the advertised range because older librdkafka decides which compression codecs a broker
  supports from it (KAFKA-18659), but such requests are refused, as in Kafka 4.x.
- v13 (KIP-516, what Kafka 4.4 clients send) names each topic by its id instead of its name (the ids
  Metadata answers: Topic.topic_id) and the answer echoes the id. An id this broker does not know gets
  UNKNOWN_TOPIC_ID on each of its partitions (retriable: the client refreshes its metadata); an id is
  never auto-created. Everything else is v12's.
- acks 0, 1 and -1 (all). With one ledger store there are no followers: acks=1 and acks=all both answer
  when the entry is durable under the store's policy (KoP did the same with BookKeeper's ack quorum).
  acks=0 gets no response at all.
- Each partition must carry exactly one magic-v2 batch (as Kafka requires since v3). The batch is kept
  opaque: header checks and CRC32C, never a per-record walk, compressed batches stay compressed. Only
  bytes outside the CRC are touched (partition leader epoch), except for LogAppendTime topics where the
  max timestamp and timestamp-type bit are rewritten and the CRC recomputed, as Kafka does.
- Everything a batch meets once it is decoded - the topic's write rules (size, keys on compacted topics,
  timestamp bounds, compression.type recompression, LogAppendTime restamping), idempotence, the transaction
  a transactional batch opens and its verification with the transaction coordinator (KIP-890 part 1) - is
  the partition seam's (kop/topics/partition.py, kop/topics/write_rules.py), shared with Pulsar SEND and the
  coordinators. Its refusal carries Kafka's error, answered here as is, with v8+'s `record_errors` naming
  each offending record. Two rules are Produce's own: TRANSACTION_ABORTABLE becomes INVALID_TXN_STATE
  below v11 (it is known to v11+ only), and a transactional v12+ request comes from a transaction.version 2
  producer (KIP-890 part 2; a TV1 producer stays at v11 inside a transaction), whose first batch of a
  transaction on a partition adds the partition to the transaction at the coordinator (the "implicit
  AddPartitionsToTxn", kop/coordinator/transactions/coordinator.py's add_partition) instead of being checked
  against it; below v12 it is checked (KIP-890 part 1).
- Auto-creation on produce follows allowAutoTopicCreation.
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import TYPE_CHECKING, NamedTuple

from kop.kafka import authorize
from kop.kafka.apis.common import names_from_ids
from kop.kafka.context import PartitionError, RequestContext
from kop.protocol.errors import ErrorCode
from kop.protocol.messages import ProduceRequest, ProduceResponse
from kop.protocol.records import CorruptRecordError, iter_batches
from kop.topics.manager import TopicError
from kop.topics.partition import Issued, Partition, Writer
from kop.topics.write_rules import AppendRefused

if TYPE_CHECKING:
    from kop.metrics import BrokerMetrics, PartitionCounters

log = logging.getLogger(__name__)


class AppendFailureLog:
    """Failed appends, logged at most once per partition and cause per `interval` seconds; the next line
    says how many were held back. Why: when a ledger is fenced or its bookies are gone every produce to the
    partition fails until the producer's retries find the new state - hundreds of identical ERROR lines
    per partition (issue #24) that drown the one that matters. The cause is the innermost exception's
    class (LedgerFencedError, NotEnoughBookiesError, ...), so a new kind of failure is logged at once."""

    def __init__(self, interval: float = 10.0) -> None:
        self.interval = interval
        self._last: dict[tuple[str, str], tuple[float, int]] = {}  # (partition, cause) -> (logged at, held)

    def failed(self, partition: str, exc: BaseException, now: float | None = None) -> bool:
        """Log this failure unless one like it was logged recently; True when a line was written."""
        inner = exc
        while inner.__cause__ is not None:
            inner = inner.__cause__
        key = (partition, type(inner).__name__)
        now = time.monotonic() if now is None else now
        last = self._last.get(key)
        if last is not None and now - last[0] < self.interval:
            self._last[key] = (last[0], last[1] + 1)
            return False
        if len(self._last) >= 10_000:  # forget partitions that stopped failing
            self._last = {k: v for k, v in self._last.items() if now - v[0] < self.interval}
        self._last[key] = (now, 0)
        held = last[1] if last is not None else 0
        log.error("append to %s failed: %r%s", partition, exc,
                  f" ({held} more like it in the last {now - last[0]:.0f}s not logged)" if last and held else "")
        return True


_append_failures = AppendFailureLog()

API_KEY = 0
VERSIONS = (0, 13)
REQUEST_FLOOR = 3


class _PartitionError(Exception):
    def __init__(self, error: str, message: str | None = None,
                 record_errors: list[tuple[int, str]] | None = None) -> None:
        super().__init__(message or error)
        self.error = error
        self.message = message
        self.record_errors = record_errors or []


class _Started(NamedTuple):
    """One partition's append, started by the partition seam (or found to repeat an earlier batch)."""

    partition: Partition
    issued: Issued
    counters: PartitionCounters | None  # counted once durable; a duplicate appends nothing
    started: float  # monotonic time the append was issued (produce_publish latency)


async def handle(ctx: RequestContext, req: ProduceRequest) -> ProduceResponse | None:
    R = ProduceResponse
    acks = req.acks
    # Appends of pipelined produce requests on one connection must be issued in arrival order; each request
    # waits until the previous one has issued its appends (not until they are durable).
    prev = ctx.conn.produce_chain
    issued: asyncio.Future[None] = asyncio.get_running_loop().create_future()
    ctx.conn.produce_chain = issued
    unknown_ids = names_from_ids(ctx, req.topic_data) if ctx.version >= 13 else set()
    denied = authorize.produce_denied(ctx, req)  # {name: error} of topics this principal may not write to
    try:
        if prev is not None and not prev.done():
            await prev
        results: list[tuple[ProduceRequest.TopicProduceData, list[tuple[int, _Started | _PartitionError]]]] = []
        for i, td in enumerate(req.topic_data):
            parts: list[tuple[int, _Started | _PartitionError]] = []
            for pd in td.partition_data:
                if i in unknown_ids:
                    parts.append((pd.index, _PartitionError("UNKNOWN_TOPIC_ID")))
                    continue
                parts.append((pd.index, _PartitionError(denied[td.name]) if td.name in denied
                              else await _issue(ctx, td.name, pd.index, pd.records, acks,
                                                req.transactional_id)))
            results.append((td, parts))
    finally:
        if not issued.done():
            issued.set_result(None)
    if acks not in (-1, 0, 1):
        pass  # every partition already carries INVALID_REQUIRED_ACKS
    responses = []
    for td, parts in results:
        presps = []
        for index, outcome in parts:
            presps.append(await _finish(R, index, outcome, ctx.metrics))
        responses.append(R.TopicProduceResponse(name=td.name, topic_id=td.topic_id, partition_responses=presps))
    if acks == 0:
        return None
    return R(responses=responses, throttle_time_ms=0)


async def _issue(ctx: RequestContext, topic_name: str, partition: int, records: memoryview | None,
                 acks: int, transactional_id: str | None) -> _Started | _PartitionError:
    """Decode, and hand the batch to the partition seam, which applies the rules and starts the append;
    returns the started append or the partition's error. Nothing here waits for durability."""
    t0 = time.monotonic()
    try:
        if acks not in (-1, 0, 1):
            raise _PartitionError("INVALID_REQUIRED_ACKS")
        try:
            topic = await ctx.lookup_topic(topic_name, auto_create=True)
        except TopicError as e:
            raise _PartitionError(e.error, e.message) from None
        if topic is None:
            raise _PartitionError("UNKNOWN_TOPIC_OR_PARTITION", f"Topic {topic_name} does not exist")
        if not 0 <= partition < topic.partitions:
            raise _PartitionError("UNKNOWN_TOPIC_OR_PARTITION", f"Partition {partition} does not exist")
        if records is None or len(records) == 0:
            raise _PartitionError("INVALID_RECORD", "No record batch in the request")
        try:
            batches = list(iter_batches(records))
        except CorruptRecordError as e:
            raise _PartitionError(getattr(e, "error", "CORRUPT_MESSAGE"), str(e)) from None
        if len(batches) != 1:
            raise _PartitionError("INVALID_RECORD", "Produce v3+ must carry exactly one record batch per partition")
        hdr, batch = batches[0]
        seam = await ctx.partition(topic, partition)
        txn_id = ctx.names.global_id(transactional_id) if transactional_id else transactional_id
        txns = ctx.services.transactions
        try:
            issued = await seam.issue(batch, Writer.KAFKA, hdr, transactional_id=txn_id,
                                      verifier=txns.implicit_adder() if ctx.version >= 12 else txns,
                                      kafka_topic=ctx.topics.kafka_name(topic.name), client_name=topic_name)
        except AppendRefused as e:
            error = e.error
            if error == "TRANSACTION_ABORTABLE" and ctx.version < 11:
                error = "INVALID_TXN_STATE"  # TRANSACTION_ABORTABLE is known to Produce v11+ only
            raise _PartitionError(error, e.message, e.record_errors) from None
        if issued.durable is None:
            return _Started(seam, issued, None, t0)
        t1 = time.monotonic()
        h = ctx.handler
        h.metrics.produce_encode.observe(t1 - t0)
        counters = h.metrics.partition(topic.name.canonical, partition, topic.ledger_name(partition))
        return _Started(seam, issued, counters, t1)
    except _PartitionError as e:
        return e
    except PartitionError as e:  # NOT_LEADER_OR_FOLLOWER (cluster mode), deleted meanwhile
        return _PartitionError(e.code.name, e.message)


async def _finish(R: type[ProduceResponse], index: int, outcome: _Started | _PartitionError,
                  metrics: BrokerMetrics) -> ProduceResponse.PartitionProduceResponse:
    if isinstance(outcome, _PartitionError):
        return R.PartitionProduceResponse(
            index=index, error_code=ErrorCode[outcome.error], base_offset=-1, log_append_time_ms=-1,
            log_start_offset=-1, error_message=outcome.message,
            record_errors=[R.PartitionProduceResponse.BatchIndexAndErrorMessage(
                batch_index=i, batch_index_error_message=m) for i, m in outcome.record_errors],
        )
    issued = outcome.issued
    plog = outcome.partition.log
    try:
        base = await issued.base_offset()
    except Exception as e:
        _append_failures.failed(plog.name, e)
        return R.PartitionProduceResponse(
            index=index, error_code=ErrorCode.KAFKA_STORAGE_ERROR, base_offset=-1, log_append_time_ms=-1,
            log_start_offset=-1, error_message=f"append failed: {e}",
        )
    counters = outcome.counters
    if counters is not None:  # counted once durable; a retried duplicate appends nothing and is not counted
        metrics.produce_publish.observe(time.monotonic() - outcome.started)
        counters.bytes_in += issued.nbytes
        counters.records_in += issued.nrecords
        counters.batches_in += 1
    return R.PartitionProduceResponse(
        index=index, error_code=0, base_offset=base, log_append_time_ms=issued.log_append_time,
        log_start_offset=plog.log_start_offset, error_message=None,
    )
