"""What the admin REST answers, computed from the broker service (no HTTP here, so it can be read alone).

Shapes follow Pulsar's admin v2 (TopicStats, PersistentTopicInternalStats, PartitionedTopicMetadata,
MessageIdImpl) for what this broker holds; fields Pulsar does not have are Kafka's view of the same
partition (highWatermark, logStartOffset, currentIndex) and are listed in docs/operability.md.

A topic is one of Pulsar's two kinds (kop/topics/manager.py Topic.partitioned). A partitioned topic
`persistent://public/default/orders` has partitions `orders-partition-0` ...: per-partition endpoints (stats,
internalStats, PIP-415) take a partition name, and the base name gets a 404 that says which name to use, as Pulsar
does. A non-partitioned topic is named by its own name alone (its one partition, Kafka's partition 0, underneath):
per-partition endpoints take that name, partitioned metadata answers 0, and a `-partition-N` name of it is 404.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import re
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypeVar

from kop.admin import gather
from kop.managed_ledger import InvalidPositionError, Position
from kop.offset.api import NoSuchEntry, OffsetOutOfRange, PartitionLog
from kop.storage.api import NoSuchLedgerError
from kop.topics import namespaces as ns_store
from kop.topics.names import InvalidTopicName, TopicName, check_local_name

if TYPE_CHECKING:
    from kop.managed_ledger import ManagedLedger
    from kop.offset.partition_log import ManagedPartitionLog
    from kop.services import BrokerServices
    from kop.topics.manager import Topic

PARTITION_SUFFIX = re.compile(r"^(?P<base>.+)-partition-(?P<index>0|[1-9][0-9]{0,8})$")
# Pulsar's MessageId.earliest (MessageIdImpl(-1, -1, -1)): the answer for an index retention already deleted.
EARLIEST = {"ledgerId": -1, "entryId": -1, "partitionIndex": -1}


class AdminError(Exception):
    """An answer other than 200: the HTTP status and Pulsar's {"reason": ...} text."""

    def __init__(self, status: int, reason: str) -> None:
        super().__init__(reason)
        self.status = status
        self.reason = reason


@dataclass(frozen=True, slots=True)
class TopicRef:
    """A topic as named in a URL: the Kafka topic and, for a partition name, its index (None: base name)."""

    topic: Topic
    partition: int | None

    @property
    def base_name(self) -> str:
        return self.topic.name.canonical

    def partition_name(self, p: int) -> str:
        return f"{self.base_name}-partition-{p}"

    @property
    def name(self) -> str:
        if self.partition is None or not self.topic.partitioned:
            return self.base_name
        return self.partition_name(self.partition)


# ---------------------------------------------------------------------------------------------- names


def check_namespace(service: BrokerServices, tenant: str, namespace: str) -> None:
    """404 "Namespace does not exist", Pulsar's answer for a namespace it does not have (kop/topics/namespaces.py)."""
    if not service.topics.namespaces.known(tenant, namespace):
        raise AdminError(404, "Namespace does not exist")


def _topics_in(service: BrokerServices, tenant: str, namespace: str) -> list[Topic]:
    check_namespace(service, tenant, namespace)
    found = [t for t in service.topics.all() if (t.name.tenant, t.name.namespace) == (tenant, namespace)]
    return sorted(found, key=lambda t: t.name.local)


def topic_list(service: BrokerServices, tenant: str, namespace: str) -> list[str]:
    """Pulsar's `topics list`: every partition of every topic (Kafka topics are partitioned topics)."""
    out: list[str] = []
    for t in _topics_in(service, tenant, namespace):
        out.extend(t.pulsar_names())
    return out


def partitioned_topic_list(service: BrokerServices, tenant: str, namespace: str) -> list[str]:
    return [t.name.canonical for t in _topics_in(service, tenant, namespace) if t.partitioned]


async def resolve_fresh(service: BrokerServices, tenant: str, namespace: str, local: str) -> TopicRef:
    """As `resolve`; in cluster mode a topic this broker does not know (or a partition beyond the count it knows)
    is read again from the metadata store first: another broker may have created or grown it a moment ago, and
    that broker's fan-out of a partitioned topic's call reaches this one before its watch does."""
    try:
        return resolve(service, tenant, namespace, local)
    except AdminError as e:
        if e.status != 404 or service.topics.ownership is None:
            raise
        m = PARTITION_SUFFIX.match(local)
        try:
            name = TopicName(tenant, namespace, m["base"] if m else local)
        except InvalidTopicName:
            raise e from None
        await service.topics.refresh(name)
        return resolve(service, tenant, namespace, local)


