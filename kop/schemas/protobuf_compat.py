"""Protobuf schemas for the registry: parsing either form Confluent's clients send, printing both forms it
answers, and Confluent's compatibility verdict between two schemas.

The two forms. A schema's text is either `.proto` source (what Confluent's Java serializer, Kafka Connect and
the REST API's users register, and what Confluent answers by default) or a base64-encoded serialized
`FileDescriptorProto` (what confluent-kafka's Python `ProtobufSerializer` registers: `_schema_to_str`, the
base64 of the generated message's `DESCRIPTOR.file.serialized_pb`; and what its `ProtobufDeserializer` asks
back with `GET /schemas/ids/{id}?format=serialized`). A schema's references (`refs`: import path -> that
file's schema text, in either form) are the files it imports; `google/protobuf/*.proto` (the well-known
types) and `google/type/*.proto` (googleapis' common types, from googleapis-common-protos) resolve without
them, as confluent-kafka's serializer registers neither. Its other builtins (`confluent/meta.proto`,
`confluent/types/decimal.proto`) are not known here: a schema importing them needs them as references.

Why protoc (grpcio-tools, in-process) for `.proto` text: the registry must accept exactly what protoc
accepts and build the same descriptors a client's generated code holds, with protoc's own error messages.
grpcio-tools ships protoc as a CPython extension on PyPI (no system binary), built against the protobuf
runtime the broker already pins, and its `_proto/` folder holds the well-known types. Pure-Python parsers
(`proto-schema-parser`, ...) give an AST only: type resolution, option checks and descriptors would be ours
to write, and to get wrong. The compile writes the files to a temporary folder (protoc reads files only);
descriptors are then checked by the protobuf runtime's own `DescriptorPool` (unknown types, duplicate
numbers, ... are refused there for the serialized form too).

The `.proto` text of a serialized schema (`protobuf_text`) is printed here from the descriptor (protobuf's
Python runtime has no printer): messages, nested types, enums, oneofs, proto3 `optional`, maps, groups,
services, extensions, reserved ranges and names, defaults and the runtime-known options. Custom options
(extensions of `*Options`) and editions files are not printed (an editions file is refused by the printer).

Compatibility (`protobuf_incompatibilities(reader, writer)`: why data written with `writer` may not be read
with `reader`; BACKWARD is reader=new, writer=old) re-states Confluent's protobuf diff
(`io.confluent.kafka.schemaregistry.protobuf.diff`) over descriptors: a list of typed differences at paths
like `#/Message/oneof/3`, incompatible unless Confluent lists the type as compatible. Covered:
PACKAGE_CHANGED; messages added / removed / moved (reordering is compatible), enums added / removed and their
constants; fields by number: added / removed (REQUIRED_FIELD_ADDED / REMOVED for proto2 `required`), renamed
(compatible), FIELD_KIND_CHANGED (scalar / message / map), FIELD_SCALAR_KIND_CHANGED across Confluent's
groups (int32/uint32/int64/uint64/bool and enums, sint32/sint64, fixed32/sfixed32, fixed64/sfixed64,
string/bytes, float, double), FIELD_NAMED_TYPE_CHANGED (a message type of another name, or a referenced
message that changed incompatibly), label changes (repeated vs singular: incompatible for numbers,
compatible for string/bytes), map key / value types; oneofs: added / removed, a field added to or removed
from one, a field moved out to the top level, fields moved in from outside (MULTIPLE_FIELDS_MOVED_TO_ONEOF,
FIELD_MOVED_TO_EXISTING_ONEOF). Not covered, as in Confluent's diff: `syntax` changes, field default values,
options, services, `reserved` (Confluent's metadata-driven `confluent:reserved` rule is not checked either),
extension fields, and a referenced file's subject/version identity (a type from a reference is compared
structurally whenever the two referenced files differ).
"""

from __future__ import annotations

import base64
import binascii
import functools
import importlib
import importlib.util
import os
import re
import tempfile
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from google.protobuf import (
    any_pb2,
    api_pb2,
    descriptor_pb2,
    descriptor_pool,
    duration_pb2,
    empty_pb2,
    field_mask_pb2,
    source_context_pb2,
    struct_pb2,
    timestamp_pb2,
    type_pb2,
    wrappers_pb2,
)
from google.protobuf.message import DecodeError
from grpc_tools import _protoc_compiler  # the compiler extension of grpcio-tools (protoc itself)
from grpc_tools import protoc as _protoc

from kop.schemas.differences import Difference, DiffPath

__all__ = [
    "COMPATIBLE_CHANGES",
    "ProtobufSchemaError",
    "protobuf_descriptor",
    "protobuf_differences",
    "protobuf_incompatibilities",
    "protobuf_invalid",
    "protobuf_serialized",
    "protobuf_text",
]

FDP = descriptor_pb2.FileDescriptorProto
FieldDP = descriptor_pb2.FieldDescriptorProto

# Confluent's protobuf SchemaDiff.COMPATIBLE_CHANGES: every other difference type is incompatible.
COMPATIBLE_CHANGES: frozenset[str] = frozenset(
    """
    MESSAGE_ADDED MESSAGE_MOVED ENUM_ADDED ENUM_REMOVED ENUM_CONST_ADDED ENUM_CONST_CHANGED ENUM_CONST_REMOVED
    FIELD_ADDED FIELD_REMOVED FIELD_NAME_CHANGED FIELD_STRING_OR_BYTES_LABEL_CHANGED ONEOF_ADDED ONEOF_REMOVED
    ONEOF_FIELD_ADDED ONEOF_FIELD_MOVED_TO_TOP_LEVEL
    """.split()
)

