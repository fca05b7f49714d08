"""GET_SCHEMA and GET_OR_CREATE_SCHEMA, and the schema steps of PRODUCER and SUBSCRIBE (kop/schemas/versions.py
keeps the versions).

As Pulsar's ServerCnx answers them:
* GET_SCHEMA names a topic (a partition's name stands for its topic) and optionally a version (8 bytes, big-endian;
  absent = the latest): GET_SCHEMA_RESPONSE with the schema and its version, or error TopicNotFound "Topic not found
  or no-schema" when the topic has no such version (InvalidTopicName for a bad name). The Python and Java clients
  send it to fetch the writer schema a message names (MessageMetadata.schema_version).
* GET_OR_CREATE_SCHEMA (the Java client's producer sends it when its schema changes, e.g. AUTO_PRODUCE): the
  existing topic's version of the schema, registered if new and allowed; TopicNotFound "Topic not found" for a
  topic that does not exist, IncompatibleSchema when the strategy refuses.
* PRODUCER with a schema (type other than NONE, which is what BYTES is on the wire) registers it the same way and
  PRODUCER_SUCCESS carries the version; without one, the version is empty (Pulsar's SchemaVersion.Empty: Pulsar
  lets schema-less producers write to a topic with a schema unless `schemaValidationEnforced`, which we do not
  serve). The producer stamps that version on every message it sends; it is stored with the Kafka batch (see
  produce.py) and given back to consumers in the entry's MessageMetadata.schema_version.
* SUBSCRIBE with a schema (other than NONE and AUTO_CONSUME): on an idle topic (no schema, no producer, no other
  consumer, nothing stored) the schema is registered; otherwise it must be one of the topic's versions or
  compatible with them under the strategy, else IncompatibleSchema - on a topic with data but no schema too
  ("Failed to add schema to an active topic with empty(BYTES) schema"), as Pulsar refuses it.

Differences from Pulsar: with `authorizationEnabled`, GET_SCHEMA needs DESCRIBE and GET_OR_CREATE_SCHEMA WRITE on
the topic (Pulsar checks neither); `isAllowAutoUpdateSchema` and `schemaValidationEnforced` policies are not served
(schemas always update when compatible; schema-less producers are always let in).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from kop.pulsar import authorize
from kop.pulsar.codec import commands as c
from kop.pulsar.codec.framing import Frame
from kop.pulsar.connection import PulsarConnection
from kop.pulsar.lookup import NameError_, split_name
from kop.schemas.versions import (
    AUTO_CONSUME,
    NONE,
    PULSAR_RULES,
    IncompatibleSchema,
    SchemaData,
    version_bytes,
    version_of,
)
from kop.topics.names import TopicName

log = logging.getLogger(__name__)


class SchemaRefused(Exception):
    """A PRODUCER's or SUBSCRIBE's schema was refused: the ServerError code and message to answer."""

    def __init__(self, code: int, message: str) -> None:
        super().__init__(message)
        self.code = code


def wire_schema(name: TopicName, schema: SchemaData) -> Any:
    """The wire Schema of a stored version (its name is the topic's, as Pulsar's SchemaInfo is named)."""
    return c.pb.Schema(name=name.local, schema_data=schema.data, type=c.pb.Schema.Type.ValueType(schema.type),
                       properties=[c.pb.KeyValue(key=k, value=v) for k, v in schema.properties.items()])


def _wanted(schema: Any) -> SchemaData | None:
    """The schema a command carries, None for none (absent, or NONE: what BYTES is on the wire)."""
    if schema is None or schema.type == NONE:
        return None
    return SchemaData.from_wire(schema)


async def producer_version(conn: PulsarConnection, name: TopicName, req: Any) -> bytes:
    """The schema version a PRODUCER gets (b"" without a schema). Raises SchemaRefused."""
    schema = _wanted(req.schema if req.HasField("schema") else None)
    if schema is None:
        return b""
    try:
        version = await conn.handler.schemas.put_if_absent(name, schema, record_names=PULSAR_RULES)
    except IncompatibleSchema as e:
        raise SchemaRefused(c.ServerError.IncompatibleSchema, str(e)) from None
    except Exception as e:  # noqa: BLE001 - the metadata store failed: the client retries
        raise SchemaRefused(c.ServerError.ServiceNotReady, f"schema not stored: {e}") from None
    return version_bytes(version)


async def check_subscriber(conn: PulsarConnection, name: TopicName, req: Any, idle: bool) -> None:
    """A SUBSCRIBE's schema: registered on an idle topic, else checked. Raises SchemaRefused."""
    schema = _wanted(req.schema if req.HasField("schema") else None)
    if schema is None or schema.type == AUTO_CONSUME:
        return
    registry = conn.handler.schemas
    try:
        if idle and not await registry.versions(name):
            await registry.put_if_absent(name, schema, record_names=PULSAR_RULES)
        else:
            await registry.check_for_consumer(name, schema, record_names=PULSAR_RULES)
    except IncompatibleSchema as e:
        raise SchemaRefused(c.ServerError.IncompatibleSchema, str(e)) from None
    except Exception as e:  # noqa: BLE001 - the metadata store failed: the client retries
        raise SchemaRefused(c.ServerError.ServiceNotReady, f"schema not checked: {e}") from None