def resolve(service: BrokerServices, tenant: str, namespace: str, local: str) -> TopicRef:
    """The topic a URL names, or 404 (unknown namespace, topic or partition)."""
    check_namespace(service, tenant, namespace)
    m = PARTITION_SUFFIX.match(local)
    base, partition = (m["base"], int(m["index"])) if m else (local, None)
    try:
        check_local_name(base)
    except InvalidTopicName:
        raise AdminError(404, f"Topic persistent://{tenant}/{namespace}/{local} not found") from None
    topic = service.topics.get(TopicName(tenant, namespace, base))
    if topic is None or (partition is not None and (partition >= topic.partitions or not topic.partitioned)):
        raise AdminError(404, f"Topic persistent://{tenant}/{namespace}/{local} not found")
    return TopicRef(topic, partition if topic.partitioned else 0)  # a non-partitioned topic's name is its partition


async def create_partitioned_topic(service: BrokerServices, tenant: str, namespace: str, local: str,
                                   partitions: int) -> None:
    from kop.topics.manager import TopicError

    if not await service.topics.namespaces.exists(tenant, namespace):
        raise AdminError(404, "Namespace not found")  # Pulsar's words for a create
    if PARTITION_SUFFIX.match(local):
        raise AdminError(412, f"Partitioned topic name should not contain '-partition-': {local}")
    if partitions < 1:
        raise AdminError(406, "Number of partitions should be more than 0")
    try:
        check_local_name(local)
        name = TopicName(tenant, namespace, local)
    except InvalidTopicName as e:
        raise AdminError(412, str(e)) from None
    try:
        await service.topics.create(name, partitions)
    except TopicError as e:
        if e.error == "TOPIC_ALREADY_EXISTS":
            raise AdminError(409, "This topic already exists") from None
        raise AdminError(412, e.message) from None


def need_partition(ref: TopicRef, what: str) -> int:
    """The partition a per-partition endpoint was given; 404 naming a partition for a base name."""
    if ref.partition is None:
        raise AdminError(
            404,
            f"Topic {ref.base_name} not found: it is a partitioned topic with {ref.topic.partitions} "
            f"partition(s); {what} takes a partition, e.g. {ref.partition_name(0)}",
        )
    return ref.partition


def _need_partitioned(ref: TopicRef, what: str) -> None:
    """404 for what a partitioned-* endpoint cannot take: a partition's name, or a non-partitioned topic."""
    if not ref.topic.partitioned:
        raise AdminError(404, f"Partitioned Topic not found: {ref.base_name} is a non-partitioned topic")
    if ref.partition is not None:
        raise AdminError(404, f"Topic {ref.name} not found: {what} takes the topic's base name, {ref.base_name}")


def partitioned_metadata(ref: TopicRef) -> dict[str, Any]:
    """Pulsar's PartitionedTopicMetadata: the partition count; 0 for a partition's own name."""
    return {"partitions": ref.topic.partitions if ref.partition is None else 0}


async def _plog(service: BrokerServices, topic: Topic, partition: int) -> ManagedPartitionLog:
    return await service.topics.partition_log(topic, partition)  # type: ignore[return-value]


def _position(p: Position | None, fallback_ledger: int | None = None) -> str:
    if p is None:
        return f"{fallback_ledger if fallback_ledger is not None else -1}:-1"
    return f"{p.ledger_id}:{p.entry_id}"


# ---------------------------------------------------------------------------------------------- groups


def committed_offsets(service: BrokerServices, topic: Topic, partition: int) -> dict[str, int]:
    """Committed offsets of every consumer group on one partition ({} until the group coordinator runs)."""
    from kop.admin.lag import committed_offsets as all_committed

    out: dict[str, int] = {}
    for group, topic_name, p, offset in all_committed(service):
        if p == partition and topic_name == topic.name.canonical:
            out[group] = offset
    return out


# ---------------------------------------------------------------------------------------------- stats


