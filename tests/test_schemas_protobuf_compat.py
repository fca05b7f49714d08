"""kop/schemas/protobuf_compat: the two forms a Protobuf schema comes in (.proto text; base64 FileDescriptorProto
as confluent-kafka's Python serializer registers it), and Confluent's Protobuf compatibility verdicts (sans-IO).

The serialized form is the real thing: the test compiles a .proto with protoc into a Python module (what a
user's build does), imports it, and takes `_schema_to_str(Message.DESCRIPTOR.file)`, the exact string
confluent-kafka's ProtobufSerializer registers; and it reads the registry's `?format=serialized` answer back
with confluent-kafka's own `_str_to_proto`, as its ProtobufDeserializer does.

Each row of the compatibility table is (old schema, new schema, differences): what `protobuf_differences(old,
new)` lists, compatible ones included, as Confluent's `SchemaDiff.compare(original, update)` does; the new
schema is BACKWARD-compatible when every difference is in Confluent's compatible set.
"""

from __future__ import annotations

import base64
import importlib
import sys
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType

import pytest
from confluent_kafka.schema_registry.common.protobuf import _schema_to_str, _str_to_proto
from google.protobuf import descriptor_pb2, descriptor_pool, message_factory
from grpc_tools import protoc

from kop.schemas.protobuf_compat import (
    COMPATIBLE_CHANGES,
    protobuf_descriptor,
    protobuf_differences,
    protobuf_incompatibilities,
    protobuf_invalid,
    protobuf_serialized,
    protobuf_text,
)

# Unique file and package names: generated modules register in the process-wide default descriptor pool.
COMMON_PROTO = """\
syntax = "proto2";
package kop_test.common;
message Money {
  required string currency = 1;
  optional int64 units = 2 [default = -1];
  optional string note = 3 [default = "a \\"b\\""];
  optional group Audit = 4 { optional int32 by = 1; }
  extensions 100 to max;
}
extend Money { optional int32 tip = 100; }
enum Level { option allow_alias = true; LOW = 0; NONE = 0; HIGH = 2; reserved 5 to 7; }
"""

SHOP_PROTO = """\
syntax = "proto3";
package kop_test.shop;
import "google/protobuf/timestamp.proto";
import "kop_test_common.proto";
option java_package = "com.example.shop";
option java_multiple_files = true;
message Order {
  string id = 1;
  repeated Line lines = 2;
  map<string, int64> counters = 3;
  google.protobuf.Timestamp at = 4;
  optional string note = 5;
  oneof payment { string card = 6; bytes token = 7; }
  Status status = 8;
  kop_test.common.Money total = 9 [deprecated = true];
  reserved 20, 21 to 25;
  reserved "old";
  message Line { string sku = 1; uint32 qty = 2; }
  enum Status { STATUS_UNSPECIFIED = 0; PAID = 1; }
}
service Shop { rpc Place(Order) returns (stream Order); }
"""


@pytest.fixture(scope="module")
def generated(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[ModuleType, ModuleType]]:
    """The two files compiled by protoc into Python modules, as a user's build makes them."""
    folder: Path = tmp_path_factory.mktemp("generated")
    (folder / "kop_test_common.proto").write_text(COMMON_PROTO)
    (folder / "kop_test_shop.proto").write_text(SHOP_PROTO)
    well_known = protoc._get_resource_file_name("grpc_tools", "_proto")
    assert protoc.main(["protoc", f"-I{folder}", f"-I{well_known}", f"--python_out={folder}",
                        "kop_test_common.proto", "kop_test_shop.proto"]) == 0
    sys.path.insert(0, str(folder))
    try:
        yield importlib.import_module("kop_test_shop_pb2"), importlib.import_module("kop_test_common_pb2")
    finally:
        sys.path.remove(str(folder))


def _serializer_registers(generated: tuple[ModuleType, ModuleType]) -> tuple[str, dict[str, str]]:
    shop, common = generated
    # what ProtobufSerializer registers: the message's file, and each non-builtin import as a reference
    return _schema_to_str(shop.Order.DESCRIPTOR.file), {"kop_test_common.proto": _schema_to_str(common.DESCRIPTOR)}


# --------------------------------------------------------------------------------------------------------------
# The two forms


