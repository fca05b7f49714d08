"""The share-group coordinator's async shell: share groups (groups.py), share-partition states (partition.py),
share sessions, the group configs of share groups, and the one timer that expires acquisition locks and
member sessions. The rules are in the sans-IO parts; this adds the clock, the timer and the waits of
long-polling ShareFetches (woken when records come back: released, timed out, or of a member gone).

One per Kafka protocol handler (kop/kafka/handler.py): alone, this broker is the group coordinator and the
leader of every partition, so membership and share-partition state live together. Share-partition state is
durable in __share_group_state (store.py: a snapshot after each change, written before acknowledgements
are answered). Membership is durable as Kafka keeps it, in __consumer_offsets (group_records.py: the records
that changed are written through the group coordinator's runtime before a heartbeat is answered, and the groups
restored from the records its load replayed); the group configs in the metadata store (Kafka: its metadata
log), one node per group under /kop/share-group-configs, read at start.
Records archived for a group with a dead-letter queue are written to it when the state is (dlq.py).

Cluster mode splits the roles as Kafka does (persister.py says why): membership is served by the broker owning
the group's __consumer_offsets partition (ShareGroupHeartbeat elsewhere answers NOT_COORDINATOR; a coordinator
that acquires the partition restores the group from its records at the first heartbeat, and one that loses it
forgets the group); share-partitions by the broker owning the topic partition, which reads a share-partition's
state from its share coordinator when it first serves it and writes it there after each change (persister.py);
and this broker's own __share_group_state partitions follow its bundles (`bundle_moved`). A share-partition
whose topic partition moves away is forgotten here: its acquired records are AVAILABLE again in the durable
state the next owner reads, acknowledged ones stay acknowledged.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
import urllib.parse
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from kop.aio import run_to_end
from kop.coordinator.consumer_group import Metadata
from kop.coordinator.share import group_records as grec
from kop.coordinator.share.dlq import COPY_RECORD, TOPIC_NAME, DeadLetterQueue
from kop.coordinator.share.groups import ShareGroups, ShareHeartbeat, ShareHeartbeatResult
from kop.coordinator.share.partition import DEFAULT_DELIVERY_LIMIT, DEFAULT_LOCK_MS, SharePartition
from kop.coordinator.share.persister import PersisterError, SharePersister
from kop.coordinator.share.records import ShareState
from kop.coordinator.share.store import ShareStateStore
from kop.protocol.errors import ErrorCode
from kop.storage.api import MetadataStore
from kop.topics.names import TopicName

if TYPE_CHECKING:
    from kop.coordinator.coordinator import GroupCoordinator  # it imports group_records

log = logging.getLogger(__name__)

#: a share coordinator's refusals of a leader's write that make its share-partition stale here (fenced by a
#: newer leader or an offset reset; INVALID_REQUEST: the state was deleted, Kafka's "uninitialized")
FENCED = frozenset({ErrorCode.FENCED_STATE_EPOCH, ErrorCode.FENCED_LEADER_EPOCH, ErrorCode.INVALID_REQUEST})

Key = tuple[str, bytes, int]  # (group id, topic id, partition)

#: The share group configs (Kafka's GroupConfig share.*) and their defaults.
GROUP_CONFIG_DEFAULTS: dict[str, str] = {
    "share.auto.offset.reset": "latest",
    "share.record.lock.duration.ms": str(DEFAULT_LOCK_MS),
    "share.delivery.count.limit": str(DEFAULT_DELIVERY_LIMIT),
    "share.isolation.level": "read_uncommitted",
    TOPIC_NAME: "",  # KIP-1191's dead-letter queue (share.version 2)
    COPY_RECORD: "false",
}
FINAL_EPOCH = -1
RETRY_WRITE_S = 1.0  # a state write that failed is tried again this long after (if nothing wrote it meanwhile)
CONFIGS_PATH = "/kop/share-group-configs"
#: the order Kafka tombstones a share group's records in: the members' first, the group epoch last
_TOMBSTONE_ORDER = (grec.CURRENT_ASSIGNMENT, grec.TARGET_MEMBER, grec.MEMBER_METADATA, grec.TARGET_METADATA,
                    grec.GROUP_METADATA)


@dataclass(slots=True)
class ShareSession:
    """A member's share session (KIP-932): the partitions it fetches, and the epoch its next request carries."""
    next_epoch: int = 1
    partitions: list[tuple[bytes, int]] = field(default_factory=list)
    connection: object = None  # the client connection that opened it: its close ends the session