async def partition_stats(service: BrokerServices, topic: Topic, partition: int) -> dict[str, Any]:
    """Pulsar's TopicStats for one partition: rates over the last statsUpdateFrequencyInSecs window,
    counters since start-up, storage size, and one subscription per consumer group (its backlog)."""
    plog = await _plog(service, topic, partition)
    c = service.metrics.partition(topic.name.canonical, partition, topic.ledger_name(partition))
    hw = plog.high_watermark
    subs = {
        group: {"msgBacklog": hw - committed, "committedOffset": committed, "type": "KafkaConsumerGroup"}
        for group, committed in sorted(committed_offsets(service, topic, partition).items())
    }
    pulsar = service.pulsar_subscriptions
    traffic = {"msgInCounter": 0, "bytesInCounter": 0, "msgOutCounter": 0, "bytesOutCounter": 0,
               "waitingPublishers": 0}
    if pulsar is not None:  # Pulsar subscriptions (managed cursors) beside the Kafka consumer groups
        subs.update(await pulsar.stats(topic, partition))
        traffic = pulsar.traffic(topic, partition)
    bytes_in, records_in = c.bytes_in + traffic["bytesInCounter"], c.records_in + traffic["msgInCounter"]
    return {
        "msgRateIn": c.rate_records_in,
        "msgThroughputIn": c.rate_bytes_in,
        "msgRateOut": c.rate_records_out,
        "msgThroughputOut": c.rate_bytes_out,
        "bytesInCounter": bytes_in,  # Kafka produce and Pulsar producers
        "msgInCounter": records_in,
        "bytesOutCounter": c.bytes_out + traffic["bytesOutCounter"],  # Kafka fetch and Pulsar dispatch
        "msgOutCounter": c.records_out + traffic["msgOutCounter"],
        "averageMsgSize": (bytes_in / records_in) if records_in else 0.0,
        "storageSize": plog.size_bytes,
        "publishers": [],
        "waitingPublishers": traffic["waitingPublishers"],  # WaitForExclusive producers queued (issue #22)
        "subscriptions": subs,
        "highWatermark": hw,
        "logStartOffset": plog.log_start_offset,
        **_policy_stats(service, topic),
    }


def _policy_stats(service: BrokerServices, topic: Topic) -> dict[str, int | str]:
    """What Pulsar's TopicStats says of the policies that apply to the topic (topic-level, else namespace, else the
    broker's keys - the order the handlers honour them in): each backlog quota type's limit (-1: none) and whether
    de-duplication is on, as Pulsar's MessageDeduplication status names it."""
    cfg = service.config
    policies = service.topics.namespaces
    quotas = policies.backlog_quotas(topic.name)
    storage, age = quotas.get(ns_store.DESTINATION_STORAGE), quotas.get(ns_store.MESSAGE_AGE)
    dedup = policies.effective(topic.name, ns_store.DEDUPLICATION)
    enabled = cfg.brokerDeduplicationEnabled if dedup is None else bool(dedup)
    return {
        "backlogQuotaLimitSize": int(storage.get("limitSize", -1)) if isinstance(storage, dict)
        else cfg.backlogQuotaDefaultLimitBytes,
        "backlogQuotaLimitTime": int(age.get("limitTime", -1)) if isinstance(age, dict)
        else cfg.backlogQuotaDefaultLimitSecond,
        "deduplicationStatus": "Enabled" if enabled else "Disabled",
    }


_SUMMED = ("msgRateIn", "msgThroughputIn", "msgRateOut", "msgThroughputOut", "bytesInCounter", "msgInCounter",
           "bytesOutCounter", "msgOutCounter", "storageSize", "waitingPublishers")


_POLICY_LIMITS = ("backlogQuotaLimitSize", "backlogQuotaLimitTime")  # partitioned-stats: as its partitions say


PartitionSource = Callable[[int], Awaitable[dict[str, Any]]]
_T = TypeVar("_T")


async def partitioned_stats(service: BrokerServices, ref: TopicRef, per_partition: bool = True,
                            partition_source: PartitionSource | None = None) -> dict[str, Any]:
    """Pulsar's PartitionedTopicStats: the partitions' stats summed, and each one under "partitions".
    `partition_source(p)` gives one partition's stats (in cluster mode the admin server asks each partition's
    owner); by default they are computed here."""
    _need_partitioned(ref, "partitioned-stats")
    source = partition_source or (lambda p: partition_stats(service, ref.topic, p))
    total: dict[str, Any] = {k: 0 for k in _SUMMED} | {k: -1 for k in _POLICY_LIMITS}
    subs: dict[str, dict[str, Any]] = {}
    parts: dict[str, Any] = {}
    for p, s in enumerate(await _each(source, ref.topic.partitions, remote=partition_source is not None)):
        for k in _SUMMED:
            total[k] += s[k]
        if p == 0:  # the topic's policies, the same on each partition
            total |= {k: s.get(k, -1) for k in _POLICY_LIMITS}
        for group, sub in s["subscriptions"].items():
            agg = subs.setdefault(group, {"msgBacklog": 0, "type": sub["type"]})
            agg["msgBacklog"] += sub["msgBacklog"]
            if "unackedMessages" in sub:  # a Pulsar subscription: its consumers and unacked messages too
                agg["unackedMessages"] = agg.get("unackedMessages", 0) + sub["unackedMessages"]
                agg["msgOutCounter"] = agg.get("msgOutCounter", 0) + sub["msgOutCounter"]
                agg["bytesOutCounter"] = agg.get("bytesOutCounter", 0) + sub["bytesOutCounter"]
                agg.setdefault("consumers", []).extend(sub["consumers"])
                agg["isDurable"] = sub["isDurable"]
        parts[ref.partition_name(p)] = s
    total["averageMsgSize"] = total["bytesInCounter"] / total["msgInCounter"] if total["msgInCounter"] else 0.0
    total["publishers"] = []
    total["subscriptions"] = subs
    total["metadata"] = {"partitions": ref.topic.partitions}
    total["partitions"] = parts if per_partition else {}
    return total