def test_the_python_serializers_registration_is_usable(generated: tuple[ModuleType, ModuleType]) -> None:
    schema, refs = _serializer_registers(generated)
    assert protobuf_invalid(schema, refs) is None
    assert protobuf_invalid(refs["kop_test_common.proto"], {}) is None
    # the import must come with the references (google/protobuf/* need none)
    assert "kop_test_common.proto" in (protobuf_invalid(schema, {}) or "")


def test_serialized_form_is_answered_as_registered(generated: tuple[ModuleType, ModuleType]) -> None:
    schema, refs = _serializer_registers(generated)
    assert protobuf_serialized(schema, refs) == schema


def test_the_deserializer_reads_a_text_schema_in_serialized_form(generated: tuple[ModuleType, ModuleType]) -> None:
    shop, common = generated
    refs = {"kop_test_common.proto": COMMON_PROTO}
    answer = protobuf_serialized(SHOP_PROTO, refs)
    # as confluent-kafka's ProtobufDeserializer does with `GET /schemas/ids/{id}?format=serialized`
    pool = descriptor_pool.DescriptorPool()
    from google.protobuf import timestamp_pb2

    pool.AddSerializedFile(timestamp_pb2.DESCRIPTOR.serialized_pb)
    pool.Add(_str_to_proto("kop_test_common.proto", protobuf_serialized(COMMON_PROTO, {})))
    fdp = _str_to_proto("shop.proto", answer)
    pool.Add(fdp)
    order_class = message_factory.GetMessageClass(pool.FindMessageTypeByName("kop_test.shop.Order"))
    written = shop.Order(id="o-1", counters={"x": 3}, note="n", card="4242", status=shop.Order.PAID)
    written.lines.add(sku="s", qty=2)
    written.total.currency = "EUR"
    read = order_class.FromString(written.SerializeToString())
    assert (read.id, dict(read.counters), read.note, read.card, read.status) == ("o-1", {"x": 3}, "n", "4242", 1)
    assert (read.lines[0].sku, read.lines[0].qty, read.total.currency) == ("s", 2, "EUR")


def _without_json_names(fdp: descriptor_pb2.FileDescriptorProto) -> descriptor_pb2.FileDescriptorProto:
    # protoc fills json_name into descriptor sets, generated code leaves it out: not part of the schema
    fdp.name = ""

    def strip(message: descriptor_pb2.DescriptorProto) -> None:
        for f in message.field:
            f.ClearField("json_name")
        for nested in message.nested_type:
            strip(nested)

    for m in fdp.message_type:
        strip(m)
    for f in fdp.extension:
        f.ClearField("json_name")
    return fdp


def test_text_form_printed_from_the_descriptor_compiles_back_to_it(generated: tuple[ModuleType, ModuleType]) -> None:
    schema, refs = _serializer_registers(generated)
    for text, its_refs in ((schema, refs), (refs["kop_test_common.proto"], {})):
        printed = protobuf_text(text, its_refs)
        assert "syntax = " in printed and protobuf_invalid(printed, its_refs) is None
        assert _without_json_names(protobuf_descriptor(printed, its_refs)) == _without_json_names(
            protobuf_descriptor(text, its_refs))
    printed = protobuf_text(schema, refs)
    for line in ("map<string, int64> counters = 3;", "optional string note = 5;", "oneof payment {",
                 "reserved 20, 21 to 25;", 'option java_package = "com.example.shop";',
                 "rpc Place(.kop_test.shop.Order) returns (stream .kop_test.shop.Order);"):
        assert line in printed
    common = protobuf_text(refs["kop_test_common.proto"], {})
    for line in ("optional group Audit = 4 {", "extensions 100 to max;", 'optional string note = 3 [default = "a \\"b\\""];',
                 "extend .kop_test.common.Money {", "reserved 5 to 7;"):
        assert line in common


def test_a_text_schema_is_answered_as_given() -> None:
    assert protobuf_text(SHOP_PROTO, {"kop_test_common.proto": COMMON_PROTO}) == SHOP_PROTO


