"""Subscriptions of one partition: a cursor, its consumers, and the dispatcher that pushes MESSAGEs to them.

State per subscription is Pulsar's managed cursor (kop/managed_ledger/cursor.py): mark-delete position M (the
entries up to it are acknowledged) and the individually acknowledged entries after it; durable subscriptions
persist it in the metadata store (coalesced: at most one write in flight, the latest state wins) and recover it
when the partition is served again (a restart, a takeover); non-durable ones (readers) keep it in memory and go
with their last consumer. Reading goes by Kafka offset over the same partition log the Kafka handler serves
(kop/offset/api.py), one stored Kafka batch = one Pulsar entry, converted at the edge (kop/pulsar/convert.py) and
cached per partition so several subscriptions convert an entry once. A one-record batch goes out as a plain
(non-batched) Pulsar entry (convert.unbatched), so ids match what an unbatched producer's receipts said.

Dispatch follows Pulsar's: FLOW permits count messages (an entry of N messages takes N, and may overshoot);
Exclusive has one consumer; Failover sends to the active consumer - consumers sorted by priority level then name,
the active one is sorted[partition mod n] - and tells every consumer ACTIVE_CONSUMER_CHANGE when it changes,
rewinding to M + 1 so the new one gets what was not acknowledged; Shared round-robins entries over consumers with
permits, and a consumer's unacknowledged entries go back for replay (before new ones) when it leaves or asks for
redelivery, with the redelivery count raised in the latter case. Exclusive/Failover redelivery rewinds to M + 1.

Confluent's prefix (issue #25, docs/pulsar.md "Schema ids"): a record value that starts with 0x00 + a Confluent id
of a version of this topic's schema goes out without those 5 bytes, and its entry names that version
(MessageMetadata.schema_version; kop/pulsar/convert.py says what a batch mixing ids gives). A Pulsar producer's
batch, which carries its version (stamp_version), loses only prefixes naming that very version. The partition keeps
the topic's id -> version map (``PartitionState.schema_ids``, kop/pulsar/schema_ids.py), filled on demand: a
conversion reports the ids it did not know, the dispatcher asks the schema store for them (each id at most once per
interval, a few per round, so values that merely look prefixed cost little) and converts again when it learnt one.
Values without a 0x00 first byte cost one byte compare.

Key_Shared sends an entry only to its key's consumer (kop/pulsar/key_shared.py says how keys are hashed and
placed, and how a key's order is kept while consumers come and go).

Delayed delivery (kop/pulsar/delayed.py): on Shared and Key_Shared subscriptions an entry whose deliver_at_time is
ahead is read, kept outstanding (M stays before it) and held in the subscription's tracker instead of being sent;
when it falls due it joins the replay queue. The dispatcher's waits end at the next entry's time.

Differences from Pulsar's broker: no batch-index acknowledgement (an ack carrying an
ack_set is ignored, as Pulsar does with acknowledgmentAtBatchIndexLevelEnabled=false, its default); no
per-consumer unacked-message limits; the redelivery count lives in memory, as in Pulsar.
"""

from __future__ import annotations

import asyncio
import logging
import struct
import time
from collections import OrderedDict, deque
from typing import TYPE_CHECKING, Any

from kop.aio import run_to_end
from kop.managed_ledger import Position
from kop.managed_ledger.cursor import NEXT_OFFSET, CursorInfo
from kop.offset.api import FetchedBatch, NoSuchEntry, OffsetOutOfRange, PartitionLog
from kop.offset.entry_format import producer_name_of
from kop.protocol.records import parse_batch_header
from kop.pulsar.codec import batch as pbatch
from kop.pulsar.codec import commands as c
from kop.pulsar.codec.framing import encode_headers_and_payload, encode_payload_command
from kop.pulsar.compacted import CompactedView
from kop.pulsar.convert import ConversionError, PulsarEntry, kafka_to_pulsar, unbatched
from kop.pulsar.dedup import Deduplication
from kop.pulsar.delayed import DelayedTracker
from kop.pulsar.key_shared import Selector, key_hash, sticky_key
from kop.pulsar.schema_ids import SchemaIdMap
from kop.pulsar.waiters import WaitQueue
from kop.schemas.versions import carried_version

if TYPE_CHECKING:
    from kop.pulsar.connection import PulsarConnection
    from kop.pulsar.handler import PulsarProtocolHandler
    from kop.pulsar.produce import Producer, WaitingProducer
    from kop.topics.partition import Partition

log = logging.getLogger(__name__)

EXCLUSIVE, SHARED, FAILOVER, KEY_SHARED = 0, 1, 2, 3
READ_BYTES = 1024 * 1024  # per read of the log (Pulsar: dispatcherMaxReadSizeBytes is 5 MiB)
# Entries per read of new ones: at most what the consumers have permits for (an entry takes one per message), and
# at most this many (Pulsar reads min(permits, dispatcherMaxReadBatchSize = 100) entries; more here, since a read
# from BookKeeper costs a round trip or three whatever its size, and a consumer's queue is 1000 by default).
READ_ENTRIES = 1000
MIN_BATCH_BYTES = 61  # a Kafka record batch's header: no stored entry is smaller (the first read's estimate)
CONVERTED_CACHE = 512  # converted entries kept per partition
NOT_SERVING_RECHECK_S = 0.2  # cluster mode: a dispatcher of a broker that is not serving looks again this often
# Kafka compression codec id (none 0, gzip 1, snappy 2, lz4 3, zstd 4) -> Pulsar CompressionType
PULSAR_CODEC = {0: 0, 1: 2, 2: 4, 3: 1, 4: 3}
# a converted entry: (headers and payload, messages, Key_Shared hash, Confluent ids its values named unknown, its
# deliver_at_time in epoch ms, -1 for none)
Converted = tuple[bytes, int, int, tuple[int, ...], int]


