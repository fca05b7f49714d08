"""What the layers above ask of the schema store, as protocols (kop/schemas/ implements them).

Subjects follow Confluent's TopicNameStrategy: the subject `<topic>-value` *is* the topic's Pulsar schema (its
Confluent version k is Pulsar version k - 1, and both protocols see one compatibility rule); `<topic>-key` and any
other subject live in the registry alone. A global schema id names one definition (type, text, references) across
every subject, as Confluent's ids do.
"""

from __future__ import annotations

from typing import Literal, Protocol

from kop.topics.names import TopicName

Part = Literal["key", "value"]


class TopicSchemaIds(Protocol):
    """The Confluent ids of a topic's schemas, for the code that adds or strips Confluent's 5-byte prefix (magic
    byte 0, then the id as a big-endian int32) on the Pulsar side, and for the write rule that checks it."""

    async def confluent_id(self, topic: TopicName, version: int) -> int | None:
        """The global id of the topic's Pulsar schema `version` (assigned on first use); None when that version
        does not exist or has a type Confluent's registry does not know (only AVRO, JSON and PROTOBUF have ids)."""
        ...

    async def pulsar_version(self, topic: TopicName, schema_id: int) -> int | None:
        """The topic's Pulsar schema version whose definition has global id `schema_id`; None when no version of
        the topic has it."""
        ...

    async def registered_ids(self, topic: TopicName, part: Part, fresh: bool = False) -> frozenset[int]:
        """Every id registered (and not deleted) under the subject `<topic>-<part>`: the ids a record's prefix may
        name when the topic validates schemas. The answer may be a few seconds old (other brokers' registrations);
        `fresh` reads the store (the write rule asks so before it refuses a record)."""
        ...
