"""Produce with transactional batches and the KIP-890 part 1 hook (`services.transactions.verify_partition`):
asked for the first batch of each transaction on a partition only, its answer mapped to Produce's version.
An in-process broker with a verifier that answers from a table (the real one is the transaction
coordinator's, kop/coordinator/transactions)."""

from __future__ import annotations

import asyncio
from pathlib import Path

from kop.config import BrokerConfig
from kop.kafka.handler import KafkaProtocolHandler
from kop.protocol.errors import ErrorCode
from kop.server.service import BrokerService
from kop.server.storage import open_embedded_storage
from tests.support.txn_wire import RawClient, txn_batch


class TableVerifier:
    """Answers from `answers` (default NONE) and records every question."""

    def __init__(self) -> None:
        self.asked: list[tuple[str, int, int, str, int]] = []
        self.answers: dict[tuple[int, int], ErrorCode] = {}

    async def verify_partition(self, transactional_id: str, producer_id: int, producer_epoch: int, topic: str,
                               partition: int) -> ErrorCode:
        self.asked.append((transactional_id, producer_id, producer_epoch, topic, partition))
        return self.answers.get((producer_id, producer_epoch), ErrorCode.NONE)


async def test_first_batch_of_each_transaction_is_verified(tmp_path: Path) -> None:
    config = BrokerConfig.load(overrides={"kafkaListeners": "PLAINTEXT://127.0.0.1:0", "webServicePort": "-1",
                                          "defaultNumPartitions": "1"})
    service = BrokerService(config, await open_embedded_storage(tmp_path, config))
    kafka = KafkaProtocolHandler()
    kafka.initialize(config)
    await service.start([kafka])
    verifier = TableVerifier()
    service.transactions = verifier
    raw = await asyncio.to_thread(RawClient, f"127.0.0.1:{kafka.bound_port('PLAINTEXT')}")

    async def call(fn, *args, **kw):  # the blocking raw client in a thread: the broker runs on this loop
        return await asyncio.to_thread(fn, *args, **kw)

    try:
        await service.topics.create(service.topics.parse("vt"), 1)
        pid, epoch = await call(raw.init_producer_id)
        r = await call(raw.produce, "vt", 0, txn_batch(pid, epoch, 0, [b"a"]), "tx-1")
        assert r.error_code == 0
        assert verifier.asked == [("tx-1", pid, epoch, "vt", 0)]
        r = await call(raw.produce, "vt", 0, txn_batch(pid, epoch, 1, [b"b"]), "tx-1")
        assert r.error_code == 0 and len(verifier.asked) == 1  # the transaction is known here now
        assert await call(raw.marker, "vt", [0], pid, epoch, True) == [0]
        # the next transaction starts with a verification again; the coordinator says "not in it"
        verifier.answers[(pid, epoch)] = ErrorCode.TRANSACTION_ABORTABLE
        r = await call(raw.produce, "vt", 0, txn_batch(pid, epoch, 2, [b"c"]), "tx-1", 9)
        assert r.error_code == ErrorCode.INVALID_TXN_STATE  # TRANSACTION_ABORTABLE is Produce v11+ only
        r = await call(raw.produce, "vt", 0, txn_batch(pid, epoch, 2, [b"c"]), "tx-1", 11)
        assert r.error_code == ErrorCode.TRANSACTION_ABORTABLE
        assert len(verifier.asked) == 3
        verifier.answers[(pid, epoch)] = ErrorCode.PRODUCER_FENCED
        r = await call(raw.produce, "vt", 0, txn_batch(pid, epoch, 2, [b"c"]), "tx-1", 11)
        assert r.error_code == ErrorCode.PRODUCER_FENCED
        verifier.answers[(pid, epoch)] = ErrorCode.COORDINATOR_LOAD_IN_PROGRESS
        r = await call(raw.produce, "vt", 0, txn_batch(pid, epoch, 2, [b"c"]), "tx-1", 11)
        assert r.error_code == ErrorCode.NOT_ENOUGH_REPLICAS  # retriable for the producer, as Kafka maps it
        hw = (await call(raw.fetch, "vt", 0, 0, False)).high_watermark
        assert hw == 3  # a, b, the marker: nothing refused was appended
        del verifier.answers[(pid, epoch)]
        r = await call(raw.produce, "vt", 0, txn_batch(pid, epoch, 2, [b"c"]), "tx-1", 11)
        assert r.error_code == 0 and r.base_offset == 3
    finally:
        raw.close()
        await service.stop()
