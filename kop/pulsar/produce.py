"""PRODUCER, SEND and CLOSE_PRODUCER: Pulsar producers appending to the Kafka handler's partition logs.

A SEND (one message, or a batch of N) is converted at the edge into one Kafka record batch of N records
(kop/pulsar/convert.py: ordering key, else partition key -> key; event time, else publish time -> timestamp;
properties -> headers; null value -> null) and appended like a Kafka produce: N messages take N offsets, and a Kafka
consumer of the same partition reads them with continuous offsets. The Pulsar compression codec becomes the Kafka
one (LZ4 -> lz4, ZLIB -> gzip, ZSTD -> zstd, SNAPPY -> snappy), so a compressed batch stays compressed.
SEND_RECEIPT carries the entry's id (ledger, entry, partition) and goes out in SEND order (appends complete in
issue order). The batch is appended through the partition seam (kop/topics/partition.py), so the topic's write
rules bind Pulsar producers as they bind Kafka's: `max.message.bytes` (+ Pulsar's 10 KiB frame slack), keys on
compacted topics, `message.timestamp.*` bounds, LogAppendTime restamping and `compression.type`. A refused SEND
gets a SEND_ERROR whose ServerError makes the client fail that message rather than reconnect and resend it forever
(`refusal_code`: ChecksumError for the C++-based clients, NotAllowedError for the others).

Encrypted messages and chunks of chunked ones (issue #22) are stored as they were sent, never decompressed or
split (kop/pulsar/opaque.py): one Kafka record holding the payload and the entry's metadata, which dispatch sends
back unchanged, so the consumer's client decrypts and reassembles them. A SEND that does not convert (a payload that
does not decompress, or to more than maxMessageSize; messages that do not parse) is stored the same way, with a
`pulsar.unconverted` header saying why, instead of being refused: Pulsar's broker stores it too. A message's chunks share its sequence id:
with de-duplication only its last chunk is checked and recorded, so the first ones are not taken for resends.

Access modes as Pulsar 4.0 answers them (AbstractTopic.incrementTopicEpochIfNeeded; ``access_refusal``): a Shared
producer beside an exclusive one gets ProducerBusy, an Exclusive one beside any producer ProducerFenced,
ExclusiveWithFencing closes the producers there (CLOSE_PRODUCER) and takes the topic; every exclusive producer takes
the next topic epoch (PRODUCER_SUCCESS.topic_epoch), and a producer reconnecting with an older epoch is refused
ProducerFenced, which is how a fenced-out client learns it.

WaitForExclusive (``must_wait``, ``WaitingProducer``, ``promote_waiter``; the queue is kop/pulsar/waiters.py): on a
partition with producers the PRODUCER is answered PRODUCER_SUCCESS producer_ready=false and queued; when the last
producer goes (``Producer.close``) the first waiter takes the topic, synchronously, and gets its ready
PRODUCER_SUCCESS. Nothing awaits meanwhile, so the connection goes on with its other commands; CLOSE_PRODUCER and
the connection's close withdraw a waiter, ExclusiveWithFencing (``fence_out``) and the partition leaving here
(PartitionState.abandon) refuse every waiter.

Differences from Pulsar's broker: a withdrawn waiter leaves the queue at once (Pulsar promotes it and closes it
then); the topic
epoch lives in memory (Pulsar stores it with the managed ledger), so a producer fenced out before a restart or a
takeover is let in again when it reconnects after it; de-duplication by producer name and sequence id
when `brokerDeduplicationEnabled` (kop/pulsar/dedup.py: how it persists, across restarts and owner changes). A producer's schema
is registered per topic (kop/pulsar/schemas.py; PRODUCER_SUCCESS carries its version, IncompatibleSchema when the
strategy refuses it) and the version each SEND carries is kept with the stored batch (kop/schemas/versions.py
stamp_version); internal topics (__consumer_offsets) take no producers; a
message over `maxMessageSize` is refused as above (Pulsar's client refuses it before sending; a frame far over the
limit closes the connection, as in Pulsar); a wrong checksum gets SEND_ERROR ChecksumError.

Confluent's prefix (issue #25, docs/pulsar.md "Schema ids"): when the version a SEND carries has a Confluent id
(`services.schema_ids.confluent_id`: its type is AVRO, JSON or PROTOBUF), every non-null value is stored as 0x00 +
id (big-endian int32) + payload, so a Kafka consumer's Confluent deserializer reads it (a Pulsar consumer gets the
prefix removed again, kop/pulsar/subscription.py). The id is asked once per producer and version - at PRODUCER for
the producer's own version, at the first SEND for any other - and kept on the Producer, so a SEND awaits nothing
more; a lookup that fails answers that SEND PersistenceError (the client resends) and is asked again next time.

With `authorizationEnabled` a PRODUCER needs WRITE on the topic (kop/pulsar/authorize.py), else ERROR
AuthorizationError "Client is not authorized to Produce"; SENDs of an open producer are not checked again (Pulsar's rule).
"""

