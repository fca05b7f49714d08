"""The transaction coordinator's shell (kop/coordinator/transactions/coordinator.py) in an in-process broker
on real embedded storage: what it writes to __transaction_state and to the partitions, and what a restart
loads back (PrepareCommit re-drives its markers; transactional offsets stay pending until their marker,
then are committed, also when the marker is replayed at load)."""

from __future__ import annotations

import asyncio
from pathlib import Path

from kop.config import BrokerConfig
from kop.coordinator.transactions import records as trec
from kop.coordinator.transactions.state import TxnState
from kop.kafka.handler import KafkaProtocolHandler
from kop.protocol.records import control_record_type, decode_records, parse_batch_header
from kop.server.service import BrokerService
from kop.server.storage import open_embedded_storage
from kop.topics.names import OFFSETS_TOPIC
from tests.support.midway import HeldWrite

TOPIC = "t"
TID = "tx-shell"
GROUP = "g-shell"


async def start(path: Path) -> BrokerService:
    cfg = BrokerConfig.from_strings({
        "kafkaListeners": "PLAINTEXT://127.0.0.1:0", "webServicePort": "-1", "localStoreFsyncPolicy": "none",
        "logCleanerEnabled": "false", "offsetsTopicNumPartitions": "3", "transactionStateLogNumPartitions": "3",
        "messagingProtocols": "kafka",
    })
    storage = await open_embedded_storage(path, cfg)
    svc = BrokerService(cfg, storage)
    handler = KafkaProtocolHandler()
    handler.initialize(cfg)
    await svc.start([handler])
    await svc.coordinator.wait_loaded()
    await svc.transactions.wait_loaded()
    if svc.topics.get(svc.topics.parse(TOPIC)) is None:
        await svc.topics.create(svc.topics.parse(TOPIC), 2, {})
    return svc


async def batches(svc: BrokerService, topic_name: str, partition: int) -> list[tuple[object, list]]:
    topic = svc.topics.get(svc.topics.parse(topic_name))
    assert topic is not None
    plog = await svc.topics.partition_log(topic, partition)
    out, offset = [], plog.log_start_offset
    while offset < plog.high_watermark:
        res = await plog.read(offset, 1 << 20)
        for fb in res.batches:
            out.append((parse_batch_header(fb.batch), decode_records(fb.batch)))
        offset = res.next_offset
    return out


async def until(cond, what: str) -> None:
    for _ in range(500):
        if cond():
            return
        await asyncio.sleep(0.01)
    raise AssertionError(f"never: {what}")


def test_commit_writes_markers_and_the_state_log(tmp_path: Path) -> None:
    async def run() -> None:
        svc = await start(tmp_path)
        txns = svc.transactions
        try:
            r = await txns.init_producer_id(TID, 60000, -1, -1)
            assert r.error == 0
            assert await txns.add_partitions(TID, r.producer_id, r.producer_epoch, [(TOPIC, 0), (TOPIC, 1)]) == 0
            assert (await txns.end_txn(TID, r.producer_id, r.producer_epoch, True))[0] == 0
            await until(lambda: txns.machine.txns[TID].state == TxnState.COMPLETE_COMMIT, "CompleteCommit")
            for p in (0, 1):
                (hdr, recs), = await batches(svc, TOPIC, p)
                assert hdr.is_control and hdr.is_transactional and hdr.producer_id == r.producer_id
                assert control_record_type(recs[0].key) == 1  # COMMIT
            states = []
            for _hdr, recs in await batches(svc, "__transaction_state", txns.partition_of(TID)):
                for rec in recs:
                    assert trec.decode_key(rec.key) == TID
                    states.append(trec.decode_value(rec.value).status)
            assert states == [0, 1, 2, 4]
        finally:
            await svc.stop()

    asyncio.run(run())


def test_a_prepared_commit_is_completed_after_a_restart(tmp_path: Path) -> None:
    async def run() -> None:
        svc = await start(tmp_path)
        try:
            # the state a crash between PrepareCommit and the markers leaves behind
            value = trec.TransactionLogValue(42, 3, 60000, int(TxnState.PREPARE_COMMIT), {TOPIC: [1]}, 1000, 900)
            await svc.transactions._append(TID, trec.encode_value(value))
        finally:
            await svc.stop()
        svc = await start(tmp_path)
        try:
            await until(lambda: svc.transactions.machine.txns[TID].state == TxnState.COMPLETE_COMMIT, "re-driven")
            (hdr, recs), = await batches(svc, TOPIC, 1)
            assert hdr.is_control and (hdr.producer_id, hdr.producer_epoch) == (42, 3)
        finally:
            await svc.stop()

    asyncio.run(run())


