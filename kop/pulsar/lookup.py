"""PARTITIONED_METADATA, LOOKUP and GET_TOPICS_OF_NAMESPACE: finding topics and who serves them.

Names `non-persistent://...` are served by kop/pulsar/nonpersistent_commands.py (the command table routes them
there), with the name rules, namespace check, authorization and ownership answers of this module.
Topics are the Kafka handler's: `persistent://public/default/t` (or `t`, or `public/default/t`) is Kafka's `t`. A topic
is one of Pulsar's two kinds (kop/topics/manager.py Topic.partitioned): a partitioned topic of N partitions, whose
partitions are `t-partition-N`, or a non-partitioned topic, one partition stored under its own name that Kafka clients
see as partition 0. PARTITIONED_METADATA answers N for a partitioned topic and 0 for a non-partitioned one, a missing
one or one partition's name, as Pulsar does. A Pulsar client's base name auto-creates (`allowAutoTopicCreation` on,
the client allowing it) the kind `allowAutoTopicCreationType` says: `non-partitioned` (Pulsar's default), created by
the PRODUCER or SUBSCRIBE - PARTITIONED_METADATA and LOOKUP create nothing, as in Pulsar - or `partitioned`, created
with `defaultNumPartitions` by PARTITIONED_METADATA. A partition's name (`t-partition-N`) only ever names, and
auto-creates, a partitioned topic. Message ids on a non-partitioned topic carry partition -1.
A topic in a namespace that does not exist is TopicNotFound "Namespace not found", as on Pulsar
(kop/topics/namespaces.py), and the namespace's autoTopicCreation policy overrides the broker's keys.

LOOKUP answers Connect (authoritative) with our own pulsar:// address for what this broker serves (standalone:
everything), and for a name no topic of ours can have: Pulsar's lookup finds the owner of any name without
validating it, and Pulsar's Java client looks up a regex consumer's *pattern* to place its topic-list watcher (we
offer no watchers, so the client then polls GET_TOPICS_OF_NAMESPACE; a failed lookup would instead be retried
until the operation timeout and hold new topics back that long). In cluster mode a partition owned by another broker is answered Redirect (authoritative) to the
pulsar:// address the owner registered (kop/cluster/ownership.py BrokerInfo, listener "pulsar"); a partition
without an owner yet is acquired first, and one still without an owner gets Failed/ServiceNotReady, which the
client retries.
GET_TOPICS_OF_NAMESPACE lists the partitions (`…-partition-N`, as Pulsar lists partitioned topics) and the
non-partitioned topics by their own names - persistent ones for mode PERSISTENT (the default), the non-persistent
topics served now (kop/pulsar/nonpersistent.py) for NON_PERSISTENT, both for ALL -, filtered by
`topics_pattern` when the client sends one (Python's `re`, close to Java's for the patterns clients use).

With `authorizationEnabled` (kop/pulsar/authorize.py): PARTITIONED_METADATA and LOOKUP need DESCRIBE on the topic
(else AuthorizationError in the Failed response, Pulsar's message), checked after the name is parsed and before the
topic is looked for; auto-creation also needs CREATE (cluster or topic), else TopicNotFound; GET_TOPICS_OF_NAMESPACE
leaves out the topics the role may not DESCRIBE.
"""

from __future__ import annotations

import re
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING

from kop.cluster import listeners as named_listeners
from kop.pulsar import authorize
from kop.pulsar.codec import commands as c
from kop.pulsar.codec.framing import Frame
from kop.pulsar.connection import PulsarConnection
from kop.topics.manager import Topic, TopicError
from kop.topics.names import InvalidTopicName, TopicName
from kop.topics.namespaces import AutoCreate

if TYPE_CHECKING:
    from kop.pulsar.subscription import PartitionState
# The listener names under which a broker registers its pulsar:// and pulsar+ssl:// addresses with the others
# (PulsarProtocolHandler.advertised_addresses); a LOOKUP for a partition another broker owns redirects to them.
LISTENER = named_listeners.PLAIN
LISTENER_TLS = named_listeners.TLS  # brokerServicePortTls: the same protocol over TLS

_PARTITION = re.compile(r"^(?P<base>.+)-partition-(?P<index>0|[1-9][0-9]{0,8})$")
PARTITIONED_RESPONSE = c.pb.CommandPartitionedTopicMetadataResponse
LOOKUP_RESPONSE = c.pb.CommandLookupTopicResponse