from __future__ import annotations

import asyncio
import itertools
import logging
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Protocol

from kop.protocol.records import BatchHeader, parse_batch_header
from kop.pulsar import authorize, backlog_quota
from kop.pulsar.codec import commands as c
from kop.pulsar.codec.framing import Frame
from kop.pulsar.connection import PulsarConnection
from kop.pulsar.convert import ConversionError, pulsar_to_kafka, unconverted_to_kafka
from kop.pulsar.dedup import DUP, NOT_DUP, UNKNOWN
from kop.pulsar.lookup import open_partition
from kop.pulsar.schemas import SchemaRefused, producer_version
from kop.schemas.versions import stamp_version
from kop.topics.namespaces import DEDUPLICATION, MAX_PRODUCERS
from kop.topics.partition import Writer
from kop.topics.write_rules import AppendRefused

if TYPE_CHECKING:
    from kop.offset.api import Position
    from kop.pulsar.dedup import Deduplication
    from kop.pulsar.subscription import PartitionState
    from kop.topics.manager import Topic

log = logging.getLogger(__name__)

# Pulsar CompressionType -> Kafka compression codec id (none 0, gzip 1, snappy 2, lz4 3, zstd 4).
KAFKA_CODEC = {0: 0, 1: 3, 2: 1, 3: 4, 4: 2}
SHARED, EXCLUSIVE, WAIT_FOR_EXCLUSIVE, EXCLUSIVE_WITH_FENCING = 0, 1, 2, 3
_names = itertools.count()
_UNRESOLVED = -1  # a schema version whose Confluent id was not asked yet (ids are positive)
MAX_SCHEMA_IDS = 64  # versions whose ids a producer keeps (a client naming random versions is asked each time)


class Producer:
    __slots__ = ("conn", "producer_id", "name", "state", "partition", "exclusive", "schema_version", "schema_ids",
                 "failed")

    def __init__(self, conn: PulsarConnection, producer_id: int, name: str, state: PartitionState,
                 exclusive: bool, schema_version: bytes = b"") -> None:
        self.schema_version = schema_version
        # schema version (wire bytes) -> its Confluent id, None for none: what the values are prefixed with
        self.schema_ids: dict[bytes, int | None] = {}
        self.conn = conn
        self.producer_id = producer_id
        self.name = name
        self.state = state
        self.partition = state.partition
        self.exclusive = exclusive
        # An append of this producer failed, or a SEND was refused for the client to send again (not serving, a
        # schema id not loaded): its later SENDs here are refused (see `send`) until the client reconnects and
        # resends from that one, as Pulsar disconnects producers after a failed add.
        self.failed = False

    def close(self) -> None:
        if self.state.producers.get(self.name) is self:
            del self.state.producers[self.name]
            promote_waiter(self.state)

    async def confluent_id(self, raw_version: bytes) -> int | None:
        """The Confluent id of the topic's schema version ``raw_version`` (8 bytes, big-endian), None for none;
        asked of the schema store once and kept. Raises what the store raises (nothing is kept then)."""
        known = self.schema_ids.get(raw_version, _UNRESOLVED)
        if known != _UNRESOLVED:
            return known
        schema_id = None
        if len(raw_version) == 8:  # another length names no version (Pulsar reads it as 'latest' or fails)
            version = int.from_bytes(raw_version, "big", signed=True)
            schema_id = await self.conn.handler.service.schema_ids.confluent_id(self.state.seam.topic.name, version)
        if len(self.schema_ids) < MAX_SCHEMA_IDS:
            self.schema_ids[raw_version] = schema_id
        return schema_id


