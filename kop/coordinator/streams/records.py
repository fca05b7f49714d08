"""The records of KIP-1071 streams groups in __consumer_offsets, in Apache Kafka 4.4's layouts (its
group-coordinator StreamsGroup*Key/Value schemas, read from the 4.4.0 jar's generated classes), so a restart or a
coordinator move replays them and Kafka's own tools (kafka-dump-log --offsets-decoder) read what we write. Keys
are non-flexible (int16 length strings) and start with the record type; values start with an int16 version (0)
and are flexible (compact strings and arrays, a tagged-field section). A null value is a tombstone.

| type | key            | value (version 0)                                                                   |
|------|----------------|-------------------------------------------------------------------------------------|
| 17   | group          | Epoch int32, MetadataHash int64 (tags 0-3: topology validation and description     |
|      |                | epochs, last assignment configs - not written, skipped on read)                     |
| 19   | group, member  | InstanceId?, RackId?, ClientId, ClientHost, RebalanceTimeoutMs, TopologyEpoch,      |
|      |                | ProcessId, UserEndpoint? {Host, Port uint16}, ClientTags [Key, Value]               |
| 20   | group          | AssignmentEpoch int32                                                               |
| 21   | group, member  | ActiveTasks, StandbyTasks, WarmupTasks: each [SubtopologyId, Partitions int32[]]    |
| 22   | group, member  | MemberEpoch, PreviousMemberEpoch, State int8, Active/Standby/WarmupTasks,            |
|      |                | Active/Standby/WarmupTasksPendingRevocation                                         |
| 23   | group          | Epoch, Subtopologies [SubtopologyId, SourceTopics[], SourceTopicRegex[],            |
|      |                | StateChangelogTopics [TopicInfo], RepartitionSinkTopics[], RepartitionSourceTopics  |
|      |                | [TopicInfo], CopartitionGroups [int16[] x3]]; TopicInfo = Name, Partitions,         |
|      |                | ReplicationFactor int16, TopicConfigs [Key, Value]                                  |

A group is written as the difference between what it is now and what was last written for it (`snapshot`,
`diff`): the records of what changed, tombstones for what is gone. Warm-up tasks and standby tasks pending
revocation are written empty (none here); copartition groups empty (not kept).
"""

from __future__ import annotations

from collections.abc import Iterable

from kop.coordinator.records import RecordError, _Reader, _Writer
from kop.coordinator.streams.assignor import Tasks
from kop.coordinator.streams.topology import Subtopology, TopicInfo, Topology

METADATA, MEMBER_METADATA, TARGET_METADATA, TARGET_MEMBER, CURRENT_ASSIGNMENT, TOPOLOGY = 17, 19, 20, 21, 22, 23
TYPES = (METADATA, MEMBER_METADATA, TARGET_METADATA, TARGET_MEMBER, CURRENT_ASSIGNMENT, TOPOLOGY)
_WITH_MEMBER = {MEMBER_METADATA, TARGET_MEMBER, CURRENT_ASSIGNMENT}
_WRITE_ORDER = (METADATA, TOPOLOGY, MEMBER_METADATA, TARGET_MEMBER, TARGET_METADATA, CURRENT_ASSIGNMENT)
_TOMBSTONE_ORDER = (CURRENT_ASSIGNMENT, TARGET_MEMBER, MEMBER_METADATA, TARGET_METADATA, TOPOLOGY, METADATA)


def encode_key(kind: int, group: str, member: str | None = None) -> bytes:
    w = _Writer(False)
    w.int16(kind)
    w.string(group)
    if kind in _WITH_MEMBER:
        w.string(member or "")
    return bytes(w.out)


def decode_key(data: bytes | memoryview) -> tuple[int, str, str | None]:
    r = _Reader(data, 0, False)
    kind = r.int16()
    if kind not in TYPES:
        raise RecordError(f"{kind} is not a streams group record type")
    group = r.string()
    member = r.string() if kind in _WITH_MEMBER else None
    return kind, group, member


