"""Issue 17: the field-by-field differential. Every client family's basic producer, consumer and admin paths
(confluent-kafka, kafka-python, aiokafka, the Java console tools) run through a small recording proxy, once
against the target and once against Apache Kafka 4.x; the proxy decodes every request and response with
kop.protocol's codec, and the two recordings are compared:

* null-ness: for every (api, version, field path) both brokers answered, the field must have been null
  on both or on neither, and set on both or on neither - the check that catches the next `records=None`
  (Fetch answered partitions in error with null records; librdkafka dropped those answers);
* field by field: for the APIs whose answers do not depend on timing (Metadata for named topics,
  CreateTopics, DescribeConfigs of topics, DescribeCluster, FindCoordinator, ListOffsets, OffsetFetch), a
  request both brokers got (same api, version and normalised request) must have got one identical
  normalised answer on both sides.

Normalising removes what legitimately differs: node ids, hosts and ports, cluster id, topic ids, throttle
times, timestamps, leader epochs, producer/member ids, error message texts (their presence is kept), config
documentation, synonyms and default values (the source of configs set on the topic is kept), the order of
lists of structs (Kafka lists partitions in hash-map order), and topics other tests made on the shared
Kafka broker.

So that both brokers see the same request versions, the proxy caps Apache Kafka's ApiVersions answer to the
ranges ours advertises; it also rewrites broker addresses (Metadata, FindCoordinator, DescribeCluster) to
itself so that clients keep talking through it. With the `kafka` target this compares Apache Kafka with
itself (the normalisation must be stable).
"""

from __future__ import annotations

import asyncio
import socket
import struct
import threading
import time
import uuid
from collections import defaultdict
from typing import Any

from kop.kafka.apis import build_table
from kop.protocol import decode_request, decode_request_header, decode_response, encode_response
from kop.protocol.model import Struct
from tests.support.net import free_port

_I32 = struct.Struct(">i")
API_VERSIONS, METADATA, FIND_COORDINATOR, DESCRIBE_CLUSTER = 18, 3, 10, 60
DETERMINISTIC = {3, 19, 32, 60, 10, 2, 9}


class Exchange:
    __slots__ = ("api_key", "version", "request", "response")

    def __init__(self, api_key: int, version: int, request: Any, response: Any) -> None:
        self.api_key = api_key
        self.version = version
        self.request = request
        self.response = response