class WaitingProducer:
    """A WaitForExclusive PRODUCER answered ``producer_ready=false``, queued on its partition (``state.waiting``,
    kop/pulsar/waiters.py) and on its connection (``conn.waiting_producers``, so CLOSE_PRODUCER and the connection's
    close withdraw it); what it needs to become a Producer when the topic comes free (``promote_waiter``)."""

    __slots__ = ("conn", "producer_id", "request_id", "name", "state", "schema_version", "schema_id", "last",
                 "topic_epoch")

    def __init__(self, conn: PulsarConnection, req: c.pb.CommandProducer, name: str, state: PartitionState,
                 schema_version: bytes, schema_id: int | None, last: int) -> None:
        self.conn = conn
        self.producer_id = req.producer_id
        self.request_id = req.request_id
        self.name = name
        self.state = state
        self.schema_version = schema_version
        self.schema_id = schema_id
        self.last = last
        self.topic_epoch = req.topic_epoch if req.HasField("topic_epoch") else None

    def withdraw(self) -> None:
        """It went away before its turn (CLOSE_PRODUCER, its connection closed): no trace is left."""
        self.state.waiting.withdraw(self)
        if self.conn.waiting_producers.get(self.producer_id) is self:
            del self.conn.waiting_producers[self.producer_id]

    def refuse(self, code: int, message: str) -> None:
        """Its PRODUCER fails (called by the queue, which has already dropped it)."""
        if self.conn.waiting_producers.get(self.producer_id) is self:
            del self.conn.waiting_producers[self.producer_id]
            self.conn.send(c.error(self.request_id, code, message))


def promote_waiter(state: PartitionState) -> None:
    """The topic may have come free: the first WaitForExclusive waiter takes it, with the next topic epoch (or the
    one it brought), and gets its second PRODUCER_SUCCESS, ready (Pulsar's AbstractTopic.handleProducerRemoved).
    Synchronous: nothing here awaits, so no other PRODUCER slips in between the last producer going and the
    waiter taking the topic."""
    while (w := state.waiting.next_when_free(len(state.producers))) is not None:
        if w.conn.closed or w.conn.waiting_producers.get(w.producer_id) is not w:
            continue  # gone meanwhile (defensive: both paths withdraw it)
        if not state.served():
            w.refuse(c.ServerError.ServiceNotReady, "the partition is not served by this broker now; retry")
            continue
        del w.conn.waiting_producers[w.producer_id]
        state.topic_epoch = w.topic_epoch if w.topic_epoch is not None else \
            (0 if state.topic_epoch is None else state.topic_epoch + 1)
        _install(w.conn, w.request_id, w.producer_id, w.name, state, True, w.schema_version, w.schema_id, w.last)
        return


def _install(conn: PulsarConnection, rid: int, pid: int, name: str, state: PartitionState, exclusive: bool,
             schema_version: bytes, schema_id: int | None, last: int) -> None:
    """Add the producer to its partition and connection and answer PRODUCER_SUCCESS (ready)."""
    p = Producer(conn, pid, name, state, exclusive, schema_version)
    if schema_id != _UNRESOLVED:
        p.schema_ids[schema_version] = schema_id
    state.producers[name] = p
    conn.producers[pid] = p
    # schema_version is always set, as Pulsar's broker does (empty: no schema): the Java client reads it
    # unconditionally and fails the PRODUCER ("Field 'schema_version' is not set") when it is absent
    fields = {} if state.topic_epoch is None else {"topic_epoch": state.topic_epoch}
    conn.send(c.command(c.PRODUCER_SUCCESS, request_id=rid, producer_name=name, last_sequence_id=last,
                        schema_version=schema_version, **fields))


