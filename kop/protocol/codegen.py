"""Generate straight-line decode/encode functions per (message, version) with ``exec``.

Why generate: a per-field interpreter loop costs ~10-40x more than straight-line code (measured when the
codec was written; tests/test_protocol_codec.py checks the generated code against the schemas). For one message version the generator emits a single function in which
  * runs of fixed-width fields are (un)packed with one precompiled ``struct.Struct``; a length
    prefix or the first byte of a compact varint / tag buffer rides along at the end of the run;
  * nested structs are inlined and arrays become plain ``for`` loops (no per-struct calls);
  * the flexible-version tag buffer is a single byte in the common no-tags case;
  * record blobs decode as zero-copy ``memoryview`` slices and encode by reference.

Decoders have the signature ``decode(data: memoryview, pos: int) -> (obj, pos)`` and raise
``DecodeError`` for any malformed input (bounds are checked before every slice and loop, and the
low-level ``struct.error``/``IndexError`` of a truncated read are translated). Encoders have the
signature ``encode(obj, cur: list, parts: list) -> None``: small pieces are appended to ``cur``, and
whenever a large or list-valued records field is met, ``cur`` is joined into ``parts`` and the
records buffers are appended to ``parts`` as they are.

An element of a struct array may be an ``Encoded`` instead of a struct object: its bytes are that element
already encoded at the same version, and go out as they are. Why: some answers repeat large, rarely
changing parts (Metadata for 10 000 partitions builds and encodes 10 000 partition structs per request;
profiles put ~90% of its time there), and a cache of encoded elements makes them a copy. ``struct_encoder``
produces those bytes with the same generated code as the inline path, so they cannot differ.
"""

from __future__ import annotations

import struct
from collections.abc import Callable
from typing import TypeAlias, cast

from .compression import BytesLike
from .errors import DecodeError
from .model import ZERO_UUID, MessageModel, Struct, default_kind
from .schema import FIXED_TYPES, NO_VERSIONS, FieldSpec

#: ``decode(data, pos) -> (obj, pos)``
Decoder: TypeAlias = Callable[[memoryview, int], tuple[Struct, int]]
#: ``encode(obj, cur, parts)``: small pieces into ``cur``, records by reference into ``parts``
Encoder: TypeAlias = Callable[[Struct, list[bytes], list[BytesLike]], None]

#: record blobs at least this large are appended to ``parts`` by reference instead of being copied.
RECORDS_BY_REFERENCE = 1024

_SIZES = {c: struct.calcsize(">" + c) for c in FIXED_TYPES.values()}
_UV1 = tuple(bytes((i,)) for i in range(128))
#: precompiled Structs for arrays of primitives, by element format and count (formatting a format
#: string and looking it up in struct's cache per array costs more than the unpacking itself).
ARRAY_TABLE_SIZE = 64
_ARRAY_STRUCTS = {c: tuple(struct.Struct(f">{n}{c}") for n in range(ARRAY_TABLE_SIZE))
                  for c in set(FIXED_TYPES.values()) if c != "16s"}


class Encoded(bytes):
    """One element of a struct array, already encoded (at the version it will be sent with)."""

    __slots__ = ()


def array_struct(fmt: str, count: int) -> struct.Struct:
    """The Struct for ``count`` big-endian elements of format ``fmt`` (cached for small counts)."""
    if count < ARRAY_TABLE_SIZE:
        return _ARRAY_STRUCTS[fmt][count]
    return struct.Struct(f">{count}{fmt}")


def uvarint_bytes(value: int) -> bytes:
    """Unsigned varint encoding (used for compact lengths and tag numbers)."""
    if value < 0x80:
        return _UV1[value]
    if value < 0x4000:  # the common sizes of record blobs get a branch each
        return bytes(((value & 0x7F) | 0x80, value >> 7))
    if value < 0x200000:
        return bytes(((value & 0x7F) | 0x80, ((value >> 7) & 0x7F) | 0x80, value >> 14))
    out = bytearray()
    while value > 0x7F:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def uvarint_continue(data: memoryview, pos: int, first: int) -> tuple[int, int]:
    """Finish an unsigned varint whose first byte ``first`` (>= 0x80) was already consumed."""
    value = first & 0x7F
    shift = 7
    while True:
        b = data[pos]
        pos += 1
        value |= (b & 0x7F) << shift
        if not b & 0x80:
            return value, pos
        shift += 7
        if shift > 28:
            raise DecodeError("unsigned varint longer than 5 bytes")


