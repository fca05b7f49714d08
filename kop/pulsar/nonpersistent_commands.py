"""The Pulsar commands on non-persistent topics (kop/pulsar/nonpersistent.py is the fan-out they drive).

The command table (kop/pulsar/commands_table.py) routes here: PARTITIONED_METADATA, LOOKUP, PRODUCER and SUBSCRIBE
whose topic is `non-persistent://...`, and the commands of the producers and consumers these created (their ids are
in the connection's `np_producers` / `np_consumers`). As on Apache Pulsar:
* names: `non-persistent://tenant/ns/topic`, `-partition-N` for a partition; the namespace must exist (TopicNotFound
  "Namespace not found", kop/topics/namespaces.py); a missing topic is created by its first PRODUCER or SUBSCRIBE
  when auto-creation allows it (allowAutoTopicCreation, the namespace's policy, CREATE with authorization), else
  TopicNotFound. PARTITIONED_METADATA answers the partition count of a partitioned non-persistent topic (created
  over the admin REST, or auto-created by PARTITIONED_METADATA when allowAutoTopicCreationType=partitioned, with
  defaultNumPartitions), 0 otherwise. LOOKUP answers as for the persistent topic of the same name (the same owner in
  cluster mode); a PRODUCER or SUBSCRIBE on a broker that does not own that name is ServiceNotReady (the client
  looks it up again), and a broker that lets the bundle go tells the topic's clients to go (CLOSE_PRODUCER,
  CLOSE_CONSUMER: PulsarProtocolHandler.ownership_changed). Authorization is the persistent topic's: Kafka ACLs have
  no domain, so WRITE/READ/DESCRIBE on a topic name cover both of its domains.
* PRODUCER: access modes, maxProducersPerTopic and the schema as on persistent topics (the same functions); SEND:
  `maxMessageSize` (produce.size_refusal), then SEND_RECEIPT (ledger 0, entry 0) at once and the entry offered to
  every subscription; nothing is stored, de-duplication does not apply (Pulsar: no-op on non-persistent topics).
  GET_SCHEMA on a non-persistent name answers the schema of the name (one schema per name, as in Pulsar).
* SUBSCRIBE: Exclusive, Shared, Failover, Key_Shared; readCompacted is refused NotAllowed ("readCompacted only valid
  on persistent topics"); the initial position and start message id mean nothing (there is nothing before now).
  FLOW adds permits; ACK is answered (ACK_RESPONSE when asked) and changes nothing; REDELIVER changes nothing (what
  was sent is gone); SEEK answers SUCCESS and changes nothing, as Pulsar does; GET_LAST_MESSAGE_ID is refused
  UnknownError, as Pulsar answers it (its topic throws "not supported on non-persistent topic"); UNSUBSCRIBE drops the
  subscription (ConsumerBusy while other consumers are connected).
Kafka clients never see these topics: the same short name on the Kafka port is the persistent topic.
"""

from __future__ import annotations

import itertools
import re

from kop.pulsar import authorize
from kop.pulsar.codec import commands as c
from kop.pulsar.codec.framing import Frame
from kop.pulsar.connection import CommandHandler, PulsarConnection
from kop.pulsar.dedup import CURSOR as DEDUP_CURSOR
from kop.pulsar.key_shared import key_hash, sticky_key
from kop.pulsar.lookup import (
    Check,
    NameError_,
    answer_lookup,
    answer_partitioned_metadata,
    auto_create_rule,
    creates_partitioned,
    lookup_failed,
    may_create,
)
from kop.pulsar.nonpersistent import (
    KEY_SHARED,
    PREFIX,
    TYPE_NAMES,
    NPConsumer,
    NPProducer,
    NPTopic,
    NPWaiter,
)
from kop.pulsar.produce import (
    EXCLUSIVE_WITH_FENCING,
    WAIT_FOR_EXCLUSIVE,
    access_refusal,
    send_refused,
    size_refusal,
)
from kop.pulsar.schemas import SchemaRefused, check_subscriber, producer_version
from kop.topics.names import InvalidTopicName, TopicName
from kop.topics.namespaces import MAX_CONSUMERS, MAX_PRODUCERS

_PARTITION = re.compile(r"^(?P<base>.+)-partition-(?P<index>0|[1-9][0-9]{0,8})$")
STICKY = c.pb.KeySharedMode.STICKY
_names = itertools.count()  # generated producer names (Pulsar's <cluster>-<broker>-<n>)


