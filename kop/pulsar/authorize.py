"""Authorization of Pulsar commands: the broker's one Authorizer and Kafka ACLs, asked about Pulsar's operations.

With `authorizationEnabled` the Kafka side checks every API against `services.authorizer` (kop/security/acl,
StandardAuthorizer's decisions); the Pulsar port asks the same authorizer, with the same principal (the
token's role, `User:<role>`, set by kop/pulsar/session.py), the same host (the peer's IP as Java prints it)
and the same resource names, so one ACL governs a topic whatever protocol touches it. No second ACL model:
Pulsar's grant-permission on a namespace or topic is stored as Kafka ACLs (kop/security/pulsar_permissions.py).

The mapping onto Kafka's operations:

* PRODUCER: WRITE on the topic (what Kafka's Produce needs).
* SUBSCRIBE: READ on the topic and, for a durable subscription, READ on the GROUP named after the
  subscription. A durable subscription is what a Kafka consumer group is - a name under which consumers
  share the work and the broker keeps their position - and Kafka guards that with READ on the group
  (JoinGroup, OffsetCommit, OffsetFetch). Pulsar too lets an operator restrict who may use a subscription
  name (its per-subscription permissions); a GROUP ACL is how that is said in Kafka's model. The state of
  the two stays separate (docs/pulsar.md). A non-durable subscription (a Reader) keeps no position, like a
  Kafka consumer that assigns partitions without a group, which needs no group ACL either; and its name is
  random, so no group ACL could name it.
* LOOKUP, PARTITIONED_METADATA, GET_LAST_MESSAGE_ID: DESCRIBE on the topic (what Kafka's Metadata and
  ListOffsets need; READ and WRITE imply it). GET_TOPICS_OF_NAMESPACE lists only the topics the role may
  DESCRIBE, as Kafka's Metadata hides them (Pulsar instead refuses the whole namespace listing).
* Auto-creation (LOOKUP, PARTITIONED_METADATA, PRODUCER, SUBSCRIBE of a topic that does not exist) also needs
  CREATE on the cluster or the topic, Kafka's rule for Metadata's auto-creation; without it the topic is not
  created and the client gets TopicNotFound.

Topics are authorized under their Kafka name (`t` for `persistent://public/default/t` and
`public/default/t`; `tenant/namespace/t` outside the default namespace) - the rule of
kop/kafka/authorize.py, so an ACL cannot be side-stepped by spelling a topic another way. Super users
(`superUserRoles`) are allowed everything; without `authorizationEnabled` nothing is checked and every call
here costs one attribute read.

Refusals are answered as Apache Pulsar's broker answers them (ServerCnx): ServerError.AuthorizationError
with its messages, in ERROR for PRODUCER and SUBSCRIBE and in the Failed response of LOOKUP and
PARTITIONED_METADATA; the real client raises pulsar.AuthorizationError. As in Pulsar, a producer or consumer
is authorized when it is created: removing an ACL stops new producers and consumers, not open ones.
"""

from __future__ import annotations

import logging
import re
import urllib.parse
from functools import lru_cache
from typing import TYPE_CHECKING

from kop.security.acl.model import CLUSTER_NAME, AclOperation, ResourceType, java_host_address
from kop.topics.names import TopicName

if TYPE_CHECKING:
    from kop.pulsar.connection import PulsarConnection
    from kop.security.acl import Authorizer

log = logging.getLogger(__name__)

Op = AclOperation
TOPIC, GROUP, CLUSTER = ResourceType.TOPIC, ResourceType.GROUP, ResourceType.CLUSTER

# Apache Pulsar's messages (ServerCnx), so clients and operators see what they know.
PRODUCE = "Client is not authorized to Produce"
SUBSCRIBE = "Client is not authorized to subscribe"
LOOKUP = "Client is not authorized to Lookup"
PARTITIONED_METADATA = "Client is not authorized to Get Partition Metadata"
LAST_MESSAGE_ID = "Client is not authorized to GetLastMessageId"  # ours: Pulsar does not check this command

