"""The transaction coordinator: Kafka's transactions (KIP-98, KIP-447, KIP-890 part 1), state in
__transaction_state.

The async shell around `state.TransactionStateMachine` (the rules, sans-IO), shaped like the group
coordinator (kop/coordinator/coordinator.py): it owns the __transaction_state partitions of this broker,
loads them (COORDINATOR_LOAD_IN_PROGRESS meanwhile, NOT_COORDINATOR for ids of partitions another broker
owns), writes each transit the machine prepares and applies it once durable, and drives what happens after
an EndTxn:

1. the PrepareCommit/PrepareAbort transit is written; the client is answered then (as Kafka does);
2. a marker (a control batch) goes into every partition of the transaction - `write_txn_marker` of the
   partition's log - and, for the __consumer_offsets partition of a group's TxnOffsetCommit, the group
   coordinator is told so it makes the pending offsets visible or drops them; a marker that fails (a
   partition moving, storage trouble) is retried until it lands, as Kafka's marker channel does;
3. the CompleteCommit/CompleteAbort transit is written. Until then, the producer's next AddPartitionsToTxn
   gets CONCURRENT_TRANSACTIONS (retriable).

A request the coordinator has begun is carried out to its end even when the client's connection closes
meanwhile (the connection cancels its requests' tasks; kop.aio.run_to_end): stopped between writing a
transit and applying it, the transaction would stay "being written" and answer CONCURRENT_TRANSACTIONS to
its producer forever (found by the fault suite's client partition).

Placement: transactional id T belongs to partition abs(hashCode(T)) % N of __transaction_state (Kafka's
formula). On load, PrepareX transactions re-drive their markers; Ongoing ones wait for the timeout sweep.
Two periodic tasks (kop/aio.py) abort transactions past their timeout (fencing the producer) and expire
idle transactional ids (a tombstone).

Cluster mode: a marker for a partition another broker owns goes to that broker as WriteTxnMarkers
(markers.py, a small inter-broker client); the owner writes it, and for __consumer_offsets tells its group
coordinator. The coordinator epoch in markers is 0 (the constant leader epoch of this broker's partitions).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable
from typing import TYPE_CHECKING

from kop.aio import PeriodicTask, run_to_end
from kop.config import BrokerConfig
from kop.coordinator.records import RecordError, partition_for
from kop.coordinator.runtime import COORDINATOR_EPOCH, CoordinatorRuntime
from kop.coordinator.transactions import records as trec
from kop.coordinator.transactions.markers import MarkerChannel
from kop.coordinator.transactions.state import (
    InitResult,
    ListedTransaction,
    TopicPartition,
    TransactionStateMachine,
    Transit,
    TxnMetadata,
    TxnState,
)
from kop.offset.api import FetchedBatch
from kop.protocol.errors import ErrorCode
from kop.protocol.records import decode_records, parse_batch_header
from kop.topics.manager import Topic, TopicError, TopicManager
from kop.topics.names import OFFSETS_TOPIC, TRANSACTION_STATE_TOPIC
from kop.topics.write_rules import AppendRefused

if TYPE_CHECKING:
    from kop.coordinator.coordinator import GroupCoordinator
    from kop.topics.producer_ids import ProducerIdAllocator

log = logging.getLogger(__name__)

# A sweep this much later than its interval (s) means the event loop stood still (the process was stopped).
TXN_STALL_S = 3.0

E = ErrorCode
MARKER_RETRY_S = 0.5  # a marker that could not be written is tried again this long after
IMPLICIT_ADD_RETRY_S = 0.1  # Kafka's add.partitions.to.txn.retry.backoff.max.ms
IMPLICIT_ADD_BACKOFF_S = 0.02  # Kafka's add.partitions.to.txn.retry.backoff.ms


class TransactionCoordinator:
    """Kafka's transaction coordinator for this broker's __transaction_state partitions (see the module
    docstring). The API modules call it; the broker service starts, loads and unloads it; the produce path
    calls `verify_partition` (KIP-890 part 1)."""

    def __init__(self, config: BrokerConfig, topics: TopicManager, producer_ids: ProducerIdAllocator,
                 groups: GroupCoordinator | None = None, clock: Callable[[], float] = time.time) -> None:
        self.config = config
        self.topics = topics
        self.producer_ids = producer_ids
        self.groups = groups
        self.clock = clock
        self.machine = TransactionStateMachine(config.transactionMaxTimeoutMs)
        # the life of the __transaction_state partitions here (kop/coordinator/runtime.py)
        self.runtime = CoordinatorRuntime("transaction coordinator", config, topics, topics.transaction_state_topic,
                                          config.transactionStateLogNumPartitions,
                                          "transactionStateLogNumPartitions", self)
        self._markers: dict[str, asyncio.Task[None]] = {}  # transactional id -> its marker task
        self.channel = MarkerChannel()  # markers for partitions of other brokers (cluster mode)
        self._stopped = False
        self._aborter = PeriodicTask("txn-abort-timed-out",
                                     config.transactionAbortTimedOutTransactionCleanupIntervalMs / 1000,
                                     self.abort_timed_out, log)
        # Timeouts do not count time this broker was not serving (issue #24): the ownership's serving epoch
        # the last sweep saw, the loop time of that sweep, and from when (wall ms) timeouts count afresh.
        self._serving_epoch = 0
        self._last_sweep: float | None = None
        self._timeouts_from = 0
        self._expirer = PeriodicTask("txn-expire-ids",
                                     config.transactionRemoveExpiredTransactionalIdCleanupIntervalMs / 1000,
                                     self.expire_transactional_ids, log)

    def now_ms(self) -> int:
        return int(self.clock() * 1000)

    @property
    def topic(self) -> Topic | None:
        return self.runtime.topic

    @property
    def num_partitions(self) -> int:
        return self.runtime.num_partitions

    # ================================================================== lifecycle
    async def start(self) -> None:
        await self.runtime.start()
        self._aborter.start()
        self._expirer.start()

    async def wait_loaded(self) -> None:
        await self.runtime.wait_loaded()

    async def stop(self) -> None:
        self._stopped = True
        await self.runtime.stop()
        await self._aborter.stop()
        await self._expirer.stop()
        tasks = list(self._markers.values())
        for t in tasks:
            t.cancel()
        for t in tasks:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await t
        self.channel.close()

    # ================================================================== loading (the runtime's Shard)
    def load_partition(self, p: int) -> None:
        """This broker owns __transaction_state partition `p` (a bundle acquired in cluster mode): read it
        in the background; its ids get COORDINATOR_LOAD_IN_PROGRESS until then."""
        self.runtime.load_partition(p)

    def unload_partition(self, p: int) -> None:
        """Another broker owns partition `p` now: forget its transactions (their state stays in the log)."""
        self.runtime.unload_partition(p)

    def failed_partitions(self) -> list[int]:
        """__transaction_state partitions whose load failed (retried on request)."""
        return self.runtime.failed_partitions()

    def begin_load(self, partition: int) -> _TxnLoad:
        return _TxnLoad(self, partition)

    def drop(self, partition: int) -> None:
        """Forget the transactions of `partition` and stop driving their markers."""
        gone = [tid for tid in self.machine.txns if self.partition_of(tid) == partition]
        for tid in gone:
            task = self._markers.pop(tid, None)
            if task is not None:
                task.cancel()
        self.machine.drop(gone)

    # ================================================================== placement
    def partition_of(self, transactional_id: str) -> int:
        return self.runtime.partition_of(transactional_id)

    def partition_error(self, transactional_id: str) -> int:
        """0 when this coordinator serves `transactional_id` now, else the error to answer with."""
        if self._stopped:
            return E.COORDINATOR_NOT_AVAILABLE
        return self.runtime.error(self.partition_of(transactional_id))

    @property
    def available(self) -> bool:
        return not self._stopped and self.runtime.available

    def topic_key(self, name: str) -> str:
        """A topic as transactions store it: its Kafka name, whichever of KoP's spellings the client used."""
        try:
            return self.topics.kafka_name(self.topics.parse(name))
        except ValueError:
            return name

    # ================================================================== writes
    async def _persist(self, t: Transit) -> int:
        """Write a transit and apply it: 0, or the error for the client (the transit is then abandoned)."""
        try:
            # a TV2 transaction in Kafka's value version 1, whose ClientTransactionVersion a reload needs
            await self._append(t.transactional_id, trec.encode_value(t.value(), 1 if t.client_tv >= 2 else 0))
        except Exception as e:
            log.warning("transactional id %s: writing %s to %s failed: %r", t.transactional_id, t.state.name,
                        TRANSACTION_STATE_TOPIC, e)
            self.machine.abandon(t.transactional_id)
            return E.NOT_COORDINATOR  # a storage failure: the client finds the coordinator again and retries
        self.machine.complete(t)
        return 0

    async def _append(self, transactional_id: str, value: bytes | None) -> None:
        """One record of `transactional_id` into its __transaction_state partition (through the runtime)."""
        await self.runtime.write(self.partition_of(transactional_id), [(trec.encode_key(transactional_id), value)],
                                 self.now_ms())

    # ================================================================== InitProducerId
    async def init_producer_id(self, transactional_id: str, timeout_ms: int, producer_id: int, producer_epoch: int
                               ) -> InitResult:
        return await run_to_end(self._init_producer_id(transactional_id, timeout_ms, producer_id, producer_epoch))

    async def _init_producer_id(self, transactional_id: str, timeout_ms: int, producer_id: int, producer_epoch: int
                                ) -> InitResult:
        err = self.partition_error(transactional_id)
        if err:
            return InitResult(err)
        new_pid = None
        if self.machine.needs_producer_id(transactional_id):
            new_pid = await self.producer_ids.next_id()
            err = self.partition_error(transactional_id)  # the partition may have moved meanwhile
            if err:
                return InitResult(err)
        result = self.machine.init_producer_id(transactional_id, timeout_ms, producer_id, producer_epoch,
                                               self.now_ms(), new_pid)
        if result.transit is None:
            return result
        err = await self._persist(result.transit)
        if err:
            return InitResult(err)
        if result.fencing:
            self._start_markers(transactional_id)
            return InitResult(E.CONCURRENT_TRANSACTIONS)
        return result

    # ================================================================== AddPartitionsToTxn / AddOffsetsToTxn
    async def add_partitions(self, transactional_id: str, producer_id: int, producer_epoch: int,
                             partitions: list[TopicPartition], tv2: bool = False) -> int:
        return await run_to_end(self._add_partitions(transactional_id, producer_id, producer_epoch, partitions, tv2))

    async def _add_partitions(self, transactional_id: str, producer_id: int, producer_epoch: int,
                              partitions: list[TopicPartition], tv2: bool) -> int:
        err = self.partition_error(transactional_id)
        if err:
            return err
        err, t = self.machine.add_partitions(transactional_id, producer_id, producer_epoch, partitions, self.now_ms(),
                                             tv2)
        if err or t is None:
            return err
        return await self._persist(t)

    def offsets_partition(self, group_id: str) -> TopicPartition:
        """The __consumer_offsets partition of a group, which AddOffsetsToTxn adds to the transaction."""
        n = self.groups.num_partitions if self.groups is not None else self.config.offsetsTopicNumPartitions
        return OFFSETS_TOPIC, partition_for(group_id, n)

    async def add_offsets(self, transactional_id: str, producer_id: int, producer_epoch: int, group_id: str,
                          tv2: bool = False) -> int:
        return await self.add_partitions(transactional_id, producer_id, producer_epoch,
                                         [self.offsets_partition(group_id)], tv2)

    async def add_implicitly(self, transactional_id: str, producer_id: int, producer_epoch: int,
                             partitions: list[TopicPartition]) -> int:
        """KIP-890 part 2: a TV2 producer's Produce (v12+) or TxnOffsetCommit (v5) adds its partition to the
        transaction itself. While the previous transaction's markers are being written
        (CONCURRENT_TRANSACTIONS) the add is tried again for up to IMPLICIT_ADD_RETRY_S, as Kafka's leader
        retries its AddPartitionsToTxn, before the client is told to retry."""
        deadline = time.monotonic() + IMPLICIT_ADD_RETRY_S
        while True:
            err = await self.add_partitions(transactional_id, producer_id, producer_epoch, partitions, tv2=True)
            if err != E.CONCURRENT_TRANSACTIONS or time.monotonic() >= deadline:
                return err
            await asyncio.sleep(IMPLICIT_ADD_BACKOFF_S)

    def verify(self, transactional_id: str, producer_id: int, producer_epoch: int, partitions: list[TopicPartition]
               ) -> tuple[int, dict[TopicPartition, int]]:
        """AddPartitionsToTxn VerifyOnly: (error, {partition: NONE or INVALID_TXN_STATE})."""
        err = self.partition_error(transactional_id)
        if err:
            return err, {}
        return self.machine.verify(transactional_id, producer_id, producer_epoch, partitions)

    async def verify_partition(self, transactional_id: str, producer_id: int, producer_epoch: int, topic: str,
                               partition: int) -> int:
        """The produce-side check of KIP-890 part 1: may this producer append a transactional batch to
        this partition now? In Produce's terms, as Kafka's leader maps the coordinator's answer: NONE,
        TRANSACTION_ABORTABLE (not added to the transaction; the produce path says INVALID_TXN_STATE below
        v11), INVALID_PRODUCER_EPOCH (fenced), INVALID_PRODUCER_ID_MAPPING, or NOT_ENOUGH_REPLICAS (retriable:
        the coordinator is loading or busy). In cluster mode an id coordinated by another broker is not
        checked (NONE), as with Kafka's verification turned off; nor is anything with
        transactionPartitionVerificationEnable=false (Kafka's transaction.partition.verification.enable)."""
        if not self.config.transactionPartitionVerificationEnable:
            return 0
        err = self.partition_error(transactional_id)
        if err == E.NOT_COORDINATOR and self.topics.ownership is not None:
            return 0
        if not err:
            err, per = self.machine.verify(transactional_id, producer_id, producer_epoch,
                                           [(self.topic_key(topic), partition)])
            if not err:
                return E.TRANSACTION_ABORTABLE if next(iter(per.values())) else 0
        if err in (E.PRODUCER_FENCED, E.INVALID_PRODUCER_EPOCH):
            return E.INVALID_PRODUCER_EPOCH
        if err == E.INVALID_PRODUCER_ID_MAPPING:
            return err
        return E.NOT_ENOUGH_REPLICAS

    async def add_partition(self, transactional_id: str, producer_id: int, producer_epoch: int, topic: str,
                            partition: int) -> int:
        """The produce-side implicit add of KIP-890 part 2 (a TV2 producer's Produce v12+): the partition joins
        the producer's transaction, opening the next one after a completed transaction. In Produce's terms,
        as `verify_partition`, but for CONCURRENT_TRANSACTIONS, answered as such (retriable) while the previous
        transaction's markers are still being written, as Kafka 4.4 answers it. In cluster mode an id another broker coordinates is added there, with the
        inter-broker AddPartitionsToTxn v5 (Kafka's AddPartitionsToTxnManager)."""
        key = self.topic_key(topic)
        err = self.partition_error(transactional_id)
        if err == E.NOT_COORDINATOR and self.topics.ownership is not None:
            err = await self._add_remotely(transactional_id, producer_id, producer_epoch, key, partition)
        elif not err:
            err = await self.add_implicitly(transactional_id, producer_id, producer_epoch, [(key, partition)])
        if err in (E.PRODUCER_FENCED, E.INVALID_PRODUCER_EPOCH):
            return E.INVALID_PRODUCER_EPOCH
        if err in (0, E.INVALID_PRODUCER_ID_MAPPING, E.TRANSACTIONAL_ID_AUTHORIZATION_FAILED,
                   E.CONCURRENT_TRANSACTIONS):
            return err  # CONCURRENT_TRANSACTIONS: the previous transaction is completing (retriable, as Kafka 4.4)
        return E.NOT_ENOUGH_REPLICAS

    async def _add_remotely(self, transactional_id: str, producer_id: int, producer_epoch: int, topic: str,
                            partition: int) -> int:
        own = self.topics.ownership
        state = self.runtime.topic
        if own is None or state is None:
            return E.COORDINATOR_NOT_AVAILABLE
        owner = await own.owner_of(state.name, self.partition_of(transactional_id))
        if owner is None:
            return E.COORDINATOR_NOT_AVAILABLE
        return await self.channel.add_partitions(owner.host, owner.port, transactional_id, producer_id,
                                                 producer_epoch, topic, partition)

    def implicit_adder(self) -> ImplicitAdd:
        """What the partition seam asks instead of `verify_partition` for a TV2 Produce (v12+)."""
        return ImplicitAdd(self)

    # ================================================================== EndTxn and the markers
    async def end_txn(self, transactional_id: str, producer_id: int, producer_epoch: int, commit: bool,
                      tv2: bool = False) -> tuple[int, int, int]:
        """(error, producer id, epoch): the id and epoch the producer goes on with (EndTxn v5's answer; with
        TV2 the epoch bumped by this end), -1 and -1 on an error."""
        return await run_to_end(self._end_txn(transactional_id, producer_id, producer_epoch, commit, tv2))

    async def _end_txn(self, transactional_id: str, producer_id: int, producer_epoch: int, commit: bool,
                       tv2: bool) -> tuple[int, int, int]:
        err = self.partition_error(transactional_id)
        if err:
            return err, -1, -1
        new_pid = None
        if self.machine.end_needs_producer_id(transactional_id, tv2):
            new_pid = await self.producer_ids.next_id()
            err = self.partition_error(transactional_id)
            if err:
                return err, -1, -1
        err, t = self.machine.end_txn(transactional_id, producer_id, producer_epoch, commit, self.now_ms(), tv2,
                                      new_pid)
        if not err and t is not None:
            err = await self._persist(t)
            if not err:
                self._start_markers(transactional_id)
        txn = self.machine.txns.get(transactional_id)
        if err or txn is None:
            return err, -1, -1
        if txn.next_producer_id != -1:  # rotating: the producer goes on with the new id (Kafka's answer)
            return 0, txn.next_producer_id, 0
        return 0, txn.producer_id, txn.producer_epoch

    def _start_markers(self, transactional_id: str) -> None:
        running = self._markers.get(transactional_id)
        if self._stopped or (running is not None and not running.done()):
            return
        task = asyncio.create_task(self._drive_markers(transactional_id), name=f"txn-markers-{transactional_id}")
        self._markers[transactional_id] = task

        def done(t: asyncio.Task[None]) -> None:
            if self._markers.get(transactional_id) is t:
                del self._markers[transactional_id]

        task.add_done_callback(done)

    async def _drive_markers(self, transactional_id: str) -> None:
        """Write the markers of a PrepareCommit/PrepareAbort transaction (each retried until it lands),
        then move it to CompleteCommit/CompleteAbort."""
        txn = self.machine.txns.get(transactional_id)
        if txn is None or txn.state not in (TxnState.PREPARE_COMMIT, TxnState.PREPARE_ABORT):
            return
        commit = txn.state == TxnState.PREPARE_COMMIT
        pid, epoch = txn.producer_id, txn.producer_epoch
        pending = sorted(txn.partitions)
        while pending and not self._stopped:
            failed = []
            for topic, partition in pending:
                err = await self.write_marker(topic, partition, pid, epoch, commit)
                if err in (E.INVALID_PRODUCER_EPOCH, E.TRANSACTION_COORDINATOR_FENCED, E.UNKNOWN_TOPIC_OR_PARTITION):
                    # Kafka drops the marker for these: a newer epoch wrote there, or the topic is gone.
                    log.warning("transactional id %s: marker for %s-%d not written: %s", transactional_id, topic,
                                partition, ErrorCode(err).name)
                elif err:
                    failed.append((topic, partition))
            pending = failed
            if pending:
                await asyncio.sleep(MARKER_RETRY_S)
        while not self._stopped:
            t = self.machine.complete_markers(transactional_id, self.now_ms())
            if t is None or not await self._persist(t):
                return
            await asyncio.sleep(MARKER_RETRY_S)

    async def write_marker(self, topic_name: str, partition: int, producer_id: int, producer_epoch: int,
                           commit: bool) -> int:
        """One marker into one partition (a control batch through the partition log); for a group's
        __consumer_offsets partition the group coordinator then completes the pending offsets. 0 or
        Kafka's error for the partition."""
        try:
            topic = self.topics.get(self.topics.parse(topic_name))
        except ValueError:
            topic = None
        if topic is None or not 0 <= partition < topic.partitions:
            return E.UNKNOWN_TOPIC_OR_PARTITION
        own = self.topics.ownership
        if own is not None and not self.topics.owns(topic, partition):
            # cluster mode: the owner writes it (and completes the group's offsets) on WriteTxnMarkers
            owner = await own.owner_of(topic.name, partition)
            if owner is None:
                return E.NOT_LEADER_OR_FOLLOWER
            return await self.channel.write_marker(owner.host, owner.port, topic_name, partition, producer_id,
                                                   producer_epoch, commit, COORDINATOR_EPOCH)
        try:
            seam = await self.topics.partition(topic, partition)
            await seam.write_txn_marker(producer_id, producer_epoch, commit, COORDINATOR_EPOCH)
        except TopicError as e:
            return int(ErrorCode[e.error]) if e.error in ErrorCode.__members__ else E.UNKNOWN_SERVER_ERROR
        except AppendRefused as e:  # the partition refuses the marker: a newer producer epoch or coordinator
            return int(ErrorCode[e.error])
        except Exception as e:
            log.warning("writing a %s marker for producer %d into %s-%d failed: %r",
                        "COMMIT" if commit else "ABORT", producer_id, topic_name, partition, e)
            return E.KAFKA_STORAGE_ERROR
        if topic_name == OFFSETS_TOPIC and self.groups is not None:
            self.groups.complete_transaction(partition, producer_id, commit)
        return 0

    # ================================================================== timeouts and expiration
    async def abort_timed_out(self) -> int:
        """Fence and abort every Ongoing transaction past its timeout; returns how many. Not while this
        broker is not serving; after it served again (or its loop stood still: a stopped process),
        every timeout counts afresh from then - the producers could not reach it meanwhile."""
        ownership = self.topics.ownership
        if ownership is not None and not ownership.serving:
            return 0
        epoch = ownership.serving_epoch if ownership is not None else 0
        mono = time.monotonic()
        interval = self.config.transactionAbortTimedOutTransactionCleanupIntervalMs / 1000
        if epoch != self._serving_epoch or (self._last_sweep is not None and mono - self._last_sweep >
                                            interval + TXN_STALL_S):
            self._serving_epoch = epoch
            self._timeouts_from = self.now_ms()
        self._last_sweep = mono
        transits = []
        for t in self.machine.abort_timed_out(self.now_ms(), self._timeouts_from):
            if self.runtime.is_loaded(self.partition_of(t.transactional_id)):
                transits.append(t)
            else:  # its partition is still loading: the next sweep sees it
                self.machine.abandon(t.transactional_id)
        for t in transits:
            log.info("transactional id %s: aborting its transaction (timed out); producer %d fenced at epoch %d",
                     t.transactional_id, t.producer_id, t.producer_epoch)
            if not await self._persist(t):
                self._start_markers(t.transactional_id)
        return len(transits)

    async def expire_transactional_ids(self) -> int:
        """Tombstones for ids idle longer than transactionalIdExpirationMs; returns how many."""
        tids = self.machine.expired(self.now_ms(), self.config.transactionalIdExpirationMs)
        for tid in tids:
            try:
                await self._append(tid, None)
            except Exception as e:
                log.warning("transactional id %s: writing its tombstone failed: %r", tid, e)
                self.machine.abandon(tid)
                continue
            self.machine.remove(tid)
        if tids:
            log.info("expired %d transactional ids", len(tids))
        return len(tids)

    # ================================================================== DescribeTransactions / ListTransactions
    def describe(self, transactional_id: str) -> tuple[int, TxnMetadata | None]:
        err = self.partition_error(transactional_id)
        if err:
            return err, None
        txn = self.machine.describe(transactional_id)
        return (E.TRANSACTIONAL_ID_NOT_FOUND, None) if txn is None else (0, txn)

    def list(self, states: list[str], producer_ids: list[int], duration_ms: int, pattern: str | None
             ) -> tuple[int, list[str], list[ListedTransaction]]:
        if not self.available or self.topics.paused:  # paused: not serving (cluster lease), no listing from memory
            return E.COORDINATOR_NOT_AVAILABLE, [], []
        if self.runtime.loading:
            return E.COORDINATOR_LOAD_IN_PROGRESS, [], []
        ids = [tid for tid in self.machine.txns if self.runtime.is_loaded(self.partition_of(tid))]
        unknown, out = self.machine.list(ids, states, producer_ids, duration_ms, pattern, self.now_ms())
        return 0, unknown, out