def test_references_may_come_in_either_form(generated: tuple[ModuleType, ModuleType]) -> None:
    schema, serialized_refs = _serializer_registers(generated)
    text_refs = {"kop_test_common.proto": COMMON_PROTO}
    assert protobuf_invalid(SHOP_PROTO, serialized_refs) is None  # text schema, serialized reference
    assert protobuf_invalid(schema, text_refs) is None  # serialized schema, text reference
    assert protobuf_differences(SHOP_PROTO, schema, text_refs, serialized_refs) == []


@pytest.mark.parametrize(
    "text, refs, why",
    [
        ("", {}, "Empty schema"),
        ("not a schema", {}, "Expected top-level statement"),
        ('syntax = "proto3";\nmessage A {\n  int32 a = 1;\n  string b = 1;\n}\n', {}, "schema.proto:4:"),
        ('syntax = "proto3";\nmessage A { Missing m = 1; }\n', {}, '"Missing" is not defined'),
        ('syntax = "proto3";\nimport "other.proto";\nmessage A { int32 a = 1; }\n', {}, "other.proto"),
        ('syntax = "proto3";\nimport "x.proto";\nmessage A { int32 a = 1; }\n',
         {"x.proto": 'syntax = "proto3"; message X { Nope n = 1; }'}, '"Nope" is not defined'),
        ('syntax = "proto3";\nimport "../x.proto";\nmessage A { int32 a = 1; }\n', {"../x.proto": 'syntax = "proto3";'},
         "Invalid reference name"),
    ],
)
def test_unusable_schemas_are_refused_with_protocs_reason(text: str, refs: dict[str, str], why: str) -> None:
    problem = protobuf_invalid(text, refs)
    assert problem is not None and why in problem


def test_a_serialized_descriptor_is_checked_as_protoc_would() -> None:
    fdp = descriptor_pb2.FileDescriptorProto(name="bad.proto", syntax="proto3")
    fdp.message_type.add(name="A").field.add(name="b", number=1, type=11, type_name=".Nope", label=1)
    problem = protobuf_invalid(base64.b64encode(fdp.SerializeToString()).decode())
    assert problem is not None and "Nope" in problem


def test_well_known_types_need_no_references() -> None:
    text = 'syntax = "proto3";\nimport "google/protobuf/any.proto";\nimport "google/protobuf/wrappers.proto";\n' \
           "message A { google.protobuf.Any any = 1; google.protobuf.StringValue s = 2; }\n"
    assert protobuf_invalid(text) is None
    assert protobuf_invalid(protobuf_serialized(text)) is None


def test_googleapis_common_types_need_no_references() -> None:
    # confluent-kafka's serializer skips google/type/* imports as builtins: the registry must know them
    text = 'syntax = "proto3";\nimport "google/type/date.proto";\nimport "google/type/money.proto";\n' \
           "message A { google.type.Date d = 1; google.type.Money m = 2; }\n"
    assert protobuf_invalid(text) is None
    assert protobuf_invalid(protobuf_serialized(text)) is None
    assert protobuf_differences(text, protobuf_serialized(text)) == []


# --------------------------------------------------------------------------------------------------------------
# Differences and verdicts


def _p3(body: str, package: str = "") -> str:
    return 'syntax = "proto3";\n' + (f"package {package};\n" if package else "") + body


def _p2(body: str) -> str:
    return 'syntax = "proto2";\n' + body


