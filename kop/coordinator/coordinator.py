"""The group coordinator: Kafka's classic group protocol, with its state in __consumer_offsets.

Semantics follow Apache Kafka 4.x's group coordinator (GroupMetadataManager / OffsetMetadataManager for
classic groups), error code for error code, because clients and kafka-consumer-groups are written against
it. Where KoP fell short we do not (research/kop.md §3.5, §6):

* KIP-394: a first JoinGroup (v4+) without a member id gets MEMBER_ID_REQUIRED and a generated id;
* KIP-345 static membership: a restarted member with the same group.instance.id takes over its old
  member id's place and assignment without a rebalance (when its protocols did not change), and the old id
  is fenced (FENCED_INSTANCE_ID);
* LeaveGroup removes a batch of members (by member id or by group instance id) with per-member results;
* OffsetDelete and DeleteGroups;
* an OffsetCommit is acknowledged only once its records are durable in __consumer_offsets (kop#1041 lost
  commits silently), and the in-memory offsets change only then, so a reader never sees an offset that a
  crash could take back.

Placement: the coordinator of group G is the owner of partition abs(hashCode(G)) % N of __consumer_offsets
(Kafka's formula, so every tool agrees). Alone, this broker owns every partition; in cluster mode it owns
those whose namespace bundle it owns (kop/cluster/ownership.py). Each owned partition is loaded by reading
it to the end - at start, and when its bundle is acquired (`load_partition`) - and requests for its groups
get COORDINATOR_LOAD_IN_PROGRESS meanwhile; groups of a partition this broker does not own get
NOT_COORDINATOR. A partition whose bundle is released is unloaded (`unload_partition`): its groups are
dropped from memory and their parked JoinGroup/SyncGroup requests answered NOT_COORDINATOR, as Kafka does
when a coordinator moves.

The logic is synchronous (one event loop, no awaits inside a state change), like Kafka's single-threaded
coordinator shards: an operation changes the in-memory group, issues its records as one batch (appends of a
partition are stored and acknowledged in issue order), and answers when the batch is durable.

Metrics hook: `committed_offsets()` gives {(group, topic, partition): offset} for consumer lag.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from kop.config import BrokerConfig
from kop.coordinator import records as rec
from kop.coordinator.group import (
    CONSUMER_PROTOCOL_TYPE,
    EMPTY_ASSIGNMENT,
    UNKNOWN_MEMBER_ID,
    ClassicGroup,
    GroupState,
    Member,
    new_member_uuid,
)
from kop.offset.api import PartitionLog
from kop.protocol.errors import ErrorCode
from kop.protocol.records import NewRecord, build_batch, decode_records, parse_batch_header
from kop.topics.manager import Topic, TopicError, TopicManager
from kop.topics.names import OFFSETS_TOPIC
from kop.topics.topic_config import effective

log = logging.getLogger(__name__)

# Kafka's GROUP_NEW_MEMBER_JOIN_TIMEOUT: a new member parked in a rebalance is dropped after this long.
NEW_MEMBER_JOIN_TIMEOUT_MS = 300_000
# The leader epoch stamped into our batches: the constant the broker reports (kop.kafka.apis.common).
LEADER_EPOCH = 0
LOAD_READ_BYTES = 1 << 20
LOAD_CONCURRENCY = 16
LOAD_RETRY_S = 2.0  # a failed load of a __consumer_offsets partition is tried again this long after

S = GroupState
E = ErrorCode


class RecordTooLarge(Exception):
    """A coordinator batch larger than __consumer_offsets' max.message.bytes (e.g. huge member metadata)."""


def append_error(exc: BaseException) -> int:
    """Kafka's mapping of a failed coordinator write to the error a client can act on."""
    if isinstance(exc, RecordTooLarge):
        return E.UNKNOWN_SERVER_ERROR
    return E.NOT_COORDINATOR  # a storage failure: the client rediscovers the coordinator and retries


@dataclass(slots=True)
class OffsetAndMetadata:
    offset: int
    leader_epoch: int  # -1: none
    metadata: str
    commit_timestamp: int
    expire_timestamp: int = -1  # only commits with a retention time (OffsetCommit v2-v4) have one


@dataclass(slots=True)
class JoinRequest:
    group_id: str
    member_id: str
    group_instance_id: str | None
    protocol_type: str
    protocols: list[tuple[str, bytes]]
    session_timeout_ms: int
    rebalance_timeout_ms: int
    client_id: str
    client_host: str
    api_version: int
    reason: str | None = None


@dataclass(slots=True)
class JoinResult:
    error: int = 0
    generation_id: int = -1
    protocol_type: str | None = None
    protocol_name: str | None = None
    leader: str = ""
    skip_assignment: bool = False
    member_id: str = ""
    members: list[tuple[str, str | None, bytes]] = field(default_factory=list)


@dataclass(slots=True)
class SyncResult:
    error: int = 0
    protocol_type: str | None = None
    protocol_name: str | None = None
    assignment: bytes = EMPTY_ASSIGNMENT


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


class CoordinatorError(Exception):
    def __init__(self, error: int, message: str = "") -> None:
        super().__init__(message or ErrorCode(error).name)
        self.error = error