class ImplicitAdd:
    """The partition seam's TxnVerifier (kop/topics/partition.py) for a TV2 producer's Produce: its first batch
    of a transaction on a partition adds the partition (KIP-890 part 2) rather than checking it was added."""

    def __init__(self, coordinator: TransactionCoordinator) -> None:
        self.coordinator = coordinator

    async def verify_partition(self, transactional_id: str, producer_id: int, producer_epoch: int, topic: str,
                               partition: int) -> int:
        return await self.coordinator.add_partition(transactional_id, producer_id, producer_epoch, topic, partition)


class _TxnLoad:
    """One load of a __transaction_state partition: its records replayed into the state machine; once
    loaded, PrepareCommit/PrepareAbort transactions drive their markers again (Ongoing ones wait for the
    timeout sweep)."""

    def __init__(self, coordinator: TransactionCoordinator, partition: int) -> None:
        self.coordinator = coordinator
        self.partition = partition

    def replay(self, batch: FetchedBatch) -> None:
        if parse_batch_header(batch.batch).is_control:
            return
        machine = self.coordinator.machine
        for r in decode_records(batch.batch):
            if r.key is None:
                continue
            try:
                tid = trec.decode_key(r.key)
                machine.replay(tid, None if r.value is None else trec.decode_value(r.value))
            except RecordError as e:
                log.warning("skipping an undecodable record in %s-%d: %s", TRANSACTION_STATE_TOPIC, self.partition, e)

    def loaded(self) -> str:
        c = self.coordinator
        mine = [t for tid, t in c.machine.txns.items() if c.partition_of(tid) == self.partition]
        for txn in mine:
            if txn.state in (TxnState.PREPARE_COMMIT, TxnState.PREPARE_ABORT):
                c._start_markers(txn.transactional_id)
        return f"{len(mine)} transactional ids"