def uvarint_read(data: memoryview, pos: int) -> tuple[int, int]:
    b = data[pos]
    if b < 128:
        return b, pos + 1
    return uvarint_continue(data, pos + 1, b)


def tag_buffer(tagged: list[tuple[int, bytes]]) -> bytes:
    """Encode a tag buffer from (tag, payload) pairs already in ascending tag order."""
    if not tagged:
        return b"\x00"
    out = [uvarint_bytes(len(tagged))]
    for tag, payload in tagged:
        out.append(uvarint_bytes(tag))
        out.append(uvarint_bytes(len(payload)))
        out.append(payload)
    return b"".join(out)


#: Kafka's decoder limits (its generated message readers, 4.3+): a collection longer than this, or a tag buffer
#: with more tagged fields than that, is refused when its length is read, before anything is allocated. Lengths
#: are also bounded by the bytes left in the frame, but a 100 MB request (socket.request.max.bytes) could still
#: announce 100 million one-byte elements; Kafka refuses such requests (closing the connection), and so do we.
MAX_COLLECTION_SIZE = 1_000_000
MAX_TAGGED_FIELDS = 10_000


def skip_tag_buffer(data: memoryview, pos: int) -> int:
    """Skip a whole tag buffer (used for headers, whose tags we do not interpret)."""
    end = len(data)
    count, pos = uvarint_read(data, pos)
    if count > end - pos:
        _raise_tags_truncated("tag buffer", count, end - pos)
    if count > MAX_TAGGED_FIELDS:
        _raise_too_many_tags("tag buffer", count)
    for _ in range(count):
        _tag, pos = uvarint_read(data, pos)
        size, pos = uvarint_read(data, pos)
        pos += size
        if pos > end:
            raise DecodeError("tagged field runs past the end of the buffer")
    return pos


_DECODE_ERRORS = (struct.error, IndexError, ValueError, UnicodeDecodeError, OverflowError, TypeError)


def _raise_truncated(what: str) -> None:
    raise DecodeError(f"{what}: length runs past the end of the buffer")


def _raise_null(what: str) -> None:
    raise DecodeError(f"{what}: null in a non-nullable field")


# The limit errors use Kafka's messages (after where in the message it happened).
def _raise_too_large(what: str, count: int) -> None:
    raise DecodeError(f"{what}: Tried to read a collection of size {count}, which exceeds the maximum allowed "
                      f"size of {MAX_COLLECTION_SIZE}.")


def _raise_tags_truncated(what: str, count: int, remaining: int) -> None:
    raise DecodeError(f"{what}: Tried to read {count} tagged fields, but there are only {remaining} bytes "
                      "remaining.")


def _raise_too_many_tags(what: str, count: int) -> None:
    raise DecodeError(f"{what}: Tried to read {count} tagged fields, which exceeds the maximum allowed count of "
                      f"{MAX_TAGGED_FIELDS}.")