class NameError_(ValueError):  # noqa: N801 - a plain error with the ServerError to answer
    def __init__(self, code: int, message: str) -> None:
        super().__init__(message)
        self.code = code


def split_name(conn: PulsarConnection, topic: str) -> tuple[TopicName, int | None]:
    """(topic, partition index or None for the base name). Raises NameError_."""
    if topic.startswith("non-persistent://"):
        raise NameError_(c.ServerError.NotAllowedError, f"{topic}: non-persistent topics are not served")
    m = _PARTITION.match(topic)
    base, partition = (m["base"], int(m["index"])) if m else (topic, None)
    try:
        return conn.handler.service.topics.parse(base), partition
    except InvalidTopicName as e:
        raise NameError_(c.ServerError.InvalidTopicName, str(e)) from None


def auto_create_rule(conn: PulsarConnection, name: TopicName) -> AutoCreate:
    """The broker's auto-creation keys under the namespace's autoTopicCreation policy (kop/topics/namespaces.py)."""
    cfg = conn.handler.config
    return conn.handler.service.topics.namespaces.auto_create_rule(
        name, cfg.allowAutoTopicCreation, cfg.allowAutoTopicCreationType, cfg.defaultNumPartitions)


def creates_partitioned(conn: PulsarConnection, name: TopicName) -> bool:
    """Whether a Pulsar client's base name auto-creates a partitioned topic rather than a non-partitioned one
    (Pulsar's default; allowAutoTopicCreationType, or the namespace's policy)."""
    return auto_create_rule(conn, name).partitioned


def may_create(conn: PulsarConnection, name: TopicName) -> bool:
    """Whether a missing topic of this name would be auto-created for this client (switch and CREATE right)."""
    return auto_create_rule(conn, name).allowed and authorize.may_auto_create(conn, name)


async def find_topic(conn: PulsarConnection, name: TopicName, create: bool, partitioned: bool | None = None) -> Topic | None:
    """The topic, auto-created when `create` and allowed: of the kind `partitioned` says, None meaning
    allowAutoTopicCreationType's (a non-partitioned topic has one partition, a partitioned one defaultNumPartitions)."""
    topics = conn.handler.service.topics
    topic = topics.get(name)
    if topic is None and not await topics.namespaces.exists(name.tenant, name.namespace):
        raise NameError_(c.ServerError.TopicNotFound, "Namespace not found")  # Pulsar's answer and words
    if topic is None and create and may_create(conn, name):
        rule = auto_create_rule(conn, name)
        kind = rule.partitioned if partitioned is None else partitioned
        try:
            topic = await topics.create(name, rule.partitions if kind else 1, partitioned=kind)
        except TopicError as e:
            if e.error != "TOPIC_ALREADY_EXISTS":
                raise NameError_(c.ServerError.MetadataError, str(e)) from None
            topic = topics.get(name)
    return topic


Check = Callable[[TopicName], str | None]  # kop/pulsar/authorize.py's refusal of one command, None: allowed


async def resolve_partition(conn: PulsarConnection, topic_name: str, create: bool = True,
                            check: Check | None = None) -> tuple[Topic, int]:
    """The topic and partition a PRODUCER/SUBSCRIBE/LOOKUP names. A non-partitioned topic is named by its base name
    (partition 0 underneath); a partition's name (`t-partition-N`) names a partition of a partitioned topic, and
    auto-creates a partitioned one (the client was told it is partitioned); a base name auto-creates the kind
    allowAutoTopicCreationType says, and on a partitioned topic stands for partition 0. `check` authorizes the
    command after the name is parsed and before the topic is looked for or created, Pulsar's order (and
    Kafka's: a refused client learns nothing about the topic's existence)."""
    name, partition = split_name(conn, topic_name)
    refusal = check(name) if check is not None else None
    if refusal is not None:
        raise NameError_(c.ServerError.AuthorizationError, refusal)
    topic = await find_topic(conn, name, create, partitioned=True if partition is not None else None)
    if topic is None:
        raise NameError_(c.ServerError.TopicNotFound, f"Topic {topic_name} does not exist")
    if partition is not None and not topic.partitioned:
        raise NameError_(c.ServerError.TopicNotFound,
                         f"Topic {topic_name} does not exist: {topic.name.canonical} is a non-partitioned topic")
    partition = 0 if partition is None else partition
    if partition >= topic.partitions:
        raise NameError_(c.ServerError.TopicNotFound,
                         f"Topic {topic_name}: partition {partition} does not exist (of {topic.partitions})")
    return topic, partition


