"""The Pulsar commands this handler serves: command type -> handler, one explicit table.

As the Kafka side's dispatch table (kop/kafka/apis/__init__.py), it is built from modules imported by name, not
filled by decorators as an import side effect: what the broker serves is read here, and a command family module
is plain functions. A connection (kop/pulsar/connection.py) looks each command up in the table its handler holds;
a type not listed is answered as unsupported (ERROR when the command has a request id, else ignored).

Each command family lives in its own module, whose header says how it differs from Pulsar's broker: session
(CONNECT, PING, PONG), lookup (PARTITIONED_METADATA, LOOKUP, GET_TOPICS_OF_NAMESPACE), produce (PRODUCER, SEND,
CLOSE_PRODUCER), consume (SUBSCRIBE ... CLOSE_CONSUMER), consumer_stats (CONSUMER_STATS) and schemas (GET_SCHEMA,
GET_OR_CREATE_SCHEMA). Commands on non-persistent topics are routed to kop/pulsar/nonpersistent_commands.py by the
topic they name (np.by_topic) or by the producer or consumer they name (np.by_producer, np.by_consumer).
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType

from kop.pulsar import consume, consumer_stats, lookup, produce, schemas, session
from kop.pulsar import nonpersistent_commands as np
from kop.pulsar.codec import commands as c
from kop.pulsar.connection import CommandHandler

COMMANDS: Mapping[int, CommandHandler] = MappingProxyType({
    # session
    c.CONNECT: session.connect,
    c.PING: session.ping,
    c.PONG: session.pong,
    # lookup
    c.PARTITIONED_METADATA: np.by_topic(lookup.partitioned_metadata, np.partitioned_metadata),
    c.LOOKUP: np.by_topic(lookup.lookup, np.lookup),
    c.GET_TOPICS_OF_NAMESPACE: lookup.topics_of_namespace,
    # produce
    c.PRODUCER: np.by_topic(produce.producer, np.producer),
    c.SEND: np.by_producer(produce.send, np.send),
    c.CLOSE_PRODUCER: np.by_producer(produce.close_producer, np.close_producer),
    # consume
    c.SUBSCRIBE: np.by_topic(consume.subscribe, np.subscribe),
    c.FLOW: np.by_consumer(consume.flow, np.flow),
    c.ACK: np.by_consumer(consume.ack, np.ack),
    c.REDELIVER_UNACKNOWLEDGED_MESSAGES: np.by_consumer(consume.redeliver, np.redeliver),
    c.SEEK: np.by_consumer(consume.seek, np.seek),
    c.GET_LAST_MESSAGE_ID: np.by_consumer(consume.get_last_message_id, np.get_last_message_id),
    c.UNSUBSCRIBE: np.by_consumer(consume.unsubscribe, np.unsubscribe),
    c.CLOSE_CONSUMER: np.by_consumer(consume.close_consumer, np.close_consumer),
    c.CONSUMER_STATS: np.by_consumer(consumer_stats.consumer_stats, np.consumer_stats),
    # schemas
    c.GET_SCHEMA: np.by_topic(schemas.get_schema, np.same_name(schemas.get_schema)),
    c.GET_OR_CREATE_SCHEMA: schemas.get_or_create_schema,
})
