"""The partition seam (kop/topics/partition.py) over real embedded storage: one write path for every writer.

Each writer - a Kafka producer, a Pulsar SEND, a coordinator - hands a batch to Partition; the rules, the
rewriting and the producer state apply once there, whoever asks."""

from __future__ import annotations

import pytest

from kop.config import BrokerConfig
from kop.offset import open_embedded_storage
from kop.protocol.records import NewRecord, build_batch, decode_records, iter_batches
from kop.server.service import BrokerService
from kop.topics.manager import TopicError
from kop.topics.partition import Writer
from kop.topics.write_rules import AppendRefused


@pytest.fixture
async def service(tmp_path):
    storage = await open_embedded_storage(tmp_path, fsync="none")
    svc = BrokerService(BrokerConfig.from_strings({}), storage)
    await svc.topics.load()
    yield svc
    await svc.stop()


async def _partition(svc: BrokerService, name: str, **configs: str):
    topic = await svc.topics.create(svc.topics.parse(name), 1, dict(configs))
    return await svc.topics.partition(topic, 0)


def _batch(*records: NewRecord, **kw: object) -> bytearray:
    return bytearray(build_batch(records, **kw))  # type: ignore[arg-type]


@pytest.mark.parametrize("writer", [Writer.KAFKA, Writer.PULSAR])
async def test_every_client_writer_meets_the_topics_rules(service, writer: Writer) -> None:
    seam = await _partition(service, f"compacted-{writer.value}", **{"cleanup.policy": "compact"})
    with pytest.raises(AppendRefused) as e:
        await seam.issue(_batch(NewRecord(None, b"v")), writer)
    assert e.value.error == "INVALID_RECORD"
    issued = await seam.issue(_batch(NewRecord(b"k", b"v")), writer)
    assert await issued.base_offset() == 0
    assert seam.log.high_watermark == 1


async def test_a_pulsar_entry_gets_its_position_and_the_same_rules(service) -> None:
    seam = await _partition(service, "sized", **{"max.message.bytes": "1000"})
    with pytest.raises(AppendRefused) as e:
        await seam.issue_entry(build_batch([NewRecord(None, b"x" * 20_000)]), Writer.PULSAR)
    assert e.value.error == "MESSAGE_TOO_LARGE"
    position, base = await (await seam.issue_entry(build_batch([NewRecord(None, b"small")]), Writer.PULSAR))
    assert base == 0
    assert await seam.log.offset_of(position) == 0


async def test_log_append_time_stamps_the_broker_time_on_every_writer(service) -> None:
    seam = await _partition(service, "appendtime", **{"message.timestamp.type": "LogAppendTime"})
    issued = await seam.issue(build_batch([NewRecord(None, b"v", (), 1000)]), Writer.PULSAR)
    await issued.base_offset()
    assert issued.log_append_time > 1000
    got = await seam.log.read(0, 1 << 20)
    ((hdr, _),) = list(iter_batches(got.batches[0].batch, fresh=False))
    assert hdr.timestamp_type == 1 and hdr.max_timestamp == issued.log_append_time


async def test_compression_type_recompresses_what_a_pulsar_producer_sent(service) -> None:
    seam = await _partition(service, "gzipped", **{"compression.type": "gzip"})
    fut = await seam.issue_entry(build_batch([NewRecord(None, b"v" * 500)], compression=3), Writer.PULSAR)
    await fut
    got = await seam.log.read(0, 1 << 20)
    ((hdr, _),) = list(iter_batches(got.batches[0].batch, fresh=False))
    assert hdr.compression == 1


async def test_idempotent_retries_are_answered_with_the_first_offsets(service) -> None:
    seam = await _partition(service, "idempotent")
    first = _batch(NewRecord(None, b"a"), NewRecord(None, b"b"), producer_id=7, producer_epoch=0, base_sequence=0)
    assert await (await seam.issue(bytearray(first), Writer.KAFKA)).base_offset() == 0
    retry = await seam.issue(bytearray(first), Writer.KAFKA)
    assert retry.durable is None and retry.duplicate is not None
    assert await retry.base_offset() == 0
    assert seam.log.high_watermark == 2
    gap = _batch(NewRecord(None, b"c"), producer_id=7, producer_epoch=0, base_sequence=5)
    with pytest.raises(AppendRefused) as e:
        await seam.issue(gap, Writer.KAFKA)
    assert e.value.error == "OUT_OF_ORDER_SEQUENCE_NUMBER"


