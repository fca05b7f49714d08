"""Fetch (key 1): v4-v18.

- v13+ (KIP-516) names topics by id, in the request, its forgotten topics and the answer: each id is
  resolved to the topic (and the name this connection knows it by) once per fetch; an id this broker does
  not know answers UNKNOWN_TOPIC_ID on each of its partitions (retriable: the client refreshes its
  metadata). Fetch sessions of v13+ requests are keyed by topic id, as Kafka's (TopicIdPartition), so a
  topic deleted and created again under the same name is a different partition of the session.
- v14-v18 change nothing a consumer sends or gets here: v14's OFFSET_MOVED_TO_TIERED_STORAGE never happens
  (no tiered storage), v15's ReplicaState carries the replica id that v0-v14 sent at the top (follower
  fetches are refused either way), v16's NodeEndpoints go with NOT_LEADER_OR_FOLLOWER answers Kafka
  gives with a new leader (none here: partitions do not move while a client fetches them), v17's
  ReplicaDirectoryId and v18's HighWatermark are for follower fetches only. Kafka 4.4 consumers fetch at
  v18.
- Batches are sent as stored, with the base offset (from broker entry metadata) sent as its own 8-byte part
  in front of the rest of the stored batch: no copy of the payload (writelines of memoryviews).
- Zero copy (issue 27): on a plain-TCP connection (KafkaConnection.zero_copy: not TLS, fetchZeroCopy on) the
  log is read with zero_copy=True; where the storage allows it (the embedded ledger files, entries of 32 KiB
  or more on average) only each entry's headers and the batch's 61-byte header are kept, and the batch is a
  FileSpan of the ledger's file in the records (with localStoreVerifyChecksums, the default, for reads of 4 MiB
  or more, after the store checked the entry's CRC over the bytes it read from the page cache; a damaged entry
  ends the range there and answers KAFKA_STORAGE_ERROR when a fetch starts at it, as on the copy path), which
  the connection sends with os.sendfile (the page cache straight to the socket): one sendfile per batch. Batches
  stored before issue 27 carry the producer's base offset (0) instead of the log's: theirs is replaced as
  before, the 8 bytes and the rest of what was read from memory, the rest of the batch from the file.
- A fetch at an offset inside a batch returns the whole containing batch (clients skip the leading records).
- high watermark = last durable offset + 1; log start offset is always set (KoP left it unset).
- isolation_level READ_COMMITTED (1) reads only below the last stable offset (the first offset of the
  oldest open transaction, or the high watermark) and carries the aborted transactions overlapping the
  returned range (aborted_transactions, sorted by first offset: clients assume it); control batches
  (markers) are returned like data, as Kafka does - consumers need the ABORT markers. READ_UNCOMMITTED
  is untouched by transactions (aborted_transactions null, no per-batch work); its last_stable_offset is
  the partition's LSO once its producer state is loaded (anything transactional since the partition was
  opened loads it), the high watermark before.
- OFFSET_OUT_OF_RANGE below the log start offset and above the high watermark.
- A partition in error carries empty records, never null ones, as Kafka does: librdkafka drops a whole
  answer whose records are null (`invalid MessageSetSize -1`), which stranded consumers that needed an
  offset reset (issue 17). The other nullable fields are answered as Kafka 4.x does (checked field by
  field by tests/e2e/test_differential.py): aborted_transactions is null for READ_UNCOMMITTED reads, []
  for READ_COMMITTED ones and for unknown partitions; OFFSET_OUT_OF_RANGE carries watermarks -1.
- Partition and response byte limits as Kafka: the first batch of the response is returned even when it
  is larger than the limits, so a consumer can always make progress.
- min_bytes / max_wait long-poll: the request waits until an append to one of its partitions or max_wait
  (capped by fetchMaxWaitCapMs), then reads again. Interest in appends is registered only once a pass
  found too little (then any high watermark that moved during the pass means read again at once).
- A partition fetched at its high watermark (caught up) is answered without a read (issue 5: most of a
  many-partition consumer's partitions, every fetch).
- current_leader_epoch > our epoch gets UNKNOWN_LEADER_EPOCH, lower gets FENCED_LEADER_EPOCH.
- Back-pressure: record data is read only when the connection has room for it (KafkaConnection.fetch_room),
  so a client that pipelines fetches and reads its socket slowly costs about one response of memory.
- Fetch sessions (KIP-227, v7+): kop/kafka/fetch_sessions.py decides which partitions a request covers
  (an incremental request lists only changes) and which an answer carries (only partitions with records,
  an error, or a new high watermark / log start offset). Follower fetches (replica_id >= 0) are refused.
"""