class _Emitter:
    """Shared machinery: source lines, unique names and the pending fixed-width run."""

    def __init__(self, model: MessageModel, version: int, flexible: bool) -> None:
        self.model = model
        self.version = version
        self.flexible = flexible
        self.lines: list[str] = []
        self.globs: dict[str, object] = {
            "DecodeError": DecodeError,
            "_uvc": uvarint_continue,
            "_uvr": uvarint_read,
            "_uvb": uvarint_bytes,
            "_UV1": _UV1,
            "_arr": array_struct,
            "_new": object.__new__,
            "_trunc": _raise_truncated,
            "_null": _raise_null,
            "_big": _raise_too_large,
            "_ttrunc": _raise_tags_truncated,
            "_tmany": _raise_too_many_tags,
            "_MAXN": MAX_COLLECTION_SIZE,
            "_MAXT": MAX_TAGGED_FIELDS,
            "_tagbuf": tag_buffer,
            "_BYREF": RECORDS_BY_REFERENCE,
            "_join": b"".join,
            "_ZU": ZERO_UUID,
            "_ERRS": _DECODE_ERRORS,
            "_ENC": Encoded,
        }
        self._counter = 0
        self._consts: dict[tuple[str, object], str] = {}
        self.run_fmt: list[str] = []
        self.run_items: list[str] = []
        self.run_indent = ""

    def var(self, prefix: str) -> str:
        self._counter += 1
        return f"{prefix}{self._counter}"

    def glob(self, value: object, prefix: str) -> str:
        key = (prefix, id(value)) if not isinstance(value, (int, str, bytes, float)) else (prefix, value)
        name = self._consts.get(key)
        if name is None:
            name = self.var(prefix)
            self.globs[name] = value
            self._consts[key] = name
        return name

    def struct_const(self, fmt: str) -> str:
        return self.glob(struct.Struct(">" + fmt), "_S")

    def emit(self, indent: str, line: str) -> None:
        self.lines.append(indent + line)

    def add_run(self, indent: str, fmt: str, item: str) -> None:
        if self.run_fmt and self.run_indent != indent:
            raise AssertionError("fixed-width run crossed an indentation change")
        self.run_indent = indent
        self.run_fmt.append(fmt)
        self.run_items.append(item)

    def compact(self, f: FieldSpec) -> bool:
        if f.flexible_versions is not None:
            return self.version in f.flexible_versions
        return self.flexible

    def cls_name(self, f: FieldSpec) -> str:
        return self.glob(self.model.classes[f.struct_name], "_C")  # type: ignore[index]


