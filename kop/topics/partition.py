"""The partition seam: every append and read of a partition, whoever asks, goes through a Partition.

Why one seam: two protocols and two coordinators write the same stored format. A rule applied by one writer's
handler is a rule the others bypass (Pulsar producers once wrote around `max.message.bytes`, compacted-topic keys
and LogAppendTime). Here a batch meets, once and in this order:

1. the topic's write rules (kop/topics/write_rules.py): size, control batches, keys on compacted topics,
   timestamp bounds - for client writers (Kafka Produce, Pulsar SEND); a coordinator's own records meet the
   size rule only (its records are keyed and stamped by it). On a topic with `confluent.value.schema.validation`
   / `confluent.key.schema.validation`, a Kafka producer's records must name schema ids registered under
   `<topic>-value` / `<topic>-key`: the ids come from `schema_ids` (RegisteredSchemaIds, the schema store of
   kop/schemas/, set by the composition root; this layer sits below it and knows only the protocol). A Pulsar
   SEND skips that rule: its payload never carries Confluent's prefix - the conversion (kop/pulsar/) writes the
   prefix itself from the producer's schema version, which the Pulsar schema registry has already checked -
   so there is nothing of the producer's to refuse (a producer without a schema writes its bytes as Pulsar
   would let it). Without `schema_ids` (a TopicManager outside a broker), such topics refuse Kafka batches
   rather than store records unchecked;
2. `compression.type` recompression and LogAppendTime restamping (every writer but markers);
3. the partition leader epoch stamped into the batch (outside the CRC), so consumers see one epoch;
4. the producer state: idempotent sequence checks and de-duplication, the transaction a transactional batch
   opens (verified with the transaction coordinator through `verifier`, KIP-890 part 1);
5. the log append, issued now: appends complete in issue order.

A refusal is AppendRefused with Kafka's error name; the Kafka handler answers it as is, the Pulsar handler maps
it to a SEND_ERROR (kop/pulsar/produce.py). The read side (`read`, append waiters, offset <-> position) is the
partition log's, reached through `log` (kop/offset/api.py): only kop/offset/ computes offsets from positions.
"""

from __future__ import annotations

import asyncio
import enum
import logging
import struct
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal, Protocol

from kop.offset.producer_state import BatchRecord, ProducerStateTable, SequenceError
from kop.protocol.errors import ErrorCode
from kop.protocol.records import BatchHeader, CorruptRecordError, parse_batch_header
from kop.topics.write_rules import (
    PULSAR_SIZE_SLACK,
    THREAD_RECOMPRESS_BYTES,
    AppendRefused,
    SchemaIdSets,
    TopicRules,
    recompress_batch,
    restamp_log_append_time,
)

if TYPE_CHECKING:
    from kop.config import BrokerConfig
    from kop.managed_ledger import FailureHook, Position
    from kop.offset.api import PartitionLog
    from kop.topics.manager import Topic
    from kop.topics.names import TopicName

log = logging.getLogger(__name__)

LEADER_EPOCH = 0  # one leader per partition, ever: the epoch every stored batch carries
_EPOCH_BYTES = struct.pack(">i", LEADER_EPOCH)
# CONCURRENT_TRANSACTIONS is not among them: a TV2 producer's implicit add answers it as Kafka 4.4 does (the
# previous transaction's markers are being written), and the produce client retries it.
_COORDINATOR_RETRIABLE = frozenset({ErrorCode.COORDINATOR_NOT_AVAILABLE, ErrorCode.COORDINATOR_LOAD_IN_PROGRESS,
                                    ErrorCode.NOT_COORDINATOR})


class Writer(enum.Enum):
    """Who appends: decides which rules apply and how much size slack the batch gets."""

    KAFKA = "kafka"  # a Kafka producer's batch, as sent
    PULSAR = "pulsar"  # a Pulsar SEND converted to a batch (kop/pulsar/convert.py)
    COORDINATOR = "coordinator"  # a coordinator's records in its internal topic


class TxnVerifier(Protocol):
    """The transaction coordinator's check that a partition is in a producer's transaction (KIP-890 part 1)."""

    async def verify_partition(self, transactional_id: str, producer_id: int, producer_epoch: int,
                               topic: str, partition: int) -> int: ...


class RegisteredSchemaIds(Protocol):
    """The schema store's answer to the schema-id rule (kop/schemas/api.py's TopicSchemaIds is one): every id
    registered, and not deleted, under the subject `<topic>-<part>`."""

    async def registered_ids(self, topic: TopicName, part: Literal["key", "value"], fresh: bool = False
                             ) -> frozenset[int]: ...


