"""Confluent Schema Registry's vocabulary, sans-IO: definitions and their identity, references, levels, modes,
and the error codes its clients parse.

A definition is (schemaType, text, references); its identity - what one global id names - is the type, the text
with insignificant whitespace removed (AVRO and JSON texts are JSON: re-dumped compactly, key order kept; PROTOBUF
texts stripped) and the references in order, hashed (`fingerprint`). Confluent compares canonical forms the same
way, so a client re-registering an equal definition spelled differently gets the same id back.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass

TYPES = ("AVRO", "JSON", "PROTOBUF")  # what /schemas/types answers; AVRO is the default schemaType
# Confluent type <-> Pulsar's Schema.Type number (kop/schemas/versions.py TYPE_NAMES)
PULSAR_TYPE = {"AVRO": 4, "JSON": 2, "PROTOBUF": 3}
CONFLUENT_TYPE = {n: t for t, n in PULSAR_TYPE.items()}
LEVELS = ("NONE", "BACKWARD", "BACKWARD_TRANSITIVE", "FORWARD", "FORWARD_TRANSITIVE", "FULL", "FULL_TRANSITIVE")
MODES = ("READWRITE", "READONLY", "IMPORT")
# Pulsar property of a version registered through the registry with references (the Pulsar side keeps them).
REFS_PROPERTY = "confluent.references"


class RegistryError(Exception):
    """A refusal in Confluent's terms: `error_code` (40401 ...) and the message; the HTTP status is the code's
    first three digits (409 and 5xx codes of three digits are their own status)."""

    def __init__(self, error_code: int, message: str) -> None:
        super().__init__(message)
        self.error_code = error_code
        self.message = message

    @property
    def status(self) -> int:
        return self.error_code if self.error_code < 1000 else self.error_code // 100


# Confluent's error codes, by name (the REST module and the tests name them)
SUBJECT_NOT_FOUND, VERSION_NOT_FOUND, SCHEMA_NOT_FOUND = 40401, 40402, 40403
SUBJECT_SOFT_DELETED, SUBJECT_NOT_SOFT_DELETED = 40404, 40405
VERSION_SOFT_DELETED, VERSION_NOT_SOFT_DELETED = 40406, 40407
NO_SUBJECT_CONFIG, NO_SUBJECT_MODE = 40408, 40409
INCOMPATIBLE = 409
INVALID_SCHEMA, INVALID_VERSION, INVALID_LEVEL, INVALID_MODE = 42201, 42202, 42203, 42204
NOT_PERMITTED, REFERENCE_EXISTS = 42205, 42206
STORE_ERROR, OPERATION_TIMEOUT, FORWARD_ERROR = 50001, 50002, 50003


@dataclass(frozen=True, slots=True)
class Reference:
    name: str  # the import name (proto file name, Avro full name, JSON $ref URL)
    subject: str
    version: int

    def json(self) -> dict[str, object]:
        return {"name": self.name, "subject": self.subject, "version": self.version}


def parse_references(raw: object) -> tuple[Reference, ...]:
    """`references` of a request body (RegistryError 42201 for a malformed one)."""
    if raw is None:
        return ()
    if not isinstance(raw, list):
        raise RegistryError(INVALID_SCHEMA, "references must be a list")
    out = []
    for r in raw:
        if not (isinstance(r, dict) and isinstance(r.get("name"), str) and isinstance(r.get("subject"), str)
                and isinstance(r.get("version"), int) and not isinstance(r.get("version"), bool)):
            raise RegistryError(INVALID_SCHEMA, f"invalid reference {r!r}: name, subject and version are needed")
        out.append(Reference(r["name"], r["subject"], r["version"]))
    return tuple(out)


def canonical_text(schema_type: str, text: str) -> str:
    """The text without insignificant whitespace (the `normalize` of a registration, and identity)."""
    if schema_type in ("AVRO", "JSON"):
        try:
            return json.dumps(json.loads(text), separators=(",", ":"), ensure_ascii=False)
        except ValueError:
            return text.strip()
    return text.strip()


@dataclass(frozen=True, slots=True)
class Definition:
    schema_type: str
    text: str
    references: tuple[Reference, ...] = ()

    @property
    def fingerprint(self) -> str:
        ident = [self.schema_type, canonical_text(self.schema_type, self.text),
                 [[r.name, r.subject, r.version] for r in self.references]]
        return hashlib.sha256(json.dumps(ident, ensure_ascii=False).encode()).hexdigest()

    def encode(self) -> bytes:
        return json.dumps({"schemaType": self.schema_type, "schema": self.text,
                           "references": [r.json() for r in self.references]}).encode()

    @classmethod
    def decode(cls, raw: bytes) -> Definition:
        d = json.loads(raw)
        return cls(d["schemaType"], d["schema"], parse_references(d.get("references")))

    def body(self) -> dict[str, object]:
        """The fields Confluent's answers carry for a schema: schemaType left out for AVRO, references when any."""
        out: dict[str, object] = {"schema": self.text}
        if self.schema_type != "AVRO":
            out["schemaType"] = self.schema_type
        if self.references:
            out["references"] = [r.json() for r in self.references]
        return out


def refs_property(references: tuple[Reference, ...]) -> dict[str, str]:
    """The Pulsar properties that carry a definition's references ({} without any)."""
    return {REFS_PROPERTY: json.dumps([r.json() for r in references])} if references else {}


def refs_from_properties(properties: dict[str, str]) -> tuple[Reference, ...]:
    raw = properties.get(REFS_PROPERTY)
    if not raw:
        return ()
    try:
        return parse_references(json.loads(raw))
    except (ValueError, RegistryError):
        return ()


def level_to_strategy(level: str) -> str:
    """A Confluent compatibility level as Pulsar's strategy (NONE is ALWAYS_COMPATIBLE)."""
    return "ALWAYS_COMPATIBLE" if level == "NONE" else level


def strategy_to_level(strategy: str) -> str:
    """A Pulsar strategy as a Confluent level (ALWAYS_INCOMPATIBLE, which Confluent lacks, stays as it is)."""
    return "NONE" if strategy == "ALWAYS_COMPATIBLE" else strategy
