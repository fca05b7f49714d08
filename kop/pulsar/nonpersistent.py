"""Non-persistent topics (`non-persistent://tenant/ns/topic`): an in-memory fan-out from producers to the consumers
connected at that moment, as Apache Pulsar's NonPersistentTopic and its dispatchers do it.

Why there is no managed ledger and no partition seam here: nothing is stored. A SEND's entry (its metadata and
payload, as the client sent them) goes to every subscription of the topic at once and is forgotten; there is no
offset, no backlog, no cursor, no Kafka batch - the seam's rules exist to guard what is written, and nothing is.
The write rules that still mean something are applied by the same functions the persistent path uses: the size
limit (kop/pulsar/produce.py `size_refusal`) and the producer's schema (kop/pulsar/schemas.py `producer_version`,
one schema per topic name as in Pulsar, whose schema id leaves the domain out). Chunked and encrypted messages pass
through untouched (the entry is never converted).

This module is the sans-IO core: topics, their producers and subscriptions, and the dispatch rule. A consumer's
connection is anything with `write(bytes)` and `backlogged` (kop/pulsar/connection.py); the commands that drive the
core live in kop/pulsar/nonpersistent_commands.py.

Dispatch, as Pulsar's NonPersistentDispatcher* classes: each published entry is offered to every subscription once.
Exclusive: its one consumer; Failover: the active consumer (consumers sorted by priority level then name, the
active one sorted[partition mod n], every consumer told ACTIVE_CONSUMER_CHANGE); Shared: round robin over the
consumers that can take it; Key_Shared: the consumer owning the entry's sticky-key hash (kop/pulsar/key_shared.py).
A consumer takes an entry only while it has FLOW permits left and its connection is not backlogged; otherwise the
entry is DROPPED for that subscription, never queued: the client's receiver queue is the only buffer, so a slow
consumer loses messages instead of holding broker memory. Drops are counted per subscription (`dropped`, the
admin stats' msgDropRate and the `pulsar_subscription_msg_drop` metric) and per producer.

Message ids are Pulsar's for non-persistent topics: (ledger 0, entry 0, the partition index or -1) in both the
SEND_RECEIPT and the MESSAGE. Acks are accepted and do nothing; seek answers SUCCESS and does nothing;
GET_LAST_MESSAGE_ID is refused (Pulsar: "not supported on non-persistent topic"). A subscription exists while it
has consumers (a durable one as a non-durable one: nothing of it would survive anyway), a topic while it has
producers or subscriptions.
"""

from __future__ import annotations

import datetime
import json
import time
import urllib.parse
from collections.abc import Callable
from typing import Protocol

from kop.pulsar.codec import commands as c
from kop.pulsar.codec.framing import encode_payload_command
from kop.pulsar.key_shared import Selector
from kop.pulsar.waiters import WaitQueue, Withdrawable
from kop.storage.api import MetadataStore, NodeExistsError, NoSuchNodeError
from kop.topics.names import TopicName

PREFIX = "non-persistent://"
ROOT = "/kop/non-persistent-partitioned"  # partitioned topics' metadata: <root>/<tenant>/<ns>/<topic> = {"partitions": N}
EXCLUSIVE, SHARED, FAILOVER, KEY_SHARED = 0, 1, 2, 3
Stats = dict[str, object]  # an admin REST answer (JSON)
TYPE_NAMES = {EXCLUSIVE: "Exclusive", SHARED: "Shared", FAILOVER: "Failover", KEY_SHARED: "Key_Shared"}


class Sink(Protocol):
    """Where a consumer's MESSAGEs go (a PulsarConnection)."""

    protocol_version: int
    peer: str  # "ip:port"
    client_version: str
    np_producers: dict[int, NPProducer]
    np_consumers: dict[int, NPConsumer]
    waiting_producers: dict[int, Withdrawable]

    @property
    def backlogged(self) -> bool: ...

    def write(self, data: bytes) -> None: ...

    def send(self, cmd: c.pb.BaseCommand) -> None: ...