# ---------------------------------------------------------------------------------------------------- routing
def by_topic(persistent: CommandHandler, non_persistent: CommandHandler) -> CommandHandler:
    """A command naming a topic (PARTITIONED_METADATA, LOOKUP, PRODUCER, SUBSCRIBE) goes by the topic's domain."""
    async def serve(conn: PulsarConnection, frame: Frame) -> None:
        fn = non_persistent if frame.inner.topic.startswith(PREFIX) else persistent
        await fn(conn, frame)
    return serve


def by_producer(persistent: CommandHandler, non_persistent: CommandHandler) -> CommandHandler:
    """SEND, CLOSE_PRODUCER: by the producer they name (ids are the client's, unique on its connection)."""
    async def serve(conn: PulsarConnection, frame: Frame) -> None:
        fn = non_persistent if frame.inner.producer_id in conn.np_producers else persistent
        await fn(conn, frame)
    return serve


def by_consumer(persistent: CommandHandler, non_persistent: CommandHandler) -> CommandHandler:
    """FLOW, ACK, SEEK, ...: by the consumer they name (an unknown id goes to the persistent side, which answers
    ConsumerNotFound or ignores it)."""
    async def serve(conn: PulsarConnection, frame: Frame) -> None:
        fn = non_persistent if frame.inner.consumer_id in conn.np_consumers else persistent
        await fn(conn, frame)
    return serve


def same_name(persistent: CommandHandler) -> CommandHandler:
    """GET_SCHEMA on a non-persistent name: the persistent command on the same name, since a topic's schema is its
    name's whatever the domain (Pulsar's schema id, TopicName.getSchemaName, leaves the domain out)."""
    async def serve(conn: PulsarConnection, frame: Frame) -> None:
        req = frame.inner
        req.topic = "persistent://" + req.topic.removeprefix(PREFIX)
        await persistent(conn, frame)
    return serve


# ---------------------------------------------------------------------------------------------------- names
def split(conn: PulsarConnection, topic: str) -> tuple[TopicName, int | None]:
    """(the topic's name, its partition index or None) of a `non-persistent://` name. Raises NameError_."""
    rest = topic.removeprefix(PREFIX)
    m = _PARTITION.match(rest)
    base, partition = (m["base"], int(m["index"])) if m else (rest, None)
    if base.count("/") != 2:
        raise NameError_(c.ServerError.InvalidTopicName, f"Invalid topic name {topic!r}: expected "
                         "non-persistent://tenant/namespace/topic")
    try:
        return conn.handler.service.topics.parse(base), partition
    except InvalidTopicName as e:
        raise NameError_(c.ServerError.InvalidTopicName, str(e)) from None


async def _known_namespace(conn: PulsarConnection, name: TopicName) -> None:
    if not await conn.handler.service.topics.namespaces.exists(name.tenant, name.namespace):
        raise NameError_(c.ServerError.TopicNotFound, "Namespace not found")  # Pulsar's answer and words


async def _partitions(conn: PulsarConnection, name: TopicName, create: bool) -> int:
    """The partition count of a partitioned non-persistent topic (0: not one), created with defaultNumPartitions
    when `create` and allowAutoTopicCreationType=partitioned (or the namespace's policy) allow it."""
    meta = conn.handler.non_persistent_partitioned
    n = await meta.partitions(name)
    if n == 0 and create and creates_partitioned(conn, name) and may_create(conn, name):
        await meta.create(name, auto_create_rule(conn, name).partitions)  # False: created meanwhile, read below
        n = await meta.partitions(name)
    return n


async def resolve(conn: PulsarConnection, rid: int, topic: str, check: Check) -> tuple[TopicName, int | None] | None:
    """The name and partition a PRODUCER/SUBSCRIBE names, when it may be served here (created when missing and
    allowed); None once answered ERROR. Nothing is opened: the caller opens the topic only after its last await, so
    that a topic released meanwhile (idle: its last client went) is never the one a new client joins."""
    try:
        name, partition = split(conn, topic)
        refusal = check(name)
        if refusal is not None:
            raise NameError_(c.ServerError.AuthorizationError, refusal)
        await _known_namespace(conn, name)
        count = await _partitions(conn, name, create=False)
        if partition is not None and partition >= count:
            raise NameError_(c.ServerError.TopicNotFound, f"Topic {topic} does not exist")
        if count and partition is None:
            raise NameError_(c.ServerError.TopicNotFound, f"Topic {topic} is a partitioned topic: name a partition")
        if conn.handler.non_persistent.get(name, partition) is None and partition is None and \
                not may_create(conn, name):
            raise NameError_(c.ServerError.TopicNotFound, f"Topic {topic} does not exist")
        if not conn.handler.service.topics.owns_name(name, partition or 0):  # cluster mode: the client looks again
            raise NameError_(c.ServerError.ServiceNotReady, f"{topic} is not served by this broker now; retry")
    except NameError_ as e:
        conn.send(c.error(rid, e.code, str(e)))
        return None
    return name, partition