class ShareCoordinator:
    def __init__(self, metadata: Callable[[], Metadata], session_timeout_ms: int, heartbeat_interval_ms: int,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.groups = ShareGroups(metadata, session_timeout_ms, heartbeat_interval_ms)
        self.partitions: dict[Key, SharePartition] = {}
        self.sessions: dict[tuple[str, str], ShareSession] = {}
        self.configs: dict[str, dict[str, str]] = {}
        self._clock = clock
        self._timer: asyncio.TimerHandle | None = None
        self._waiters: set[asyncio.Future[None]] = set()
        self.store: ShareStateStore | None = None  # durable state (__share_group_state), once the broker started
        self._dirty: set[Key] = set()  # share-partitions changed since their last snapshot
        self._deleted: set[Key] = set()  # states forgotten, their tombstones not written yet
        self._epochs: dict[Key, int] = {}  # snapshot epoch per share-partition
        self._fences: dict[Key, tuple[int, int]] = {}  # per share-partition: (state epoch, leader epoch) it writes at
        self._recheck: set[Key] = set()  # share-partitions of groups that had no session here since
        self._flushes: set[asyncio.Task[dict[Key, int]]] = set()
        self.dlq: DeadLetterQueue | None = None  # the dead-letter queue writer, once the broker started
        self.group_coordinator: GroupCoordinator | None = None  # where membership records go (__consumer_offsets)
        self.config_store: MetadataStore | None = None  # where group configs go
        self._written: dict[str, dict[bytes, bytes]] = {}  # per group: its records as last written
        self._dirty_groups: set[str] = set()  # groups whose membership changed since
        self._dirty_configs: set[str] = set()  # groups whose configs changed since
        self._restore: asyncio.Task[None] | None = None
        self.persister: SharePersister | None = None  # where states are read and written (cluster: RPCs)
        self._fetched: dict[Key, ShareState | None] = {}  # states read for share-partitions about to be made
        self._sent: dict[Key, int] = {}  # per share-partition: the snapshot epoch last handed to a write
        self._retry: asyncio.TimerHandle | None = None

    def now(self) -> int:
        return int(self._clock() * 1000)

    def heartbeat(self, req: ShareHeartbeat) -> ShareHeartbeatResult:
        """ShareGroupHeartbeat; a member that left has its acquired records released at once."""
        result = self.groups.heartbeat(req, self.now())
        self._dirty_groups.add(req.group_id)
        for gid, mid in self.groups.take_left():
            self.sessions.pop((gid, mid), None)
            self._release_member(gid, mid)
        self.arm()
        return result

    # ------------------------------------------------------------------ configs
    def config(self, group_id: str, name: str) -> str:
        return self.configs.get(group_id, {}).get(name, GROUP_CONFIG_DEFAULTS[name])

    def set_config(self, group_id: str, name: str, value: str | None) -> None:
        """Set (or, with None, delete) a group config; new locks and limits apply to the group's partitions."""
        values = self.configs.setdefault(group_id, {})
        if value is None:
            values.pop(name, None)
        else:
            values[name] = value
        self._dirty_configs.add(group_id)
        for (gid, _, _), sp in self.partitions.items():
            if gid == group_id:
                sp.lock_ms = int(self.config(group_id, "share.record.lock.duration.ms"))
                sp.delivery_limit = int(self.config(group_id, "share.delivery.count.limit"))
                sp.dlq = self._dlq_on(group_id)

    def _dlq_on(self, group_id: str) -> bool:
        """Whether the group's archived records go to a dead-letter queue (a DLQ topic named, share.version 2)."""
        return self.dlq is not None and self.dlq.enabled(self.config(group_id, TOPIC_NAME))

    # ------------------------------------------------------------------ share-partitions
    def share_partition(self, key: Key, log_start: int, high_watermark: int) -> SharePartition:
        """The share-partition, initialized on first use at share.auto.offset.reset: `latest` (Kafka's
        default) starts at the high watermark, `earliest` at the log start offset."""
        sp = self.partitions.get(key)
        if sp is None:
            gid = key[0]
            if key in self._fetched:  # read from the share coordinator (load_state)
                durable = self._fetched.pop(key)
            else:
                durable = self.store.states.get(key) if self.store is not None else None
            if durable is not None:
                self._fences[key] = (durable.state_epoch, durable.leader_epoch)
            if durable is not None and durable.start_offset < 0:  # initialized without an offset: ours to pick
                durable = None
            if durable is not None:  # state from before a restart, or an offset reset
                start = durable.start_offset
            else:
                start = log_start if self.config(gid, "share.auto.offset.reset") == "earliest" else high_watermark
                self._dirty.add(key)  # Kafka persists the initialized state (InitializeShareGroupState)
            sp = self.partitions[key] = SharePartition(
                start, lock_ms=int(self.config(gid, "share.record.lock.duration.ms")),
                delivery_limit=int(self.config(gid, "share.delivery.count.limit")))
            if durable is not None:
                sp.restore(durable.batches)
                self._epochs[key] = durable.snapshot_epoch
        sp.dlq = self._dlq_on(key[0])  # share.version may have changed since
        if sp.start_offset < log_start:  # retention or DeleteRecords removed records not yet delivered
            sp.reset_start(log_start)
            self._dirty.add(key)
        return sp

    @property
    def clustered(self) -> bool:
        return self.persister is not None and self.persister.clustered

    async def load_state(self, key: Key) -> int:
        """Before a share-partition is first made here, its leader takes it up at its share coordinator
        (wherever that is, this broker alone: persister.py `take_up`, initializing it on first use); 0, or the
        error to answer the partition with (retriable)."""
        if key in self._recheck and self.persister is not None:
            self._recheck.discard(key)
            try:
                now = await self.persister.summary(key)
            except PersisterError as e:
                return e.error
            stale = now.start_offset < 0 or now.state_epoch != self._fences.get(key, (0, 0))[0]
            if key in self.partitions and stale:
                self._forget(key)  # reset or deleted since the group was last served here: take it up again
        if key in self.partitions or self.persister is None:
            return 0
        if self.clustered:
            await self._reload_configs(key[0])
        try:
            got = await self.persister.take_up(key)
        except Exception as e:  # noqa: BLE001 - retriable for the client: the next ShareFetch reads again
            log.info("share-partition state %s not read: %s", key, e)
            return e.error if isinstance(e, PersisterError) else ErrorCode.COORDINATOR_NOT_AVAILABLE
        if key not in self.partitions:
            self._fetched[key] = got
        return 0

    async def _reload_configs(self, group_id: str) -> None:
        """Cluster mode: the group's configs as stored now (IncrementalAlterConfigs may have reached another
        broker); a share-partition takes them when it is made here."""
        store = self.config_store
        if store is None or group_id in self._dirty_configs:
            return
        try:
            got = await store.get(f"{CONFIGS_PATH}/{urllib.parse.quote(group_id, safe='')}")
        except Exception as e:  # noqa: BLE001 - the configs known here are used
            log.info("share group %s configs not read: %s", group_id, e)
            return
        if got is not None:
            self.configs[group_id] = json.loads(got[0])
        else:
            self.configs.pop(group_id, None)

    def bundle_moved(self, owned: bool, in_bundle: Callable[[TopicName, int], bool],
                     topic_of: Callable[[bytes], TopicName | None], group_served: Callable[[str], bool]) -> None:
        """Cluster mode: this broker acquired (`owned`) or released a bundle. Its __share_group_state partitions
        are loaded or unloaded; on release, the share-partitions of its topic partitions are forgotten (their
        state is durable; the next owner reads it) and so are the groups whose __consumer_offsets partition
        this broker no longer serves (restored from their records if it comes back)."""
        store = self.store
        topic = store.runtime.topic if store is not None else None
        if store is not None and topic is not None:
            for p in range(topic.partitions):
                if in_bundle(topic.name, p):
                    (store.runtime.load_partition if owned else store.runtime.unload_partition)(p)
        if owned:
            return
        for key in list(self.partitions):
            name = topic_of(key[1])
            if name is None or in_bundle(name, key[2]):
                self._forget(key)
        for gid in [g for g in self.groups.groups if not group_served(g)]:
            del self.groups.groups[gid]
            self._written.pop(gid, None)
            self._dirty_groups.discard(gid)
        self.wake()

    def _forget(self, key: Key) -> None:
        self.partitions.pop(key, None)
        self._epochs.pop(key, None)
        self._fences.pop(key, None)
        self._recheck.discard(key)
        self._sent.pop(key, None)
        self._fetched.pop(key, None)
        self._dirty.discard(key)

    def restore_group(self, group_id: str, records: dict[bytes, bytes]) -> None:
        """A share group this coordinator does not hold yet, restored from its __consumer_offsets records (cluster
        mode: the partition was acquired after start-up), its members' sessions starting now."""
        if group_id in self.groups.groups:
            return
        mine = {k: v for k, v in records.items() if grec.decode_key(k).group == group_id}
        if not mine:
            return
        deadline = self.now() + self.groups.session_timeout_ms
        group = grec.restore(mine, deadline).get(group_id)
        if group is not None:
            self.groups.groups[group_id] = group
            self._written[group_id] = dict(mine)
            self.arm()

    # ------------------------------------------------------------------ durability
    async def start(self, store: ShareStateStore, dlq: DeadLetterQueue | None = None,
                    group_coordinator: GroupCoordinator | None = None, config_store: MetadataStore | None = None,
                    persister: SharePersister | None = None) -> None:
        """At broker start: durable state from an earlier run is loaded (when its topic exists), the group
        configs read, and the groups restored once the group coordinator has replayed __consumer_offsets."""
        self.store = store
        self.persister = persister
        self.dlq = dlq
        self.group_coordinator = group_coordinator
        self.config_store = config_store
        if config_store is not None:
            for child in await config_store.children(CONFIGS_PATH):
                got = await config_store.get(f"{CONFIGS_PATH}/{child}")
                if got is not None:
                    self.configs.setdefault(urllib.parse.unquote(child), json.loads(got[0]))
        if group_coordinator is not None:
            self._restore = asyncio.ensure_future(self._restore_groups(group_coordinator))
        await store.start_if_present()

    async def _restore_groups(self, coordinator: GroupCoordinator) -> None:
        """The share groups of the replayed __consumer_offsets records, their sessions starting now."""
        await coordinator.wait_loaded()
        deadline = self.now() + self.groups.session_timeout_ms
        for gid, group in grec.restore(coordinator.share_records, deadline).items():
            if gid not in self.groups.groups:
                self.groups.groups[gid] = group
        for key, value in coordinator.share_records.items():
            self._written.setdefault(grec.decode_key(key).group, {})[key] = value
        self.arm()

    async def groups_ready(self) -> None:
        """The share groups restored from __consumer_offsets (what membership requests wait for)."""
        if self._restore is not None:
            await asyncio.shield(self._restore)

    async def ready(self) -> None:
        """The durable state loaded (and its topic created on first use), the groups restored."""
        await self.groups_ready()
        if self.store is not None:
            await self.store.ready()

    def changed(self, keys: Iterable[Key]) -> None:
        self._dirty.update(keys)

    async def flush(self) -> dict[Key, int]:
        """Write a snapshot of every changed share-partition (a tombstone for a forgotten one), durable when
        this returns - acknowledgements are answered after their state is written, as in Kafka - and the
        records archived for a dead-letter queue to it. Answers the share-partitions whose state could not be
        written, with the error: they stay pending and are written again (the next flush, or RETRY_WRITE_S on).
        Runs to its end when the request awaiting it is cancelled (its connection closed; kop.aio.run_to_end):
        the changes it took would be written by no later flush."""
        return await run_to_end(self._flush())

    async def _flush(self) -> dict[Key, int]:
        await self._write_dead()
        await self._write_groups()
        await self._write_configs()
        if self.store is None:
            self._dirty.clear()
            self._deleted.clear()
            return {}
        dirty, self._dirty = self._dirty, set()
        deleted, self._deleted = self._deleted, set()
        now = int(time.time() * 1000)
        writes: list[tuple[Key, ShareState | None]] = [(k, None) for k in sorted(deleted) if k not in self.partitions]
        for key in sorted(dirty):
            sp = self.partitions.get(key)
            if sp is not None:
                epoch = self._epochs[key] = self._epochs.get(key, -1) + 1
                start, batches = sp.snapshot()
                writes.append((key, ShareState(start, tuple(batches), epoch, *self._fences.get(key, (0, 0)))))
        failed: dict[Key, int] = {}
        for key, state in writes:
            if state is not None:
                if self._sent.get(key, -1) > state.snapshot_epoch:
                    continue  # a later snapshot of it was written meanwhile (concurrent flushes)
                self._sent[key] = state.snapshot_epoch
            try:
                if self.persister is None:
                    await self.store.write(key, state, now)
                elif state is None:
                    await self.persister.delete(key)
                else:
                    await self.persister.write(key, state)
            except Exception as e:  # noqa: BLE001 - the state in memory stays right; it is written again whole
                # e.g. cluster mode, where the state's __share_group_state partition is moving to another broker
                log.warning("share-partition state %s not written: %s", key, e)
                if state is not None and isinstance(e, PersisterError) and e.error in FENCED:
                    self._forget(key)  # another leader took it up, or its offsets were reset or deleted: stale here
                    failed[key] = e.error
                elif state is not None and key in self.partitions:
                    self._dirty.add(key)
                    failed[key] = e.error if isinstance(e, PersisterError) else ErrorCode.UNKNOWN_SERVER_ERROR
        if failed and self._retry is None:
            self._retry = asyncio.get_running_loop().call_later(RETRY_WRITE_S, self._retry_writes)
        return failed

    def _retry_writes(self) -> None:
        self._retry = None
        self.flush_soon()

    async def _write_dead(self) -> None:
        for (gid, tid, p), sp in list(self.partitions.items()):
            runs = sp.take_dead()
            if runs and self.dlq is not None:
                try:
                    await self.dlq.write(gid, tid, p, runs, self.config(gid, TOPIC_NAME),
                                         self.config(gid, COPY_RECORD).lower() == "true")
                except Exception as e:  # noqa: BLE001 - the records stay archived, as Kafka's after a failed write
                    log.warning("share group DLQ: records of %s not written: %s", gid, e)

    def _group_changes(self, group_id: str) -> list[tuple[bytes, bytes | None]]:
        """What to write for a group: its records that changed, then tombstones of those gone (Kafka's order)."""
        group = self.groups.groups.get(group_id)
        now = grec.records_of(group) if group is not None and (group.members or group.group_epoch) else {}
        old = self._written.get(group_id, {})
        out: list[tuple[bytes, bytes | None]] = [(k, v) for k, v in now.items() if old.get(k) != v]
        gone = sorted((k for k in old if k not in now),
                      key=lambda k: _TOMBSTONE_ORDER.index(t) if (t := grec.decode_key(k).type) in _TOMBSTONE_ORDER
                      else -1)
        return out + [(k, None) for k in gone]

    async def _write_groups(self) -> None:
        """The membership records that changed, to __consumer_offsets (the group coordinator's partition of the
        group); a failed write is logged and retried whole with the next change."""
        coordinator = self.group_coordinator
        dirty, self._dirty_groups = self._dirty_groups, set()
        if coordinator is None:
            return
        for gid in sorted(dirty):
            records = self._group_changes(gid)
            if not records:
                continue
            try:
                await coordinator.runtime.write(coordinator.partition_of(gid), records, int(time.time() * 1000))
            except Exception as e:  # noqa: BLE001 - the groups in memory stay right; the next change retries
                log.warning("share group %s records not written: %s", gid, e)
                self._dirty_groups.add(gid)
                continue
            written = self._written.setdefault(gid, {})
            for key, value in records:
                if value is None:
                    written.pop(key, None)
                else:
                    written[key] = value
            if not written:
                del self._written[gid]

    async def _write_configs(self) -> None:
        """Changed group configs to the metadata store (a group without any: its node removed)."""
        store = self.config_store
        dirty, self._dirty_configs = self._dirty_configs, set()
        if store is None:
            return
        for gid in sorted(dirty):
            path = f"{CONFIGS_PATH}/{urllib.parse.quote(gid, safe='')}"
            values = self.configs.get(gid)
            try:
                if values:
                    await store.put(path, json.dumps(values, sort_keys=True).encode())
                elif await store.exists(path):
                    await store.delete(path)
            except Exception as e:  # noqa: BLE001 - kept in memory; the next change writes it again
                log.warning("share group %s configs not written: %s", gid, e)
                self._dirty_configs.add(gid)

    def flush_soon(self) -> None:
        """flush() in the background (timer-driven changes: lock time-outs, members gone)."""
        if self.store is None and self.dlq is None and self.group_coordinator is None:
            return
        if not (self._dirty or self._deleted or self._dirty_groups or self._dirty_configs
                or any(sp.dead for sp in self.partitions.values())):
            return
        task = asyncio.ensure_future(self.flush())
        self._flushes.add(task)
        task.add_done_callback(self._flush_done)

    def _flush_done(self, task: asyncio.Task[dict[Key, int]]) -> None:
        self._flushes.discard(task)
        if not task.cancelled() and task.exception() is not None:
            log.warning("share-group state write failed: %s", task.exception())

    def group_partitions(self, group_id: str) -> dict[tuple[bytes, int], SharePartition]:
        """The share-partitions a group has state for, by (topic id, partition)."""
        return {(tid, p): sp for (gid, tid, p), sp in self.partitions.items() if gid == group_id}

    def has_members(self, group_id: str) -> bool:
        group = self.groups.groups.get(group_id)
        return group is not None and bool(group.members)

    def knows(self, group_id: str) -> bool:
        """Whether this is a share group (it had members) or has share-partition state here (led, or held by
        this broker's share coordinator partitions)."""
        return (group_id in self.groups.groups or any(k[0] == group_id for k in self.partitions)
                or (self.store is not None and any(k[0] == group_id for k in self.store.states)))

    def delete_group(self, group_id: str) -> int:
        """DeleteGroups of a share group: NON_EMPTY_GROUP while it has members, else forgotten (0)."""
        if self.has_members(group_id):
            return ErrorCode.NON_EMPTY_GROUP
        self.delete_state(group_id)
        return 0

    async def alter_start(self, key: Key, offset: int) -> None:
        """AlterShareGroupOffsets (the group has no members): the share-partition starts again at `offset`,
        every record from there on AVAILABLE and never delivered - InitializeShareGroupState at its share
        coordinator with a state epoch above the stored one, so a leader still holding the old window is
        fenced (FENCED_STATE_EPOCH) and takes the new state up. Kafka initializes at the group epoch and relies
        on its leaders dropping an empty group's share-partitions; the raised epoch fences them whichever way.
        Raises PersisterError."""
        assert self.persister is not None
        current = await self.persister.summary(key)
        await self.persister.initialize(key, current.state_epoch + 1, offset)
        self._forget(key)  # taken up again from the new state at the next fetch

    def altered(self, group_id: str, topic_name: str) -> None:
        """AlterShareGroupOffsets reset a topic's share-partitions of the group (groups.py `state_topics`)."""
        group = self.groups.groups.get(group_id)
        if group is not None:
            group.state_topics.add(topic_name)

    def state_keys(self, group_id: str, topic_id: bytes, partitions: int) -> list[Key]:
        """The group's share-partitions of a topic that may have state: alone, those this broker's store and
        leaders hold (all of them, it is the share coordinator of every one); in cluster mode every partition
        of the topic, whose states other brokers may hold (the group coordinator does not record which)."""
        if self.clustered:
            return [(group_id, topic_id, p) for p in range(partitions)]
        held = set(self.store.states) if self.store is not None else set()
        return sorted(k for k in held | set(self.partitions) if k[0] == group_id and k[1] == topic_id)

    async def delete_states(self, keys: Iterable[Key]) -> None:
        """DeleteShareGroupOffsets: these share-partitions' states are deleted at their share coordinators (a
        leader still holding one is refused its next write and forgets it). Raises PersisterError."""
        for key in keys:
            self._forget(key)
            self._deleted.discard(key)
            if self.persister is not None:
                await self.persister.delete(key)
            elif self.store is not None:
                await self.store.write(key, None, int(time.time() * 1000))

    def delete_state(self, group_id: str, topic_ids: set[bytes] | None = None) -> None:
        """Forget a group's share-partition states (of these topics; None: all, and the group itself)."""
        durable = self.store.states if self.store is not None else {}
        for key in [k for k in (*self.partitions, *durable)
                    if k[0] == group_id and (topic_ids is None or k[1] in topic_ids)]:
            self.partitions.pop(key, None)
            self._deleted.add(key)
        if topic_ids is None:
            self.groups.groups.pop(group_id, None)
            self.configs.pop(group_id, None)
            self._dirty_groups.add(group_id)
            self._dirty_configs.add(group_id)

    # ------------------------------------------------------------------ sessions
    def open_session(self, group_id: str, member_id: str, epoch: int, connection: object = None
                     ) -> tuple[int, ShareSession | None]:
        """The session a ShareFetch/ShareAcknowledge at `epoch` works in: epoch 0 opens a new one (on
        `connection`), -1 uses the current one for its last request, n > 0 must be the epoch it expects next."""
        key = (group_id, member_id)
        if epoch == 0:
            self.sessions[key] = ShareSession(connection=connection)
            return 0, self.sessions[key]
        session = self.sessions.get(key)
        if session is None:
            return ErrorCode.SHARE_SESSION_NOT_FOUND, None
        if epoch != FINAL_EPOCH:
            if epoch != session.next_epoch:
                return ErrorCode.INVALID_SHARE_SESSION_EPOCH, None
            session.next_epoch = epoch + 1 if epoch < 2**31 - 1 else 1
        return 0, session

    def close_session(self, group_id: str, member_id: str) -> None:
        """The member's last request (epoch -1) is served: what it still holds goes back to the others. The
        group's last session here: its share-partitions are checked at their share coordinator before they
        are served again (`load_state`), since an empty group's offsets may be reset or deleted meanwhile."""
        self.sessions.pop((group_id, member_id), None)
        self._release_member(group_id, member_id)
        if self.clustered and not any(g == group_id for g, _ in self.sessions):
            self._recheck.update(k for k in self.partitions if k[0] == group_id)

    def connection_closed(self, connection: object) -> None:
        """A client connection closed: the share sessions it opened end and their members' acquired records are
        released at once, as Kafka 4.x does when a share consumer disconnects (a crashed consumer's records
        come back without waiting for their locks to time out)."""
        for gid, mid in [k for k, s in self.sessions.items() if s.connection is connection]:
            self.close_session(gid, mid)
        self.flush_soon()

    def _release_member(self, group_id: str, member_id: str) -> None:
        released = [k for k, sp in self.partitions.items() if k[0] == group_id and sp.release_member(member_id)]
        if released:
            self.changed(released)
            self.wake()

    # ------------------------------------------------------------------ time and waits
    def tick(self) -> None:
        """Expire member sessions and acquisition locks due by now, release what the leavers held, re-arm."""
        now = self.now()
        self.groups.expire(now)
        woke = False
        for gid, mid in self.groups.take_left():
            self._dirty_groups.add(gid)
            self.sessions.pop((gid, mid), None)
            self._release_member(gid, mid)
        for key, sp in self.partitions.items():
            if sp.expire_locks(now):
                self.changed([key])
                woke = True
        if woke:
            self.wake()
        self.flush_soon()
        self.arm()

    def arm(self) -> None:
        """(Re)set the one timer at the earliest lock or member-session deadline."""
        deadlines = [d for d in (self.groups.next_deadline(), *(sp.next_deadline() for sp in self.partitions.values()))
                     if d is not None]
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        if deadlines:
            loop = asyncio.get_running_loop()
            delay = max(min(deadlines) - self.now(), 0) / 1000
            self._timer = loop.call_later(delay, self.tick)

    def add_waiter(self, fut: asyncio.Future[None]) -> None:
        self._waiters.add(fut)

    def discard_waiter(self, fut: asyncio.Future[None]) -> None:
        self._waiters.discard(fut)

    def wake(self) -> None:
        """Records became AVAILABLE again: long-polling share fetches look again."""
        for fut in self._waiters:
            if not fut.done():
                fut.set_result(None)

    def stop(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        if self._retry is not None:
            self._retry.cancel()
            self._retry = None
        self.wake()

    async def close(self) -> None:
        """After the connections closed: the last writes finish, the store's runtime stops."""
        if self._flushes:
            await asyncio.gather(*self._flushes, return_exceptions=True)
        if self.persister is not None:
            self.persister.close()
        if self.store is not None:
            await self.store.stop()