class Rate:
    """Pulsar's Rate: events counted since the last `calculate`, which turns them into a per-second rate."""

    __slots__ = ("_count", "_since", "value")

    def __init__(self) -> None:
        self._count = 0
        self._since = time.monotonic()
        self.value = 0.0

    def record(self, n: int) -> None:
        self._count += n

    def calculate(self) -> float:
        now = time.monotonic()
        elapsed = now - self._since
        if elapsed > 0:
            self.value = self._count / elapsed
        self._count, self._since = 0, now
        return self.value


def full_name(name: TopicName, partition: int | None) -> str:
    """`non-persistent://tenant/ns/topic`, with `-partition-N` for a partition of a partitioned topic."""
    local = name.local if partition is None else f"{name.local}-partition-{partition}"
    return f"{PREFIX}{name.tenant}/{name.namespace}/{local}"


class NPProducer:
    __slots__ = ("conn", "producer_id", "name", "topic", "schema_version", "connected_since", "msg_in", "bytes_in",
                 "exclusive", "dropped")

    def __init__(self, conn: Sink, producer_id: int, name: str, topic: NPTopic, schema_version: bytes,
                 exclusive: bool = False) -> None:
        self.conn = conn
        self.producer_id = producer_id
        self.name = name
        self.topic = topic
        self.schema_version = schema_version
        self.exclusive = exclusive
        self.connected_since = int(time.time() * 1000)
        self.msg_in = 0
        self.bytes_in = 0
        self.dropped = Rate()  # messages of this producer's entries that some subscription dropped

    def close(self) -> None:
        self.topic.remove_producer(self)

    def fence(self) -> None:
        """Closed by the broker (CLOSE_PRODUCER, as Pulsar's Producer.close(true)): ExclusiveWithFencing took the
        topic, or this broker no longer owns it; the client reconnects (and is refused, when fenced out)."""
        self.conn.send(c.command(c.CLOSE_PRODUCER, producer_id=self.producer_id, request_id=0))
        self.conn.np_producers.pop(self.producer_id, None)
        self.close()


class NPWaiter:
    """A WaitForExclusive producer queued on a non-persistent topic (as on a persistent one: kop/pulsar/produce.py
    WaitingProducer): answered producer_ready=false, added as an NPProducer when its turn comes."""

    __slots__ = ("conn", "producer_id", "request_id", "name", "topic", "schema_version", "topic_epoch")

    def __init__(self, conn: Sink, req: c.pb.CommandProducer, name: str, topic: NPTopic, schema_version: bytes
                 ) -> None:
        self.conn = conn
        self.producer_id = req.producer_id
        self.request_id = req.request_id
        self.name = name
        self.topic = topic
        self.schema_version = schema_version
        self.topic_epoch = req.topic_epoch if req.HasField("topic_epoch") else None

    def withdraw(self) -> None:
        if self.conn.waiting_producers.get(self.producer_id) is self:
            del self.conn.waiting_producers[self.producer_id]
        if self.topic.waiting.withdraw(self):
            self.topic.registry.release(self.topic)

    def refuse(self, code: int, message: str) -> None:
        if self.conn.waiting_producers.get(self.producer_id) is self:
            del self.conn.waiting_producers[self.producer_id]
            self.conn.send(c.error(self.request_id, code, message))


class NPConsumer:
    __slots__ = ("conn", "consumer_id", "subscription", "name", "priority", "permits", "connected_since", "msg_out",
                 "bytes_out", "ranges")

    def __init__(self, conn: Sink, consumer_id: int, subscription: NPSubscription, name: str, priority: int) -> None:
        self.conn = conn
        self.consumer_id = consumer_id
        self.subscription = subscription
        self.name = name
        self.priority = priority
        self.permits = 0
        self.connected_since = int(time.time() * 1000)
        self.msg_out = 0
        self.bytes_out = 0
        self.ranges: list[tuple[int, int]] | None = None  # Key_Shared STICKY

    @property
    def ready(self) -> bool:
        """Whether it can take an entry now: permits left and a connection that is keeping up."""
        return self.permits > 0 and not self.conn.backlogged

    def close(self) -> None:
        self.subscription.remove_consumer(self)

    def disconnect(self) -> None:
        """Told to go (CLOSE_CONSUMER): the client looks the topic up again and resubscribes where it is served."""
        self.conn.send(c.command(c.CLOSE_CONSUMER, consumer_id=self.consumer_id, request_id=0))
        self.conn.np_consumers.pop(self.consumer_id, None)
        self.close()