# ---------------------------------------------------------------------------------------------------- lookup
async def partitioned_metadata(conn: PulsarConnection, frame: Frame) -> None:
    req = frame.inner

    async def count() -> int:
        name, partition = split(conn, req.topic)
        refusal = authorize.describe_refusal(conn, name, authorize.PARTITIONED_METADATA)
        if refusal is not None:
            raise NameError_(c.ServerError.AuthorizationError, refusal)
        await _known_namespace(conn, name)
        allow = not req.HasField("metadata_auto_creation_enabled") or req.metadata_auto_creation_enabled
        return 0 if partition is not None else await _partitions(conn, name, create=allow)

    await answer_partitioned_metadata(conn, req.request_id, count)


async def lookup(conn: PulsarConnection, frame: Frame) -> None:
    req = frame.inner
    try:
        name, partition = split(conn, req.topic)
        refusal = authorize.describe_refusal(conn, name, authorize.LOOKUP)
        if refusal is not None:
            raise NameError_(c.ServerError.AuthorizationError, refusal)
        await _known_namespace(conn, name)
    except NameError_ as e:
        lookup_failed(conn, req.request_id, e)
        return
    await answer_lookup(conn, req, name, partition or 0)


# ---------------------------------------------------------------------------------------------------- produce
async def producer(conn: PulsarConnection, frame: Frame) -> None:
    req = frame.inner
    rid = req.request_id
    existing = conn.np_producers.get(req.producer_id)
    if existing is not None:  # the client retried a PRODUCER that had succeeded
        conn.send(c.command(c.PRODUCER_SUCCESS, request_id=rid, producer_name=existing.name, last_sequence_id=-1,
                            schema_version=existing.schema_version))
        return
    if req.producer_id in conn.waiting_producers:  # Pulsar's answer while the first one is still pending
        conn.send(c.error(rid, c.ServerError.ServiceNotReady, "Producer is already present on the connection"))
        return
    resolved = await resolve(conn, rid, req.topic, lambda name: authorize.produce_refusal(conn, name))
    if resolved is None:
        return
    name, partition = resolved
    try:  # registered first, as Pulsar does (tryAddSchema, then addProducer); one schema per topic name
        version = await producer_version(conn, name, req)
    except SchemaRefused as e:
        conn.send(c.error(rid, e.code, str(e)))
        return
    topic = conn.handler.non_persistent.open(name, partition)  # no await from here on
    refused = _producer_refusal(conn, name, topic, req)
    if refused is not None:
        conn.handler.non_persistent.release(topic)
        conn.send(c.error(rid, refused[0], refused[1]))
        return
    mode = req.producer_access_mode if req.HasField("producer_access_mode") else 0
    pname = req.producer_name if req.HasField("producer_name") and req.producer_name else \
        f"kop-{conn.handler.config.kafkaBrokerId}-np-{next(_names)}"
    if mode == WAIT_FOR_EXCLUSIVE and topic.producers:  # queued, as on a persistent topic (produce.py)
        waiter = NPWaiter(conn, req, pname, topic, version)
        topic.waiting.add(waiter)
        conn.waiting_producers[req.producer_id] = waiter
        conn.send(c.command(c.PRODUCER_SUCCESS, request_id=rid, producer_name=pname, last_sequence_id=-1,
                            schema_version=version, producer_ready=False))
        return
    fenced = list(topic.producers.values()) if mode == EXCLUSIVE_WITH_FENCING else []
    if fenced:  # its waiters first, so that none is promoted as the fenced producers go
        topic.waiting.refuse_all(c.ServerError.ProducerFenced, "Fenced out")
    if mode != 0:
        topic.topic_epoch = req.topic_epoch if req.HasField("topic_epoch") else \
            (0 if topic.topic_epoch is None else topic.topic_epoch + 1)
    p = NPProducer(conn, req.producer_id, pname, topic, version, exclusive=mode != 0)
    topic.producers[pname] = p
    conn.np_producers[req.producer_id] = p
    for old in fenced:  # after the new one joined: the topic never looks idle meanwhile
        old.fence()
    fields = {} if topic.topic_epoch is None else {"topic_epoch": topic.topic_epoch}
    conn.send(c.command(c.PRODUCER_SUCCESS, request_id=rid, producer_name=pname, last_sequence_id=-1,
                        schema_version=version, **fields))


