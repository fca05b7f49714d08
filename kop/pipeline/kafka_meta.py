"""What the pipeline jobs ask the broker directly, outside Spark: partitions, log start / end offsets, the last
stable offsets and the topic's cleanup.policy (kafka-python's admin client: Metadata, ListOffsets,
DescribeConfigs), and which offsets of a range are transaction markers or records of aborted transactions
(scan_transactions: raw Fetch requests with the kop.protocol codec, batch headers only).

Spark resolves `earliest` and `latest` itself and does not tell the job what it resolved them to. The audit
needs those numbers to know which offsets it *expected* to see, so it asks first and hands Spark explicit
offsets: what Spark reads and what the audit compares against are then the same range by construction.
cleanup.policy decides whether a hole inside the retained log is compaction at work or data loss.

Transactions leave offsets no consumer ever returns: each marker (a control batch, one offset per partition
and transaction) and, under read_committed, every record of an aborted transaction. Spark cannot say which
holes those are (its consumer drops them silently), so the audit asks the broker: scan_transactions reads the
range with Fetch v12 and looks only at the 61-byte batch headers (attributes: transactional and control
bits, producer id, base and last offset) - no record is decompressed, only each control batch's single
record key (ABORT or COMMIT) is read. Which transactional batches were aborted is decided the way a Java
read_committed consumer does it: a READ_COMMITTED fetch carries the aborted transactions (producer id, first
offset) overlapping what it returned; a batch of such a producer at or after that first offset is aborted
until that producer's ABORT marker. Past the last stable offset (only read_uncommitted audits read there)
READ_COMMITTED returns nothing, so there a READ_UNCOMMITTED fetch is used and a producer's batches are
aborted when its next marker is an ABORT. Both are Kafka's own fetch semantics, so this works against Apache
Kafka as against KoP. It reads the range's bytes once more (headers only are parsed): on a topic with no
transactional batch it finds nothing and costs one pass over the data.

Offset JSON follows Spark's startingOffsets format: {"topic": {"partition": offset}} with -2 = earliest and
-1 = latest; for one topic the bare {"partition": offset} form is accepted too.
"""

from __future__ import annotations

import heapq
import json
import socket
import struct
from dataclasses import dataclass, field
from typing import Any

EARLIEST = -2
LATEST = -1

READ_UNCOMMITTED = "read_uncommitted"
READ_COMMITTED = "read_committed"
ISOLATION_LEVELS = (READ_COMMITTED, READ_UNCOMMITTED)

#: Offset labels of scan_transactions.
CONTROL = "control"
ABORTED = "aborted"


class PipelineError(Exception):
    """A problem with what the user asked for (unknown topic, bad offsets JSON, ...): reported, not a traceback."""


@dataclass(frozen=True, slots=True)
class TopicSnapshot:
    """A topic's partitions and their [log start, log end) offsets at one moment, plus its cleanup.policy."""

    topic: str
    cleanup_policy: str
    log_start: dict[int, int]
    log_end: dict[int, int]  # the high watermark
    #: the last stable offset (ListOffsets READ_COMMITTED): the first offset of the oldest open transaction, else
    #: the high watermark. What read_committed consumers (and an audit reading read_committed) read up to.
    stable_end: dict[int, int] = field(default_factory=dict)

    def end(self, partition: int, read_committed: bool) -> int:
        """Where a reader of this isolation level stops: the last stable offset or the high watermark."""
        if read_committed:
            return self.stable_end.get(partition, self.log_end[partition])
        return self.log_end[partition]

    @property
    def partitions(self) -> list[int]:
        return sorted(self.log_end)

    @property
    def compacted(self) -> bool:
        return "compact" in self.cleanup_policy.replace(" ", "").split(",")


def _admin(bootstrap: str) -> Any:
    from kafka.admin import KafkaAdminClient

    return KafkaAdminClient(bootstrap_servers=bootstrap, client_id="kop-pipeline", request_timeout_ms=30000)