async def test_a_cancelled_waiter_does_not_make_a_stored_batch_forgotten(service) -> None:
    """The produce request waiting for durability is cancelled (its connection closed) while the append
    goes on: the append is not cancelled with it, so the producer state keeps the batch and the client's
    retry is answered as a duplicate, not stored twice (a broker cut from its clients, tests/chaos)."""
    import asyncio

    seam = await _partition(service, "cancelled-waiter")
    first = _batch(NewRecord(None, b"a"), producer_id=8, producer_epoch=0, base_sequence=0)
    issued = await seam.issue(bytearray(first), Writer.KAFKA)
    waiter = asyncio.ensure_future(issued.base_offset())
    await asyncio.sleep(0)
    waiter.cancel()
    assert issued.durable is not None and await issued.durable == 0
    retry = await seam.issue(bytearray(first), Writer.KAFKA)
    assert retry.duplicate is not None and await retry.base_offset() == 0
    assert seam.log.high_watermark == 1


async def test_a_transactional_batch_needs_its_transactional_id(service) -> None:
    seam = await _partition(service, "txn")
    b = _batch(NewRecord(None, b"a"), producer_id=9, producer_epoch=0, base_sequence=0, is_transactional=True)
    with pytest.raises(AppendRefused) as e:
        await seam.issue(b, Writer.KAFKA)
    assert e.value.error == "TRANSACTIONAL_ID_AUTHORIZATION_FAILED"
    issued = await seam.issue(b, Writer.KAFKA, transactional_id="tx")
    await issued.base_offset()
    assert seam.log.last_stable_offset == 0  # the open transaction holds read_committed readers back
    assert await seam.write_txn_marker(9, 0, True, 0) == 1
    assert seam.log.last_stable_offset == 2


async def test_clients_may_not_write_internal_topics_but_coordinators_do(service) -> None:
    topic = await service.topics.create(service.topics.parse("__internal_like"), 1, {}, internal=True)
    seam = await service.topics.partition(topic, 0)
    with pytest.raises(AppendRefused) as e:
        await seam.issue(build_batch([NewRecord(b"k", b"v")]), Writer.KAFKA)
    assert e.value.error == "INVALID_TOPIC_EXCEPTION"
    assert await seam.append(build_batch([NewRecord(b"k", b"v")])) == 0


async def test_a_coordinator_batch_over_the_size_limit_is_refused(service) -> None:
    seam = await _partition(service, "coord", **{"max.message.bytes": "1000"})
    with pytest.raises(AppendRefused) as e:
        await seam.append(build_batch([NewRecord(b"k", b"x" * 2000)]))
    assert e.value.error == "MESSAGE_TOO_LARGE"


async def test_producer_tables_follow_the_open_logs(service) -> None:
    seam = await _partition(service, "tables")
    await seam.issue(_batch(NewRecord(None, b"a"), producer_id=3, producer_epoch=0, base_sequence=0), Writer.KAFKA)
    tables = service.topics.producer_tables
    table = await tables.of(seam.log)
    assert 3 in table.producers
    tables.expire(older_than_ms=1 << 62)
    assert 3 not in table.producers


class _Registered:
    """A RegisteredSchemaIds over a fixed table (the real one is kop/schemas/'s store, tested end to end in
    tests/e2e/test_schema_validation.py); `asked` records the subjects looked up."""

    def __init__(self, ids: dict[str, frozenset[int]], fail: bool = False,
                 cached: dict[str, frozenset[int]] | None = None) -> None:
        self.ids, self.fail, self.asked = ids, fail, []
        self.cached = cached  # what a cache answers (`fresh` reads `ids`): another broker registered since

    async def registered_ids(self, topic, part, fresh: bool = False) -> frozenset[int]:
        self.asked.append(f"{topic.local}-{part}" + (" (fresh)" if fresh else ""))
        if self.fail:
            raise OSError("metadata store unreachable")
        table = self.ids if fresh or self.cached is None else self.cached
        return table.get(f"{topic.local}-{part}", frozenset())


