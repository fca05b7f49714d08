"""kop/schemas/json_compat: which JSON Schema documents the registry accepts, and Confluent's JSON Schema
compatibility verdicts (sans-IO: pairs of schemas and the differences Confluent's diff reports for them).

Each row of the tables is (old schema, new schema, differences): the differences `json_differences(old, new)`
lists, compatible ones included, as Confluent's `SchemaDiff.compare(original, update)` does; a row is
BACKWARD-compatible (the new schema reads what the old one wrote) when every difference is in Confluent's
compatible set, which `json_incompatibilities(new, old)` answers.
"""

from __future__ import annotations

import json
import sys

import pytest

from kop.schemas.json_compat import (
    COMPATIBLE_CHANGES_LENIENT,
    COMPATIBLE_CHANGES_STRICT,
    json_differences,
    json_incompatibilities,
    json_invalid,
)


def _j(doc: object) -> str:
    return json.dumps(doc)


# --------------------------------------------------------------------------------------------------------------
# Usable documents


@pytest.mark.parametrize(
    "text, why",
    [
        ("{", "Invalid JSON"),
        ("[1, 2]", "a JSON Schema is an object or a boolean"),
        ('"string"', "a JSON Schema is an object or a boolean"),
        (_j({"type": "strnig"}), "at '#/type'"),
        (_j({"type": "object", "properties": {"a": {"type": 5}}}), "at '#/properties/a/type'"),
        (_j({"type": "string", "minLength": -1}), "at '#/minLength'"),
        (_j({"$schema": "http://example.com/not-a-draft#", "type": "string"}), "unknown $schema"),
        (_j({"$ref": "#/definitions/missing"}), "names nothing"),
        (_j({"properties": {"a": {"$ref": "other.json"}}}), "not among the schema's references"),
    ],
)
def test_unusable_documents_are_refused_with_a_reason(text: str, why: str) -> None:
    problem = json_invalid(text)
    assert problem is not None and why in problem


@pytest.mark.parametrize(
    "doc",
    [
        True,
        {},
        {"type": "object", "properties": {"name": {"type": "string"}}, "required": ["name"]},
        {"$schema": "http://json-schema.org/draft-04/schema#", "type": "number", "maximum": 5,
         "exclusiveMaximum": True},
        {"$schema": "https://json-schema.org/draft/2020-12/schema", "$defs": {"n": {"type": "integer"}},
         "$ref": "#/$defs/n"},
        {"definitions": {"node": {"type": "object", "properties": {"next": {"$ref": "#/definitions/node"}}}},
         "$ref": "#/definitions/node"},
    ],
)
def test_usable_documents(doc: object) -> None:
    assert json_invalid(_j(doc)) is None


def test_a_document_nested_past_the_depth_limit_is_refused_whatever_the_recursion_limit() -> None:
    """Refused by its depth alone: in the full suite a library had raised the interpreter's recursion limit, and
    a refusal that waited for a RecursionError did not come."""
    deep = '{"properties": {"a": ' * 400 + "{}" + "}}" * 400
    shallow = '{"properties": {"a": ' * 30 + "{}" + "}}" * 30
    before = sys.getrecursionlimit()
    for limit in (before, 100_000):
        sys.setrecursionlimit(limit)
        try:
            assert json_invalid(deep) == "Invalid schema: nested too deeply"
            assert json_incompatibilities(deep, deep) == ["Invalid schema: nested too deeply to compare"]
            assert json_invalid(shallow) is None
        finally:
            sys.setrecursionlimit(before)


def test_a_ref_into_a_referenced_document_resolves_through_refs() -> None:
    text = _j({"type": "object", "properties": {"a": {"$ref": "address.json#/definitions/street"}}})
    refs = {"address.json": _j({"definitions": {"street": {"type": "string"}}})}
    assert json_invalid(text, refs) is None
    assert json_invalid(_j({"$ref": "address.json#/definitions/nope"}), refs) is not None


# --------------------------------------------------------------------------------------------------------------
# Differences and verdicts

OBJ = "object"
STR = {"type": "string"}
NUM = {"type": "number"}
INT = {"type": "integer"}


def _obj(props: dict[str, object], **more: object) -> dict[str, object]:
    return {"type": OBJ, "properties": props, **more}