class RecordingProxy:
    """A TCP proxy in front of one broker that decodes and records every exchange (threads, blocking I/O)."""

    def __init__(self, upstream: str) -> None:
        host, port = upstream.rsplit(":", 1)
        self.upstream = (host, int(port))
        self.port = free_port()
        self.exchanges: list[Exchange] = []
        self.failures: list[str] = []
        self._caps = {a.key: (a.min_version, a.max_version) for a in build_table().values()}
        self._sock = socket.create_server(("127.0.0.1", self.port))
        self._closed = False
        self._lock = threading.Lock()
        threading.Thread(target=self._accept, daemon=True).start()

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"

    def close(self) -> None:
        self._closed = True
        self._sock.close()

    def _accept(self) -> None:
        while not self._closed:
            try:
                client, _ = self._sock.accept()
            except OSError:
                return
            try:
                up = socket.create_connection(self.upstream, timeout=30)
            except OSError:
                client.close()
                continue
            up.settimeout(None)
            pending: dict[int, tuple[int, int, Any]] = {}
            threading.Thread(target=self._requests, args=(client, up, pending), daemon=True).start()
            threading.Thread(target=self._responses, args=(up, client, pending), daemon=True).start()

    @staticmethod
    def _frame(s: socket.socket) -> bytes | None:
        head = _recv(s, 4)
        if head is None:
            return None
        return _recv(s, _I32.unpack(head)[0])

    def _requests(self, client: socket.socket, up: socket.socket, pending: dict) -> None:
        try:
            while (frame := self._frame(client)) is not None:
                header, pos = decode_request_header(frame)
                try:
                    req = decode_request(header.api_key, header.api_version, frame, pos)
                except Exception as e:  # recorded, forwarded anyway
                    req = None
                    self.failures.append(f"request {header.api_key} v{header.api_version}: {e!r}")
                pending[header.correlation_id] = (header.api_key, header.api_version, req)
                up.sendall(_I32.pack(len(frame)) + frame)
        except OSError:
            pass
        finally:
            _close(client, up)

    def _responses(self, up: socket.socket, client: socket.socket, pending: dict) -> None:
        try:
            while (frame := self._frame(up)) is not None:
                (corr,) = _I32.unpack_from(frame, 0)
                key, version, req = pending.pop(corr, (None, None, None))
                out = _I32.pack(len(frame)) + frame
                if key is not None:
                    try:
                        _, resp = decode_response(key, version, frame)
                    except Exception as e:
                        self.failures.append(f"response {key} v{version}: {e!r}")
                    else:
                        with self._lock:
                            self.exchanges.append(Exchange(key, version, req, resp))
                        if self._rewrite(key, resp):
                            out = b"".join(bytes(p) for p in encode_response(key, version, corr, resp))
                client.sendall(out)
        except OSError:
            pass
        finally:
            _close(client, up)

    def _rewrite(self, key: int, resp: Any) -> bool:
        """Point clients back at the proxy; cap ApiVersions to our ranges. True when `resp` was changed."""
        if key == API_VERSIONS:
            keep = []
            for a in resp.api_keys or []:
                cap = self._caps.get(a.api_key)
                if cap is None:
                    continue
                a.min_version = max(a.min_version, cap[0])
                a.max_version = min(a.max_version, cap[1])
                if a.min_version <= a.max_version:
                    keep.append(a)
            resp.api_keys = keep
            return True
        if key == METADATA:
            for b in resp.brokers or []:
                b.host, b.port = "127.0.0.1", self.port
            return True
        if key == DESCRIBE_CLUSTER:
            for b in resp.brokers or []:
                b.host, b.port = "127.0.0.1", self.port
            return True
        if key == FIND_COORDINATOR:
            if resp.host:
                resp.host, resp.port = "127.0.0.1", self.port
            for c in resp.coordinators or []:
                if c.host:
                    c.host, c.port = "127.0.0.1", self.port
            return True
        return False


def _recv(s: socket.socket, n: int) -> bytes | None:
    buf = bytearray()
    while len(buf) < n:
        try:
            chunk = s.recv(n - len(buf))
        except OSError:
            return None
        if not chunk:
            return None
        buf += chunk
    return bytes(buf)


def _close(*socks: socket.socket) -> None:
    for s in socks:
        try:
            s.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        s.close()


# ------------------------------------------------------------------------------------------- workloads

def _workload(bootstrap: str, topic: str, java_tools: Any) -> None:
    """The basic paths of every client family, on `topic` (and topic-java, topic-kp, topic-aio)."""
    _confluent(bootstrap, topic)
    _authorized_operations(bootstrap, topic)
    _kafka_python(bootstrap, topic + "-kp")
    asyncio.run(_aiokafka(bootstrap, topic + "-aio"))
    _java(bootstrap, topic + "-java", java_tools)


def _confluent(bootstrap: str, topic: str) -> None:
    from confluent_kafka import Consumer, Producer, TopicCollection, TopicPartition
    from confluent_kafka.admin import AdminClient, ConfigResource, NewTopic

    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(topic, 2, 1, config={"cleanup.policy": "delete", "retention.ms": "3600000",
                                                       "compression.type": "producer"})])[topic].result(60)
    _wait_leaders(admin, topic, 2)
    r = ConfigResource("topic", topic)
    admin.describe_configs([r])[r].result(60)
    admin.describe_cluster(include_authorized_operations=True).result(60)
    admin.describe_topics(TopicCollection([topic]), include_authorized_operations=True)[topic].result(60)
    p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 0})
    for i in range(20):
        p.produce(topic, key=b"k%d" % i, value=b"v%d" % i, partition=i % 2)
    assert p.flush(60) == 0
    group = f"diff-{uuid.uuid4().hex[:6]}"
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "auto.offset.reset": "earliest",
                  "enable.auto.commit": False})
    c.subscribe([topic])
    _read(c, 20)
    c.commit(asynchronous=False)
    c.close()
    # out of range: past the end, reset to earliest (the null-records case)
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": group + "-oor", "auto.offset.reset": "earliest"})
    c.assign([TopicPartition(topic, 0, 500)])
    _read(c, 10)
    c.close()


