"""What the JSON Schema and Protobuf diffs (json_compat.py, protobuf_compat.py) share: a difference is a
Confluent difference type at a JSON-pointer-like path, and a walk keeps the path it is at while it compares two
schemas' trees."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass


@dataclass(frozen=True)
class Difference:
    type: str  # Confluent's difference type name, e.g. TYPE_CHANGED, FIELD_KIND_CHANGED
    path: str  # where, as "#/properties/a" (JSON) or "#/Message/1" (Protobuf)


class DiffPath:
    """The differences found so far by a walk and the path it is at."""

    def __init__(self, path: list[str] | None = None) -> None:
        self.path: list[str] = list(path or [])
        self.diffs: list[Difference] = []

    def add(self, type_: str, attribute: str | None = None) -> None:
        parts = self.path + ([attribute] if attribute is not None else [])
        self.diffs.append(Difference(type_, "#/" + "/".join(parts)))

    @contextmanager
    def at(self, *parts: str) -> Iterator[None]:
        self.path.extend(parts)
        try:
            yield
        finally:
            del self.path[len(self.path) - len(parts):]
