"""Delayed delivery, sans-IO (issue #22): the tracker (kop/pulsar/delayed.py) on a fake clock, and the
conversion keeping MessageMetadata.deliver_at_time in the stored Kafka records (kop/pulsar/convert.py)."""

from __future__ import annotations

from kop.managed_ledger import Position
from kop.protocol.records import build_batch, decode_records
from kop.pulsar import convert as cv
from kop.pulsar.codec import batch as pbatch
from kop.pulsar.codec.commands import pb
from kop.pulsar.delayed import DelayedTracker

TICK = 1000
T0 = 1_700_000_000_000


def p(entry: int) -> Position:
    return Position(7, entry)


def test_an_entry_due_within_the_tick_is_not_held():
    t = DelayedTracker(TICK)
    assert not t.add(p(0), T0 + TICK, T0)  # at the cutoff: goes at once (Pulsar's non-strict cutoff)
    assert not t.add(p(1), T0 - 5, T0)  # in the past
    assert not t.add(p(2), -1, T0)
    assert len(t) == 0
    assert t.wake_in(T0) is None


def test_held_entries_fall_due_in_time_order_one_tick_early_at_most():
    t = DelayedTracker(TICK)
    assert t.add(p(0), T0 + 5000, T0)
    assert t.add(p(1), T0 + 3000, T0)
    assert t.add(p(2), T0 + 3000, T0)
    assert len(t) == 3 and p(1) in t
    assert t.due(T0 + 1000) == []
    assert t.wake_in(T0) == 3.0  # the earliest time
    assert t.due(T0 + 2000) == [p(1), p(2)]  # 3000 <= now + tick
    assert len(t) == 1
    assert t.due(T0 + 3999) == []
    assert t.wake_in(T0 + 3999) == 1.001  # its time, not the cutoff's
    assert t.due(T0 + 4000) == [p(0)]
    assert len(t) == 0 and t.wake_in(T0 + 4000) is None


def test_an_overdue_entry_wakes_at_once():
    t = DelayedTracker(TICK)
    t.add(p(0), T0 + 3000, T0)
    assert t.wake_in(T0 + 3500) == 0.0


def test_discard_and_clear():
    t = DelayedTracker(TICK)
    t.add(p(0), T0 + 3000, T0)
    t.add(p(1), T0 + 4000, T0)
    t.discard(p(0))  # acknowledged before its time
    assert len(t) == 1 and p(0) not in t
    assert t.wake_in(T0) == 4.0
    assert t.due(T0 + 5000) == [p(1)]
    t.add(p(2), T0 + 9000, T0)
    t.add(p(2), T0 + 9000, T0)  # read again (a replayed read): held once
    assert len(t) == 1
    t.clear()
    assert len(t) == 0 and t.due(T0 + 20000) == []


def test_zero_tick_is_strict():
    t = DelayedTracker(0)
    assert t.add(p(0), T0 + 1, T0)
    assert t.due(T0) == []
    assert t.due(T0 + 1) == [p(0)]


# ---------------------------------------------------------------------------------------------- conversion


def _headers(kafka_batch: bytes) -> list[list[tuple[str, bytes | None]]]:
    return [list(r.headers) for r in decode_records(kafka_batch)]


def test_deliver_at_time_round_trips_through_the_stored_record():
    md = pb.MessageMetadata(producer_name="p", sequence_id=0, publish_time=T0, deliver_at_time=T0 + 3000)
    md.properties.add(key="a", value="b")
    stored = bytes(cv.pulsar_to_kafka(md, b"late", 0))
    assert _headers(stored) == [[("a", b"b"), (cv.DELIVER_AT_HEADER, str(T0 + 3000).encode())]]
    entry = cv.unbatched(cv.kafka_to_pulsar(stored))
    assert entry.metadata.deliver_at_time == T0 + 3000
    assert [(kv.key, kv.value) for kv in entry.metadata.properties] == [("a", "b")]  # the header is no property
    assert entry.payload == b"late"


def test_a_message_without_delay_has_no_header_and_no_field():
    md = pb.MessageMetadata(producer_name="p", sequence_id=0, publish_time=T0)
    stored = bytes(cv.pulsar_to_kafka(md, b"now", 0))
    assert _headers(stored) == [[]]
    assert not cv.kafka_to_pulsar(stored).metadata.HasField("deliver_at_time")


def test_a_delayed_batch_entry_keeps_its_time_on_every_record():
    md = pb.MessageMetadata(producer_name="p", sequence_id=0, publish_time=T0, num_messages_in_batch=2,
                            deliver_at_time=T0 + 500)
    payload = pbatch.encode_batch([(pb.SingleMessageMetadata(), b"x"), (pb.SingleMessageMetadata(), b"y")])
    stored = bytes(cv.pulsar_to_kafka(md, payload, 0))
    assert _headers(stored) == [[(cv.DELIVER_AT_HEADER, str(T0 + 500).encode())]] * 2
    entry = cv.kafka_to_pulsar(stored)
    assert entry.metadata.deliver_at_time == T0 + 500
    assert all(not smm.properties for smm, _ in pbatch.messages(entry.metadata, entry.payload))


def test_a_kafka_producers_header_delays_the_entry():
    """A Kafka record carrying the header is delayed for Pulsar consumers too (the batch's first record's counts);
    a value that is no number stays a property."""
    one = cv.unbatched(cv.kafka_to_pulsar(build_batch([(b"k", b"v", [(cv.DELIVER_AT_HEADER, b"123")], T0)])))
    assert (one.metadata.deliver_at_time, len(one.metadata.properties)) == (123, 0)
    later = cv.kafka_to_pulsar(build_batch([(b"k", b"v", [], T0), (b"k", b"w", [(cv.DELIVER_AT_HEADER, b"9")], T0)]))
    assert not later.metadata.HasField("deliver_at_time")  # only the first record is looked at
    stored = build_batch([(b"k", b"v", [(cv.DELIVER_AT_HEADER, str(T0).encode())], T0),
                          (b"k", b"w", [(cv.DELIVER_AT_HEADER, b"soon")], T0)])
    entry = cv.kafka_to_pulsar(stored)
    assert entry.metadata.deliver_at_time == T0
    props = [[(kv.key, kv.value) for kv in smm.properties] for smm, _ in pbatch.messages(entry.metadata,
                                                                                          entry.payload)]
    assert props == [[], [(cv.DELIVER_AT_HEADER, "soon")]]