@dataclass(slots=True)
class Issued:
    """An append that was started, or found to repeat one of the producer's last batches."""

    durable: asyncio.Future[int] | None  # the base offset once durable; None for a duplicate
    duplicate: BatchRecord | None  # the earlier batch a retry repeats: answered with its offsets
    log_append_time: int  # the broker time stamped on a LogAppendTime topic, else -1
    nbytes: int
    nrecords: int

    async def base_offset(self) -> int:
        """Shielded: a waiter cancelled (its connection closed) must not cancel the append, which goes on;
        a cancelled future would make the producer state forget a batch that is stored, and the client's
        retry would be stored twice (found by the chaos suite: a broker cut from its clients)."""
        if self.duplicate is not None:
            base = self.duplicate.base_offset
            return base if isinstance(base, int) else await asyncio.shield(base)
        assert self.durable is not None
        return await asyncio.shield(self.durable)


class ProducerTables:
    """The producer-state tables of the open partitions (each kept by its partition log), remembered for
    producer-id expiration (Kafka's producer.id.expiration.ms) and dropped when a log is released."""

    def __init__(self) -> None:
        self._tables: dict[str, ProducerStateTable] = {}

    async def of(self, plog: PartitionLog) -> ProducerStateTable:
        table = self._tables.get(plog.name)
        if table is None:
            table = await plog.producer_state()
            self._tables[plog.name] = table
        return table

    def forget(self, ledger_name: str) -> None:
        self._tables.pop(ledger_name, None)

    def expire(self, older_than_ms: int) -> None:
        for table in self._tables.values():
            table.expire(older_than_ms)