_MAIN_NAME = "schema.proto"  # the file name a `.proto` text schema is compiled as
_WELL_KNOWN = (
    any_pb2, api_pb2, descriptor_pb2, duration_pb2, empty_pb2, field_mask_pb2, source_context_pb2, struct_pb2,
    timestamp_pb2, type_pb2, wrappers_pb2,
)


class ProtobufSchemaError(ValueError):
    """A schema (or one of its references) that cannot be parsed or does not build."""


# --------------------------------------------------------------------------------------------------------------
# Parsing


@dataclass(frozen=True)
class _Parsed:
    main: descriptor_pb2.FileDescriptorProto
    files: dict[str, descriptor_pb2.FileDescriptorProto]  # every file by name: main, references, well-known
    serialized_form: bool  # the schema was given as a base64 FileDescriptorProto


def _google_type_folder() -> str | None:
    """googleapis-common-protos' google/type folder (its .proto files beside their generated modules)."""
    try:
        spec = importlib.util.find_spec("google.type")
    except (ImportError, ValueError):
        return None
    for folder in (spec.submodule_search_locations or []) if spec is not None else []:
        if os.path.isfile(os.path.join(folder, "date.proto")):
            return str(folder)
    return None


def _well_known() -> dict[str, descriptor_pb2.FileDescriptorProto]:
    """The files a schema imports without references: protobuf's well-known types (google/protobuf/*), and the
    common types of googleapis (google/type/*), which confluent-kafka's serializer never registers either."""
    modules: list[Any] = list(_WELL_KNOWN)
    folder = _google_type_folder()
    if folder is not None:
        for name in sorted(os.listdir(folder)):
            if name.endswith(".proto"):
                try:
                    modules.append(importlib.import_module(f"google.type.{name[:-len('.proto')]}_pb2"))
                except ImportError:
                    continue
    out = {}
    for module in modules:
        fdp = FDP()
        module.DESCRIPTOR.CopyToProto(fdp)
        out[fdp.name] = fdp
    return out


_WELL_KNOWN_FILES = _well_known()
_GOOGLE_TYPE_FOLDER = _google_type_folder()


def _decode_serialized(text: str) -> descriptor_pb2.FileDescriptorProto | None:
    """The FileDescriptorProto that `text` is the base64 of, or None when it is not that (so .proto text)."""
    compact = "".join(text.split())
    if not compact or not re.fullmatch(r"[A-Za-z0-9+/]+={0,2}", compact):
        return None
    try:
        raw = base64.b64decode(compact, validate=True)
        fdp = FDP.FromString(raw)
    except (binascii.Error, DecodeError, ValueError):
        return None
    return fdp


def _safe_path(name: str) -> str:
    parts = name.split("/")
    if not name or name.startswith("/") or any(p in ("", ".", "..") for p in parts) or "\\" in name:
        raise ProtobufSchemaError(f"Invalid reference name {name!r}")
    return os.path.join(*parts)


def _compile(folder: str, name: str) -> dict[str, descriptor_pb2.FileDescriptorProto]:
    """protoc on `name` (a file under `folder`): every file of its import closure, by name."""
    include = [folder.encode(), _protoc._get_resource_file_name("grpc_tools", "_proto").encode()]
    try:
        _protoc_compiler.get_protos(name.encode(), include)  # only for protoc's error messages
    except _protoc_compiler.ProtocErrors as e:
        raise ProtobufSchemaError("; ".join(_protoc_error(err) for err in e.errors())) from None
    out = os.path.join(folder, ".kop-descriptor-set.pb")
    args = ["protoc", f"--proto_path={folder}",
            f"--proto_path={_protoc._get_resource_file_name('grpc_tools', '_proto')}",
            "--include_imports", f"--descriptor_set_out={out}", name]
    if _protoc.main(args) != 0:
        raise ProtobufSchemaError(f"protoc could not compile {name}")
    with open(out, "rb") as f:
        fds = descriptor_pb2.FileDescriptorSet.FromString(f.read())
    os.unlink(out)
    return {fdp.name: fdp for fdp in fds.file}


def _protoc_error(err: Any) -> str:
    def s(v: Any) -> str:
        return v.decode(errors="replace") if isinstance(v, bytes) else str(v)

    return f"{s(err.filename)}:{err.line + 1}:{err.column + 1}: {s(err.message)}"  # protoc counts from 0


def _parse(text: str, refs: dict[str, str]) -> _Parsed:
    key = (text, tuple(sorted(refs.items())))
    return _parse_cached(key)