def _authorized_operations(bootstrap: str, topic: str) -> None:
    """Raw Metadata v10 and DescribeCluster v1 asking for authorized operations (Java's AdminClient asks
    through these; librdkafka through Metadata only)."""
    from kop.protocol import api_info, encode_request

    host, port = bootstrap.rsplit(":", 1)
    M, D = api_info(METADATA).request_class, api_info(DESCRIBE_CLUSTER).request_class
    with socket.create_connection((host, int(port)), timeout=30) as s:
        for corr, (key, version, req) in enumerate([
            (METADATA, 10, M(topics=[M.MetadataRequestTopic(topic_id=b"\0" * 16, name=topic)],
                             allow_auto_topic_creation=False, include_cluster_authorized_operations=True,
                             include_topic_authorized_operations=True)),
            (DESCRIBE_CLUSTER, 1, D(include_cluster_authorized_operations=True, endpoint_type=1)),
            (DESCRIBE_CLUSTER, 0, D(include_cluster_authorized_operations=False)),
        ]):
            s.sendall(encode_request(key, version, corr, "differential", req))
            head = _recv(s, 4)
            assert head is not None and _recv(s, _I32.unpack(head)[0]) is not None


def _wait_leaders(admin: Any, topic: str, n: int) -> None:
    deadline = time.monotonic() + 60
    while True:
        md = admin.list_topics(topic, timeout=10).topics.get(topic)
        if md is not None and md.error is None and len(md.partitions) == n and all(
                p.leader >= 0 for p in md.partitions.values()):
            return
        assert time.monotonic() < deadline, f"{topic} has no leaders"
        time.sleep(0.2)


def _read(c: Any, n: int) -> None:
    got = 0
    deadline = time.monotonic() + 120
    while got < n:
        assert time.monotonic() < deadline, f"read {got} of {n}"
        m = c.poll(0.5)
        if m is not None and not m.error():
            got += 1


def _kafka_python(bootstrap: str, topic: str) -> None:
    from confluent_kafka.admin import AdminClient
    from kafka import KafkaConsumer, KafkaProducer
    from kafka.admin import ConfigResource, ConfigResourceType, KafkaAdminClient, NewTopic

    admin = KafkaAdminClient(bootstrap_servers=bootstrap)
    admin.create_topics([NewTopic(topic, 1, 1, topic_configs={"max.message.bytes": "2000000"})])
    _wait_leaders(AdminClient({"bootstrap.servers": bootstrap}), topic, 1)  # Kafka's metadata may lag its create
    admin.describe_configs([ConfigResource(ConfigResourceType.TOPIC, topic)])
    admin.close()
    p = KafkaProducer(bootstrap_servers=bootstrap)
    for i in range(10):
        p.send(topic, key=b"k%d" % i, value=b"v%d" % i, partition=0)
    p.flush()
    p.close()
    c = KafkaConsumer(topic, bootstrap_servers=bootstrap, group_id=f"kp-{uuid.uuid4().hex[:6]}",
                      auto_offset_reset="earliest", consumer_timeout_ms=1000)
    got = 0
    deadline = time.monotonic() + 120
    while got < 10 and time.monotonic() < deadline:
        for _ in c:
            got += 1
    c.commit()
    c.close()
    assert got >= 10


async def _aiokafka(bootstrap: str, topic: str) -> None:
    from aiokafka import AIOKafkaConsumer, AIOKafkaProducer

    p = AIOKafkaProducer(bootstrap_servers=bootstrap)
    await p.start()
    try:
        for i in range(10):
            await p.send_and_wait(topic, key=b"k%d" % i, value=b"v%d" % i, partition=0)
    finally:
        await p.stop()
    c = AIOKafkaConsumer(topic, bootstrap_servers=bootstrap, group_id=f"aio-{uuid.uuid4().hex[:6]}",
                         auto_offset_reset="earliest")
    await c.start()
    try:
        got = 0
        while got < 10:
            batch = await asyncio.wait_for(c.getmany(timeout_ms=500), 120)
            got += sum(len(v) for v in batch.values())
        await c.commit()
    finally:
        await c.stop()