def _schema_error(type_: int, rid: int, code: int, message: str) -> Any:
    return c.command(type_, request_id=rid, error_code=code, error_message=message)


def _topic_or_error(conn: PulsarConnection, req: Any, answer: int,
                    refusal_of: Callable[[TopicName], str | None]) -> TopicName | None:
    """The topic a schema command names, or None after answering InvalidTopicName / AuthorizationError."""
    try:
        name, _partition = split_name(conn, req.topic)
    except NameError_ as e:
        conn.send(_schema_error(answer, req.request_id, c.ServerError.InvalidTopicName, str(e)))
        return None
    refusal = refusal_of(name)
    if refusal is not None:
        conn.send(_schema_error(answer, req.request_id, c.ServerError.AuthorizationError, refusal))
        return None
    return name


async def get_schema(conn: PulsarConnection, frame: Frame) -> None:
    req = frame.inner
    rid = req.request_id
    answer = c.GET_SCHEMA_RESPONSE
    name = _topic_or_error(conn, req, answer, lambda n: authorize.describe_refusal(
        conn, n, "Client is not authorized to get the schema"))
    if name is None:
        return
    version = None
    if req.HasField("schema_version") and req.schema_version:
        version = version_of(req.schema_version)
        if version is None:
            conn.send(_schema_error(answer, rid, c.ServerError.UnknownError,
                                    f"schema version of {len(req.schema_version)} bytes (8 expected)"))
            return
    try:
        got = await conn.handler.schemas.get(name, version)
    except Exception as e:  # noqa: BLE001 - the metadata store failed
        conn.send(_schema_error(answer, rid, c.ServerError.UnknownError, str(e)))
        return
    if got is None:
        conn.send(_schema_error(answer, rid, c.ServerError.TopicNotFound, "Topic not found or no-schema"))
        return
    v, schema = got
    conn.send(c.command(answer, request_id=rid, schema=wire_schema(name, schema), schema_version=version_bytes(v)))


async def get_or_create_schema(conn: PulsarConnection, frame: Frame) -> None:
    req = frame.inner
    rid = req.request_id
    answer = c.GET_OR_CREATE_SCHEMA_RESPONSE
    name = _topic_or_error(conn, req, answer, lambda n: authorize.produce_refusal(conn, n))
    if name is None:
        return
    if conn.handler.service.topics.get(name) is None:
        conn.send(_schema_error(answer, rid, c.ServerError.TopicNotFound, "Topic not found"))
        return
    try:
        version = await producer_version(conn, name, req)
    except SchemaRefused as e:
        conn.send(_schema_error(answer, rid, e.code, str(e)))
        return
    conn.send(c.command(answer, request_id=rid, schema_version=version))