class Partition:
    """One partition of one topic, as every writer and reader sees it. Cheap to make: the open log is the
    state; a Partition adds the topic's rules and the broker's producer tables."""

    __slots__ = ("topic", "index", "log", "_broker", "_tables", "_schema_ids")

    def __init__(self, topic: Topic, index: int, log: PartitionLog, broker: BrokerConfig,
                 tables: ProducerTables, schema_ids: RegisteredSchemaIds | None = None) -> None:
        self.topic = topic
        self.index = index
        self.log = log
        self._broker = broker
        self._tables = tables
        self._schema_ids = schema_ids

    @property
    def label(self) -> str:
        return f"{self.topic.name.canonical}-{self.index}"

    # ------------------------------------------------------------------ appends
    async def issue(self, batch: bytes | bytearray | memoryview, writer: Writer, header: BatchHeader | None = None, *,
                    transactional_id: str | None = None, verifier: TxnVerifier | None = None,
                    kafka_topic: str | None = None, client_name: str | None = None) -> Issued:
        """Apply the rules and start the append (module docstring); nothing here waits for durability.
        `header`: the batch's, when the caller parsed it already. `transactional_id` and `verifier` serve
        transactional batches; `kafka_topic` is the broker-global Kafka name the transaction coordinator keys
        partitions by; `client_name` the topic as the writer's client spells it (in refusal messages). Raises
        AppendRefused."""
        batch, header, max_ts, append_time = await self._prepare(batch, writer, header, client_name)
        table: ProducerStateTable | None = None
        if writer is not Writer.COORDINATOR and (header.producer_id >= 0 or header.is_transactional):
            table = await self._tables.of(self.log)
            if header.is_transactional:
                await self._check_transactional(table, header, transactional_id, verifier, kafka_topic)
            try:
                dup = table.check(header.producer_id, header.producer_epoch, header.base_sequence,
                                  header.records_count, header.is_transactional)
            except SequenceError as e:
                raise AppendRefused(e.error, e.message) from None
            if dup is not None:
                return Issued(None, dup, append_time, 0, 0)
        settle = _Settle(table, header.producer_id) if table is not None and header.producer_id >= 0 else None
        fut = self.log.append_nowait(batch, header.last_offset_delta, max_ts,
                                     None if settle is None else settle.failed)
        if settle is not None:
            settle.rec = settle.table.record(header.producer_id, header.producer_epoch, header.base_sequence,
                                             header.records_count, fut, header.is_transactional, max_ts)
            fut.add_done_callback(settle)
        return Issued(fut, None, append_time, len(batch), header.records_count)

    async def issue_entry(self, batch: bytes | bytearray | memoryview, writer: Writer,
                          header: BatchHeader | None = None, producer_name: str = "", sequence_id: int = 0,
                          on_failed: FailureHook | None = None) -> asyncio.Future[tuple[Position, int]]:
        """issue() for a writer that needs the entry's position back (a Pulsar SEND_RECEIPT names the entry):
        the future gives (position, base offset) once durable. Batches without a producer id only (Pulsar
        producers keep their own de-duplication, kop/pulsar/dedup.py). `producer_name` and `sequence_id` (the
        SEND's highest): kept with the entry, which a new owner's de-duplication replays. `on_failed`: called
        at once if the append fails (ManagedLedger.add_entry_nowait: the writer's state must know before the
        next append is checked)."""
        batch, header, max_ts, _ = await self._prepare(batch, writer, header)
        if header.producer_id >= 0 or header.is_transactional:
            raise AppendRefused("INVALID_RECORD", "issue_entry takes batches without producer state")
        return self.log.append_entry_nowait(batch, header.last_offset_delta, max_ts, producer_name, sequence_id,
                                            on_failed)

    async def append(self, batch: bytes | bytearray | memoryview, writer: Writer = Writer.COORDINATOR) -> int:
        """issue() and wait: the base offset once durable (the coordinators' internal-topic writes). A
        transactional batch (a TxnOffsetCommit's offsets) gets a producer-state snapshot first, so a restart
        rebuilds its transaction. The producer state is not checked: a coordinator's batch is its own (the log
        tracks the transaction it opens)."""
        header = _header(batch)
        if header.is_transactional:
            await self.log.ensure_snapshot()
        return await (await self.issue(batch, writer, header)).base_offset()

    async def write_txn_marker(self, producer_id: int, producer_epoch: int, commit: bool,
                               coordinator_epoch: int) -> int:
        """A COMMIT or ABORT marker ending the producer's transaction here; its offset once durable. Raises
        AppendRefused with TRANSACTION_COORDINATOR_FENCED or INVALID_PRODUCER_EPOCH."""
        try:
            return await self.log.write_txn_marker(producer_id, producer_epoch, commit, coordinator_epoch)
        except SequenceError as e:
            raise AppendRefused(e.error, e.message) from None

    # ------------------------------------------------------------------ the steps
    async def _prepare(self, batch: bytes | bytearray | memoryview, writer: Writer, header: BatchHeader | None,
                       client_name: str | None = None) -> tuple[bytes | bytearray | memoryview, BatchHeader, int, int]:
        """Rules, recompression, restamping and the epoch: (batch, header, max timestamp, log append time)."""
        if header is None:
            header = _header(batch)
        topic = self.topic
        if topic.internal and writer is not Writer.COORDINATOR:
            raise AppendRefused("INVALID_TOPIC_EXCEPTION", "Cannot append to an internal topic")
        rules = TopicRules.of(topic.configs, self._broker)
        if writer is Writer.COORDINATOR:
            if len(batch) > rules.max_bytes:
                raise AppendRefused("MESSAGE_TOO_LARGE", f"a {len(batch)}-byte batch exceeds "
                                    f"max.message.bytes={rules.max_bytes} of {self.label}")
        else:
            label = self.label if client_name is None else f"{client_name}-{self.index}"
            ids = None
            slack = PULSAR_SIZE_SLACK if writer is Writer.PULSAR else 0
            if writer is Writer.KAFKA and rules.validates_schemas:
                ids = await self._schema_id_sets(rules, client_name)
                try:
                    rules.check(header, batch, label, slack, schema_ids=ids)
                except AppendRefused as e:
                    if e.error != "INVALID_RECORD":
                        raise
                    # the ids were cached: a schema registered a moment ago (through another broker of the
                    # cluster) is not refused for that - the store is asked again, and its answer decides
                    ids = await self._schema_id_sets(rules, client_name, fresh=True)
                    rules.check(header, batch, label, slack, schema_ids=ids)
            else:
                rules.check(header, batch, label, slack)
        if rules.needs_recompression(header):
            assert rules.codec is not None
            if len(batch) >= THREAD_RECOMPRESS_BYTES:  # lz4 level 9 / gzip run at ~13-30 MB/s: off the loop
                batch = await asyncio.to_thread(recompress_batch, batch, rules.codec, rules.level)
            else:
                batch = recompress_batch(batch, rules.codec, rules.level)
        max_ts, append_time = header.max_timestamp, -1
        if rules.log_append_time or batch[12:16] != _EPOCH_BYTES:
            # a converted Pulsar message is immutable bytes: copied only when it must change
            out = bytearray(batch) if isinstance(batch, bytes) else batch
            out[12:16] = _EPOCH_BYTES  # partitionLeaderEpoch, outside the CRC
            if rules.log_append_time:
                append_time = int(time.time() * 1000)
                restamp_log_append_time(out, append_time)
                max_ts = append_time
            batch = out
        return batch, header, max_ts, append_time

    async def _schema_id_sets(self, rules: TopicRules, client_name: str | None, fresh: bool = False) -> SchemaIdSets:
        """The registered ids the records of a validating topic may name (write_rules.SchemaIdSets)."""
        topic = client_name or self.topic.name.canonical
        if self._schema_ids is None:
            raise AppendRefused("INVALID_RECORD", f"Topic {topic} validates schema ids (confluent.*.schema.validation)"
                                " but this broker has no schema registry to check them against")
        try:
            ids = self._schema_ids
            key = await ids.registered_ids(self.topic.name, "key", fresh) if rules.validate_keys else None
            value = await ids.registered_ids(self.topic.name, "value", fresh) if rules.validate_values else None
        except Exception as e:  # noqa: BLE001 - the store could not answer: retriable for the producer
            log.warning("reading the registered schema ids of %s failed: %r", topic, e)
            raise AppendRefused("KAFKA_STORAGE_ERROR", f"The schema ids registered for topic {topic} could not be "
                                f"read: {e}") from None
        return SchemaIdSets(topic, key, value)

    async def _check_transactional(self, table: ProducerStateTable, header: BatchHeader,
                                   transactional_id: str | None, verifier: TxnVerifier | None,
                                   kafka_topic: str | None) -> None:
        """A transactional batch needs its request's transactional id (Kafka answers
        TRANSACTIONAL_ID_AUTHORIZATION_FAILED without one), a producer-state snapshot before the partition's
        first transaction (restart recovery), and for the first batch of a transaction here the coordinator's
        word that the partition is in the transaction, when a coordinator is there to ask."""
        if not transactional_id:
            raise AppendRefused("TRANSACTIONAL_ID_AUTHORIZATION_FAILED",
                                "A transactional batch needs the request's transactional id")
        if header.producer_id < 0 or header.producer_epoch < 0:
            raise AppendRefused("INVALID_RECORD", "A transactional batch needs a producer id and epoch")
        await self.log.ensure_snapshot()
        if verifier is None or not table.needs_verification(header.producer_id, header.producer_epoch):
            return
        name = kafka_topic or self.topic.name.canonical
        try:
            code = ErrorCode(await verifier.verify_partition(transactional_id, header.producer_id,
                                                             header.producer_epoch, name, self.index))
        except Exception as e:  # noqa: BLE001 - the coordinator could not answer: the producer retries
            log.warning("verifying %s-%d for transactional id %s failed: %r", name, self.index, transactional_id, e)
            code = ErrorCode.NOT_ENOUGH_REPLICAS
        if code == ErrorCode.NONE:
            return
        if code in _COORDINATOR_RETRIABLE:
            code = ErrorCode.NOT_ENOUGH_REPLICAS  # Kafka's mapping: a producer knows no coordinator errors here
        raise AppendRefused(code.name, f"Partition {name}-{self.index} is not part of the transaction of producer "
                            f"{header.producer_id} epoch {header.producer_epoch} ({code.name})")


