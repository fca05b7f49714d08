"""The offsets side of the group coordinator: committed offsets in __consumer_offsets, apart from group
membership, as Apache Kafka's OffsetMetadataManager is apart from its GroupMetadataManager.

`OffsetManager` keeps, per group, the committed offset of each (topic, partition) and the pending offsets
of open transactions (TxnOffsetCommit, per producer id), and owns their records:

* commit (OffsetCommit): the records are written as one batch; the in-memory offsets change only once it is
  durable, so a reader never sees an offset that a crash could take back (kop#1041 lost commits silently);
  metadata over offsetMetadataMaxSize is refused per partition (OFFSET_METADATA_TOO_LARGE);
* fetch (OffsetFetch): -1 for a partition without a commit; pending transactional offsets are invisible
  (`has_pending_offset` lets a require_stable fetch answer UNSTABLE_OFFSET_COMMIT);
* delete (OffsetDelete, DeleteGroups, a deleted topic): tombstones, then the offsets go;
* expire: which offsets of a group are past their retention (`expired`), by a rule the group's membership
  gives (from when retention counts; which topics are subscribed, whose offsets never expire);
* transactional commits (KIP-98 / KIP-447): written in a transactional batch of the producer, pending until
  the transaction's marker lands in the partition (`complete_transaction`): COMMIT makes them committed unless
  a plain commit written after them is newer (Kafka's rule, compared by record offset), ABORT drops them;
* replay at load of the same records, transactional batches and markers included.

Membership checks (generation, member id, group state) stay in the group coordinator, which validates a
request and then calls this; writes go through its `write` (the coordinator runtime's append).
Topics are Kafka names (kop.topics.manager.TopicManager.kafka_name).
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass

from kop.config import BrokerConfig
from kop.coordinator import records as rec
from kop.coordinator.runtime import Record, append_error
from kop.offset.api import Buffer
from kop.offset.producer_state import SequenceError
from kop.protocol.errors import ErrorCode
from kop.protocol.records import control_record_type, decode_records
from kop.topics.names import OFFSETS_TOPIC

log = logging.getLogger(__name__)

E = ErrorCode

TopicPartition = tuple[str, int]
# (topic, partition, offset, leader epoch, metadata) of an OffsetCommit / TxnOffsetCommit
CommitRequest = tuple[str, int, int, int, "str | None"]
# (topic, partition, offset, leader epoch, metadata, error) of an OffsetFetch answer; offset -1: no commit
FetchedOffset = tuple[str, int, int, int, str, int]
# writes one batch of records of a group (producer: the (id, epoch) of a transactional batch); its base offset
Writer = Callable[[str, list[Record], "tuple[int, int] | None"], Awaitable[int]]


@dataclass(slots=True)
class OffsetAndMetadata:
    offset: int
    leader_epoch: int  # -1: none
    metadata: str
    commit_timestamp: int
    expire_timestamp: int = -1  # only commits with a retention time (OffsetCommit v2-v4) have one
    record_offset: int = -1  # its record's offset in __consumer_offsets: a transaction's commit keeps the newer
    topic_id: bytes = rec.ZERO_UUID  # the topic's id when committed (Kafka 4.4's OffsetCommitValue tag 0)


class OffsetManager:
    """Committed and pending offsets of the groups of this broker's __consumer_offsets partitions."""

    def __init__(self, config: BrokerConfig, write: Writer, partition_of: Callable[[str], int],
                 now_ms: Callable[[], int], topic_id_of: Callable[[str], bytes | None] = lambda _name: None) -> None:
        self.config = config
        self._write = write
        self.partition_of = partition_of
        self.now_ms = now_ms
        # a topic's id by Kafka name (None: unknown): written in each commit's record, as Kafka 4.4 does
        self._topic_id_of = topic_id_of
        self.offsets: dict[str, dict[TopicPartition, OffsetAndMetadata]] = {}
        # TxnOffsetCommit's offsets, per producer id, until its transaction's marker lands (KIP-98)
        self.pending: dict[int, dict[str, dict[TopicPartition, OffsetAndMetadata]]] = {}

    # ================================================================== reads
    def committed(self, group_id: str) -> dict[TopicPartition, OffsetAndMetadata]:
        """The committed offsets of a group (empty: none)."""
        return self.offsets.get(group_id, {})

    def has_offsets(self, group_id: str) -> bool:
        return bool(self.offsets.get(group_id))

    def fetch(self, group_id: str | None, topics: list[tuple[str, list[int]]] | None) -> list[FetchedOffset]:
        """OffsetFetch's rows: for `topics` (name, partitions), or every committed partition when None.
        group_id None: a group that has no commits to show (missing, or dead)."""
        offsets = self.committed(group_id) if group_id is not None else {}
        if topics is None:
            return [(t, p, om.offset, om.leader_epoch, om.metadata, 0) for (t, p), om in sorted(offsets.items())]
        out: list[FetchedOffset] = []
        for t, parts in topics:
            for p in parts:
                found = offsets.get((t, p))
                out.append((t, p, -1, -1, "", 0) if found is None
                           else (t, p, found.offset, found.leader_epoch, found.metadata, 0))
        return out

    @property
    def has_pending(self) -> bool:
        """Whether any transaction holds pending offsets."""
        return bool(self.pending)

    def has_pending_offset(self, group_id: str, topic: str, partition: int) -> bool:
        """Whether an open transaction holds an offset of this partition (OffsetFetch require_stable)."""
        return any((topic, partition) in per_group.get(group_id, ()) for per_group in self.pending.values())

    def committed_offsets(self) -> dict[tuple[str, str, int], int]:
        """{(group, topic, partition): committed offset} for every durable commit (consumer lag metrics)."""
        return {(g, t, p): o.offset for g, offs in self.offsets.items() for (t, p), o in offs.items()}

    # ================================================================== commits
    def _records(self, group_id: str, partitions: list[CommitRequest], now: int, expire: int,
                 result: dict[TopicPartition, int]) -> tuple[list[Record], list[tuple[TopicPartition, OffsetAndMetadata]]]:
        records: list[Record] = []
        values: list[tuple[TopicPartition, OffsetAndMetadata]] = []
        max_meta = self.config.offsetMetadataMaxSize
        for topic, partition, offset, epoch, metadata in partitions:
            if metadata is not None and len(metadata) > max_meta:
                result[(topic, partition)] = E.OFFSET_METADATA_TOO_LARGE
                continue
            result[(topic, partition)] = 0
            # Kafka 4.4 writes the topic's id (v4's tag 0; a commit with a retention time is v1, without tags)
            topic_id = (self._topic_id_of(topic) or rec.ZERO_UUID) if expire < 0 else rec.ZERO_UUID
            om = OffsetAndMetadata(offset, epoch, metadata or "", now, expire, topic_id=topic_id)
            values.append(((topic, partition), om))
            records.append((rec.offset_commit_key(group_id, topic, partition), rec.encode_offset_commit_value(
                rec.OffsetCommitValue(om.offset, om.leader_epoch, om.metadata, om.commit_timestamp,
                                      om.expire_timestamp, om.topic_id))))
        return records, values

    async def commit(self, group_id: str, partitions: list[CommitRequest], retention_ms: int = -1
                     ) -> dict[TopicPartition, int]:
        """Write the offsets (one batch) and, once durable, make them the committed ones. retention_ms >= 0:
        they expire that long after now (OffsetCommit v2-v4). Returns the error of each (topic, partition)."""
        now = self.now_ms()
        result: dict[TopicPartition, int] = {}
        records, values = self._records(group_id, partitions, now, now + retention_ms if retention_ms >= 0 else -1,
                                        result)
        if not records:
            return result
        try:
            base = await self._write(group_id, records, None)
        except Exception as e:
            log.warning("group %s: writing %d offset commits failed: %r", group_id, len(records), e)
            error = append_error(e)
            return {tp: (error if v == 0 else v) for tp, v in result.items()}
        offsets = self.offsets.setdefault(group_id, {})
        for i, (tp, om) in enumerate(values):
            om.record_offset = base + i
            offsets[tp] = om
        return result

    async def txn_commit(self, group_id: str, producer_id: int, producer_epoch: int,
                         partitions: list[CommitRequest]) -> dict[TopicPartition, int]:
        """TxnOffsetCommit: the offsets are written now in a transactional batch of the producer and stay
        pending (invisible to fetch) until the transaction's marker lands (`complete_transaction`)."""
        now = self.now_ms()
        result: dict[TopicPartition, int] = {}
        records, values = self._records(group_id, partitions, now, -1, result)
        if not records:
            return result
        try:
            base = await self._write(group_id, records, (producer_id, producer_epoch))
        except Exception as e:
            log.warning("group %s: writing %d transactional offset commits failed: %r", group_id, len(records), e)
            fenced = isinstance(e, SequenceError) and e.code == E.INVALID_PRODUCER_EPOCH
            error = E.INVALID_PRODUCER_EPOCH if fenced else append_error(e)
            return {tp: (error if v == 0 else v) for tp, v in result.items()}
        pending = self.pending.setdefault(producer_id, {}).setdefault(group_id, {})
        for i, (tp, om) in enumerate(values):
            om.record_offset = base + i
            pending[tp] = om
        return result

    def complete_transaction(self, partition: int, producer_id: int, commit: bool) -> list[str]:
        """The transaction's marker landed in __consumer_offsets partition `partition`: its pending offsets
        for the groups of that partition become committed (COMMIT) or are dropped (ABORT). Returns the
        groups that got committed offsets."""
        per_group = self.pending.get(producer_id)
        if not per_group:
            return []
        committed_groups: list[str] = []
        for gid in [g for g in per_group if self.partition_of(g) == partition]:
            offsets = per_group.pop(gid)
            if not commit:
                continue
            committed = self.offsets.setdefault(gid, {})
            for tp, om in offsets.items():
                # Kafka's rule: a plain commit written after the transactional one stays (compaction and
                # mixed commits depend on it); an unknown record offset (-1) does not hold the commit back.
                cur = committed.get(tp)
                if cur is None or om.record_offset < 0 or om.record_offset > cur.record_offset:
                    committed[tp] = om
            if not committed:
                del self.offsets[gid]
            committed_groups.append(gid)
        if not per_group:
            del self.pending[producer_id]
        return committed_groups

    # ================================================================== deletes
    @staticmethod
    def tombstones(group_id: str, partitions: Iterable[TopicPartition]) -> list[Record]:
        return [(rec.offset_commit_key(group_id, t, p), None) for t, p in partitions]

    def forget(self, group_id: str, partitions: Iterable[TopicPartition]) -> None:
        """Drop offsets whose tombstones are durable."""
        offs = self.offsets.get(group_id)
        if offs is None:
            return
        for tp in partitions:
            offs.pop(tp, None)
        if not offs:
            del self.offsets[group_id]

    async def delete(self, group_id: str, partitions: list[TopicPartition]) -> int:
        """Tombstones for these offsets, then they go: 0, or the error of the failed write."""
        if not partitions:
            return 0
        try:
            await self._write(group_id, self.tombstones(group_id, partitions), None)
        except Exception as e:
            log.warning("group %s: writing offset tombstones failed: %r", group_id, e)
            return append_error(e)
        self.forget(group_id, partitions)
        return 0

    async def delete_topic(self, topic: str, loaded: Callable[[str], bool]) -> None:
        """A deleted topic's committed offsets go too (tombstones), in the groups `loaded` says are served
        here, as Kafka removes them."""
        waits = []
        for gid, offs in list(self.offsets.items()):
            parts = [(t, p) for t, p in offs if t == topic]
            if parts and loaded(gid):
                waits.append((gid, parts, self._write(gid, self.tombstones(gid, parts), None)))
        for gid, parts, fut in waits:
            try:
                await fut
            except Exception as e:
                log.warning("group %s: writing tombstones for deleted topic %s failed: %r", gid, topic, e)
                continue
            self.forget(gid, parts)

    # ================================================================== expiration
    def expired(self, group_id: str, now: int, retention_ms: int,
                base: Callable[[OffsetAndMetadata], int] | None, subscribed: Callable[[str], bool]
                ) -> tuple[list[TopicPartition], bool]:
        """(the offsets of `group_id` past their retention, whether none is left). Kafka's rule: an offset
        with an expire timestamp (OffsetCommit v2-v4) expires then; any other one `retention_ms` after
        `base` says (the group's membership decides: when it became Empty, or the commit); None: the
        group's offsets do not expire now; offsets of subscribed topics never expire."""
        offsets = self.committed(group_id)
        if base is None:
            return [], not offsets
        expired: list[TopicPartition] = []
        all_expired = True
        for (t, p), om in offsets.items():
            if subscribed(t):
                all_expired = False
                continue
            gone = now >= om.expire_timestamp if om.expire_timestamp >= 0 else now - base(om) >= retention_ms
            if gone:
                expired.append((t, p))
            else:
                all_expired = False
        return expired, all_expired

    # ================================================================== load and unload
    def replay(self, key: rec.OffsetCommitKey, value: bytes | None, record_offset: int = -1) -> None:
        """One offset commit record of __consumer_offsets (a tombstone: the offset goes)."""
        if value is None:
            self.forget(key.group, [(key.topic, key.partition)])
            return
        v = rec.decode_offset_commit_value(value)
        self.offsets.setdefault(key.group, {})[(key.topic, key.partition)] = OffsetAndMetadata(
            v.offset, v.leader_epoch, v.metadata, v.commit_timestamp, v.expire_timestamp, record_offset, v.topic_id)

    def replay_transactional(self, partition: int, producer_id: int, is_control: bool, batch: Buffer,
                             base_offset: int) -> list[str]:
        """A transactional batch's offset commits are pending for their producer; a marker completes them,
        as when it was first written. Returns the groups that got committed offsets (markers)."""
        if is_control:
            done: list[str] = []
            for r in decode_records(batch):
                if r.key is not None and len(r.key) >= 4:
                    kind = control_record_type(r.key)
                    if kind in (0, 1):
                        done += self.complete_transaction(partition, producer_id, kind == 1)
            return done
        for r in decode_records(batch):
            if r.key is None:
                continue
            try:
                k = rec.decode_key(r.key)
                if not isinstance(k, rec.OffsetCommitKey):
                    continue
                pending = self.pending.setdefault(producer_id, {}).setdefault(k.group, {})
                if r.value is None:
                    pending.pop((k.topic, k.partition), None)
                    continue
                v = rec.decode_offset_commit_value(r.value)
                pending[(k.topic, k.partition)] = OffsetAndMetadata(v.offset, v.leader_epoch, v.metadata,
                                                                    v.commit_timestamp, v.expire_timestamp,
                                                                    base_offset + r.offset_delta, v.topic_id)
            except rec.RecordError as e:
                log.warning("skipping an undecodable transactional record in %s: %s", OFFSETS_TOPIC, e)
        return []

    def drop_groups(self, group_ids: Iterable[str]) -> None:
        """Forget the committed offsets of these groups (their partition was unloaded)."""
        for gid in group_ids:
            self.offsets.pop(gid, None)

    def drop_partition(self, partition: int) -> None:
        """Forget everything of the groups of `partition`: committed and pending offsets."""
        for gid in [g for g in self.offsets if self.partition_of(g) == partition]:
            del self.offsets[gid]
        for producer_id in list(self.pending):
            per_group = self.pending[producer_id]
            for gid in [g for g in per_group if self.partition_of(g) == partition]:
                del per_group[gid]
            if not per_group:
                del self.pending[producer_id]


__all__ = ["CommitRequest", "FetchedOffset", "OffsetAndMetadata", "OffsetManager", "TopicPartition"]
