"""The group coordinator: Kafka's classic group protocol, with its state in __consumer_offsets.

Split along Apache Kafka's own seams (its CoordinatorRuntime, GroupMetadataManager, OffsetMetadataManager):

* `runtime.CoordinatorRuntime` (shared with the transaction coordinator) owns the __consumer_offsets
  partitions of this broker: loads them (this module replays the records), unloads them when cluster mode
  moves them, answers COORDINATOR_LOAD_IN_PROGRESS meanwhile, retries a failed load, and makes the appends;
* this module's `GroupCoordinator` plays the group metadata manager - groups and their records - and is the
  async shell around `group_state.GroupStateMachine` (classic join/sync/heartbeat/leave) and
  `consumer_group.ConsumerGroupMachine` (KIP-848), sans-IO machines it feeds requests and the loop's clock,
  and whose answers and records it delivers and writes;
* `offsets.OffsetManager` keeps the committed offsets (commit, fetch, delete, expire, transactional
  commits); the coordinator checks membership (generation, member, group state) and delegates to it.

Semantics follow Apache Kafka 4.x error code for error code, because clients and kafka-consumer-groups are
written against it. Where KoP fell short we do not (research/kop.md §3.5, §6): besides what the state
machine does (KIP-394, KIP-345, batched LeaveGroup), OffsetDelete and DeleteGroups; and an OffsetCommit is
acknowledged only once its records are durable in __consumer_offsets (kop#1041 lost commits silently), and
the in-memory offsets change only then, so a reader never sees an offset that a crash could take back.

Placement: the coordinator of group G is the owner of partition abs(hashCode(G)) % N of __consumer_offsets
(Kafka's formula, so every tool agrees). Alone, this broker owns every partition; in cluster mode it owns
those whose namespace bundle it owns (kop/cluster/ownership.py). Each owned partition is loaded by reading
it to the end - at start, and when its bundle is acquired (`load_partition`) - and requests for its groups
get COORDINATOR_LOAD_IN_PROGRESS meanwhile; groups of a partition this broker does not own get
NOT_COORDINATOR. A partition whose bundle is released is unloaded (`unload_partition`): its groups are
dropped from memory and their parked JoinGroup/SyncGroup requests answered NOT_COORDINATOR, as Kafka does
when a coordinator moves.

A state change runs without awaiting (one event loop), like Kafka's single-threaded coordinator shards:
it changes the in-memory group, issues its records as one batch (appends of a partition are stored and
acknowledged in issue order), and answers when the batch is durable.

The requests that await their own write and then apply it (OffsetCommit, TxnOffsetCommit, OffsetDelete,
DeleteGroups, StreamsGroupHeartbeat) run to their end when the client's connection closes meanwhile (the
connection cancels its requests' tasks; kop.aio.run_to_end): stopped between the write and its apply, a
commit would be durable in the log but not in memory (OffsetFetch answering the older offset until a reload,
a TxnOffsetCommit's offsets never committed at its marker), or deleted offsets would stay visible.

Metrics hook: `committed_offsets()` gives {(group, topic, partition): offset} for consumer lag.
`offsets` and `pending_txn_offsets` are the offset manager's (read-only views for callers and tests).
"""

from __future__ import annotations

import asyncio
import functools
import logging
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import cast

from kop.aio import PeriodicTask, run_to_end
from kop.config import BrokerConfig
from kop.coordinator import consumer_records as crec
from kop.coordinator import records as rec
from kop.coordinator.consumer_group import (
    ConsumerGroup,
    ConsumerGroupMachine,
    ConsumerGroupReplayer,
    HeartbeatAnswer,
    HeartbeatRequest,
    HeartbeatResult,
)
from kop.coordinator.group import EMPTY_ASSIGNMENT, ClassicGroup, GroupState, Member
from kop.coordinator.group_state import (
    Answer,
    GroupStateMachine,
    JoinRequest,
    JoinResult,
    SyncResult,
    member_fencing_error,
)
from kop.coordinator.offsets import OffsetAndMetadata, OffsetManager, TopicPartition
from kop.coordinator.runtime import CoordinatorError, CoordinatorRuntime, append_error
from kop.coordinator.share import group_records as share_rec
from kop.coordinator.streams import records as streams_rec
from kop.coordinator.streams.group import StreamsGroup, StreamsGroupMachine, StreamsHeartbeat, StreamsResult
from kop.offset.api import FetchedBatch
from kop.protocol.errors import ErrorCode
from kop.protocol.records import (
    decode_records,
    parse_batch_header,
)
from kop.topics.manager import Topic, TopicManager
from kop.topics.names import OFFSETS_TOPIC
from kop.topics.scope import NameScope, explicit_id

log = logging.getLogger(__name__)

S = GroupState
# While the broker is not serving, the group timers look again this often (seconds) instead of firing.
PAUSED_POLL_S = 0.25
# A timer wake this late (ms) means the event loop stood still (the process was stopped or starved): the
# members could not heartbeat meanwhile, so the timers restart instead of firing.
STALL_MS = 3000
E = ErrorCode


@dataclass(slots=True)
class DescribedMember:
    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    metadata: bytes
    assignment: bytes


@dataclass(slots=True)
class DescribedGroup:
    group_id: str
    error: int
    state: str
    protocol_type: str
    protocol_data: str
    members: list[DescribedMember]
    found: bool = True


@dataclass(slots=True)
class ListedGroup:
    group_id: str
    protocol_type: str
    state: str
    group_type: str = "classic"