class DecoderGen(_Emitter):
    """Emits ``decode(data, pos) -> (obj, pos)`` for one message version."""

    def flush(self) -> None:
        if not self.run_fmt:
            return
        fmt = "".join(self.run_fmt)
        ind = self.run_indent
        if fmt == "B":  # a lone length/tag-count byte: indexing beats a Struct call
            self.emit(ind, f"{self.run_items[0]} = data[pos]")
            self.emit(ind, "pos += 1")
        else:
            targets = ", ".join(self.run_items) + ("," if len(self.run_items) == 1 else "")
            self.emit(ind, f"{targets} = {self.struct_const(fmt)}.unpack_from(data, pos)")
            self.emit(ind, f"pos += {struct.calcsize('>' + fmt)}")
        self.run_fmt, self.run_items = [], []

    def generate(self) -> Decoder:
        root = self.model.spec.name
        ind = "        "
        self.lines.append("def decode(data, pos):")
        self.lines.append("    end = len(data)")
        self.lines.append("    try:")
        self.emit(ind, f"o = _new({self.glob(self.model.root, '_C')})")
        self.fields(self.model.fields_of[root], "o", ind, root)
        self.flush()
        self.lines.append("    except _ERRS as exc:")
        self.lines.append(f"        raise DecodeError(f'{root} v{self.version}: {{exc!r}}') from None")
        self.lines.append("    return o, pos")
        return cast(Decoder, _compile(self, f"decode {root} v{self.version}", "decode"))

    def default_assign(self, f: FieldSpec, target: str, ind: str) -> None:
        kind, value = default_kind(f)
        if kind == "list":
            self.emit(ind, f"{target} = []")
        elif kind == "struct":
            self.emit(ind, f"{target} = {self.cls_name(f)}()")
        elif value is None or isinstance(value, (bool, int, float)):
            self.emit(ind, f"{target} = {value!r}")
        else:
            self.emit(ind, f"{target} = {self.glob(value, '_D')}")

    def fields(self, fields: list[FieldSpec], obj: str, ind: str, where: str) -> None:
        v = self.version
        tagged: list[FieldSpec] = []
        for f in fields:
            if not f.present(v):
                self.default_assign(f, f"{obj}.{f.attr}", ind)
            elif self.flexible and f.tagged(v):
                self.default_assign(f, f"{obj}.{f.attr}", ind)
                tagged.append(f)
            else:
                self.field(f, f"{obj}.{f.attr}", ind, f"{where}.{f.attr}")
        if self.flexible:
            self.tags(tagged, obj, ind, where)

    def tags(self, tagged: list[FieldSpec], obj: str, ind: str, where: str) -> None:
        t = self.var("t")
        self.add_run(ind, "B", t)
        self.flush()
        self.emit(ind, f"if {t}:")
        i2 = ind + "    "
        self.emit(i2, f"if {t} > 127: {t}, pos = _uvc(data, pos, {t})")
        self.emit(i2, f"if {t} > end - pos: _ttrunc({where!r}, {t}, end - pos)")
        self.emit(i2, f"if {t} > _MAXT: _tmany({where!r}, {t})")
        self.emit(i2, f"for _ in range({t}):")
        i3 = i2 + "    "
        tag, size, tend = self.var("tag"), self.var("sz"), self.var("te")
        self.emit(i3, f"{tag}, pos = _uvr(data, pos)")
        self.emit(i3, f"{size}, pos = _uvr(data, pos)")
        self.emit(i3, f"{tend} = pos + {size}")
        self.emit(i3, f"if {tend} > end: _trunc({where!r})")
        keyword = "if"
        for f in sorted(tagged, key=lambda f: f.tag):  # type: ignore[arg-type, return-value]
            self.emit(i3, f"{keyword} {tag} == {f.tag}:")
            keyword = "elif"
            i4 = i3 + "    "
            self.field(f, f"{obj}.{f.attr}", i4, f"{where}.{f.attr}")
            self.flush()
            self.emit(i4, f"if pos > {tend}: _trunc({where!r} + '.{f.attr}')")
        self.emit(i3, f"pos = {tend}")

    def length(self, f: FieldSpec, ind: str, wide: bool) -> str:
        """Read a length/count prefix into a fresh variable; -1 means null."""
        n = self.var("n")
        if self.compact(f):
            self.add_run(ind, "B", n)
            self.flush()
            self.emit(ind, f"if {n} > 127: {n}, pos = _uvc(data, pos, {n})")
            self.emit(ind, f"{n} -= 1")
        else:
            self.add_run(ind, "i" if wide else "h", n)
            self.flush()
        return n

    def field(self, f: FieldSpec, target: str, ind: str, where: str) -> None:
        v = self.version
        t = f.type
        if t in FIXED_TYPES:
            self.add_run(ind, FIXED_TYPES[t], target)
            return
        nullable = f.nullable(v)
        if t in ("string", "bytes", "records"):
            n = self.length(f, ind, wide=t != "string")
            i2 = ind + "    "
            self.emit(ind, f"if {n} < 0:")
            self.emit(i2, f"{target} = None" if nullable else f"_null({where!r})")
            self.emit(ind, "else:")
            e = self.var("e")
            self.emit(i2, f"{e} = pos + {n}")
            self.emit(i2, f"if {e} > end: _trunc({where!r})")
            if t == "string":
                self.emit(i2, f"{target} = str(data[pos:{e}], 'utf-8')")
            elif t == "bytes":
                self.emit(i2, f"{target} = bytes(data[pos:{e}])")
            else:
                self.emit(i2, f"{target} = data[pos:{e}]")
            self.emit(i2, f"pos = {e}")
            return
        if f.is_array:
            n = self.length(f, ind, wide=True)
            i2 = ind + "    "
            self.emit(ind, f"if {n} < 0:")
            self.emit(i2, f"{target} = None" if nullable else f"_null({where!r})")
            self.emit(ind, "else:")
            self.emit(i2, f"if {n} > end - pos: _trunc({where!r})")
            self.emit(i2, f"if {n} > _MAXN: _big({where!r}, {n})")
            et = f.element_type
            if et in FIXED_TYPES and et != "uuid":
                c = FIXED_TYPES[et]
                table = self.glob(_ARRAY_STRUCTS[c], "_AT")
                self.emit(i2, f"{target} = list(({table}[{n}] if {n} < {ARRAY_TABLE_SIZE} "
                              f"else _arr({c!r}, {n})).unpack_from(data, pos))")
                self.emit(i2, f"pos += {n} * {_SIZES[c]}")
                return
            lst, item = self.var("l"), self.var("x")
            self.emit(i2, f"{lst} = []")
            self.emit(i2, f"for _ in range({n}):")
            i3 = i2 + "    "
            if f.is_struct:
                self.emit(i3, f"{item} = _new({self.cls_name(f)})")
                self.fields(f.fields or [], item, i3, where + "[]")
            else:
                # an array's elements are never null, even in a nullable array (Kafka's generated readers refuse
                # a null element: "non-nullable field ... was serialized as null"); the fuzzer found a None topic
                # name kept by a share group and then unencodable in ShareGroupDescribe
                elem = FieldSpec(f.name, f.attr, et, f.versions, NO_VERSIONS, f.tagged_versions,
                                 None, None, False, f.flexible_versions)
                self.field(elem, item, i3, where + "[]")
            self.flush()
            self.emit(i3, f"{lst}.append({item})")
            self.emit(i2, f"{target} = {lst}")
            return
        if f.is_struct:
            item = self.var("s")
            if nullable:
                p = self.var("p")
                self.add_run(ind, "b", p)
                self.flush()
                self.emit(ind, f"if {p} < 0:")
                self.emit(ind + "    ", f"{target} = None")
                self.emit(ind, "else:")
                ind = ind + "    "
            self.emit(ind, f"{item} = _new({self.cls_name(f)})")
            self.fields(f.fields or [], item, ind, where)
            if nullable:
                self.flush()
            self.emit(ind, f"{target} = {item}")
            return
        raise ValueError(f"unsupported type {t!r} at {where}")


