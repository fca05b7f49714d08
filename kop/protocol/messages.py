"""The Kafka message classes by schema name: ``from kop.protocol.messages import FetchRequest``.

The classes are the ones kop.protocol.codec generates at import from Kafka's JSON schemas (kop/protocol/model.py:
one ``__slots__`` class per message, its nested structs attached to it); this module only names them. Their
fields are declared for the type checker by messages.pyi beside it, generated from the same schemas by
kop/protocol/stubgen.py (tests/test_protocol_stubs.py checks it is current). No wrapper: the names are the
codec's classes themselves.
"""

from __future__ import annotations

from .codec import MODELS

globals().update({name: model.root for name, model in MODELS.items()})

__all__ = sorted(MODELS)  # noqa: PLE0605 - the names are the schemas'