class GroupCoordinator:
    """Kafka's group coordinator for this broker's __consumer_offsets partitions (see the module
    docstring): the API modules of kop/kafka/apis/ call it, the broker service starts, loads and unloads it."""

    def __init__(self, config: BrokerConfig, topics: TopicManager, clock: Callable[[], float] = time.time) -> None:
        self.config = config
        self.topics = topics
        self.clock = clock  # wall clock in seconds (time.time); tests may set another
        self.machine = GroupStateMachine(config, wall_ms=self.now_ms)
        self.groups: dict[str, ClassicGroup] = self.machine.groups  # loaded here, moved by the machine
        # KIP-848 consumer groups: their own machine, beside the classic one (a group id is one or the other;
        # the consumer machine moves a group between the two, KIP-848's online migration)
        self.consumer = ConsumerGroupMachine(config, self._topic_metadata, self.machine, wall_ms=self.now_ms,
                                             normalize=self.topic_key, scope=self.group_scope)
        self.consumer_groups: dict[str, ConsumerGroup] = self.consumer.groups
        # share groups' records as replayed (raw key -> value), which the share coordinator restores its groups from
        self.share_records: dict[bytes, bytes] = {}
        # KIP-1071 streams groups (kop/coordinator/streams): in memory, beside the other two kinds
        self.streams = StreamsGroupMachine(config.groupStreamsSessionTimeoutMs, self._topic_partitions,
                                           config.groupStreamsInitialRebalanceDelayMs,
                                           config.groupStreamsNumStandbyReplicas)
        self.streams_groups: dict[str, StreamsGroup] = self.streams.groups
        self._creating: set[str] = set()  # internal topics of streams groups being created
        # committed and pending (transactional) offsets: commit, fetch, delete, expire (kop/coordinator/offsets.py)
        self.offset_manager = OffsetManager(config, self._write, self.partition_of, self.now_ms, self.topic_id_of)
        # the life of the __consumer_offsets partitions here (kop/coordinator/runtime.py)
        self.runtime = CoordinatorRuntime("group coordinator", config, topics, topics.offsets_topic,
                                          config.offsetsTopicNumPartitions, "offsetsTopicNumPartitions", self)
        self._wakeup: asyncio.TimerHandle | None = None  # the loop timer for the machine's next deadline
        self._wakeup_at: int | None = None
        self._serving_epoch = 0  # the ownership's serving epoch the timers last ran under
        self._expiration = PeriodicTask("coordinator-expiration", config.offsetsRetentionCheckIntervalMs / 1000,
                                        self.expire_offsets, log)
        self._stopped = False
        self._loop: asyncio.AbstractEventLoop | None = None
        topics.deletion_listeners.append(self.on_topic_deleted)

    # ================================================================== lifecycle
    def now_ms(self) -> int:
        return int(self.clock() * 1000)

    @property
    def loop(self) -> asyncio.AbstractEventLoop:
        if self._loop is None:
            self._loop = asyncio.get_running_loop()
        return self._loop

    @property
    def topic(self) -> Topic | None:
        return self.runtime.topic

    @property
    def num_partitions(self) -> int:
        return self.runtime.num_partitions

    @property
    def offsets(self) -> dict[str, dict[TopicPartition, OffsetAndMetadata]]:
        """Committed offsets: group -> (topic, partition) -> offset (the offset manager's)."""
        return self.offset_manager.offsets

    @property
    def pending_txn_offsets(self) -> dict[int, dict[str, dict[TopicPartition, OffsetAndMetadata]]]:
        """TxnOffsetCommit's offsets per producer id, until the transaction's marker (the offset manager's)."""
        return self.offset_manager.pending

    async def start(self) -> None:
        """Create __consumer_offsets when missing (compacted, internal) and start loading it; requests
        are answered meanwhile (COORDINATOR_LOAD_IN_PROGRESS for groups of a partition not loaded yet)."""
        self._loop = asyncio.get_running_loop()
        await self.runtime.start()
        self._expiration.start()

    async def wait_loaded(self) -> None:
        await self.runtime.wait_loaded()

    async def stop(self) -> None:
        """Answer parked JoinGroup/SyncGroup requests with NOT_COORDINATOR (as Kafka does when it unloads a
        partition), stop the timers and background tasks. Writes already issued still complete."""
        self._stopped = True
        self.machine.shutdown()
        self.consumer.shutdown()
        self._run()
        await self._expiration.stop()
        await self.runtime.stop()

    # ================================================================== loading (the runtime's Shard)
    def failed_partitions(self) -> list[int]:
        """__consumer_offsets partitions whose load failed (retried; /ready reports them)."""
        return self.runtime.failed_partitions()

    def load_partition(self, p: int) -> None:
        """This broker became the owner of __consumer_offsets partition `p` (cluster mode): load its
        groups in the background (their requests get COORDINATOR_LOAD_IN_PROGRESS until then)."""
        self.runtime.load_partition(p)

    def unload_partition(self, p: int) -> None:
        """This broker no longer owns partition `p`: forget its groups (their state stays in the log for
        the next owner) and answer their parked requests NOT_COORDINATOR."""
        self.runtime.unload_partition(p)

    def begin_load(self, partition: int) -> _GroupLoad:
        return _GroupLoad(self, partition)

    def drop(self, partition: int) -> None:
        dropped = self._drop_groups_of(partition)
        log.debug("group coordinator dropped %d groups of %s partition %d", dropped, OFFSETS_TOPIC, partition)

    def _drop_groups_of(self, p: int) -> int:
        gids = [gid for gid in self.groups if self.partition_of(gid) == p]
        self.machine.drop_groups(gids)
        cgids = [gid for gid in self.consumer_groups if self.partition_of(gid) == p]
        for key in [k for k in self.share_records if self.partition_of(share_rec.decode_key(k).group) == p]:
            del self.share_records[key]
        self.consumer.drop_groups(cgids)
        for sgid in [gid for gid in self.streams_groups if self.partition_of(gid) == p]:
            del self.streams_groups[sgid]  # in memory only: another coordinator's members rejoin there
        self.offset_manager.drop_partition(p)
        self._run()
        return len(gids) + len(cgids)

    def _replay(self, key: bytes, value: bytes | None, consumer: ConsumerGroupReplayer | None = None,
                record_offset: int = -1, streams: dict[str, dict[bytes, bytes]] | None = None) -> None:
        """Apply one __consumer_offsets record (the same records this coordinator writes)."""
        try:
            k = rec.decode_key(key)
            if isinstance(k, rec.OffsetCommitKey):
                self.offset_manager.replay(k, value, record_offset)
                if value is not None and k.group not in self.groups:
                    # Offsets without group metadata: a "simple" group (commits outside group management).
                    self.groups[k.group] = ClassicGroup(k.group)
            elif isinstance(k, rec.GroupMetadataKey):
                if value is None:
                    old = self.groups.pop(k.group, None)
                    if old is not None:
                        old.state = S.DEAD
                    return
                self.groups[k.group] = self._group_from_record(k.group, rec.decode_group_metadata_value(value))
            elif k.version in crec.TYPES and consumer is not None:
                consumer.replay(crec.decode_key(key), value)
            elif k.version in share_rec.TYPES:  # share groups (kop/coordinator/share/group_records.py)
                if value is None:
                    self.share_records.pop(bytes(key), None)
                else:
                    self.share_records[bytes(key)] = bytes(value)
            elif k.version in streams_rec.TYPES and streams is not None:
                values = streams.setdefault(streams_rec.decode_key(key)[1], {})
                if value is None:
                    values.pop(key, None)
                else:
                    values[key] = value
            else:
                log.debug("skipping a version %d record key in %s (a streams group record)", k.version,
                          OFFSETS_TOPIC)
        except rec.RecordError as e:
            log.warning("skipping an undecodable record in %s: %s", OFFSETS_TOPIC, e)

    @staticmethod
    def _group_from_record(group_id: str, v: rec.GroupMetadataValue) -> ClassicGroup:
        group = ClassicGroup(
            group_id,
            state=S.STABLE if v.members else S.EMPTY,
            state_timestamp=None if v.current_state_timestamp == -1 else v.current_state_timestamp,
            generation_id=v.generation,
            protocol_type=v.protocol_type or None,
            protocol_name=v.protocol,
            leader_id=v.leader,
        )
        for m in v.members:
            member = Member(
                m.member_id, m.group_instance_id, m.client_id, m.client_host,
                m.session_timeout if m.rebalance_timeout == -1 else m.rebalance_timeout, m.session_timeout,
                v.protocol_type, [(v.protocol or "", m.subscription)], assignment=m.assignment)
            group.add(member, None)
        group.subscribed_topics = group.compute_subscribed_topics()
        return group

    def _on_loaded(self, p: int, consumer_groups: list[ConsumerGroup],
                   streams: dict[str, dict[bytes, bytes]] | None = None) -> None:
        for gid, values in (streams or {}).items():
            if streams_rec.encode_key(streams_rec.METADATA, gid) not in values:
                continue  # deleted
            try:
                self.streams.restore(gid, values, self._timer_ms())
            except rec.RecordError as e:
                log.warning("streams group %s: its records in %s are not readable: %s", gid, OFFSETS_TOPIC, e)
                continue
            classic = self.groups.get(gid)
            if classic is not None and not classic.members and classic.protocol_type is None:
                del self.groups[gid]  # the simple group its offset commits made on the way
        for cg in consumer_groups:
            # Its offset commits made a "simple" classic group of the same id on the way: the id is the
            # consumer group's.
            classic = self.groups.get(cg.group_id)
            if classic is not None and not classic.members and classic.protocol_type is None:
                del self.groups[cg.group_id]
        self.machine.loaded([g for gid, g in self.groups.items() if self.partition_of(gid) == p], self._timer_ms())
        self.consumer.loaded(consumer_groups, self._timer_ms())
        self._run()

    def _topic_metadata(self) -> dict[str, tuple[bytes, int]]:
        """The broker's topics as the consumer group machine sees them: Kafka name -> (id, partitions)."""
        return {self.topics.kafka_name(t.name): (t.topic_id, t.partitions) for t in self.topics.all()}

    # ================================================================== placement and state
    def partition_of(self, group_id: str) -> int:
        return rec.partition_for(group_id, self.num_partitions)

    def partition_error(self, group_id: str) -> int:
        """0 when this coordinator can serve `group_id` now, else the error to answer with. (An empty group
        id is valid for offsets, describe and delete, as in Kafka; the membership APIs refuse it.)"""
        if self._stopped:
            return E.COORDINATOR_NOT_AVAILABLE
        return self.runtime.error(self.partition_of(group_id))

    @property
    def available(self) -> bool:
        return not self._stopped and self.runtime.available

    @property
    def loading(self) -> bool:
        return self.runtime.loading

    def topic_key(self, name: str) -> str:
        """The name offsets of topic `name` are stored under: its Kafka name (`t` in the default namespace,
        `tenant/ns/t` elsewhere), whichever of KoP's spellings the client used; unparseable names as is."""
        try:
            return self.topics.kafka_name(self.topics.parse(name))
        except ValueError:
            return name

    def topic_id_of(self, name: str) -> bytes | None:
        """The id of the topic offsets are stored under `name` (a Kafka name), None when there is none."""
        try:
            topic = self.topics.get(self.topics.parse(name))
        except ValueError:
            return None
        return topic.topic_id if topic is not None else None

    def group_scope(self, group_id: str) -> NameScope | None:
        """The tenant scope a group's members spell topics in (kop/topics/scope.py): a global id
        `tenant/ns/g` is that tenant's group when kafkaEnableMultiTenantMetadata is on; None: the default."""
        if not self.config.kafkaEnableMultiTenantMetadata or not explicit_id(group_id):
            return None
        tenant, namespace, _ = group_id.split("/", 2)
        scope = NameScope(self.topics, tenant, namespace)
        return None if scope.default else scope

    def committed_offsets(self) -> dict[tuple[str, str, int], int]:
        """{(group, topic, partition): committed offset} for every durable commit (consumer lag metrics).
        Topics are Kafka names as kop.topics.manager.TopicManager.kafka_name gives them."""
        return self.offset_manager.committed_offsets()

    # ================================================================== driving the state machine
    def _timer_ms(self) -> int:
        """The machine's clock: the loop's monotonic time, so that a wall-clock jump (or a test's clock)
        neither expires nor prolongs a session; time stamps it writes come from `now_ms` instead."""
        return int(self.loop.time() * 1000)

    def _run(self) -> None:
        """Deliver what the machine produced: answers to their waiting requests (a request's first answer
        counts), records to __consumer_offsets in the order asked; then arm the wakeup for its next timer."""
        machine: GroupStateMachine | ConsumerGroupMachine
        # The consumer machine's first: a group it converts to a classic one is written before the classic
        # machine writes anything for it.
        for machine in (self.consumer, self.machine):
            for effect in machine.take_effects():
                if isinstance(effect, (Answer, HeartbeatAnswer)):
                    fut = cast("asyncio.Future[object]", effect.token)
                    if not fut.done():
                        fut.set_result(effect.result)
                else:
                    try:
                        written = self._write(effect.group_id, effect.records)
                    except Exception as e:  # a batch that cannot be built: a failed write, not lost answers
                        written = self.loop.create_future()
                        written.set_exception(e)
                    written.add_done_callback(
                        functools.partial(self._written, machine, effect.write_id, effect.group_id))
        self._arm()

    def _written(self, machine: GroupStateMachine | ConsumerGroupMachine, write_id: int, group_id: str,
                 f: asyncio.Future[int]) -> None:
        error: int
        if f.cancelled():
            error = E.NOT_COORDINATOR
        elif (exc := f.exception()) is not None:
            log.warning("group %s: a write to %s failed: %r", group_id, OFFSETS_TOPIC, exc)
            error = append_error(exc)
        else:
            error = 0
        machine.write_done(write_id, error, self._timer_ms())
        self._run()

    def _arm(self) -> None:
        deadlines = [d for d in (self.machine.next_deadline(), self.consumer.next_deadline(),
                                 self.streams.next_deadline()) if d is not None]
        deadline = None if self._stopped or not deadlines else min(deadlines)
        if deadline == self._wakeup_at:
            return
        if self._wakeup is not None:
            self._wakeup.cancel()
        self._wakeup, self._wakeup_at = None, deadline
        if deadline is not None:
            self._wakeup = self.loop.call_at(deadline / 1000, self._wake, deadline)

    def _wake(self, deadline: int) -> None:
        self._wakeup, self._wakeup_at = None, None
        # The loop may wake a little before `deadline` (its clock resolution): the deadline has come.
        now = max(self._timer_ms(), deadline)
        ownership = self.topics.ownership
        if ownership is not None and not ownership.serving:
            # Not serving (ZooKeeper session in doubt): members' heartbeats are refused, so their timers
            # must not fire. Look again shortly; they get fresh deadlines once this broker serves again.
            self._wakeup = self.loop.call_later(PAUSED_POLL_S, self._wake, deadline)
            self._wakeup_at = -1
            return
        epoch = ownership.serving_epoch if ownership is not None else 0
        if epoch != self._serving_epoch or now - deadline > STALL_MS:
            # It stopped serving since the timers last ran, or the loop itself stood still (the process
            # was stopped: SIGSTOP, a VM pause): time the members could not use. Fresh deadlines.
            log.info("group timers restart with fresh deadlines (%s)", "served again after a pause"
                     if epoch != self._serving_epoch else f"the loop stalled {(now - deadline) / 1000:.1f}s")
            self._serving_epoch = epoch
            self.machine.refresh_timers(now)
            self.consumer.refresh_timers(now)
            self.streams.refresh(now)
            self._run()
            return
        self.machine.expire_timers(now)
        self.consumer.expire_timers(now)
        for gid, mid in self.streams.expire(now):
            log.info("streams group %s: member %s fenced, its session timed out", gid, mid)
            sg = self.streams_groups.get(gid)
            records = self.streams.records(sg) if sg is not None else []
            if records:
                self._write_logged(gid, records, "streams group records")
        self._run()

    # ================================================================== writes
    def _write(self, group_id: str, records: list[tuple[bytes, bytes | None]],
               producer: tuple[int, int] | None = None) -> asyncio.Future[int]:
        """Issue one batch to the group's __consumer_offsets partition now, through the runtime (appends of
        a partition are stored and acknowledged in issue order); the future completes with the batch's base
        offset when it is durable. producer: (id, epoch) of a TxnOffsetCommit's transaction, whose offsets go
        in a transactional batch."""
        return asyncio.ensure_future(self.runtime.write(self.partition_of(group_id), records, self.now_ms(), producer))

    # ================================================================== JoinGroup, SyncGroup, Heartbeat, LeaveGroup
    async def join_group(self, req: JoinRequest) -> JoinResult:
        err = self.partition_error(req.group_id) if req.group_id else 0
        if err:
            return JoinResult(err, member_id=req.member_id)
        cg = self.consumer_groups.get(req.group_id)
        fut: asyncio.Future[JoinResult] = self.loop.create_future()
        if cg is not None and cg.members:
            # A classic member joins a consumer group (KIP-848 online migration): served inside it.
            self.consumer.classic_join(req, fut, self._timer_ms())
        else:
            if cg is not None:
                # An empty consumer group gives way to the classic one (Kafka does so whatever the policy).
                self._write_logged(req.group_id, self.consumer.delete_group(req.group_id), "consumer group tombstones")
            self.machine.join(req, fut, self._timer_ms())
        self._run()
        result = await fut
        if log.isEnabledFor(logging.DEBUG):
            log.debug("group %s: JoinGroup v%d of %r answered %s (generation %d, member %s, leader %s)", req.group_id,
                      req.api_version, req.member_id, ErrorCode(result.error).name, result.generation_id,
                      result.member_id, result.leader)
        return result

    async def sync_group(self, group_id: str, generation_id: int, member_id: str, instance_id: str | None,
                         protocol_type: str | None, protocol_name: str | None,
                         assignments: list[tuple[str, bytes]]) -> SyncResult:
        err = self.partition_error(group_id) if group_id else 0
        if err == E.COORDINATOR_LOAD_IN_PROGRESS:
            # The state of an active rebalance is gone: have the member rejoin (older clients do not
            # expect COORDINATOR_LOAD_IN_PROGRESS here; Kafka answers the same).
            return SyncResult(E.REBALANCE_IN_PROGRESS)
        if err:
            return SyncResult(err)
        fut: asyncio.Future[SyncResult] = self.loop.create_future()
        if group_id in self.consumer_groups:
            self.consumer.classic_sync(group_id, generation_id, member_id, instance_id, protocol_type, protocol_name,
                                       fut, self._timer_ms())
        else:
            self.machine.sync(group_id, generation_id, member_id, instance_id, protocol_type, protocol_name,
                              assignments, fut, self._timer_ms())
        self._run()
        result = await fut
        log.debug("group %s: SyncGroup of %s (generation %d) answered %s", group_id, member_id, generation_id,
                  ErrorCode(result.error).name)
        return result

    def heartbeat(self, group_id: str, generation_id: int, member_id: str, instance_id: str | None) -> int:
        err = self.partition_error(group_id) if group_id else 0
        if err == E.COORDINATOR_LOAD_IN_PROGRESS:
            return 0  # the group is still loading: Kafka answers blindly
        if err:
            return err
        if group_id in self.consumer_groups:
            err = self.consumer.classic_heartbeat(group_id, generation_id, member_id, instance_id, self._timer_ms())
        else:
            err = self.machine.heartbeat(group_id, generation_id, member_id, instance_id, self._timer_ms())
        self._run()
        return err

    def leave_group(self, group_id: str, members: list[tuple[str, str | None, str | None]]
                    ) -> tuple[int, list[tuple[str, str | None, int]]]:
        """members: (member id, group instance id, reason). Returns (top-level error, per-member errors)."""
        err = self.partition_error(group_id) if group_id else 0
        if err:
            return err, []
        if group_id in self.consumer_groups:
            result = self.consumer.classic_leave(group_id, members, self._timer_ms())
        else:
            result = self.machine.leave(group_id, members, self._timer_ms())
        self._run()
        return result

    # ================================================================== ConsumerGroupHeartbeat / Describe
    async def consumer_group_heartbeat(self, req: HeartbeatRequest) -> HeartbeatResult:
        err = self.partition_error(req.group_id) if req.group_id else 0
        if err:
            return HeartbeatResult(err)
        fut: asyncio.Future[HeartbeatResult] = self.loop.create_future()
        self.consumer.heartbeat(req, fut, self._timer_ms())
        self._run()
        return await fut

    def consumer_group(self, group_id: str) -> tuple[int, ConsumerGroup | None, str | None]:
        """(error, group, message) for ConsumerGroupDescribe: GROUP_ID_NOT_FOUND for a missing or a classic
        group, with Kafka 4.x's messages (kafka-consumer-groups prints them)."""
        err = self.partition_error(group_id)
        if err:
            return err, None, None
        group = self.consumer_groups.get(group_id)
        if group is not None:
            return 0, group, None
        classic = self.groups.get(group_id)
        if classic is not None and not classic.is_in(S.DEAD):
            return E.GROUP_ID_NOT_FOUND, None, f"Group {group_id} is not a consumer group."
        return E.GROUP_ID_NOT_FOUND, None, f"Group {group_id} not found."

    # ================================================================== StreamsGroupHeartbeat / Describe
    def _topic_partitions(self) -> dict[str, int]:
        """The broker's topics as the streams group machine sees them: Kafka name -> partitions."""
        return {self.topics.kafka_name(t.name): t.partitions for t in self.topics.all()}

    async def streams_group_heartbeat(self, req: StreamsHeartbeat) -> StreamsResult:
        """A StreamsGroupHeartbeat, answered once the group's changed records are durable in __consumer_offsets
        (a failed write answers its error; the member retries); the internal topics its topology lacks are
        created in the background, as Kafka's broker does after its coordinator answered, and the next
        heartbeat finds them."""
        return await run_to_end(self._streams_group_heartbeat(req))

    async def _streams_group_heartbeat(self, req: StreamsHeartbeat) -> StreamsResult:
        err = self.partition_error(req.group_id) if req.group_id else 0
        if err:
            return StreamsResult(err, member_id=req.member_id)
        if req.group_id not in self.streams_groups:
            other = self.consumer_groups.get(req.group_id) or self.groups.get(req.group_id)
            if isinstance(other, ConsumerGroup) or (other is not None and not other.is_in(S.EMPTY, S.DEAD)):
                return StreamsResult(E.GROUP_ID_NOT_FOUND, f"Group {req.group_id} is not a streams group.",
                                     req.member_id, req.member_epoch)
            if other is not None and req.member_epoch == 0:
                self.machine.remove_group(req.group_id)  # an empty classic group (its offsets stay) gives way
        result = self.streams.heartbeat(req, self._timer_ms())
        group = self.streams_groups.get(req.group_id)
        records = self.streams.records(group) if group is not None else []
        if records:
            try:
                await self._write(req.group_id, records)
            except Exception as e:
                log.warning("streams group %s: a write to %s failed: %r", req.group_id, OFFSETS_TOPIC, e)
                return StreamsResult(append_error(e), member_id=req.member_id, member_epoch=req.member_epoch)
        for name, (partitions, configs) in result.to_create.items():
            if name not in self._creating:
                self._creating.add(name)
                self.loop.create_task(self._create_internal(req.group_id, name, partitions, configs))
        self._arm()
        return result

    async def _create_internal(self, group_id: str, name: str, partitions: int, configs: dict[str, str]) -> None:
        try:
            await self.topics.create(self.topics.parse(name), partitions, configs)
            log.info("streams group %s: created internal topic %s (%d partitions)", group_id, name, partitions)
        except Exception as e:  # TOPIC_ALREADY_EXISTS included: the next heartbeat looks again
            log.info("streams group %s: internal topic %s not created: %r", group_id, name, e)
        finally:
            self._creating.discard(name)

    def _streams_tombstones(self, sg: StreamsGroup) -> list[tuple[bytes, bytes | None]]:
        """The records deleting a streams group no longer in `streams_groups`: its own, and a group metadata
        tombstone, so that the simple group its offset commits make at load goes with them."""
        return [*self.streams.records(sg), (rec.group_metadata_key(sg.group_id), None)]

    def streams_group(self, group_id: str) -> tuple[int, StreamsGroup | None, str | None]:
        """(error, group, message) for StreamsGroupDescribe, with Kafka 4.4's messages."""
        err = self.partition_error(group_id)
        if err:
            return err, None, None
        group = self.streams_groups.get(group_id)
        if group is not None:
            return 0, group, None
        if self._known(group_id) and not (group_id in self.groups and self.groups[group_id].is_in(S.DEAD)):
            return E.GROUP_ID_NOT_FOUND, None, f"Group {group_id} is not a streams group."
        return E.GROUP_ID_NOT_FOUND, None, f"Group {group_id} not found."

    def _write_logged(self, group_id: str, records: list[tuple[bytes, bytes | None]], what: str) -> None:
        def done(f: asyncio.Future[int]) -> None:
            if not f.cancelled() and f.exception() is not None:
                log.warning("group %s: writing %s failed: %r", group_id, what, f.exception())

        try:
            self._write(group_id, records).add_done_callback(done)
        except Exception as e:
            log.warning("group %s: writing %s failed: %r", group_id, what, e)

    # ================================================================== OffsetCommit
    async def commit_offsets(
        self, group_id: str, generation_id: int, member_id: str, instance_id: str | None, retention_ms: int,
        api_version: int, partitions: list[tuple[str, int, int, int, str | None]],
    ) -> dict[tuple[str, int], int]:
        """partitions: (topic as its Kafka name, partition, offset, leader epoch, metadata). Returns the
        error of each (topic, partition); 0 ones are durable when this returns."""
        return await run_to_end(self._commit_offsets(group_id, generation_id, member_id, instance_id, retention_ms,
                                                     api_version, partitions))

    async def _commit_offsets(
        self, group_id: str, generation_id: int, member_id: str, instance_id: str | None, retention_ms: int,
        api_version: int, partitions: list[tuple[str, int, int, int, str | None]],
    ) -> dict[tuple[str, int], int]:
        keys = [(t, p) for t, p, *_ in partitions]
        err = self.partition_error(group_id)
        if err:
            return dict.fromkeys(keys, err)
        group = self.groups.get(group_id)
        created = False
        cg = self.consumer_groups.get(group_id)
        sg = self.streams_groups.get(group_id)
        if sg is not None:
            # A streams group: the generation id is the member epoch (KIP-1071), as a consumer group's.
            err = self.streams.validate_offset_commit(sg, member_id, generation_id)
            if err:
                return dict.fromkeys(keys, err)
            group = None
        elif cg is not None:
            # A consumer group: the generation id is the member epoch (KIP-848), checked against the
            # partitions Kafka checks it for (those whose metadata is not too large).
            err = self.consumer.validate_offset_commit(cg, member_id, generation_id, api_version,
                                                       self._checked_partitions(partitions))
            if err:
                return dict.fromkeys(keys, err)
        elif group is None:
            if generation_id >= 0:
                # v9+ says the group is missing; older versions get ILLEGAL_GENERATION, as in Kafka.
                return dict.fromkeys(keys, E.GROUP_ID_NOT_FOUND if api_version >= 9 else E.ILLEGAL_GENERATION)
            # A commit outside group management (e.g. kafka-consumer-groups --reset-offsets --execute):
            # the group holds only offsets. It is not written; its offset records bring it back on load.
            group = ClassicGroup(group_id, state_timestamp=self.now_ms())
            self.groups[group_id] = group
            created = True
        if group is not None and cg is None and sg is None:
            err = self.machine.validate_offset_commit(group, member_id, instance_id, generation_id, self._timer_ms())
            self._arm()  # a member's commit restarted its session timer
            if err:
                return dict.fromkeys(keys, err)
        result = await self.offset_manager.commit(group_id, partitions, retention_ms)
        if self.offset_manager.has_offsets(group_id):
            if not self._known(group_id):
                # The group was deleted while the commit was being written: the offsets bring it back, as
                # replaying the log would.
                self.groups[group_id] = ClassicGroup(group_id, state_timestamp=self.now_ms())
        elif created and self.groups.get(group_id) is group:
            del self.groups[group_id]  # nothing was committed: the simple group made for it goes
        return result

    def _checked_partitions(self, partitions: list[tuple[str, int, int, int, str | None]]) -> list[tuple[str, int]]:
        """The (topic, partition)s of a commit whose member epoch Kafka checks: not those refused for their
        metadata size, which Kafka answers OFFSET_METADATA_TOO_LARGE before it looks at the epoch."""
        max_meta = self.config.offsetMetadataMaxSize
        return [(t, p) for t, p, _, _, meta in partitions if meta is None or len(meta) <= max_meta]

    # ================================================================== TxnOffsetCommit (KIP-98, KIP-447)
    def validate_txn_offset_commit(self, group_id: str, generation_id: int, member_id: str,
                                   instance_id: str | None,
                                   partitions: list[tuple[str, int, int, int, str | None]] | None = None) -> int:
        """Kafka's checks of a transactional commit: a commit without member information (TxnOffsetCommit
        v0-v2, or an empty member id) is accepted even by a Stable group, and creates a missing group;
        otherwise the member must exist (UNKNOWN_MEMBER_ID, FENCED_INSTANCE_ID for a replaced static
        member) at the group's generation (ILLEGAL_GENERATION); a consumer group's member may also commit
        `partitions` with an older epoch by OffsetCommit's rule (KIP-1251, ConsumerGroupMachine's
        validate_offset_commit). No REBALANCE_IN_PROGRESS here."""
        sg = self.streams_groups.get(group_id)
        if sg is not None:
            err = self.streams.validate_offset_commit(sg, member_id, generation_id)
            return E.ILLEGAL_GENERATION if err == E.STALE_MEMBER_EPOCH else err
        cg = self.consumer_groups.get(group_id)
        if cg is not None:
            if generation_id < 0 and not member_id and instance_id is None:
                return 0  # KAFKA-18060: an empty member id is accepted by consumer groups too
            member = cg.members.get(member_id)
            if member is None:
                return E.UNKNOWN_MEMBER_ID
            if instance_id is not None and getattr(member, "instance_id", instance_id) != instance_id:
                return E.FENCED_INSTANCE_ID
            err = self.consumer.validate_offset_commit(cg, member_id, generation_id, 0,
                                                       self._checked_partitions(partitions or []), transactional=True)
            # TxnOffsetCommit below v6 has no STALE_MEMBER_EPOCH: Kafka answers ILLEGAL_GENERATION instead.
            return E.ILLEGAL_GENERATION if err == E.STALE_MEMBER_EPOCH else err
        group = self.groups.get(group_id)
        if group is None:
            return E.ILLEGAL_GENERATION if generation_id >= 0 else 0
        if group.is_in(S.DEAD):
            return E.COORDINATOR_NOT_AVAILABLE
        if generation_id >= 0 or member_id or instance_id is not None:
            err = member_fencing_error(group, member_id, instance_id, generation_id)
            if err:
                return err
        return 0

    async def txn_commit_offsets(
        self, group_id: str, producer_id: int, producer_epoch: int, generation_id: int, member_id: str,
        instance_id: str | None, partitions: list[tuple[str, int, int, int, str | None]],
    ) -> dict[tuple[str, int], int]:
        """TxnOffsetCommit: the offsets are written now, to the group's __consumer_offsets partition, in a
        transactional batch of the producer; they stay pending (invisible to OffsetFetch, and
        UNSTABLE_OFFSET_COMMIT to require_stable fetches) until the transaction's marker lands
        (`complete_transaction`). partitions: (topic's Kafka name, partition, offset, leader epoch,
        metadata). Returns the error of each (topic, partition)."""
        return await run_to_end(self._txn_commit_offsets(group_id, producer_id, producer_epoch, generation_id,
                                                         member_id, instance_id, partitions))

    async def _txn_commit_offsets(
        self, group_id: str, producer_id: int, producer_epoch: int, generation_id: int, member_id: str,
        instance_id: str | None, partitions: list[tuple[str, int, int, int, str | None]],
    ) -> dict[tuple[str, int], int]:
        keys = [(t, p) for t, p, *_ in partitions]
        err = self.partition_error(group_id) or self.validate_txn_offset_commit(
            group_id, generation_id, member_id, instance_id, partitions)
        if err:
            return dict.fromkeys(keys, err)
        self._ensure_group(group_id)  # a simple group, as Kafka makes
        return await self.offset_manager.txn_commit(group_id, producer_id, producer_epoch, partitions)

    def _ensure_group(self, group_id: str) -> None:
        if not self._known(group_id):
            self.groups[group_id] = ClassicGroup(group_id, state_timestamp=self.now_ms())

    def _known(self, group_id: str) -> bool:
        """Whether a group of any kind has this id."""
        return group_id in self.groups or group_id in self.consumer_groups or group_id in self.streams_groups

    def complete_transaction(self, partition: int, producer_id: int, commit: bool) -> None:
        """The transaction's marker landed in __consumer_offsets partition `partition`: its pending offsets
        for the groups of that partition become committed (COMMIT) or are dropped (ABORT)."""
        for gid in self.offset_manager.complete_transaction(partition, producer_id, commit):
            self._ensure_group(gid)

    def has_pending_offset(self, group_id: str, topic: str, partition: int) -> bool:
        """Whether an open transaction holds an offset of this partition (OffsetFetch require_stable)."""
        return self.offset_manager.has_pending_offset(group_id, topic, partition)

    # ================================================================== OffsetFetch
    def fetch_offsets(self, group_id: str, topics: list[tuple[str, list[int]]] | None,
                      member_id: str | None = None, member_epoch: int = -1,
                      ) -> tuple[int, list[tuple[str, int, int, int, str, int]]]:
        """topics: (Kafka topic name, partitions), or None for every committed partition. Returns
        (group error, [(topic, partition, offset, leader epoch, metadata, error)]); -1 = no commit.
        member_id/member_epoch (OffsetFetch v9) are checked for consumer groups only, as in Kafka."""
        err = self.partition_error(group_id)
        if err:
            return err, []
        cg = self.consumer_groups.get(group_id)
        sg = self.streams_groups.get(group_id)
        if sg is not None:
            if member_id:
                err = self.streams.validate_offset_commit(sg, member_id, member_epoch)
                if err:
                    return err, []
        elif cg is not None:
            err = self.consumer.validate_offset_fetch(cg, member_id, member_epoch)
            if err:
                return err, []
        else:
            group = self.groups.get(group_id)
            if group is None or group.is_in(S.DEAD):
                return 0, self.offset_manager.fetch(None, topics)  # no group: no commits
        return 0, self.offset_manager.fetch(group_id, topics)

    # ================================================================== OffsetDelete
    async def delete_offsets(self, group_id: str, topics: list[tuple[str, list[int]]]
                             ) -> tuple[int, dict[tuple[str, int], int]]:
        """Returns (group error, {(topic, partition): error}); partitions without a committed offset are
        left out of the result, as Kafka leaves them out of its response."""
        return await run_to_end(self._delete_offsets(group_id, topics))

    async def _delete_offsets(self, group_id: str, topics: list[tuple[str, list[int]]]
                              ) -> tuple[int, dict[tuple[str, int], int]]:
        err = self.partition_error(group_id)
        if err:
            return err, {}
        cg = self.consumer_groups.get(group_id)
        sg = self.streams_groups.get(group_id)
        if sg is not None:
            is_subscribed: Callable[[str], bool] = self.streams.subscribed_topics(sg).__contains__
        elif cg is not None:
            subscribed = self.consumer.subscribed_topics(cg)
            is_subscribed = subscribed.__contains__
        else:
            group = self.groups.get(group_id)
            if group is None or group.is_in(S.DEAD):
                return E.GROUP_ID_NOT_FOUND, {}
            if group.is_in(S.STABLE, S.PREPARING_REBALANCE, S.COMPLETING_REBALANCE) and not group.uses_consumer_protocol():
                return E.NON_EMPTY_GROUP, {}
            is_subscribed = group.is_subscribed_to
        offsets = self.offset_manager.committed(group_id)
        result: dict[tuple[str, int], int] = {}
        tombstones: list[tuple[str, int]] = []
        for t, parts in topics:
            if is_subscribed(t):
                for p in parts:
                    result[(t, p)] = E.GROUP_SUBSCRIBED_TO_TOPIC
                continue
            for p in parts:
                if (t, p) in offsets:
                    result[(t, p)] = 0
                    tombstones.append((t, p))
        err = await self.offset_manager.delete(group_id, tombstones)
        return (err, {}) if err else (0, result)

    # ================================================================== DeleteGroups
    async def delete_groups(self, group_ids: list[str]) -> dict[str, int]:
        return await run_to_end(self._delete_groups(group_ids))

    async def _delete_groups(self, group_ids: list[str]) -> dict[str, int]:
        result: dict[str, int] = {}
        writes: list[tuple[str, asyncio.Future[int], list[TopicPartition]]] = []
        for gid in group_ids:
            err = self.partition_error(gid)
            if err:
                result[gid] = err
                continue
            sg = self.streams_groups.get(gid)
            if sg is not None:
                if sg.members:
                    result[gid] = E.NON_EMPTY_GROUP
                    continue
                parts = list(self.offset_manager.committed(gid))
                del self.streams_groups[gid]
                records = OffsetManager.tombstones(gid, parts) + self._streams_tombstones(sg)
                writes.append((gid, self._write(gid, records), parts))
                continue
            cg = self.consumer_groups.get(gid)
            if cg is not None:
                if cg.members:
                    result[gid] = E.NON_EMPTY_GROUP
                    continue
                parts = list(self.offset_manager.committed(gid))
                tombstones = OffsetManager.tombstones(gid, parts)
                writes.append((gid, self._write(gid, tombstones + self.consumer.delete_group(gid)), parts))
                continue
            group = self.groups.get(gid)
            if group is None or group.is_in(S.DEAD):
                result[gid] = E.GROUP_ID_NOT_FOUND
                continue
            if group.is_in(S.STABLE, S.PREPARING_REBALANCE, S.COMPLETING_REBALANCE):
                result[gid] = E.NON_EMPTY_GROUP
                continue
            parts = list(self.offset_manager.committed(gid))
            records = OffsetManager.tombstones(gid, parts)
            records.append((rec.group_metadata_key(gid), None))
            self._remove_group(group)
            writes.append((gid, self._write(gid, records), parts))
        for gid, fut, parts in writes:
            try:
                await fut
            except Exception as e:
                log.warning("group %s: writing its tombstones failed: %r", gid, e)
                result[gid] = append_error(e)
                continue
            self.offset_manager.forget(gid, parts)
            result[gid] = 0
        return {gid: result[gid] for gid in group_ids if gid in result}

    def _remove_group(self, group: ClassicGroup) -> None:
        self.machine.remove_group(group.group_id)
        self._run()

    # ================================================================== ListGroups / DescribeGroups
    def list_groups(self, states: Iterable[str] = (), types: Iterable[str] = ()) -> tuple[int, list[ListedGroup]]:
        if not self.available or self.topics.paused:  # paused: not serving (cluster lease), no listing from memory
            return E.COORDINATOR_NOT_AVAILABLE, []
        if self.loading:
            return E.COORDINATOR_LOAD_IN_PROGRESS, []
        want_states = {s.strip().lower() for s in states}
        want_types = {t.strip().lower() for t in types}
        out = []
        for group in self.groups.values():
            if want_states and group.state.value.lower() not in want_states:
                continue
            if want_types and "classic" not in want_types:
                continue
            out.append(ListedGroup(group.group_id, group.protocol_type or "", group.state.value))
        if not want_types or "consumer" in want_types:
            for cg in self.consumer_groups.values():
                if want_states and cg.state.lower() not in want_states:
                    continue
                out.append(ListedGroup(cg.group_id, "consumer", cg.state, "consumer"))
        if not want_types or "streams" in want_types:
            for sg in self.streams_groups.values():
                if not want_states or sg.state.lower() in want_states:
                    out.append(ListedGroup(sg.group_id, "streams", sg.state, "streams"))
        return 0, out

    def describe_group(self, group_id: str) -> DescribedGroup:
        err = self.partition_error(group_id)
        if err:
            return DescribedGroup(group_id, err, "", "", "", [])
        group = self.groups.get(group_id)
        if group is None or group.is_in(S.DEAD) or group_id in self.consumer_groups or group_id in self.streams_groups:
            # DescribeGroups knows classic groups only: Kafka 4.x describes a consumer group as Dead too
            # (kafka-consumer-groups then uses ConsumerGroupDescribe).
            return DescribedGroup(group_id, 0, S.DEAD.value, "", "", [], found=False)
        stable = group.is_in(S.STABLE)
        members = [
            DescribedMember(m.member_id, m.group_instance_id, m.client_id, m.client_host,
                            m.metadata(group.protocol_name) if stable else b"",
                            m.assignment if stable else EMPTY_ASSIGNMENT)
            for m in group.members.values()
        ]
        return DescribedGroup(group_id, 0, group.state.value, group.protocol_type or "",
                              (group.protocol_name or "") if stable else "", members)

    # ================================================================== expiration
    async def expire_offsets(self) -> int:
        """Write tombstones for expired offsets and for groups left with nothing (Kafka's rules: offsets of
        an Empty group expire offsets.retention.minutes after it became Empty; a Stable consumer group's
        offsets of topics nobody subscribes to, that long after their commit; a simple group's, after
        their commit). Returns how many tombstones were written."""
        retention_ms = self.config.offsetsRetentionMinutes * 60_000
        now = self.now_ms()
        per_group: list[tuple[str, list[TopicPartition], bool]] = []
        for gid, group in list(self.groups.items()):
            if not self.runtime.is_loaded(self.partition_of(gid)) or group.is_in(S.DEAD):
                continue
            expired, all_expired = self.offset_manager.expired(gid, now, retention_ms, self._expiration_base(group),
                                                               group.is_subscribed_to)
            delete_group = all_expired and group.is_in(S.EMPTY)
            if expired or delete_group:
                per_group.append((gid, expired, delete_group))
        for gid, cg in self.consumer_groups.items():
            # Kafka's rule for consumer groups: an offset of a topic no member subscribes to expires retention
            # after its commit; a group without members whose offsets are all gone is deleted.
            if not self.runtime.is_loaded(self.partition_of(gid)):
                continue
            expired, all_expired = self.offset_manager.expired(gid, now, retention_ms, _commit_time,
                                                               self.consumer.subscribed_topics(cg).__contains__)
            delete_group = all_expired and not cg.members
            if expired or delete_group:
                per_group.append((gid, expired, delete_group))
        for gid, sg in self.streams_groups.items():
            # as a consumer group's: offsets of topics the group does not read expire after their commit
            if self.runtime.is_loaded(self.partition_of(gid)):
                expired, all_expired = self.offset_manager.expired(gid, now, retention_ms, _commit_time,
                                                                   self.streams.subscribed_topics(sg).__contains__)
                if expired or (all_expired and not sg.members):
                    per_group.append((gid, expired, all_expired and not sg.members))
        total = 0
        waits = []
        for gid, expired, delete_group in per_group:
            records = OffsetManager.tombstones(gid, expired)
            if delete_group and gid in self.streams_groups:
                records += self._streams_tombstones(self.streams_groups.pop(gid))
            elif delete_group and gid in self.consumer_groups:
                records += self.consumer.delete_group(gid)
            elif delete_group:
                records.append((rec.group_metadata_key(gid), None))
                dead = self.groups.get(gid)
                if dead is not None:
                    self._remove_group(dead)
            waits.append((gid, expired, self._write(gid, records)))
            total += len(records)
        for gid, expired, fut in waits:
            try:
                await fut
            except Exception as e:
                log.warning("group %s: writing expiration tombstones failed: %r", gid, e)
                continue
            self.offset_manager.forget(gid, expired)
        if total:
            log.info("offset expiration wrote %d tombstones", total)
        return total

    @staticmethod
    def _expiration_base(group: ClassicGroup) -> Callable[[OffsetAndMetadata], int] | None:
        """From when an offset's retention counts, or None when the group's offsets do not expire now."""
        if group.protocol_type is not None:
            if group.is_in(S.EMPTY):
                ts = group.state_timestamp
                return (lambda om: ts) if ts is not None else (lambda om: om.commit_timestamp)
            if group.uses_consumer_protocol() and group.subscribed_topics is not None and group.is_in(S.STABLE):
                return lambda om: om.commit_timestamp
            return None
        return lambda om: om.commit_timestamp

    # ================================================================== topic deletion
    async def on_topic_deleted(self, deleted: Topic) -> None:
        """A deleted topic's committed offsets go too (tombstones), as Kafka removes them."""
        await self.offset_manager.delete_topic(self.topics.kafka_name(deleted.name),
                                               lambda gid: self.runtime.is_loaded(self.partition_of(gid)))