class GroupCoordinator:
    def __init__(self, config: BrokerConfig, topics: TopicManager, clock: Callable[[], float] = time.time) -> None:
        self.config = config
        self.topics = topics
        self.clock = clock  # wall clock in seconds (time.time); tests may set another
        self.groups: dict[str, ClassicGroup] = {}
        self.offsets: dict[str, dict[tuple[str, int], OffsetAndMetadata]] = {}
        self.topic: Topic | None = None
        self.num_partitions = config.offsetsTopicNumPartitions
        self._logs: dict[int, PartitionLog] = {}
        self._loaded: set[int] = set()
        self._failed: set[int] = set()
        self._failed_at: dict[int, float] = {}  # when each failed load failed (monotonic): retries are spaced
        self._loading: set[int] = set()
        self._gate = asyncio.Semaphore(LOAD_CONCURRENCY)
        self._timers: dict[tuple[Any, ...], asyncio.TimerHandle] = {}
        self._tasks: list[asyncio.Task[Any]] = []
        self._load_task: asyncio.Task[None] | None = None
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

    async def start(self) -> None:
        """Create __consumer_offsets when missing (compacted, internal) and start loading it; requests
        are answered meanwhile (COORDINATOR_LOAD_IN_PROGRESS for groups of a partition not loaded yet)."""
        self._loop = asyncio.get_running_loop()
        self.topic = await self._ensure_topic()
        self.num_partitions = self.topic.partitions
        owned = [p for p in range(self.num_partitions) if self.topics.owns(self.topic, p)]
        self._loading.update(owned)
        self._load_task = asyncio.create_task(self._load_all(owned), name="coordinator-load")
        self._tasks.append(self._load_task)
        self._tasks.append(asyncio.create_task(self._expiration_loop(), name="coordinator-expiration"))

    async def wait_loaded(self) -> None:
        if self._load_task is not None:
            await asyncio.shield(self._load_task)

    async def _ensure_topic(self) -> Topic:
        tn = self.topics.offsets_topic
        topic = self.topics.get(tn)
        if topic is None:
            try:
                topic = await self.topics.create(
                    tn, self.config.offsetsTopicNumPartitions, {"cleanup.policy": "compact"}, internal=True)
            except TopicError as e:
                if e.error != "TOPIC_ALREADY_EXISTS":
                    raise
                topic = self.topics.get(tn)
                assert topic is not None
        elif topic.partitions != self.config.offsetsTopicNumPartitions:
            # kop#795: changing the count would move groups to other partitions and lose their offsets.
            log.warning("%s has %d partitions, offsetsTopicNumPartitions says %d: keeping %d (the group -> "
                        "partition mapping must not change)", OFFSETS_TOPIC, topic.partitions,
                        self.config.offsetsTopicNumPartitions, topic.partitions)
        return topic

    async def stop(self) -> None:
        """Answer parked JoinGroup/SyncGroup requests with NOT_COORDINATOR (as Kafka does when it unloads a
        partition), cancel timers and background tasks. Writes already issued still complete."""
        self._stopped = True
        for key in list(self._timers):
            self._cancel(key)
        for group in self.groups.values():
            for m in list(group.members.values()):
                group.complete_join(m, JoinResult(E.NOT_COORDINATOR, member_id=m.member_id))
                group.complete_sync(m, SyncResult(E.NOT_COORDINATOR))
        tasks = list(self._tasks)
        for t in tasks:
            t.cancel()
        for t in tasks:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await t
        self._tasks.clear()

    # ================================================================== loading
    async def _load_all(self, partitions: list[int]) -> None:
        """Load the given partitions, LOAD_CONCURRENCY at a time (opening a partition's managed ledger waits
        on the metadata store; partitions are independent, the records of one are replayed in order)."""
        started = time.monotonic()
        await asyncio.gather(*(self._load_one(p) for p in partitions))
        log.info("group coordinator loaded %d groups and %d committed offsets from %d partitions of %s in %.0f ms",
                 len(self.groups), sum(len(o) for o in self.offsets.values()), len(partitions),
                 OFFSETS_TOPIC, (time.monotonic() - started) * 1000)

    async def _load_one(self, p: int) -> None:
        async with self._gate:
            if self._stopped or p not in self._loading:
                return
            try:
                await self._load_partition(p)
            except asyncio.CancelledError:
                raise
            except Exception:
                if p in self._loading:
                    log.exception("loading %s partition %d failed; its groups get COORDINATOR_NOT_AVAILABLE",
                                  OFFSETS_TOPIC, p)
                    self._loading.discard(p)
                    self._failed.add(p)
                    self._failed_at[p] = time.monotonic()

    def load_partition(self, p: int) -> None:
        """This broker became the owner of __consumer_offsets partition `p` (cluster mode): load its
        groups in the background (their requests get COORDINATOR_LOAD_IN_PROGRESS until then)."""
        if self.topic is None or self._stopped or p in self._loaded or p in self._loading:
            return
        self._failed.discard(p)
        self._loading.add(p)
        started = time.monotonic()
        task = asyncio.create_task(self._load_one(p), name=f"coordinator-load-{p}")
        self._tasks.append(task)

        def done(t: asyncio.Task[None]) -> None:
            with contextlib.suppress(ValueError):
                self._tasks.remove(t)
            if p in self._loaded:
                log.info("group coordinator loaded %s partition %d in %.0f ms", OFFSETS_TOPIC, p,
                         (time.monotonic() - started) * 1000)

        task.add_done_callback(done)

    def unload_partition(self, p: int) -> None:
        """This broker no longer owns partition `p`: forget its groups (their state stays in the log for
        the next owner) and answer their parked requests NOT_COORDINATOR."""
        self._loading.discard(p)
        self._loaded.discard(p)
        self._failed.discard(p)
        self._logs.pop(p, None)
        dropped = self._drop_groups_of(p)
        log.info("group coordinator unloaded %s partition %d (%d groups)", OFFSETS_TOPIC, p, dropped)

    def _drop_groups_of(self, p: int) -> int:
        dropped = 0
        for gid, group in list(self.groups.items()):
            if self.partition_of(gid) != p:
                continue
            for key in [k for k in self._timers if len(k) > 1 and k[1] == gid]:
                self._cancel(key)
            for m in list(group.members.values()):
                group.complete_join(m, JoinResult(E.NOT_COORDINATOR, member_id=m.member_id))
                group.complete_sync(m, SyncResult(E.NOT_COORDINATOR))
            del self.groups[gid]
            self.offsets.pop(gid, None)
            dropped += 1
        return dropped

    async def _load_partition(self, p: int) -> None:
        assert self.topic is not None
        plog = await self.topics.partition_log(self.topic, p)
        if p not in self._loading:
            return  # unloaded while opening
        self._logs[p] = plog
        offset = plog.log_start_offset
        end = plog.high_watermark
        while offset < end:
            res = await plog.read(offset, LOAD_READ_BYTES)
            if not res.batches:
                break
            for fb in res.batches:
                if parse_batch_header(fb.batch).is_control:
                    continue
                for r in decode_records(fb.batch):
                    if r.key is not None:
                        self._replay(r.key, r.value)
            offset = res.next_offset
        if p not in self._loading:  # unloaded while loading: drop what was replayed
            self._drop_groups_of(p)
            return
        self._loading.discard(p)
        self._loaded.add(p)
        self._on_loaded(p)

    def _replay(self, key: bytes, value: bytes | None) -> None:
        """Apply one __consumer_offsets record (the same records this coordinator writes)."""
        try:
            k = rec.decode_key(key)
            if isinstance(k, rec.OffsetCommitKey):
                if value is None:
                    self._remove_offset(k.group, k.topic, k.partition)
                    return
                v = rec.decode_offset_commit_value(value)
                if k.group not in self.groups:
                    # Offsets without group metadata: a "simple" group (commits outside group management).
                    self.groups[k.group] = ClassicGroup(k.group)
                self.offsets.setdefault(k.group, {})[(k.topic, k.partition)] = OffsetAndMetadata(
                    v.offset, v.leader_epoch, v.metadata, v.commit_timestamp, v.expire_timestamp)
            elif isinstance(k, rec.GroupMetadataKey):
                if value is None:
                    old = self.groups.pop(k.group, None)
                    if old is not None:
                        old.state = S.DEAD
                    return
                self.groups[k.group] = self._group_from_record(k.group, rec.decode_group_metadata_value(value))
            else:
                log.debug("skipping a version %d record key in %s (not a classic group record)", k.version,
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

    def _on_loaded(self, p: int) -> None:
        for group in [g for gid, g in self.groups.items() if self.partition_of(gid) == p]:
            for m in group.members.values():
                self._reschedule_heartbeat(group, m)
            if len(group.members) > self.config.groupMaxSize:
                self._prepare_rebalance(group, f"freshly loaded group is over capacity {self.config.groupMaxSize}")

    # ================================================================== placement and state
    def partition_of(self, group_id: str) -> int:
        return rec.partition_for(group_id, self.num_partitions)

    def partition_error(self, group_id: str) -> int:
        """0 when this coordinator can serve `group_id` now, else the error to answer with. (An empty group
        id is valid for offsets, describe and delete, as in Kafka; the membership APIs refuse it.)"""
        if self._stopped or self.topic is None:
            return E.COORDINATOR_NOT_AVAILABLE
        p = self.partition_of(group_id)
        if p in self._loaded:
            return E.NOT_COORDINATOR if self.topics.paused else 0
        if not self.topics.owns(self.topic, p):
            return E.NOT_COORDINATOR  # cluster mode: another broker coordinates this group
        if p in self._failed:
            # A load can fail for a passing reason (bookies briefly unavailable, the ZooKeeper connection
            # suspended while the partition opened); the partition is still ours, so a request after
            # LOAD_RETRY_S starts another load - without it the partition's groups stayed broken until a
            # restart. Until then the group's clients are told to retry.
            if time.monotonic() - self._failed_at.get(p, 0.0) >= LOAD_RETRY_S:
                self.load_partition(p)
                return E.COORDINATOR_LOAD_IN_PROGRESS
            return E.COORDINATOR_NOT_AVAILABLE
        return E.COORDINATOR_LOAD_IN_PROGRESS

    @property
    def available(self) -> bool:
        return not self._stopped and self.topic is not None

    @property
    def loading(self) -> bool:
        return bool(self._loading)

    def topic_key(self, name: str) -> str:
        """The name offsets of topic `name` are stored under: its Kafka name (`t` in the default namespace,
        `tenant/ns/t` elsewhere), whichever of KoP's spellings the client used; unparseable names as is."""
        try:
            return self.topics.kafka_name(self.topics.parse(name))
        except ValueError:
            return name

    def committed_offsets(self) -> dict[tuple[str, str, int], int]:
        """{(group, topic, partition): committed offset} for every durable commit (consumer lag metrics).
        Topics are Kafka names as kop.topics.manager.TopicManager.kafka_name gives them."""
        return {(g, t, p): o.offset for g, offs in self.offsets.items() for (t, p), o in offs.items()}

    # ================================================================== timers
    def _schedule(self, key: tuple[Any, ...], delay_ms: int, fn: Callable[..., None], *args: Any) -> None:
        self._cancel(key)
        if self._stopped:
            return
        self._timers[key] = self.loop.call_later(max(delay_ms, 0) / 1000, self._fire, key, fn, args)

    def _fire(self, key: tuple[Any, ...], fn: Callable[..., None], args: tuple[Any, ...]) -> None:
        self._timers.pop(key, None)
        try:
            fn(*args)
        except Exception:
            log.exception("group coordinator timer %s failed", key)

    def _cancel(self, key: tuple[Any, ...]) -> None:
        h = self._timers.pop(key, None)
        if h is not None:
            h.cancel()

    def _reschedule_heartbeat(self, group: ClassicGroup, member: Member, timeout_ms: int | None = None) -> None:
        self._schedule(("hb", group.group_id, member.member_id),
                       member.session_timeout_ms if timeout_ms is None else timeout_ms,
                       self._expire_heartbeat, group.group_id, member.member_id)

    # ================================================================== writes
    def _write(self, group_id: str, records: list[tuple[bytes, bytes | None]]) -> asyncio.Future[Any]:
        """Issue one batch to the group's __consumer_offsets partition now (appends of a partition are
        stored and acknowledged in issue order); the future completes when it is durable."""
        assert self.topic is not None
        plog = self._logs.get(self.partition_of(group_id))
        now = self.now_ms()
        if plog is None:  # the partition was unloaded (cluster mode: its bundle moved)
            lost: asyncio.Future[Any] = self.loop.create_future()
            lost.set_exception(CoordinatorError(E.NOT_COORDINATOR, "the group's partition is not loaded here"))
            return lost
        batch = build_batch([NewRecord(k, v, (), now) for k, v in records], partition_leader_epoch=LEADER_EPOCH)
        max_bytes = int(effective(self.topic.configs, "max.message.bytes", self.config))
        if len(batch) > max_bytes:
            fut: asyncio.Future[Any] = self.loop.create_future()
            fut.set_exception(RecordTooLarge(
                f"a {len(batch)}-byte batch for group {group_id} exceeds max.message.bytes={max_bytes}"))
            return fut
        return asyncio.ensure_future(plog.append(batch, len(records) - 1, now))

    def _group_record(self, group: ClassicGroup, assignment: dict[str, bytes]) -> tuple[bytes, bytes]:
        members = [
            rec.MemberMetadata(m.member_id, m.group_instance_id, m.client_id, m.client_host,
                               m.rebalance_timeout_ms, m.session_timeout_ms, m.metadata(group.protocol_name),
                               assignment.get(m.member_id, EMPTY_ASSIGNMENT))
            for m in group.members.values()
        ]
        value = rec.GroupMetadataValue(
            group.protocol_type or "", group.generation_id, group.protocol_name, group.leader_id,
            -1 if group.state_timestamp is None else group.state_timestamp, members)
        return rec.group_metadata_key(group.group_id), rec.encode_group_metadata_value(value)

    def _empty_group_record(self, group: ClassicGroup) -> tuple[bytes, bytes]:
        value = rec.GroupMetadataValue("", 0, None, None,
                                       -1 if group.state_timestamp is None else group.state_timestamp, [])
        return rec.group_metadata_key(group.group_id), rec.encode_group_metadata_value(value)

    def _write_logged(self, group_id: str, records: list[tuple[bytes, bytes | None]], what: str) -> None:
        fut = self._write(group_id, records)

        def done(f: asyncio.Future[Any]) -> None:
            if not f.cancelled() and f.exception() is not None:
                log.warning("writing %s of group %s failed: %r", what, group_id, f.exception())

        fut.add_done_callback(done)

    # ================================================================== JoinGroup
    async def join_group(self, req: JoinRequest) -> JoinResult:
        if not req.group_id:
            return JoinResult(E.INVALID_GROUP_ID, member_id=req.member_id)
        err = self.partition_error(req.group_id)
        if err:
            return JoinResult(err, member_id=req.member_id)
        if not self.config.groupMinSessionTimeoutMs <= req.session_timeout_ms <= self.config.groupMaxSessionTimeoutMs:
            return JoinResult(E.INVALID_SESSION_TIMEOUT, member_id=req.member_id)
        fut: asyncio.Future[JoinResult] = self.loop.create_future()
        self._join(req, fut)
        result = await fut
        if log.isEnabledFor(logging.DEBUG):
            log.debug("group %s: JoinGroup v%d of %r answered %s (generation %d, member %s, leader %s)", req.group_id,
                      req.api_version, req.member_id, ErrorCode(result.error).name, result.generation_id,
                      result.member_id, result.leader)
        return result

    def _join(self, req: JoinRequest, fut: asyncio.Future[JoinResult]) -> None:
        is_unknown = req.member_id == UNKNOWN_MEMBER_ID
        group = self.groups.get(req.group_id)
        is_new_group = False
        if group is None:
            if not is_unknown:
                fut.set_result(JoinResult(E.UNKNOWN_MEMBER_ID, member_id=req.member_id))
                return
            group = ClassicGroup(req.group_id, state_timestamp=self.now_ms())
            self.groups[req.group_id] = group
            is_new_group = True
        wrote = False
        if not self._accept_joining_member(group, req.member_id):
            group.remove(req.member_id)
            fut.set_result(JoinResult(E.GROUP_MAX_SIZE_REACHED, member_id=UNKNOWN_MEMBER_ID))
        elif is_unknown:
            wrote = self._join_new_member(req, group, fut)
        else:
            wrote = self._join_existing_member(req, group, fut)
        if is_new_group and not wrote:
            # Kafka 4.x commits a new group with an empty group metadata record.
            w = self._write(group.group_id, [self._empty_group_record(group)])

            def done(f: asyncio.Future[Any]) -> None:
                if not f.cancelled() and f.exception() is not None and not fut.done():
                    fut.set_result(JoinResult(append_error(f.exception()), member_id=req.member_id))

            w.add_done_callback(done)

    def _accept_joining_member(self, group: ClassicGroup, member_id: str) -> bool:
        max_size = self.config.groupMaxSize
        if group.is_in(S.EMPTY, S.DEAD):
            return True
        if group.is_in(S.PREPARING_REBALANCE):
            m = group.members.get(member_id)
            return (m is not None and m.awaiting_join) or group.num_awaiting_join < max_size
        return member_id in group.members or len(group.members) < max_size

    def _join_new_member(self, req: JoinRequest, group: ClassicGroup, fut: asyncio.Future[JoinResult]) -> bool:
        if group.is_in(S.DEAD):
            # The group was just removed; the client retries and finds (or creates) it again.
            fut.set_result(JoinResult(E.COORDINATOR_NOT_AVAILABLE, member_id=req.member_id))
            return False
        if not group.supports_protocols(req.protocol_type, req.protocols):
            fut.set_result(JoinResult(E.INCONSISTENT_GROUP_PROTOCOL, member_id=req.member_id))
            return False
        prefix = req.group_instance_id if req.group_instance_id is not None else req.client_id
        new_member_id = f"{prefix}-{new_member_uuid()}"
        if req.group_instance_id is not None:
            existing = group.static_member_id(req.group_instance_id)
            if existing is None:
                return self._add_member_and_rebalance(req, group, new_member_id, fut)
            return self._update_static_member(req, group, existing, new_member_id, fut)
        if req.api_version >= 4:
            # KIP-394: hand out the id and have the client join again with it, so a client that never
            # receives this answer cannot leave a member behind in the group.
            group.add_pending_member(new_member_id)
            self._schedule(("hb", group.group_id, new_member_id), req.session_timeout_ms,
                           self._expire_heartbeat, group.group_id, new_member_id)
            fut.set_result(JoinResult(E.MEMBER_ID_REQUIRED, member_id=new_member_id))
            return False
        return self._add_member_and_rebalance(req, group, new_member_id, fut)

    def _join_existing_member(self, req: JoinRequest, group: ClassicGroup,
                              fut: asyncio.Future[JoinResult]) -> bool:
        member_id = req.member_id
        if group.is_in(S.DEAD):
            fut.set_result(JoinResult(E.COORDINATOR_NOT_AVAILABLE, member_id=member_id))
            return False
        if not group.supports_protocols(req.protocol_type, req.protocols):
            fut.set_result(JoinResult(E.INCONSISTENT_GROUP_PROTOCOL, member_id=member_id))
            return False
        if member_id in group.pending_join_members:
            return self._add_member_and_rebalance(req, group, member_id, fut)
        err = self._validate_existing_member(group, member_id, req.group_instance_id)
        if err:
            fut.set_result(JoinResult(err, member_id=member_id))
            return False
        member = group.members[member_id]
        if group.is_in(S.PREPARING_REBALANCE):
            return self._update_member_then_rebalance(req, group, member, fut)
        if group.is_in(S.COMPLETING_REBALANCE):
            if member.matches(req.protocols):
                # Same metadata: it probably missed the JoinGroup answer; give it the current generation.
                fut.set_result(self._join_result(group, member, with_members=group.is_leader(member_id)))
                return False
            return self._update_member_then_rebalance(req, group, member, fut)
        if group.is_in(S.STABLE):
            if group.is_leader(member_id) or not member.matches(req.protocols):
                # The leader's JoinGroup always rebalances (it may have seen topic metadata change).
                return self._update_member_then_rebalance(req, group, member, fut)
            fut.set_result(self._join_result(group, member, with_members=False))
            return False
        # Empty with members cannot happen; let the member start over.
        fut.set_result(JoinResult(E.UNKNOWN_MEMBER_ID, member_id=member_id))
        return False

    def _join_result(self, group: ClassicGroup, member: Member, with_members: bool,
                     skip_assignment: bool = False, leader: str | None = None) -> JoinResult:
        return JoinResult(
            0, group.generation_id, group.protocol_type, group.protocol_name,
            group.leader_id or "" if leader is None else leader, skip_assignment, member.member_id,
            self._member_list(group) if with_members else [])

    @staticmethod
    def _member_list(group: ClassicGroup) -> list[tuple[str, str | None, bytes]]:
        return [(m.member_id, m.group_instance_id, m.metadata(group.protocol_name)) for m in group.members.values()]

    @staticmethod
    def _validate_existing_member(group: ClassicGroup, member_id: str, instance_id: str | None) -> int:
        if instance_id is None:
            return 0 if member_id in group.members else E.UNKNOWN_MEMBER_ID
        existing = group.static_member_id(instance_id)
        if existing is None:
            return E.UNKNOWN_MEMBER_ID
        if existing != member_id:
            log.info("group %s: member id %s of static member %s is fenced by %s", group.group_id, member_id,
                     instance_id, existing)
            return E.FENCED_INSTANCE_ID
        return 0

    def _add_member_and_rebalance(self, req: JoinRequest, group: ClassicGroup, member_id: str,
                                  fut: asyncio.Future[JoinResult]) -> bool:
        member = Member(member_id, req.group_instance_id, req.client_id, req.client_host,
                        req.rebalance_timeout_ms, req.session_timeout_ms, req.protocol_type, req.protocols,
                        is_new=True)
        if group.is_in(S.PREPARING_REBALANCE) and group.previous_state == S.EMPTY:
            group.new_member_added = True  # the initial rebalance may wait a little longer
        group.add(member, fut)
        # A new member cannot heartbeat yet; drop it if its join stays parked for too long.
        self._reschedule_heartbeat(group, member, NEW_MEMBER_JOIN_TIMEOUT_MS)
        return self._maybe_prepare_rebalance_or_complete_join(group, f"adding new member {member_id}")

    def _update_member_then_rebalance(self, req: JoinRequest, group: ClassicGroup, member: Member,
                                      fut: asyncio.Future[JoinResult]) -> bool:
        group.update_member(member, req.protocols, req.rebalance_timeout_ms, req.session_timeout_ms, fut,
                            superseded=JoinResult(E.REBALANCE_IN_PROGRESS, member_id=member.member_id))
        return self._maybe_prepare_rebalance_or_complete_join(
            group, f"member {member.member_id} is joining group during {group.state.value}")

    def _update_static_member(self, req: JoinRequest, group: ClassicGroup, old_member_id: str,
                              new_member_id: str, fut: asyncio.Future[JoinResult]) -> bool:
        assert req.group_instance_id is not None
        instance_id = req.group_instance_id
        current_leader = group.leader_id
        self._cancel(("hb", group.group_id, old_member_id))
        member = group.replace_static_member(
            instance_id, old_member_id, new_member_id,
            JoinResult(E.FENCED_INSTANCE_ID, member_id=old_member_id), SyncResult(E.FENCED_INSTANCE_ID))
        self._reschedule_heartbeat(group, member)
        old = (member.protocols, member.rebalance_timeout_ms, member.session_timeout_ms)
        group.update_member(member, req.protocols, req.rebalance_timeout_ms, req.session_timeout_ms, fut)
        if group.is_in(S.STABLE):
            if (group.protocol_name or "") == group.select_protocol():
                # KIP-345: the selected protocol does not change, so persist the new member id and hand the
                # member its old assignment without a rebalance of the others.
                w = self._write(group.group_id, [self._group_record(
                    group, {m.member_id: m.assignment for m in group.members.values()})])

                def done(f: asyncio.Future[Any]) -> None:
                    if f.cancelled() or f.exception() is not None:
                        error = append_error(f.exception()) if not f.cancelled() else E.NOT_COORDINATOR
                        log.warning("group %s: persisting static member %s failed: %r", group.group_id,
                                    instance_id, None if f.cancelled() else f.exception())
                        if group.members.get(new_member_id) is member:
                            group.update_member(member, old[0], old[1], old[2], None)
                            self._cancel(("hb", group.group_id, new_member_id))
                            restored = group.replace_static_member(instance_id, new_member_id, old_member_id,
                                                                   None, None)
                            self._reschedule_heartbeat(group, restored)
                        if not fut.done():
                            fut.set_result(JoinResult(
                                error, group.generation_id, group.protocol_type, group.protocol_name,
                                current_leader or "", False, UNKNOWN_MEMBER_ID))
                        return
                    if group.members.get(new_member_id) is not member:
                        return
                    if req.api_version >= 9:
                        is_leader = group.is_leader(new_member_id)
                        group.complete_join(member, self._join_result(
                            group, member, with_members=is_leader, skip_assignment=is_leader))
                    else:
                        group.complete_join(member, self._join_result(
                            group, member, with_members=False, leader=current_leader or ""))

                w.add_done_callback(done)
                return True
            return self._maybe_prepare_rebalance_or_complete_join(
                group, f"static member {instance_id} joined with a change of protocol")
        if group.is_in(S.COMPLETING_REBALANCE):
            # The leader may already have computed assignments for the old member id: rebalance again.
            return self._prepare_rebalance(group, f"updating metadata for static member {instance_id}")
        if group.is_in(S.EMPTY, S.DEAD):
            raise RuntimeError(f"group {group.group_id} has static member {instance_id} in state {group.state}")
        return False  # PreparingRebalance: the member is answered when the join phase completes

    # ------------------------------------------------------------------ rebalance
    def _maybe_prepare_rebalance_or_complete_join(self, group: ClassicGroup, reason: str) -> bool:
        if group.can_rebalance():
            return self._prepare_rebalance(group, reason)
        return self._maybe_complete_join_phase(group)

    def _maybe_complete_join_phase(self, group: ClassicGroup) -> bool:
        if (group.is_in(S.PREPARING_REBALANCE) and group.previous_state != S.EMPTY
                and group.has_all_members_joined()):
            return self._complete_join(group)
        return False

    def _prepare_rebalance(self, group: ClassicGroup, reason: str) -> bool:
        if group.is_in(S.COMPLETING_REBALANCE):
            # Members waiting in SyncGroup rejoin.
            self._reset_and_propagate_assignment(group, E.REBALANCE_IN_PROGRESS)
        self._cancel(("sync", group.group_id))
        group.pending_sync_members.clear()
        initial = group.is_in(S.EMPTY)
        if initial:
            # A new group: give the other members a moment to join before the first generation.
            delay = self.config.groupInitialRebalanceDelayMs
            remaining = max(group.rebalance_timeout_ms() - delay, 0)
            self._schedule(("join", group.group_id), delay, self._try_complete_initial_rebalance,
                           group.group_id, delay, remaining)
        group.transition_to(S.PREPARING_REBALANCE, self.now_ms())
        log.info("group %s: preparing to rebalance (generation %d): %s", group.group_id, group.generation_id,
                 reason)
        if initial:
            return False
        return self._maybe_complete_join_else_schedule(group)

    def _maybe_complete_join_else_schedule(self, group: ClassicGroup) -> bool:
        if group.has_all_members_joined():
            return self._complete_join(group)
        self._schedule(("join", group.group_id), group.rebalance_timeout_ms(), self._complete_join_by_id,
                       group.group_id)
        return False

    def _try_complete_initial_rebalance(self, group_id: str, delay_ms: int, remaining_ms: int) -> None:
        group = self.groups.get(group_id)
        if group is None or not group.is_in(S.PREPARING_REBALANCE):
            return
        if group.new_member_added and remaining_ms != 0:
            group.new_member_added = False
            new_delay = min(self.config.groupInitialRebalanceDelayMs, remaining_ms)
            new_remaining = max(remaining_ms - delay_ms, 0)
            self._schedule(("join", group_id), new_delay, self._try_complete_initial_rebalance, group_id,
                           new_delay, new_remaining)
            return
        self._complete_join(group)

    def _complete_join_by_id(self, group_id: str) -> None:
        group = self.groups.get(group_id)
        if group is not None and group.is_in(S.PREPARING_REBALANCE):
            self._complete_join(group)

    def _complete_join(self, group: ClassicGroup) -> bool:
        """End the join phase: drop dynamic members that did not rejoin, start the next generation and
        answer every parked JoinGroup (the leader gets the member list). Returns True when it wrote."""
        gid = group.group_id
        self._cancel(("join", gid))
        for m in [m for m in group.not_yet_rejoined() if not m.is_static]:
            group.remove(m.member_id)
            self._cancel(("hb", gid, m.member_id))
            self._answer_removed(m)
        if group.is_in(S.DEAD):
            return False
        if not group.maybe_elect_new_joined_leader() and group.members:
            # Only static members that did not rejoin are left: wait until their sessions expire.
            log.info("group %s could not complete the rebalance: no member rejoined", gid)
            self._schedule(("join", gid), group.rebalance_timeout_ms(), self._complete_join_by_id, gid)
            return False
        group.init_next_generation(self.now_ms())
        if group.is_in(S.EMPTY):
            log.info("group %s with generation %d is now empty", gid, group.generation_id)
            self._write_logged(gid, [self._group_record(group, {})], "empty group metadata")
            return True
        log.info("group %s: stabilized generation %d with %d members (protocol %s)", gid, group.generation_id,
                 len(group.members), group.protocol_name)
        for m in list(group.members.values()):
            group.complete_join(m, self._join_result(group, m, with_members=group.is_leader(m.member_id)))
            self._reschedule_heartbeat(group, m)
            m.is_new = False
            group.pending_sync_members.add(m.member_id)
        self._schedule(("sync", gid), group.rebalance_timeout_ms(), self._expire_pending_sync, gid,
                       group.generation_id)
        return False

    def _answer_removed(self, member: Member) -> None:
        """A member removed while parked gets UNKNOWN_MEMBER_ID, so a live client joins again."""
        if member.join_future is not None and not member.join_future.done():
            member.join_future.set_result(JoinResult(E.UNKNOWN_MEMBER_ID, member_id=UNKNOWN_MEMBER_ID))
        member.join_future = None
        if member.sync_future is not None and not member.sync_future.done():
            member.sync_future.set_result(SyncResult(E.UNKNOWN_MEMBER_ID))
        member.sync_future = None

    def _expire_pending_sync(self, group_id: str, generation: int) -> None:
        group = self.groups.get(group_id)
        if group is None or generation != group.generation_id:
            return
        if not group.is_in(S.COMPLETING_REBALANCE, S.STABLE) or not group.pending_sync_members:
            return
        pending = list(group.pending_sync_members)
        for mid in pending:
            m = group.remove(mid)
            self._cancel(("hb", group_id, mid))
            if m is not None:
                self._answer_removed(m)
        self._prepare_rebalance(group, f"removing {pending} on pending sync request expiration")

    def _expire_heartbeat(self, group_id: str, member_id: str) -> None:
        group = self.groups.get(group_id)
        if group is None or group.is_in(S.DEAD):
            return
        if member_id in group.pending_join_members:
            log.info("group %s: pending member %s removed after its session timeout", group_id, member_id)
            group.remove(member_id)
            if group.is_in(S.PREPARING_REBALANCE) and group.has_all_members_joined():
                self._complete_join(group)
            return
        member = group.members.get(member_id)
        if member is None or member.has_satisfied_heartbeat():
            return
        log.info("group %s: member %s failed (no heartbeat within %d ms), removing it", group_id, member_id,
                 member.session_timeout_ms)
        self._remove_member_and_update(group, member, f"removing member {member_id} on heartbeat expiration")

    def _remove_member_and_update(self, group: ClassicGroup, member: Member, reason: str) -> None:
        group.complete_join(member, JoinResult(E.UNKNOWN_MEMBER_ID, member_id=UNKNOWN_MEMBER_ID))
        group.remove(member.member_id)
        self._answer_removed(member)
        if group.is_in(S.STABLE, S.COMPLETING_REBALANCE):
            self._maybe_prepare_rebalance_or_complete_join(group, reason)
        elif group.is_in(S.PREPARING_REBALANCE) and group.has_all_members_joined():
            self._complete_join(group)

    # ================================================================== SyncGroup
    async def sync_group(self, group_id: str, generation_id: int, member_id: str, instance_id: str | None,
                         protocol_type: str | None, protocol_name: str | None,
                         assignments: list[tuple[str, bytes]]) -> SyncResult:
        if not group_id:
            return SyncResult(E.INVALID_GROUP_ID)
        err = self.partition_error(group_id)
        if err == E.COORDINATOR_LOAD_IN_PROGRESS:
            # The state of an active rebalance is gone: have the member rejoin (older clients do not
            # expect COORDINATOR_LOAD_IN_PROGRESS here; Kafka answers the same).
            return SyncResult(E.REBALANCE_IN_PROGRESS)
        if err:
            return SyncResult(err)
        group = self.groups.get(group_id)
        if group is None:
            return SyncResult(E.UNKNOWN_MEMBER_ID)
        if group.is_in(S.DEAD):
            return SyncResult(E.COORDINATOR_NOT_AVAILABLE)
        err = self._validate_existing_member(group, member_id, instance_id)
        if err:
            return SyncResult(err)
        if generation_id != group.generation_id:
            return SyncResult(E.ILLEGAL_GENERATION)
        if _inconsistent(protocol_type, group.protocol_type) or _inconsistent(protocol_name, group.protocol_name):
            return SyncResult(E.INCONSISTENT_GROUP_PROTOCOL)
        if group.is_in(S.PREPARING_REBALANCE):
            return SyncResult(E.REBALANCE_IN_PROGRESS)
        member = group.members[member_id]
        if group.is_in(S.STABLE):
            self._remove_pending_sync_member(group, member_id)
            return SyncResult(0, group.protocol_type, group.protocol_name, member.assignment)
        # CompletingRebalance: park until the leader's assignment is durable.
        fut: asyncio.Future[SyncResult] = self.loop.create_future()
        member.sync_future = fut
        self._remove_pending_sync_member(group, member_id)
        if group.is_leader(member_id):
            self._store_assignment(group, generation_id, member_id, assignments)
        result = await fut
        log.debug("group %s: SyncGroup of %s (generation %d) answered %s", group_id, member_id, generation_id,
                  ErrorCode(result.error).name)
        return result

    def _remove_pending_sync_member(self, group: ClassicGroup, member_id: str) -> None:
        group.pending_sync_members.discard(member_id)
        if not group.pending_sync_members:
            self._cancel(("sync", group.group_id))

    def _store_assignment(self, group: ClassicGroup, generation_id: int, leader_id: str,
                          assignments: list[tuple[str, bytes]]) -> None:
        assignment = {mid: data for mid, data in assignments}
        missing = [mid for mid in group.members if mid not in assignment]
        for mid in missing:
            assignment[mid] = EMPTY_ASSIGNMENT
        if missing:
            log.warning("group %s: the leader's assignment misses members %s; they get an empty one",
                        group.group_id, missing)
        log.info("group %s: assignment received from leader %s for generation %d (%d members)", group.group_id,
                 leader_id, generation_id, len(group.members))
        w = self._write(group.group_id, [self._group_record(group, assignment)])

        def done(f: asyncio.Future[Any]) -> None:
            # Another member may have joined meanwhile: only act on the same generation, still completing.
            if not (group.is_in(S.COMPLETING_REBALANCE) and group.generation_id == generation_id):
                return
            if f.cancelled() or f.exception() is not None:
                error = E.NOT_COORDINATOR if f.cancelled() else append_error(f.exception())
                log.warning("group %s: storing the assignment of generation %d failed: %r", group.group_id,
                            generation_id, None if f.cancelled() else f.exception())
                self._reset_and_propagate_assignment(group, error)
                self._maybe_prepare_rebalance_or_complete_join(group, f"error {error} storing the assignment")
                return
            for m in group.members.values():
                m.assignment = assignment.get(m.member_id, EMPTY_ASSIGNMENT)
            self._propagate_assignment(group, 0)
            group.transition_to(S.STABLE, self.now_ms())

        w.add_done_callback(done)

    def _reset_and_propagate_assignment(self, group: ClassicGroup, error: int) -> None:
        for m in group.members.values():
            m.assignment = EMPTY_ASSIGNMENT
        self._propagate_assignment(group, error)

    def _propagate_assignment(self, group: ClassicGroup, error: int) -> None:
        ptype = group.protocol_type if error == 0 else None
        pname = group.protocol_name if error == 0 else None
        for m in group.members.values():
            if group.complete_sync(m, SyncResult(error, ptype, pname, m.assignment)):
                # Sessions restart once members have their assignment.
                self._reschedule_heartbeat(group, m)

    # ================================================================== Heartbeat
    def heartbeat(self, group_id: str, generation_id: int, member_id: str, instance_id: str | None) -> int:
        if not group_id:
            return E.INVALID_GROUP_ID
        err = self.partition_error(group_id)
        if err == E.COORDINATOR_LOAD_IN_PROGRESS:
            return 0  # the group is still loading: Kafka answers blindly
        if err:
            return err
        group = self.groups.get(group_id)
        if group is None:
            return E.UNKNOWN_MEMBER_ID
        if group.is_in(S.DEAD):
            return E.COORDINATOR_NOT_AVAILABLE
        err = self._validate_existing_member(group, member_id, instance_id)
        if err:
            return err
        if generation_id != group.generation_id:
            return E.ILLEGAL_GENERATION
        if group.is_in(S.EMPTY):
            return E.UNKNOWN_MEMBER_ID
        self._reschedule_heartbeat(group, group.members[member_id])
        if group.is_in(S.PREPARING_REBALANCE):
            return E.REBALANCE_IN_PROGRESS
        return 0

    # ================================================================== LeaveGroup
    def leave_group(self, group_id: str, members: list[tuple[str, str | None, str | None]]
                    ) -> tuple[int, list[tuple[str, str | None, int]]]:
        """members: (member id, group instance id, reason). Returns (top-level error, per-member errors);
        for a group that does not exist every member is UNKNOWN_MEMBER_ID (Kafka 4.x)."""
        if not group_id:
            return E.INVALID_GROUP_ID, []
        err = self.partition_error(group_id)
        if err:
            return err, []
        group = self.groups.get(group_id)
        if group is None:
            return 0, [(mid, iid, E.UNKNOWN_MEMBER_ID) for mid, iid, _ in members]
        if group.is_in(S.DEAD):
            return E.COORDINATOR_NOT_AVAILABLE, []
        out: list[tuple[str, str | None, int]] = []
        left = []
        for member_id, instance_id, reason in members:
            if member_id == UNKNOWN_MEMBER_ID:
                # Administrative removal of a static member by its group instance id.
                existing = group.static_member_id(instance_id)
                if existing is not None:
                    self._remove_current_member(group, existing, reason)
                    out.append((member_id, instance_id, 0))
                    left.append(existing)
                else:
                    out.append((member_id, instance_id, E.UNKNOWN_MEMBER_ID))
            elif member_id in group.pending_join_members:
                group.remove(member_id)
                self._cancel(("hb", group_id, member_id))
                out.append((member_id, instance_id, 0))
                left.append(member_id)
            else:
                e = 0
                if instance_id is not None:
                    existing = group.static_member_id(instance_id)
                    if existing is None:
                        e = E.UNKNOWN_MEMBER_ID
                    elif existing != member_id:
                        e = E.FENCED_INSTANCE_ID
                if not e and member_id not in group.members:
                    e = E.UNKNOWN_MEMBER_ID
                if not e:
                    self._remove_current_member(group, member_id, reason)
                    left.append(member_id)
                out.append((member_id, instance_id, e))
        if left:
            reason = f"explicit LeaveGroup request for ({', '.join(left)}) members"
            if group.is_in(S.STABLE, S.COMPLETING_REBALANCE):
                self._maybe_prepare_rebalance_or_complete_join(group, reason)
            elif group.is_in(S.PREPARING_REBALANCE):
                self._maybe_complete_join_phase(group)
        return 0, out

    def _remove_current_member(self, group: ClassicGroup, member_id: str, reason: str | None) -> None:
        member = group.members[member_id]
        self._cancel(("hb", group.group_id, member_id))
        log.info("group %s: member %s left (reason: %s)", group.group_id, member_id, reason or "not provided")
        group.complete_join(member, JoinResult(E.UNKNOWN_MEMBER_ID, member_id=UNKNOWN_MEMBER_ID))
        group.remove(member_id)
        self._answer_removed(member)

    # ================================================================== OffsetCommit
    async def commit_offsets(
        self, group_id: str, generation_id: int, member_id: str, instance_id: str | None, retention_ms: int,
        api_version: int, partitions: list[tuple[str, int, int, int, str | None]],
    ) -> dict[tuple[str, int], int]:
        """partitions: (topic as its Kafka name, partition, offset, leader epoch, metadata). Returns the
        error of each (topic, partition); 0 ones are durable when this returns."""
        keys = [(t, p) for t, p, *_ in partitions]
        err = self.partition_error(group_id)
        if err:
            return dict.fromkeys(keys, err)
        group = self.groups.get(group_id)
        created = False
        if group is None:
            if generation_id >= 0:
                # v9+ says the group is missing; older versions get ILLEGAL_GENERATION, as in Kafka.
                return dict.fromkeys(keys, E.GROUP_ID_NOT_FOUND if api_version >= 9 else E.ILLEGAL_GENERATION)
            # A commit outside group management (e.g. kafka-consumer-groups --reset-offsets --execute):
            # the group holds only offsets. It is not written; its offset records bring it back on load.
            group = ClassicGroup(group_id, state_timestamp=self.now_ms())
            self.groups[group_id] = group
            created = True
        err = self._validate_offset_commit(group, member_id, instance_id, generation_id)
        if err:
            return dict.fromkeys(keys, err)
        if group.is_in(S.STABLE, S.PREPARING_REBALANCE):
            self._reschedule_heartbeat(group, group.members[member_id])
        now = self.now_ms()
        expire = now + retention_ms if retention_ms >= 0 else -1
        result: dict[tuple[str, int], int] = {}
        records: list[tuple[bytes, bytes | None]] = []
        values: list[tuple[str, int, OffsetAndMetadata]] = []
        max_meta = self.config.offsetMetadataMaxSize
        for topic, partition, offset, epoch, metadata in partitions:
            if metadata is not None and len(metadata) > max_meta:
                result[(topic, partition)] = E.OFFSET_METADATA_TOO_LARGE
                continue
            result[(topic, partition)] = 0
            om = OffsetAndMetadata(offset, epoch, metadata or "", now, expire)
            values.append((topic, partition, om))
            records.append((rec.offset_commit_key(group_id, topic, partition), rec.encode_offset_commit_value(
                rec.OffsetCommitValue(om.offset, om.leader_epoch, om.metadata, om.commit_timestamp,
                                      om.expire_timestamp))))
        if not records:
            return result
        try:
            await self._write(group_id, records)
        except Exception as e:
            log.warning("group %s: writing %d offset commits failed: %r", group_id, len(records), e)
            error = append_error(e)
            if created and group_id not in self.offsets and self.groups.get(group_id) is group:
                del self.groups[group_id]
            for topic, partition, _ in values:
                result[(topic, partition)] = error
            return result
        offsets = self.offsets.setdefault(group_id, {})
        for topic, partition, om in values:
            offsets[(topic, partition)] = om
        if group_id not in self.groups:
            # The group was deleted while the commit was being written: the offsets bring it back, as
            # replaying the log would.
            self.groups[group_id] = ClassicGroup(group_id, state_timestamp=now)
        return result

    @staticmethod
    def _validate_offset_commit(group: ClassicGroup, member_id: str, instance_id: str | None,
                                generation_id: int) -> int:
        if group.is_in(S.DEAD):
            return E.COORDINATOR_NOT_AVAILABLE
        if generation_id < 0 and group.is_in(S.EMPTY):
            return 0  # admin client or a consumer outside group management, on an empty group
        if generation_id >= 0 or member_id or instance_id is not None:
            if instance_id is not None:
                existing = group.static_member_id(instance_id)
                if existing is None:
                    return E.UNKNOWN_MEMBER_ID
                if existing != member_id:
                    return E.FENCED_INSTANCE_ID
            if member_id not in group.members:
                return E.UNKNOWN_MEMBER_ID
            if generation_id != group.generation_id:
                return E.ILLEGAL_GENERATION
        elif not group.is_in(S.EMPTY):
            return E.UNKNOWN_MEMBER_ID
        if group.is_in(S.COMPLETING_REBALANCE):
            # A valid member that has its JoinGroup answer but not its assignment yet.
            return E.REBALANCE_IN_PROGRESS
        return 0

    # ================================================================== OffsetFetch
    def fetch_offsets(self, group_id: str, topics: list[tuple[str, list[int]]] | None
                      ) -> tuple[int, list[tuple[str, int, int, int, str, int]]]:
        """topics: (Kafka topic name, partitions), or None for every committed partition. Returns
        (group error, [(topic, partition, offset, leader epoch, metadata, error)]); -1 = no commit."""
        err = self.partition_error(group_id)
        if err:
            return err, []
        group = self.groups.get(group_id)
        offsets = self.offsets.get(group_id, {}) if group is not None and not group.is_in(S.DEAD) else {}
        out: list[tuple[str, int, int, int, str, int]] = []
        if topics is None:
            for (t, p), om in sorted(offsets.items()):
                out.append((t, p, om.offset, om.leader_epoch, om.metadata, 0))
            return 0, out
        for t, parts in topics:
            for p in parts:
                om = offsets.get((t, p))
                if om is None:
                    out.append((t, p, -1, -1, "", 0))
                else:
                    out.append((t, p, om.offset, om.leader_epoch, om.metadata, 0))
        return 0, out

    # ================================================================== OffsetDelete
    async def delete_offsets(self, group_id: str, topics: list[tuple[str, list[int]]]
                             ) -> tuple[int, dict[tuple[str, int], int]]:
        """Returns (group error, {(topic, partition): error}); partitions without a committed offset are
        left out of the result, as Kafka leaves them out of its response."""
        err = self.partition_error(group_id)
        if err:
            return err, {}
        group = self.groups.get(group_id)
        if group is None or group.is_in(S.DEAD):
            return E.GROUP_ID_NOT_FOUND, {}
        if group.is_in(S.STABLE, S.PREPARING_REBALANCE, S.COMPLETING_REBALANCE) and not group.uses_consumer_protocol():
            return E.NON_EMPTY_GROUP, {}
        offsets = self.offsets.get(group_id, {})
        result: dict[tuple[str, int], int] = {}
        tombstones: list[tuple[str, int]] = []
        for t, parts in topics:
            if group.is_subscribed_to(t):
                for p in parts:
                    result[(t, p)] = E.GROUP_SUBSCRIBED_TO_TOPIC
                continue
            for p in parts:
                if (t, p) in offsets:
                    result[(t, p)] = 0
                    tombstones.append((t, p))
        if tombstones:
            try:
                await self._write(group_id, [(rec.offset_commit_key(group_id, t, p), None) for t, p in tombstones])
            except Exception as e:
                log.warning("group %s: writing offset tombstones failed: %r", group_id, e)
                return append_error(e), {}
            for t, p in tombstones:
                self._remove_offset(group_id, t, p)
        return 0, result

    def _remove_offset(self, group_id: str, topic: str, partition: int) -> None:
        offs = self.offsets.get(group_id)
        if offs is not None:
            offs.pop((topic, partition), None)
            if not offs:
                del self.offsets[group_id]

    # ================================================================== DeleteGroups
    async def delete_groups(self, group_ids: list[str]) -> dict[str, int]:
        result: dict[str, int] = {}
        writes: list[tuple[str, asyncio.Future[Any], list[tuple[str, int]]]] = []
        for gid in group_ids:
            err = self.partition_error(gid)
            if err:
                result[gid] = err
                continue
            group = self.groups.get(gid)
            if group is None or group.is_in(S.DEAD):
                result[gid] = E.GROUP_ID_NOT_FOUND
                continue
            if group.is_in(S.STABLE, S.PREPARING_REBALANCE, S.COMPLETING_REBALANCE):
                result[gid] = E.NON_EMPTY_GROUP
                continue
            parts = list(self.offsets.get(gid, {}))
            records: list[tuple[bytes, bytes | None]] = [
                (rec.offset_commit_key(gid, t, p), None) for t, p in parts]
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
            for t, p in parts:
                self._remove_offset(gid, t, p)
            result[gid] = 0
        return {gid: result[gid] for gid in group_ids if gid in result}

    def _remove_group(self, group: ClassicGroup) -> None:
        gid = group.group_id
        for key in [k for k in self._timers if len(k) > 1 and k[1] == gid]:
            self._cancel(key)
        for m in list(group.members.values()):
            self._answer_removed(m)
        group.state = S.DEAD
        if self.groups.get(gid) is group:
            del self.groups[gid]

    # ================================================================== ListGroups / DescribeGroups
    def list_groups(self, states: Iterable[str] = (), types: Iterable[str] = ()) -> tuple[int, list[ListedGroup]]:
        if not self.available:
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
        return 0, out

    def describe_group(self, group_id: str) -> DescribedGroup:
        err = self.partition_error(group_id)
        if err:
            return DescribedGroup(group_id, err, "", "", "", [])
        group = self.groups.get(group_id)
        if group is None or group.is_in(S.DEAD):
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
    async def _expiration_loop(self) -> None:
        interval = self.config.offsetsRetentionCheckIntervalMs / 1000
        while True:
            await asyncio.sleep(interval)
            try:
                await self.expire_offsets()
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("offset expiration failed")

    async def expire_offsets(self) -> int:
        """Write tombstones for expired offsets and for groups left with nothing (Kafka's rules: offsets of
        an Empty group expire offsets.retention.minutes after it became Empty; a Stable consumer group's
        offsets of topics nobody subscribes to, that long after their commit; a simple group's, after
        their commit). Returns how many tombstones were written."""
        retention_ms = self.config.offsetsRetentionMinutes * 60_000
        now = self.now_ms()
        per_group: list[tuple[str, list[tuple[str, int]], bool]] = []
        for gid, group in list(self.groups.items()):
            if self.partition_of(gid) not in self._loaded or group.is_in(S.DEAD):
                continue
            offsets = self.offsets.get(gid, {})
            expired: list[tuple[str, int]] = []
            all_expired = True
            base = self._expiration_base(group)
            if base is None:
                all_expired = not offsets
            else:
                for (t, p), om in offsets.items():
                    if group.is_subscribed_to(t):
                        all_expired = False
                        continue
                    if om.expire_timestamp >= 0:
                        gone = now >= om.expire_timestamp
                    else:
                        gone = now - base(om) >= retention_ms
                    if gone:
                        expired.append((t, p))
                    else:
                        all_expired = False
            delete_group = all_expired and group.is_in(S.EMPTY)
            if expired or delete_group:
                per_group.append((gid, expired, delete_group))
        total = 0
        waits = []
        for gid, expired, delete_group in per_group:
            records: list[tuple[bytes, bytes | None]] = [(rec.offset_commit_key(gid, t, p), None) for t, p in expired]
            if delete_group:
                records.append((rec.group_metadata_key(gid), None))
                group = self.groups.get(gid)
                if group is not None:
                    self._remove_group(group)
            waits.append((gid, expired, self._write(gid, records)))
            total += len(records)
        for gid, expired, fut in waits:
            try:
                await fut
            except Exception as e:
                log.warning("group %s: writing expiration tombstones failed: %r", gid, e)
                continue
            for t, p in expired:
                self._remove_offset(gid, t, p)
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
        topic = self.topics.kafka_name(deleted.name)
        waits = []
        for gid, offs in list(self.offsets.items()):
            parts = [(t, p) for t, p in offs if t == topic]
            if not parts or self.partition_of(gid) not in self._loaded:
                continue
            waits.append((gid, parts, self._write(gid, [(rec.offset_commit_key(gid, t, p), None) for t, p in parts])))
        for gid, parts, fut in waits:
            try:
                await fut
            except Exception as e:
                log.warning("group %s: writing tombstones for deleted topic %s failed: %r", gid, topic, e)
                continue
            for t, p in parts:
                self._remove_offset(gid, t, p)


def _inconsistent(requested: str | None, current: str | None) -> bool:
    return requested is not None and current is not None and requested != current


__all__ = [
    "CONSUMER_PROTOCOL_TYPE",
    "CoordinatorError",
    "DescribedGroup",
    "GroupCoordinator",
    "JoinRequest",
    "JoinResult",
    "ListedGroup",
    "OFFSETS_TOPIC",
    "SyncResult",
]