def _java(bootstrap: str, topic: str, java_tools: Any) -> None:
    java_tools.run("kafka-topics", "--bootstrap-server", bootstrap, "--create", "--topic", topic,
                   "--partitions", "1", "--config", "segment.bytes=10485760", check=True)
    java_tools.run("kafka-console-producer", "--bootstrap-server", bootstrap, "--topic", topic,
                   input="a\nb\nc\n", check=True)
    r = java_tools.run("kafka-console-consumer", "--bootstrap-server", bootstrap, "--topic", topic,
                       "--from-beginning", "--max-messages", "3", "--group", f"java-{uuid.uuid4().hex[:6]}",
                       check=True)
    assert r.lines[-3:] == ["a", "b", "c"], r.lines
    java_tools.run("kafka-topics", "--bootstrap-server", bootstrap, "--describe", "--topic", topic, check=True)
    java_tools.run("kafka-configs", "--bootstrap-server", bootstrap, "--describe", "--entity-type", "topics",
                   "--entity-name", topic, check=True)


# ------------------------------------------------------------------------------------------- comparison

# Fields whose values legitimately differ between two brokers (or two runs): replaced by a placeholder.
_VOLATILE = {
    "node_id", "leader_id", "broker_id", "controller_id", "replica_nodes", "isr_nodes", "host", "port",
    "cluster_id", "topic_id", "throttle_time_ms", "timestamp", "log_append_time_ms", "leader_epoch",
    "producer_id", "producer_epoch", "member_id", "generation_id", "session_id", "documentation", "synonyms",
    "rack", "coordinator_key", "key", "committed_leader_epoch", "offline_replicas", "is_fenced",
}


def _normalise(obj: Any, test_token: str, field: str = "") -> Any:
    if isinstance(obj, Struct):
        d = {}
        for name in obj._FIELDS:
            v = getattr(obj, name)
            if name in _VOLATILE:
                d[name] = None if v is None else "<v>"
            elif name == "error_message":
                d[name] = None if v is None else "<message>"
            else:
                d[name] = _normalise(v, test_token, name)
        if "config_source" in d and "value" in d:  # DescribeConfigs / CreateTopics config entries
            if d["config_source"] != 1:
                d["value"] = "<default>"
                d["config_source"] = "<not set>"
                d["is_default"] = "<v>"
        return d
    if isinstance(obj, list):
        items = [_normalise(v, test_token, field) for v in obj]
        items = [i for i in items if not _foreign(i, test_token)]
        if items and all(isinstance(i, dict) for i in items):
            items.sort(key=repr)  # partitions, configs...: the order is unspecified (Kafka's is a hash map's)
        return items
    if isinstance(obj, (bytes, bytearray, memoryview)):
        return f"<{len(obj)} bytes>" if len(obj) else "<empty>"
    return obj


def _foreign(item: Any, token: str) -> bool:
    """A topic / topic resource entry of another test (the shared Kafka broker), or an internal topic."""
    if not isinstance(item, dict):
        return False
    if "resource_name" in item:
        name = item["resource_name"] if item.get("resource_type") == 2 else None
    elif {"partitions", "partition_responses", "partition_data", "partition_indexes"} & set(item):
        name = item.get("name", item.get("topic"))
    else:
        return False  # config entries, brokers, records...: not topics
    return isinstance(name, str) and bool(name) and (name.startswith("__") or token not in name)


def _null_paths(obj: Any, path: str, out: dict[str, set[str]]) -> None:
    """For every field path: 'null' and/or 'set' as seen in this answer. A struct's error code is part of
    the path: a partition in error is compared with partitions in the same error on the other broker (an
    error only one broker met, such as Kafka's COORDINATOR_NOT_AVAILABLE while it creates its offsets
    topic, is then not compared at all)."""
    if isinstance(obj, Struct):
        code = getattr(obj, "error_code", None)
        if code:
            path = f"{path}{{error {code}}}"
        for name in obj._FIELDS:
            v = getattr(obj, name)
            p = f"{path}.{name}"
            out.setdefault(p, set()).add("null" if v is None else "set")
            _null_paths(v, p, out)
    elif isinstance(obj, list):
        for v in obj:
            _null_paths(v, path + "[]", out)


def _request_key(ex: Exchange, token: str, run_topics: dict[str, str]) -> str:
    """The request, normalised (topic names made run-independent)."""
    n = _normalise(ex.request, token)
    text = repr(n)
    for real, generic in run_topics.items():
        text = text.replace(real, generic)
    return f"{ex.api_key}v{ex.version}:{text}"