# ---------------------------------------------------------------------------------------------- writing
def _start() -> _Writer:
    w = _Writer(True)
    w.int16(0)
    return w


def _done(w: _Writer) -> bytes:
    w.no_tags()
    return bytes(w.out)


def _strings(w: _Writer, xs: Iterable[str]) -> None:
    xs = list(xs)
    w.array_len(len(xs))
    for x in xs:
        w.string(x)


def _kvs(w: _Writer, kvs: Iterable[tuple[str, str]]) -> None:
    kvs = list(kvs)
    w.array_len(len(kvs))
    for k, v in kvs:
        w.string(k)
        w.string(v)
        w.no_tags()


def _tasks(w: _Writer, tasks: Tasks) -> None:
    by: dict[str, list[int]] = {}
    for sub, p in sorted(tasks):
        by.setdefault(sub, []).append(p)
    w.array_len(len(by))
    for sub, ps in by.items():
        w.string(sub)
        w.array_len(len(ps))
        for p in ps:
            w.int32(p)
        w.no_tags()


def _topic_infos(w: _Writer, infos: Iterable[TopicInfo]) -> None:
    infos = list(infos)
    w.array_len(len(infos))
    for t in infos:
        w.string(t.name)
        w.int32(t.partitions)
        w.int16(t.replication_factor)
        _kvs(w, t.configs)
        w.no_tags()


def metadata_value(epoch: int) -> bytes:
    w = _start()
    w.int32(epoch)
    w.int64(0)  # MetadataHash: Kafka's hash of the subscribed topics' metadata; not used here
    return _done(w)


def topology_value(t: Topology) -> bytes:
    w = _start()
    w.int32(t.epoch)
    w.array_len(len(t.subtopologies))
    for s in t.subtopologies:
        w.string(s.subtopology_id)
        _strings(w, s.source_topics)
        _strings(w, s.source_topic_regex)
        _topic_infos(w, s.state_changelog_topics)
        _strings(w, s.repartition_sink_topics)
        _topic_infos(w, s.repartition_source_topics)
        w.array_len(0)  # CopartitionGroups
        w.no_tags()
    return _done(w)


def member_value(instance_id: str | None, rack_id: str | None, client_id: str, client_host: str,
                 rebalance_timeout_ms: int, topology_epoch: int, process_id: str,
                 user_endpoint: tuple[str, int] | None, client_tags: dict[str, str]) -> bytes:
    w = _start()
    w.string(instance_id)
    w.string(rack_id)
    w.string(client_id)
    w.string(client_host)
    w.int32(rebalance_timeout_ms)
    w.int32(topology_epoch)
    w.string(process_id)
    if user_endpoint is None:
        w.out.append(0xFF)  # a null struct: int8 -1
    else:
        w.out.append(1)
        w.string(user_endpoint[0])
        w.out += user_endpoint[1].to_bytes(2, "big")
        w.no_tags()
    _kvs(w, sorted(client_tags.items()))
    return _done(w)


def target_metadata_value(assignment_epoch: int) -> bytes:
    w = _start()
    w.int32(assignment_epoch)
    return _done(w)


def target_member_value(active: Tasks, standby: Tasks = frozenset()) -> bytes:
    w = _start()
    for tasks in (active, standby, frozenset()):
        _tasks(w, tasks)
    return _done(w)


def current_value(member_epoch: int, previous_epoch: int, state: int, active: Tasks, revoking: Tasks,
                  standby: Tasks = frozenset()) -> bytes:
    w = _start()
    w.int32(member_epoch)
    w.int32(previous_epoch)
    w.out.append(state & 0xFF)
    for tasks in (active, standby, frozenset(), revoking, frozenset(), frozenset()):
        _tasks(w, tasks)
    return _done(w)


