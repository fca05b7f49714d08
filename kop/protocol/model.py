"""Generated message classes: one ``__slots__`` class per schema struct.

Each request/response schema becomes a top-level class (``ProduceRequest``); each nested struct type
becomes a class named after its JSON type name, attached to its parent *and* to the top-level class
(``ProduceRequest.TopicProduceData``, ``ProduceRequest.PartitionProduceData``). A class holds the
union of its fields over all versions, so one object model serves every version; the codec fills
fields absent from a version with their defaults.

Defaults follow the schema: numbers 0 unless ``default`` says otherwise, strings "", bytes b"",
uuids sixteen zero bytes, arrays [], ``"null"`` defaults None, records None. Two deliberate choices:
  * a *tagged* struct field defaults to None ("absent") rather than a default-valued struct, which
    keeps Fetch/Produce responses cheap to build; the encoder writes it only when set and not equal
    to a default struct;
  * a non-tagged, non-nullable struct field defaults to a fresh default-valued instance.
"""

from __future__ import annotations

from collections.abc import Callable
from types import FunctionType
from typing import ClassVar, cast

from .schema import FieldSpec, MessageSpec

ZERO_UUID = b"\x00" * 16

_INT_TYPES = {"int8", "int16", "uint16", "int32", "uint32", "int64"}


class Struct:
    """Base of every generated message/struct class: equality and repr over the slot fields."""

    __slots__ = ()
    _FIELDS: ClassVar[tuple[str, ...]] = ()
    #: the schema name of the top-level message this struct belongs to (e.g. "FetchResponse").
    _MESSAGE: ClassVar[str] = ""

    def __eq__(self, other: object) -> bool:
        if type(other) is not type(self):
            return NotImplemented
        for name in self._FIELDS:
            if getattr(self, name) != getattr(other, name):
                return False
        return True

    __hash__ = None  # type: ignore[assignment]  # mutable value objects

    def __repr__(self) -> str:
        body = ", ".join(f"{name}={getattr(self, name, '<unset>')!r}" for name in self._FIELDS)
        return f"{type(self).__qualname__}({body})"

    def to_dict(self) -> dict[str, object]:
        """A plain nested dict, for logging and debugging (records shown as their byte length)."""
        out: dict[str, object] = {}
        for name in self._FIELDS:
            out[name] = _plain(getattr(self, name))
        return out


def _plain(value: object) -> object:
    if isinstance(value, Struct):
        return value.to_dict()
    if isinstance(value, list):
        return [_plain(v) for v in value]
    if isinstance(value, memoryview):
        return f"<{value.nbytes} bytes>"
    return value


class _Missing:
    __slots__ = ()

    def __repr__(self) -> str:
        return "MISSING"


MISSING = _Missing()


def default_kind(f: FieldSpec) -> tuple[str, object]:
    """How to produce a field's default: ("const", value), ("list", None) or ("struct", None).

    "list" and "struct" defaults are mutable, so a fresh object is made per instance.
    """
    raw = f.default
    if f.is_array:
        if raw == "null":
            return ("const", None)
        return ("list", None)
    if f.is_struct:
        if raw == "null" or f.tag is not None:
            return ("const", None)
        return ("struct", None)
    t = f.type
    if t in _INT_TYPES:
        if raw is None or raw == "":
            return ("const", 0)
        if isinstance(raw, str):
            return ("const", int(raw, 16) if raw.lower().startswith("0x") else int(raw))
        return ("const", int(raw))
    if t == "bool":
        if isinstance(raw, str):
            return ("const", raw.strip().lower() == "true")
        return ("const", bool(raw))
    if t == "float64":
        return ("const", 0.0 if raw is None or raw == "" else float(raw))
    if t == "string":
        if raw == "null":
            return ("const", None)
        return ("const", "" if raw is None else str(raw))
    if t == "bytes":
        return ("const", None if raw == "null" else b"")
    if t == "records":
        return ("const", None)
    if t == "uuid":
        return ("const", ZERO_UUID)
    raise ValueError(f"unknown field type {t!r} for {f.name}")


class MessageModel:
    """The generated classes of one schema, keyed by struct type name."""

    def __init__(self, spec: MessageSpec, module: str = "kop.protocol.messages") -> None:
        self.spec = spec
        self.module = module
        self.classes: dict[str, type[Struct]] = {}
        self.fields_of: dict[str, list[FieldSpec]] = {}
        self.root = self._make(spec.name, spec.name, spec.fields)
        for name, cls in self.classes.items():
            if name != spec.name and not hasattr(self.root, name):
                setattr(self.root, name, cls)

    def _make(self, name: str, qualname: str, fields: list[FieldSpec]) -> type[Struct]:
        if name in self.classes:
            return self.classes[name]
        attrs = tuple(f.attr for f in fields)
        cls = type(name, (Struct,), {
            "__slots__": attrs,
            "_FIELDS": attrs,
            "_MESSAGE": self.spec.name,
            "__module__": self.module,
            "__qualname__": qualname,
        })
        self.classes[name] = cls
        self.fields_of[name] = fields
        for f in fields:
            if f.is_struct:
                assert f.struct_name is not None and f.fields is not None
                sub = self._make(f.struct_name, f"{qualname}.{f.struct_name}", f.fields)
                setattr(cls, f.struct_name, sub)
        cls.__init__ = self._make_init(cls, fields)  # type: ignore[misc]
        cls.__doc__ = f"{self.spec.name} struct {name}: fields {', '.join(attrs)}."
        return cls

    def _make_init(self, cls: type[Struct], fields: list[FieldSpec]) -> Callable[..., None]:
        """A keyword-only ``__init__`` whose missing arguments take the schema defaults."""
        globs: dict[str, object] = {"_M": MISSING}
        params: list[str] = []
        body: list[str] = []
        for i, f in enumerate(fields):
            kind, value = default_kind(f)
            if kind == "const":
                gname = f"_d{i}"
                globs[gname] = value
                params.append(f"{f.attr}={gname}")
                body.append(f"    self.{f.attr} = {f.attr}")
            elif kind == "list":
                params.append(f"{f.attr}=_M")
                body.append(f"    self.{f.attr} = [] if {f.attr} is _M else {f.attr}")
            else:
                gname = f"_c{i}"
                globs[gname] = self.classes[f.struct_name]  # type: ignore[index]
                params.append(f"{f.attr}=_M")
                body.append(f"    self.{f.attr} = {gname}() if {f.attr} is _M else {f.attr}")
        if not body:
            body.append("    pass")
        sig = ", ".join(["self", "*", *params]) if params else "self"
        src = f"def __init__({sig}) -> None:\n" + "\n".join(body) + "\n"
        exec(compile(src, f"<kop.protocol init {cls.__qualname__}>", "exec"), globs)
        init = cast(FunctionType, globs["__init__"])
        init.__qualname__ = f"{cls.__qualname__}.__init__"
        return init