class NPSubscription:
    def __init__(self, topic: NPTopic, name: str, sub_type: int, durable: bool) -> None:
        self.topic = topic
        self.name = name
        self.sub_type = sub_type
        self.durable = durable
        self.consumers: list[NPConsumer] = []
        self.active: NPConsumer | None = None  # Failover
        self.selector: Selector[NPConsumer] = Selector()  # Key_Shared
        self._rr = 0
        self.msg_out = 0
        self.bytes_out = 0
        self.dropped = 0  # messages dropped for this subscription since it exists
        self.drop_rate = Rate()

    def add_consumer(self, k: NPConsumer, sub_type: int) -> tuple[int, str] | None:
        """Add a consumer asking for `sub_type`, or (ServerError, message) refusing it as Pulsar does."""
        if not self.consumers:
            self.sub_type = sub_type
            self.selector = Selector()
        elif self.sub_type != sub_type:
            return c.ServerError.ConsumerBusy, "Subscription is of different type"
        elif self.sub_type == EXCLUSIVE:
            return c.ServerError.ConsumerBusy, "Exclusive consumer is already connected"
        if self.sub_type == KEY_SHARED:
            error = self.selector.add(k, k.ranges)
            if error is not None:
                return c.ServerError.ConsumerAssignError, error
        self.consumers.append(k)
        if self.sub_type == FAILOVER:
            self._pick_active(k)
        return None

    def remove_consumer(self, k: NPConsumer) -> None:
        if k not in self.consumers:
            return
        self.consumers.remove(k)
        if self.sub_type == KEY_SHARED:
            self.selector.remove(k)
        if self.sub_type == FAILOVER:
            self._pick_active(None)
        if not self.consumers:
            self.topic.remove_subscription(self)

    def _pick_active(self, added: NPConsumer | None) -> None:
        if not self.consumers:
            self.active = None
            return
        ordered = sorted(self.consumers, key=lambda k: (k.priority, k.name))
        group = [k for k in ordered if k.priority == ordered[0].priority]
        new = group[max(self.topic.partition, 0) % len(group)]
        told = self.consumers if new is not self.active else ([added] if added is not None else [])
        self.active = new
        for k in told:
            if k.conn.protocol_version >= 12:
                k.conn.send(c.command(c.ACTIVE_CONSUMER_CHANGE, consumer_id=k.consumer_id, is_active=k is new))

    def target(self, key_hash: int) -> NPConsumer | None:
        """The consumer that takes the next entry, None when the entry is to be dropped."""
        if self.sub_type == EXCLUSIVE:
            k = self.consumers[0] if self.consumers else None
        elif self.sub_type == FAILOVER:
            k = self.active
        elif self.sub_type == KEY_SHARED:
            k = self.selector.select(key_hash)
        else:
            n = len(self.consumers)
            for i in range(n):
                k = self.consumers[(self._rr + i) % n]
                if k.ready:
                    self._rr = (self._rr + i + 1) % n
                    return k
            return None
        return k if k is not None and k.ready else None

    def deliver(self, data: bytes, messages: int, key_hash: int) -> bool:
        """Send one entry (headers and payload, `messages` messages) to the consumer whose turn it is, or drop it;
        True when it went out."""
        k = self.target(key_hash)
        if k is None:
            self.dropped += messages
            self.drop_rate.record(messages)
            return False
        fields = {"consumer_id": k.consumer_id, "message_id": c.message_id(0, 0, self.topic.partition)}
        k.conn.write(encode_payload_command(c.command(c.MESSAGE, **fields), data))
        k.permits -= messages
        k.msg_out += messages
        k.bytes_out += len(data)
        self.msg_out += messages
        self.bytes_out += len(data)
        return True


