"""kop.pipeline.kafka_meta: Spark-style offsets JSON and how the audit resolves the range it reads.

The audit hands Spark explicit offsets, so these rules decide what counts as "expected": -2/-1 resolve
against the log start/end snapshot, starting below the log start is allowed (that is how an operator asks
"what is missing since 0?"), reading past the log end or backwards is refused with a message.
"""

from __future__ import annotations

import pytest

from kop.pipeline.kafka_meta import PipelineError, TopicSnapshot, parse_offsets_json, resolve_range

SNAP = TopicSnapshot("orders", "delete", log_start={0: 100, 1: 0}, log_end={0: 500, 1: 40})


def test_parse_accepts_spark_form_and_bare_partition_form() -> None:
    assert parse_offsets_json('{"orders": {"0": 5, "1": -2}}', "orders") == {0: 5, 1: -2}
    assert parse_offsets_json('{"0": 7, "1": -1}', "orders") == {0: 7, 1: -1}
    assert parse_offsets_json(None, "orders") == {} and parse_offsets_json("  ", "orders") == {}


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("{not json", "offsets JSON"),
        ("[1, 2]", "expected an object"),
        ('{"other": {"0": 1}}', "names topics ['other']"),
        ('{"0": "x"}', "not integer"),
        ('{"0": -3}', "use -2 for earliest"),
    ],
)
def test_parse_rejects_with_a_message(text: str, message: str) -> None:
    with pytest.raises(PipelineError, match=message.replace("[", r"\[").replace("]", r"\]")):
        parse_offsets_json(text, "orders")


def test_resolve_defaults_to_log_start_and_end() -> None:
    assert resolve_range(SNAP, {}, {}) == {0: (100, 500), 1: (0, 40)}


def test_resolve_sentinels_and_explicit_offsets() -> None:
    assert resolve_range(SNAP, {0: 0, 1: -1}, {0: 250, 1: -1}) == {0: (0, 250), 1: (40, 40)}
    assert resolve_range(SNAP, {0: -2}, {0: -2}) == {0: (100, 100), 1: (0, 40)}


@pytest.mark.parametrize(
    ("start", "end", "message"),
    [
        ({}, {0: 501}, "past the log end offset 500"),
        ({0: 300}, {0: 200}, "start offset 300 is after the end offset 200"),
        ({7: 0}, {}, r"has partitions \[0, 1\], not \[7\]"),
    ],
)
def test_resolve_refuses_impossible_ranges(start: dict, end: dict, message: str) -> None:
    with pytest.raises(PipelineError, match=message):
        resolve_range(SNAP, start, end)


def test_compacted_reads_the_policy_list() -> None:
    assert TopicSnapshot("t", "compact", {}, {}).compacted
    assert TopicSnapshot("t", "delete, compact", {}, {}).compacted
    assert not TopicSnapshot("t", "delete", {}, {}).compacted