def test_transactional_offsets_pending_then_committed_across_restarts(tmp_path: Path) -> None:
    async def run() -> None:
        svc = await start(tmp_path)
        try:
            txns, groups = svc.transactions, svc.coordinator
            r = await txns.init_producer_id(TID, 60000, -1, -1)
            pid, epoch = r.producer_id, r.producer_epoch
            assert await txns.add_offsets(TID, pid, epoch, GROUP) == 0
            res = await groups.txn_commit_offsets(GROUP, pid, epoch, -1, "", None, [(TOPIC, 0, 17, -1, "m")])
            assert res == {(TOPIC, 0): 0}
            assert groups.has_pending_offset(GROUP, TOPIC, 0)
            assert groups.fetch_offsets(GROUP, [(TOPIC, [0])])[1][0][2] == -1
        finally:
            await svc.stop()
        svc = await start(tmp_path)  # pending offsets and the Ongoing transaction come back
        try:
            txns, groups = svc.transactions, svc.coordinator
            assert groups.has_pending_offset(GROUP, TOPIC, 0)
            assert txns.machine.txns[TID].partitions == {(OFFSETS_TOPIC, groups.partition_of(GROUP))}
            assert (await txns.end_txn(TID, pid, epoch, True))[0] == 0
            await until(lambda: not groups.has_pending_offset(GROUP, TOPIC, 0), "the commit marker")
            assert groups.fetch_offsets(GROUP, [(TOPIC, [0])])[1][0][2:5] == (17, -1, "m")
        finally:
            await svc.stop()
        svc = await start(tmp_path)  # the marker is replayed at load
        try:
            assert not svc.coordinator.has_pending_offset(GROUP, TOPIC, 0)
            assert svc.coordinator.fetch_offsets(GROUP, [(TOPIC, [0])])[1][0][2] == 17
        finally:
            await svc.stop()

    asyncio.run(run())


def test_a_plain_commit_written_after_the_transactional_one_wins(tmp_path: Path) -> None:
    """Kafka's rule: at the COMMIT marker a pending offset replaces the committed one only if its record is
    newer; a plain OffsetCommit written while the transaction was open stays (also after a restart)."""
    async def run() -> None:
        svc = await start(tmp_path)
        try:
            txns, groups = svc.transactions, svc.coordinator
            for n, (plain_first, want) in enumerate(((False, 20), (True, 17))):
                tid, group = f"{TID}-{n}", f"{GROUP}-{n}"
                r = await txns.init_producer_id(tid, 60000, -1, -1)
                assert await txns.add_offsets(tid, r.producer_id, r.producer_epoch, group) == 0

                async def plain(group: str = group) -> None:
                    res = await groups.commit_offsets(group, -1, "", None, -1, 8, [(TOPIC, 0, 20, -1, "")])
                    assert res == {(TOPIC, 0): 0}

                if plain_first:
                    await plain()
                res = await groups.txn_commit_offsets(group, r.producer_id, r.producer_epoch, -1, "", None,
                                                      [(TOPIC, 0, 17, -1, "")])
                assert res == {(TOPIC, 0): 0}
                if not plain_first:
                    await plain()
                assert (await txns.end_txn(tid, r.producer_id, r.producer_epoch, True))[0] == 0
                await until(lambda g=group: not groups.has_pending_offset(g, TOPIC, 0), "the commit marker")
                assert groups.fetch_offsets(group, [(TOPIC, [0])])[1][0][2] == want
        finally:
            await svc.stop()
        svc = await start(tmp_path)
        try:
            assert svc.coordinator.fetch_offsets(f"{GROUP}-0", [(TOPIC, [0])])[1][0][2] == 20
            assert svc.coordinator.fetch_offsets(f"{GROUP}-1", [(TOPIC, [0])])[1][0][2] == 17
        finally:
            await svc.stop()

    asyncio.run(run())


def test_a_request_cancelled_while_its_state_is_written_still_completes(tmp_path: Path) -> None:
    """A client's connection closing cancels its requests' tasks. InitProducerId, AddPartitionsToTxn and EndTxn
    cancelled while their transit is being written still apply it (and EndTxn still writes its markers): the
    transaction is never left "being written", which would answer CONCURRENT_TRANSACTIONS to every later
    request for the id (the fault suite met it after cutting a coordinator off from its clients)."""
    async def run() -> None:
        svc = await start(tmp_path)
        txns = svc.transactions
        held = HeldWrite(txns.runtime.write)
        cancelled_midway = held.cancel_midway

        try:
            txns.runtime.write = held  # type: ignore[method-assign]
            await cancelled_midway(txns.init_producer_id(TID, 60000, -1, -1))
            await until(lambda: TID in txns.machine.txns and txns.machine.txns[TID].pending is None, "init applied")
            r = await txns.init_producer_id(TID, 60000, -1, -1)  # a retry of the client: answered, not busy
            assert r.error == 0
            await cancelled_midway(txns.add_partitions(TID, r.producer_id, r.producer_epoch, [(TOPIC, 0)]))
            await until(lambda: txns.machine.txns[TID].pending is None, "add applied")
            assert txns.machine.txns[TID].state == TxnState.ONGOING
            assert txns.machine.txns[TID].partitions == {(TOPIC, 0)}
            await cancelled_midway(txns.end_txn(TID, r.producer_id, r.producer_epoch, True))
            await until(lambda: txns.machine.txns[TID].state == TxnState.COMPLETE_COMMIT, "markers written, completed")
            (hdr, recs), = await batches(svc, TOPIC, 0)
            assert hdr.is_control and control_record_type(recs[0].key) == 1  # the COMMIT marker
            assert (await txns.init_producer_id(TID, 60000, r.producer_id, r.producer_epoch)).error == 0
        finally:
            held.gate.set()
            await svc.stop()

    asyncio.run(run())