def _producer_refusal(conn: PulsarConnection, name: TopicName, topic: NPTopic, req: c.pb.CommandProducer
                      ) -> tuple[int, str] | None:
    """(ServerError, message) refusing a PRODUCER on the topic as it is now, None to let it in."""
    mode = req.producer_access_mode if req.HasField("producer_access_mode") else 0
    if mode not in (0, 1, 2, 3):
        return c.ServerError.NotAllowedError, f"producer access mode {mode} is not supported"
    if not (mode == WAIT_FOR_EXCLUSIVE and topic.producers):  # else queued (``producer``)
        refused = access_refusal(topic, mode, req, len(topic.waiting))
        if refused is not None:
            return refused
    if req.HasField("producer_name") and (req.producer_name in topic.producers
                                          or any(w.name == req.producer_name for w in topic.waiting)):
        return c.ServerError.ProducerBusy, (f"Producer with name '{req.producer_name}' is already connected to "
                                            f"topic {req.topic}")
    limit = conn.handler.service.topics.namespaces.limit(name, MAX_PRODUCERS)
    if limit and len(topic.producers) >= limit:
        return c.ServerError.ProducerBusy, f"Topic '{req.topic}' reached max producers limit"
    return None


async def send(conn: PulsarConnection, frame: Frame) -> None:
    req = frame.inner
    pid, seq = req.producer_id, req.sequence_id
    p = conn.np_producers[pid]  # routed here because it is there
    if conn.checksum_failed:
        conn.send(c.send_error(pid, seq, c.ServerError.ChecksumError, "message checksum does not match"))
        return
    try:
        too_large = size_refusal(conn, frame)
        md = frame.metadata
    except Exception as e:  # noqa: BLE001 - a metadata that does not parse
        send_refused(conn, pid, seq, f"message refused: {e}")
        return
    if too_large is not None:
        send_refused(conn, pid, seq, too_large)
        return
    topic = p.topic
    fields = {"producer_id": pid, "sequence_id": seq, "message_id": c.message_id(0, 0, topic.partition)}
    if req.HasField("highest_sequence_id"):
        fields["highest_sequence_id"] = req.highest_sequence_id
    conn.send(c.command(c.SEND_RECEIPT, **fields))  # Pulsar completes the publish before it dispatches
    messages = md.num_messages_in_batch if md.HasField("num_messages_in_batch") else 1
    h = key_hash(sticky_key(md)) if topic.has_key_shared() else 0
    topic.publish(p, bytes(frame.stored_bytes), messages, h)


async def close_producer(conn: PulsarConnection, frame: Frame) -> None:
    req = frame.inner
    p = conn.np_producers.pop(req.producer_id, None)
    if p is not None:
        p.close()
    conn.send(c.command(c.SUCCESS, request_id=req.request_id))


# ---------------------------------------------------------------------------------------------------- consume
def _subscribe_refusal(req: c.pb.CommandSubscribe) -> tuple[int, str] | None:
    if req.read_compacted:
        return c.ServerError.NotAllowedError, "readCompacted only valid on persistent topics"
    if not req.subscription or req.subscription == DEDUP_CURSOR:
        return c.ServerError.InvalidTopicName, f"invalid subscription name {req.subscription!r} (empty or reserved)"
    if req.subType == KEY_SHARED and req.HasField("keySharedMeta") and req.keySharedMeta.keySharedMode == STICKY \
            and not req.keySharedMeta.hashRanges:
        return c.ServerError.ConsumerAssignError, "a STICKY Key_Shared consumer needs hash ranges"
    return None