from __future__ import annotations

import asyncio
import struct
import time
from collections.abc import Sized
from typing import TYPE_CHECKING

from kop.kafka import authorize
from kop.kafka.apis.common import topic_by_id
from kop.kafka.context import PartitionError, RequestContext
from kop.kafka.fetch_sessions import CachedPartition, FetchContext, TopicKey
from kop.offset.api import OffsetOutOfRange
from kop.protocol import ZERO_UUID
from kop.protocol.errors import ErrorCode
from kop.protocol.messages import FetchRequest, FetchResponse
from kop.storage.api import FileSpan, StorageError

if TYPE_CHECKING:
    from kop.kafka.connection import KafkaConnection
    from kop.metrics import BrokerMetrics, PartitionCounters
    from kop.offset.api import FetchedBatch, PartitionLog
    from kop.offset.cursor_cache import CursorCache
    from kop.protocol.messages import Records
    from kop.topics.manager import Topic

API_KEY = 1
VERSIONS = (4, 18)

_PartitionData = FetchResponse.PartitionData
#: bytes, records and batches a pass sent for one partition's counters
_Sent = tuple["PartitionCounters | None", int, int, int]

_OFFSET = struct.Struct(">q")
_RECORDS_COUNT = struct.Struct(">i")  # at byte 57 of a v2 batch


class _Part:
    __slots__ = ("index", "fetch_offset", "max_bytes", "epoch", "topic", "plog", "ledger", "error", "message",
                 "counters", "seen_hw", "known")

    def __init__(self, index: int, fetch_offset: int, max_bytes: int, epoch: int) -> None:
        self.index = index
        self.fetch_offset = fetch_offset
        self.max_bytes = max_bytes
        self.epoch = epoch
        self.topic: Topic | None = None
        self.plog: PartitionLog | None = None
        self.ledger = ""
        self.error = 0
        self.message: str | None = None
        self.counters: PartitionCounters | None = None
        self.seen_hw = -1  # the high watermark when the last pass read this partition
        self.known: CachedPartition | None = None  # incremental fetch: what the session's client was told


async def handle(request: RequestContext, req: FetchRequest) -> FetchResponse:
    conn, h = request.conn, request.handler  # (`ctx` below is the fetch session's context)
    R = FetchResponse
    by_id = request.version >= 13
    replica_id = req.replica_id if request.version < 15 else \
        (req.replica_state.replica_id if req.replica_state is not None else -1)
    if replica_id >= 0:
        return R(throttle_time_ms=0, error_code=ErrorCode.NOT_LEADER_OR_FOLLOWER, session_id=0, responses=[])
    ctx = h.fetch_sessions.begin(
        request.version, req.session_id, req.session_epoch,
        ((ft.topic_id if by_id else ft.topic,
          ((fp.partition, fp.fetch_offset, fp.partition_max_bytes, fp.current_leader_epoch) for fp in ft.partitions))
         for ft in req.topics),
        ((ft.topic_id if by_id else ft.topic, ft.partitions) for ft in req.forgotten_topics_data),
    )
    if ctx.error:
        return R(throttle_time_ms=0, error_code=ctx.error, session_id=0, responses=[])
    committed = req.isolation_level == 1
    plan, names = await _plan(request, ctx, committed)

    max_wait = min(max(req.max_wait_ms, 0), h.config.fetchMaxWaitCapMs) / 1000
    loop = asyncio.get_running_loop()
    deadline = loop.time() + max_wait
    metrics = h.metrics
    while True:
        if h.service.topics.paused:  # cluster mode: stopped serving while the fetch waited (lease, session)
            _refuse_all(plan)
        total, responses, sent = await _read_all(conn, R, plan, req.max_bytes, metrics,
                                                 [] if committed else None)
        remaining = deadline - loop.time()
        live = [(p, plog) for _, parts in plan for p in parts if (plog := p.plog) is not None and not p.error]
        if total >= req.min_bytes or remaining <= 0 or not live or h.draining:
            _count_sent(sent)
            conn.hold(total)
            return _answer(R, ctx, responses, names)
        # Interest is registered only when the fetch is going to wait (an answer with data needs none). One
        # future for the whole fetch, registered with every live partition and unregistered after the wait
        # (a future per partition and asyncio.wait over them cost ~25% of a 1 000-partition consumer's
        # fetches in a profile; left registered, they piled up on idle partitions). An append that landed
        # while the pass was reading would be missed, so: register, then compare each high watermark with
        # the one the pass saw - any move means read again now, as a woken wait would.
        wake: asyncio.Future[None] = loop.create_future()
        for _, plog in live:
            plog.add_append_waiter(wake)
        try:
            if wake.done() or any(plog.high_watermark != p.seen_hw for p, plog in live):
                continue
            # This pass is discarded: hold nothing while the long poll waits (a waiting fetch that kept its
            # batches referenced would pin up to max_bytes each, and a client may pipeline many).
            del responses, sent
            conn.hold(0)
            metrics.waiting_fetches += 1
            timer = loop.call_later(remaining, _wake, wake)
            try:
                await wake  # an append, a closing partition, or max_wait: the next pass answers if time is up
            finally:
                timer.cancel()
                metrics.waiting_fetches -= 1
        finally:
            for _, plog in live:
                plog.discard_append_waiter(wake)