class NPTopic:
    """One non-persistent topic, or one partition of a partitioned one."""

    def __init__(self, registry: NonPersistentTopics, name: TopicName, partition: int | None) -> None:
        self.registry = registry
        self.name = name
        self.partition = -1 if partition is None else partition  # what message ids carry
        self.full_name = full_name(name, partition)
        self.producers: dict[str, NPProducer] = {}
        self.subscriptions: dict[str, NPSubscription] = {}
        self.topic_epoch: int | None = None
        self.waiting: WaitQueue[NPWaiter] = WaitQueue()  # WaitForExclusive producers queued here
        self.msg_in = 0
        self.bytes_in = 0
        self.msg_out_gone = 0  # of subscriptions that went (Pulsar keeps their counts in the topic's)
        self.bytes_out_gone = 0

    @property
    def idle(self) -> bool:
        return not self.producers and not self.subscriptions and not self.waiting

    def publish(self, producer: NPProducer, data: bytes, messages: int, key_hash: int) -> int:
        """Offer one entry to every subscription; the number of subscriptions that dropped it."""
        producer.msg_in += messages
        producer.bytes_in += len(data)
        self.msg_in += messages
        self.bytes_in += len(data)
        drops = 0
        for sub in list(self.subscriptions.values()):
            if not sub.deliver(data, messages, key_hash):
                drops += 1
                producer.dropped.record(messages)
        return drops

    def subscription(self, name: str, sub_type: int, durable: bool) -> NPSubscription:
        sub = self.subscriptions.get(name)
        if sub is None:
            sub = self.subscriptions[name] = NPSubscription(self, name, sub_type, durable)
        return sub

    def remove_subscription(self, sub: NPSubscription) -> None:
        if self.subscriptions.get(sub.name) is sub:
            del self.subscriptions[sub.name]
            self.msg_out_gone += sub.msg_out
            self.bytes_out_gone += sub.bytes_out
            self.registry.release(self)

    def remove_producer(self, p: NPProducer) -> None:
        if self.producers.get(p.name) is p:
            del self.producers[p.name]
            self.promote_waiter()
            self.registry.release(self)

    def promote_waiter(self) -> None:
        """The topic may have come free: its first WaitForExclusive waiter takes it with the next topic epoch and
        gets its ready PRODUCER_SUCCESS (as kop/pulsar/produce.py promote_waiter)."""
        while (w := self.waiting.next_when_free(len(self.producers))) is not None:
            if w.conn.waiting_producers.get(w.producer_id) is not w:
                continue  # gone meanwhile (defensive: its close withdraws it)
            del w.conn.waiting_producers[w.producer_id]
            self.topic_epoch = w.topic_epoch if w.topic_epoch is not None else \
                (0 if self.topic_epoch is None else self.topic_epoch + 1)
            p = NPProducer(w.conn, w.producer_id, w.name, self, w.schema_version, exclusive=True)
            self.producers[w.name] = p
            w.conn.np_producers[w.producer_id] = p
            w.conn.send(c.command(c.PRODUCER_SUCCESS, request_id=w.request_id, producer_name=w.name,
                                  last_sequence_id=-1, schema_version=w.schema_version, topic_epoch=self.topic_epoch))
            return

    def has_key_shared(self) -> bool:
        return any(s.sub_type == KEY_SHARED for s in self.subscriptions.values())