def must_wait(state: PartitionState, mode: int) -> bool:
    """Whether a PRODUCER of access ``mode`` is queued rather than answered: WaitForExclusive on a partition with
    producers (Pulsar queues it behind an exclusive one and behind Shared ones alike)."""
    return mode == WAIT_FOR_EXCLUSIVE and bool(state.producers)


async def producer(conn: PulsarConnection, frame: Frame) -> None:
    req = frame.inner
    rid = req.request_id
    existing = conn.producers.get(req.producer_id)
    if existing is not None:  # the client retried a PRODUCER that had succeeded
        conn.send(c.command(c.PRODUCER_SUCCESS, request_id=rid, producer_name=existing.name, last_sequence_id=-1,
                            schema_version=existing.schema_version))
        return
    if req.producer_id in conn.waiting_producers:  # Pulsar's answer while the first one is still pending
        conn.send(c.error(rid, c.ServerError.ServiceNotReady, "Producer is already present on the connection"))
        return
    opened = await open_partition(conn, rid, req.topic, check=lambda name: authorize.produce_refusal(conn, name))
    if opened is None:
        return
    topic, partition, state = opened
    if topic.internal:  # __consumer_offsets: the group coordinator's records, written by it alone
        conn.send(c.error(rid, c.ServerError.NotAllowedError, f"{req.topic} is an internal topic"))
        return
    blocked = await backlog_quota.refusal(conn.handler.config, state)
    if blocked is not None:  # a subscription's backlog is over quota (producer_request_hold/_exception)
        conn.send(c.error(rid, blocked[0], blocked[1]))
        return
    mode = req.producer_access_mode if req.HasField("producer_access_mode") else SHARED
    if mode not in (SHARED, EXCLUSIVE, WAIT_FOR_EXCLUSIVE, EXCLUSIVE_WITH_FENCING):
        conn.send(c.error(rid, c.ServerError.NotAllowedError, f"producer access mode {mode} is not supported"))
        return
    try:  # registered before the producer is added, as Pulsar does (tryAddSchema, then addProducer)
        schema_version = await producer_version(conn, topic.name, req)
    except SchemaRefused as e:
        conn.send(c.error(rid, e.code, str(e)))
        return
    schema_id: int | None = _UNRESOLVED
    if len(schema_version) == 8:  # its SENDs carry this version: their prefix is known before the first one
        try:
            schema_id = await conn.handler.service.schema_ids.confluent_id(
                topic.name, int.from_bytes(schema_version, "big", signed=True))
        except Exception as e:  # noqa: BLE001 - the metadata store failed: the client retries
            conn.send(c.error(rid, c.ServerError.ServiceNotReady, f"schema id not loaded: {e}"))
            return
    refused = None if must_wait(state, mode) else access_refusal(state, mode, req, len(state.waiting))
    if refused is not None:
        conn.send(c.error(rid, refused[0], refused[1]))
        return
    name = req.producer_name if req.HasField("producer_name") and req.producer_name else ""
    if name and (name in state.producers or any(w.name == name for w in state.waiting)):
        conn.send(c.error(rid, c.ServerError.ProducerBusy,
                          f"Producer with name '{name}' is already connected to topic {req.topic}"))
        return
    if not name:
        name = f"kop-{conn.handler.config.kafkaBrokerId}-{next(_names)}"
    last = -1
    if deduplication(conn, topic):
        try:
            await state.dedup.load()
        except Exception as e:  # noqa: BLE001 - the metadata store failed: the client retries
            conn.send(c.error(rid, c.ServerError.ServiceNotReady, f"de-duplication state not loaded: {e}"))
            return
        last = state.dedup.last_sequence_id(name)
        if name in state.producers:  # taken while the state loaded
            conn.send(c.error(rid, c.ServerError.ProducerBusy,
                              f"Producer with name '{name}' is already connected to topic {req.topic}"))
            return
    waits = must_wait(state, mode)  # again: the awaits above let others in, or saw the partition released
    refused = (None if waits else access_refusal(state, mode, req, len(state.waiting))) or \
        producers_exceeded(conn, topic, state, req.topic) or not_served(state)
    if refused is None and conn.closed:  # it went while this PRODUCER awaited: nothing would withdraw it
        refused = c.ServerError.ServiceNotReady, "connection closed"
    if refused is not None:
        conn.send(c.error(rid, refused[0], refused[1]))
        return
    if waits:  # Pulsar: PRODUCER_SUCCESS producer_ready=false now, the ready one when its turn comes
        waiter = WaitingProducer(conn, req, name, state, schema_version, schema_id, last)
        state.waiting.add(waiter)
        conn.waiting_producers[req.producer_id] = waiter
        conn.send(c.command(c.PRODUCER_SUCCESS, request_id=rid, producer_name=name, last_sequence_id=last,
                            schema_version=schema_version, producer_ready=False))
        return
    _admit(conn, req, state, mode, name, schema_version, schema_id, last)