CASES: list[tuple[str, object, object, list[str]]] = [
    ("identical", _obj({"a": STR}), _obj({"a": STR}), []),
    ("title, description and $id are documentation", {"title": "A", "description": "x", "$id": "a"},
     {"title": "B", "description": "y", "$id": "b"}, ["ID_CHANGED #/", "TITLE_CHANGED #/", "DESCRIPTION_CHANGED #/"]),
    # types
    ("string to number", STR, NUM, ["TYPE_CHANGED #/"]),
    ("integer widened to number", INT, NUM, ["TYPE_EXTENDED #/"]),
    ("number narrowed to integer", NUM, INT, ["TYPE_NARROWED #/"]),
    ("a property's type changed", _obj({"a": STR}), _obj({"a": {"type": "boolean"}}), ["TYPE_CHANGED #/properties/a"]),
    ("anything to the empty schema", _obj({"a": STR}), {}, []),
    ("type list narrowed", {"type": ["string", "null"]}, STR, ["TYPE_CHANGED #/"]),
    ("type list widened", STR, {"type": ["string", "null"]}, ["SUM_TYPE_EXTENDED #/"]),
    # open content model (no additionalProperties)
    ("optional property added to an open model", _obj({"a": STR}), _obj({"a": STR, "b": NUM}),
     ["OPTIONAL_PROPERTY_ADDED_TO_OPEN_CONTENT_MODEL #/properties/b"]),
    ("required property added to an open model", _obj({"a": STR}), _obj({"a": STR, "b": NUM}, required=["b"]),
     ["REQUIRED_PROPERTY_ADDED_TO_OPEN_CONTENT_MODEL #/properties/b"]),
    ("property with the empty schema added to an open model", _obj({"a": STR}), _obj({"a": STR, "b": {}}),
     ["PROPERTY_WITH_EMPTY_SCHEMA_ADDED_TO_OPEN_CONTENT_MODEL #/properties/b"]),
    ("property removed from an open model", _obj({"a": STR, "b": NUM}), _obj({"a": STR}),
     ["PROPERTY_REMOVED_FROM_OPEN_CONTENT_MODEL #/properties/b"]),
    # closed content model (additionalProperties: false)
    ("optional property added to a closed model", _obj({"a": STR}, additionalProperties=False),
     _obj({"a": STR, "b": NUM}, additionalProperties=False),
     ["OPTIONAL_PROPERTY_ADDED_TO_UNOPEN_CONTENT_MODEL #/properties/b"]),
    ("required property added to a closed model", _obj({"a": STR}, additionalProperties=False),
     _obj({"a": STR, "b": NUM}, additionalProperties=False, required=["b"]),
     ["REQUIRED_PROPERTY_ADDED_TO_UNOPEN_CONTENT_MODEL #/properties/b"]),
    ("required property with a default added to a closed model", _obj({"a": STR}, additionalProperties=False),
     _obj({"a": STR, "b": {"type": "number", "default": 0}}, additionalProperties=False, required=["b"]),
     ["REQUIRED_PROPERTY_WITH_DEFAULT_ADDED_TO_UNOPEN_CONTENT_MODEL #/properties/b"]),
    ("property removed from a closed model", _obj({"a": STR, "b": NUM}, additionalProperties=False),
     _obj({"a": STR}, additionalProperties=False), ["PROPERTY_REMOVED_FROM_CLOSED_CONTENT_MODEL #/properties/b"]),
    ("model closed", _obj({"a": STR}), _obj({"a": STR}, additionalProperties=False),
     ["ADDITIONAL_PROPERTIES_REMOVED #/additionalProperties"]),
    ("model opened", _obj({"a": STR}, additionalProperties=False), _obj({"a": STR}),
     ["ADDITIONAL_PROPERTIES_ADDED #/additionalProperties"]),
    # partially open content model (additionalProperties / patternProperties schemas)
    ("property added, covered by additionalProperties", _obj({"a": STR}, additionalProperties=STR),
     _obj({"a": STR, "b": STR}, additionalProperties=STR),
     ["PROPERTY_ADDED_IS_COVERED_BY_PARTIALLY_OPEN_CONTENT_MODEL #/properties/b",
      "OPTIONAL_PROPERTY_ADDED_TO_UNOPEN_CONTENT_MODEL #/properties/b"]),
    ("property added, not covered by additionalProperties", _obj({"a": STR}, additionalProperties=STR),
     _obj({"a": STR, "b": NUM}, additionalProperties=STR),
     ["TYPE_CHANGED #/properties/b", "PROPERTY_ADDED_NOT_COVERED_BY_PARTIALLY_OPEN_CONTENT_MODEL #/properties/b",
      "OPTIONAL_PROPERTY_ADDED_TO_UNOPEN_CONTENT_MODEL #/properties/b"]),
    ("property removed, covered by a patternProperties schema",
     _obj({"n_1": INT}, additionalProperties=False),
     _obj({}, additionalProperties=False, patternProperties={"^n_": NUM}),
     ["TYPE_EXTENDED #/properties/n_1", "PROPERTY_REMOVED_IS_COVERED_BY_PARTIALLY_OPEN_CONTENT_MODEL #/properties/n_1"]),
    # required
    ("existing property made required", _obj({"a": STR}), _obj({"a": STR}, required=["a"]),
     ["REQUIRED_ATTRIBUTE_ADDED #/required/a"]),
    ("existing property made required, with a default", _obj({"a": STR}),
     _obj({"a": {"type": "string", "default": ""}}, required=["a"]),
     ["DEFAULT_CHANGED #/properties/a", "REQUIRED_ATTRIBUTE_WITH_DEFAULT_ADDED #/required/a"]),
    ("property no longer required", _obj({"a": STR}, required=["a"]), _obj({"a": STR}),
     ["REQUIRED_ATTRIBUTE_REMOVED #/required/a"]),
    # enums and consts
    ("enum widened", {"enum": ["red", "green"]}, {"enum": ["red", "green", "blue"]}, ["ENUM_ARRAY_EXTENDED #/enum"]),
    ("enum narrowed", {"enum": ["red", "green"]}, {"enum": ["red"]}, ["ENUM_ARRAY_NARROWED #/enum"]),
    ("enum changed", {"enum": ["red", "green"]}, {"enum": ["red", "blue"]}, ["ENUM_ARRAY_CHANGED #/enum"]),
    ("typed enum widened", {"type": "string", "enum": ["a"]}, {"type": "string", "enum": ["a", "b"]},
     ["ENUM_ARRAY_EXTENDED #/allOf/1/enum"]),
    ("typed enum dropped", {"type": "string", "enum": ["a"]}, STR, ["PRODUCT_TYPE_NARROWED #/"]),
    ("const changed", {"const": 1}, {"const": 2}, ["ENUM_ARRAY_CHANGED #/const"]),
    # bounds
    ("maxLength lowered", {"type": "string", "maxLength": 10}, {"type": "string", "maxLength": 5},
     ["MAX_LENGTH_DECREASED #/maxLength"]),
    ("maxLength raised", {"type": "string", "maxLength": 5}, {"type": "string", "maxLength": 10},
     ["MAX_LENGTH_INCREASED #/maxLength"]),
    ("minLength added", STR, {"type": "string", "minLength": 1}, ["MIN_LENGTH_ADDED #/minLength"]),
    ("pattern changed", {"type": "string", "pattern": "^a"}, {"type": "string", "pattern": "^b"},
     ["PATTERN_CHANGED #/pattern"]),
    ("minimum raised", {"type": "number", "minimum": 0}, {"type": "number", "minimum": 1},
     ["MINIMUM_INCREASED #/minimum"]),
    ("maximum removed", {"type": "number", "maximum": 9}, NUM, ["MAXIMUM_REMOVED #/maximum"]),
    ("exclusiveMaximum lowered", {"type": "number", "exclusiveMaximum": 9},
     {"type": "number", "exclusiveMaximum": 5}, ["EXCLUSIVE_MAXIMUM_DECREASED #/exclusiveMaximum"]),
    ("multipleOf divides the old one", {"type": "number", "multipleOf": 10}, {"type": "number", "multipleOf": 5},
     ["MULTIPLE_OF_REDUCED #/multipleOf"]),
    ("multipleOf is a multiple of the old one", {"type": "number", "multipleOf": 5},
     {"type": "number", "multipleOf": 10}, ["MULTIPLE_OF_EXPANDED #/multipleOf"]),
    ("maxProperties lowered", {"type": "object", "maxProperties": 3}, {"type": "object", "maxProperties": 2},
     ["MAX_PROPERTIES_DECREASED #/maxProperties"]),
    # arrays
    ("items' type changed", {"type": "array", "items": STR}, {"type": "array", "items": NUM},
     ["TYPE_CHANGED #/items"]),
    ("items' schema added", {"type": "array"}, {"type": "array", "items": STR}, ["SCHEMA_ADDED #/items"]),
    ("items' schema removed", {"type": "array", "items": STR}, {"type": "array"}, ["SCHEMA_REMOVED #/items"]),
    ("maxItems lowered", {"type": "array", "maxItems": 3}, {"type": "array", "maxItems": 2},
     ["MAX_ITEMS_DECREASED #/maxItems"]),
    ("minItems lowered", {"type": "array", "minItems": 3}, {"type": "array", "minItems": 2},
     ["MIN_ITEMS_DECREASED #/minItems"]),
    ("uniqueItems added", {"type": "array"}, {"type": "array", "uniqueItems": True},
     ["UNIQUE_ITEMS_ADDED #/uniqueItems"]),
    ("tuple item added to a closed tuple", {"type": "array", "items": [STR], "additionalItems": False},
     {"type": "array", "items": [STR, NUM], "additionalItems": False}, ["ITEM_ADDED_TO_CLOSED_CONTENT_MODEL #/items/1"]),
    ("tuple item added to an open tuple", {"type": "array", "items": [STR]}, {"type": "array", "items": [STR, NUM]},
     ["ITEM_ADDED_TO_OPEN_CONTENT_MODEL #/items/1"]),
    # nesting and references
    ("nested object's property changed", _obj({"a": _obj({"b": STR})}), _obj({"a": _obj({"b": INT})}),
     ["TYPE_CHANGED #/properties/a/properties/b"]),
    ("property added to a nested closed model",
     _obj({"a": _obj({"b": STR}, additionalProperties=False)}),
     _obj({"a": _obj({"b": STR, "c": STR}, additionalProperties=False)}),
     ["OPTIONAL_PROPERTY_ADDED_TO_UNOPEN_CONTENT_MODEL #/properties/a/properties/c"]),
    ("a definition changed under its $ref",
     {"type": "array", "items": {"$ref": "#/definitions/x"}, "definitions": {"x": STR}},
     {"type": "array", "items": {"$ref": "#/definitions/x"}, "definitions": {"x": NUM}},
     ["TYPE_CHANGED #/items"]),
    ("inlined into a $ref", STR, {"$ref": "#/$defs/s", "$defs": {"s": STR}}, []),
    ("a recursive type changed",
     {"$ref": "#/definitions/n", "definitions": {"n": _obj({"v": INT, "next": {"$ref": "#/definitions/n"}})}},
     {"$ref": "#/definitions/n", "definitions": {"n": _obj({"v": STR, "next": {"$ref": "#/definitions/n"}})}},
     ["TYPE_CHANGED #/properties/v"]),
    # combined types
    ("made nullable with oneOf", STR, {"oneOf": [{"type": "null"}, STR]}, ["SUM_TYPE_EXTENDED #/"]),
    ("oneOf made non-nullable", {"oneOf": [{"type": "null"}, STR]}, STR, ["TYPE_CHANGED #/"]),
    ("anyOf narrowed", {"anyOf": [STR, NUM]}, {"anyOf": [STR]}, ["SUM_TYPE_NARROWED #/"]),
    ("anyOf widened", {"anyOf": [STR]}, {"anyOf": [STR, NUM]}, ["SUM_TYPE_EXTENDED #/"]),
    ("oneOf member changed", {"oneOf": [STR, NUM]}, {"oneOf": [STR, {"type": "boolean"}]},
     ["COMBINED_TYPE_SUBSCHEMAS_CHANGED #/"]),
    ("allOf member dropped", {"allOf": [_obj({"a": STR}), _obj({"b": STR})]}, {"allOf": [_obj({"a": STR})]},
     ["PRODUCT_TYPE_NARROWED #/"]),
    ("allOf to anyOf", {"allOf": [STR, {"maxLength": 3}]}, {"anyOf": [STR, {"maxLength": 3}]},
     ["COMBINED_TYPE_EXTENDED #/"]),
    ("anyOf to oneOf", {"anyOf": [STR, NUM]}, {"oneOf": [STR, NUM]}, ["COMBINED_TYPE_CHANGED #/"]),
    ("not widened", {"not": INT}, {"not": NUM}, ["NOT_TYPE_EXTENDED #/not"]),
    ("not narrowed", {"not": NUM}, {"not": INT}, ["NOT_TYPE_NARROWED #/not"]),
]