async def _plan(request: RequestContext, ctx: FetchContext, committed: bool
                ) -> tuple[list[tuple[TopicKey, list[_Part]]], dict[TopicKey, str]]:
    """Each asked partition resolved once per fetch: READ authorized, topic and log found (their errors kept
    per partition), and, for read_committed, the LSO and aborted index loaded. Also the name of each topic
    the request names (by name, or by id from v13: the name this connection knows it by, "" when unknown)."""
    h = request.handler
    plan: list[tuple[TopicKey, list[_Part]]] = []
    names: dict[TopicKey, str] = {}
    by_id: dict[bytes, Topic | None] = {}
    for key, _ in ctx.partitions:
        if key in names:
            continue
        if isinstance(key, bytes):
            found = topic_by_id(h, key, request.names)
            names[key], by_id[key] = found if found is not None else ("", None)
        else:
            names[key] = key
    topics: dict[TopicKey, Topic | None] = {}  # a session's order may list a topic more than once
    denied = authorize.denied_topics(request, authorize.Op.READ, (names[k] for k, _ in ctx.partitions))
    for key, listed in ctx.partitions:
        name = names[key]
        parts = [_Part(*fp) for fp in listed]
        if ctx.incremental:
            for p in parts:
                p.known = ctx.known(key, p.index)
        unknown_id = isinstance(key, bytes) and not name
        if unknown_id or name in denied:
            for p in parts:
                p.error = ErrorCode.UNKNOWN_TOPIC_ID if unknown_id else ErrorCode.TOPIC_AUTHORIZATION_FAILED
            plan.append((key, parts))
            continue
        if key in topics:
            topic = topics[key]
        else:
            topic = topics[key] = by_id[key] if isinstance(key, bytes) else await request.find_topic(name)
        for p in parts:
            try:
                plog = p.plog = await request.partition_log(topic, p.index, p.epoch)
                if committed:
                    await plog.load_transactions()  # the LSO and the aborted index
            except PartitionError as e:
                p.error = e.code
                continue
            assert topic is not None  # partition_log refuses a missing topic
            p.topic = topic
            p.ledger = plog.name  # = topic.ledger_name(p.index), without quoting it again per fetch
            p.counters = h.metrics.partition(topic.name.canonical, p.index, p.ledger)
        plan.append((key, parts))
    return plan, names


def _refuse_all(plan: list[tuple[TopicKey, list[_Part]]]) -> None:
    """The broker is not serving now (kop/cluster/lease.py): nothing is read from the logs it held - another
    broker may own them by now; every partition answers NOT_LEADER_OR_FOLLOWER (retriable)."""
    for _, parts in plan:
        for p in parts:
            if not p.error:
                p.error = ErrorCode.NOT_LEADER_OR_FOLLOWER


def _wake(fut: asyncio.Future[None]) -> None:
    if not fut.done():
        fut.set_result(None)


def _answer(R: type[FetchResponse], ctx: FetchContext, results: list[tuple[TopicKey, list[_PartitionData]]],
            names: dict[TopicKey, str]) -> FetchResponse:
    if ctx.session_id:
        results = ctx.answer(results, partition_of=_partition_of, must_answer=_must_answer)
    return R(throttle_time_ms=0, error_code=0, session_id=ctx.session_id,
             responses=[R.FetchableTopicResponse(topic=names[key], topic_id=key if isinstance(key, bytes) else ZERO_UUID,
                                                 partitions=presps) for key, presps in results])