class NonPersistentTopics:
    """The non-persistent topics this broker serves now, by full name (a topic goes when it is idle)."""

    def __init__(self) -> None:
        self.topics: dict[str, NPTopic] = {}

    def open(self, name: TopicName, partition: int | None) -> NPTopic:
        key = full_name(name, partition)
        topic = self.topics.get(key)
        if topic is None:
            topic = self.topics[key] = NPTopic(self, name, partition)
        return topic

    def get(self, name: TopicName, partition: int | None) -> NPTopic | None:
        return self.topics.get(full_name(name, partition))

    def release(self, topic: NPTopic) -> None:
        if topic.idle and self.topics.get(topic.full_name) is topic:
            del self.topics[topic.full_name]

    def disown(self, still_owned: Callable[[NPTopic], bool]) -> int:
        """Cluster mode, a bundle released: the clients of every topic no longer owned are told to go (they look it
        up again and reconnect to its new owner), as Pulsar closes a non-persistent topic on unload. The number of
        topics let go."""
        gone = [t for t in list(self.topics.values()) if not still_owned(t)]
        for topic in gone:
            topic.waiting.refuse_all(c.ServerError.ServiceNotReady, "the topic is not served by this broker now; retry")
            for p in list(topic.producers.values()):
                p.fence()
            for sub in list(topic.subscriptions.values()):
                for k in list(sub.consumers):
                    k.disconnect()
        return len(gone)

    def in_namespace(self, tenant: str, namespace: str) -> list[NPTopic]:
        return [t for t in self.topics.values() if (t.name.tenant, t.name.namespace) == (tenant, namespace)]


# ---------------------------------------------------------------------------------------------------- admin stats
def _iso(ms: int) -> str:
    return datetime.datetime.fromtimestamp(ms / 1000, tz=datetime.UTC).isoformat(timespec="milliseconds")


def _client(conn: Sink) -> Stats:
    return {"address": f"/{conn.peer}", "clientVersion": conn.client_version, "metadata": {}}


def _consumer_stats(k: NPConsumer) -> Stats:
    return {"consumerName": k.name, "availablePermits": max(k.permits, 0), "msgOutCounter": k.msg_out,
            "bytesOutCounter": k.bytes_out, "msgRateOut": 0.0, "msgThroughputOut": 0.0, "unackedMessages": 0,
            "connectedSince": _iso(k.connected_since), **_client(k.conn)}


def _subscription_stats(sub: NPSubscription, drop_rate: float) -> Stats:
    # isDurable: Pulsar 4.0 reports false for every non-persistent subscription, whatever the consumer asked
    return {"type": TYPE_NAMES.get(sub.sub_type, "Exclusive"), "isDurable": False, "msgOutCounter": sub.msg_out,
            "bytesOutCounter": sub.bytes_out, "msgRateOut": 0.0, "msgThroughputOut": 0.0, "msgBacklog": 0,
            "unackedMessages": 0, "msgDropRate": drop_rate, "msgDropCount": sub.dropped,
            "consumers": [_consumer_stats(k) for k in sub.consumers]}


def topic_stats(topic: NPTopic) -> Stats:
    """Pulsar's NonPersistentTopicStats, the fields this broker knows (rates other than msgDropRate are 0: no rate
    windows are kept; msgDropCount, the drops since the subscription began, is ours)."""
    drop_rates = {name: sub.drop_rate.calculate() for name, sub in topic.subscriptions.items()}
    subs = {name: _subscription_stats(sub, drop_rates[name]) for name, sub in topic.subscriptions.items()}
    publishers = [{"producerId": p.producer_id, "producerName": p.name, "accessMode":
                   "Exclusive" if p.exclusive else "Shared", "msgRateIn": 0.0, "msgThroughputIn": 0.0,
                   "msgInCounter": p.msg_in, "bytesInCounter": p.bytes_in, "msgDropRate": p.dropped.calculate(),
                   "connectedSince": _iso(p.connected_since), **_client(p.conn)} for p in topic.producers.values()]
    return {
        "msgRateIn": 0.0, "msgThroughputIn": 0.0, "msgRateOut": 0.0, "msgThroughputOut": 0.0, "averageMsgSize": 0.0,
        "msgInCounter": topic.msg_in, "bytesInCounter": topic.bytes_in,
        "msgOutCounter": topic.msg_out_gone + sum(s.msg_out for s in topic.subscriptions.values()),
        "bytesOutCounter": topic.bytes_out_gone + sum(s.bytes_out for s in topic.subscriptions.values()),
        "storageSize": 0, "backlogSize": 0, "msgDropRate": sum(drop_rates.values()),
        "publishers": publishers, "waitingPublishers": len(topic.waiting), "subscriptions": subs, "replication": {},
    }


