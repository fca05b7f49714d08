"""The index interceptor (kop/offset/interceptor.py), driven as the managed ledger drives it, no ledger.

Issue order assigns offsets (`index` = offset of the batch's last record), acknowledgements move
`durable_index`, a failed run of adds gives its offsets back, and recovery takes the larger of the stored
property and the last entry's index. Transactional and control batches are told to the producer state when
issued, and untold when their add fails.
"""

from __future__ import annotations

from kop.managed_ledger import Position
from kop.offset.entry_format import (
    NamedEntry,
    encode_entry_header,
    parse_entry,
    parse_entry_full,
    producer_and_sequence_of,
    producer_name_of,
)
from kop.offset.interceptor import INDEX_PROPERTY, IndexInterceptor
from kop.protocol.records import build_batch
from kop.storage.protobuf import encode_varint


def batch(n: int, ts: int = 1_000, *, log_append: bool = False, transactional: bool = False) -> bytes:
    return build_batch([(b"k", b"v", (), ts + i) for i in range(n)], timestamp_type=1 if log_append else 0,
                       producer_id=7 if transactional else -1, producer_epoch=0 if transactional else -1,
                       base_sequence=0 if transactional else -1, is_transactional=transactional)


def _issue(icpt: IndexInterceptor, data: object, n: int) -> tuple[bytes, bytes, tuple[int, int, int]]:
    """(entry header, the stored batch, context): the parts before_add_entry gives, the batch's joined."""
    parts, ctx = icpt.before_add_entry(data, n)
    return bytes(parts[0]), b"".join(bytes(p) for p in parts[1:]), ctx


def test_issue_assigns_offsets_and_acknowledgement_makes_them_durable() -> None:
    icpt = IndexInterceptor()
    durable: list[tuple[Position, tuple[int, int, int]]] = []
    icpt.on_durable = lambda p, c: durable.append((p, c))
    header, data, ctx1 = _issue(icpt, batch(3, ts=500), 3)
    _, second, ctx2 = _issue(icpt, batch(2, ts=600), 2)
    assert second[:8] == (3).to_bytes(8, "big") and second[8:] == batch(2, ts=600)[8:]  # stored with its base offset
    assert (icpt.index, icpt.durable_index) == (4, -1)  # issued, not acknowledged
    assert ctx1 == (-1, 2, 502) and ctx2 == (2, 4, 601)  # (index before, index, batch max timestamp)
    ts, index, start = parse_entry(header + data)
    assert index == 2 and bytes((header + data)[start:]) == batch(3, ts=500)
    icpt.after_add_entry(Position(1, 0), ctx1)
    assert icpt.durable_index == 2 and durable == [(Position(1, 0), ctx1)]
    icpt.after_add_entry(Position(1, 1), ctx2)
    assert icpt.durable_index == 4
    assert icpt.properties() == {INDEX_PROPERTY: "4"}


def test_a_named_entry_keeps_its_producer_name_in_the_entry_metadata() -> None:
    """A Pulsar SEND (NamedEntry): the name goes into MessageMetadata.producer_name, the batch is stored alone and
    offsets count as for any batch; other entries keep KoP's empty name."""
    icpt = IndexInterceptor()
    header, data, ctx = _issue(icpt, NamedEntry(batch(2), "producer-é".encode()), 2)
    assert data == batch(2) and ctx[:2] == (-1, 1)
    entry = header + data
    parsed = parse_entry_full(entry)
    assert parsed.metadata.producer_name == "producer-é" and parsed.index == 1 and parsed.metadata.entry_format == "kafka"
    assert bytes(parsed.batch) == batch(2) and parse_entry(entry)[2] == len(header)
    assert producer_name_of(entry) == "producer-é"
    header, data, _ = _issue(icpt, batch(1), 1)
    assert producer_name_of(header + data) == "" and parse_entry_full(header + data).metadata.producer_name == ""
    assert producer_name_of(b"") == ""  # nothing to read: no name


def test_log_append_time_batches_are_indexed_by_the_broker_time() -> None:
    icpt = IndexInterceptor()
    header, _, (_, _, ts) = _issue(icpt, batch(1, ts=5, log_append=True), 1)
    broker_ts, _, _ = parse_entry(header + batch(1))
    assert ts == broker_ts and ts > 1_000_000_000_000


def test_failed_adds_give_their_offsets_back() -> None:
    icpt = IndexInterceptor()
    _, ok = icpt.before_add_entry(batch(2), 2)
    _, failed = icpt.before_add_entry(batch(3), 3)
    icpt.before_add_entry(batch(1), 1)
    icpt.after_add_entry(Position(1, 0), ok)
    icpt.on_adds_failed(failed)  # this add and every later one failed
    assert (icpt.index, icpt.durable_index) == (1, 1)
    _, again = icpt.before_add_entry(batch(1), 1)
    assert again[:2] == (1, 2)  # no gap


def test_recovery_takes_the_larger_of_the_property_and_the_last_entry() -> None:
    icpt = IndexInterceptor()
    icpt.on_properties_initialize({INDEX_PROPERTY: "9"})
    assert (icpt.index, icpt.durable_index) == (9, 9)
    icpt.on_open(encode_entry_header(1, 14, 2) + batch(2))  # the last entry was written after the property
    assert (icpt.index, icpt.durable_index) == (14, 14)
    other = IndexInterceptor()
    other.on_properties_initialize({INDEX_PROPERTY: "20"})
    other.on_open(encode_entry_header(1, 14, 2) + batch(2))  # the last ledger is empty: the property wins
    assert other.index == 20
    fresh = IndexInterceptor()
    fresh.on_properties_initialize({})
    fresh.on_open(None)
    assert (fresh.index, fresh.durable_index) == (-1, -1)


def test_transactional_batches_are_told_on_issue_and_untold_when_their_add_fails() -> None:
    icpt = IndexInterceptor()
    issued: list[tuple[int, int]] = []
    unissued: list[int] = []
    icpt.on_txn_issue = lambda base, last, data: issued.append((base, last))
    icpt.on_txn_unissue = lambda base, data: unissued.append(base)
    _, plain = icpt.before_add_entry(batch(2), 2)
    _, txn1 = icpt.before_add_entry(batch(3, transactional=True), 3)
    _, txn2 = icpt.before_add_entry(batch(1, transactional=True), 1)
    assert issued == [(2, 4), (5, 5)]  # not the plain batch
    icpt.after_add_entry(Position(1, 0), plain)
    icpt.after_add_entry(Position(1, 1), txn1)  # durable: no longer undoable
    icpt.on_adds_failed(txn2)
    assert unissued == [5]


def test_a_named_entry_keeps_its_sequence_id_for_a_new_owners_replay() -> None:
    """A Pulsar SEND's highest sequence id goes into MessageMetadata.sequence_id beside the name (what
    kop/pulsar/dedup.py replays); other entries have no producer and give ("", -1)."""
    icpt = IndexInterceptor()
    header, data, _ = _issue(icpt, NamedEntry(batch(1), b"dp", encode_varint(300)), 1)
    assert producer_and_sequence_of(header + data) == ("dp", 300)
    assert parse_entry_full(header + data).metadata.sequence_id == 300
    header, data, _ = _issue(icpt, NamedEntry(batch(1), b"dp"), 1)  # no sequence id given: 0
    assert producer_and_sequence_of(header + data) == ("dp", 0)
    header, data, _ = _issue(icpt, batch(1), 1)
    assert producer_and_sequence_of(header + data) == ("", -1)