def diff(old: dict[bytes, bytes], new: dict[bytes, bytes]) -> list[tuple[bytes, bytes | None]]:
    """The records taking a group from what was written (`old`) to what it is (`new`): changed values in Kafka's
    order of kinds, then tombstones of the keys gone (a member's assignment before its metadata, as Kafka)."""
    def kind(k: bytes) -> int:
        return int.from_bytes(k[:2], "big")
    out: list[tuple[bytes, bytes | None]] = []
    for t in _WRITE_ORDER:
        out += [(k, v) for k, v in new.items() if kind(k) == t and old.get(k) != v]
    for t in _TOMBSTONE_ORDER:
        out += [(k, None) for k in old if kind(k) == t and k not in new]
    return out


# ---------------------------------------------------------------------------------------------- reading
def _reader(data: bytes | memoryview) -> _Reader:
    version = _Reader(data, 0, False).int16()
    if version != 0:
        raise RecordError(f"unknown streams group value version {version}")
    return _Reader(data, 2, True)


def _read_strings(r: _Reader) -> tuple[str, ...]:
    return tuple(r.string() for _ in range(r.array_len()))


def _read_kvs(r: _Reader) -> tuple[tuple[str, str], ...]:
    out = []
    for _ in range(r.array_len()):
        out.append((r.string(), r.string()))
        r.skip_tags()
    return tuple(out)


def _read_tasks(r: _Reader) -> Tasks:
    out: set[tuple[str, int]] = set()
    for _ in range(r.array_len()):
        sub = r.string()
        out.update((sub, r.int32()) for _ in range(r.array_len()))
        r.skip_tags()
    return frozenset(out)


def _read_topic_infos(r: _Reader) -> tuple[TopicInfo, ...]:
    out = []
    for _ in range(r.array_len()):
        name, partitions, rf = r.string(), r.int32(), r.int16()
        out.append(TopicInfo(name, partitions, rf, _read_kvs(r)))
        r.skip_tags()
    return tuple(out)


def read_epoch(data: bytes | memoryview) -> int:
    """The leading int32 of a type 17 or 20 value (group epoch, assignment epoch)."""
    return _reader(data).int32()


def read_topology(data: bytes | memoryview) -> Topology:
    r = _reader(data)
    epoch = r.int32()
    subs = []
    for _ in range(r.array_len()):
        sid, sources, regex = r.string(), _read_strings(r), _read_strings(r)
        changelogs, sinks, repartitions = _read_topic_infos(r), _read_strings(r), _read_topic_infos(r)
        for _ in range(r.array_len()):  # CopartitionGroups: not kept
            for _ in range(3):
                for _ in range(r.array_len()):
                    r.int16()
            r.skip_tags()
        r.skip_tags()
        subs.append(Subtopology(sid, sources, sinks, changelogs, repartitions, regex))
    return Topology(epoch, tuple(subs))


def read_member(data: bytes | memoryview) -> dict[str, object]:
    r = _reader(data)
    out: dict[str, object] = {"instance_id": r.string(True), "rack_id": r.string(True), "client_id": r.string(),
                              "client_host": r.string(), "rebalance_timeout_ms": r.int32(),
                              "topology_epoch": r.int32(), "process_id": r.string()}
    marker = r._take(1)[0]
    endpoint = None
    if marker != 0xFF:
        host = r.string()
        endpoint = (host, int.from_bytes(r._take(2), "big"))
        r.skip_tags()
    out["user_endpoint"] = endpoint
    out["client_tags"] = dict(_read_kvs(r))
    return out


def read_target_member(data: bytes | memoryview) -> tuple[Tasks, Tasks]:
    """(active tasks, standby tasks)."""
    r = _reader(data)
    return _read_tasks(r), _read_tasks(r)


def read_current(data: bytes | memoryview) -> tuple[int, int, int, Tasks, Tasks, Tasks]:
    """(member epoch, previous epoch, state, active tasks, active tasks pending revocation, standby tasks)."""
    r = _reader(data)
    epoch, previous, state = r.int32(), r.int32(), r._take(1)[0]
    active, standby = _read_tasks(r), _read_tasks(r)
    _read_tasks(r)  # warm-up
    revoking = _read_tasks(r)
    return epoch, previous, state, active, revoking, standby