@functools.lru_cache(maxsize=256)
def _parse_cached(key: tuple[str, tuple[tuple[str, str], ...]]) -> _Parsed:
    text, ref_items = key
    refs = dict(ref_items)
    decoded_refs = {name: _decode_serialized(t) for name, t in refs.items()}
    main_fdp = _decode_serialized(text)
    files: dict[str, descriptor_pb2.FileDescriptorProto] = {}
    with tempfile.TemporaryDirectory(prefix="kop-proto-") as folder:
        if _GOOGLE_TYPE_FOLDER is not None and not any(name.startswith("google/type/") for name in refs):
            os.makedirs(os.path.join(folder, "google"))
            os.symlink(_GOOGLE_TYPE_FOLDER, os.path.join(folder, "google", "type"))
        # every reference as a .proto file, so protoc finds what a text schema (or text reference) imports
        for name, ref_text in refs.items():
            path = os.path.join(folder, _safe_path(name))
            os.makedirs(os.path.dirname(path), exist_ok=True)
            fdp = decoded_refs[name]
            if fdp is not None:
                fdp = _renamed(fdp, name)
                ref_text = _print_file(fdp)
            with open(path, "w", encoding="utf-8") as f:
                f.write(ref_text)

        def collect(name: str, chain: tuple[str, ...]) -> None:
            if name in files:
                return
            if name in chain:
                raise ProtobufSchemaError(f"Import cycle: {' -> '.join((*chain, name))}")
            fdp = decoded_refs.get(name)
            if fdp is not None:
                fdp = _renamed(fdp, name)
                for dep in fdp.dependency:
                    collect(dep, (*chain, name))
                files[name] = fdp
            elif name in refs:
                for n, f in _compile(folder, name).items():
                    files.setdefault(n, f)
            elif name in _WELL_KNOWN_FILES:
                files[name] = _WELL_KNOWN_FILES[name]
            else:
                raise ProtobufSchemaError(f"Import {name!r} is not among the schema's references")

        if main_fdp is not None:
            for dep in main_fdp.dependency:
                collect(dep, ())
            main = main_fdp
        else:
            main_name = _MAIN_NAME
            while main_name in refs:
                main_name = "_" + main_name
            with open(os.path.join(folder, main_name), "w", encoding="utf-8") as f:
                f.write(text)
            compiled = _compile(folder, main_name)
            main = compiled.pop(main_name)
            for n, fdp in compiled.items():
                files.setdefault(n, fdp)
    _build_pool(main, files)
    files[main.name] = main
    return _Parsed(main=main, files=files, serialized_form=main_fdp is not None)


def _renamed(fdp: descriptor_pb2.FileDescriptorProto, name: str) -> descriptor_pb2.FileDescriptorProto:
    """A reference's descriptor under the name it is imported by (as confluent-kafka's `_str_to_proto` does)."""
    if fdp.name == name:
        return fdp
    copy = FDP()
    copy.CopyFrom(fdp)
    copy.name = name
    return copy


def _build_pool(main: descriptor_pb2.FileDescriptorProto, files: dict[str, descriptor_pb2.FileDescriptorProto]) -> None:
    """Builds the schema in a fresh DescriptorPool: the runtime's own checks (types resolve, numbers unique, ...)."""
    pool = descriptor_pool.DescriptorPool()
    added: set[str] = set()

    def add(fdp: descriptor_pb2.FileDescriptorProto, chain: tuple[str, ...]) -> None:
        if fdp.name in added:
            return
        for dep in fdp.dependency:
            if dep in chain:
                raise ProtobufSchemaError(f"Import cycle: {' -> '.join((*chain, dep))}")
            dep_fdp = files.get(dep) or _WELL_KNOWN_FILES.get(dep)
            if dep_fdp is None:
                raise ProtobufSchemaError(f"Import {dep!r} is not among the schema's references")
            add(dep_fdp, (*chain, fdp.name))
        try:
            pool.Add(fdp)
        except (TypeError, ValueError, KeyError) as e:
            raise ProtobufSchemaError(f"{fdp.name}: {e}") from None
        added.add(fdp.name)

    add(main, ())


# --------------------------------------------------------------------------------------------------------------
# Entry points: usability and the two forms


def protobuf_invalid(text: str, refs: dict[str, str] | None = None) -> str | None:
    """Why `text` (.proto source or base64 FileDescriptorProto) with its references `refs` (import path ->
    schema text, either form) is not a usable Protobuf schema, or None when it is."""
    if not text.strip():
        return "Empty schema"
    try:
        parsed = _parse(text, refs or {})
    except ProtobufSchemaError as e:
        return str(e)
    if parsed.main.syntax == "editions":
        return "Protobuf editions are not supported"
    return None


def protobuf_serialized(text: str, refs: dict[str, str] | None = None) -> str:
    """The schema as base64 of its serialized FileDescriptorProto (Confluent's `?format=serialized`). A schema
    registered in that form is answered as it was given (re-encoded canonically)."""
    parsed = _parse(text, refs or {})
    return base64.standard_b64encode(parsed.main.SerializeToString()).decode("ascii")


def protobuf_text(text: str, refs: dict[str, str] | None = None) -> str:
    """The schema as `.proto` source: `text` itself when it is source already, else printed from the
    descriptor (see the module docstring for what the printer leaves out)."""
    parsed = _parse(text, refs or {})
    if not parsed.serialized_form:
        return text
    return _print_file(parsed.main)


def protobuf_descriptor(text: str, refs: dict[str, str] | None = None) -> descriptor_pb2.FileDescriptorProto:
    """The schema's FileDescriptorProto (a copy: the parse is cached)."""
    copy = FDP()
    copy.CopyFrom(_parse(text, refs or {}).main)
    return copy


# --------------------------------------------------------------------------------------------------------------
# The .proto printer

_SCALAR_NAMES = {
    FieldDP.TYPE_DOUBLE: "double", FieldDP.TYPE_FLOAT: "float", FieldDP.TYPE_INT64: "int64",
    FieldDP.TYPE_UINT64: "uint64", FieldDP.TYPE_INT32: "int32", FieldDP.TYPE_FIXED64: "fixed64",
    FieldDP.TYPE_FIXED32: "fixed32", FieldDP.TYPE_BOOL: "bool", FieldDP.TYPE_STRING: "string",
    FieldDP.TYPE_BYTES: "bytes", FieldDP.TYPE_UINT32: "uint32", FieldDP.TYPE_SFIXED32: "sfixed32",
    FieldDP.TYPE_SFIXED64: "sfixed64", FieldDP.TYPE_SINT32: "sint32", FieldDP.TYPE_SINT64: "sint64",
}
_MAX_FIELD_NUMBER = 536870911