class Entry:
    __slots__ = ("position", "base_offset", "last_offset", "hash", "kept")

    def __init__(self, position: Position, base_offset: int, last_offset: int, hash_: int = 0) -> None:
        self.position = position
        self.base_offset = base_offset
        self.last_offset = last_offset
        self.hash = hash_  # Key_Shared: the hash of the entry's sticky key
        self.kept = -1  # readCompacted: the bits of the messages that go out (kop/pulsar/compacted.py), -1 = all


class PartitionState:
    """What the pulsar handler keeps per served partition: producers by name, subscriptions by name."""

    def __init__(self, handler: PulsarProtocolHandler, ledger_name: str, seam: Partition) -> None:
        self.handler = handler
        self.ledger_name = ledger_name
        self.seam = seam  # what SENDs append through (kop/topics/partition.py)
        self.partition = seam.topic.pulsar_partition(seam.index)  # what message ids carry: -1 when non-partitioned
        self.plog = seam.log
        self.producers: dict[str, Producer] = {}
        # Pulsar's topic epoch (kop/pulsar/produce.py access_refusal): taken by each exclusive producer, so that one
        # fenced out cannot come back; in memory (Pulsar keeps it in the managed ledger's properties)
        self.topic_epoch: int | None = None
        # WaitForExclusive producers queued for the partition (kop/pulsar/waiters.py, kop/pulsar/produce.py)
        self.waiting: WaitQueue[WaitingProducer] = WaitQueue()
        self.subscriptions: dict[str, Subscription] = {}
        self._converted: OrderedDict[Position, Converted | None] = OrderedDict()
        # Confluent id -> this topic's Pulsar schema version; learning one drops the entries converted without it
        self.schema_ids = SchemaIdMap(handler.service.schema_ids, seam.topic.name, on_learnt=self._converted.clear)
        self.dedup = Deduplication(self)  # used when brokerDeduplicationEnabled
        self.compaction = CompactedView(self.plog)  # Pulsar's topic compaction: trigger, status, readCompacted view
        self.msg_in = 0  # messages and bytes Pulsar producers stored here (metrics, admin stats)
        self.bytes_in = 0
        # set when the partition stops being served here (abandon): a SUBSCRIBE or PRODUCER that got this state
        # before and awaited since must not join it - nothing would ever tell its client to go (served())
        self.abandoned = False

    def served(self) -> bool:
        """Whether this state is still the one its partition is served through here: not abandoned, still the
        handler's, and the broker serving (cluster mode: not paused). A command that awaited since it got the state
        checks this before it attaches a consumer or producer, as its partition may have moved meanwhile."""
        handler = self.handler
        return (not self.abandoned and handler.partitions.get(self.ledger_name) is self
                and not handler.service.topics.paused)

    def converted(self, fb: FetchedBatch) -> Converted | None:
        """(headers and payload of the Pulsar entry, number of messages, Key_Shared hash of its sticky key, Confluent
        ids its values named that the partition's map lacks, its deliver_at_time or -1), None for a control batch."""
        key = fb.position
        try:
            got = self._converted[key]
        except KeyError:
            pass
        else:
            self._converted.move_to_end(key)
            return got
        entry = self._convert(fb, compress=True)
        value: Converted | None = None
        if entry is not None:
            md = entry.metadata
            value = (encode_headers_and_payload(md, entry.payload), entry.num_messages, key_hash(sticky_key(md)),
                     self.schema_ids.unknown(entry.unknown_ids),
                     md.deliver_at_time if md.HasField("deliver_at_time") else -1)
        self._converted[key] = value
        if len(self._converted) > CONVERTED_CACHE:
            self._converted.popitem(last=False)
        return value

    def _convert(self, fb: FetchedBatch, compress: bool) -> PulsarEntry | None:
        """The Pulsar entry of a stored batch (None for a control batch or one that does not convert)."""
        try:
            # A compressed batch goes out compressed with the same codec (as Pulsar hands consumers what producers
            # compressed): a consumer then receives, checksums and copies the stored size, not the inflated one.
            # One record goes out plain and unbatched (see unbatched).
            header = parse_batch_header(fb.batch)
            codec = PULSAR_CODEC.get(header.compression, 0) if header.records_count > 1 and compress else 0
            version = carried_version(fb.batch)  # the producer's schema version (kop/schemas/versions.py)
            # the Pulsar producer's name kept with the entry ("" for a Kafka producer's: entry_format.NamedEntry)
            name = "" if fb.entry is None else producer_name_of(fb.entry)
            entry = kafka_to_pulsar(fb.batch, producer_name=name, compression=codec,
                                    schema_ids=self.schema_ids.for_version(version))
            if entry is not None:
                if version is not None and not entry.metadata.schema_version:
                    entry.metadata.schema_version = version
                entry = unbatched(entry)
        except ConversionError as e:
            log.warning("%s: entry %s does not convert (%s); skipped", self.ledger_name, fb.position, e)
            entry = None
        return entry

    def compacted(self, fb: FetchedBatch, kept: int) -> bytes | None:
        """The entry as a readCompacted consumer gets it when compaction left only the messages `kept` names (bit i =
        message i): as Pulsar's compactor rewrites a batch, each message left out becomes an empty slot marked
        `compacted_out` (the Java client skips it, the C++ client hands it out as an empty message), so batch indexes
        and the client's acknowledgement of the whole entry stay as they were. Sent uncompressed; None when the
        entry does not convert."""
        entry = self._convert(fb, compress=False)
        if entry is None:
            return None
        md = entry.metadata
        if entry.num_messages < 2 or entry.opaque or md.compression:  # nothing to rewrite in place
            return encode_headers_and_payload(md, entry.payload)
        out = []
        for i, (smm, payload) in enumerate(pbatch.messages(md, entry.payload)):
            if kept >> i & 1 and smm is not None:
                out.append((smm, payload))
            else:
                out.append((c.pb.SingleMessageMetadata(compacted_out=True), b""))
        return encode_headers_and_payload(md, pbatch.encode_batch(out))

    async def learn_schema_ids(self, unknown: tuple[int, ...]) -> bool:
        """Ask the schema store about ids a conversion did not know (kop/pulsar/schema_ids.py); True when one is
        known now and the entry is to be converted again."""
        return await self.schema_ids.learn(unknown)

    async def close(self) -> None:
        self.compaction.stop()
        for sub in list(self.subscriptions.values()):
            await sub.close(flush=True)
        await self.dedup.flush()

    def abandon(self) -> None:
        """The partition is no longer served here: tell clients to reconnect (they look it up again)."""
        self.abandoned = True
        self.compaction.stop()
        for sub in list(self.subscriptions.values()):
            for consumer in list(sub.consumers):
                consumer.conn.send(c.command(c.CLOSE_CONSUMER, consumer_id=consumer.consumer_id, request_id=0))
                consumer.conn.consumers.pop(consumer.consumer_id, None)
            sub.consumers.clear()
            sub.stop()
        self.waiting.refuse_all(c.ServerError.ServiceNotReady, "the partition is not served by this broker now; retry")
        for p in list(self.producers.values()):
            p.conn.send(c.command(c.CLOSE_PRODUCER, producer_id=p.producer_id, request_id=0))
            p.conn.producers.pop(p.producer_id, None)
        self.producers.clear()
        self.subscriptions.clear()