def _admit(conn: PulsarConnection, req: c.pb.CommandProducer, state: PartitionState, mode: int, name: str,
           schema_version: bytes, schema_id: int | None, last: int) -> None:
    """Add the producer that passed every check: an exclusive one takes the next topic epoch (ExclusiveWithFencing
    after fencing the others out)."""
    if mode != SHARED:
        if mode == EXCLUSIVE_WITH_FENCING:
            fence_out(state)
        # Pulsar's incrementTopicEpochIfNeeded: a reconnecting producer keeps its epoch, a new one takes the next
        state.topic_epoch = req.topic_epoch if req.HasField("topic_epoch") else \
            (0 if state.topic_epoch is None else state.topic_epoch + 1)
    _install(conn, req.request_id, req.producer_id, name, state, mode != SHARED, schema_version, schema_id, last)


def not_served(state: PartitionState) -> tuple[int, str] | None:
    """ServiceNotReady when the partition left this broker while a PRODUCER awaited (PartitionState.served): a
    producer added to the dropped state would append through a closed log, and no CLOSE_PRODUCER would come."""
    if state.served():
        return None
    return c.ServerError.ServiceNotReady, "the partition is not served by this broker now; retry"


def deduplication(conn: PulsarConnection, topic: Topic) -> bool:
    """Whether Pulsar producers' sends are de-duplicated on `topic`: its own deduplicationEnabled policy, else its
    namespace's deduplication policy, else `brokerDeduplicationEnabled` (Pulsar's order)."""
    enabled = conn.handler.service.topics.namespaces.effective(topic.name, DEDUPLICATION)
    return conn.handler.config.brokerDeduplicationEnabled if enabled is None else bool(enabled)


def producers_exceeded(conn: PulsarConnection, topic: Topic, state: PartitionState, shown: str
                       ) -> tuple[int, str] | None:
    """The topic's maxProducers, else its namespace's maxProducersPerTopic (0: no limit), per partition as Pulsar
    counts per topic partition."""
    limit = conn.handler.service.topics.namespaces.limit(topic.name, MAX_PRODUCERS)
    if limit and len(state.producers) >= limit:
        return c.ServerError.ProducerBusy, f"Topic '{shown}' reached max producers limit"
    return None


class _Exclusive(Protocol):
    @property
    def name(self) -> str: ...

    @property
    def exclusive(self) -> bool: ...


class ProducerAccess(Protocol):
    """What the access-mode rule reads of a topic: its producers and its topic epoch (a persistent partition's
    PartitionState, a non-persistent topic: kop/pulsar/nonpersistent.py)."""

    @property
    def producers(self) -> Mapping[str, _Exclusive]: ...

    topic_epoch: int | None