_LEDGER = re.compile(r"^(?P<tenant>[^/]+)/(?P<namespace>[^/]+)/persistent/(?P<local>[^/]+)$")
_PARTITION_SUFFIX = re.compile(r"-partition-(0|[1-9][0-9]*)$")


def authorizer(conn: PulsarConnection) -> Authorizer | None:
    return conn.handler.service.authorizer


@lru_cache(maxsize=4096)
def _java_host(ip: str) -> str:
    return java_host_address(ip)


def client_host(conn: PulsarConnection) -> str:
    """The peer's IP for ACL hosts: the acceptor's normalized address, else the address part of `peer`."""
    ip = conn.ip
    if not ip:
        peer = conn.peer
        ip = peer.rsplit(":", 1)[0].strip("[]") if ":" in peer else peer
    return _java_host(ip)


def kafka_name(conn: PulsarConnection, name: TopicName) -> str:
    return conn.handler.service.topics.kafka_name(name)


def allowed(conn: PulsarConnection, op: AclOperation, rtype: ResourceType, name: str) -> bool:
    authz = authorizer(conn)
    if authz is None:
        return True
    return authz.authorize(conn.principal, client_host(conn), op, rtype, name)


def topic_allowed(conn: PulsarConnection, op: AclOperation, name: TopicName) -> bool:
    if authorizer(conn) is None:
        return True
    return allowed(conn, op, TOPIC, kafka_name(conn, name))


def _refused(conn: PulsarConnection, message: str, what: str) -> str:
    log.warning("pulsar %s: %s with role %s on %s", conn.peer, message, conn.principal, what)
    return message


def produce_refusal(conn: PulsarConnection, name: TopicName) -> str | None:
    """PRODUCER: WRITE on the topic; Pulsar's message when refused."""
    if topic_allowed(conn, Op.WRITE, name):
        return None
    return _refused(conn, PRODUCE, f"topic {name.canonical}")


def subscribe_refusal(conn: PulsarConnection, name: TopicName, subscription: str, durable: bool) -> str | None:
    """SUBSCRIBE: READ on the topic, and READ on the group of a durable subscription (module docstring)."""
    if authorizer(conn) is None:
        return None
    if not topic_allowed(conn, Op.READ, name):
        return _refused(conn, SUBSCRIBE, f"topic {name.canonical}")
    if durable and not allowed(conn, Op.READ, GROUP, subscription):
        return _refused(conn, SUBSCRIBE, f"topic {name.canonical} subscription (group) {subscription!r}")
    return None


def describe_refusal(conn: PulsarConnection, name: TopicName, message: str) -> str | None:
    """LOOKUP, PARTITIONED_METADATA, GET_LAST_MESSAGE_ID: DESCRIBE on the topic."""
    if topic_allowed(conn, Op.DESCRIBE, name):
        return None
    return _refused(conn, message, f"topic {name.canonical}")


def may_describe(conn: PulsarConnection, name: TopicName) -> bool:
    """GET_TOPICS_OF_NAMESPACE's filter (no log line: hiding a topic is not a refusal)."""
    return topic_allowed(conn, Op.DESCRIBE, name)


def may_auto_create(conn: PulsarConnection, name: TopicName) -> bool:
    """CREATE on the cluster or on the topic, Kafka's rule for auto-creation."""
    if authorizer(conn) is None:
        return True
    return allowed(conn, Op.CREATE, CLUSTER, CLUSTER_NAME) or topic_allowed(conn, Op.CREATE, name)


def topic_of_ledger(ledger_name: str) -> TopicName | None:
    """The topic of a partition's ledger name (TopicName.ledger_name's inverse), None when it is not one."""
    m = _LEDGER.match(ledger_name)
    if m is None:
        return None
    local = _PARTITION_SUFFIX.sub("", urllib.parse.unquote(m["local"]))
    return TopicName(m["tenant"], m["namespace"], local)
