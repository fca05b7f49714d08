"""DescribeProducers (key 61) against a real broker: raw, and through Kafka's own
`kafka-transactions.sh describe-producers` and `abort` (KIP-664: DescribeProducers, then WriteTxnMarkers
straight to the partition leader)."""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import pytest

from kop.protocol.records import build_batch
from tests.support.broker import KopBroker
from tests.support.java import JavaTools
from tests.support.txn_wire import RawClient, txn_batch

TRANSACTIONS = "org.apache.kafka.tools.TransactionsCommand"


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[KopBroker]:
    b = KopBroker(tmp_path_factory.mktemp("kop-describe-producers"), {
        "defaultNumPartitions": "1",
        "transactionPartitionVerificationEnable": "false",  # raw transactions no coordinator knows of
    }).start()
    yield b
    b.stop()


def test_describe_producers_raw_and_with_kafka_transactions_tool(broker: KopBroker, java_tools: JavaTools) -> None:
    raw = RawClient(broker.bootstrap)
    try:
        topic = f"dp-{uuid.uuid4().hex[:8]}"
        assert raw.produce(topic, 0, build_batch([(b"k", b"plain")])).error_code == 0
        idem, ie = raw.init_producer_id()
        assert raw.produce(topic, 0, build_batch([(b"k", b"i0"), (b"k", b"i1")], producer_id=idem,
                                                 producer_epoch=ie, base_sequence=0)).error_code == 0
        txp, te = raw.init_producer_id()
        first = raw.produce(topic, 0, txn_batch(txp, te, 0, [b"t0", b"t1", b"t2"]), "dp-tx").base_offset
        assert first == 3
        parts = raw.describe_producers(topic, [0, 7])
        assert parts[0].error_code == 0 and parts[1].error_code == 3  # UNKNOWN_TOPIC_OR_PARTITION
        found = {p.producer_id: p for p in parts[0].active_producers}
        assert (found[idem].producer_epoch, found[idem].last_sequence, found[idem].current_txn_start_offset) == \
            (ie, 1, -1)
        assert (found[txp].last_sequence, found[txp].current_txn_start_offset) == (2, first)
        assert found[txp].last_timestamp > 0

        out = java_tools.run(TRANSACTIONS, "--bootstrap-server", broker.bootstrap, "describe-producers",
                             "--topic", topic, "--partition", "0", check=True).stdout
        rows = [line.split() for line in out.splitlines() if line.strip()]
        assert rows[0][:2] == ["ProducerId", "ProducerEpoch"]
        by_pid = {int(r[0]): r for r in rows[1:]}
        assert by_pid[txp][-1] == str(first) and by_pid[idem][-1] == "None"

        # kafka-transactions.sh abort: the hanging transaction at `first` is aborted by the tool itself
        java_tools.run(TRANSACTIONS, "--bootstrap-server", broker.bootstrap, "abort", "--topic", topic,
                       "--partition", "0", "--start-offset", str(first), check=True)
        rc = raw.fetch(topic, 0, 0, committed=True)
        assert rc.last_stable_offset == rc.high_watermark == 7
        assert [(t.producer_id, t.first_offset) for t in rc.aborted_transactions] == [(txp, first)]
        after = {p.producer_id: p for p in raw.describe_producers(topic, [0])[0].active_producers}
        assert after[txp].current_txn_start_offset == -1
    finally:
        raw.close()