def access_refusal(state: ProducerAccess, mode: int, req: Any, waiting: int = 0) -> tuple[int, str] | None:
    """(ServerError, message) refusing a PRODUCER of access ``mode`` on the partition as it is now, None to let it
    in: Pulsar 4.0's AbstractTopic.incrementTopicEpochIfNeeded. ``waiting``: WaitForExclusive producers queued
    there, which Shared and Exclusive producers may not overtake. A WaitForExclusive one on a busy partition is
    queued by the caller before it asks (``must_wait``; kop/pulsar/nonpersistent_commands.py alike)."""
    holder = next((p.name for p in state.producers.values() if p.exclusive), None)
    if mode == SHARED:
        if holder is not None or waiting:
            return c.ServerError.ProducerBusy, f"Topic has an existing exclusive producer: {holder}"
        return None
    if mode == EXCLUSIVE:
        if holder is not None or waiting:
            return c.ServerError.ProducerFenced, f"Topic has an existing exclusive producer: {holder}"
        if state.producers:
            return c.ServerError.ProducerFenced, "Topic has existing shared producers"
    elif mode == WAIT_FOR_EXCLUSIVE and (holder is not None or state.producers):
        return c.ServerError.ProducerBusy, f"Topic {req.topic} has producers connected"
    # Exclusive on a free topic, WaitForExclusive, ExclusiveWithFencing (whose producers are fenced out after)
    if req.HasField("topic_epoch") and state.topic_epoch is not None and req.topic_epoch < state.topic_epoch:
        return c.ServerError.ProducerFenced, ("Topic epoch has already moved. Current epoch: "
                                              f"{state.topic_epoch}, Producer epoch: {req.topic_epoch}")
    return None


def fence_out(state: PartitionState) -> None:
    """ExclusiveWithFencing: every producer of the partition is closed (CLOSE_PRODUCER, as Pulsar's
    Producer.close(true)); its client reconnects with its topic epoch and is refused ProducerFenced from then on.
    The WaitForExclusive waiters are refused ProducerFenced first, so that none is promoted as the producers go."""
    state.waiting.refuse_all(c.ServerError.ProducerFenced, "Fenced out")
    for old in list(state.producers.values()):
        old.conn.send(c.command(c.CLOSE_PRODUCER, producer_id=old.producer_id, request_id=0))
        old.conn.producers.pop(old.producer_id, None)
        old.close()


async def close_producer(conn: PulsarConnection, frame: Frame) -> None:
    req = frame.inner
    p = conn.producers.pop(req.producer_id, None)
    if p is not None:
        p.close()
    waiter = conn.waiting_producers.get(req.producer_id)
    if waiter is not None:  # closed while it waited: Pulsar answers SUCCESS and it never takes the topic
        waiter.withdraw()
    conn.send(c.command(c.SUCCESS, request_id=req.request_id))


def refusal_code(conn: PulsarConnection) -> int:
    """The ServerError of a SEND_ERROR that makes this client fail the message instead of reconnecting and
    resending it forever. The C++ client (and so the Python, Node and C# ones built on it) fails a message only
    on ChecksumError (ClientConnection::handleSendError -> ProducerImpl::removeCorruptMessage) and closes the
    connection on any other error, which resends the message; the Java client fails it on NotAllowedError
    (ProducerImpl.recoverNotAllowedError) and resends after a ChecksumError its local checksum disproves. The
    message text says the real reason; the C++ client logs it."""
    return c.ServerError.ChecksumError if conn.client_version.startswith("Pulsar-CPP") else \
        c.ServerError.NotAllowedError


def send_refused(conn: PulsarConnection, pid: int, seq: int, message: str) -> None:
    conn.send(c.send_error(pid, seq, refusal_code(conn), message))


def size_refusal(conn: PulsarConnection, frame: Frame) -> str | None:
    """Why a SEND is over `maxMessageSize`, None when it is not; the one size rule of Pulsar SENDs, persistent or
    not. A chunk is up to maxMessageSize of payload plus its metadata: Pulsar's broker checks no chunk's size
    (AbstractTopic.isExceedMaximumMessageSize), the frame limit (maxMessageSize + 10 KiB) bounds it. Raises what
    parsing the metadata raises."""
    limit = conn.handler.config.maxMessageSize
    size = len(frame.headers_and_payload or b"")
    if size > limit and frame.metadata.num_chunks_from_msg <= 1:
        return f"message of {size} bytes exceeds maxMessageSize {limit}"
    return None