async def internal_stats(service: BrokerServices, topic: Topic, partition: int) -> dict[str, Any]:
    """Pulsar's PersistentTopicInternalStats for one partition, from its managed ledger: the ledger list
    with entries and size (the current ledger's acknowledged counts included), the last confirmed entry,
    the managed-ledger properties (the recovered "index"), and Kafka's offsets."""
    plog = await _plog(service, topic, partition)
    ml = plog.ml
    ledgers = ml.ledgers()
    current = ml.current_ledger_id
    current_info = ledgers[-1] if ledgers and ledgers[-1].ledger_id == current else None
    cursors = {}
    for group, committed in sorted(committed_offsets(service, topic, partition).items()):
        cursors[group] = await _cursor(plog, ml, committed)
    return {
        "numberOfEntries": ml.number_of_entries,
        "totalSize": ml.total_size,
        "currentLedgerEntries": current_info.entries if current_info else 0,
        "currentLedgerSize": current_info.size if current_info else 0,
        "lastConfirmedEntry": _position(ml.last_confirmed_position, current),
        "state": "LedgerOpened" if ml.is_open else "Closed",
        "pendingAddEntriesCount": ml.pending_adds,
        "ledgers": [
            {"ledgerId": li.ledger_id, "entries": li.entries or 0, "size": li.size or 0,
             "timestamp": li.timestamp or 0, "offloaded": False, "underReplicated": False}
            for li in ledgers
        ],
        "cursors": cursors,
        "properties": ml.properties,
        "currentIndex": plog.interceptor.durable_index,
        "highWatermark": plog.high_watermark,
        "logStartOffset": plog.log_start_offset,
        "rollovers": ml.rollovers,
        "storageDamage": partition_damage(service, plog),
    }


def partition_damage(service: BrokerServices, plog: ManagedPartitionLog) -> dict[str, Any]:
    """Damage this partition's ledgers hold (kop/storage/local/ledgers.py), the ranges a read met with the
    Kafka offsets they cost, and how many reads were answered KAFKA_STORAGE_ERROR."""
    store = service.storage.ledger_store
    ids = {li.ledger_id for li in plog.ml.ledgers()}
    found = store.damage_of(ids) if hasattr(store, "damage_of") else []
    return {"ledgers": found, "ranges": list(plog.damaged_ranges.values()), "damagedReads": plog.damaged_reads}


def storage_status(service: BrokerServices) -> dict[str, Any]:
    """Broker-wide storage health for metrics: damage found, recovery steps taken, write failures."""
    storage = service.storage
    store = storage.ledger_store
    recovery = dict(getattr(store, "recovery", {}))
    recovery.update(getattr(getattr(storage, "factory", None), "recovery", {}))
    logs = getattr(storage, "open_logs", {})
    return {
        "damage": store.damage_list() if hasattr(store, "damage_list") else [],
        "recovery": recovery,
        "damagedReads": sum(pl.damaged_reads for pl in logs.values()),
        "writeErrors": getattr(store, "write_errors", 0),
        **({"ensembleChanges": store.ensemble_changes} if hasattr(store, "ensemble_changes") else {}),
    }


WRITE_FAILURE_HOLD_S = 10.0  # a ledger write failure keeps /ready at 503 this long unless a write succeeds