def _quote(s: str) -> str:
    out = []
    for ch in s:
        code = ord(ch)
        if ch == "\\":
            out.append("\\\\")
        elif ch == '"':
            out.append('\\"')
        elif ch == "\n":
            out.append("\\n")
        elif ch == "\r":
            out.append("\\r")
        elif ch == "\t":
            out.append("\\t")
        elif code < 0x20 or code == 0x7F:
            out.append(f"\\{code:03o}")
        else:
            out.append(ch)
    return '"' + "".join(out) + '"'


def _option_value(fd: Any, value: Any) -> str | None:
    if fd.type == fd.TYPE_BOOL:
        return "true" if value else "false"
    if fd.type == fd.TYPE_STRING:
        return _quote(value)
    if fd.type == fd.TYPE_BYTES:
        return _quote(value.decode("latin-1"))
    if fd.type == fd.TYPE_ENUM:
        v = fd.enum_type.values_by_number.get(value)
        return v.name if v is not None else str(value)
    if fd.type in (fd.TYPE_MESSAGE, fd.TYPE_GROUP):
        return None  # message-valued options (editions features): not printed
    return repr(value) if isinstance(value, float) else str(value)


def _options(opts: Any, skip: Iterable[str] = ()) -> list[tuple[str, str]]:
    """The runtime-known options set on an `*Options` message, as (name, printed value)."""
    out = []
    skipped = set(skip)
    for fd, value in opts.ListFields():
        if fd.is_extension or fd.name in skipped or fd.name == "uninterpreted_option":
            continue
        if fd.is_repeated:
            continue
        printed = _option_value(fd, value)
        if printed is not None:
            out.append((fd.name, printed))
    return out


def _json_name(name: str) -> str:
    out, upper = [], False
    for ch in name:
        if ch == "_":
            upper = True
        elif upper:
            out.append(ch.upper())
            upper = False
        else:
            out.append(ch)
    return "".join(out)


def _ranges(ranges: Iterable[Any], end_inclusive: bool) -> str:
    parts = []
    for r in ranges:
        end = r.end if end_inclusive else r.end - 1
        if end == r.start:
            parts.append(str(r.start))
        elif (not end_inclusive and end >= _MAX_FIELD_NUMBER) or (end_inclusive and end == 2147483647):
            parts.append(f"{r.start} to max")
        else:
            parts.append(f"{r.start} to {end}")
    return ", ".join(parts)