def _commit_time(om: OffsetAndMetadata) -> int:
    return om.commit_timestamp


class _GroupLoad:
    """One load of a __consumer_offsets partition: its records replayed (KIP-848 consumer groups through
    their replayer, applied once the partition is read), then the state machines told of its groups."""

    def __init__(self, coordinator: GroupCoordinator, partition: int) -> None:
        self.coordinator = coordinator
        self.partition = partition
        self.consumer = ConsumerGroupReplayer()
        self.streams: dict[str, dict[bytes, bytes]] = {}  # streams group -> its records' latest values

    def replay(self, fb: FetchedBatch) -> None:
        c = self.coordinator
        hdr = parse_batch_header(fb.batch)
        if hdr.is_control or hdr.is_transactional:
            # a transactional batch's offsets are pending until its marker, replayed as when first written
            for gid in c.offset_manager.replay_transactional(self.partition, hdr.producer_id, hdr.is_control,
                                                             fb.batch, fb.base_offset):
                c._ensure_group(gid)
            return
        for r in decode_records(fb.batch):
            if r.key is not None:
                c._replay(r.key, r.value, self.consumer, fb.base_offset + r.offset_delta, self.streams)

    def loaded(self) -> str:
        c = self.coordinator
        c._on_loaded(self.partition, self.consumer.result(), self.streams)
        groups = sum(1 for gid in c.groups if c.partition_of(gid) == self.partition)
        return f"{groups} groups"


__all__ = [
    "CoordinatorError",
    "DescribedGroup",
    "GroupCoordinator",
    "JoinRequest",
    "JoinResult",
    "ListedGroup",
    "SyncResult",
]