async def not_ready_reasons(service: BrokerServices) -> list[str]:
    """Why the broker should not get traffic now; empty when it is ready. The stores are probed with a
    real synced write each time (a full or read-only disk shows here, and clears when it is fixed), and a
    __consumer_offsets partition whose load failed keeps its groups unserved."""
    reasons = []
    if not service.ready:
        reasons.append("starting or stopping")
    storage = service.storage
    store = storage.ledger_store
    failed_at = getattr(store, "write_failed_at", None)
    if failed_at is not None and time.monotonic() - failed_at < WRITE_FAILURE_HOLD_S:
        # A failed write frees what it wrote, so on a full disk the small probe below can succeed between
        # two failing produces; recent failures that no successful write has followed count too.
        reasons.append(f"ledger writes are failing: {getattr(store, 'last_write_error', None)}")
    probe = getattr(store, "probe_writable", None)
    if probe is not None:
        problem = await asyncio.get_running_loop().run_in_executor(None, probe)
        if problem:
            reasons.append(problem)
    mprobe = getattr(storage.metadata_store, "probe_writable", None)
    if mprobe is not None:
        problem = await mprobe()
        if problem:
            reasons.append(problem)
    if parts := service.coordinator.failed_partitions():
        reasons.append(f"__consumer_offsets partition(s) {parts} failed to load (their groups get "
                       "COORDINATOR_NOT_AVAILABLE)")
    if parts := service.transactions.failed_partitions():
        reasons.append(f"__transaction_state partition(s) {parts} failed to load (their transactional ids get "
                       "COORDINATOR_NOT_AVAILABLE)")
    return reasons


async def _cursor(plog: PartitionLog, ml: ManagedLedger, committed: int) -> dict[str, Any]:
    """A consumer group's committed offset shown as a Pulsar cursor: readPosition = the entry holding the
    committed offset (the next to read), markDeletePosition = the entry before it (the last one entirely
    consumed), messagesConsumedCounter = the committed offset."""
    read: Position | None = None
    if committed < plog.high_watermark and committed >= plog.log_start_offset:
        with contextlib.suppress(Exception):
            read = await plog.position_of(committed)
    if read is None:  # at the end: the position the next entry will take
        with contextlib.suppress(InvalidPositionError):
            read = ml.position_of(ml.number_of_entries)
    return {
        "markDeletePosition": _position(None if read is None else _entry_before(ml, read)),
        "readPosition": _position(read),
        "messagesConsumedCounter": committed,
        "msgBacklog": plog.high_watermark - committed,
    }


def _entry_before(ml: ManagedLedger, read: Position) -> Position:
    """The entry before `read` in the log: the one before it in its ledger, else the last entry of the
    previous non-empty ledger, else (ledger, -1) as Pulsar writes "before the first entry"."""
    if read.entry_id > 0:
        return Position(read.ledger_id, read.entry_id - 1)
    previous: Position | None = None
    for li in ml.ledgers():
        if li.ledger_id == read.ledger_id:
            break
        if li.entries:
            previous = Position(li.ledger_id, li.entries - 1)
    return previous if previous is not None else Position(read.ledger_id, read.entry_id - 1)


async def partitioned_internal_stats(service: BrokerServices, ref: TopicRef,
                                     partition_source: PartitionSource | None = None) -> dict[str, Any]:
    _need_partitioned(ref, "partitioned-internalStats")
    source = partition_source or (lambda p: internal_stats(service, ref.topic, p))
    each = await _each(source, ref.topic.partitions, remote=partition_source is not None)
    return {
        "metadata": {"partitions": ref.topic.partitions},
        "partitions": {ref.partition_name(p): s for p, s in enumerate(each)},
    }


async def _each(source: Callable[[int], Awaitable[_T]], partitions: int, remote: bool) -> list[_T]:
    """Every partition's part of a partitioned-* answer, in partition order: one at a time when computed here, a
    few at a time when `source` may ask other brokers (cluster mode: kop/admin/gather.py)."""
    return await gather.in_order([functools.partial(source, p) for p in range(partitions)],
                                 gather.LIMIT if remote else 1)


# ---------------------------------------------------------------------------------------------- PIP-415


def _check_index_lookups(service: BrokerServices) -> None:
    if not service.config.exposingBrokerEntryMetadataToAdminEnabled:
        raise AdminError(412, "Broker entry metadata is not enabled "
                              "(exposingBrokerEntryMetadataToAdminEnabled=false)")