def _framed(schema_id: int) -> bytes:
    return b"\0" + schema_id.to_bytes(4, "big") + b"data"


VALIDATED = {"confluent.value.schema.validation": "true"}


async def test_schema_validation_binds_kafka_producers_only(service) -> None:
    registered = _Registered({"sv-value": frozenset({5})})
    service.topics.schema_ids = registered
    seam = await _partition(service, "sv", **VALIDATED)
    with pytest.raises(AppendRefused) as e:
        await seam.issue(_batch(NewRecord(None, _framed(5)), NewRecord(None, _framed(6))), Writer.KAFKA,
                         client_name="sv")
    assert e.value.error == "INVALID_RECORD"
    assert e.value.record_errors == [(1, "The record's value names schema id 6, which is not registered under the "
                                         "subject sv-value (confluent.value.schema.validation=true)")]
    assert await (await seam.issue(_batch(NewRecord(None, _framed(5)), NewRecord(b"k", None)),
                                   Writer.KAFKA)).base_offset() == 0
    # the refusal was decided on a fresh read; the key subject is not asked: key validation is off
    assert registered.asked == ["sv-value", "sv-value (fresh)", "sv-value"]
    # a Pulsar SEND's payload is the converter's to prefix: not checked, nothing asked
    await (await seam.issue_entry(build_batch([NewRecord(None, b"pulsar payload")]), Writer.PULSAR))
    assert len(registered.asked) == 3
    assert seam.log.high_watermark == 3


async def test_an_id_the_cache_does_not_know_yet_is_asked_again_before_a_refusal(service) -> None:
    """A schema registered through another broker a moment ago: the cached ids lack it, the store has it."""
    registered = _Registered({"fresh-value": frozenset({5, 7})}, cached={"fresh-value": frozenset({5})})
    service.topics.schema_ids = registered
    seam = await _partition(service, "fresh", **VALIDATED)
    assert await (await seam.issue(_batch(NewRecord(None, _framed(7))), Writer.KAFKA)).base_offset() == 0
    assert registered.asked == ["fresh-value", "fresh-value (fresh)"]
    with pytest.raises(AppendRefused):  # an id the store does not know either is refused
        await seam.issue(_batch(NewRecord(None, _framed(8))), Writer.KAFKA)


async def test_other_topics_never_ask_the_schema_store(service) -> None:
    registered = _Registered({})
    service.topics.schema_ids = registered
    seam = await _partition(service, "plain")
    assert await (await seam.issue(_batch(NewRecord(None, b"no prefix")), Writer.KAFKA)).base_offset() == 0
    assert registered.asked == []


async def test_schema_validation_needs_a_schema_store(service) -> None:
    topics = service.topics
    topics.schema_ids = None
    with pytest.raises(TopicError) as e:
        await topics.create(topics.parse("nostore"), 1, {"confluent.key.schema.validation": "true"})
    assert e.value.error == "INVALID_CONFIG" and "needs a schema registry" in e.value.message
    topic = await topics.create(topics.parse("nostore"), 1, {"confluent.key.schema.validation": "false"})
    with pytest.raises(TopicError):
        await topics.set_configs(topic, {"confluent.value.schema.validation": "true"})
    # a record stored with validation on (another broker's) while this one has no store: refused, not unchecked
    topics.schema_ids = _Registered({})
    await topics.set_configs(topic, VALIDATED)
    topics.schema_ids = None
    seam = await topics.partition(topic, 0)
    with pytest.raises(AppendRefused) as r:
        await seam.issue(_batch(NewRecord(None, _framed(1))), Writer.KAFKA)
    assert r.value.error == "INVALID_RECORD" and "no schema registry" in r.value.message


async def test_an_unreadable_schema_store_is_a_retriable_refusal(service) -> None:
    service.topics.schema_ids = _Registered({}, fail=True)
    seam = await _partition(service, "flaky", **VALIDATED)
    with pytest.raises(AppendRefused) as e:
        await seam.issue(_batch(NewRecord(None, _framed(1))), Writer.KAFKA)
    assert e.value.error == "KAFKA_STORAGE_ERROR" and "metadata store unreachable" in e.value.message


