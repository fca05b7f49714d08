"""The Pulsar commands this handler serves: command type -> handler, one explicit table.

As the Kafka side's dispatch table (kop/kafka/apis/__init__.py), it is built from modules imported by name, not
filled by decorators as an import side effect: what the broker serves is read here, and a command family module
is plain functions. A connection (kop/pulsar/connection.py) looks each command up in the table its handler holds;
a type not listed is answered as unsupported (ERROR when the command has a request id, else ignored).

Each command family lives in its own module, whose header says how it differs from Pulsar's broker: session
(CONNECT, PING, PONG), lookup (PARTITIONED_METADATA, LOOKUP, GET_TOPICS_OF_NAMESPACE), produce (PRODUCER, SEND,
CLOSE_PRODUCER), consume (SUBSCRIBE ... CLOSE_CONSUMER), consumer_stats (CONSUMER_STATS) and schemas (GET_SCHEMA,
GET_OR_CREATE_SCHEMA).
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType

from kop.pulsar import consume, consumer_stats, lookup, produce, schemas, session
from kop.pulsar.codec import commands as c
from kop.pulsar.connection import CommandHandler

COMMANDS: Mapping[int, CommandHandler] = MappingProxyType({
    # session
    c.CONNECT: session.connect,
    c.PING: session.ping,
    c.PONG: session.pong,
    # lookup
    c.PARTITIONED_METADATA: lookup.partitioned_metadata,
    c.LOOKUP: lookup.lookup,
    c.GET_TOPICS_OF_NAMESPACE: lookup.topics_of_namespace,
    # produce
    c.PRODUCER: produce.producer,
    c.SEND: produce.send,
    c.CLOSE_PRODUCER: produce.close_producer,
    # consume
    c.SUBSCRIBE: consume.subscribe,
    c.FLOW: consume.flow,
    c.ACK: consume.ack,
    c.REDELIVER_UNACKNOWLEDGED_MESSAGES: consume.redeliver,
    c.SEEK: consume.seek,
    c.GET_LAST_MESSAGE_ID: consume.get_last_message_id,
    c.UNSUBSCRIBE: consume.unsubscribe,
    c.CLOSE_CONSUMER: consume.close_consumer,
    c.CONSUMER_STATS: consumer_stats.consumer_stats,
    # schemas
    c.GET_SCHEMA: schemas.get_schema,
    c.GET_OR_CREATE_SCHEMA: schemas.get_or_create_schema,
})