@pytest.mark.parametrize("old, new, differences", [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_differences_as_confluent_reports_them(old: object, new: object, differences: list[str]) -> None:
    got = [f"{t} {p}" for t, p in json_differences(_j(old), _j(new))]
    assert sorted(got) == sorted(differences)


@pytest.mark.parametrize("old, new, differences", [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_backward_verdict_is_the_incompatible_differences(old: object, new: object, differences: list[str]) -> None:
    incompatible = [d for d in differences if d.split()[0] not in COMPATIBLE_CHANGES_STRICT]
    messages = json_incompatibilities(_j(new), _j(old))
    assert len(messages) == len(incompatible)
    for d, message in zip(sorted(incompatible), sorted(messages, key=lambda m: (m.split('"')[1], m)), strict=True):
        type_, path = d.split()
        assert message.startswith(f'{{errorType:"{type_}", description:"')
        if type_ != "SCHEMA_ADDED":  # the one incompatible type Confluent describes with an empty text
            assert f"'{path}'" in message


def test_compatible_rows_are_really_there() -> None:
    # the table above exercises both verdicts: it would pass vacuously if every row were one or the other
    verdicts = {all(d.split()[0] in COMPATIBLE_CHANGES_STRICT for d in c[3]) for c in CASES}
    assert verdicts == {True, False}


def test_message_wording_is_confluents() -> None:
    old, new = _j(_obj({"a": STR})), _j(_obj({"a": NUM}))
    assert json_incompatibilities(new, old) == [
        "{errorType:\"TYPE_CHANGED\", description:\"A type at path '#/properties/a' is different between the "
        "new schema and the old schema'}"
    ]
    # FORWARD: the old schema reads what the new one writes, and the messages name the roles so;
    # an open model: the property the old one lacks is compatible
    assert json_incompatibilities(_j(_obj({"a": STR})), _j(_obj({"a": STR, "b": NUM})), reader_name="old",
                                  writer_name="new") == []
    closed_old = _j(_obj({"a": STR}, additionalProperties=False))
    closed_new = _j(_obj({"a": STR, "b": NUM}, additionalProperties=False))
    assert json_incompatibilities(closed_old, closed_new, reader_name="old", writer_name="new") == [
        "{errorType:\"PROPERTY_REMOVED_FROM_CLOSED_CONTENT_MODEL\", description:\"The old has a closed content model "
        "and is missing a property or item present at path '#/properties/b' in the new schema'}"
    ]


def test_lenient_policy_lets_properties_come_and_go_in_open_models() -> None:
    old, new = _j(_obj({"a": STR})), _j(_obj({"a": STR, "b": NUM}))
    assert json_incompatibilities(new, old) != []
    assert json_incompatibilities(new, old, lenient=True) == []
    assert COMPATIBLE_CHANGES_STRICT < COMPATIBLE_CHANGES_LENIENT


def test_references_are_compared_through_refs() -> None:
    schema = _j({"type": "object", "properties": {"addr": {"$ref": "address.json"}}})
    old_refs = {"address.json": _j(_obj({"street": STR}))}
    new_refs = {"address.json": _j(_obj({"street": INT}))}
    assert json_incompatibilities(schema, schema, reader_refs=old_refs, writer_refs=old_refs) == []
    [message] = json_incompatibilities(schema, schema, reader_refs=new_refs, writer_refs=old_refs)
    assert "TYPE_CHANGED" in message and "'#/properties/addr/properties/street'" in message