def stored_batch(md: Any, payload: Any, limit: int, schema_id: int | None) -> bytes | bytearray:
    """The Kafka batch a SEND's entry is stored as: converted (kop/pulsar/convert.py), else - a payload that does not
    decompress, or to more than ``limit``, messages that do not parse - as sent (kop/pulsar/opaque.py), as Pulsar's
    broker stores it. Raises ConversionError for an entry without a message."""
    try:
        converted = pulsar_to_kafka(md, payload, 0, compression=KAFKA_CODEC.get(md.compression, 0), limit=limit,
                                    schema_id=schema_id)
    except ConversionError as e:
        converted = unconverted_to_kafka(md, payload, str(e))
    if converted is None:
        raise ConversionError("the entry holds no message")
    return stamp_version(converted, md.schema_version) if md.schema_version else converted


def _accepting(conn: PulsarConnection, frame: Frame, pid: int, seq: int) -> Producer | None:
    """The SEND's open producer, or None after answering SEND_ERROR: no such producer, a bad checksum, a
    broker not serving. (The size rule needs the metadata - a chunk is exempt - so `send` checks it.)"""
    p = conn.producers.get(pid)
    if p is None:
        conn.send(c.send_error(pid, seq, c.ServerError.NotAllowedError, f"producer {pid} is not open"))
        return None
    if conn.checksum_failed:
        conn.send(c.send_error(pid, seq, c.ServerError.ChecksumError, "message checksum does not match"))
        return None
    if conn.handler.service.topics.paused:
        # Cluster mode, the ZooKeeper session not proven alive (kop/cluster/lease.py): another broker may own
        # the partition by now. ServiceNotReady makes the client reconnect (a lookup) and send again - this
        # message and every later one. Those later ones are pipelined on this connection already, and the lease
        # may be back before they are read: storing one of them would put it before the refused message, whose
        # resend de-duplication then answers as a duplicate, never storing it (issue #24, `all-brokers-kill`: 8
        # acknowledged records lost so). So the producer takes nothing more here, as after a failed append.
        p.failed = True
        conn.send(c.send_error(pid, seq, c.ServerError.ServiceNotReady, "this broker is not serving now; retry"))
        return None
    return p


