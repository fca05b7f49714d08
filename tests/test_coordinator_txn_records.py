"""__transaction_state records (kop/coordinator/transactions/records.py) in Kafka's TransactionLogKey /
TransactionLogValue layouts: fixed bytes written by hand from the schema, round trips, both versions read."""

from __future__ import annotations

import struct

import pytest

from kop.coordinator.records import RecordError
from kop.coordinator.transactions import records as trec


def test_key_layout() -> None:
    assert trec.encode_key("tx") == b"\x00\x00\x00\x02tx"
    assert trec.decode_key(b"\x00\x00\x00\x02tx") == "tx"
    with pytest.raises(RecordError):
        trec.decode_key(b"\x00\x01\x00\x02tx")


def test_value_v0_layout_by_hand() -> None:
    v = trec.TransactionLogValue(5, 2, 60000, 1, {"t": [0, 3]}, 111, 100)
    expect = (struct.pack(">hqhib", 0, 5, 2, 60000, 1) + struct.pack(">i", 1) + struct.pack(">h", 1) + b"t"
              + struct.pack(">iii", 2, 0, 3) + struct.pack(">qq", 111, 100))
    assert trec.encode_value(v) == expect
    assert trec.decode_value(expect) == v


def test_empty_state_has_null_partitions() -> None:
    v = trec.TransactionLogValue(5, 0, 1000, 0, None, 1, -1)
    raw = trec.encode_value(v)
    assert raw[2 + 8 + 2 + 4 + 1:][:4] == b"\xff\xff\xff\xff"
    assert trec.decode_value(raw) == v


def test_value_v1_flexible_with_tags_round_trips() -> None:
    v = trec.TransactionLogValue(5, 2, 60000, 4, {"a": [1], "b": []}, 111, 100, client_transaction_version=2)
    raw = trec.encode_value(v, version=1)
    assert raw[:2] == b"\x00\x01"
    assert trec.decode_value(raw) == v
    empty = trec.TransactionLogValue(5, 0, 1000, 0, None, 1, -1)
    assert trec.decode_value(trec.encode_value(empty, version=1)) == empty


def test_truncated_value_is_an_error() -> None:
    raw = trec.encode_value(trec.TransactionLogValue(5, 2, 60000, 1, {"t": [0]}, 111, 100))
    with pytest.raises(RecordError):
        trec.decode_value(raw[:-3])
