"""PARTITIONED_METADATA, LOOKUP and GET_TOPICS_OF_NAMESPACE: finding topics and who serves them.

Topics are the Kafka handler's: `persistent://public/default/t` (or `t`, or `public/default/t`) is Kafka's `t`, a
topic of N partitions is a Pulsar partitioned topic of N partitions, and `t-partition-N` is one of them. A Kafka
topic always has partitions, so PARTITIONED_METADATA answers N >= 1 for every existing topic (clients then work on
`…-partition-N`); asked about one partition it answers 0, as Pulsar does for a non-partitioned topic.
A topic in a namespace that does not exist is TopicNotFound "Namespace not found", as on Pulsar
(kop/topics/namespaces.py). A topic that does not exist is created (with `defaultNumPartitions`) when the client
allows it and `allowAutoTopicCreation` is on (both overridden by the namespace's autoTopicCreation policy) - Pulsar standalone's default, with the difference that ours are always partitioned
(Pulsar's default auto-created type is non-partitioned), since a Kafka topic cannot be anything else.

LOOKUP answers Connect (authoritative) with our own pulsar:// address for what this broker serves (standalone:
everything), and for a name no topic of ours can have: Pulsar's lookup finds the owner of any name without
validating it, and Pulsar's Java client looks up a regex consumer's *pattern* to place its topic-list watcher (we
offer no watchers, so the client then polls GET_TOPICS_OF_NAMESPACE; a failed lookup would instead be retried
until the operation timeout and hold new topics back that long). In cluster mode a partition owned by another broker is answered Redirect (authoritative) to the
pulsar:// address the owner registered (kop/cluster/ownership.py BrokerInfo, listener "pulsar"); a partition
without an owner yet is acquired first, and one still without an owner gets Failed/ServiceNotReady, which the
client retries.
GET_TOPICS_OF_NAMESPACE lists the partitions (`…-partition-N`, as Pulsar lists partitioned topics), filtered by
`topics_pattern` when the client sends one (Python's `re`, close to Java's for the patterns clients use).

With `authorizationEnabled` (kop/pulsar/authorize.py): PARTITIONED_METADATA and LOOKUP need DESCRIBE on the topic
(else AuthorizationError in the Failed response, Pulsar's message), checked after the name is parsed and before the
topic is looked for; auto-creation also needs CREATE (cluster or topic), else TopicNotFound; GET_TOPICS_OF_NAMESPACE
leaves out the topics the role may not DESCRIBE.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import TYPE_CHECKING

from kop.pulsar import authorize
from kop.pulsar.codec import commands as c
from kop.pulsar.codec.framing import Frame
from kop.pulsar.connection import PulsarConnection
from kop.topics.manager import Topic, TopicError
from kop.topics.names import InvalidTopicName, TopicName

if TYPE_CHECKING:
    from kop.pulsar.subscription import PartitionState
# The listener names under which a broker registers its pulsar:// and pulsar+ssl:// addresses with the others
# (PulsarProtocolHandler.advertised_addresses); a LOOKUP for a partition another broker owns redirects to them.
LISTENER = "pulsar"
LISTENER_TLS = "pulsar+ssl"  # brokerServicePortTls: the same protocol over TLS

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


async def find_topic(conn: PulsarConnection, name: TopicName, create: bool) -> Topic | None:
    topics = conn.handler.service.topics
    topic = topics.get(name)
    if topic is None and not await topics.namespaces.exists(name.tenant, name.namespace):
        raise NameError_(c.ServerError.TopicNotFound, "Namespace not found")  # Pulsar's answer and words
    cfg = conn.handler.config  # the namespace's autoTopicCreation policy overrides the broker's keys
    allowed, _, partitions = topics.namespaces.auto_creation(name.tenant, name.namespace, cfg.allowAutoTopicCreation,
                                                             cfg.defaultNumPartitions)
    if topic is None and create and allowed and authorize.may_auto_create(conn, name):
        try:
            topic = await topics.create(name, partitions)
        except TopicError as e:
            if e.error != "TOPIC_ALREADY_EXISTS":
                raise NameError_(c.ServerError.MetadataError, str(e)) from None
            topic = topics.get(name)
    return topic


Check = Callable[[TopicName], str | None]  # kop/pulsar/authorize.py's refusal of one command, None: allowed


async def resolve_partition(conn: PulsarConnection, topic_name: str, create: bool = True,
                            check: Check | None = None) -> tuple[Topic, int]:
    """The topic and partition a PRODUCER/SUBSCRIBE/LOOKUP names. A base name stands for partition 0 (clients
    only use it for topics they were told are non-partitioned, which ours never are). `check` authorizes the
    command after the name is parsed and before the topic is looked for or created, Pulsar's order (and
    Kafka's: a refused client learns nothing about the topic's existence)."""
    name, partition = split_name(conn, topic_name)
    refusal = check(name) if check is not None else None
    if refusal is not None:
        raise NameError_(c.ServerError.AuthorizationError, refusal)
    topic = await find_topic(conn, name, create)
    if topic is None:
        raise NameError_(c.ServerError.TopicNotFound, f"Topic {topic_name} does not exist")
    partition = 0 if partition is None else partition
    if partition >= topic.partitions:
        raise NameError_(c.ServerError.TopicNotFound,
                         f"Topic {topic_name}: partition {partition} does not exist (of {topic.partitions})")
    return topic, partition



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
    rid = req.request_id
    try:
        name, partition = split_name(conn, req.topic)
        refusal = authorize.describe_refusal(conn, name, authorize.PARTITIONED_METADATA)
        if refusal is not None:
            raise NameError_(c.ServerError.AuthorizationError, refusal)
        if partition is not None:
            answer = 0
        else:
            allow = not req.HasField("metadata_auto_creation_enabled") or req.metadata_auto_creation_enabled
            topic = await find_topic(conn, name, allow)
            answer = topic.partitions if topic is not None else 0
    except NameError_ as e:
        conn.send(c.command(c.PARTITIONED_METADATA_RESPONSE, request_id=rid, response=PARTITIONED_RESPONSE.Failed,
                            error=e.code, message=str(e)))
        return
    conn.send(c.command(c.PARTITIONED_METADATA_RESPONSE, request_id=rid, partitions=answer,
                        response=PARTITIONED_RESPONSE.Success))


async def lookup(conn: PulsarConnection, frame: Frame) -> None:
    req = frame.inner
    rid = req.request_id
    try:
        topic, partition = await resolve_partition(
            conn, req.topic, check=lambda name: authorize.describe_refusal(conn, name, authorize.LOOKUP))
    except NameError_ as e:
        if e.code == c.ServerError.InvalidTopicName:
            # a name no topic can have - the Java client's regex consumer looks up its pattern to place a
            # topic-list watcher: like Pulsar (a lookup finds a name's owner, it does not validate it), answer
            # with ourselves; PRODUCER/SUBSCRIBE on the name still fail with InvalidTopicName
            conn.send(c.command(c.LOOKUP_RESPONSE, request_id=rid, response=LOOKUP_RESPONSE.Connect,
                                brokerServiceUrl=conn.handler.service_url, authoritative=True))
            return
        conn.send(c.command(c.LOOKUP_RESPONSE, request_id=rid, response=LOOKUP_RESPONSE.Failed, error=e.code,
                            message=str(e)))
        return
    service = conn.handler.service
    if not service.topics.owns(topic, partition):
        own = service.ownership
        await own.owner_of(topic.name, partition)  # triggers an acquisition when the bundle has no owner
        info = own.owner_cached(topic.name, partition)
        address = next(((h, p) for n, h, p in info.listeners if n == LISTENER), None) if info else None
        tls = next(((h, p) for n, h, p in info.listeners if n == LISTENER_TLS), None) if info else None
        if info is None or address is None or info.broker_id == conn.handler.config.kafkaBrokerId:
            conn.send(c.command(c.LOOKUP_RESPONSE, request_id=rid, response=LOOKUP_RESPONSE.Failed,
                                error=c.ServerError.ServiceNotReady,
                                message=f"{req.topic} has no owner serving Pulsar clients now; retry"))
            return
        urls = {"brokerServiceUrl": f"pulsar://{address[0]}:{address[1]}"}
        if tls is not None:
            urls["brokerServiceUrlTls"] = f"pulsar+ssl://{tls[0]}:{tls[1]}"
        conn.send(c.command(c.LOOKUP_RESPONSE, request_id=rid, response=LOOKUP_RESPONSE.Redirect, **urls,
                            authoritative=True))
        return
    urls = {"brokerServiceUrl": conn.handler.service_url}
    if conn.handler.service_url_tls is not None:  # a pulsar+ssl:// client connects here
        urls["brokerServiceUrlTls"] = conn.handler.service_url_tls
    conn.send(c.command(c.LOOKUP_RESPONSE, request_id=rid, response=LOOKUP_RESPONSE.Connect, **urls,
                        authoritative=True))


async def topics_of_namespace(conn: PulsarConnection, frame: Frame) -> None:
    req = frame.inner
    tenant, _, namespace = req.namespace.partition("/")
    topics = conn.handler.service.topics
    names: list[str] = []
    for topic in topics.all():
        if topic.internal or (topic.name.tenant, topic.name.namespace) != (tenant, namespace) or topic.deleted:
            continue
        if not authorize.may_describe(conn, topic.name):  # hidden, as Kafka's Metadata hides it
            continue
        names.extend(f"{topic.name.canonical}-partition-{p}" for p in range(topic.partitions))
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
