"""Schema definitions checked per type: valid at all, and readable one by the other - for both protocols.

Pulsar's compatibility strategies (kop/schemas/versions.py) and Confluent's compatibility levels
(kop/schemas/registry.py) ask the same two questions of a definition; this module answers them per type so that
the two sides cannot disagree:

- AVRO (and Pulsar JSON schemas whose definition is an Avro record, as Pulsar's clients write them): Apache
  Avro's own schema-resolution checker (the `avro` package), named types of references resolved first.
- JSON (a JSON Schema document, as Confluent's JSON serializer registers) and PROTOBUF: Confluent's rules, in
  kop/schemas/json_compat.py and kop/schemas/protobuf_compat.py.

`refs` everywhere is the resolved references of a definition: import name -> referenced definition text, in the
order they must be read (an Avro reference names the types a later one may use).
"""

from __future__ import annotations

import json
from collections.abc import Mapping

import avro.compatibility
import avro.name
import avro.schema

from kop.schemas import json_compat, protobuf_compat

Refs = Mapping[str, str]
NO_REFS: Refs = {}


def avro_parse(text: str, refs: Refs = NO_REFS) -> avro.schema.Schema:
    """The Avro schema `text` defines, with the named types of `refs` known (ValueError and avro's
    SchemaParseException for what is not one)."""
    names = avro.name.Names()
    for ref_text in refs.values():
        avro.schema.make_avsc_object(json.loads(ref_text), names)
    return avro.schema.make_avsc_object(json.loads(text), names)


def avro_or_none(text: str, refs: Refs = NO_REFS) -> avro.schema.Schema | None:
    try:
        return avro_parse(text, refs)
    except Exception:  # noqa: BLE001 - not JSON, or not a valid Avro schema
        return None


class _RecordsByFields(avro.compatibility.ReaderWriterCompatibilityChecker):
    """Pulsar's reading of Avro compatibility: records are resolved by their fields, whatever their names. Pulsar's
    AvroSchemaBasedCompatibilityCheck validates with Avro's SchemaValidatorBuilder (canRead / canBeRead / mutual
    read), which builds Avro's ResolvingGrammarGenerator over the two schemas; that resolves a record field by field
    and never compares the records' full names (enums and fixed keep theirs). Confluent's check - Avro's
    SchemaCompatibility, which the `avro` package's checker follows - refuses a record whose name changed."""

    def calculate_compatibility(self, reader: avro.schema.Schema, writer: avro.schema.Schema,
                                location: list[str]) -> avro.compatibility.SchemaCompatibilityResult:
        if (reader.type == writer.type and isinstance(reader, avro.schema.RecordSchema)
                and isinstance(writer, avro.schema.RecordSchema)):
            return self.check_reader_writer_record_fields(reader, writer, location)  # fields only: no name check
        return super().calculate_compatibility(reader, writer, location)


def avro_incompatibilities(reader: avro.schema.Schema, writer: avro.schema.Schema,
                           record_names: bool = True) -> list[str]:
    """Why data written with the Avro schema `writer` cannot be read with `reader` ([]: it can). `record_names`
    False: Pulsar's rule, records whose names differ are compared by their fields alone (_RecordsByFields)."""
    checker = avro.compatibility.ReaderWriterCompatibilityChecker() if record_names else _RecordsByFields()
    result = checker.get_compatibility(reader, writer)
    if result.compatibility is avro.compatibility.SchemaCompatibilityType.compatible:
        return []
    return sorted(str(m) for m in result.messages) or ["not compatible"]


def invalid(type_name: str, text: str, refs: Refs = NO_REFS) -> str | None:
    """Why a definition of Confluent type `type_name` (AVRO, JSON, PROTOBUF) is unusable; None when it is fine."""
    if type_name == "AVRO":
        try:
            avro_parse(text, refs)
        except Exception as e:  # noqa: BLE001 - the parser's reason is the answer
            return f"Invalid schema: {e}"
        return None
    if type_name == "JSON":
        try:
            json.loads(text)
        except ValueError as e:
            return f"Invalid schema: not JSON: {e}"
        return json_compat.json_invalid(text, dict(refs))
    if type_name == "PROTOBUF":
        return protobuf_compat.protobuf_invalid(text, dict(refs))
    return f"Invalid schema type {type_name}"


def incompatibilities(type_name: str, reader: str, writer: str, reader_refs: Refs = NO_REFS,
                      writer_refs: Refs = NO_REFS, names: tuple[str, str] = ("new", "old"),
                      record_names: bool = True) -> list[str]:
    """Why data written with definition `writer` cannot be read with `reader`, both of type `type_name` ([]: it
    can, or the definitions cannot be checked - a JSON definition that is neither Avro nor JSON Schema).
    `names`: what the messages call the reader and the writer (("new", "old") for BACKWARD, the reverse for
    FORWARD, as Confluent's messages name them). `record_names` False: Pulsar's Avro rule (avro_incompatibilities)."""
    if type_name in ("AVRO", "JSON"):
        r, w = avro_or_none(reader, reader_refs), avro_or_none(writer, writer_refs)
        if r is not None and w is not None:
            return avro_incompatibilities(r, w, record_names)
        if type_name == "AVRO":
            return []
        return json_compat.json_incompatibilities(reader, writer, reader_refs=dict(reader_refs),
                                                  writer_refs=dict(writer_refs), reader_name=names[0],
                                                  writer_name=names[1])
    if type_name == "PROTOBUF":
        return protobuf_compat.protobuf_incompatibilities(reader, writer, dict(reader_refs), dict(writer_refs),
                                                          reader_name=names[0], writer_name=names[1])
    return []


def protobuf_serialized(text: str, refs: Refs = NO_REFS) -> str:
    """The base64 FileDescriptorProto of a PROTOBUF definition (`?format=serialized`)."""
    return protobuf_compat.protobuf_serialized(text, dict(refs))