def snapshot_topic(bootstrap: str, topic: str) -> TopicSnapshot:
    """Partitions, earliest and latest offsets, and cleanup.policy of `topic`."""
    from kafka import IsolationLevel, TopicPartition
    from kafka.admin import ConfigResource, ConfigResourceType, OffsetSpec
    from kafka.errors import KafkaError

    admin = _admin(bootstrap)
    try:
        try:
            described = admin.describe_topics([topic])
        except KafkaError as e:
            raise PipelineError(f"topic {topic!r}: {e}") from e
        if not described or described[0].get("error_code", 0) != 0:
            code = described[0].get("error_code") if described else "no answer"
            raise PipelineError(f"topic {topic!r} does not exist at {bootstrap} (Metadata error {code})")
        partitions = sorted(p["partition_index"] for p in described[0]["partitions"])
        tps = [TopicPartition(topic, p) for p in partitions]
        earliest = admin.list_partition_offsets({tp: OffsetSpec.EARLIEST for tp in tps})
        latest = admin.list_partition_offsets({tp: OffsetSpec.LATEST for tp in tps})
        stable = admin.list_partition_offsets({tp: OffsetSpec.LATEST for tp in tps},
                                              isolation_level=IsolationLevel.READ_COMMITTED)
        configs = admin.describe_configs(
            [ConfigResource(ConfigResourceType.TOPIC, topic, ["cleanup.policy"])], config_filter="all"
        )
        entry = configs.get("topic", {}).get(topic, {}).get("cleanup.policy")
        policy = str(entry["value"]) if entry and entry.get("value") is not None else "delete"
        return TopicSnapshot(
            topic=topic,
            cleanup_policy=policy,
            log_start={tp.partition: earliest[tp].offset for tp in tps},
            log_end={tp.partition: latest[tp].offset for tp in tps},
            stable_end={tp.partition: stable[tp].offset for tp in tps},
        )
    finally:
        admin.close()


def parse_offsets_json(text: str | None, topic: str) -> dict[int, int]:
    """{"partition": offset} for `topic` from Spark-style offsets JSON (or the bare per-partition form)."""
    if text is None or not text.strip():
        return {}
    try:
        data = json.loads(text)
    except json.JSONDecodeError as e:
        raise PipelineError(f"offsets JSON {text!r}: {e}") from e
    if not isinstance(data, dict):
        raise PipelineError(f"offsets JSON {text!r}: expected an object")
    if topic in data and isinstance(data[topic], dict):
        data = data[topic]
    elif data and all(isinstance(v, dict) for v in data.values()):
        raise PipelineError(f"offsets JSON {text!r} names topics {sorted(data)}, not {topic!r}")
    out: dict[int, int] = {}
    for k, v in data.items():
        try:
            p, o = int(k), int(v)
        except (TypeError, ValueError) as e:
            raise PipelineError(f"offsets JSON {text!r}: partition {k!r} -> {v!r} is not integer -> integer") from e
        if o < EARLIEST:
            raise PipelineError(f"offsets JSON: partition {p} offset {o} (use -2 for earliest, -1 for latest)")
        out[p] = o
    return out


def resolve_range(
    snap: TopicSnapshot, from_offsets: dict[int, int], to_offsets: dict[int, int], read_committed: bool = False,
) -> dict[int, tuple[int, int]]:
    """Per partition the half-open offset range [start, end) to read: earliest/latest by default, -2/-1 in
    the JSON resolved against the snapshot. Starting below the log start is allowed (that is how an operator
    asks "is anything missing since offset 0?"); reading past the log end is not, as nothing can be there.
    read_committed: "latest" is the last stable offset, and nothing past it can be read (an open transaction
    holds read_committed readers there; Spark would wait for it until its poll timeout)."""
    unknown = sorted((set(from_offsets) | set(to_offsets)) - set(snap.partitions))
    if unknown:
        raise PipelineError(f"topic {snap.topic!r} has partitions {snap.partitions}, not {unknown}")

    def resolve(value: int, p: int) -> int:
        return snap.log_start[p] if value == EARLIEST else snap.end(p, read_committed) if value == LATEST else value

    out: dict[int, tuple[int, int]] = {}
    for p in snap.partitions:
        start = resolve(from_offsets.get(p, EARLIEST), p)
        end = resolve(to_offsets.get(p, LATEST), p)
        if end > snap.log_end[p]:
            raise PipelineError(f"partition {p}: end offset {end} is past the log end offset {snap.log_end[p]}")
        if end > snap.end(p, read_committed):
            raise PipelineError(
                f"partition {p}: end offset {end} is past the last stable offset {snap.end(p, True)} (an open "
                "transaction); read_committed cannot read past it (--isolation-level read_uncommitted can)")
        if start > end:
            raise PipelineError(f"partition {p}: start offset {start} is after the end offset {end}")
        out[p] = (start, end)
    return out


# ---------------------------------------------------------------------------------------------------------------
# Transaction markers and aborted records (scan_transactions)

_ABORT = 0  # control record type: 0 ABORT, 1 COMMIT
_FETCH_VERSION = 12  # the last version with topic names (13 uses ids); Kafka 4.x serves 4-17, KoP 4-12
_FETCH_MAX_BYTES = 8 << 20


