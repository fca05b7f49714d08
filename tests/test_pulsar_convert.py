"""kop/pulsar/convert.py: the Kafka <-> Pulsar field mapping of KoP's seed (004), both ways.

Pulsar -> Kafka: ordering key, else partition key -> key; event time, else publish time -> timestamp;
properties -> headers; null -> null; a batched message's own fields win over the entry's.
Kafka -> Pulsar: key -> ordering key and partition key; timestamp -> event time and publish time;
headers -> properties; null -> null. A Pulsar batch of N messages is N Kafka offsets.
"""

from __future__ import annotations

import base64
import random

import pytest

from kop.protocol.records import (
    build_batch,
    decode_records,
    decode_records_absolute,
    iter_batches,
    parse_batch_header,
)
from kop.pulsar import convert
from kop.pulsar.codec import batch as pbatch
from kop.pulsar.codec import commands as c
from kop.pulsar.codec import compression as pz
from kop.pulsar.convert import ConversionError, kafka_to_pulsar, key_of, pulsar_to_kafka, unbatched

T0 = 1_700_000_000_000


def _messages(entry):  # noqa: ANN001, ANN202
    return pbatch.messages(entry.metadata, entry.payload)


# ---- Kafka -> Pulsar ---------------------------------------------------------------------------------


def test_kafka_records_become_one_pulsar_batch() -> None:
    kafka = build_batch([
        (b"k1", b"v1", [("h1", b"a"), ("h2", b"b")], T0),
        (None, b"v2", [], T0 + 5),
        (b"k3", None, [("n", None)], T0 + 9),
    ], base_offset=100)
    entry = kafka_to_pulsar(kafka)
    md = entry.metadata
    assert entry.num_messages == 3 and md.num_messages_in_batch == 3 and pbatch.is_batch(md)
    assert md.publish_time == T0  # the first record's timestamp
    assert md.compression == pz.NONE
    (m1, p1), (m2, p2), (m3, p3) = _messages(entry)
    # key -> ordering key (bytes) and partition key (text)
    assert (m1.ordering_key, m1.partition_key, m1.partition_key_b64_encoded) == (b"k1", "k1", False)
    assert not m2.HasField("ordering_key") and not m2.HasField("partition_key")
    # timestamp -> event time
    assert [m.event_time for m in (m1, m2, m3)] == [T0, T0 + 5, T0 + 9]
    # headers -> properties (a null header value becomes "")
    assert [(kv.key, kv.value) for kv in m1.properties] == [("h1", "a"), ("h2", "b")]
    assert [(kv.key, kv.value) for kv in m3.properties] == [("n", "")]
    # null value -> null_value
    assert (bytes(p1), bytes(p2), bytes(p3)) == (b"v1", b"v2", b"")
    assert (m1.null_value, m3.null_value) == (False, True)
    # keys differ: no entry-level key (it would become the key of the keyless record on the way back)
    assert not md.HasField("ordering_key") and not md.HasField("partition_key")


def test_a_one_record_batch_goes_out_unbatched() -> None:
    """What the handler dispatches for one-record batches: the message's fields on the entry, no batch."""
    entry = unbatched(kafka_to_pulsar(build_batch([(b"\xffk", None, [("h", b"x")], T0 + 3)])))
    md = entry.metadata
    assert not pbatch.is_batch(md) and entry.num_messages == 1
    assert (md.ordering_key, md.partition_key_b64_encoded, md.event_time, md.null_value) == (b"\xffk", True, T0 + 3,
                                                                                               True)
    assert [(kv.key, kv.value) for kv in md.properties] == [("h", "x")]
    assert entry.payload == b""
    [rec] = decode_records_absolute(pulsar_to_kafka(md, entry.payload, 7))
    assert (rec.offset, rec.key, rec.value, rec.timestamp) == (7, b"\xffk", None, T0 + 3)
    several = kafka_to_pulsar(build_batch([(b"a", b"1", [], T0), (b"b", b"2", [], T0)]))
    assert unbatched(several) is several  # batches of more than one stay batches


def test_binary_key_is_base64_partition_key() -> None:
    entry = kafka_to_pulsar(build_batch([(b"\x00\xff", b"v", [], T0)]))
    [(m, _)] = _messages(entry)
    assert (m.ordering_key, m.partition_key, m.partition_key_b64_encoded) == (b"\x00\xff", "AP8=", True)
    assert key_of(m) == b"\x00\xff"