def _partition_of(r: _PartitionData) -> int:
    return r.partition_index


def _must_answer(r: _PartitionData, cached: CachedPartition) -> bool:
    """KIP-227: whether a session's client must hear about this partition (and what it now knows)."""
    changed = (r.error_code != 0 or bool(r.records) or r.high_watermark != cached.high_watermark
               or r.log_start_offset != cached.log_start_offset)
    cached.high_watermark = r.high_watermark
    cached.log_start_offset = r.log_start_offset
    return changed


def _count_sent(sent: list[_Sent]) -> None:
    """Bytes/records out are counted for the pass that is answered, not for passes a long poll discarded."""
    for counters, nbytes, nrecords, nbatches in sent:
        if counters is None:  # never: a partition that was read has its counters
            continue
        counters.bytes_out += nbytes
        counters.records_out += nrecords
        counters.batches_out += nbatches


async def _read_all(conn: KafkaConnection, R: type[FetchResponse], plan: list[tuple[TopicKey, list[_Part]]],
                    response_max: int, metrics: BrokerMetrics, aborted: list[FetchResponse.AbortedTransaction] | None,
                    ) -> tuple[int, list[tuple[TopicKey, list[_PartitionData]]], list[_Sent]]:
    await conn.fetch_room(response_max)  # back-pressure: a client that does not read its answers gets no more data read
    started = time.monotonic()
    total = 0
    responses = []
    sent: list[_Sent] = []
    cache = conn.cursor_cache
    zero_copy = conn.zero_copy
    for key, parts in plan:
        presps = []
        for p in parts:
            if p.error:
                presps.append(_error(R, p.index, p.error))
                continue
            plog = p.plog
            assert plog is not None  # a partition without an error has its log
            hw = p.seen_hw = plog.high_watermark
            if aborted is not None and p.fetch_offset < hw:
                presp, size = await _read_committed(R, p, plog, hw, max(response_max - total, 0), total == 0,
                                                    cache, sent, zero_copy)
                presps.append(presp)
                total += size
                continue
            if p.fetch_offset == hw:
                # Caught up (most partitions of a many-partition consumer): what read() answers at the high
                # watermark - no data, nothing to remember - without its coroutine and cursor lookups. In an
                # incremental fetch whose client already knows these watermarks, not even that (KIP-227).
                known = p.known
                if known is not None and known.high_watermark == hw and known.log_start_offset == plog.log_start_offset:
                    continue
                presps.append(R.PartitionData(
                    partition_index=p.index, error_code=0, high_watermark=hw, last_stable_offset=plog.last_stable_offset,
                    log_start_offset=plog.log_start_offset, aborted_transactions=aborted, preferred_read_replica=-1,
                    records=b"",
                ))
                continue
            budget = min(p.max_bytes, max(response_max - total, 0))
            records: list[bytes | memoryview | Sized] = []
            try:
                hint = cache.get(p.ledger, p.fetch_offset)
                res = await plog.read(p.fetch_offset, budget, hint=hint, min_one=(total == 0), zero_copy=zero_copy)
            except OffsetOutOfRange:
                presps.append(R.PartitionData(
                    partition_index=p.index, error_code=ErrorCode.OFFSET_OUT_OF_RANGE, high_watermark=-1,
                    last_stable_offset=-1, log_start_offset=-1, aborted_transactions=None,
                    preferred_read_replica=-1, records=b"",
                ))
                continue
            except StorageError:  # damaged entries (logged by the partition log): this partition only
                presps.append(_error(R, p.index, ErrorCode.KAFKA_STORAGE_ERROR))
                continue
            size, count = _add_batches(res.batches, records)
            if res.batches:
                sent.append((p.counters, size, count, len(res.batches)))
            if res.batches and res.next_position is not None:
                cache.put(p.ledger, res.next_offset, res.next_position)
            total += size
            hw = plog.high_watermark
            presps.append(R.PartitionData(
                partition_index=p.index, error_code=0, high_watermark=hw, last_stable_offset=plog.last_stable_offset,
                log_start_offset=plog.log_start_offset, aborted_transactions=aborted, preferred_read_replica=-1,
                records=records if records else b"",
            ))
        responses.append((key, presps))
    metrics.fetch_read.observe(time.monotonic() - started)
    return total, responses, sent


