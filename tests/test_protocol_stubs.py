"""kop/protocol/messages.pyi, the typed stub of the generated Kafka message classes, is what
kop/protocol/stubgen.py writes from the schemas now, and kop.protocol.messages names the codec's own classes."""

from __future__ import annotations

import ast

from kop.protocol import api_info, message_class, messages, stubgen
from kop.protocol.codec import API_KEYS, MODELS


def test_committed_stub_is_what_the_generator_writes() -> None:
    assert stubgen.STUB.read_text() == stubgen.generate(), "run: python -m kop.protocol.stubgen"


def test_messages_are_the_codec_classes() -> None:
    assert set(messages.__all__) == set(MODELS)
    for key, info in API_KEYS.items():
        assert getattr(messages, info.request_spec.name) is api_info(key).request_class
        assert getattr(messages, info.response_spec.name) is api_info(key).response_class
    assert messages.FetchResponse is message_class("FetchResponse")
    assert messages.ProduceRequest.PartitionProduceData is message_class("ProduceRequest").PartitionProduceData


def test_stub_declares_every_class_and_field() -> None:
    tree = ast.parse(stubgen.STUB.read_text())
    declared: dict[str, set[str]] = {}
    for top in tree.body:
        if isinstance(top, ast.ClassDef):
            for node in [top, *(n for n in top.body if isinstance(n, ast.ClassDef))]:
                declared[f"{top.name}.{node.name}" if node is not top else top.name] = {
                    n.target.id for n in node.body
                    if isinstance(n, ast.AnnAssign) and isinstance(n.target, ast.Name)
                    and not (isinstance(n.annotation, ast.Subscript) and ast.unparse(n.annotation).startswith("ClassVar"))}
    for name, model in MODELS.items():
        for struct_name, cls in model.classes.items():
            key = name if struct_name == name else f"{name}.{struct_name}"
            assert declared[key] == set(cls._FIELDS), key