async def subscribe(conn: PulsarConnection, frame: Frame) -> None:
    req = frame.inner
    rid = req.request_id
    existing = conn.np_consumers.get(req.consumer_id)
    if existing is not None:
        if existing.subscription.name == req.subscription:
            conn.send(c.command(c.SUCCESS, request_id=rid))
        else:
            conn.send(c.error(rid, c.ServerError.ConsumerBusy, f"consumer id {req.consumer_id} is in use"))
        return
    refused = _subscribe_refusal(req)
    if refused is not None:
        conn.send(c.error(rid, refused[0], refused[1]))
        return
    durable = not req.HasField("durable") or req.durable
    resolved = await resolve(conn, rid, req.topic, lambda name: authorize.subscribe_refusal(
        conn, name, req.subscription, durable))
    if resolved is None:
        return
    name, partition = resolved
    now = conn.handler.non_persistent.get(name, partition)
    idle = now is None or (not now.producers and not any(s.consumers for s in now.subscriptions.values()))
    try:  # kop/pulsar/schemas.py: registered on an idle topic, else checked against the name's versions
        await check_subscriber(conn, name, req, idle)
    except SchemaRefused as e:
        conn.send(c.error(rid, e.code, str(e)))
        return
    topic = conn.handler.non_persistent.open(name, partition)  # no await from here on
    error = _join(conn, name, topic, req, durable)
    if error is not None:
        conn.handler.non_persistent.release(topic)
        conn.send(c.error(rid, error[0], error[1]))
        return
    conn.send(c.command(c.SUCCESS, request_id=rid))


def _join(conn: PulsarConnection, name: TopicName, topic: NPTopic, req: c.pb.CommandSubscribe, durable: bool
          ) -> tuple[int, str] | None:
    """Add the SUBSCRIBE's consumer to its subscription, or (ServerError, message) refusing it."""
    limit = conn.handler.service.topics.namespaces.limit(name, MAX_CONSUMERS)
    if limit and sum(len(s.consumers) for s in topic.subscriptions.values()) >= limit:
        return c.ServerError.ConsumerBusy, "Topic reached max consumers limit"
    sub = topic.subscription(req.subscription, req.subType, durable)
    k = NPConsumer(conn, req.consumer_id, sub, req.consumer_name or f"consumer-{req.consumer_id}", req.priority_level)
    if req.subType == KEY_SHARED and req.HasField("keySharedMeta") and req.keySharedMeta.keySharedMode == STICKY:
        k.ranges = [(r.start, r.end) for r in req.keySharedMeta.hashRanges]
    error = sub.add_consumer(k, req.subType)
    if error is not None:
        if not sub.consumers:
            topic.remove_subscription(sub)
        return error
    conn.np_consumers[req.consumer_id] = k
    return None


async def flow(conn: PulsarConnection, frame: Frame) -> None:
    req = frame.inner
    k = conn.np_consumers[req.consumer_id]
    k.permits = min(k.permits + req.messagePermits, 1 << 31)


async def ack(conn: PulsarConnection, frame: Frame) -> None:
    req = frame.inner
    if req.HasField("request_id"):
        conn.send(c.command(c.ACK_RESPONSE, consumer_id=req.consumer_id, request_id=req.request_id))


async def redeliver(conn: PulsarConnection, frame: Frame) -> None:
    return None  # what was sent is gone: nothing to send again


async def seek(conn: PulsarConnection, frame: Frame) -> None:
    conn.send(c.command(c.SUCCESS, request_id=frame.inner.request_id))  # as Pulsar: accepted, nothing to move


async def get_last_message_id(conn: PulsarConnection, frame: Frame) -> None:
    conn.send(c.error(frame.inner.request_id, c.ServerError.UnknownError,
                      "getLastMessageId is not supported on non-persistent topic"))


async def unsubscribe(conn: PulsarConnection, frame: Frame) -> None:
    req = frame.inner
    k = conn.np_consumers[req.consumer_id]
    sub = k.subscription
    if any(o is not k for o in sub.consumers):
        conn.send(c.error(req.request_id, c.ServerError.ConsumerBusy, "Subscription has active consumers"))
        return
    conn.np_consumers.pop(req.consumer_id, None)
    k.close()
    conn.send(c.command(c.SUCCESS, request_id=req.request_id))


async def close_consumer(conn: PulsarConnection, frame: Frame) -> None:
    req = frame.inner
    k = conn.np_consumers.pop(req.consumer_id, None)
    if k is not None:
        k.close()
    conn.send(c.command(c.SUCCESS, request_id=req.request_id))


async def consumer_stats(conn: PulsarConnection, frame: Frame) -> None:
    req = frame.inner
    k = conn.np_consumers[req.consumer_id]
    conn.send(c.command(c.CONSUMER_STATS_RESPONSE, request_id=req.request_id, consumerName=k.name,
                        availablePermits=max(k.permits, 0), unackedMessages=0, blockedConsumerOnUnackedMsgs=False,
                        address=f"/{conn.peer}", type=TYPE_NAMES.get(k.subscription.sub_type, "Exclusive"),
                        msgBacklog=0, msgRateOut=0.0, msgThroughputOut=0.0, msgRateRedeliver=0.0,
                        msgRateExpired=0.0))