class _Printer:
    def __init__(self, fdp: descriptor_pb2.FileDescriptorProto) -> None:
        self.fdp = fdp
        self.lines: list[str] = []
        self.proto3 = fdp.syntax == "proto3"

    def line(self, depth: int, text: str) -> None:
        self.lines.append("  " * depth + text)

    def file(self) -> str:
        fdp = self.fdp
        if fdp.syntax == "editions":
            raise ProtobufSchemaError("Protobuf editions are not supported")
        self.line(0, f'syntax = "{fdp.syntax or "proto2"}";')
        if fdp.package:
            self.line(0, f"package {fdp.package};")
        public, weak = set(fdp.public_dependency), set(fdp.weak_dependency)
        for i, dep in enumerate(fdp.dependency):
            kind = "public " if i in public else "weak " if i in weak else ""
            self.line(0, f'import {kind}"{dep}";')
        for name, value in _options(fdp.options):
            self.line(0, f"option {name} = {value};")
        for m in fdp.message_type:
            self.lines.append("")
            self.message(m, 0)
        for e in fdp.enum_type:
            self.lines.append("")
            self.enum(e, 0)
        self.extensions(fdp.extension, 0)
        for s in fdp.service:
            self.lines.append("")
            self.service(s)
        return "\n".join(self.lines) + "\n"

    def field_type(self, f: Any, maps: dict[str, Any]) -> str:
        if f.type in _SCALAR_NAMES:
            return _SCALAR_NAMES[f.type]
        entry = maps.get(f.type_name)
        if entry is not None:
            key, value = entry.field[0], entry.field[1]
            return f"map<{self.field_type(key, {})}, {self.field_type(value, {})}>"
        return f.type_name

    def field_options(self, f: Any) -> str:
        opts: list[tuple[str, str]] = []
        if f.HasField("default_value"):
            if f.type == FieldDP.TYPE_STRING:
                opts.append(("default", _quote(f.default_value)))
            elif f.type == FieldDP.TYPE_BYTES:
                opts.append(("default", f'"{f.default_value}"'))  # stored C-escaped already
            else:
                opts.append(("default", f.default_value))
        if f.HasField("json_name") and f.json_name != _json_name(f.name):
            opts.append(("json_name", _quote(f.json_name)))
        opts.extend(_options(f.options))
        return " [" + ", ".join(f"{k} = {v}" for k, v in opts) + "]" if opts else ""

    def field(self, f: Any, depth: int, maps: dict[str, Any], groups: dict[str, Any], in_oneof: bool) -> None:
        label = ""
        if not in_oneof:
            if f.label == FieldDP.LABEL_REPEATED and f.type_name not in maps:
                label = "repeated "
            elif f.label == FieldDP.LABEL_REQUIRED:
                label = "required "
            elif f.label == FieldDP.LABEL_OPTIONAL and (not self.proto3 or f.proto3_optional):
                label = "optional "
        if f.type == FieldDP.TYPE_GROUP:
            group = groups[f.type_name]
            self.line(depth, f"{label}group {group.name} = {f.number}{self.field_options(f)} {{")
            self.message_body(group, depth + 1)
            self.line(depth, "}")
            return
        self.line(depth, f"{label}{self.field_type(f, maps)} {f.name} = {f.number}{self.field_options(f)};")

    def message(self, m: Any, depth: int, prefix: str = "") -> None:
        self.line(depth, f"message {m.name} {{")
        self.message_body(m, depth + 1, prefix)
        self.line(depth, "}")

    def message_body(self, m: Any, depth: int, prefix: str = "") -> None:
        scope = f"{self.scope_of(m)}"
        maps = {f".{scope}.{n.name}": n for n in m.nested_type if n.options.map_entry}
        groups = {
            f.type_name: n
            for f in m.field if f.type == FieldDP.TYPE_GROUP
            for n in m.nested_type if f.type_name == f".{scope}.{n.name}"
        }
        for name, value in _options(m.options, skip=("map_entry",)):
            self.line(depth, f"option {name} = {value};")
        if m.reserved_range:
            self.line(depth, f"reserved {_ranges(m.reserved_range, end_inclusive=False)};")
        if m.reserved_name:
            self.line(depth, "reserved " + ", ".join(_quote(n) for n in m.reserved_name) + ";")
        if m.extension_range:
            self.line(depth, f"extensions {_ranges(m.extension_range, end_inclusive=False)};")
        real_oneofs = {
            i for i, _ in enumerate(m.oneof_decl)
            if not any(f.HasField("oneof_index") and f.oneof_index == i and f.proto3_optional for f in m.field)
        }
        printed_oneofs: set[int] = set()
        for f in m.field:
            if f.HasField("oneof_index") and f.oneof_index in real_oneofs:
                i = f.oneof_index
                if i in printed_oneofs:
                    continue
                printed_oneofs.add(i)
                decl = m.oneof_decl[i]
                self.line(depth, f"oneof {decl.name} {{")
                for name, value in _options(decl.options):
                    self.line(depth + 1, f"option {name} = {value};")
                for member in m.field:
                    if member.HasField("oneof_index") and member.oneof_index == i:
                        self.field(member, depth + 1, maps, groups, in_oneof=True)
                self.line(depth, "}")
            else:
                self.field(f, depth, maps, groups, in_oneof=False)
        group_names = {g.name for g in groups.values()}
        for n in m.nested_type:
            if n.options.map_entry or n.name in group_names:
                continue
            self.message(n, depth)
        for e in m.enum_type:
            self.enum(e, depth)
        self.extensions(m.extension, depth)

    def scope_of(self, m: Any) -> str:
        # the full name of message `m`, found by walking the file (descriptors do not point to their parent)
        def walk(ms: Iterable[Any], prefix: str) -> str | None:
            for x in ms:
                name = f"{prefix}.{x.name}" if prefix else x.name
                if x is m:
                    return name
                found = walk(x.nested_type, name)
                if found is not None:
                    return found
            return None

        return walk(self.fdp.message_type, self.fdp.package) or m.name

    def enum(self, e: Any, depth: int) -> None:
        self.line(depth, f"enum {e.name} {{")
        for name, value in _options(e.options):
            self.line(depth + 1, f"option {name} = {value};")
        if e.reserved_range:
            self.line(depth + 1, f"reserved {_ranges(e.reserved_range, end_inclusive=True)};")
        if e.reserved_name:
            self.line(depth + 1, "reserved " + ", ".join(_quote(n) for n in e.reserved_name) + ";")
        for v in e.value:
            opts = _options(v.options)
            suffix = " [" + ", ".join(f"{k} = {val}" for k, val in opts) + "]" if opts else ""
            self.line(depth + 1, f"{v.name} = {v.number}{suffix};")
        self.line(depth, "}")

    def extensions(self, fields: Iterable[Any], depth: int) -> None:
        by_extendee: dict[str, list[Any]] = {}
        for f in fields:
            by_extendee.setdefault(f.extendee, []).append(f)
        for extendee, fs in by_extendee.items():
            self.line(depth, f"extend {extendee} {{")
            for f in fs:
                self.field(f, depth + 1, {}, {}, in_oneof=False)
            self.line(depth, "}")

    def service(self, s: Any) -> None:
        self.line(0, f"service {s.name} {{")
        for name, value in _options(s.options):
            self.line(1, f"option {name} = {value};")
        for method in s.method:
            cs = "stream " if method.client_streaming else ""
            ss = "stream " if method.server_streaming else ""
            head = f"rpc {method.name}({cs}{method.input_type}) returns ({ss}{method.output_type})"
            opts = _options(method.options)
            if opts:
                self.line(1, head + " {")
                for name, value in opts:
                    self.line(2, f"option {name} = {value};")
                self.line(1, "}")
            else:
                self.line(1, head + ";")
        self.line(0, "}")


def _print_file(fdp: descriptor_pb2.FileDescriptorProto) -> str:
    try:
        return _Printer(fdp).file()
    except (KeyError, IndexError, AttributeError) as e:  # a malformed descriptor (not yet checked by a pool)
        raise ProtobufSchemaError(f"{fdp.name}: malformed descriptor ({e!r})") from None


# --------------------------------------------------------------------------------------------------------------
# The compatibility diff


@dataclass
class _TypeInfo:
    kind: str  # "message" or "enum"
    proto: Any  # DescriptorProto or EnumDescriptorProto
    package: str
    file: str
    is_map: bool = False