async def _read_committed(R: type[FetchResponse], p: _Part, plog: PartitionLog, hw: int, response_left: int,
                          first: bool, cache: CursorCache, sent: list[_Sent], zero_copy: bool
                          ) -> tuple[_PartitionData, int]:
    """One partition of a READ_COMMITTED fetch below the high watermark: the batches below the last
    stable offset and the aborted transactions among them; (partition data, bytes returned)."""
    lso = plog.last_stable_offset
    log_start = plog.log_start_offset

    def answer(records: Records, aborted: list[FetchResponse.AbortedTransaction]) -> _PartitionData:
        return R.PartitionData(
            partition_index=p.index, error_code=0, high_watermark=hw, last_stable_offset=lso,
            log_start_offset=log_start, aborted_transactions=aborted, preferred_read_replica=-1, records=records)

    if p.fetch_offset >= lso:
        if p.fetch_offset < log_start:
            return _out_of_range(R, p.index), 0
        return answer(b"", []), 0  # nothing stable to read yet
    budget = min(p.max_bytes, response_left)
    try:
        res = await plog.read(p.fetch_offset, budget, hint=cache.get(p.ledger, p.fetch_offset), min_one=first,
                              zero_copy=zero_copy)
    except OffsetOutOfRange:
        return _out_of_range(R, p.index), 0
    except StorageError:
        return _error(R, p.index, ErrorCode.KAFKA_STORAGE_ERROR), 0
    batches = res.batches
    cut = next((i for i, fb in enumerate(batches) if fb.base_offset >= lso), None)
    if cut is not None:
        if cut < len(batches):
            cache.put(p.ledger, batches[cut].base_offset, batches[cut].position)
        batches = batches[:cut]
    elif batches and res.next_position is not None:
        cache.put(p.ledger, res.next_offset, res.next_position)
    if not batches:
        return answer(b"", []), 0
    records: list[bytes | memoryview | Sized] = []
    size, count = _add_batches(batches, records)
    sent.append((p.counters, size, count, len(batches)))
    aborted = [R.PartitionData.AbortedTransaction(producer_id=t.producer_id, first_offset=t.first_offset)
               for t in plog.aborted_transactions(p.fetch_offset, batches[-1].last_offset + 1)]
    return answer(records, aborted), size


def _add_batches(batches: list[FetchedBatch], records: list[bytes | memoryview | Sized]) -> tuple[int, int]:
    """The batches as the parts of a partition's records: each batch's base offset (8 bytes, in place of the
    stored one) and the rest of what was read of it; after a zero-copy read, one span of the ledger's file
    for the whole batch when it was stored with its log base offset (kop/offset/interceptor.py, since issue
    27), else the 8 bytes, the rest of the head and a span of the rest (sent from the file by the
    connection). (bytes, records) sent."""
    size = count = 0
    append = records.append
    for fb in batches:
        batch = fb.batch
        rest = fb.rest
        if rest is None:
            append(_OFFSET.pack(fb.base_offset))
            append(batch[8:])
            size += len(batch)
        elif _OFFSET.unpack_from(batch)[0] == fb.base_offset:  # stored with its offset: all from the file
            append(FileSpan(rest.file, rest.offset - len(batch), rest.length + len(batch)))
            size += len(batch) + rest.length
        else:  # stored before issue 27 (the producer's base offset): the batch header from memory
            append(_OFFSET.pack(fb.base_offset))
            append(batch[8:])
            append(rest)
            size += len(batch) + rest.length
        count += _RECORDS_COUNT.unpack_from(batch, 57)[0]
    return size, count


def _out_of_range(R: type[FetchResponse], index: int) -> _PartitionData:
    return R.PartitionData(
        partition_index=index, error_code=ErrorCode.OFFSET_OUT_OF_RANGE, high_watermark=-1,
        last_stable_offset=-1, log_start_offset=-1, aborted_transactions=None,
        preferred_read_replica=-1, records=b"",
    )


def _error(R: type[FetchResponse], index: int, code: int) -> _PartitionData:
    return R.PartitionData(
        partition_index=index, error_code=code, high_watermark=-1, last_stable_offset=-1, log_start_offset=-1,
        aborted_transactions=[], preferred_read_replica=-1, records=b"",
    )