def metric_samples(topic: NPTopic) -> list[Stats]:
    """The topic's samples for /metrics (kop/metrics.py's pulsar families), in the persistent partitions' shape:
    one per subscription (nothing in backlog; msgDropCount, the `pulsar_subscription_msg_drop` counter), one without
    a subscription when it has none."""
    where: Stats = {"namespace": f"{topic.name.tenant}/{topic.name.namespace}", "topic": topic.full_name,
                    "msgInCounter": topic.msg_in, "bytesInCounter": topic.bytes_in, "producers": len(topic.producers)}
    out: list[Stats] = [{**where, "subscription": sub.name, "msgBacklog": 0, "unackedMessages": 0,
                         "consumers": len(sub.consumers), "msgOutCounter": sub.msg_out, "bytesOutCounter": sub.bytes_out,
                         "msgDropCount": sub.dropped} for sub in list(topic.subscriptions.values())]
    return out or [{**where, "subscription": None}]


class PartitionedTopics:
    """The partitioned non-persistent topics and their partition counts: the one thing Pulsar stores of them (its
    partitioned-topic metadata), kept in the metadata store so that they outlive a restart and every broker of a
    cluster reads the same count. Read from the store at each ask (a lookup, an admin call: not the hot path)."""

    def __init__(self, store: MetadataStore) -> None:
        self.store = store

    @staticmethod
    def _path(tenant: str, namespace: str, local: str | None = None) -> str:
        base = f"{ROOT}/{tenant}/{namespace}"
        return base if local is None else f"{base}/{urllib.parse.quote(local, safe='')}"

    async def partitions(self, name: TopicName) -> int:
        """The topic's partition count, 0 when it is not a partitioned topic."""
        got = await self.store.get(self._path(name.tenant, name.namespace, name.local))
        return int(json.loads(got[0])["partitions"]) if got is not None else 0

    async def create(self, name: TopicName, partitions: int) -> bool:
        """Record a partitioned topic; False when one of this name exists already."""
        try:
            await self.store.put(self._path(name.tenant, name.namespace, name.local),
                                 json.dumps({"partitions": partitions}).encode(), expected_version=-1)
        except NodeExistsError:
            return False
        return True

    async def delete(self, name: TopicName) -> bool:
        try:
            await self.store.delete(self._path(name.tenant, name.namespace, name.local))
        except NoSuchNodeError:
            return False
        return True

    async def names(self, tenant: str, namespace: str) -> list[str]:
        """`non-persistent://tenant/ns/topic` of every partitioned topic of the namespace."""
        return sorted(f"{PREFIX}{tenant}/{namespace}/{urllib.parse.unquote(local)}"
                      for local in await self.store.children(self._path(tenant, namespace)))


class NonPersistentAdmin:
    """What the admin REST reads and changes of non-persistent topics (kop/services.py PulsarNonPersistent)."""

    def __init__(self, topics: NonPersistentTopics, partitioned: PartitionedTopics) -> None:
        self.topics = topics
        self.partitioned = partitioned

    def served(self, tenant: str, namespace: str) -> list[str]:
        return sorted(t.full_name for t in self.topics.in_namespace(tenant, namespace))

    def stats(self, name: TopicName, partition: int | None) -> Stats | None:
        topic = self.topics.get(name, partition)
        return topic_stats(topic) if topic is not None else None

    async def partitions(self, name: TopicName) -> int:
        return await self.partitioned.partitions(name)

    async def create_partitioned(self, name: TopicName, partitions: int) -> bool:
        return await self.partitioned.create(name, partitions)

    async def delete_partitioned(self, name: TopicName) -> bool:
        return await self.partitioned.delete(name)

    async def partitioned_names(self, tenant: str, namespace: str) -> list[str]:
        return await self.partitioned.names(tenant, namespace)