def _header(batch: bytes | bytearray | memoryview) -> BatchHeader:
    try:
        return parse_batch_header(batch)
    except struct.error:
        raise AppendRefused("CORRUPT_MESSAGE", f"a {len(batch)}-byte batch has no complete header") from None
    except CorruptRecordError as e:  # pragma: no cover - parse_batch_header does no validation today
        raise AppendRefused(getattr(e, "error", "CORRUPT_MESSAGE"), str(e)) from None


class _Settle:
    """An idempotent append's end in the producer state: the batch's offsets once durable, or the batch
    forgotten when the append failed (so the client's retry is not mistaken for a duplicate). `failed` is the
    managed ledger's failure hook: it runs inside the call that fails the append, so the next batch of the
    producer is checked against a table that no longer holds the failed ones - checked a loop turn later, in
    the future's callback, a batch sent behind them was taken and stored behind a hole (issue #24)."""

    __slots__ = ("table", "pid", "rec")

    def __init__(self, table: ProducerStateTable, pid: int) -> None:
        self.table, self.pid = table, pid
        self.rec: BatchRecord | None = None  # recorded right after the append is issued, before it can fail

    def failed(self, _error: BaseException | None = None) -> None:
        if self.rec is not None:
            self.table.forget(self.pid, self.rec)
            self.rec = None

    def __call__(self, fut: asyncio.Future[int]) -> None:
        if fut.cancelled() or fut.exception() is not None:
            self.failed()  # an append refused at once gets no hook
        elif self.rec is not None:
            self.table.settled(self.pid, self.rec, fut.result())