def _response_text(ex: Exchange, token: str, run_topics: dict[str, str]) -> str:
    text = repr(_normalise(ex.response, token))
    for real, generic in run_topics.items():
        text = text.replace(real, generic)
    return text


def _record(bootstrap: str, java_tools: Any) -> tuple[RecordingProxy, dict[str, str], str]:
    token = uuid.uuid4().hex[:10]
    topic = f"diff-{token}"
    proxy = RecordingProxy(bootstrap)
    try:
        _workload(proxy.bootstrap, topic, java_tools)
    finally:
        proxy.close()
    return proxy, {topic: "<topic>"}, token


def test_differential_field_by_field(target, kafka_server, java_tools) -> None:
    ours = target.broker()
    mine, mine_topics, mine_token = _record(ours.bootstrap, java_tools)
    ref, ref_topics, ref_token = _record(kafka_server.bootstrap, java_tools)
    assert not mine.failures, mine.failures[:5]
    assert not ref.failures, ref.failures[:5]
    assert len(mine.exchanges) > 50 and len(ref.exchanges) > 50

    # 1. null-ness per (api, version, field path)
    def nulls(exchanges: list[Exchange]) -> dict[str, set[str]]:
        out: dict[str, set[str]] = {}
        for ex in exchanges:
            _null_paths(ex.response, f"{ex.api_key}v{ex.version}", out)
        return out

    a, b = nulls(mine.exchanges), nulls(ref.exchanges)
    diffs = []
    for path in sorted(set(a) & set(b)):
        if a[path] != b[path] and not _legitimately_null(path):
            diffs.append(f"{path}: ours {sorted(a[path])}, Apache Kafka {sorted(b[path])}")
    assert not diffs, "null-vs-set differences:\n" + "\n".join(diffs)

    # 2. field by field for the timing-independent APIs
    def answers(p: RecordingProxy, topics: dict[str, str], token: str) -> dict[str, set[str]]:
        out: dict[str, set[str]] = defaultdict(set)
        for ex in p.exchanges:
            if ex.api_key in DETERMINISTIC and ex.request is not None:
                if ex.api_key == METADATA and ex.request.topics is None:
                    continue  # every topic: the Kafka broker is shared
                out[_request_key(ex, token, topics)].add(_response_text(ex, token, topics))
        return out

    x = answers(mine, {**mine_topics, mine_token: "<token>"}, mine_token)
    y = answers(ref, {**ref_topics, ref_token: "<token>"}, ref_token)
    common = sorted(set(x) & set(y))
    assert len(common) >= 8, f"too few requests both brokers got: {len(common)} ({sorted({k[:6] for k in x})})"
    differ = [f"{k}\n  ours:  {sorted(x[k])[0]}\n  Kafka: {sorted(y[k])[0]}" for k in common if not x[k] & y[k]]
    assert not differ, f"{len(differ)} of {len(common)} answers differ:\n" + "\n".join(differ[:6])
    apis = {int(k.split("v", 1)[0]) for k in common}
    assert {METADATA, DESCRIBE_CLUSTER, 32, 19} <= apis, apis
    described = [t for k in common if k.startswith("32v") for t in x[k] & y[k]]
    assert any("'name': 'segment.jitter.ms'" in t and "'config_source': 1" in t for t in described), \
        "no DescribeConfigs answer with every topic config compared"

    # 3. authorized operations with no authorizer: all the resource type's operations, Kafka's exact bits
    for p in (mine, ref):
        ops = [(ex.api_key, ex.version, ex.response.cluster_authorized_operations,
                [t.topic_authorized_operations for t in getattr(ex.response, "topics", [])])
               for ex in p.exchanges if ex.api_key in (METADATA, DESCRIBE_CLUSTER) and ex.request is not None
               and ex.request.include_cluster_authorized_operations]
        assert (METADATA, 10, 8096, [3576]) in ops, ops
        assert (DESCRIBE_CLUSTER, 1, 8096, []) in ops, ops


def _legitimately_null(path: str) -> bool:
    """Null-ness that differs between the brokers for a reason that is not a defect (none so far)."""
    return False
