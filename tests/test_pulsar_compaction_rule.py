"""Which messages remove their key from the compacted view readCompacted consumers read (kop/pulsar/compacted.py
``record_keys``), sans-IO: Apache Pulsar 4.2's rule, beside the Kafka cleaner's.

Pulsar 4.2's compactor (AbstractTwoPhaseCompactor.extractKeyAndSize, PublishingOrderCompactor; apache/pulsar#25817)
removes a key whose latest message has an empty payload, batched or not: a batched message by its payload_size, an
unbatched one by its null_value, else its uncompressed_size, else its payload's bytes. Pulsar 4.0 counted an unbatched message's
metadata in its size, so an unbatched empty message kept its key there. The Kafka cleaner keeps Kafka's rule on the
same log: only a null value is a tombstone. The entries below are built the way a Pulsar producer's SEND is stored
(kop/pulsar/convert.py pulsar_to_kafka) or a Kafka producer's batch is written (kafka-python's batch builder).
"""

from __future__ import annotations

from kop.protocol.compaction import batch_keys
from kop.pulsar.codec import batch as pbatch
from kop.pulsar.codec.commands import pb
from kop.pulsar.compacted import record_keys
from kop.pulsar.convert import pulsar_to_kafka

T0 = 1_700_000_000_000


def _kafka_batch(records: list[tuple[bytes | None, bytes | None]]) -> bytes:
    from kafka.record.default_records import DefaultRecordBatchBuilder

    b = DefaultRecordBatchBuilder(magic=2, compression_type=0, is_transactional=False, producer_id=-1,
                                  producer_epoch=-1, base_sequence=-1, batch_size=1 << 20)
    for i, (key, value) in enumerate(records):
        b.append(i, timestamp=T0 + i, key=key, value=value, headers=[])
    return bytes(b.build())


def _unbatched(key: str, value: bytes, *, null: bool = False, with_size: bool = False) -> bytes:
    """One message as the Python (C++) client sends it unbatched: no uncompressed_size (apache/pulsar#25817:
    the non-Java clients leave it unset), unless `with_size`."""
    md = pb.MessageMetadata(producer_name="p", sequence_id=0, publish_time=T0, partition_key=key, null_value=null)
    if with_size:
        md.uncompressed_size = len(value)
    batch = pulsar_to_kafka(md, value, 0)
    assert batch is not None
    return bytes(batch)


def _batched(messages: list[tuple[str, bytes | None]]) -> bytes:
    md = pb.MessageMetadata(producer_name="p", sequence_id=0, publish_time=T0, num_messages_in_batch=len(messages))
    payload = pbatch.encode_batch(
        (pb.SingleMessageMetadata(partition_key=key, null_value=value is None), value or b"")
        for key, value in messages)
    md.uncompressed_size = len(payload)
    batch = pulsar_to_kafka(md, payload, 0)
    assert batch is not None
    return bytes(batch)


def _encrypted(uncompressed_size: int | None, null: bool = False) -> bytes:
    """An encrypted message (stored opaque: its ciphertext, never empty, as the value)."""
    md = pb.MessageMetadata(producer_name="p", sequence_id=0, publish_time=T0, partition_key="k",
                            encryption_algo="RSA", encryption_param=b"iv", null_value=null)
    md.encryption_keys.add(key="app-key", value=b"wrapped")
    if uncompressed_size is not None:
        md.uncompressed_size = uncompressed_size
    batch = pulsar_to_kafka(md, b"\x10ciphertext and tag", 0)
    assert batch is not None
    return bytes(batch)


def test_an_unbatched_empty_message_removes_its_key():
    """The 4.2 change: an unbatched empty message (no null_value, the C++ client's metadata) removes its key."""
    assert record_keys(_unbatched("k2", b"")) == [(0, b"k2", True)]
    assert record_keys(_unbatched("k2", b"", with_size=True)) == [(0, b"k2", True)]  # the Java client's metadata
    assert record_keys(_unbatched("k2", b"", null=True)) == [(0, b"k2", True)]  # null_value: a Kafka null
    assert record_keys(_unbatched("k2", b"v")) == [(0, b"k2", False)]


def test_a_batched_empty_message_removes_its_key():
    assert record_keys(_batched([("k4", b"1"), ("k4", b""), ("k5", None), ("k6", b"x")])) == [
        (0, b"k4", False), (1, b"k4", True), (2, b"k5", True), (3, b"k6", False)]


def test_kafka_records_are_judged_by_what_a_pulsar_consumer_would_get():
    """A Kafka producer's empty value reaches Pulsar consumers as an empty payload: Pulsar's compactor would remove
    its key, and so does the view; a null value (a tombstone on both sides) too; a keyless record names no key."""
    assert record_keys(_kafka_batch([(b"k2", b"")])) == [(0, b"k2", True)]
    assert record_keys(_kafka_batch([(b"k2", None)])) == [(0, b"k2", True)]
    batch = _kafka_batch([(b"k1", b"a"), (b"k2", b""), (None, b"keyless"), (b"k3", None)])
    assert record_keys(batch) == [(0, b"k1", False), (1, b"k2", True), (2, None, False), (3, b"k3", True)]


def test_the_kafka_cleaner_keeps_kafkas_rule_on_the_same_records():
    """One log, two rules: the cleaner's tombstone (kop/protocol/compaction.py) is a null value only, so the empty
    values the Pulsar view drops stay in a compacted log for Kafka consumers."""
    _, spans = batch_keys(_kafka_batch([(b"k1", b"a"), (b"k2", b""), (b"k3", None)]))
    assert [(s.key, s.is_tombstone) for s in spans] == [(b"k1", False), (b"k2", False), (b"k3", True)]
    _, spans = batch_keys(_unbatched("k2", b""))
    assert [(s.key, s.is_tombstone) for s in spans] == [(b"k2", False)]
    _, spans = batch_keys(_unbatched("k2", b"", null=True))
    assert [(s.key, s.is_tombstone) for s in spans] == [(b"k2", True)]


def test_an_encrypted_message_is_judged_by_its_uncompressed_size():
    """Pulsar never opens an encrypted payload: null_value deletes, else it reads the uncompressed_size the producer
    set (the Java client sets it: an encrypted empty message removes its key), else the ciphertext's size, which is
    never 0."""
    assert record_keys(_encrypted(0)) == [(0, b"k", True)]
    assert record_keys(_encrypted(12)) == [(0, b"k", False)]
    assert record_keys(_encrypted(None)) == [(0, b"k", False)]
    assert record_keys(_encrypted(None, null=True)) == [(0, b"k", True)]