class Consumer:
    __slots__ = ("conn", "consumer_id", "subscription", "name", "priority", "permits", "pending", "epoch", "ranges",
                 "connected_since", "read_compacted")

    def __init__(self, conn: PulsarConnection, consumer_id: int, subscription: Subscription, name: str,
                 priority: int, epoch: int | None) -> None:
        self.conn = conn
        self.consumer_id = consumer_id
        self.subscription = subscription
        self.name = name
        self.priority = priority
        self.permits = 0
        self.pending: set[Position] = set()
        self.epoch = epoch
        self.ranges: list[tuple[int, int]] | None = None  # Key_Shared STICKY: the declared hash ranges
        self.connected_since = int(time.time() * 1000)  # CONSUMER_STATS, admin stats
        self.read_compacted = False  # CommandSubscribe.read_compacted (Exclusive/Failover): the compacted view


class HashHolder:
    """Key_Shared: the consumer holding unacknowledged entries of one hash, and how many."""

    __slots__ = ("consumer", "count")

    def __init__(self, consumer: Consumer) -> None:
        self.consumer = consumer
        self.count = 0


_BEM_HEAD = struct.Struct(">HI")  # magic 0x0e02, size
_MAX_TIMESTAMP = struct.Struct(">q")  # a Kafka batch header's maxTimestamp, at byte 35


def broker_entry_metadata(fb: FetchedBatch) -> bytes:
    """Pulsar's broker entry metadata for one stored entry (0x0e02, size, BrokerEntryMetadata), as Pulsar's broker
    puts it in front of a MESSAGE payload for clients that support it: index = the offset of the entry's last
    message (Pulsar's AppendIndexMetadataInterceptor counts messages from 0 per partition, as Kafka offsets do; the
    client derives each batched message's index from it and its batch index), broker_timestamp = the batch's
    maxTimestamp - the append time on LogAppendTime topics, else the newest record's own timestamp (we keep no
    separate append time)."""
    (ts,) = _MAX_TIMESTAMP.unpack_from(fb.batch, 35)
    bem = c.pb.BrokerEntryMetadata(index=fb.last_offset)
    if ts >= 0:
        bem.broker_timestamp = ts
    raw = bem.SerializeToString()
    return _BEM_HEAD.pack(0x0E02, len(raw)) + raw


_WORD = (1 << 64) - 1