async def send(conn: PulsarConnection, frame: Frame) -> None:
    req = frame.inner
    pid, seq = req.producer_id, req.sequence_id
    p = _accepting(conn, frame, pid, seq)
    if p is None:
        return
    limit = conn.handler.config.maxMessageSize
    try:
        md = frame.metadata
        too_large = size_refusal(conn, frame)
        if too_large is not None:
            send_refused(conn, pid, seq, too_large)
            return
        raw_version = md.schema_version
        schema_id = p.schema_ids.get(raw_version, _UNRESOLVED) if raw_version else None
        if schema_id == _UNRESOLVED:  # a version this producer has not sent before: asked once
            try:
                schema_id = await p.confluent_id(raw_version)
            except Exception as e:  # noqa: BLE001 - the metadata store failed: the client resends
                p.failed = True  # and the later SENDs with it, in order (see _accepting)
                conn.send(c.send_error(pid, seq, c.ServerError.PersistenceError, f"schema id not loaded: {e}"))
                return
        batch = stored_batch(md, frame.payload, limit, schema_id)
        header = parse_batch_header(batch)
    except Exception as e:  # noqa: BLE001 - ConversionError, a metadata that does not parse, a codec error
        send_refused(conn, pid, seq, f"message refused: {e}")
        return
    highest = req.highest_sequence_id if req.HasField("highest_sequence_id") else None
    dedup = p.state.dedup if deduplication(conn, p.state.seam.topic) else None
    top = highest if highest is not None else seq
    entry_seq = top  # kept with the entry: what a new owner's de-duplication replays (kop/pulsar/dedup.py)
    if md.num_chunks_from_msg > 1 and md.chunk_id < md.num_chunks_from_msg - 1:
        dedup = None  # a message's chunks share its sequence id: its last chunk is the one checked and recorded
        entry_seq = max(seq - 1, 0)
    if p.failed:  # stored behind the failed one, it would leave a hole that de-duplication cannot mend
        conn.send(c.send_error(pid, seq, c.ServerError.PersistenceError,
                               "an earlier message of this producer failed: reconnect and resend"))
        return
    pushed = -1 if dedup is None else dedup.pushed.get(p.name, -1)
    status = NOT_DUP if dedup is None else dedup.check(p.name, seq, top)
    if status == DUP:
        # Pulsar's answer to a resend: a receipt that names no entry (nothing was stored).
        fields = {"producer_id": pid, "sequence_id": seq, "message_id": c.message_id(-1, -1)}
        if highest is not None:
            fields["highest_sequence_id"] = highest
        conn.send(c.command(c.SEND_RECEIPT, **fields))
        return
    if status == UNKNOWN:  # the first copy is still being written: the client sends it again later
        conn.send(c.send_error(pid, seq, c.ServerError.PersistenceError,
                               f"message {seq} is still being persisted; resend it"))
        return
    try:
        fut = await _issue_entry(p, dedup, pushed, batch, header, entry_seq)
    except AppendRefused as e:  # the topic's write rules, as a Kafka producer meets them
        send_refused(conn, pid, seq, f"{e.error}: {e.message}")
        return
    except Exception as e:  # noqa: BLE001
        _append_failed(p, dedup)
        conn.send(c.send_error(pid, seq, c.ServerError.PersistenceError, str(e)))
        return
    partition, nbytes, name = p.partition, len(batch), p.name

    def done(f: asyncio.Future[tuple[Position, int]]) -> None:
        if f.cancelled() or f.exception() is not None:
            _append_failed(p, dedup)
            err = "cancelled" if f.cancelled() else str(f.exception())
            conn.send(c.send_error(pid, seq, c.ServerError.PersistenceError, f"append failed: {err}"))
            return
        position, base = f.result()
        p.state.msg_in += header.last_offset_delta + 1  # an encrypted batch is one record of N messages
        p.state.bytes_in += nbytes
        if dedup is not None:
            dedup.persisted_up_to(name, top, base + header.last_offset_delta + 1)
        fields = {"producer_id": pid, "sequence_id": seq,
                  "message_id": c.message_id(position.ledger_id, position.entry_id, partition)}
        if highest is not None:
            fields["highest_sequence_id"] = highest
        conn.send(c.command(c.SEND_RECEIPT, **fields))

    fut.add_done_callback(done)


async def _issue_entry(p: Producer, dedup: Deduplication | None, pushed: int, batch: bytes | bytearray,
                       header: BatchHeader, entry_seq: int) -> asyncio.Future[tuple[Position, int]]:
    """The SEND's append, issued. Cancelled before it was (the connection closed while the entry was prepared: a
    recompression in a thread), nothing was appended: de-duplication's count of the message as pushed goes back
    to `pushed`, else its resend on the next connection would be answered "still being persisted" forever. (Not
    kop.aio.run_to_end: a task per SEND would cost a loop turn each on the hot path.)"""
    try:
        return await p.state.seam.issue_entry(batch, Writer.PULSAR, header, p.name, entry_seq,
                                              lambda _error: _append_failed(p, dedup))
    except asyncio.CancelledError:
        if dedup is not None:
            dedup.not_pushed(p.name, pushed)
        raise


def _append_failed(p: Producer, dedup: Deduplication | None) -> None:
    """A SEND's append failed (issue #24: a lost ack quorum lost acknowledged messages before this): what the
    producer pushed since its last persisted message may be sent again, and nothing more of it is stored on this
    connection - a later message stored behind the failed one would make the resend of the failed one look like
    a duplicate. The client reconnects on the SEND_ERROR and resends from the failed message. Called twice per
    failed SEND: at once, by the managed ledger's failure hook (a SEND read in the loop turns before the
    future's callback was stored behind the failed one: the chaos suite's Pulsar duplicates after
    `bookie-quorum`), and again from that callback."""
    p.failed = True
    if dedup is not None:
        dedup.failed(p.name)