async def _lookup_target(conn: PulsarConnection, topic_name: str, check: Check) -> tuple[TopicName, int]:
    """What a LOOKUP names: an existing topic's partition, or a missing base name that the client's PRODUCER or
    SUBSCRIBE will auto-create as a non-partitioned topic - Pulsar's lookup finds the owner without creating the
    topic, so a later createPartitionedTopic of that name is not refused. With allowAutoTopicCreationType=partitioned
    the lookup creates the partitioned topic, as PARTITIONED_METADATA would have."""
    name, partition = split_name(conn, topic_name)
    if partition is None and not creates_partitioned(conn, name) and conn.handler.service.topics.get(name) is None:
        refusal = check(name)
        if refusal is not None:
            raise NameError_(c.ServerError.AuthorizationError, refusal)
        if not await conn.handler.service.topics.namespaces.exists(name.tenant, name.namespace):
            raise NameError_(c.ServerError.TopicNotFound, "Namespace not found")  # Pulsar's answer and words
        if may_create(conn, name):
            return name, 0
    topic, partition = await resolve_partition(conn, topic_name, check=check)
    return topic.name, partition


async def open_partition(conn: PulsarConnection, request_id: int, topic_name: str,
                         check: Check | None = None) -> tuple[Topic, int, PartitionState] | None:
    """The topic, partition and partition state a PRODUCER or SUBSCRIBE names, or None once the client has
    been answered with the ERROR that says why (not authorized; unknown topic or partition; storage not ready)."""
    try:
        topic, partition = await resolve_partition(conn, topic_name, check=check)
        state = await conn.handler.partition_state(topic, partition)
    except NameError_ as e:
        conn.send(c.error(request_id, e.code, str(e)))
        return None
    except TopicError as e:
        conn.send(c.error(request_id, c.ServerError.ServiceNotReady, f"{topic_name}: {e}"))
        return None
    return topic, partition, state

async def partitioned_metadata(conn: PulsarConnection, frame: Frame) -> None:
    req = frame.inner

    async def count() -> int:
        name, partition = split_name(conn, req.topic)
        refusal = authorize.describe_refusal(conn, name, authorize.PARTITIONED_METADATA)
        if refusal is not None:
            raise NameError_(c.ServerError.AuthorizationError, refusal)
        if partition is not None:
            return 0
        # only a partitioned topic is created here; a non-partitioned one by the PRODUCER/SUBSCRIBE that follows
        allow = not req.HasField("metadata_auto_creation_enabled") or req.metadata_auto_creation_enabled
        topic = await find_topic(conn, name, allow and creates_partitioned(conn, name))
        return topic.partitions if topic is not None and topic.partitioned else 0

    await answer_partitioned_metadata(conn, req.request_id, count)


async def answer_partitioned_metadata(conn: PulsarConnection, rid: int, count: Callable[[], Awaitable[int]]) -> None:
    """PARTITIONED_METADATA_RESPONSE with `count()`'s partitions, or Failed with the NameError_ it raised: the one
    reply shape of the persistent and non-persistent (kop/pulsar/nonpersistent_commands.py) topics."""
    try:
        answer = await count()
    except NameError_ as e:
        conn.send(c.command(c.PARTITIONED_METADATA_RESPONSE, request_id=rid, response=PARTITIONED_RESPONSE.Failed,
                            error=e.code, message=str(e)))
        return
    conn.send(c.command(c.PARTITIONED_METADATA_RESPONSE, request_id=rid, partitions=answer,
                        response=PARTITIONED_RESPONSE.Success))


def lookup_failed(conn: PulsarConnection, rid: int, e: NameError_) -> None:
    conn.send(c.command(c.LOOKUP_RESPONSE, request_id=rid, response=LOOKUP_RESPONSE.Failed, error=e.code,
                        message=str(e)))


async def lookup(conn: PulsarConnection, frame: Frame) -> None:
    req = frame.inner
    rid = req.request_id
    try:
        name, partition = await _lookup_target(
            conn, req.topic, lambda name: authorize.describe_refusal(conn, name, authorize.LOOKUP))
    except NameError_ as e:
        if e.code == c.ServerError.InvalidTopicName:
            # a name no topic can have - the Java client's regex consumer looks up its pattern to place a
            # topic-list watcher: like Pulsar (a lookup finds a name's owner, it does not validate it), answer
            # with ourselves; PRODUCER/SUBSCRIBE on the name still fail with InvalidTopicName
            conn.send(c.command(c.LOOKUP_RESPONSE, request_id=rid, response=LOOKUP_RESPONSE.Connect,
                                brokerServiceUrl=conn.handler.service_url, authoritative=True))
            return
        lookup_failed(conn, rid, e)
        return
    await answer_lookup(conn, req, name, partition)