@dataclass
class _Side:
    parsed: _Parsed
    types: dict[str, _TypeInfo] = field(default_factory=dict)  # full name (no leading dot) -> type

    def __post_init__(self) -> None:
        for fdp in self.parsed.files.values():
            def walk(messages: Iterable[Any], enums: Iterable[Any], prefix: str, fdp: Any = fdp) -> None:
                for m in messages:
                    name = f"{prefix}.{m.name}" if prefix else m.name
                    self.types[name] = _TypeInfo("message", m, fdp.package, fdp.name, m.options.map_entry)
                    walk(m.nested_type, m.enum_type, name)
                for e in enums:
                    name = f"{prefix}.{e.name}" if prefix else e.name
                    self.types[name] = _TypeInfo("enum", e, fdp.package, fdp.name)

            walk(fdp.message_type, fdp.enum_type, fdp.package)

    def type(self, type_name: str) -> _TypeInfo | None:
        return self.types.get(type_name.lstrip("."))

    def local_name(self, type_name: str) -> str:
        full = type_name.lstrip(".")
        info = self.type(type_name)
        if info is not None and info.package and full.startswith(info.package + "."):
            return full[len(info.package) + 1:]
        return full


class _Ctx(DiffPath):
    def __init__(self, original: _Side, update: _Side, path: list[str] | None = None,
                 seen: set[tuple[int, int]] | None = None) -> None:
        super().__init__(path)
        self.original, self.update = original, update
        self.seen: set[tuple[int, int]] = seen if seen is not None else set()

    def compatible(self) -> bool:
        return all(d.type in COMPATIBLE_CHANGES for d in self.diffs)


def _compare_files(ctx: _Ctx) -> None:
    o, u = ctx.original.parsed.main, ctx.update.parsed.main
    if o.package != u.package:
        ctx.add("PACKAGE_CHANGED")
    _compare_types(ctx, list(o.message_type), list(o.enum_type), list(u.message_type), list(u.enum_type))


def _compare_types(ctx: _Ctx, o_msgs: list[Any], o_enums: list[Any], u_msgs: list[Any], u_enums: list[Any]) -> None:
    # a map's entry message is the map field itself in Confluent's model (as in .proto text): not a type here
    om = {m.name: (i, m) for i, m in enumerate(m for m in o_msgs if not m.options.map_entry)}
    um = {m.name: (i, m) for i, m in enumerate(m for m in u_msgs if not m.options.map_entry)}
    for name in sorted(set(om) | set(um)):
        with ctx.at(name):
            if name not in um:
                ctx.add("MESSAGE_REMOVED")
            elif name not in om:
                ctx.add("MESSAGE_ADDED")
            else:
                _compare_messages(ctx, om[name][1], um[name][1])
                if om[name][0] != um[name][0]:
                    ctx.add("MESSAGE_MOVED")
    oe = {e.name: e for e in o_enums}
    ue = {e.name: e for e in u_enums}
    for name in sorted(set(oe) | set(ue)):
        with ctx.at(name):
            if name not in ue:
                ctx.add("ENUM_REMOVED")
            elif name not in oe:
                ctx.add("ENUM_ADDED")
            else:
                _compare_enums(ctx, oe[name], ue[name])


def _compare_enums(ctx: _Ctx, original: Any, update: Any) -> None:
    ov = {v.number: v.name for v in original.value}
    uv = {v.number: v.name for v in update.value}
    for number in sorted(set(ov) | set(uv)):
        with ctx.at(str(number)):
            if number not in uv:
                ctx.add("ENUM_CONST_REMOVED")
            elif number not in ov:
                ctx.add("ENUM_CONST_ADDED")
            elif ov[number] != uv[number]:
                ctx.add("ENUM_CONST_CHANGED")


def _oneofs(m: Any) -> tuple[dict[int, Any], dict[int, str], dict[str, list[int]]]:
    """Fields by number, the (real, not proto3-optional) oneof of each member, and each oneof's members."""
    by_number = {f.number: f for f in m.field}
    member_of: dict[int, str] = {}
    members: dict[str, list[int]] = {}
    synthetic = {f.oneof_index for f in m.field if f.HasField("oneof_index") and f.proto3_optional}
    for i, decl in enumerate(m.oneof_decl):
        if i in synthetic:
            continue
        members[decl.name] = []
    for f in m.field:
        if f.HasField("oneof_index") and f.oneof_index not in synthetic:
            name = m.oneof_decl[f.oneof_index].name
            member_of[f.number] = name
            members[name].append(f.number)
    return by_number, member_of, members


def _compare_messages(ctx: _Ctx, original: Any, update: Any) -> None:
    key = (id(original), id(update))
    if key not in ctx.seen:
        ctx.seen.add(key)
        try:
            _compare_message_fields(ctx, original, update)
        finally:
            ctx.seen.discard(key)
    _compare_types(ctx, list(original.nested_type), list(original.enum_type),
                   list(update.nested_type), list(update.enum_type))