CASES: list[tuple[str, str, str, list[str]]] = [
    ("identical", _p3("message M { int32 a = 1; }"), _p3("message M { int32 a = 1; }"), []),
    ("package changed", _p3("message M { int32 a = 1; }", "a"), _p3("message M { int32 a = 1; }", "b"),
     ["PACKAGE_CHANGED #/"]),
    ("field added", _p3("message M { int32 a = 1; }"), _p3("message M { int32 a = 1; string b = 2; }"),
     ["FIELD_ADDED #/M/2"]),
    ("field removed", _p3("message M { int32 a = 1; string b = 2; }"), _p3("message M { int32 a = 1; }"),
     ["FIELD_REMOVED #/M/2"]),
    ("field renamed", _p3("message M { int32 a = 1; }"), _p3("message M { int32 b = 1; }"),
     ["FIELD_NAME_CHANGED #/M/1"]),
    ("field number changed", _p3("message M { int32 a = 1; }"), _p3("message M { int32 a = 2; }"),
     ["FIELD_REMOVED #/M/1", "FIELD_ADDED #/M/2"]),
    ("required field added", _p2("message M { optional int32 a = 1; }"),
     _p2("message M { optional int32 a = 1; required int32 b = 2; }"), ["REQUIRED_FIELD_ADDED #/M/2"]),
    ("required field removed", _p2("message M { optional int32 a = 1; required int32 b = 2; }"),
     _p2("message M { optional int32 a = 1; }"), ["REQUIRED_FIELD_REMOVED #/M/2"]),
    ("optional field removed (proto2)", _p2("message M { optional int32 a = 1; optional int32 b = 2; }"),
     _p2("message M { optional int32 a = 1; }"), ["FIELD_REMOVED #/M/2"]),
    # scalar groups
    ("int32 to int64", _p3("message M { int32 a = 1; }"), _p3("message M { int64 a = 1; }"), []),
    ("uint32 to bool", _p3("message M { uint32 a = 1; }"), _p3("message M { bool a = 1; }"), []),
    ("sint32 to sint64", _p3("message M { sint32 a = 1; }"), _p3("message M { sint64 a = 1; }"), []),
    ("fixed32 to sfixed32", _p3("message M { fixed32 a = 1; }"), _p3("message M { sfixed32 a = 1; }"), []),
    ("fixed64 to sfixed64", _p3("message M { fixed64 a = 1; }"), _p3("message M { sfixed64 a = 1; }"), []),
    ("string to bytes", _p3("message M { string a = 1; }"), _p3("message M { bytes a = 1; }"), []),
    ("int32 to sint32", _p3("message M { int32 a = 1; }"), _p3("message M { sint32 a = 1; }"),
     ["FIELD_SCALAR_KIND_CHANGED #/M/1"]),
    ("int64 to fixed64", _p3("message M { int64 a = 1; }"), _p3("message M { fixed64 a = 1; }"),
     ["FIELD_SCALAR_KIND_CHANGED #/M/1"]),
    ("float to double", _p3("message M { float a = 1; }"), _p3("message M { double a = 1; }"),
     ["FIELD_SCALAR_KIND_CHANGED #/M/1"]),
    ("string to int32", _p3("message M { string a = 1; }"), _p3("message M { int32 a = 1; }"),
     ["FIELD_SCALAR_KIND_CHANGED #/M/1"]),
    ("int32 to an enum", _p3("message M { int32 a = 1; }"), _p3("message M { E a = 1; }\nenum E { Z = 0; }"),
     ["ENUM_ADDED #/E"]),
    ("string to a message", _p3("message M { string a = 1; }\nmessage N { string s = 1; }"),
     _p3("message M { N a = 1; }\nmessage N { string s = 1; }"), ["FIELD_KIND_CHANGED #/M/1"]),
    ("message type renamed", _p3("message M { N a = 1; }\nmessage N { string s = 1; }"),
     _p3("message M { O a = 1; }\nmessage O { string s = 1; }"),
     ["FIELD_NAMED_TYPE_CHANGED #/M/1", "MESSAGE_REMOVED #/N", "MESSAGE_ADDED #/O"]),
    # labels
    ("int32 made repeated", _p3("message M { int32 a = 1; }"), _p3("message M { repeated int32 a = 1; }"), []),
    ("optional int32 made repeated", _p3("message M { optional int32 a = 1; }"),
     _p3("message M { repeated int32 a = 1; }"), ["FIELD_NUMERIC_LABEL_CHANGED #/M/1"]),
    ("optional string made repeated", _p3("message M { optional string a = 1; }"),
     _p3("message M { repeated string a = 1; }"), ["FIELD_STRING_OR_BYTES_LABEL_CHANGED #/M/1"]),
    ("proto2 optional int32 made repeated", _p2("message M { optional int32 a = 1; }"),
     _p2("message M { repeated int32 a = 1; }"), ["FIELD_NUMERIC_LABEL_CHANGED #/M/1"]),
    ("proto3 field made optional", _p3("message M { int32 a = 1; }"), _p3("message M { optional int32 a = 1; }"), []),
    # maps
    ("map value type changed", _p3("message M { map<string, int32> m = 1; }"),
     _p3("message M { map<string, string> m = 1; }"), ["FIELD_SCALAR_KIND_CHANGED #/M/1"]),
    ("map key widened", _p3("message M { map<int32, string> m = 1; }"), _p3("message M { map<int64, string> m = 1; }"),
     []),
    ("map to repeated message", _p3("message M { map<string, int32> m = 1; }\nmessage E { string k = 1; }"),
     _p3("message M { repeated E m = 1; }\nmessage E { string k = 1; }"), ["FIELD_KIND_CHANGED #/M/1"]),
    # messages and enums
    ("message added", _p3("message M { int32 a = 1; }"), _p3("message M { int32 a = 1; }\nmessage N { int32 b = 1; }"),
     ["MESSAGE_ADDED #/N"]),
    ("message removed", _p3("message M { int32 a = 1; }\nmessage N { int32 b = 1; }"), _p3("message M { int32 a = 1; }"),
     ["MESSAGE_REMOVED #/N"]),
    ("messages reordered", _p3("message M { int32 a = 1; }\nmessage N { int32 b = 1; }"),
     _p3("message N { int32 b = 1; }\nmessage M { int32 a = 1; }"), ["MESSAGE_MOVED #/M", "MESSAGE_MOVED #/N"]),
    ("nested message's field changed", _p3("message M { message I { int32 a = 1; } I i = 1; }"),
     _p3("message M { message I { string a = 1; } I i = 1; }"), ["FIELD_SCALAR_KIND_CHANGED #/M/I/1"]),
    ("enum constant added, renamed, removed", _p3("enum E { A = 0; B = 1; C = 2; }"),
     _p3("enum E { A = 0; BB = 1; D = 3; }"),
     ["ENUM_CONST_CHANGED #/E/1", "ENUM_CONST_REMOVED #/E/2", "ENUM_CONST_ADDED #/E/3"]),
    ("enum removed", _p3("message M { int32 a = 1; }\nenum E { A = 0; }"), _p3("message M { int32 a = 1; }"),
     ["ENUM_REMOVED #/E"]),
    # oneofs
    ("one field moved into a new oneof", _p3("message M { int32 a = 1; int32 b = 2; }"),
     _p3("message M { int32 a = 1; oneof o { int32 b = 2; } }"), ["ONEOF_ADDED #/M/o"]),
    ("two fields moved into a new oneof", _p3("message M { int32 a = 1; int32 b = 2; }"),
     _p3("message M { oneof o { int32 a = 1; int32 b = 2; } }"),
     ["MULTIPLE_FIELDS_MOVED_TO_ONEOF #/M/o", "ONEOF_ADDED #/M/o"]),
    ("a field moved into an existing oneof", _p3("message M { int32 a = 1; oneof o { int32 b = 2; } }"),
     _p3("message M { oneof o { int32 a = 1; int32 b = 2; } }"), ["FIELD_MOVED_TO_EXISTING_ONEOF #/M/o"]),
    ("a field added to a oneof", _p3("message M { oneof o { int32 a = 1; } }"),
     _p3("message M { oneof o { int32 a = 1; string b = 2; } }"), ["ONEOF_FIELD_ADDED #/M/o/2"]),
    ("a field removed from a oneof", _p3("message M { oneof o { int32 a = 1; string b = 2; } }"),
     _p3("message M { oneof o { int32 a = 1; } }"), ["ONEOF_FIELD_REMOVED #/M/o/2"]),
    ("a oneof field moved to the top level", _p3("message M { oneof o { int32 a = 1; string b = 2; } }"),
     _p3("message M { oneof o { int32 a = 1; } string b = 2; }"), ["ONEOF_FIELD_MOVED_TO_TOP_LEVEL #/M/2"]),
    ("a oneof renamed", _p3("message M { oneof o { int32 a = 1; } }"), _p3("message M { oneof p { int32 a = 1; } }"),
     ["ONEOF_REMOVED #/M/o", "ONEOF_ADDED #/M/p"]),
    ("a oneof member's type changed", _p3("message M { oneof o { int32 a = 1; } }"),
     _p3("message M { oneof o { string a = 1; } }"), ["FIELD_SCALAR_KIND_CHANGED #/M/o/1"]),
    # what Confluent's diff does not look at
    ("syntax changed", _p2("message M { optional int32 a = 1; }"), _p3("message M { optional int32 a = 1; }"), []),
    ("default changed", _p2("message M { optional int32 a = 1 [default = 1]; }"),
     _p2("message M { optional int32 a = 1 [default = 2]; }"), []),
]