async def answer_lookup(conn: PulsarConnection, req: c.pb.CommandLookupTopic, name: TopicName, partition: int
                        ) -> None:
    """LOOKUP_RESPONSE for a partition found: Connect to ourselves, or Redirect to its owner (the non-persistent
    topic of the same name is served where the persistent one is: kop/pulsar/nonpersistent_commands.py)."""
    rid = req.request_id
    service = conn.handler.service
    listener = req.advertised_listener_name or None  # the client's listenerName (kop/cluster/listeners.py)
    redirect = not service.topics.owns_name(name, partition)
    registered: list[tuple[str, str, int]] = conn.handler.advertised_addresses()
    owner = None
    if redirect:
        own = service.ownership
        await own.owner_of(name, partition)  # triggers an acquisition when the bundle has no owner
        # the acquisition may have made this broker the owner (the first lookup of a topic whose PRODUCER is to
        # create it): Connect with our own addresses, as Pulsar answers once it assigned the bundle
        redirect = not service.topics.owns_name(name, partition)
        if redirect:
            info = own.owner_cached(name, partition)
            owner = info
            mine = conn.handler.config.kafkaBrokerId
            registered = [] if info is None or info.broker_id == mine else list(info.listeners)
    try:
        plain, tls = named_listeners.select(registered, listener) if registered else (None, None)
    except named_listeners.UnknownListener as e:
        answering = owner or service.ownership.local  # the broker whose registration lacks the name
        plain, tls, failure = None, None, e.refusal(named_listeners.broker_id(answering.web_url, answering.key))
    else:
        failure = f"{req.topic} has no owner serving Pulsar clients now; retry"
    if plain is None:
        conn.send(c.command(c.LOOKUP_RESPONSE, request_id=rid, response=LOOKUP_RESPONSE.Failed,
                            error=c.ServerError.ServiceNotReady, message=failure))
        return
    urls = {"brokerServiceUrl": plain}
    if tls is not None:  # a pulsar+ssl:// client connects there
        urls["brokerServiceUrlTls"] = tls
    conn.send(c.command(c.LOOKUP_RESPONSE, request_id=rid, response=LOOKUP_RESPONSE.Redirect if redirect
                        else LOOKUP_RESPONSE.Connect, **urls, authoritative=True))


async def topics_of_namespace(conn: PulsarConnection, frame: Frame) -> None:
    req = frame.inner
    tenant, _, namespace = req.namespace.partition("/")
    topics = conn.handler.service.topics
    names: list[str] = []
    mode = req.mode if req.HasField("mode") else c.pb.CommandGetTopicsOfNamespace.PERSISTENT
    if mode != c.pb.CommandGetTopicsOfNamespace.PERSISTENT:  # NON_PERSISTENT or ALL: the ones served now
        names.extend(t.full_name for t in conn.handler.non_persistent.in_namespace(tenant, namespace)
                     if authorize.may_describe(conn, t.name))
    for topic in topics.all() if mode != c.pb.CommandGetTopicsOfNamespace.NON_PERSISTENT else ():
        if topic.internal or (topic.name.tenant, topic.name.namespace) != (tenant, namespace) or topic.deleted:
            continue
        if not authorize.may_describe(conn, topic.name):  # hidden, as Kafka's Metadata hides it
            continue
        names.extend(topic.pulsar_names())
    filtered = False
    if req.HasField("topics_pattern") and req.topics_pattern:
        try:
            pattern = re.compile(req.topics_pattern)
        except re.error:
            pattern = None
        if pattern is not None:
            names = [n for n in names if pattern.fullmatch(n) or pattern.fullmatch(_base(n))]
            filtered = True
    conn.send(c.command(c.GET_TOPICS_OF_NAMESPACE_RESPONSE, request_id=req.request_id, topics=sorted(names),
                        filtered=filtered, changed=True))


def _base(partition_name: str) -> str:
    m = _PARTITION.match(partition_name)
    return m["base"] if m else partition_name
