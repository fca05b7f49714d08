"""Kafka's JSON message schemas, parsed into small spec objects.

The schemas are not vendored: they are read at import time from the installed kafka-python
distribution (``kafka.protocol.schemas.resources``), which ships the Apache Kafka 4.x files verbatim.
That keeps this repository free of Kafka's text while still generating the codec from the
authoritative wire description. Everything here is plain data; code generation lives in ``codegen``.
"""

from __future__ import annotations

import importlib.resources
import importlib.util
import json
import re
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path

SCHEMA_PACKAGE = "kafka.protocol.schemas.resources"

#: Upper bound used for open-ended version ranges such as ``"3+"`` (versions are int16 on the wire).
MAX_VERSION = 0x7FFF

_COMMENT_LINE = re.compile(r"^\s*//.*$", re.MULTILINE)
_CAMEL_BOUNDARY = re.compile(r"(?<=[a-z0-9])(?=[A-Z])|(?<=[A-Z])(?=[A-Z][a-z])")

FIXED_TYPES = {
    # kafka type -> struct format character; uuid is 16 raw bytes.
    "int8": "b",
    "int16": "h",
    "uint16": "H",
    "int32": "i",
    "uint32": "I",
    "int64": "q",
    "float64": "d",
    "bool": "?",
    "uuid": "16s",
}


def snake_case(name: str) -> str:
    """``partitionIndex``/``PartitionIndex`` -> ``partition_index`` (acronyms stay one word)."""
    return _CAMEL_BOUNDARY.sub("_", name).lower()


@dataclass(frozen=True, slots=True)
class Versions:
    """An inclusive version range; ``Versions.NONE`` contains nothing."""

    low: int
    high: int

    def __contains__(self, version: object) -> bool:
        return isinstance(version, int) and self.low <= version <= self.high

    @property
    def empty(self) -> bool:
        return self.high < self.low

    @staticmethod
    def parse(text: str | None) -> Versions:
        if text is None:
            return NO_VERSIONS
        text = text.strip()
        if text in ("", "none"):
            return NO_VERSIONS
        if text.endswith("+"):
            return Versions(int(text[:-1]), MAX_VERSION)
        if "-" in text:
            low, high = text.split("-", 1)
            return Versions(int(low), int(high))
        return Versions(int(text), int(text))


NO_VERSIONS = Versions(0, -1)


@dataclass(slots=True)
class FieldSpec:
    """One field of a struct, as declared in the schema (all versions at once)."""

    name: str  # the schema's CamelCase name
    attr: str  # the Python attribute name (snake_case)
    type: str  # the schema type string, e.g. "int32", "[]string", "[]TopicData", "Cursor"
    versions: Versions
    nullable_versions: Versions
    tagged_versions: Versions
    tag: int | None
    default: str | int | float | bool | None  # raw schema default (string/number/bool) or None when absent
    ignorable: bool
    #: field-level override of compactness (only RequestHeader.ClientId uses it: "none").
    flexible_versions: Versions | None
    fields: list[FieldSpec] | None = None  # nested fields for struct and struct-array types

    @property
    def is_array(self) -> bool:
        return self.type.startswith("[]")

    @property
    def element_type(self) -> str:
        """The type of one element for arrays, else the type itself."""
        return self.type[2:] if self.is_array else self.type

    @property
    def is_struct(self) -> bool:
        """True for struct and struct-array fields (their element type starts uppercase)."""
        return self.element_type[:1].isupper()

    @property
    def struct_name(self) -> str | None:
        return self.element_type if self.is_struct else None

    def present(self, version: int) -> bool:
        return version in self.versions

    def nullable(self, version: int) -> bool:
        return version in self.nullable_versions

    def tagged(self, version: int) -> bool:
        return self.tag is not None and version in self.tagged_versions