@pytest.mark.parametrize("old, new, differences", [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_differences_as_confluent_reports_them(old: str, new: str, differences: list[str]) -> None:
    assert protobuf_invalid(old) is None and protobuf_invalid(new) is None
    got = [f"{t} {p}" for t, p in protobuf_differences(old, new)]
    assert sorted(got) == sorted(differences)


@pytest.mark.parametrize("old, new, differences", [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_backward_verdict_is_the_incompatible_differences(old: str, new: str, differences: list[str]) -> None:
    incompatible = sorted(d for d in differences if d.split()[0] not in COMPATIBLE_CHANGES)
    messages = protobuf_incompatibilities(new, old)
    assert sorted(m.split('"')[1] for m in messages) == [d.split()[0] for d in incompatible]
    for d in incompatible:
        type_, path = d.split()
        assert any(m.startswith(f'{{errorType:"{type_}"') and f"'{path}'" in m for m in messages)


def test_both_verdicts_are_in_the_table() -> None:
    verdicts = {all(d.split()[0] in COMPATIBLE_CHANGES for d in c[3]) for c in CASES}
    assert verdicts == {True, False}


def test_message_wording_is_confluents() -> None:
    old, new = _p3("message M { int32 a = 1; }"), _p3("message M { string a = 1; }")
    assert protobuf_incompatibilities(new, old) == [
        "{errorType:\"FIELD_SCALAR_KIND_CHANGED\", description:\"The kind of a SCALAR field at path '#/M/1' in the "
        "new schema does not match its kind in the old schema\"}"
    ]
    old, new = _p3("message M { int32 a = 1; }\nmessage N { int32 b = 1; }"), _p3("message M { int32 a = 1; }")
    assert protobuf_incompatibilities(new, old) == [
        "{errorType:\"MESSAGE_REMOVED\", description:\"The new schema is missing a MESSAGE type at path '#/N' in the "
        "old schema\"}"
    ]
    # FORWARD: the old schema reads what the new one writes; a message the new one adds, the old one lacks
    old, new = new, old
    assert protobuf_incompatibilities(old, new, reader_name="old", writer_name="new") == [
        "{errorType:\"MESSAGE_REMOVED\", description:\"The old schema is missing a MESSAGE type at path '#/N' in the "
        "new schema\"}"
    ]


def test_the_same_schema_in_both_forms_has_no_differences(generated: tuple[ModuleType, ModuleType]) -> None:
    schema, refs = _serializer_registers(generated)
    text_refs = {"kop_test_common.proto": COMMON_PROTO}
    assert protobuf_differences(schema, SHOP_PROTO, refs, text_refs) == []
    assert protobuf_incompatibilities(protobuf_text(schema, refs), schema, refs, refs) == []


def test_a_referenced_message_changed_incompatibly() -> None:
    main = _p3('import "dep.proto";\nmessage M { .dep.D d = 1; }')
    old_dep = _p3("message D { int32 x = 1; }", "dep")
    new_dep = _p3("message D { string x = 1; }", "dep")
    assert protobuf_incompatibilities(main, main, {"dep.proto": old_dep}, {"dep.proto": old_dep}) == []
    assert sorted(t for t, _ in protobuf_differences(main, main, {"dep.proto": old_dep}, {"dep.proto": new_dep})) == [
        "FIELD_NAMED_TYPE_CHANGED", "FIELD_SCALAR_KIND_CHANGED"]
    assert [p for _, p in protobuf_differences(main, main, {"dep.proto": old_dep}, {"dep.proto": new_dep})] == [
        "#/D/1", "#/M/1"]


def test_a_message_moved_into_a_reference_is_compared_structurally() -> None:
    old = _p3("message M { D d = 1; }\nmessage D { int32 x = 1; }")
    new = _p3('import "dep.proto";\nmessage M { .dep.D d = 1; }')
    refs = {"dep.proto": _p3("message D { int64 x = 1; }", "dep")}
    assert protobuf_differences(old, new, {}, refs) == [("MESSAGE_REMOVED", "#/D")]