@dataclass(frozen=True, slots=True)
class Batch:
    """What the scan uses of one record batch's header."""

    base_offset: int
    last_offset: int
    producer_id: int
    transactional: bool
    control: bool
    abort: bool = False  # control batches: an ABORT marker (else COMMIT)


class TxnClassifier:
    """Labels the offsets of one partition's batches, fed in offset order, as CONTROL or ABORTED (sans-IO).

    feed_committed: batches of a READ_COMMITTED fetch with that response's aborted transactions - Kafka's
    consumer rule: a producer joins the aborted set when the next batch reaches the first offset of one of its
    aborted transactions, its transactional batches are aborted until its ABORT marker leaves the set.
    feed_uncommitted: batches past the last stable offset (no aborted list there) - a producer's transactional
    batches wait for its next marker and are aborted if that is an ABORT; those still waiting at the end belong
    to open transactions and are left unlabelled. Labels are clipped to [start, end) and merged into ranges."""

    def __init__(self, start: int, end: int) -> None:
        self.start, self.end = start, end
        self.ranges: list[tuple[int, int, str]] = []  # (first, last, kind), inclusive, in offset order
        self._heap: list[tuple[int, int]] = []  # (first offset, producer id) of aborted transactions
        self._known: set[tuple[int, int]] = set()
        self._aborting: set[int] = set()
        self._pending: dict[int, list[tuple[int, int]]] = {}

    def _label(self, first: int, last: int, kind: str) -> None:
        first, last = max(first, self.start), min(last, self.end - 1)
        if first > last:
            return
        if self.ranges and self.ranges[-1][2] == kind and self.ranges[-1][1] + 1 == first:
            self.ranges[-1] = (self.ranges[-1][0], last, kind)
        else:
            self.ranges.append((first, last, kind))

    def feed_committed(self, batches: list[Batch], aborted: list[tuple[int, int]]) -> None:
        """aborted: (producer id, first offset) pairs from the fetch response."""
        for pid, first in aborted:
            if (first, pid) not in self._known:
                self._known.add((first, pid))
                heapq.heappush(self._heap, (first, pid))
        for b in batches:
            while self._heap and self._heap[0][0] <= b.last_offset:
                self._aborting.add(heapq.heappop(self._heap)[1])
            if b.control:
                if b.abort:
                    self._aborting.discard(b.producer_id)
                self._label(b.base_offset, b.last_offset, CONTROL)
            elif b.transactional and b.producer_id in self._aborting:
                self._label(b.base_offset, b.last_offset, ABORTED)

    def feed_uncommitted(self, batches: list[Batch]) -> None:
        for b in batches:
            if b.control:
                waiting = self._pending.pop(b.producer_id, [])
                self._aborting.discard(b.producer_id)
                if b.abort:
                    for first, last in waiting:
                        self._label(first, last, ABORTED)
                self._label(b.base_offset, b.last_offset, CONTROL)
            elif b.transactional:
                self._pending.setdefault(b.producer_id, []).append((b.base_offset, b.last_offset))
        # A producer still aborting at the boundary (its ABORT marker lies past the LSO) had its batches
        # below the boundary labelled already; its batches after it wait for that marker like the others.


def batches_of(records: Any) -> list[Batch]:
    """Batch headers of a fetched records blob; only control batches' (one, uncompressed) record is read."""
    from kop.protocol.records import control_record_type, decode_records, iter_batches

    out = []
    for h, raw in iter_batches(records or b"", check_crc=False, fresh=False):
        abort = False
        if h.is_control:
            recs = decode_records(raw)
            abort = bool(recs) and control_record_type(recs[0].key) == _ABORT
        out.append(Batch(h.base_offset, h.last_offset, h.producer_id, h.is_transactional, h.is_control, abort))
    return out


class _Conn:
    """One plaintext connection speaking the kop.protocol codec (the audit's client, not the broker's)."""

    def __init__(self, host: str, port: int, timeout: float = 60) -> None:
        self.sock = socket.create_connection((host, port), timeout=timeout)
        self.cid = 0

    def call(self, key: int, version: int, **fields: Any) -> Any:
        from kop.protocol import api_info, decode_response, encode_request

        self.cid += 1
        self.sock.sendall(encode_request(key, version, self.cid, "kop-pipeline", api_info(key).request_class(**fields)))
        (size,) = struct.unpack(">i", self._exact(4))
        cid, resp = decode_response(key, version, self._exact(size))
        if cid != self.cid:
            raise PipelineError(f"broker answered correlation id {cid} to request {self.cid}")
        return resp

    def _exact(self, n: int) -> bytes:
        buf = bytearray()
        while len(buf) < n:
            chunk = self.sock.recv(min(n - len(buf), 1 << 20))
            if not chunk:
                raise PipelineError("the broker closed the connection during the transaction scan")
            buf += chunk
        return bytes(buf)

    def close(self) -> None:
        self.sock.close()