def ack_set_words(bits: int) -> list[int]:
    """An ack set as the wire carries it: signed 64-bit words, lowest bits first (Java's BitSet.toLongArray)."""
    words = []
    while bits:
        w = bits & _WORD
        words.append(w - (1 << 64) if w >= 1 << 63 else w)
        bits >>= 64
    return words


_LAST_WALK = 1000  # markers and aborted batches stepped over looking for the last deliverable entry


class Subscription:
    def __init__(self, state: PartitionState, name: str, sub_type: int, durable: bool, next_offset: int,
                 info: CursorInfo | None = None, version: int = -1) -> None:
        self.state = state
        self.plog = state.plog
        self.name = name
        self.sub_type = sub_type
        self.durable = durable
        self.consumers: list[Consumer] = []
        self.mark_delete: Position | None = info.mark_delete if info else None
        self.next_offset = next_offset  # the offset after M: where a rewind reads from
        self.read_offset = next_offset
        self.acked: set[Position] = {upper for _, upper in info.ranges} if info else set()
        self.outstanding: OrderedDict[Position, Entry] = OrderedDict()  # read since M, in log order
        self.pending: dict[Position, Consumer] = {}  # sent, not acknowledged
        self.replay: deque[Entry] = deque()
        self.redeliveries: dict[Position, int] = {}
        # acknowledgmentAtBatchIndexLevelEnabled: entry -> the bits of its messages not yet acknowledged (Pulsar's
        # ack set: bit i set = message i pending), for entries acknowledged in part; in memory only
        self.batch_acks: dict[Position, int] = {}
        self.version = version
        self.epoch = 0  # bumped by rewinds: a read begun before one is dropped
        self.active: Consumer | None = None
        self.keep_without_consumers = False  # a seek in progress (non-durable: clients come back)
        self._rr = 0
        self._wake: asyncio.Future[None] | None = None
        self._task: asyncio.Task[None] | None = None
        self._dirty = False
        self._saver: asyncio.Task[None] | None = None
        self.selector: Selector[Consumer] = Selector()  # Key_Shared
        # Shared/Key_Shared: entries held back until their deliver_at_time (kop/pulsar/delayed.py); they are in
        # `outstanding` (not acknowledged, so M stays before them) but neither pending nor in `replay`
        self.delayed = DelayedTracker(state.handler.config.delayedDeliveryTickTimeMillis)
        self.hash_holders: dict[int, HashHolder] = {}  # Key_Shared: hash -> its consumer and unacked entries
        self.msg_out = 0  # messages and bytes dispatched (admin stats, metrics)
        self.bytes_out = 0
        self._txn_loaded = False  # the partition's producer state (last stable offset, aborted index)
        self._entry_bytes = MIN_BATCH_BYTES  # the stored batches' size per entry, as the last read found it

    # ------------------------------------------------------------------ consumers
    def add_consumer(self, consumer: Consumer) -> str | None:
        """Add a consumer; an error text (Key_Shared: a STICKY range refused) leaves the subscription as it was."""
        if self.sub_type == KEY_SHARED:
            if not self.consumers:
                self.selector = Selector()
                self.hash_holders.clear()
            error = self.selector.add(consumer, consumer.ranges)
            if error is not None:
                return error
        self.consumers.append(consumer)
        if self.sub_type not in (SHARED, KEY_SHARED) and self.delayed:
            self.rewind()  # a Shared subscription held entries back, an Exclusive/Failover one gets them now
        if self.sub_type == FAILOVER:
            self._pick_active(changed_consumer=consumer)
        if self._task is None or self._task.done():
            self._task = asyncio.get_running_loop().create_task(self._run())
        self.wake()
        return None

    def remove_consumer(self, consumer: Consumer) -> None:
        if consumer not in self.consumers:
            return
        self.consumers.remove(consumer)
        if self.sub_type == KEY_SHARED:
            self.selector.remove(consumer)
        if self.sub_type in (SHARED, KEY_SHARED):
            for pos in sorted(consumer.pending):
                self.pending.pop(pos, None)
                if (e := self.outstanding.get(pos)) is not None:
                    self._release_hash(e)
                    self.replay.append(e)
            self.replay = deque(sorted(self.replay, key=lambda e: e.position))
        else:
            self.rewind()
        consumer.pending.clear()
        if self.sub_type == FAILOVER:
            self._pick_active()
        if not self.consumers and not self.keep_without_consumers:
            self.stop()
            if not self.durable:
                self.state.subscriptions.pop(self.name, None)
            else:
                self.save()
        self.wake()

    def _pick_active(self, changed_consumer: Consumer | None = None) -> None:
        if not self.consumers:
            self.active = None
            return
        ordered = sorted(self.consumers, key=lambda k: (k.priority, k.name))
        top = ordered[0].priority
        group = [k for k in ordered if k.priority == top]
        new = group[max(self.state.partition, 0) % len(group)]
        if new is not self.active:
            self.active = new
            self.rewind()
            for k in self.consumers:
                self._tell_active(k)
        elif changed_consumer is not None:
            self._tell_active(changed_consumer)

    def _tell_active(self, k: Consumer) -> None:
        if k.conn.protocol_version >= 12:
            k.conn.send(c.command(c.ACTIVE_CONSUMER_CHANGE, consumer_id=k.consumer_id, is_active=k is self.active))

    def _next_consumer(self) -> Consumer | None:
        if self.sub_type == EXCLUSIVE:
            k = self.consumers[0] if self.consumers else None
            return k if k is not None and k.permits > 0 and not k.conn.backlogged else None
        if self.sub_type == FAILOVER:
            k = self.active
            return k if k is not None and k.permits > 0 and not k.conn.backlogged else None
        if self.sub_type == KEY_SHARED:  # the entry decides (_target); this only says whether anyone can take one
            return next((k for k in self.consumers if k.permits > 0 and not k.conn.backlogged), None)
        n = len(self.consumers)
        for i in range(n):
            k = self.consumers[(self._rr + i) % n]
            if k.permits > 0 and not k.conn.backlogged:
                self._rr = (self._rr + i + 1) % n
                return k
        return None

    # ------------------------------------------------------------------ dispatch
    def wake(self) -> None:
        if self._wake is not None and not self._wake.done():
            self._wake.set_result(None)

    def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            self._task = None

    async def _wait(self, other: asyncio.Future[Any] | None, timeout: float | None = None) -> None:
        self._wake = asyncio.get_running_loop().create_future()
        if self.delayed:  # a held entry falling due wakes the dispatcher (Pulsar's tracker timer)
            due_in = self.delayed.wake_in(_now_ms())
            if due_in is not None:
                timeout = due_in if timeout is None else min(timeout, due_in)
        waits: set[asyncio.Future[Any]] = {self._wake}
        if other is not None:
            waits.add(other)
        try:
            await asyncio.wait(waits, timeout=timeout, return_when=asyncio.FIRST_COMPLETED)
        finally:
            if other is not None and not other.done():
                other.cancel()

    async def _run(self) -> None:
        try:
            while self.consumers:
                await self._step()
        except asyncio.CancelledError:
            pass
        except Exception:  # noqa: BLE001 - a broken dispatcher must not take the broker down
            log.exception("%s/%s: dispatcher failed; consumers are closed", self.state.ledger_name, self.name)
            for k in list(self.consumers):
                k.conn.send(c.command(c.CLOSE_CONSUMER, consumer_id=k.consumer_id, request_id=0))
                k.conn.consumers.pop(k.consumer_id, None)
                # as if it had left: what it was sent and did not acknowledge goes to the consumers that come
                # back (cleared with the list, it stayed pending to a consumer that is gone, never sent again)
                self.remove_consumer(k)

    # long: the dispatcher's whole decision per round (replay, read, convert - asking about unknown schema ids -,
    # pick a consumer, send), kept in one place so that its early returns read in order.
    async def _step(self) -> None:
        """One round: replay one entry, or read a chunk of new entries and send what consumers can take.
        Long because it is the dispatcher's whole decision; each branch says why it returns."""
        if self.state.handler.service.topics.paused:
            # Cluster mode, the ZooKeeper session not proven alive: dispatch nothing (another broker may own
            # the partition by now); look again shortly - a released partition stops this dispatcher.
            await self._wait(None, timeout=NOT_SERVING_RECHECK_S)
            return
        if self.delayed:
            self._release_delayed()
        consumer = self._next_consumer()
        if consumer is None:
            backlogged = any(k.conn.backlogged for k in self.consumers)
            await self._wait(None, timeout=0.05 if backlogged else None)
            return
        epoch = self.epoch
        if self.replay:
            entry = self.replay.popleft()
            if entry.position not in self.outstanding or entry.position in self.pending or entry.position in self.acked:
                return  # acknowledged or re-sent meanwhile
            try:
                got = await self.plog.read(entry.base_offset, 1)
            except OffsetOutOfRange:
                got = None
            except BaseException:
                # Cancelled (its last consumer left: stop()) or a failed read: the entry was taken off the queue
                # and is neither pending nor behind M, so nothing else would ever send it again (issue #24)
                self._requeue(entry)
                raise
            if epoch != self.epoch:
                return  # a rewind or seek happened while reading
            fb = next((b for b in got.batches if b.position == entry.position), None) if got else None
            if fb is None:  # gone (retention): nothing to deliver
                self.outstanding.pop(entry.position, None)
                self._advance()
                return
            target = self._target(entry.hash)
            if target is None:  # Key_Shared: its consumer cannot take it yet; keep the order, wait
                self.replay.appendleft(entry)
                await self._wait(None, timeout=0.2)
                return
            self._send(target, fb, entry, self.redeliveries.get(entry.position, 0))
            return
        plog = self.plog
        if not self._txn_loaded:
            await plog.load_transactions()
            self._txn_loaded = True
        if self.read_offset < plog.log_start_offset:
            self.read_offset = plog.log_start_offset
        # Pulsar consumers get committed data only: reads stop at the last stable offset (an open Kafka
        # transaction holds it back until its marker), and aborted batches are skipped like markers.
        stable = plog.last_stable_offset
        if self.read_offset >= stable:
            await self._wait(plog.wait_for_append())
            return
        try:
            got = await plog.read(self.read_offset, self._read_bytes())
        except OffsetOutOfRange:
            self.read_offset = plog.log_start_offset
            return
        if got.batches:
            self._entry_bytes = max(MIN_BATCH_BYTES, sum(len(b.batch) for b in got.batches) // len(got.batches))
        if epoch != self.epoch:
            return
        blocked = False
        for fb in got.batches:
            pos = fb.position
            if fb.base_offset >= stable:
                break
            if self.mark_delete is not None and pos <= self.mark_delete:
                self.read_offset = max(self.read_offset, fb.last_offset + 1)
                continue
            if pos in self.acked or pos in self.outstanding:
                self.outstanding.setdefault(pos, Entry(pos, fb.base_offset, fb.last_offset))
                self.read_offset = max(self.read_offset, fb.last_offset + 1)
                continue
            conv = None if plog.is_aborted_batch(fb.batch, fb.base_offset) else self.state.converted(fb)
            if conv is not None and conv[3] and await self.state.learn_schema_ids(conv[3]):
                if epoch != self.epoch:
                    return  # a rewind or seek happened while asking
                conv = self.state.converted(fb)  # again, with the ids learnt
            kept = -1
            if conv is not None and consumer.read_compacted and self.state.compaction.covers(fb):
                kept = await self.state.compaction.kept(fb, conv[1])
                if epoch != self.epoch:
                    return
            if conv is None or kept == 0:  # a control batch, an aborted one, one compacted away: no message
                self.outstanding[pos] = Entry(pos, fb.base_offset, fb.last_offset)
                self.acked.add(pos)
                self.read_offset = max(self.read_offset, fb.last_offset + 1)
                continue
            if conv[4] >= 0 and self._hold(pos, conv[4]):  # delayed delivery: not before its time
                self.outstanding[pos] = Entry(pos, fb.base_offset, fb.last_offset, conv[2])
                self.read_offset = max(self.read_offset, fb.last_offset + 1)
                continue
            target = self._target(conv[2])
            if target is None:  # out of permits, or (Key_Shared) its key's consumer cannot take it yet
                blocked = True
                break
            entry = Entry(pos, fb.base_offset, fb.last_offset, conv[2])
            if kept != (1 << conv[1]) - 1:
                entry.kept = kept
            self.outstanding[pos] = entry
            self.read_offset = max(self.read_offset, fb.last_offset + 1)
            self._send(target, fb, entry, 0)
        self._advance()
        if blocked and self.sub_type == KEY_SHARED:
            await self._wait(None, timeout=0.2)  # woken by FLOW, acks and consumer changes

    def _read_bytes(self) -> int:
        """The byte budget of a read of new entries: about as many entries as the consumers can take now (their
        permits, READ_ENTRIES at most), by the size of the entries the last read found. Reading by bytes alone
        (1 MiB: ten thousand entries of one small message) made a subscription that fell behind - a consumer
        back after its broker restarted, on a loaded machine - read thousands of entries from BookKeeper for the
        thousand its consumer could take, and read most of them again next time: it delivered slower than the
        producers wrote, and the tail of the partition was never delivered (issue #24, `all-brokers-kill`)."""
        if self.sub_type == EXCLUSIVE:
            takers = self.consumers[:1]
        elif self.sub_type == FAILOVER:
            takers = [self.active] if self.active is not None else []
        else:
            takers = self.consumers
        permits = sum(k.permits for k in takers if k.permits > 0 and not k.conn.backlogged)
        return max(min(READ_BYTES, min(max(permits, 1), READ_ENTRIES) * self._entry_bytes), 1)

    def _requeue(self, entry: Entry) -> None:
        """Put an entry taken off the replay queue back, in log order, unless it was acknowledged, re-sent or queued
        again meanwhile (or a rewind dropped it): a replay read that did not finish must not lose its entry."""
        pos = entry.position
        if pos not in self.outstanding or pos in self.pending or pos in self.acked:
            return
        if any(e.position == pos for e in self.replay):
            return
        self.replay.append(entry)
        self.replay = deque(sorted(self.replay, key=lambda e: e.position))

    def _hold(self, pos: Position, deliver_at: int) -> bool:
        """Whether the entry just read is held back (Pulsar's trackDelayedDelivery): on Shared and Key_Shared
        subscriptions, with delayedDeliveryEnabled, when its time is after the tracker's cutoff."""
        if self.sub_type not in (SHARED, KEY_SHARED) or not self.state.handler.config.delayedDeliveryEnabled:
            return False
        return self.delayed.add(pos, deliver_at, _now_ms())

    def _release_delayed(self) -> None:
        """Held entries whose time has come join the replay queue (in log order, before new entries)."""
        due = [e for pos in self.delayed.due(_now_ms()) if (e := self.outstanding.get(pos)) is not None]
        if due:
            self.replay.extend(due)
            self.replay = deque(sorted(self.replay, key=lambda e: e.position))

    def _target(self, hash_: int) -> Consumer | None:
        """The consumer for an entry: any (by type) outside Key_Shared; there, the key's consumer, when it has
        permits and no other consumer still holds unacknowledged entries of the same hash."""
        if self.sub_type != KEY_SHARED:
            return self._next_consumer()
        k = self.selector.select(hash_)
        if k is None or k.permits <= 0 or k.conn.backlogged:
            return None
        holder = self.hash_holders.get(hash_)
        if holder is not None and holder.consumer is not k:
            return None
        return k

    def _release_hash(self, entry: Entry) -> None:
        holder = self.hash_holders.get(entry.hash)
        if holder is not None:
            holder.count -= 1
            if holder.count <= 0:
                del self.hash_holders[entry.hash]

    def _send(self, consumer: Consumer, fb: FetchedBatch, entry: Entry, redelivery: int) -> None:
        conv = self.state.converted(fb)
        if conv is None:
            return
        data, n = conv[0], conv[1]
        if entry.kept >= 0:  # readCompacted: the messages compaction left out are empty compacted_out slots
            data = self.state.compacted(fb, entry.kept) or data
        if self.sub_type == KEY_SHARED:
            holder = self.hash_holders.get(entry.hash)
            if holder is None:
                holder = self.hash_holders[entry.hash] = HashHolder(consumer)
            holder.count += 1
        pos = fb.position
        fields: dict[str, Any] = {
            "consumer_id": consumer.consumer_id,
            "message_id": c.message_id(pos.ledger_id, pos.entry_id, self.state.partition),
        }
        if redelivery:
            fields["redelivery_count"] = redelivery
        if consumer.epoch is not None:
            fields["consumer_epoch"] = consumer.epoch
        if pos in self.batch_acks:  # the client skips the messages acknowledged already
            fields["ack_set"] = ack_set_words(self.batch_acks[pos])
        if consumer.conn.broker_entry_metadata:
            data = broker_entry_metadata(fb) + data
        consumer.conn.write(encode_payload_command(c.command(c.MESSAGE, **fields), data))
        consumer.permits -= n
        self.msg_out += n
        self.bytes_out += len(data)
        consumer.pending.add(pos)
        self.pending[pos] = consumer

    # ------------------------------------------------------------------ acks, redelivery, seek
    def ack(self, positions: list[Position], cumulative: bool) -> None:
        if cumulative:
            if self.sub_type in (SHARED, KEY_SHARED) or not positions:
                return  # Pulsar ignores cumulative acks on Shared and Key_Shared subscriptions
            upto = positions[0]
            for pos in list(self.outstanding):
                if pos > upto:
                    break
                self._ack_one(pos)
        else:
            for pos in positions:
                self._ack_one(pos)
        self._advance()
        self.save()
        if self.sub_type == KEY_SHARED:
            self.wake()  # an acknowledged hash may unblock the next entries of its key

    def ack_batch_indexes(self, pos: Position, ack_set: list[int], cumulative: bool) -> None:
        """An ack of some messages of an entry (acknowledgmentAtBatchIndexLevelEnabled): `ack_set` has the bits of
        the messages still pending (Pulsar's convention); the entry is acknowledged once none is. A cumulative one
        also acknowledges every entry before it."""
        entry = self.outstanding.get(pos)
        if entry is None:
            return  # never delivered (or already behind M)
        if cumulative:
            if self.sub_type in (SHARED, KEY_SHARED):
                return  # Pulsar ignores cumulative acks on Shared and Key_Shared subscriptions
            for before in [p for p in self.outstanding if p < pos]:
                self._ack_one(before)
        size = entry.last_offset - entry.base_offset + 1
        bits = sum((w & _WORD) << (64 * i) for i, w in enumerate(ack_set)) & ((1 << size) - 1)
        pending = self.batch_acks.get(pos, (1 << size) - 1) & bits
        if pending:
            self.batch_acks[pos] = pending
        else:
            self._ack_one(pos)
        self._advance()
        self.save()

    def _ack_one(self, pos: Position) -> None:
        if pos not in self.outstanding:
            return  # never delivered (or already behind M): nothing to acknowledge
        self.batch_acks.pop(pos, None)
        self.delayed.discard(pos)
        self.acked.add(pos)
        self.redeliveries.pop(pos, None)
        owner = self.pending.pop(pos, None)
        if owner is not None:
            owner.pending.discard(pos)
            if self.sub_type == KEY_SHARED:
                self._release_hash(self.outstanding[pos])

    def _advance(self) -> None:
        moved = False
        while self.outstanding:
            pos, entry = next(iter(self.outstanding.items()))
            if pos not in self.acked:
                break
            del self.outstanding[pos]
            self.acked.discard(pos)
            self.mark_delete = pos
            self.next_offset = entry.last_offset + 1
            moved = True
        if moved:
            self._dirty = True

    def redeliver(self, consumer: Consumer, positions: list[Position] | None) -> None:
        if self.sub_type not in (SHARED, KEY_SHARED):
            if consumer is self.active or self.sub_type == EXCLUSIVE:
                self.rewind()
            return
        chosen = consumer.pending if positions is None else consumer.pending.intersection(positions)
        for pos in sorted(chosen):
            self.pending.pop(pos, None)
            self.redeliveries[pos] = self.redeliveries.get(pos, 0) + 1
            if (e := self.outstanding.get(pos)) is not None:
                self._release_hash(e)
                self.replay.append(e)
        consumer.pending -= set(chosen)
        self.replay = deque(sorted(self.replay, key=lambda e: e.position))
        self.wake()

    def rewind(self) -> None:
        """Back to M + 1: everything not acknowledged is delivered again (Exclusive/Failover)."""
        self.epoch += 1
        for k in self.consumers:
            k.pending.clear()
        self.pending.clear()
        self.replay.clear()
        self.outstanding.clear()
        self.hash_holders.clear()
        self.delayed.clear()  # read again from M + 1: still-delayed entries are held again
        self.read_offset = self.next_offset
        self.wake()

    def reset(self, offset: int) -> None:
        """SEEK: the next entry read is the one holding `offset`; acknowledgements after it are forgotten."""
        self.acked.clear()
        self.redeliveries.clear()
        self.batch_acks.clear()
        self.mark_delete = None
        self.next_offset = offset
        self.rewind()
        self._dirty = True
        self.save()

    # ------------------------------------------------------------------ persistence
    def cursor_info(self) -> CursorInfo:
        ranges = [(Position(p.ledger_id, p.entry_id - 1), p) for p in sorted(self.acked)]
        return CursorInfo(self.mark_delete, ranges, {NEXT_OFFSET: self.next_offset})

    def save(self) -> None:
        """Persist the cursor soon (durable subscriptions): one write in flight, the latest state wins."""
        if not self.durable:
            return
        self._dirty = True
        if self._saver is None or self._saver.done():
            self._saver = asyncio.get_running_loop().create_task(self._save_loop())

    async def _save_loop(self) -> None:
        cursors = self.state.handler.cursors
        while self._dirty:
            self._dirty = False
            try:
                self.version = await cursors.save(self.state.ledger_name, self.name, self.cursor_info(), self.version)
            except Exception as e:  # noqa: BLE001 - a BadVersion (another owner) or a store outage
                log.warning("%s/%s: cursor not persisted: %s", self.state.ledger_name, self.name, e)
                try:  # the next write goes over what is stored now (at-least-once: it may repeat acks)
                    got = await cursors.load(self.state.ledger_name, self.name)
                    self.version = got[1] if got else -1
                except Exception:  # noqa: BLE001 - the store is down: the next save tries again
                    pass
                return

    async def flush(self) -> None:
        """Wait until the cursor state as of now is persisted (durable subscriptions). Runs to its end when the
        command awaiting it is cancelled (its connection closed; kop.aio.run_to_end): awaited directly, the saver
        would be cancelled with it, its state taken (`_dirty` cleared) and never written."""
        if not self.durable:
            return
        await run_to_end(self._flush())

    async def _flush(self) -> None:
        if self._saver is not None and not self._saver.done():
            await self._saver
        if self._dirty:
            await self._save_loop()

    async def close(self, flush: bool) -> None:
        self.stop()
        if flush and self.durable:
            self._dirty = True
            if self._saver is not None and not self._saver.done():
                await self._saver
            await self._save_loop()

    async def delete(self) -> None:
        self.stop()
        self.durable = False
        self.state.subscriptions.pop(self.name, None)
        await run_to_end(self._delete_cursor())  # as flush: the stored cursor goes even if UNSUBSCRIBE is cancelled

    async def _delete_cursor(self) -> None:
        if self._saver is not None and not self._saver.done():
            await self._saver
        await self.state.handler.cursors.delete(self.state.ledger_name, self.name)

    # ------------------------------------------------------------------ queries
    async def mark_delete_for_client(self) -> Position:
        """M as GET_LAST_MESSAGE_ID reports it: the entry before the next one to read when nothing was acked."""
        if self.mark_delete is not None:
            return self.mark_delete
        plog = self.plog
        if self.next_offset < plog.high_watermark and self.next_offset >= plog.log_start_offset:
            pos = await plog.position_of(self.next_offset)
            return Position(pos.ledger_id, pos.entry_id - 1)
        last = await last_position(plog)
        return last[0] if last else Position(-1, -1)


def _now_ms() -> int:
    """Wall-clock epoch ms: the clock of deliver_at_time, which the producer computed from its own."""
    return int(time.time() * 1000)


async def last_position(plog: PartitionLog) -> tuple[Position, int] | None:
    """(position of the last entry a consumer can get, the batch index of its last record: -1 for a
    one-record entry, which goes out unbatched), None when there is none. That is the last entry below the
    last stable offset (Pulsar answers its maxReadPosition, before the first open transaction, likewise)
    that is neither a marker nor aborted: clients compare it with what they received
    (hasMessageAvailable), and an entry never delivered would leave them waiting for it."""
    await plog.load_transactions()
    end = plog.last_stable_offset
    for _ in range(_LAST_WALK):
        if end <= plog.log_start_offset:
            return None
        pos = await plog.position_of(end - 1)
        try:
            entry = await plog.entry_offsets(pos)
        except NoSuchEntry:  # compaction left a gap at the end: no entry holds it
            return None
        if entry.base_offset >= end:  # compaction left a gap at the end
            return None
        got = await plog.read(entry.base_offset, 1)
        if got.batches and plog.is_aborted_batch(got.batches[0].batch, got.batches[0].base_offset):
            end = entry.base_offset  # a marker or an aborted batch: never delivered, look before it
            continue
        last = entry.last_offset - entry.base_offset  # the batch index of its last record
        return pos, last if last > 0 else -1
    return None
