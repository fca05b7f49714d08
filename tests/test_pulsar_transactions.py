"""Pulsar consumers of a topic Kafka producers write transactions into (kop/pulsar/subscription.py): they
get committed data only - never a record of an aborted transaction, never a marker, nothing of a
transaction still open until it commits."""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import pulsar
import pytest

from kop.protocol.records import build_batch
from tests.support.broker import KopBroker
from tests.support.txn_wire import RawClient, txn_batch


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[KopBroker]:
    b = KopBroker(tmp_path_factory.mktemp("kop-pulsar-txn"), {
        "defaultNumPartitions": "1",
        "transactionPartitionVerificationEnable": "false",  # raw transactions no coordinator knows of
    }).start()
    yield b
    b.stop()


def test_pulsar_consumer_sees_committed_data_only(broker: KopBroker) -> None:
    topic = f"ptx-{uuid.uuid4().hex[:8]}"
    raw = RawClient(broker.bootstrap)
    client = pulsar.Client(broker.pulsar_url, operation_timeout_seconds=30)
    try:
        assert raw.produce(topic, 0, build_batch([(b"k", b"plain-0")])).error_code == 0
        a, ea = raw.init_producer_id()
        b, eb = raw.init_producer_id()
        c, ec = raw.init_producer_id()
        assert raw.produce(topic, 0, txn_batch(a, ea, 0, [b"committed-1", b"committed-2"]), "a").error_code == 0
        assert raw.produce(topic, 0, txn_batch(b, eb, 0, [b"aborted-1"]), "b").error_code == 0
        assert raw.marker(topic, [0], a, ea, commit=True) == [0]
        assert raw.marker(topic, [0], b, eb, commit=False) == [0]
        assert raw.produce(topic, 0, txn_batch(c, ec, 0, [b"open-1"]), "c").error_code == 0
        assert raw.produce(topic, 0, build_batch([(b"k", b"plain-1")])).error_code == 0  # behind the open one

        consumer = client.subscribe(f"{topic}-partition-0", "s", initial_position=pulsar.InitialPosition.Earliest)
        got = [consumer.receive(timeout_millis=30_000).data() for _ in range(3)]
        assert got == [b"plain-0", b"committed-1", b"committed-2"]
        with pytest.raises(pulsar.Timeout):  # the open transaction holds the rest back
            consumer.receive(timeout_millis=1500)
        # a reader: has_message_available (GET_LAST_MESSAGE_ID) says no more while the rest is not stable
        reader = client.create_reader(f"{topic}-partition-0", pulsar.MessageId.earliest)
        assert [reader.read_next(30_000).data() for _ in range(3)] == [b"plain-0", b"committed-1", b"committed-2"]
        assert not reader.has_message_available()
        # a subscription created at "latest" now starts at the last stable offset, not past the open records
        late = client.subscribe(f"{topic}-partition-0", "late", initial_position=pulsar.InitialPosition.Latest)
        assert raw.marker(topic, [0], c, ec, commit=True) == [0]
        got = [consumer.receive(timeout_millis=30_000).data() for _ in range(2)]
        assert got == [b"open-1", b"plain-1"]
        assert [late.receive(timeout_millis=30_000).data() for _ in range(2)] == [b"open-1", b"plain-1"]
        assert reader.has_message_available()
        assert [reader.read_next(30_000).data() for _ in range(2)] == [b"open-1", b"plain-1"]
        reader.close()
        late.close()
        with pytest.raises(pulsar.Timeout):  # no marker, no aborted record ever comes
            consumer.receive(timeout_millis=1500)
        consumer.close()
    finally:
        client.close()
        raw.close()