@dataclass(slots=True)
class MessageSpec:
    """A whole request/response/header schema."""

    name: str  # e.g. "ProduceRequest"
    type: str  # "request", "response", "header" or "data"
    api_key: int | None
    valid_versions: Versions
    flexible_versions: Versions
    fields: list[FieldSpec]
    listeners: list[str] = field(default_factory=list)
    latest_version_unstable: bool = False

    def flexible(self, version: int) -> bool:
        return version in self.flexible_versions


def _parse_field(raw: dict, common: dict[str, list[dict]]) -> FieldSpec:
    ftype = raw["type"]
    element = ftype[2:] if ftype.startswith("[]") else ftype
    raw_fields = raw.get("fields")
    if raw_fields is None and element[:1].isupper():
        if element not in common:
            raise ValueError(f"unresolved struct type {element!r} in field {raw['name']!r}")
        raw_fields = common[element]
    flexible = raw.get("flexibleVersions")
    return FieldSpec(
        name=raw["name"],
        attr=snake_case(raw["name"]),
        type=ftype,
        versions=Versions.parse(raw.get("versions")),
        nullable_versions=Versions.parse(raw.get("nullableVersions")),
        tagged_versions=Versions.parse(raw.get("taggedVersions")),
        tag=raw.get("tag"),
        default=raw.get("default"),
        ignorable=bool(raw.get("ignorable", False)),
        flexible_versions=None if flexible is None else Versions.parse(flexible),
        fields=None if raw_fields is None else [_parse_field(f, common) for f in raw_fields],
    )


def parse_schema(text: str) -> MessageSpec:
    """Parse one schema file's text (Kafka's JSON with whole-line ``//`` comments)."""
    return parse_schema_data(json.loads(_COMMENT_LINE.sub("", text)))


def parse_schema_data(data: dict) -> MessageSpec:
    """Parse one schema already loaded as data (kop/protocol/extra_schemas.py writes some that way)."""
    common = {s["name"]: s["fields"] for s in data.get("commonStructs", [])}
    return MessageSpec(
        name=data["name"],
        type=data["type"],
        api_key=data.get("apiKey"),
        valid_versions=Versions.parse(data["validVersions"]),
        flexible_versions=Versions.parse(data.get("flexibleVersions")),
        fields=[_parse_field(f, common) for f in data["fields"]],
        listeners=list(data.get("listeners", [])),
        latest_version_unstable=bool(data.get("latestVersionUnstable", False)),
    )


@cache
def load_all() -> dict[str, MessageSpec]:
    """Every schema shipped with kafka-python, keyed by message name (e.g. ``"ProduceRequest"``), plus
    those it lacks or ships at older versions from kop/protocol/extra_schemas.py: an extra schema replaces
    the shipped one only when it reaches a higher version (ApiVersions v5 is newer than kafka-python 3.0's
    files), so a kafka-python that catches up wins again."""
    from kop.protocol.extra_schemas import SCHEMAS

    specs: dict[str, MessageSpec] = {}
    for entry in _schema_files():
        spec = parse_schema(entry.read_text(encoding="utf-8"))
        specs[spec.name] = spec
    for data in SCHEMAS:
        extra = parse_schema_data(data)
        shipped = specs.get(extra.name)
        if shipped is None or extra.valid_versions.high > shipped.valid_versions.high:
            specs[extra.name] = extra
    return specs


def _schema_files() -> list:
    """The JSON resource files, found without importing ``kafka`` itself.

    Importing the package would pull in kafka-python's whole client (~150 ms and many modules) just
    to read data files, so locate the package directory first and fall back to importlib.resources.
    """
    found = importlib.util.find_spec("kafka")
    if found is not None and found.submodule_search_locations:
        for location in found.submodule_search_locations:
            directory = Path(location, *SCHEMA_PACKAGE.split(".")[1:])
            files = sorted(directory.glob("*.json"))
            if files:
                return files
    return [e for e in importlib.resources.files(SCHEMA_PACKAGE).iterdir() if e.name.endswith(".json")]


def load(name: str) -> MessageSpec:
    """One schema by message name; KeyError if kafka-python does not ship it."""
    return load_all()[name]