def test_same_key_batch_sets_the_entry_key_for_key_shared() -> None:
    entry = kafka_to_pulsar(build_batch([(b"same", b"1", [], T0), (b"same", b"2", [], T0)]))
    assert (entry.metadata.ordering_key, entry.metadata.partition_key) == (b"same", "same")


def test_log_append_time_batch_uses_its_max_timestamp() -> None:
    kafka = build_batch([(None, b"a", [], T0), (None, b"b", [], T0 + 1)], timestamp_type=1)
    entry = kafka_to_pulsar(kafka)
    assert [m.event_time for m, _ in _messages(entry)] == [T0 + 1, T0 + 1]
    assert entry.metadata.publish_time == T0 + 1


def test_negative_timestamp_means_no_event_time_and_broker_publish_time() -> None:
    entry = kafka_to_pulsar(build_batch([(None, b"a", [], -1)]), now_ms=42)
    [(m, _)] = _messages(entry)
    assert not m.HasField("event_time") and entry.metadata.publish_time == 42


@pytest.mark.parametrize("kafka_codec", [0, 1, 2, 3, 4])
@pytest.mark.parametrize("pulsar_codec", [pz.NONE, pz.LZ4, pz.ZLIB, pz.ZSTD, pz.SNAPPY])
def test_any_kafka_compression_to_any_pulsar_compression(kafka_codec: int, pulsar_codec: int) -> None:
    values = [b"value %d " % i * 30 for i in range(8)]
    entry = kafka_to_pulsar(build_batch([(None, v, [], T0) for v in values], compression=kafka_codec),
                            compression=pulsar_codec)
    assert entry.metadata.compression == pulsar_codec
    assert [bytes(p) for _, p in _messages(entry)] == values


def test_producer_sequences_and_transactions() -> None:
    kafka = build_batch([(None, b"a", []), (None, b"b", [])], producer_id=9, producer_epoch=2,
                        base_sequence=40, is_transactional=True)
    entry = kafka_to_pulsar(kafka, producer_name="kafka-producer")
    md = entry.metadata
    assert (md.producer_name, md.sequence_id) == ("kafka-producer", 40)
    assert [m.sequence_id for m, _ in _messages(entry)] == [40, 41]
    assert (md.txnid_most_bits, md.txnid_least_bits) == (9, 2)


def test_control_batch_has_no_pulsar_message() -> None:
    marker = build_batch([(b"\x00\x00\x00\x01", b"\x00\x00\x00\x00\x00\x00", [])], is_control=True,
                         is_transactional=True, producer_id=1, producer_epoch=0)
    assert kafka_to_pulsar(marker) is None


def test_corrupt_kafka_batch() -> None:
    kafka = bytearray(build_batch([(None, b"a" * 50, [], T0)], compression=1))
    kafka[70:80] = b"\xff" * 10
    with pytest.raises(ConversionError):
        kafka_to_pulsar(bytes(kafka))
    with pytest.raises(ConversionError):
        kafka_to_pulsar(b"short")


def _reference_batch(kafka: bytes) -> bytes:
    """The Pulsar batch payload of a Kafka batch built the plain way: decoded records, one protobuf
    SingleMessageMetadata each. kafka_to_pulsar writes the metadata bytes itself, for speed."""
    header = parse_batch_header(kafka)
    items = []
    for rec in decode_records(kafka):
        smm = c.pb.SingleMessageMetadata()
        if rec.key is not None:
            smm.ordering_key = rec.key
            try:
                smm.partition_key = rec.key.decode("utf-8")
            except UnicodeDecodeError:
                smm.partition_key = base64.b64encode(rec.key).decode("ascii")
                smm.partition_key_b64_encoded = True
        ts = header.max_timestamp if header.timestamp_type == 1 else header.base_timestamp + rec.timestamp_delta
        if ts > 0:
            smm.event_time = ts
        for hkey, hvalue in rec.headers:
            smm.properties.add(key=hkey, value="" if hvalue is None else hvalue.decode("utf-8", "replace"))
        if rec.value is None:
            smm.null_value = True
        if header.base_sequence >= 0:
            smm.sequence_id = header.base_sequence + rec.offset_delta
        items.append((smm, rec.value or b""))
    return pbatch.encode_batch(items)