def _compare_message_fields(ctx: _Ctx, original: Any, update: Any) -> None:
    o_fields, o_member_of, o_oneofs = _oneofs(original)
    u_fields, u_member_of, u_oneofs = _oneofs(update)
    deleted_oneofs = {
        name for name, numbers in o_oneofs.items()
        if name not in u_oneofs and not any(n in u_fields for n in numbers)
    }
    for name, numbers in u_oneofs.items():
        with ctx.at(name):
            origins: set[str] = set()
            moved_in = 0
            for n in numbers:
                if n in o_member_of:
                    origins.add("oneof:" + o_member_of[n])
                elif n in o_fields:
                    origins.add(f"field:{n}")
                    moved_in += 1
            if len(origins) > 1:
                ctx.add("MULTIPLE_FIELDS_MOVED_TO_ONEOF" if moved_in > 1 else "FIELD_MOVED_TO_EXISTING_ONEOF")
    for name in sorted(set(o_oneofs) | set(u_oneofs)):
        with ctx.at(name):
            if name not in u_oneofs:
                ctx.add("ONEOF_REMOVED")
            elif name not in o_oneofs:
                ctx.add("ONEOF_ADDED")
    for number in sorted(set(o_fields) | set(u_fields)):
        of, uf = o_fields.get(number), u_fields.get(number)
        o_oneof, u_oneof = o_member_of.get(number), u_member_of.get(number)
        if uf is None:
            assert of is not None
            if o_oneof is not None:
                if o_oneof not in deleted_oneofs:
                    with ctx.at(o_oneof, str(number)):
                        ctx.add("ONEOF_FIELD_REMOVED")
            else:
                with ctx.at(str(number)):
                    ctx.add("REQUIRED_FIELD_REMOVED" if of.label == FieldDP.LABEL_REQUIRED else "FIELD_REMOVED")
        elif of is None:
            if u_oneof is not None:
                with ctx.at(u_oneof, str(number)):
                    ctx.add("ONEOF_FIELD_ADDED")
            else:
                with ctx.at(str(number)):
                    ctx.add("REQUIRED_FIELD_ADDED" if uf.label == FieldDP.LABEL_REQUIRED else "FIELD_ADDED")
        else:
            if o_oneof is not None and u_oneof is None:
                with ctx.at(str(number)):
                    ctx.add("ONEOF_FIELD_MOVED_TO_TOP_LEVEL")
            where = (u_oneof, str(number)) if u_oneof is not None else (str(number),)
            with ctx.at(*where):
                _compare_fields(ctx, of, uf, o_oneof is not None, u_oneof is not None)


def _label(f: Any, in_oneof: bool, proto3: bool) -> str | None:
    """The field's label as Confluent's parsed schema has it: None for a oneof member or a proto3 field
    without `optional`."""
    if in_oneof:
        return None
    if f.label == FieldDP.LABEL_REPEATED:
        return "repeated"
    if f.label == FieldDP.LABEL_REQUIRED:
        return "required"
    if proto3 and not f.proto3_optional:
        return None
    return "optional"


@dataclass(frozen=True)
class _FieldType:
    scalar: str | None = None  # scalar type name
    named: str | None = None  # message or enum type name (fully qualified, leading dot)
    map_of: tuple[_FieldType, _FieldType] | None = None


def _field_type(side: _Side, f: Any) -> _FieldType:
    if f.type in _SCALAR_NAMES:
        return _FieldType(scalar=_SCALAR_NAMES[f.type])
    info = side.type(f.type_name)
    if info is not None and info.kind == "message" and info.is_map:
        key, value = info.proto.field[0], info.proto.field[1]
        return _FieldType(map_of=(_field_type(side, key), _field_type(side, value)))
    return _FieldType(named=f.type_name)


def _compare_fields(ctx: _Ctx, of: Any, uf: Any, o_in_oneof: bool, u_in_oneof: bool) -> None:
    if of.name != uf.name:
        ctx.add("FIELD_NAME_CHANGED")
    o3 = ctx.original.parsed.main.syntax == "proto3"
    u3 = ctx.update.parsed.main.syntax == "proto3"
    o_label = None if _field_type(ctx.original, of).map_of else _label(of, o_in_oneof, o3)
    u_label = None if _field_type(ctx.update, uf).map_of else _label(uf, u_in_oneof, u3)
    _compare_labels_and_types(ctx, o_label, u_label, _field_type(ctx.original, of), _field_type(ctx.update, uf))


def _kind(side: _Side, t: _FieldType) -> str:
    if t.scalar is not None:
        return "SCALAR"
    if t.map_of is not None:
        return "MAP"
    assert t.named is not None
    info = side.type(t.named)
    return "SCALAR" if info is not None and info.kind == "enum" else "MESSAGE"


_SCALAR_KIND = {
    "int32": "GENERAL_NUMBER", "int64": "GENERAL_NUMBER", "uint32": "GENERAL_NUMBER", "uint64": "GENERAL_NUMBER",
    "bool": "GENERAL_NUMBER", "sint32": "SIGNED_NUMBER", "sint64": "SIGNED_NUMBER", "string": "STRING_OR_BYTES",
    "bytes": "STRING_OR_BYTES", "fixed32": "FIXED32", "sfixed32": "FIXED32", "fixed64": "FIXED64",
    "sfixed64": "FIXED64", "float": "FLOAT", "double": "DOUBLE",
}


def _scalar_kind(t: _FieldType) -> str:
    return _SCALAR_KIND[t.scalar] if t.scalar is not None else "GENERAL_NUMBER"  # an enum is a number


def _compare_labels_and_types(ctx: _Ctx, o_label: str | None, u_label: str | None, ot: _FieldType,
                              ut: _FieldType) -> None:
    o_kind, u_kind = _kind(ctx.original, ot), _kind(ctx.update, ut)
    if o_kind != u_kind:
        ctx.add("FIELD_KIND_CHANGED")
        return
    if o_kind == "SCALAR":
        osk, usk = _scalar_kind(ot), _scalar_kind(ut)
        if osk != usk:
            ctx.add("FIELD_SCALAR_KIND_CHANGED")
        elif o_label is not None and u_label is not None and o_label != u_label:
            if osk == "STRING_OR_BYTES":
                ctx.add("FIELD_STRING_OR_BYTES_LABEL_CHANGED")
            else:
                ctx.add("FIELD_NUMERIC_LABEL_CHANGED")
    elif o_kind == "MESSAGE":
        assert ot.named is not None and ut.named is not None
        _compare_message_types(ctx, ot.named, ut.named)
    else:
        assert ot.map_of is not None and ut.map_of is not None
        _compare_labels_and_types(ctx, None, None, ot.map_of[0], ut.map_of[0])
        _compare_labels_and_types(ctx, None, None, ot.map_of[1], ut.map_of[1])


