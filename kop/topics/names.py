"""Kafka topic names <-> Pulsar topic names, as KoP maps them.

`t` lives in the default tenant/namespace (kafkaTenant/kafkaNamespace); `tenant/ns/t` and
`persistent://tenant/ns/t` name a topic elsewhere. All three spellings of one topic resolve to the same
canonical name, but responses always echo the spelling the client used (KoP#797 showed what happens when a
tool sees one topic under two names).
"""

from __future__ import annotations

import re
import urllib.parse
from dataclasses import dataclass

# Kafka's internal topic of the group coordinator. As in KoP it lives in the metadata namespace
# (kafkaMetadataTenant/kafkaMetadataNamespace, public/__kafka by default), and clients see it under its
# Kafka name (kop.topics.manager.TopicManager.parse / kafka_name).
OFFSETS_TOPIC = "__consumer_offsets"
# The transaction coordinator's internal topic, beside __consumer_offsets in the metadata namespace.
TRANSACTION_STATE_TOPIC = "__transaction_state"

_LEGAL = re.compile(r"^[A-Za-z0-9._-]+$")
_PARTITION_SUFFIX = re.compile(r"-partition-[0-9]+$")
_PART = re.compile(r"^[A-Za-z0-9_.\-=:]+$")
MAX_NAME_LENGTH = 249


class InvalidTopicName(ValueError):
    pass


@dataclass(frozen=True, slots=True)
class TopicName:
    tenant: str
    namespace: str
    local: str

    @property
    def canonical(self) -> str:
        return f"persistent://{self.tenant}/{self.namespace}/{self.local}"

    def kafka_name(self, default_tenant: str, default_namespace: str) -> str:
        """The short name listings use: bare for the default namespace, tenant/ns/topic otherwise."""
        if (self.tenant, self.namespace) == (default_tenant, default_namespace):
            return self.local
        return f"{self.tenant}/{self.namespace}/{self.local}"

    def ledger_name(self, partition: int | None) -> str:
        """Managed-ledger name of one partition, in Pulsar's layout: `<topic>-partition-<i>` for a partition of a
        partitioned topic, the topic's own name for a non-partitioned one (partition None), as Pulsar stores it."""
        local = self.local if partition is None else f"{self.local}-partition-{partition}"
        return f"{self.tenant}/{self.namespace}/persistent/{urllib.parse.quote(local, safe='')}"


def parse_topic_name(name: str, default_tenant: str, default_namespace: str) -> TopicName:
    if not isinstance(name, str) or not name:
        raise InvalidTopicName("Topic name is empty")
    rest = name
    if rest.startswith("persistent://"):
        rest = rest[len("persistent://") :]
        parts = rest.split("/")
        if len(parts) != 3:
            raise InvalidTopicName(f"Invalid topic name {name!r}: expected persistent://tenant/namespace/topic")
    elif "/" in rest:
        parts = rest.split("/")
        if len(parts) != 3:
            raise InvalidTopicName(f"Invalid topic name {name!r}: expected tenant/namespace/topic")
    else:
        parts = [default_tenant, default_namespace, rest]
    tenant, namespace, local = parts
    for p in (tenant, namespace):
        if not _PART.match(p):
            raise InvalidTopicName(f"Invalid tenant or namespace in topic name {name!r}")
    check_local_name(local)
    return TopicName(tenant, namespace, local)


def check_local_name(local: str) -> None:
    """Kafka's own rules for the topic part (legal characters, length, '.' and '..')."""
    if local in (".", ".."):
        raise InvalidTopicName(f"Topic name cannot be {local!r}")
    if len(local) > MAX_NAME_LENGTH:
        raise InvalidTopicName(f"Topic name is longer than {MAX_NAME_LENGTH} characters")
    if not _LEGAL.match(local):
        raise InvalidTopicName(
            f"Topic name {local!r} is illegal, it contains a character other than ASCII alphanumerics, '.', '_' and '-'"
        )
    if _PARTITION_SUFFIX.search(local):
        # Only the suffix is reserved: `t-partition-3` would be partition 3 of `t`. Pulsar's own names carry
        # "-partition-" elsewhere (a partition's default dead-letter topic is `t-partition-0-<sub>-DLQ`), and
        # splitting at the last "-partition-<n>" keeps every partition's ledger name unique.
        raise InvalidTopicName(f"Topic name {local!r} may not end with '-partition-<n>' (reserved for partitions)")