def _leaders(bootstrap: str, topic: str) -> dict[int, tuple[str, int]]:
    """partition -> (host, port) of its leader, from a Metadata v12 request."""
    from kop.protocol.messages import MetadataRequest

    host, port = bootstrap.split(",")[0].strip().rsplit(":", 1)
    conn = _Conn(host, int(port))
    try:
        meta = conn.call(3, 12, topics=[MetadataRequest.MetadataRequestTopic(name=topic)], allow_auto_topic_creation=False,
                         include_topic_authorized_operations=False)
    finally:
        conn.close()
    brokers = {b.node_id: (b.host, b.port) for b in meta.brokers}
    (t,) = meta.topics
    if t.error_code:
        raise PipelineError(f"topic {topic!r}: Metadata error {t.error_code}")
    return {p.partition_index: brokers[p.leader_id] for p in t.partitions if p.leader_id in brokers}


def _fetch(conn: _Conn, topic: str, partition: int, offset: int, committed: bool) -> Any:
    from kop.protocol.messages import FetchRequest

    req = FetchRequest
    resp = conn.call(1, _FETCH_VERSION, replica_id=-1, max_wait_ms=0, min_bytes=0, max_bytes=_FETCH_MAX_BYTES,
                     isolation_level=1 if committed else 0, session_id=0, session_epoch=-1, topics=[
                         req.FetchTopic(topic=topic, partitions=[req.FetchTopic.FetchPartition(
                             partition=partition, fetch_offset=offset, partition_max_bytes=_FETCH_MAX_BYTES)])])
    if resp.error_code:
        raise PipelineError(f"Fetch of {topic}-{partition}: error {resp.error_code}")
    data = resp.responses[0].partitions[0]
    if data.error_code:
        # OFFSET_OUT_OF_RANGE (1) here means retention or DeleteRecords moved the log start during the audit.
        raise PipelineError(f"Fetch of {topic}-{partition} at offset {offset}: error {data.error_code} "
                            "(if 1, OFFSET_OUT_OF_RANGE: the log start moved during the audit; run it again)")
    return data


def _scan_partition(conn: _Conn, topic: str, partition: int, start: int, end: int, stable: int) -> TxnClassifier:
    """READ_COMMITTED from start to min(end, stable), READ_UNCOMMITTED on to end."""
    c = TxnClassifier(start, end)
    offset = start
    for committed, stop in ((True, min(end, stable)), (False, end)):
        while offset < stop:
            data = _fetch(conn, topic, partition, offset, committed)
            batches = [b for b in batches_of(data.records) if b.last_offset >= offset]
            if not batches:
                break  # nothing more at this isolation level (the log start moved, or the LSO was reached)
            if committed:
                c.feed_committed(batches, [(a.producer_id, a.first_offset) for a in data.aborted_transactions or ()])
            else:
                c.feed_uncommitted(batches)
            offset = batches[-1].last_offset + 1
        offset = max(offset, min(end, stable))
    return c


def scan_transactions(bootstrap: str, topic: str, ranges: dict[int, tuple[int, int]],
                      snap: TopicSnapshot) -> dict[int, list[tuple[int, int, str]]]:
    """partition -> [(first, last, CONTROL | ABORTED)] inside its [start, end) range (module docstring)."""
    leaders = _leaders(bootstrap, topic)
    conns: dict[tuple[str, int], _Conn] = {}
    out: dict[int, list[tuple[int, int, str]]] = {}
    try:
        for p, (start, end) in sorted(ranges.items()):
            if start >= end:
                out[p] = []
                continue
            if p not in leaders:
                raise PipelineError(f"partition {p} of {topic!r} has no leader")
            addr = leaders[p]
            if addr not in conns:
                conns[addr] = _Conn(*addr)
            stable = snap.stable_end.get(p, snap.log_end[p])
            # Below the log start there is nothing to fetch (the audit calls those offsets below-log-start).
            c = _scan_partition(conns[addr], topic, p, max(start, snap.log_start[p]), end, stable)
            out[p] = c.ranges
    finally:
        for conn in conns.values():
            conn.close()
    return out