def _compare_message_types(ctx: _Ctx, o_name: str, u_name: str) -> None:
    o_info, u_info = ctx.original.type(o_name), ctx.update.type(u_name)
    if o_info is None or u_info is None:
        if o_name != u_name:
            ctx.add("FIELD_NAMED_TYPE_CHANGED")
        return
    o_local, u_local = ctx.original.local_name(o_name), ctx.update.local_name(u_name)
    if o_local != u_local:
        ctx.add("FIELD_NAMED_TYPE_CHANGED")
        return
    o_main = o_info.file == ctx.original.parsed.main.name
    u_main = u_info.file == ctx.update.parsed.main.name
    if o_main and u_main:
        return  # both in the schema's own file: compared where they are declared
    if (not o_main and not u_main and o_info.file == u_info.file
            and ctx.original.parsed.files[o_info.file] == ctx.update.parsed.files[u_info.file]):
        return  # the same referenced file on both sides
    key = (id(o_info.proto), id(u_info.proto))
    if key in ctx.seen:
        return  # a recursive type: assumed compatible on the way back
    sub = _Ctx(ctx.original, ctx.update, o_local.split("."), ctx.seen)
    _compare_messages(sub, o_info.proto, u_info.proto)
    ctx.diffs.extend(sub.diffs)
    if not sub.compatible():
        ctx.add("FIELD_NAMED_TYPE_CHANGED")


# Confluent's wording of a difference (protobuf diff's Difference.error()), `%s` the reader's then the writer's role
_DESCRIPTIONS = {
    "PACKAGE_CHANGED": "The package at '{p}' in the %s schema does not match the package in the %s schema",
    "MESSAGE_REMOVED": "The %s schema is missing a MESSAGE type at path '{p}' in the %s schema",
    "FIELD_KIND_CHANGED": "The type of a field at path '{p}' in the %s schema does not match the %s schema",
    "FIELD_SCALAR_KIND_CHANGED": "The kind of a SCALAR field at path '{p}' in the %s schema does not match its kind "
                                 "in the %s schema",
    "FIELD_NAMED_TYPE_CHANGED": "The type of a MESSAGE field at path '{p}' in the %s schema does not match its type "
                                "in the %s schema",
    "FIELD_NUMERIC_LABEL_CHANGED": "The label for a NUMERIC field at path '{p}' in the %s schema does not match its "
                                   "label in the %s schema",
    "REQUIRED_FIELD_ADDED": "A required field  at path '{p}' in the %s schema is missing in the %s schema",
    "REQUIRED_FIELD_REMOVED": "The %s schema is missing a required field at path: '{p}' in the %s schema",
    "ONEOF_FIELD_REMOVED": "The %s schema is missing a oneof field at path '{p}' in the %s schema",
    "ONEOF_FIELD_MOVED_TO_TOP_LEVEL": "The oneof field at path '{p}' in the %s schema was moved out of its oneof to "
                                      "a top-level field in the %s schema",
    "MULTIPLE_FIELDS_MOVED_TO_ONEOF": "Multiple fields in the oneof at path '{p}' in the %s schema are outside a "
                                      "oneof in the %s schema",
    "FIELD_MOVED_TO_EXISTING_ONEOF": "A field in the oneof at path '{p}' in the %s schema is outside an existing "
                                     "oneof in the %s schema",
}


def _message(d: Difference, reader_name: str, writer_name: str) -> str:
    description = _DESCRIPTIONS.get(d.type, "").replace("{p}", d.path)
    if "%s" in description:
        description = description.replace("%s", reader_name, 1).replace("%s", writer_name, 1)
    return f'{{errorType:"{d.type}", description:"{description}"}}'


def _diff(original: _Parsed, update: _Parsed) -> list[Difference]:
    ctx = _Ctx(_Side(original), _Side(update))
    _compare_files(ctx)
    return ctx.diffs


def protobuf_differences(original_text: str, update_text: str, original_refs: dict[str, str] | None = None,
                         update_refs: dict[str, str] | None = None) -> list[tuple[str, str]]:
    """Every difference (type, path) from the `original` schema to the `update`, compatible ones included, as
    Confluent's protobuf SchemaDiff.compare lists them (for tests and diagnostics)."""
    diffs = _diff(_parse(original_text, original_refs or {}), _parse(update_text, update_refs or {}))
    return [(d.type, d.path) for d in diffs]


def protobuf_incompatibilities(reader_text: str, writer_text: str, reader_refs: dict[str, str] | None = None,
                               writer_refs: dict[str, str] | None = None, *, reader_name: str = "new",
                               writer_name: str = "old") -> list[str]:
    """Why data written with `writer_text` may not be read with `reader_text` (both usable, see
    `protobuf_invalid`), in Confluent's words; empty when compatible. BACKWARD is (reader=new, writer=old); for
    FORWARD call with (old, new, reader_name="old", writer_name="new"), as Confluent's messages then name the
    roles."""
    try:
        writer = _parse(writer_text, writer_refs or {})
        reader = _parse(reader_text, reader_refs or {})
    except ProtobufSchemaError as e:
        return [f"Invalid schema: {e}"]
    return [_message(d, reader_name, writer_name) for d in _diff(writer, reader) if d.type not in COMPATIBLE_CHANGES]