@pytest.fixture(params=["c", "python"])
def loops(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """Both implementations of the per-message loops: kop.pulsar._native (C) and the Python reference."""
    if request.param == "python":
        monkeypatch.setattr(convert, "_native", None)
    elif convert._native is None:
        pytest.skip("kop.pulsar._native is not built (tests/test_pulsar_native.py fails for that under CI)")
    return request.param


@pytest.mark.parametrize("seed", range(4))
def test_hand_written_message_metadata_is_what_protobuf_writes(seed: int, loops: str) -> None:
    """Random batches (keys UTF-8 or binary, of 0 to 20 000 bytes so their varints take 1 to 3 bytes; headers,
    null values and null header values, timestamps small, large or none, sequences, LogAppendTime,
    compression): the payload kafka_to_pulsar writes is byte for byte the protobuf-built one."""
    rnd = random.Random(seed)

    def blob(binary: bool = False) -> bytes | None:
        if rnd.random() < 0.2:
            return None
        n = rnd.choice([0, 1, 63, 64, 100, 1000, 8191, 8192, 20000])
        return bytes(rnd.randrange(256) for _ in range(n)) if binary else ("é" * (n // 2)).encode()

    for _ in range(40):
        shared_key = blob(rnd.random() < 0.3) if rnd.random() < 0.3 else False
        records = [
            (blob(rnd.random() < 0.3) if shared_key is False else shared_key, blob(),
             [(rnd.choice(["h", "é" * 70]), blob(rnd.random() < 0.2)) for _ in range(rnd.choice([0, 0, 1, 3]))],
             rnd.choice([None, T0 + rnd.randrange(10**6), 5, 0]))
            for _ in range(rnd.choice([1, 2, 10, 130]))
        ]
        kwargs: dict = {"compression": rnd.choice([0, 1, 2, 3, 4])}
        if rnd.random() < 0.4:
            kwargs.update(base_sequence=rnd.randrange(10**6), producer_id=3, producer_epoch=0)
        if rnd.random() < 0.2:
            kwargs["timestamp_type"] = 1
        kafka = build_batch(records, **kwargs)
        entry = kafka_to_pulsar(kafka)
        assert entry.payload == _reference_batch(kafka)
        assert entry.num_messages == len(records) == entry.metadata.num_messages_in_batch


# ---- Pulsar -> Kafka ---------------------------------------------------------------------------------


def _entry_md(**fields: object) -> c.MessageMetadata:
    return c.MessageMetadata(producer_name="p", sequence_id=0, publish_time=T0, **fields)


def _single(md: c.MessageMetadata, payload: bytes = b"v", base: int = 0) -> object:
    [rec] = decode_records_absolute(pulsar_to_kafka(md, payload, base))
    return rec


def test_unbatched_message_fields() -> None:
    md = _entry_md(ordering_key=b"ok", partition_key="pk", event_time=T0 - 10)
    md.properties.add(key="a", value="1")
    rec = _single(md, b"payload", base=7)
    assert (rec.offset, rec.key, rec.timestamp, rec.value, rec.headers) == (
        7, b"pk", T0 - 10, b"payload", [("a", b"1"), (convert.ORDERING_KEY_HEADER, b"ok")])


@pytest.mark.parametrize("fields, key, ordering", [
    ({"ordering_key": b"ok", "partition_key": "pk"}, b"pk", b"ok"),  # partition key first, the other in a header
    ({"ordering_key": b"same", "partition_key": "same"}, b"same", None),  # the same: no header
    ({"partition_key": "pk"}, b"pk", None),
    ({"ordering_key": b"ok"}, b"ok", None),  # else the ordering key
    ({"partition_key": "AP8=", "partition_key_b64_encoded": True}, b"\x00\xff", None),  # base64-decoded if flagged
    ({"partition_key": "AP8=", "partition_key_b64_encoded": True, "ordering_key": b"\x00\xff"}, b"\x00\xff", None),
    ({"partition_key": "AP8=", "partition_key_b64_encoded": True, "ordering_key": b"AP8="}, b"\x00\xff", b"AP8="),
    ({}, None, None),
])
def test_key_is_partition_key_else_ordering_key(fields: dict, key: bytes | None, ordering: bytes | None) -> None:
    rec = _single(_entry_md(**fields))
    assert rec.key == key
    assert rec.headers == ([] if ordering is None else [(convert.ORDERING_KEY_HEADER, ordering)])
    md, payload = _batch_md([(fields, b"v")])  # the batch loops (C, else Python) say the same
    [rec] = decode_records_absolute(pulsar_to_kafka(md, payload, 0))
    assert (rec.key, rec.headers) == (key, [] if ordering is None else [(convert.ORDERING_KEY_HEADER, ordering)])


def test_ordering_key_header_becomes_the_ordering_key() -> None:
    """A record's ORDERING_KEY_HEADER is its Pulsar ordering key (a null value: none), never a property; its key
    stays the partition key. Any record may carry it: a Kafka producer's too."""
    h = convert.ORDERING_KEY_HEADER
    entry = kafka_to_pulsar(build_batch([
        (b"pk", b"1", [("a", b"x"), (h, b"ok")], T0),
        (None, b"2", [(h, b"\xff\x00")], T0),  # an ordering key without a partition key, binary
        (b"only-pk", b"3", [(h, None)], T0),  # a partition key without an ordering key
        (b"\xff", b"4", [(h, b"o")], T0),  # a binary partition key (base64) and an ordering key
    ]))
    (m1, _), (m2, _), (m3, _), (m4, _) = _messages(entry)
    assert (m1.partition_key, m1.ordering_key, [(kv.key, kv.value) for kv in m1.properties]) == ("pk", b"ok",
                                                                                                [("a", "x")])
    assert (m2.HasField("partition_key"), m2.ordering_key, len(m2.properties)) == (False, b"\xff\x00", 0)
    assert (m3.partition_key, m3.HasField("ordering_key"), len(m3.properties)) == ("only-pk", False, 0)
    assert (m4.partition_key, m4.partition_key_b64_encoded, m4.ordering_key) == ("/w==", True, b"o")
    assert not entry.metadata.HasField("ordering_key")  # the records' ordering keys differ
    same = kafka_to_pulsar(build_batch([(b"a", b"1", [(h, b"o")], T0), (b"b", b"2", [(h, b"o")], T0)]))
    assert same.metadata.ordering_key == b"o"  # what Key_Shared hashes: the ordering keys, all "o"


def test_partition_and_ordering_keys_round_trip() -> None:
    """Pulsar -> stored Kafka batch -> Pulsar keeps each message's partition key and ordering key apart."""
    items = [({"partition_key": "pk", "ordering_key": b"ok"}, b"1"), ({"partition_key": "same", "ordering_key": b"same"}, b"2"),
             ({"ordering_key": b"\x00ok"}, b"3"), ({"partition_key": "AP8=", "partition_key_b64_encoded": True,
                                                     "ordering_key": b"o"}, b"4")]
    md, payload = _batch_md(items)
    entry = kafka_to_pulsar(pulsar_to_kafka(md, payload, 0))
    got = [(m.partition_key if m.HasField("partition_key") else None, m.partition_key_b64_encoded, m.ordering_key)
           for m, _ in _messages(entry)]
    assert got == [("pk", False, b"ok"), ("same", False, b"same"), ("\x00ok", False, b"\x00ok"), ("AP8=", True, b"o")]
    assert all(not m.properties for m, _ in _messages(entry))


def test_timestamp_is_event_time_else_publish_time() -> None:
    assert _single(_entry_md(event_time=123)).timestamp == 123
    assert _single(_entry_md()).timestamp == T0


def test_null_value() -> None:
    assert _single(_entry_md(null_value=True), b"").value is None
    assert _single(_entry_md(), b"").value == b""  # empty is not null


def _batch_md(items: list, **entry_fields: object) -> tuple[c.MessageMetadata, bytes]:
    md = _entry_md(num_messages_in_batch=len(items), **entry_fields)
    return md, pbatch.encode_batch([(c.SingleMessageMetadata(payload_size=0, **f), p) for f, p in items])


def test_batch_of_n_messages_is_n_offsets() -> None:
    md, payload = _batch_md([({}, b"m%d" % i) for i in range(5)])
    kafka = pulsar_to_kafka(md, payload, 1000)
    [(header, _)] = list(iter_batches(kafka))  # a valid batch: framing and CRC check out
    assert (header.base_offset, header.records_count, header.last_offset_delta) == (1000, 5, 4)
    assert [r.offset for r in decode_records_absolute(kafka)] == [1000, 1001, 1002, 1003, 1004]


def test_a_batched_message_has_only_its_own_fields() -> None:
    """Clients copy the first message's metadata onto a batch entry (here: ordering key, event time and
    properties of some earlier message); a message of the batch keeps only what its SingleMessageMetadata says,
    and takes the entry's publish time when it has no event time."""
    md, payload = _batch_md([
        ({"ordering_key": b"own", "event_time": 5, "properties": [c.KeyValue(key="a", value="own")]}, b"1"),
        ({"partition_key": "own-pk"}, b"2"),
        ({}, b"3"),  # nothing of its own: no key, no headers, the publish time
        ({"null_partition_key": True}, b"4"),  # explicitly no key
        ({"null_value": True}, b""),
    ], ordering_key=b"entry-ok", event_time=9, properties=[c.KeyValue(key="a", value="entry"),
                                                          c.KeyValue(key="b", value="entry")])
    recs = decode_records_absolute(pulsar_to_kafka(md, payload, 0))
    assert [r.key for r in recs] == [b"own", b"own-pk", None, None, None]
    assert [r.timestamp for r in recs] == [5] + [md.publish_time] * 4
    assert recs[0].headers == [("a", b"own")]
    assert [r.headers for r in recs[1:]] == [[]] * 4
    assert [r.value for r in recs] == [b"1", b"2", b"3", b"4", None]


def test_batch_without_event_times_uses_publish_time() -> None:
    md, payload = _batch_md([({}, b"a"), ({"event_time": 77}, b"b")])
    assert [r.timestamp for r in decode_records_absolute(pulsar_to_kafka(md, payload, 0))] == [T0, 77]


def test_compacted_out_messages_keep_their_offsets_as_gaps() -> None:
    md, payload = _batch_md([({}, b"a"), ({"compacted_out": True}, b"b"), ({}, b"c")])
    kafka = pulsar_to_kafka(md, payload, 10)
    assert parse_batch_header(kafka).last_offset_delta == 2
    assert [(r.offset, r.value) for r in decode_records_absolute(kafka)] == [(10, b"a"), (12, b"c")]
    md, payload = _batch_md([({"compacted_out": True}, b"a")])
    assert pulsar_to_kafka(md, payload, 0) is None


@pytest.mark.parametrize("pulsar_codec", [pz.NONE, pz.LZ4, pz.ZLIB, pz.ZSTD, pz.SNAPPY])
@pytest.mark.parametrize("kafka_codec", [0, 1, 2, 3, 4])
def test_compressed_entry_to_compressed_kafka_batch(pulsar_codec: int, kafka_codec: int) -> None:
    md, raw = _batch_md([({}, b"x%d" % i * 40) for i in range(6)])
    payload = pbatch.compressed(pulsar_codec, raw, md)
    kafka = pulsar_to_kafka(md, payload, 0, compression=kafka_codec)
    assert parse_batch_header(kafka).compression == kafka_codec
    assert [r.value for r in decode_records_absolute(kafka)] == [b"x%d" % i * 40 for i in range(6)]


def test_broken_entry_is_a_conversion_error() -> None:
    md, payload = _batch_md([({}, b"a")])
    md.num_messages_in_batch = 2
    with pytest.raises(ConversionError):
        pulsar_to_kafka(md, payload, 0)
    md = _entry_md(compression=pz.ZSTD, uncompressed_size=10)
    with pytest.raises(ConversionError):
        pulsar_to_kafka(md, b"not zstd", 0)


# ---- both ways -----------------------------------------------------------------------------------------


def test_kafka_round_trip_keeps_every_mapped_field() -> None:
    records = [
        (b"k", b"v", [("h", b"1"), ("h", b"2")], T0),
        (None, None, [], T0 + 1),
        (b"\x00\xffraw", b"", [("x", b"")], T0 + 2),
    ]
    entry = kafka_to_pulsar(build_batch(records, base_offset=5), compression=pz.LZ4)
    back = decode_records_absolute(pulsar_to_kafka(entry.metadata, entry.payload, 5))
    assert [(r.offset, r.key, r.value, r.headers, r.timestamp) for r in back] == [
        (5 + i, k, v, list(h), ts) for i, (k, v, h, ts) in enumerate(records)]


def _random_pulsar_batch(rnd: random.Random, count: int) -> tuple[c.MessageMetadata, bytes]:
    def text(n: int) -> str:
        return "".join(rnd.choice("abé€") for _ in range(n))

    items = []
    for _ in range(count):
        smm = c.pb.SingleMessageMetadata()
        if rnd.random() < 0.3:
            smm.ordering_key = bytes(rnd.randrange(256) for _ in range(rnd.choice([0, 3, 200])))
        if rnd.random() < 0.4:
            smm.partition_key = rnd.choice([text(rnd.choice([0, 5, 300])), "/wBr", "not base64!"])
            smm.partition_key_b64_encoded = rnd.random() < 0.3
        if rnd.random() < 0.1:
            smm.null_partition_key = True
        if rnd.random() < 0.5:
            smm.event_time = rnd.choice([1, T0 + rnd.randrange(10**6), 2**40])
        if rnd.random() < 0.5:
            smm.sequence_id = rnd.randrange(10**9)
        for _ in range(rnd.choice([0, 0, 1, 3])):
            smm.properties.add(key=text(rnd.choice([0, 2, 150])), value=text(rnd.choice([0, 4, 200])))
        smm.null_value = rnd.random() < 0.1
        smm.compacted_out = rnd.random() < 0.1
        items.append((smm, b"" if smm.null_value else rnd.randbytes(rnd.choice([0, 10, 100, 9000]))))
    md = _entry_md(num_messages_in_batch=count)
    return md, pbatch.encode_batch(items)


@pytest.mark.parametrize("seed", range(4))
def test_pulsar_batch_fast_path_writes_what_the_general_path_writes(seed: int, loops: str) -> None:
    """pulsar_to_kafka reads batches field by field (_batch_to_records); the general path goes through protobuf
    objects (_messages_to_records). Random batches - keys of every kind, base64 partition keys valid or not,
    properties, event times, null values, compacted-out messages - give the same records both ways, and a
    damaged batch is either declined by the fast path (the general one then decides) or read the same."""
    rnd = random.Random(seed)
    for _ in range(60):
        md, payload = _random_pulsar_batch(rnd, rnd.choice([1, 2, 5, 70]))
        fast = convert._batch_to_records(payload, md.num_messages_in_batch, md.publish_time)
        assert fast is not None and fast == convert._messages_to_records(md, pbatch.messages(md, payload))
    declined = 0
    for _ in range(150):
        md, payload = _random_pulsar_batch(rnd, rnd.choice([1, 3]))
        damaged = bytearray(payload)
        damaged[rnd.randrange(len(damaged))] = rnd.randrange(256)
        fast = convert._batch_to_records(bytes(damaged), md.num_messages_in_batch, md.publish_time)
        if fast is None:
            declined += 1
            continue
        assert fast == convert._messages_to_records(md, pbatch.messages(md, bytes(damaged)))
    assert declined  # some damage is always caught (sizes that no longer add up)


# ---- Confluent's 5-byte prefix (issue #25) ------------------------------------------------------------


def _prefixed(schema_id: int, payload: bytes) -> bytes:
    return b"\x00" + schema_id.to_bytes(4, "big") + payload


def test_known_prefixes_are_removed_and_the_entry_names_the_version(loops: str) -> None:
    kafka = build_batch([
        (b"k", _prefixed(7, b"avro-1"), [], T0),
        (None, None, [], T0 + 1),  # null stays null
        (None, b"\x00\x00\x00", [], T0 + 2),  # shorter than a prefix: as stored
        (None, b"\x01" + b"\x00\x00\x00\x07rest", [], T0 + 3),  # no magic byte: as stored
        (None, _prefixed(7, b""), [], T0 + 4),  # an empty payload behind a prefix
        (None, _prefixed(9, b"other"), [], T0 + 5),  # an id this topic's map lacks: as stored, reported
    ])
    entry = kafka_to_pulsar(kafka, schema_ids={7: 2})
    assert entry.metadata.schema_version == (2).to_bytes(8, "big")
    values = [bytes(p) for _, p in _messages(entry)]
    assert values == [b"avro-1", b"", b"\x00\x00\x00", b"\x01\x00\x00\x00\x07rest", b"",
                      _prefixed(9, b"other")]
    assert [m.payload_size for m, _ in _messages(entry)] == [len(v) for v in values]
    assert entry.unknown_ids == (9,)


def test_without_a_map_nothing_is_read(loops: str) -> None:
    kafka = build_batch([(None, _prefixed(7, b"x"), [], T0)] * 2)
    entry = kafka_to_pulsar(kafka)
    assert [bytes(p) for _, p in _messages(entry)] == [_prefixed(7, b"x")] * 2
    assert not entry.metadata.HasField("schema_version") and entry.unknown_ids == ()


def test_a_batch_mixing_ids_names_the_first_records_version(loops: str) -> None:
    kafka = build_batch([(None, _prefixed(11, b"a"), [], T0), (None, _prefixed(7, b"b"), [], T0),
                         (None, _prefixed(11, b"c"), [], T0)])
    entry = kafka_to_pulsar(kafka, schema_ids={7: 0, 11: 1})
    assert entry.metadata.schema_version == (1).to_bytes(8, "big")
    assert [bytes(p) for _, p in _messages(entry)] == [b"a", b"b", b"c"]


def test_unknown_ids_are_distinct_bounded_and_plausible(loops: str) -> None:
    ids = [3, 3, 0, 0x80000000, 0xFFFFFFFF] + list(range(100, 140))
    kafka = build_batch([(None, _prefixed(i, b"p"), [], T0) for i in ids])
    entry = kafka_to_pulsar(kafka, schema_ids={})
    # 0 and ids past int32 are no Confluent ids; the list stops at MAX_UNKNOWN_IDS
    assert entry.unknown_ids == (3, *range(100, 100 + convert.MAX_UNKNOWN_IDS - 1))
    assert not entry.metadata.HasField("schema_version")


def test_a_one_record_batch_keeps_its_version_unbatched(loops: str) -> None:
    entry = unbatched(kafka_to_pulsar(build_batch([(b"k", _prefixed(5, b"rec"), [], T0)]), schema_ids={5: 0}))
    assert not pbatch.is_batch(entry.metadata)
    assert entry.payload == b"rec" and entry.metadata.schema_version == bytes(8)


def test_a_compressed_batch_is_stripped_too(loops: str) -> None:
    kafka = build_batch([(None, _prefixed(4, b"z" * 100), [], T0)] * 3, compression=1)
    entry = kafka_to_pulsar(kafka, compression=pz.LZ4, schema_ids={4: 3})
    assert [bytes(p) for _, p in _messages(entry)] == [b"z" * 100] * 3


def test_a_pulsar_senders_values_get_the_prefix(loops: str) -> None:
    md, payload = _batch_md([({}, b"m0"), ({"null_value": True}, b""), ({}, b"")])
    records = decode_records_absolute(pulsar_to_kafka(md, payload, 0, schema_id=0x01020304))
    assert [r.value for r in records] == [b"\x00\x01\x02\x03\x04m0", None, b"\x00\x01\x02\x03\x04"]
    # a non-batched message (the general path)
    assert _single_prefixed(_entry_md(), b"one", 42) == b"\x00\x00\x00\x00\x2aone"
    assert decode_records_absolute(pulsar_to_kafka(_entry_md(null_value=True), b"", 0, schema_id=42))[0].value \
        is None


def _single_prefixed(md: c.MessageMetadata, payload: bytes, schema_id: int) -> bytes | None:
    [rec] = decode_records_absolute(pulsar_to_kafka(md, payload, 0, schema_id=schema_id))
    return rec.value


def test_the_prefix_goes_there_and_back(loops: str) -> None:
    """A Pulsar producer's batch stored with its id's prefix and dispatched with the topic's map: the payloads
    and the version come back."""
    rnd = random.Random(5)
    md, payload = _random_pulsar_batch(rnd, 30)
    kafka = pulsar_to_kafka(md, payload, 0, schema_id=77)
    entry = kafka_to_pulsar(kafka, schema_ids={77: 4})
    sent = [(m.null_value, bytes(p)) for m, p in pbatch.messages(md, payload) if not m.compacted_out]
    back = [(m.null_value, bytes(p)) for m, p in _messages(entry)]
    assert back == sent
    assert entry.metadata.schema_version == (4).to_bytes(8, "big") or all(null for null, _ in sent)