def parse_long(query: Mapping[str, str], name: str, required: bool = True, default: int | None = None) -> int:
    text = query.get(name)
    if text is None:
        if required:
            raise AdminError(400, f"Missing query parameter {name}")
        assert default is not None
        return default
    try:
        value = int(text)
    except ValueError:
        raise AdminError(400, f"Query parameter {name} must be an integer, got {text!r}") from None
    if not -(2**63) <= value < 2**63:
        raise AdminError(400, f"Query parameter {name} is out of the range of a long: {text}")
    return value


async def message_id_by_index(service: BrokerServices, ref: TopicRef, index: int) -> dict[str, int]:
    """PIP-415: {ledgerId, entryId, partitionIndex} of the entry whose records include `index`.

    Resolution is per entry (a batch of several records is one entry: all its indexes give the same id),
    found as Pulsar does: the first entry whose broker-entry-metadata index >= the requested one. 404 for
    an index < 0 or past the last durable one; MessageId.earliest for an index below the log start
    (deleted by retention or DeleteRecords). An index that compaction removed answers the next entry
    that still exists (the same rule; the client filters by per-record index), or 404 when compaction
    removed it and every later record. Transaction markers, which Pulsar skips, do not exist here yet
    (control batches are refused)."""
    _check_index_lookups(service)
    partition = need_partition(ref, "getMessageIdByIndex")
    plog = await _plog(service, ref.topic, partition)
    if index < 0 or index > plog.interceptor.durable_index:
        raise AdminError(404, f"Invalid index {index}: the latest index of {ref.name} is "
                              f"{plog.interceptor.durable_index}")
    for _ in range(3):  # retention or compaction may swap ledgers between the search and the read: again
        if index < plog.log_start_offset:
            return dict(EARLIEST)
        try:
            position = await plog.position_of(index)
            if await plog.entries_from(index) == 0:
                raise AdminError(404, f"No entry holds index {index} of {ref.name}: compaction removed it "
                                      "and every later record")
            await plog.entry_offsets(position)  # the entry is still there (and carries an index)
        except (OffsetOutOfRange, NoSuchEntry, InvalidPositionError, NoSuchLedgerError):
            continue
        if index < plog.log_start_offset:  # trimmed while we looked
            return dict(EARLIEST)
        return {"ledgerId": position.ledger_id, "entryId": position.entry_id,
                "partitionIndex": ref.topic.pulsar_partition(partition)}
    if index < plog.log_start_offset:
        return dict(EARLIEST)
    raise AdminError(500, f"could not locate index {index} in {ref.name} (the log kept changing)")


async def index_by_message_id(service: BrokerServices, ref: TopicRef, ledger_id: int, entry_id: int,
                              batch_index: int = -1) -> dict[str, int]:
    """The reverse of PIP-415: the indexes of the entry at (ledgerId, entryId), from its broker entry
    metadata. `index` is the stored index (the entry's last record, Pulsar's convention) or, with
    batchIndex >= 0, the index of the batch's record at that position (read from the record itself, so it
    stays right when compaction removed records of the batch); firstIndex..lastIndex is the entry's
    offset range (firstIndex = the Kafka base offset), numMessages the records it still holds."""
    _check_index_lookups(service)
    partition = need_partition(ref, "getIndexByMessageId")
    plog = await _plog(service, ref.topic, partition)
    position = Position(ledger_id, entry_id)
    try:
        offsets = await plog.entry_offsets(position)
        got = await plog.read(offsets.base_offset, 1)
    except (NoSuchEntry, OffsetOutOfRange):
        got = None
    fb = None if got is None else next((b for b in got.batches if b.position == position), None)
    if fb is None:
        raise AdminError(404, f"Message not found: no entry {ledger_id}:{entry_id} in {ref.name}")
    from kop.protocol.records import CorruptRecordError, decode_records, parse_batch_header

    batch = fb.batch
    header = parse_batch_header(batch)
    first, last = offsets.base_offset, offsets.last_offset
    index = last
    if batch_index >= 0:
        if batch_index >= header.records_count:
            raise AdminError(404, f"Message not found: entry {ledger_id}:{entry_id} holds "
                                  f"{header.records_count} record(s), batchIndex {batch_index} is past its end")
        try:
            index = first + decode_records(batch)[batch_index].offset_delta
        except CorruptRecordError as e:
            raise AdminError(500, f"entry {ledger_id}:{entry_id} of {ref.name}: {e}") from None
    return {
        "ledgerId": ledger_id,
        "entryId": entry_id,
        "partitionIndex": ref.topic.pulsar_partition(partition),
        "batchIndex": batch_index,
        "index": index,
        "firstIndex": first,
        "lastIndex": last,
        "numMessages": header.records_count,
    }