class EncoderGen(_Emitter):
    """Emits ``encode(obj, cur, parts) -> None`` for one message version."""

    def __init__(self, model: MessageModel, version: int, flexible: bool) -> None:
        super().__init__(model, version, flexible)
        self.app = "a"  # the name of the bound ``append`` that small pieces go to

    def flush(self) -> None:
        if not self.run_fmt:
            return
        fmt = "".join(self.run_fmt)
        if all(item == "0" for item in self.run_items) and fmt == "B" * len(self.run_fmt):
            const = self.glob(b"\x00" * len(self.run_fmt), "_K")
            self.emit(self.run_indent, f"{self.app}({const})")
        else:
            args = ", ".join(self.run_items)
            self.emit(self.run_indent, f"{self.app}({self.struct_const(fmt)}.pack({args}))")
        self.run_fmt, self.run_items = [], []

    def generate(self) -> Encoder:
        root = self.model.spec.name
        ind = "    "
        self.lines.append("def encode(o, cur, parts):")
        self.emit(ind, "a = cur.append")
        self.fields(self.model.fields_of[root], "o", ind)
        self.flush()
        return cast(Encoder, _compile(self, f"encode {root} v{self.version}", "encode"))

    def generate_struct(self, struct_name: str) -> Encoder:
        """``encode(obj, cur, parts)`` for one nested struct type alone (its bytes as an array element)."""
        self.lines.append("def encode(o, cur, parts):")
        self.emit("    ", "a = cur.append")
        self.fields(self.model.fields_of[struct_name], "o", "    ")
        self.flush()
        return cast(Encoder, _compile(self, f"encode {self.model.spec.name}.{struct_name} v{self.version}", "encode"))

    def fields(self, fields: list[FieldSpec], obj: str, ind: str) -> None:
        v = self.version
        tagged: list[FieldSpec] = []
        for f in fields:
            if not f.present(v):
                continue
            if self.flexible and f.tagged(v):
                tagged.append(f)
            else:
                self.field(f, f"{obj}.{f.attr}", ind)
        if not self.flexible:
            return
        if not tagged:
            self.add_run(ind, "B", "0")
            return
        self.flush()
        ordered = sorted(tagged, key=lambda f: f.tag)  # type: ignore[arg-type, return-value]
        values = []
        for f in ordered:
            val = self.var("v")
            self.emit(ind, f"{val} = {obj}.{f.attr}")
            values.append(val)
        # Fast path: every tagged field still at its (cheaply recognisable) default.
        self.emit(ind, "if " + " and ".join(self.at_default(f, v) for f, v in zip(ordered, values, strict=True)) + ":")
        self.add_run(ind + "    ", "B", "0")
        self.flush()
        self.emit(ind, "else:")
        ind = ind + "    "
        tg = self.var("tg")
        self.emit(ind, f"{tg} = []")
        for f, val in zip(ordered, values, strict=True):
            self.emit(ind, f"if {self.differs(f, val)}:")
            i2 = ind + "    "
            buf = self.var("tb")
            saved = self.app
            self.app = buf + "a"
            self.emit(i2, f"{buf} = []")
            self.emit(i2, f"{self.app} = {buf}.append")
            self.field(f, val, i2)
            self.flush()
            self.app = saved
            self.emit(i2, f"{tg}.append(({f.tag}, _join({buf})))")
        self.emit(ind, f"{self.app}(_tagbuf({tg}))")

    def at_default(self, f: FieldSpec, val: str) -> str:
        """A cheap condition that implies the field is at its default (may miss equal structs)."""
        kind, value = default_kind(f)
        if kind == "list":
            return f"{val} == []"
        if value is None or f.is_struct:
            return f"{val} is None"
        if isinstance(value, (bool, int, float)):
            return f"{val} == {value!r}"
        return f"{val} == {self.glob(value, '_D')}"

    def differs(self, f: FieldSpec, val: str) -> str:
        """A Python condition that is true when a tagged field must be written (value != default)."""
        kind, value = default_kind(f)
        if kind == "list":
            return f"{val} != []"
        if f.is_struct:
            cls = self.cls_name(f)
            return f"{val} is not None and {val} != {cls}()"
        if value is None:
            return f"{val} is not None"
        if isinstance(value, (bool, int, float)):
            return f"{val} != {value!r}"
        return f"{val} != {self.glob(value, '_D')}"

    def compact_length(self, ind: str, expr: str) -> None:
        """Append the compact (unsigned varint, N+1) encoding of ``expr`` (already N+1 or 0).

        When fixed-width fields are pending, the length rides in their Struct as one more byte
        in the common case (< 128), so e.g. a partition's fixed fields and its records length
        cost one ``pack`` call.
        """
        k = self.var("k")
        self.emit(ind, f"{k} = {expr}")
        if not self.run_fmt:
            self.emit(ind, f"{self.app}(_UV1[{k}] if {k} < 128 else _uvb({k}))")
            return
        fmt = "".join(self.run_fmt)
        args = ", ".join(self.run_items)
        with_byte = self.struct_const(fmt + "B")
        without = self.struct_const(fmt)
        self.emit(ind, f"{self.app}({with_byte}.pack({args}, {k}) if {k} < 128 "
                       f"else {without}.pack({args}) + _uvb({k}))")
        self.run_fmt, self.run_items = [], []

    # long: one branch per schema type, each emitting its encoder lines; the dispatch reads best as one table
    def field(self, f: FieldSpec, expr: str, ind: str) -> None:
        v = self.version
        t = f.type
        if t in FIXED_TYPES:
            self.add_run(ind, FIXED_TYPES[t], expr)
            return
        nullable = f.nullable(v)
        compact = self.compact(f)
        if t in ("string", "bytes"):
            b = self.var("b")
            if t == "string":
                if nullable:
                    sv = self.var("sv")
                    self.emit(ind, f"{sv} = {expr}")
                    self.emit(ind, f"{b} = None if {sv} is None else {sv}.encode()")
                else:
                    self.emit(ind, f"{b} = {expr}.encode()")
            else:
                self.emit(ind, f"{b} = {expr}")
            if compact:
                if nullable:
                    self.compact_length(ind, f"0 if {b} is None else len({b}) + 1")
                    self.emit(ind, f"if {b} is not None: {self.app}({b})")
                else:
                    self.compact_length(ind, f"len({b}) + 1")
                    self.emit(ind, f"{self.app}({b})")
            else:
                fmt = "h" if t == "string" else "i"
                self.add_run(ind, fmt, f"-1 if {b} is None else len({b})" if nullable else f"len({b})")
                self.flush()
                if nullable:
                    self.emit(ind, f"if {b} is not None: {self.app}({b})")
                else:
                    self.emit(ind, f"{self.app}({b})")
            return
        if t == "records":
            if self.app != "a":
                raise ValueError("records inside a tagged field are not supported")
            r, n = self.var("r"), self.var("n")
            self.emit(ind, f"{r} = {expr}")
            self.emit(ind, f"{n} = -1 if {r} is None else sum(map(len, {r})) if {r}.__class__ is list else len({r})")
            if compact:
                self.compact_length(ind, f"{n} + 1")
            else:
                self.add_run(ind, "i", n)
                self.flush()
            # Large blobs and buffer lists go to ``parts`` by reference; small ones are copied.
            self.emit(ind, f"if {n} >= _BYREF or {r}.__class__ is list:")
            self.emit(ind + "    ", "parts.append(_join(cur))")
            self.emit(ind + "    ", "cur.clear()")
            self.emit(ind + "    ", f"parts.extend({r}) if {r}.__class__ is list else parts.append({r})")
            self.emit(ind, f"elif {n} > 0:")
            self.emit(ind + "    ", f"a({r})")
            return
        if f.is_array:
            lst = self.var("l")
            self.emit(ind, f"{lst} = {expr}")
            if compact:
                self.compact_length(ind, f"0 if {lst} is None else len({lst}) + 1" if nullable
                                    else f"len({lst}) + 1")
            else:
                self.add_run(ind, "i", f"-1 if {lst} is None else len({lst})" if nullable else f"len({lst})")
                self.flush()
            if nullable:
                self.emit(ind, f"if {lst} is not None:")
                ind = ind + "    "
            et = f.element_type
            if et in FIXED_TYPES:
                if et == "uuid":
                    self.emit(ind, f"{self.app}(_join({lst}))")
                else:
                    c = FIXED_TYPES[et]
                    table = self.glob(_ARRAY_STRUCTS[c], "_AT")
                    size = self.var("m")
                    self.emit(ind, f"{size} = len({lst})")
                    self.emit(ind, f"if {size}: {self.app}(({table}[{size}] if {size} < {ARRAY_TABLE_SIZE} "
                                   f"else _arr({c!r}, {size})).pack(*{lst}))")
                return
            item = self.var("x")
            self.emit(ind, f"for {item} in {lst}:")
            i2 = ind + "    "
            if f.is_struct:
                self.emit(i2, f"if {item}.__class__ is _ENC:")  # pre-encoded element (module docstring)
                self.emit(i2 + "    ", f"{self.app}({item})")
                self.emit(i2 + "    ", "continue")
                self.fields(f.fields or [], item, i2)
            else:
                elem = FieldSpec(f.name, f.attr, et, f.versions, f.nullable_versions, f.tagged_versions,
                                 None, None, False, f.flexible_versions)
                self.field(elem, item, i2)
            self.flush()
            return
        if f.is_struct:
            s = self.var("s")
            self.emit(ind, f"{s} = {expr}")
            if nullable:
                self.add_run(ind, "b", f"-1 if {s} is None else 1")
                self.flush()
                self.emit(ind, f"if {s} is not None:")
                self.fields(f.fields or [], s, ind + "    ")
                self.flush()
            else:
                self.fields(f.fields or [], s, ind)
            return
        raise ValueError(f"unsupported type {t!r} in {f.name}")


def _compile(gen: _Emitter, label: str, name: str) -> object:
    src = "\n".join(gen.lines) + "\n"
    code = compile(src, f"<kop.protocol {label}>", "exec")
    exec(code, gen.globs)
    fn = gen.globs[name]
    vars(fn)["__source__"] = src  # kept for debugging generated code
    return fn


def make_decoder(model: MessageModel, version: int) -> Decoder:
    return DecoderGen(model, version, model.spec.flexible(version)).generate()


def make_encoder(model: MessageModel, version: int) -> Encoder:
    return EncoderGen(model, version, model.spec.flexible(version)).generate()


def make_struct_encoder(model: MessageModel, version: int, struct_name: str) -> Encoder:
    return EncoderGen(model, version, model.spec.flexible(version)).generate_struct(struct_name)
