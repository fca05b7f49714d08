"""kop.pipeline.kafka_meta: Spark-style offsets JSON, how the audit resolves the range it reads, and how the
transaction scan labels markers and aborted records.

The audit hands Spark explicit offsets, so these rules decide what counts as "expected": -2/-1 resolve
against the log start/end snapshot, starting below the log start is allowed (that is how an operator asks
"what is missing since 0?"), reading past the log end or backwards is refused with a message.
"""

from __future__ import annotations

import pytest

from kop.pipeline.kafka_meta import (
    ABORTED,
    CONTROL,
    Batch,
    PipelineError,
    TopicSnapshot,
    TxnClassifier,
    batches_of,
    parse_offsets_json,
    resolve_range,
)

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


def test_read_committed_ends_at_the_last_stable_offset() -> None:
    snap = TopicSnapshot("orders", "delete", log_start={0: 0}, log_end={0: 70}, stable_end={0: 60})
    assert resolve_range(snap, {}, {}) == {0: (0, 70)}
    assert resolve_range(snap, {}, {}, read_committed=True) == {0: (0, 60)}
    assert resolve_range(snap, {}, {0: 65}) == {0: (0, 65)}
    with pytest.raises(PipelineError, match="past the last stable offset 60 .an open transaction."):
        resolve_range(snap, {}, {0: 65}, read_committed=True)


# The transaction scan's classification (sans-IO; the scan itself runs against our broker and Apache Kafka in
# tests/e2e/test_transactions_spark.py).

def data(base: int, last: int, pid: int, txn: bool = True) -> Batch:
    return Batch(base, last, pid, txn, False)


def marker(offset: int, pid: int, abort: bool) -> Batch:
    return Batch(offset, offset, pid, True, True, abort)


def test_read_committed_batches_use_the_aborted_list() -> None:
    # pid 7: committed 0..9 + marker 10, aborted 11..20 + marker 21; pid 8 (plain) 22..24; pid 7 aborted again
    # 25..29 interleaved with pid 9's committed 30..31, markers 32 (7 ABORT) and 33 (9 COMMIT).
    c = TxnClassifier(0, 34)
    c.feed_committed([data(0, 9, 7), marker(10, 7, False), data(11, 15, 7), data(16, 20, 7), marker(21, 7, True),
                      data(22, 24, 8, txn=False)], [(7, 11)])
    c.feed_committed([data(25, 29, 7), data(30, 31, 9), marker(32, 7, True), marker(33, 9, False)], [(7, 25), (7, 11)])
    assert c.ranges == [(10, 10, CONTROL), (11, 20, ABORTED), (21, 21, CONTROL), (25, 29, ABORTED),
                        (32, 33, CONTROL)]


def test_labels_are_clipped_to_the_range() -> None:
    c = TxnClassifier(13, 21)  # starts inside an aborted batch, ends before the ABORT marker
    c.feed_committed([data(11, 15, 7), data(16, 20, 7), marker(21, 7, True)], [(7, 11)])
    assert c.ranges == [(13, 20, ABORTED)]


def test_past_the_last_stable_offset_the_marker_decides() -> None:
    # pid 1 open since 40 (the LSO); pid 2 aborted 41..44 + marker 45; pid 3 committed 46 + marker 47.
    c = TxnClassifier(0, 50)
    c.feed_uncommitted([data(40, 40, 1), data(41, 44, 2), marker(45, 2, True), data(46, 46, 3),
                        marker(47, 3, False), data(48, 49, 1)])
    assert c.ranges == [(41, 44, ABORTED), (45, 45, CONTROL), (47, 47, CONTROL)]


def test_batch_headers_and_marker_types_from_a_records_blob() -> None:
    from kop.protocol.records import build_batch

    def control(base: int, kind: int) -> bytes:  # key: version 0, type (0 ABORT, 1 COMMIT)
        return build_batch([(bytes([0, 0, 0, kind]), bytes(6))], base_offset=base, producer_id=5, producer_epoch=0,
                           is_transactional=True, is_control=True)

    blob = build_batch([(b"k", b"v"), (b"k", b"w")], base_offset=3, compression=1) + control(5, 0) + control(6, 1)
    assert batches_of(blob) == [Batch(3, 4, -1, False, False), Batch(5, 5, 5, True, True, True),
                                Batch(6, 6, 5, True, True, False)]
