"""Reading the streaming job's sinks back (kop.pipeline.stream): (batch_id, key) is a row's identity.

The kafka sink is at-least-once: a micro-batch re-run after a stop or crash appends the same rows again.
Identical repeats collapse; two different rows with one identity are a real exactly-once violation and
must be loud. Totals add per-batch contributions and XOR the record checksums, so a record counted twice
cancels out instead of hiding.
"""

from __future__ import annotations

import pytest

from kop.pipeline.stream import OUTPUT_COLUMNS, dedupe_sink_rows, totals_by_key


def row(batch: int, key: str | None, records: int, amount: int, checksum: int, invalid: int = 0) -> dict:
    return {"batch_id": batch, "key": key, "records": records, "amount": amount, "invalid": invalid,
            "checksum": checksum, "first_timestamp": "t0", "last_timestamp": "t1"}


def test_replayed_rows_collapse() -> None:
    rows = [row(0, "a", 2, 10, 0b0011), row(1, "a", 1, 5, 0b0100), row(0, "a", 2, 10, 0b0011), row(0, None, 1, 0, 8, 1)]
    unique = dedupe_sink_rows(rows)
    assert sorted(unique, key=str) == sorted([(0, "a"), (1, "a"), (0, None)], key=str)
    assert totals_by_key(unique.values()) == {
        "a": {"records": 3, "amount": 15, "invalid": 0, "checksum": 0b0111},
        None: {"records": 1, "amount": 0, "invalid": 1, "checksum": 8},
    }


def test_different_rows_with_one_identity_are_refused() -> None:
    with pytest.raises(ValueError, match="two different rows for batch 3 key 'a'"):
        dedupe_sink_rows([row(3, "a", 1, 5, 1), row(3, "a", 2, 5, 1)])


def test_a_record_counted_twice_changes_the_checksum() -> None:
    once = totals_by_key([row(0, "a", 1, 5, 0b01), row(1, "a", 1, 7, 0b10)])
    twice = totals_by_key([row(0, "a", 1, 5, 0b01), row(1, "a", 1, 7, 0b10), row(2, "a", 1, 7, 0b10)])
    assert once["a"]["checksum"] != twice["a"]["checksum"]


def test_output_columns_are_what_the_rows_carry() -> None:
    assert set(OUTPUT_COLUMNS) == set(row(0, "a", 1, 1, 1))
