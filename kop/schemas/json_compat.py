"""JSON Schema documents for the registry: whether one is usable, and Confluent's compatibility verdict between two.

Why a rule engine of our own: Confluent's registry decides JSON Schema compatibility with its own diff
(`io.confluent.kafka.schemaregistry.json.diff`: a list of typed differences, each one either in the set of
compatible changes or not), not with any rule of the JSON Schema specification, and its clients show the
differences it answers. No PyPI package computes that diff, so this module re-states it over the parsed JSON,
typing a schema the way Confluent's loader (everit) does:

- `true` and `{}` are the empty schema (anything valid), `false` the false schema;
- `type` names one kind (string, number/integer, object, array, boolean, null); a list of types is an `anyOf`
  of one schema per type; without `type`, the keywords name the kind (`properties` -> object, `items` -> array,
  `minLength` -> string, `minimum` -> number, ...);
- `enum`, `const`, `allOf`/`anyOf`/`oneOf` and `not` are schemas of their own, and a schema with several of these
  parts (e.g. `{"type": "string", "enum": [...]}`) is the `allOf` of them;
- `$ref` is followed: to the document's own definitions (`#/definitions/x`, `#/$defs/x`, any JSON pointer), or
  into a referenced document (the registry's references: `refs` maps a reference name to its text).

`json_incompatibilities(reader, writer)` answers why data written with `writer` may be refused by `reader`:
Confluent's BACKWARD check of a new schema (reader) against an old one (writer); FORWARD swaps the two and
FULL does both (the registry composes them, and names the roles in the messages with `reader_name` /
`writer_name`, which Confluent calls "new" and "old"). The differences are typed and placed as Confluent's are
(`OPTIONAL_PROPERTY_ADDED_TO_OPEN_CONTENT_MODEL #/properties/x`), and each incompatible one is answered as
Confluent's `Difference.toString()` spells it. `lenient=True` is Confluent's LENIENT policy (property changes
against open and closed content models allowed); the default is its STRICT one, as Confluent's default.

What is covered: type changes (integer -> number widening allowed, number -> integer not), changes to and
from combined types (sum types extended, product types narrowed, subschemas matched pairwise), string
length and pattern, numeric bounds and `multipleOf`, `enum`/`const`, object properties against open, closed
and partially open (`additionalProperties` schema, `patternProperties`) content models, `required`,
`dependencies`, min/max properties, array `items` (one schema, or a tuple with `additionalItems`), min/max
items, `uniqueItems`, `not`, and recursive `$ref`s (a cycle is assumed compatible).
Not covered (no difference is reported for them): `unevaluatedProperties`/`unevaluatedItems`,
`contains`/`minContains`/`maxContains`, `propertyNames`, `if`/`then`/`else`, `format`, the draft 2019-09 /
2020-12 `prefixItems` and `$anchor`/`$dynamicRef` (the 2020-12 diff Confluent runs on another parser), the
`connect.type: bytes` escape hatch, and Confluent's fixpoint re-run of recursive comparisons that came out
incompatible on a cycle (a cycle here is simply assumed compatible).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from decimal import Decimal, InvalidOperation
from typing import Any

import jsonschema
import jsonschema.exceptions
import jsonschema.validators

from kop.schemas.differences import Difference, DiffPath

__all__ = [
    "COMPATIBLE_CHANGES_LENIENT",
    "COMPATIBLE_CHANGES_STRICT",
    "json_differences",
    "json_incompatibilities",
    "json_invalid",
]

# Confluent's SchemaDiff.COMPATIBLE_CHANGES_STRICT: every other difference type makes two schemas incompatible.
COMPATIBLE_CHANGES_STRICT: frozenset[str] = frozenset(
    """
    ID_CHANGED DESCRIPTION_CHANGED TITLE_CHANGED DEFAULT_CHANGED SCHEMA_REMOVED TYPE_EXTENDED
    MAX_LENGTH_INCREASED MAX_LENGTH_REMOVED MIN_LENGTH_DECREASED MIN_LENGTH_REMOVED PATTERN_REMOVED
    MAXIMUM_INCREASED MAXIMUM_REMOVED MINIMUM_DECREASED MINIMUM_REMOVED EXCLUSIVE_MAXIMUM_INCREASED
    EXCLUSIVE_MAXIMUM_REMOVED EXCLUSIVE_MINIMUM_DECREASED EXCLUSIVE_MINIMUM_REMOVED MULTIPLE_OF_REDUCED
    MULTIPLE_OF_REMOVED REQUIRED_ATTRIBUTE_WITH_DEFAULT_ADDED REQUIRED_ATTRIBUTE_REMOVED DEPENDENCY_ARRAY_NARROWED
    DEPENDENCY_ARRAY_REMOVED DEPENDENCY_SCHEMA_REMOVED MAX_PROPERTIES_INCREASED MAX_PROPERTIES_REMOVED
    MIN_PROPERTIES_DECREASED MIN_PROPERTIES_REMOVED ADDITIONAL_PROPERTIES_ADDED ADDITIONAL_PROPERTIES_EXTENDED
    UNEVALUATED_PROPERTIES_ADDED UNEVALUATED_PROPERTIES_EXTENDED PROPERTY_WITH_EMPTY_SCHEMA_ADDED_TO_OPEN_CONTENT_MODEL
    REQUIRED_PROPERTY_WITH_DEFAULT_ADDED_TO_UNOPEN_CONTENT_MODEL OPTIONAL_PROPERTY_ADDED_TO_UNOPEN_CONTENT_MODEL
    PROPERTY_WITH_FALSE_REMOVED_FROM_CLOSED_CONTENT_MODEL PROPERTY_REMOVED_FROM_OPEN_CONTENT_MODEL
    PROPERTY_ADDED_IS_COVERED_BY_PARTIALLY_OPEN_CONTENT_MODEL PROPERTY_REMOVED_IS_COVERED_BY_PARTIALLY_OPEN_CONTENT_MODEL
    MAX_ITEMS_INCREASED MAX_ITEMS_REMOVED MIN_ITEMS_DECREASED MIN_ITEMS_REMOVED MAX_CONTAINS_INCREASED
    MAX_CONTAINS_REMOVED MIN_CONTAINS_DECREASED MIN_CONTAINS_REMOVED UNIQUE_ITEMS_REMOVED ADDITIONAL_ITEMS_ADDED
    ADDITIONAL_ITEMS_EXTENDED UNEVALUATED_ITEMS_ADDED UNEVALUATED_ITEMS_EXTENDED
    ITEM_WITH_EMPTY_SCHEMA_ADDED_TO_OPEN_CONTENT_MODEL ITEM_ADDED_TO_CLOSED_CONTENT_MODEL
    ITEM_WITH_FALSE_REMOVED_FROM_CLOSED_CONTENT_MODEL ITEM_REMOVED_FROM_OPEN_CONTENT_MODEL
    ITEM_ADDED_IS_COVERED_BY_PARTIALLY_OPEN_CONTENT_MODEL ITEM_REMOVED_IS_COVERED_BY_PARTIALLY_OPEN_CONTENT_MODEL
    ENUM_ARRAY_EXTENDED COMBINED_TYPE_EXTENDED PRODUCT_TYPE_NARROWED SUM_TYPE_EXTENDED NOT_TYPE_NARROWED
    """.split()
)
# Confluent's LENIENT policy: also lets properties come and go whatever the content model.
COMPATIBLE_CHANGES_LENIENT: frozenset[str] = COMPATIBLE_CHANGES_STRICT | frozenset(
    """
    ADDITIONAL_PROPERTIES_NARROWED ADDITIONAL_PROPERTIES_REMOVED UNEVALUATED_PROPERTIES_NARROWED
    UNEVALUATED_PROPERTIES_REMOVED REQUIRED_PROPERTY_WITH_DEFAULT_ADDED_TO_OPEN_CONTENT_MODEL
    OPTIONAL_PROPERTY_ADDED_TO_OPEN_CONTENT_MODEL PROPERTY_REMOVED_FROM_OPEN_CONTENT_MODEL
    PROPERTY_REMOVED_FROM_CLOSED_CONTENT_MODEL PROPERTY_ADDED_NOT_COVERED_BY_PARTIALLY_OPEN_CONTENT_MODEL
    PROPERTY_REMOVED_NOT_COVERED_BY_PARTIALLY_OPEN_CONTENT_MODEL
    """.split()
)

# --------------------------------------------------------------------------------------------------------------
# Usability


# How deeply a document may nest its objects and arrays. The checks walk documents recursively; without a fixed
# bound, whether a deep document overflows the interpreter's stack would depend on the recursion limit of the
# moment (a library may raise it) - a document is refused here by its depth alone, the same everywhere.
MAX_DEPTH = 128


def _too_deep(doc: object) -> bool:
    """Whether `doc` nests objects/arrays deeper than MAX_DEPTH (walked without recursion)."""
    stack: list[tuple[object, int]] = [(doc, 1)]
    while stack:
        node, depth = stack.pop()
        if isinstance(node, dict | list):
            if depth > MAX_DEPTH:
                return True
            stack.extend((v, depth + 1) for v in (node.values() if isinstance(node, dict) else node))
    return False


def _loaded(text: str) -> object:
    """The parsed document; RecursionError when it nests deeper than MAX_DEPTH."""
    doc = json.loads(text)
    if _too_deep(doc):
        raise RecursionError(f"nested deeper than {MAX_DEPTH} levels")
    return doc


def json_invalid(text: str, refs: dict[str, str] | None = None) -> str | None:
    """Why the JSON Schema document `text` cannot be registered, or None when it can: not JSON, neither an
    object nor a boolean, not valid against its draft's metaschema (`$schema`, draft 7 when absent, as
    Confluent's default), or a `$ref` that names nothing (in the document, or in `refs`: reference name ->
    text of a referenced document)."""
    try:
        doc = json.loads(text)
    except (ValueError, RecursionError) as e:
        return f"Invalid JSON: {e}"
    if _too_deep(doc):
        return "Invalid schema: nested too deeply"
    if not isinstance(doc, dict | bool):
        return "Invalid schema: a JSON Schema is an object or a boolean"
    if isinstance(doc, bool):
        return None
    try:
        problem = _metaschema_problem(doc)
    except RecursionError:
        return "Invalid schema: nested too deeply"
    if problem is not None:
        return problem
    try:
        docs = _Documents(doc, refs or {})
        _walk_refs(docs)
    except _SchemaError as e:
        return f"Invalid schema: {e}"
    except RecursionError:
        return "Invalid schema: nested too deeply"
    return None


def _metaschema_problem(doc: dict[str, Any]) -> str | None:
    declared = doc.get("$schema")
    cls: Any = jsonschema.Draft7Validator
    if isinstance(declared, str):
        known = jsonschema.validators.validator_for(doc, default=None)
        if known is None:
            return f"Invalid schema: unknown $schema {declared!r}"
        cls = known
    try:
        cls.check_schema(doc)
    except jsonschema.exceptions.SchemaError as e:
        where = "/".join(str(p) for p in e.absolute_path)
        return f"Invalid schema: {e.message}" + (f" at '#/{where}'" if where else "")
    return None


def _walk_refs(docs: _Documents) -> None:
    """Loads every subschema of the root document, which resolves each `$ref` once (or raises)."""
    seen: set[int] = set()
    stack = [docs.root_schema()]
    while stack:
        s = stack.pop()
        s = s.resolved()
        if id(s) in seen:
            continue
        seen.add(id(s))
        stack.extend(s.children())


# --------------------------------------------------------------------------------------------------------------
# The schema model (what everit's loader builds, as far as the diff reads it)


class _SchemaError(Exception):
    pass


_OBJECT_KEYS = frozenset(
    ("properties", "required", "additionalProperties", "minProperties", "maxProperties", "dependencies",
     "patternProperties", "propertyNames")
)
_ARRAY_KEYS = frozenset(("items", "additionalItems", "minItems", "maxItems", "uniqueItems", "contains"))
_NUMBER_KEYS = frozenset(("minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum", "multipleOf"))
_STRING_KEYS = frozenset(("minLength", "maxLength", "pattern", "format"))
_KIND_OF_TYPE = {
    "string": "string", "number": "number", "integer": "number", "object": "object", "array": "array",
    "boolean": "boolean", "null": "null",
}


@dataclass(eq=False)
class _Schema:
    """One loaded (sub)schema: `kind` is the everit class it would be (empty, true, false, string, number,
    object, array, boolean, null, enum, const, combined, not, ref), `raw` the JSON it came from."""

    kind: str
    raw: Any
    docs: _Documents
    doc_name: str
    combined: str = ""  # allOf / anyOf / oneOf, for kind == combined
    subschemas: list[_Schema] = field(default_factory=list)
    requires_integer: bool = False
    ref_target: tuple[str, str] | None = None  # (document, JSON pointer), for kind == ref
    meta: dict[str, Any] = field(default_factory=dict)  # $id, title, description, default of the whole

    def resolved(self) -> _Schema:
        s = self
        hops = 0
        while s.kind == "ref":
            assert s.ref_target is not None
            s = s.docs.load(*s.ref_target)
            hops += 1
            if hops > 100:
                raise _SchemaError("a $ref cycle that names no schema")
        return s

    def get(self, key: str) -> Any:
        return self.raw.get(key) if isinstance(self.raw, dict) else None

    def child(self, pointer: str, raw: Any) -> _Schema:
        return self.docs.load_raw(self.doc_name, pointer, raw)

    # the parts the diff walks into, each loaded once (identity matters for cycles and memoisation)
    def children(self) -> list[_Schema]:
        out = list(self.subschemas)
        if self.kind == "object":
            out.extend(self.properties().values())
            out.extend(s for _, s in self.pattern_properties())
            ap = self.additional_properties_schema()
            if ap is not None:
                out.append(ap)
            out.extend(self.schema_dependencies().values())
        elif self.kind == "array":
            items = self.all_items()
            if items is not None:
                out.append(items)
            out.extend(self.item_list())
            ai = self.additional_items_schema()
            if ai is not None:
                out.append(ai)
        elif self.kind == "not":
            out.append(self.must_not_match())
        return out

    # object
    def properties(self) -> dict[str, _Schema]:
        props = self.get("properties")
        if not isinstance(props, dict):
            return {}
        return {k: self.child(f"{self.pointer}/properties/{_escape(k)}", v) for k, v in props.items()}

    def required(self) -> set[str]:
        req = self.get("required")
        return {r for r in req if isinstance(r, str)} if isinstance(req, list) else set()

    def permits_additional_properties(self) -> bool:
        return self.get("additionalProperties") is not False

    def additional_properties_schema(self) -> _Schema | None:
        ap = self.get("additionalProperties")
        return self.child(f"{self.pointer}/additionalProperties", ap) if isinstance(ap, dict) else None

    def pattern_properties(self) -> list[tuple[str, _Schema]]:
        pp = self.get("patternProperties")
        if not isinstance(pp, dict):
            return []
        return [(k, self.child(f"{self.pointer}/patternProperties/{_escape(k)}", v)) for k, v in pp.items()]

    def property_dependencies(self) -> dict[str, set[str]]:
        deps = self.get("dependencies")
        if not isinstance(deps, dict):
            return {}
        return {k: set(v) for k, v in deps.items() if isinstance(v, list)}

    def schema_dependencies(self) -> dict[str, _Schema]:
        deps = self.get("dependencies")
        if not isinstance(deps, dict):
            return {}
        return {
            k: self.child(f"{self.pointer}/dependencies/{_escape(k)}", v)
            for k, v in deps.items()
            if isinstance(v, dict | bool)
        }

    # array
    def all_items(self) -> _Schema | None:
        items = self.get("items")
        return self.child(f"{self.pointer}/items", items) if isinstance(items, dict | bool) else None

    def item_list(self) -> list[_Schema]:
        items = self.get("items")
        if not isinstance(items, list):
            return []
        return [self.child(f"{self.pointer}/items/{i}", v) for i, v in enumerate(items)]

    def permits_additional_items(self) -> bool:
        return self.get("additionalItems") is not False

    def additional_items_schema(self) -> _Schema | None:
        ai = self.get("additionalItems")
        return self.child(f"{self.pointer}/additionalItems", ai) if isinstance(ai, dict) else None

    # not
    def must_not_match(self) -> _Schema:
        return self.child(f"{self.pointer}/not", self.get("not"))

    pointer: str = ""


def _escape(key: str) -> str:
    return key.replace("~", "~0").replace("/", "~1")


def _unescape(part: str) -> str:
    return part.replace("~1", "/").replace("~0", "~")


class _Documents:
    """The documents a comparison may visit (the root and the referenced ones), and every subschema loaded
    from them, cached by (document, pointer) so that a `$ref` loop ends on the same object."""

    def __init__(self, root: Any, refs: dict[str, str]) -> None:
        self._raw: dict[str, Any] = {"": root}
        self._ref_texts = refs
        self._cache: dict[tuple[str, str], _Schema] = {}

    def root_schema(self) -> _Schema:
        return self.load("", "")

    def document(self, name: str) -> Any:
        if name not in self._raw:
            text = self._ref_texts.get(name)
            if text is None:
                raise _SchemaError(f"$ref to {name!r}, which is not among the schema's references")
            try:
                self._raw[name] = json.loads(text)
            except ValueError as e:
                raise _SchemaError(f"reference {name!r} is not JSON: {e}") from e
        return self._raw[name]

    def load(self, doc_name: str, pointer: str) -> _Schema:
        key = (doc_name, pointer)
        cached = self._cache.get(key)
        if cached is not None:
            return cached
        node = self.document(doc_name)
        for part in [p for p in pointer.split("/") if p != ""]:
            part = _unescape(part)
            if isinstance(node, dict) and part in node:
                node = node[part]
            elif isinstance(node, list) and part.isdigit() and int(part) < len(node):
                node = node[int(part)]
            else:
                raise _SchemaError(f"$ref '{doc_name}#{pointer}' names nothing")
        return self.load_raw(doc_name, pointer, node)

    def load_raw(self, doc_name: str, pointer: str, raw: Any) -> _Schema:
        key = (doc_name, pointer)
        cached = self._cache.get(key)
        if cached is not None:
            return cached
        s = _build(self, doc_name, pointer, raw)
        self._cache[key] = s
        return s

    def ref_target(self, doc_name: str, ref: str) -> tuple[str, str]:
        target_doc, _, fragment = ref.partition("#")
        if target_doc == "":
            target_doc = doc_name
        elif target_doc not in self._ref_texts and target_doc not in self._raw:
            raise _SchemaError(f"$ref to {target_doc!r}, which is not among the schema's references")
        if fragment and not fragment.startswith("/"):
            raise _SchemaError(f"$ref '{ref}': only JSON pointer fragments are supported")
        return target_doc, fragment


def _build(docs: _Documents, doc_name: str, pointer: str, raw: Any) -> _Schema:
    def make(kind: str, **kw: Any) -> _Schema:
        s = _Schema(kind=kind, raw=raw, docs=docs, doc_name=doc_name, **kw)
        s.pointer = pointer
        return s

    if raw is True:
        return make("true")
    if raw is False:
        return make("false")
    if not isinstance(raw, dict):
        raise _SchemaError(f"a subschema at '#{pointer}' is neither an object nor a boolean")
    meta = {k: raw[k] for k in ("$id", "id", "title", "description", "default") if k in raw}
    if isinstance(raw.get("$ref"), str):
        return make("ref", ref_target=docs.ref_target(doc_name, raw["$ref"]))
    parts: list[_Schema] = []
    declared = raw.get("type")
    keys = set(raw)
    if isinstance(declared, str) or (isinstance(declared, list) and len(declared) == 1):
        t = declared if isinstance(declared, str) else declared[0]
        if t in _KIND_OF_TYPE:
            parts.append(make(_KIND_OF_TYPE[t], requires_integer=t == "integer"))
    elif isinstance(declared, list) and declared:
        subs = [
            make(_KIND_OF_TYPE[t], requires_integer=t == "integer") for t in declared if t in _KIND_OF_TYPE
        ]
        parts.append(make("combined", combined="anyOf", subschemas=subs))
    else:
        for kind, kind_keys in (
            ("object", _OBJECT_KEYS), ("array", _ARRAY_KEYS), ("number", _NUMBER_KEYS), ("string", _STRING_KEYS)
        ):
            if keys & kind_keys:
                parts.append(make(kind))
    if isinstance(raw.get("enum"), list):
        parts.append(make("enum"))
    if "const" in raw:
        parts.append(make("const"))
    for criterion in ("allOf", "anyOf", "oneOf"):
        subs_raw = raw.get(criterion)
        if isinstance(subs_raw, list):
            subs = [docs.load_raw(doc_name, f"{pointer}/{criterion}/{i}", v) for i, v in enumerate(subs_raw)]
            parts.append(make("combined", combined=criterion, subschemas=subs))
    if "not" in raw:
        parts.append(make("not"))
    if not parts:
        s = make("empty")
    elif len(parts) == 1:
        s = parts[0]
    else:
        s = make("combined", combined="allOf", subschemas=parts)
    s.meta = meta
    return s


# --------------------------------------------------------------------------------------------------------------
# The diff


class _Context(DiffPath):
    def __init__(self, compatible: frozenset[str], memo: dict[tuple[int, int], list[Difference]],
                 in_progress: set[tuple[int, int]], path: list[str] | None = None) -> None:
        super().__init__(path)
        self.compatible = compatible
        self.memo = memo
        self.in_progress = in_progress

    def sub(self) -> _Context:
        return _Context(self.compatible, self.memo, self.in_progress, self.path)

    def compatible_so_far(self) -> bool:
        return all(d.type in self.compatible for d in self.diffs)


def _compare(ctx: _Context, original: _Schema | None, update: _Schema | None) -> None:
    if original is None and update is None:
        return
    if original is None:
        ctx.add("SCHEMA_ADDED")
        return
    if update is None:
        ctx.add("SCHEMA_REMOVED")
        return
    o, u = original.resolved(), update.resolved()
    key = (id(o), id(u))
    relative = ctx.memo.get(key)
    if relative is None:
        if key in ctx.in_progress:
            return  # a cycle: assumed compatible
        ctx.in_progress.add(key)
        try:
            sub = _Context(ctx.compatible, ctx.memo, ctx.in_progress)
            _compare_types(sub, o, u)
            relative = sub.diffs
            ctx.memo[key] = relative
        finally:
            ctx.in_progress.discard(key)
    prefix = "#/" + "/".join(ctx.path)
    for d in relative:
        if not ctx.path:
            ctx.diffs.append(d)
        else:
            rest = d.path[2:]
            ctx.diffs.append(Difference(d.type, prefix + ("/" + rest if rest else "")))


def _compare_types(ctx: _Context, original: _Schema, update: _Schema) -> None:
    if original.kind != "combined" and update.kind == "combined":
        if len(update.subschemas) == 1:
            sub = ctx.sub()
            _compare(sub, original, update.subschemas[0])
            if sub.compatible_so_far():
                ctx.diffs.extend(sub.diffs)
                return
        elif update.combined in ("anyOf", "oneOf"):
            for s in update.subschemas:
                sub = ctx.sub()
                _compare(sub, original, s)
                if sub.compatible_so_far():
                    ctx.diffs.extend(sub.diffs)
                    ctx.add("SUM_TYPE_EXTENDED")
                    return
    elif original.kind == "combined" and update.kind != "combined":
        if len(original.subschemas) == 1:
            sub = ctx.sub()
            _compare(sub, original.subschemas[0], update)
            if sub.compatible_so_far():
                ctx.diffs.extend(sub.diffs)
                return
        elif original.combined == "allOf":
            for s in original.subschemas:
                sub = ctx.sub()
                _compare(sub, s, update)
                if sub.compatible_so_far():
                    ctx.diffs.extend(sub.diffs)
                    ctx.add("PRODUCT_TYPE_NARROWED")
                    return
    if _klass(original) != _klass(update):
        if original.kind == "false" or update.kind in ("empty", "true"):
            return
        ctx.add("TYPE_CHANGED")
        return
    for key, type_ in (("$id", "ID_CHANGED"), ("title", "TITLE_CHANGED"), ("description", "DESCRIPTION_CHANGED"),
                       ("default", "DEFAULT_CHANGED")):
        if _canon(original.meta.get(key, _ABSENT)) != _canon(update.meta.get(key, _ABSENT)):
            ctx.add(type_)
    kind = original.kind
    if kind == "string":
        _compare_string(ctx, original, update)
    elif kind == "number":
        _compare_number(ctx, original, update)
    elif kind == "const":
        if _canon(original.get("const")) != _canon(update.get("const")):
            ctx.add("ENUM_ARRAY_CHANGED", "const")
    elif kind == "enum":
        _compare_enum(ctx, original, update)
    elif kind == "combined":
        _compare_combined(ctx, original, update)
    elif kind == "not":
        with ctx.at("not"):
            sub = ctx.sub()
            _compare(sub, update.must_not_match(), original.must_not_match())
            ctx.add("NOT_TYPE_NARROWED" if sub.compatible_so_far() else "NOT_TYPE_EXTENDED")
    elif kind == "object":
        _compare_object(ctx, original, update)
    elif kind == "array":
        _compare_array(ctx, original, update)


_ABSENT = object()


def _klass(s: _Schema) -> str:
    # everit's TrueSchema is an EmptySchema, but the classes differ for the type check (as in Java)
    return s.kind


def _canon(value: Any) -> Any:
    if value is _ABSENT:
        return value
    return json.dumps(value, sort_keys=True)


def _bounded(ctx: _Context, name: str, original: Any, update: Any, stem: str) -> None:
    """The ADDED / REMOVED / INCREASED / DECREASED family of one numeric keyword."""
    o = original if isinstance(original, int | float) and not isinstance(original, bool) else None
    u = update if isinstance(update, int | float) and not isinstance(update, bool) else None
    if o == u:
        return
    if o is None:
        ctx.add(f"{stem}_ADDED", name)
    elif u is None:
        ctx.add(f"{stem}_REMOVED", name)
    elif o < u:
        ctx.add(f"{stem}_INCREASED", name)
    elif o > u:
        ctx.add(f"{stem}_DECREASED", name)


def _compare_string(ctx: _Context, original: _Schema, update: _Schema) -> None:
    _bounded(ctx, "maxLength", original.get("maxLength"), update.get("maxLength"), "MAX_LENGTH")
    _bounded(ctx, "minLength", original.get("minLength"), update.get("minLength"), "MIN_LENGTH")
    op, up = original.get("pattern"), update.get("pattern")
    if op is None and up is not None:
        ctx.add("PATTERN_ADDED", "pattern")
    elif op is not None and up is None:
        ctx.add("PATTERN_REMOVED", "pattern")
    elif op is not None and op != up:
        ctx.add("PATTERN_CHANGED", "pattern")


def _exclusive_limit(s: _Schema, key: str) -> Any:
    v = s.get(key)
    return None if isinstance(v, bool) else v  # draft 4's boolean form only qualifies maximum/minimum


def _decimal(v: Any) -> Decimal | None:
    if not isinstance(v, int | float) or isinstance(v, bool):
        return None
    try:
        return Decimal(str(v))
    except InvalidOperation:
        return None


def _compare_number(ctx: _Context, original: _Schema, update: _Schema) -> None:
    _bounded(ctx, "maximum", original.get("maximum"), update.get("maximum"), "MAXIMUM")
    _bounded(ctx, "minimum", original.get("minimum"), update.get("minimum"), "MINIMUM")
    _bounded(ctx, "exclusiveMaximum", _exclusive_limit(original, "exclusiveMaximum"),
             _exclusive_limit(update, "exclusiveMaximum"), "EXCLUSIVE_MAXIMUM")
    _bounded(ctx, "exclusiveMinimum", _exclusive_limit(original, "exclusiveMinimum"),
             _exclusive_limit(update, "exclusiveMinimum"), "EXCLUSIVE_MINIMUM")
    om, um = _decimal(original.get("multipleOf")), _decimal(update.get("multipleOf"))
    if not (om == um):
        if om is None:
            ctx.add("MULTIPLE_OF_ADDED", "multipleOf")
        elif um is None:
            ctx.add("MULTIPLE_OF_REMOVED", "multipleOf")
        elif om != 0 and um % om == 0:
            ctx.add("MULTIPLE_OF_EXPANDED", "multipleOf")
        elif um != 0 and om % um == 0:
            ctx.add("MULTIPLE_OF_REDUCED", "multipleOf")
        else:
            ctx.add("MULTIPLE_OF_CHANGED", "multipleOf")
    if original.requires_integer != update.requires_integer:
        ctx.add("TYPE_EXTENDED" if original.requires_integer else "TYPE_NARROWED")


def _compare_enum(ctx: _Context, original: _Schema, update: _Schema) -> None:
    o = {_canon(v) for v in original.get("enum") or []}
    u = {_canon(v) for v in update.get("enum") or []}
    if o != u:
        if u >= o:
            ctx.add("ENUM_ARRAY_EXTENDED", "enum")
        elif o >= u:
            ctx.add("ENUM_ARRAY_NARROWED", "enum")
        else:
            ctx.add("ENUM_ARRAY_CHANGED", "enum")


def _distinct(subs: list[_Schema]) -> list[_Schema]:
    """The subschemas without repeats (Confluent keeps them in a set of schemas)."""
    seen: set[tuple[str, bool, str, str]] = set()
    out = []
    for s in subs:
        key = (s.kind, s.requires_integer, s.combined, json.dumps(s.raw, sort_keys=True))
        if key not in seen:
            seen.add(key)
            out.append(s)
    return out


def _compare_combined(ctx: _Context, original: _Schema, update: _Schema) -> None:
    oc, uc = original.combined, update.combined
    if oc != uc:
        single_o, single_u = len(original.subschemas) == 1, len(update.subschemas) == 1
        if (uc == "anyOf" or (single_o and single_u) or (single_o and uc == "oneOf")
                or (single_u and oc == "allOf")):
            ctx.add("COMBINED_TYPE_EXTENDED")
        else:
            ctx.add("COMBINED_TYPE_CHANGED")
            return
    osubs, usubs = _distinct(original.subschemas), _distinct(update.subschemas)
    if len(osubs) < len(usubs):
        ctx.add("PRODUCT_TYPE_EXTENDED" if uc == "allOf" else "SUM_TYPE_EXTENDED")
    elif len(osubs) > len(usubs):
        ctx.add("SUM_TYPE_NARROWED" if oc in ("anyOf", "oneOf") else "PRODUCT_TYPE_NARROWED")
    edges: dict[int, dict[int, list[Difference]]] = {}
    for i, o in enumerate(osubs):
        with ctx.at(f"{oc}/{i}"):
            for j, u in enumerate(usubs):
                sub = ctx.sub()
                _compare(sub, o, u)
                if sub.compatible_so_far():
                    edges.setdefault(i, {})[j] = sub.diffs
    matching = _max_matching({i: list(js) for i, js in edges.items()}, len(osubs))
    for i, j in sorted(matching.items()):
        ctx.diffs.extend(edges[i][j])
    if len(matching) < min(len(osubs), len(usubs)):
        ctx.add("COMBINED_TYPE_SUBSCHEMAS_CHANGED")


def _max_matching(adjacent: dict[int, list[int]], left: int) -> dict[int, int]:
    """A maximum bipartite matching (Kuhn's augmenting paths): left index -> right index."""
    match_right: dict[int, int] = {}

    def augment(i: int, seen: set[int]) -> bool:
        for j in adjacent.get(i, []):
            if j in seen:
                continue
            seen.add(j)
            if j not in match_right or augment(match_right[j], seen):
                match_right[j] = i
                return True
        return False

    for i in range(left):
        augment(i, set())
    return {i: j for j, i in match_right.items()}


def _is_open_object(s: _Schema) -> bool:
    return s.permits_additional_properties() and s.additional_properties_schema() is None \
        and not s.pattern_properties()


def _partially_open_schema(s: _Schema, name: str) -> _Schema | None:
    for pattern, schema in s.pattern_properties():
        try:
            if re.search(pattern, name):
                return schema
        except re.error:
            continue
    return s.additional_properties_schema()


def _has_default(s: _Schema) -> bool:
    r = s.resolved()
    return isinstance(r.raw, dict) and "default" in r.raw


def _compare_object(ctx: _Context, original: _Schema, update: _Schema) -> None:
    oprops, uprops = original.properties(), update.properties()
    oreq, ureq = original.required(), update.required()
    with ctx.at("required"):
        for name in oprops:
            if name in uprops:
                with ctx.at(name):
                    if name in oreq and name not in ureq:
                        ctx.add("REQUIRED_ATTRIBUTE_REMOVED")
                    elif name not in oreq and name in ureq:
                        ctx.add("REQUIRED_ATTRIBUTE_WITH_DEFAULT_ADDED" if _has_default(uprops[name])
                                else "REQUIRED_ATTRIBUTE_ADDED")
    with ctx.at("properties"):
        for name in sorted(set(oprops) | set(uprops)):
            with ctx.at(name):
                o, u = oprops.get(name), uprops.get(name)
                if u is None:
                    assert o is not None
                    open_ = _is_open_object(update)
                    _removed(ctx, "PROPERTY", o, open_, None if open_ else _partially_open_schema(update, name))
                elif o is None:
                    if _is_open_object(original):
                        if u.resolved().kind in ("empty", "true"):
                            ctx.add("PROPERTY_WITH_EMPTY_SCHEMA_ADDED_TO_OPEN_CONTENT_MODEL")
                        elif name in ureq:
                            ctx.add("REQUIRED_PROPERTY_WITH_DEFAULT_ADDED_TO_OPEN_CONTENT_MODEL" if _has_default(u)
                                    else "REQUIRED_PROPERTY_ADDED_TO_OPEN_CONTENT_MODEL")
                        else:
                            ctx.add("OPTIONAL_PROPERTY_ADDED_TO_OPEN_CONTENT_MODEL")
                        continue
                    partial = _partially_open_schema(original, name)
                    if partial is not None:
                        _against_partial_model(ctx, "PROPERTY_ADDED", partial, u)
                    if name in ureq:
                        ctx.add("REQUIRED_PROPERTY_WITH_DEFAULT_ADDED_TO_UNOPEN_CONTENT_MODEL" if _has_default(u)
                                else "REQUIRED_PROPERTY_ADDED_TO_UNOPEN_CONTENT_MODEL")
                    else:
                        ctx.add("OPTIONAL_PROPERTY_ADDED_TO_UNOPEN_CONTENT_MODEL")
                else:
                    _compare(ctx, o, u)
    _compare_dependencies(ctx, original, update)
    with ctx.at("additionalProperties"):
        _compare_additional(ctx, "ADDITIONAL_PROPERTIES", original.permits_additional_properties(),
                            update.permits_additional_properties(), original.additional_properties_schema(),
                            update.additional_properties_schema())
    _bounded(ctx, "maxProperties", original.get("maxProperties"), update.get("maxProperties"), "MAX_PROPERTIES")
    _bounded(ctx, "minProperties", original.get("minProperties"), update.get("minProperties"), "MIN_PROPERTIES")


def _compare_dependencies(ctx: _Context, original: _Schema, update: _Schema) -> None:
    """`dependencies`: property dependencies (arrays) and schema dependencies, one name at a time."""
    with ctx.at("dependencies"):
        odeps, udeps = original.property_dependencies(), update.property_dependencies()
        for name in sorted(set(odeps) | set(udeps)):
            with ctx.at(name):
                od, ud = odeps.get(name), udeps.get(name)
                if ud is None:
                    ctx.add("DEPENDENCY_ARRAY_REMOVED")
                elif od is None:
                    ctx.add("DEPENDENCY_ARRAY_ADDED")
                elif od != ud:
                    ctx.add("DEPENDENCY_ARRAY_EXTENDED" if ud >= od
                            else "DEPENDENCY_ARRAY_NARROWED" if od >= ud else "DEPENDENCY_ARRAY_CHANGED")
        osd, usd = original.schema_dependencies(), update.schema_dependencies()
        for name in sorted(set(osd) | set(usd)):
            with ctx.at(name):
                os_, us_ = osd.get(name), usd.get(name)
                if us_ is None:
                    ctx.add("DEPENDENCY_SCHEMA_REMOVED")
                elif os_ is None:
                    ctx.add("DEPENDENCY_SCHEMA_ADDED")
                else:
                    _compare(ctx, os_, us_)


def _against_partial_model(ctx: _Context, what: str, original: _Schema, update: _Schema) -> None:
    """`what` (PROPERTY_ADDED, ITEM_REMOVED, ...) where a partially open content model takes the property or item:
    covered when the two schemas compare compatible (their differences count too)."""
    sub = ctx.sub()
    _compare(sub, original, update)
    ctx.diffs.extend(sub.diffs)
    ctx.add(f"{what}_IS_COVERED_BY_PARTIALLY_OPEN_CONTENT_MODEL" if sub.compatible_so_far()
            else f"{what}_NOT_COVERED_BY_PARTIALLY_OPEN_CONTENT_MODEL")


def _removed(ctx: _Context, kind: str, original: _Schema, open_: bool, partial: _Schema | None) -> None:
    """A property or item (`kind`) of the original that the update no longer has: fine for an open content model,
    judged against the schema a partially open one gives it, else removed from a closed model (a `false` schema
    removed is Confluent's separate case)."""
    if open_:
        ctx.add(f"{kind}_REMOVED_FROM_OPEN_CONTENT_MODEL")
    elif partial is not None:
        _against_partial_model(ctx, f"{kind}_REMOVED", original, partial)
    elif original.resolved().kind == "false":
        ctx.add(f"{kind}_WITH_FALSE_REMOVED_FROM_CLOSED_CONTENT_MODEL")
    else:
        ctx.add(f"{kind}_REMOVED_FROM_CLOSED_CONTENT_MODEL")

def _compare_additional(ctx: _Context, what: str, original_permits: bool, update_permits: bool,
                        original: _Schema | None, update: _Schema | None) -> None:
    """additionalProperties / additionalItems (`what`): allowed or not, then the schema extra ones must match (none
    = anything)."""
    if original_permits != update_permits:
        ctx.add(f"{what}_ADDED" if update_permits else f"{what}_REMOVED")
    elif original is None and update is not None:
        ctx.add(f"{what}_NARROWED")
    elif update is None and original is not None:
        ctx.add(f"{what}_EXTENDED")
    else:
        _compare(ctx, original, update)

def _is_open_array(s: _Schema) -> bool:
    return s.permits_additional_items() and s.additional_items_schema() is None


def _compare_array(ctx: _Context, original: _Schema, update: _Schema) -> None:
    with ctx.at("items"):
        _compare(ctx, original.all_items(), update.all_items())
    olist, ulist = original.item_list(), update.item_list()
    common = min(len(olist), len(ulist))
    for i in range(common):
        with ctx.at(f"items/{i}"):
            _compare(ctx, olist[i], ulist[i])
    for i in range(common, len(olist)):
        with ctx.at(f"items/{i}"):
            _removed(ctx, "ITEM", olist[i], _is_open_array(update), update.additional_items_schema())
    for i in range(common, len(ulist)):
        with ctx.at(f"items/{i}"):
            u = ulist[i]
            if _is_open_array(original):
                ctx.add("ITEM_WITH_EMPTY_SCHEMA_ADDED_TO_OPEN_CONTENT_MODEL" if u.resolved().kind in ("empty", "true")
                        else "ITEM_ADDED_TO_OPEN_CONTENT_MODEL")
                continue
            partial = original.additional_items_schema()
            if partial is not None:
                _against_partial_model(ctx, "ITEM_ADDED", partial, u)
            else:
                ctx.add("ITEM_ADDED_TO_CLOSED_CONTENT_MODEL")
    with ctx.at("additionalItems"):
        _compare_additional(ctx, "ADDITIONAL_ITEMS", original.permits_additional_items(),
                            update.permits_additional_items(), original.additional_items_schema(),
                            update.additional_items_schema())
    _bounded(ctx, "maxItems", original.get("maxItems"), update.get("maxItems"), "MAX_ITEMS")
    _bounded(ctx, "minItems", original.get("minItems"), update.get("minItems"), "MIN_ITEMS")
    ou, uu = original.get("uniqueItems") is True, update.get("uniqueItems") is True
    if ou != uu:
        ctx.add("UNIQUE_ITEMS_REMOVED" if ou else "UNIQUE_ITEMS_ADDED", "uniqueItems")


# --------------------------------------------------------------------------------------------------------------
# Confluent's wording of a difference (json diff's Difference.error()), `%s` the reader's then the writer's role

_KEYWORD_ADDED_OR_REMOVED = frozenset(
    """
    MAXIMUM_ADDED MINIMUM_ADDED EXCLUSIVE_MAXIMUM_ADDED EXCLUSIVE_MINIMUM_ADDED MULTIPLE_OF_ADDED MAX_LENGTH_ADDED
    MIN_LENGTH_ADDED PATTERN_ADDED REQUIRED_ATTRIBUTE_ADDED MAX_PROPERTIES_ADDED MIN_PROPERTIES_ADDED
    DEPENDENCY_ARRAY_ADDED DEPENDENCY_SCHEMA_ADDED MAX_ITEMS_ADDED MIN_ITEMS_ADDED MAX_CONTAINS_ADDED
    MIN_CONTAINS_ADDED UNIQUE_ITEMS_ADDED ADDITIONAL_ITEMS_REMOVED ADDITIONAL_PROPERTIES_REMOVED
    UNEVALUATED_PROPERTIES_REMOVED UNEVALUATED_ITEMS_REMOVED
    """.split()
)
_VALUE_INCREASED = frozenset(
    "MIN_LENGTH_INCREASED MINIMUM_INCREASED EXCLUSIVE_MINIMUM_INCREASED MIN_PROPERTIES_INCREASED "
    "MULTIPLE_OF_EXPANDED MIN_ITEMS_INCREASED MIN_CONTAINS_INCREASED".split()
)
_VALUE_DECREASED = frozenset(
    "MAX_LENGTH_DECREASED MAXIMUM_DECREASED MAX_ITEMS_DECREASED MAX_CONTAINS_DECREASED "
    "EXCLUSIVE_MAXIMUM_DECREASED MAX_PROPERTIES_DECREASED".split()
)
_TYPE_NARROWED = frozenset(
    "ADDITIONAL_ITEMS_NARROWED ENUM_ARRAY_NARROWED SUM_TYPE_NARROWED ADDITIONAL_PROPERTIES_NARROWED "
    "UNEVALUATED_PROPERTIES_NARROWED UNEVALUATED_ITEMS_NARROWED".split()
)
_VALUE_CHANGED = frozenset("PATTERN_CHANGED MULTIPLE_OF_CHANGED DEPENDENCY_ARRAY_CHANGED".split())
_TYPE_CHANGED = frozenset(
    "TYPE_CHANGED TYPE_NARROWED COMBINED_TYPE_CHANGED COMBINED_TYPE_SUBSCHEMAS_CHANGED ENUM_ARRAY_CHANGED".split()
)
_TYPE_EXTENDED = frozenset(
    "DEPENDENCY_ARRAY_EXTENDED PRODUCT_TYPE_EXTENDED SUM_TYPE_EXTENDED NOT_TYPE_EXTENDED".split()
)
_ADDED_TO_OPEN = frozenset(
    "REQUIRED_PROPERTY_ADDED_TO_OPEN_CONTENT_MODEL REQUIRED_PROPERTY_WITH_DEFAULT_ADDED_TO_OPEN_CONTENT_MODEL "
    "OPTIONAL_PROPERTY_ADDED_TO_OPEN_CONTENT_MODEL ITEM_ADDED_TO_OPEN_CONTENT_MODEL".split()
)


def _description(d: Difference) -> str:
    t, p = d.type, d.path
    if t in _KEYWORD_ADDED_OR_REMOVED:
        return f"The keyword at path '{p}' in the %s schema is not present in the %s schema"
    if t in _VALUE_INCREASED:
        return f"The value at path '{p}' in the %s schema is more than its value in the %s schema"
    if t in _VALUE_DECREASED:
        return f"The value at path '{p}' in the %s schema is less than its value in the %s schema"
    if t in _VALUE_CHANGED:
        return f"The value at path '{p}' is different between the %s and %s schema"
    if t in _TYPE_NARROWED:
        return f"An array or combined type at path '{p}' has fewer elements in the %s schema than the %s schema"
    if t in _TYPE_EXTENDED:
        return f"An array or combined type at path '{p}' has more elements in the %s schema than the %s schema"
    if t in _TYPE_CHANGED:
        return f"A type at path '{p}' is different between the %s schema and the %s schema"
    if t in _ADDED_TO_OPEN:
        return (f"The %s schema has an open content model and has a property or item at path '{p}' which is "
                "missing in the %s schema")
    if t == "REQUIRED_PROPERTY_ADDED_TO_UNOPEN_CONTENT_MODEL":
        return (f"The %s schema has an unopen content model and has a required property at path '{p}' which is "
                "missing in the %s schema")
    if t in ("PROPERTY_REMOVED_FROM_CLOSED_CONTENT_MODEL", "ITEM_REMOVED_FROM_CLOSED_CONTENT_MODEL"):
        return (f"The %s has a closed content model and is missing a property or item present at path '{p}' in "
                "the %s schema")
    if t in ("PROPERTY_REMOVED_NOT_COVERED_BY_PARTIALLY_OPEN_CONTENT_MODEL",
             "ITEM_REMOVED_NOT_COVERED_BY_PARTIALLY_OPEN_CONTENT_MODEL"):
        return (f"A property or item is missing in the %s schema but present at path '{p}' in the %s schema and "
                "is not covered by its partially open content model")
    if t in ("PROPERTY_ADDED_NOT_COVERED_BY_PARTIALLY_OPEN_CONTENT_MODEL",
             "ITEM_ADDED_NOT_COVERED_BY_PARTIALLY_OPEN_CONTENT_MODEL"):
        return (f"The %s schema has a property or item at path '{p}' which is missing in the %s schema and is "
                "not covered by its partially open content model")
    return ""


def _message(d: Difference, reader_name: str, writer_name: str) -> str:
    description = _description(d)
    if "%s" in description:
        description = description.replace("%s", reader_name, 1).replace("%s", writer_name, 1)
    # Confluent's toString closes the description with a single quote (sic): kept, as its clients show it
    return f'{{errorType:"{d.type}", description:"{description}\'}}'


# --------------------------------------------------------------------------------------------------------------
# Entry points


def _root(text: str, refs: dict[str, str] | None) -> _Schema:
    return _Documents(_loaded(text), refs or {}).root_schema()


def json_differences(original_text: str, update_text: str, *, refs: dict[str, str] | None = None,
                     update_refs: dict[str, str] | None = None, lenient: bool = False) -> list[tuple[str, str]]:
    """Every difference (type, path) from the `original` schema to the `update`, compatible ones included, as
    Confluent's SchemaDiff.compare lists them (the registry wants only `json_incompatibilities`; this is the
    diff itself, for tests and diagnostics)."""
    compatible = COMPATIBLE_CHANGES_LENIENT if lenient else COMPATIBLE_CHANGES_STRICT
    ctx = _Context(compatible, {}, set())
    _compare(ctx, _root(original_text, refs), _root(update_text, update_refs if update_refs is not None else refs))
    return [(d.type, d.path) for d in ctx.diffs]


def json_incompatibilities(reader_text: str, writer_text: str, *, reader_refs: dict[str, str] | None = None,
                           writer_refs: dict[str, str] | None = None, lenient: bool = False,
                           reader_name: str = "new", writer_name: str = "old") -> list[str]:
    """Why data valid under `writer_text` may be refused by `reader_text` (both usable, see `json_invalid`), in
    Confluent's words; empty when compatible. BACKWARD is (reader=new, writer=old); for FORWARD call with
    (old, new, reader_name="old", writer_name="new"), as Confluent's messages then name the roles."""
    compatible = COMPATIBLE_CHANGES_LENIENT if lenient else COMPATIBLE_CHANGES_STRICT
    ctx = _Context(compatible, {}, set())
    try:
        _compare(ctx, _root(writer_text, writer_refs), _root(reader_text, reader_refs))
    except (_SchemaError, ValueError) as e:
        return [f"Invalid schema: {e}"]
    except RecursionError:
        return ["Invalid schema: nested too deeply to compare"]
    return [_message(d, reader_name, writer_name) for d in ctx.diffs if d.type not in compatible]