async def test_a_resend_after_every_batch_in_flight_failed_is_taken_in_order(service) -> None:
    """A client keeps five batches in flight. When the ledger under them stops (here: fenced, as a lost
    ack quorum stops it in cluster mode) all five fail and are forgotten; the producer stands after its
    last stored batch, so the resend of the first is taken, not refused OUT_OF_ORDER_SEQUENCE_NUMBER - a
    fatal error that ended the chaos suite's idempotent producer in the bookie-quorum fault (issue #24)."""
    import asyncio

    seam = await _partition(service, "resend-after-failures")

    def one(seq: int) -> bytearray:
        return _batch(NewRecord(None, b"%d" % seq), producer_id=9, producer_epoch=0, base_sequence=seq)

    for seq in range(3):
        assert await (await seam.issue(one(seq), Writer.KAFKA)).base_offset() == seq
    in_flight = [await seam.issue(one(seq), Writer.KAFKA) for seq in range(3, 8)]
    await service.storage.ledger_store.open_ledger(seam.log.ml.current_ledger_id, recover=True)
    failed = await asyncio.gather(*(i.base_offset() for i in in_flight), return_exceptions=True)
    assert all(isinstance(r, Exception) for r in failed), failed
    assert seam.log.high_watermark == 3
    with pytest.raises(AppendRefused) as gap:
        await seam.issue(one(4), Writer.KAFKA)
    assert gap.value.error == "OUT_OF_ORDER_SEQUENCE_NUMBER"
    assert [await (await seam.issue(one(seq), Writer.KAFKA)).base_offset() for seq in range(3, 8)] == [3, 4, 5, 6, 7]
    dup = await seam.issue(one(7), Writer.KAFKA)
    assert dup.duplicate is not None and await dup.base_offset() == 7


@pytest.mark.parametrize("turns", [0, 1, 2, 3, 4])
async def test_a_batch_sent_behind_failed_ones_is_never_stored_behind_them(service, monkeypatch, turns) -> None:
    """The disk fails the write of five in-flight batches (the managed ledger rolls over to a new ledger);
    `turns` loop turns later - before, while or after the failure reaches the producer state - the producer's
    next batch comes. It must not be stored behind the hole (the failure hook tells the producer state at once,
    ManagedLedger.add_entry_nowait): it is refused or fails, and the client's resend of the five is stored
    in order after the durable batches. Without the hook, after 2 or 3 turns the next batch was stored at
    offset 3 and the resend refused OUT_OF_ORDER_SEQUENCE_NUMBER (issue #24)."""
    import asyncio

    import kop.storage.local.ledgers as local_ledgers

    seam = await _partition(service, f"behind-failed-{turns}")

    def one(seq: int) -> bytearray:
        return _batch(NewRecord(None, b"%d" % seq), producer_id=11, producer_epoch=0, base_sequence=seq)

    for seq in range(3):
        assert await (await seam.issue(one(seq), Writer.KAFKA)).base_offset() == seq
    write = local_ledgers._pwritev_all

    def disk_error(*args: object) -> None:
        monkeypatch.setattr(local_ledgers, "_pwritev_all", write)  # the next ledger's writes work
        raise OSError(5, "Input/output error")

    monkeypatch.setattr(local_ledgers, "_pwritev_all", disk_error)
    in_flight = [await seam.issue(one(seq), Writer.KAFKA) for seq in range(3, 8)]
    for _ in range(turns):
        await asyncio.sleep(0)
    try:
        late: object = await (await seam.issue(one(8), Writer.KAFKA)).base_offset()
    except Exception as e:  # noqa: BLE001 - refused (AppendRefused) or failed with the others
        late = e
    assert not isinstance(late, int), f"stored behind the failed batches at offset {late}"
    assert all(isinstance(r, Exception)
               for r in await asyncio.gather(*(i.base_offset() for i in in_flight), return_exceptions=True))
    assert [await (await seam.issue(one(seq), Writer.KAFKA)).base_offset() for seq in range(3, 9)] == list(range(3, 9))
    stored = [int(r.value) for b in (await seam.log.read(0, 1 << 20)).batches for r in decode_records(b.batch)]
    assert stored == list(range(9))
