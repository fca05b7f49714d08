"""Fetch across many partitions (issue 5): partitions fetched at their high watermark are answered without a
read (kop.kafka.apis.fetch fast path), and a long poll registers interest in appends only after a pass found
too little - neither may change an answer.

* One request mixing partitions with data, partitions caught up (offset = high watermark, including an empty
  one), one past the end (OFFSET_OUT_OF_RANGE) and one that does not exist gives, partition by partition,
  what Fetch requests of that partition alone give, and Kafka's values (high watermark, last stable offset,
  log start offset after DeleteRecords, empty records).
* A long poll on 30 caught-up partitions returns the record appended to one of them (max_wait 30 s: a missed
  wake-up would return no record at all, which the test would see; no timing is asserted).

Requests are made with kafka-python's protocol classes (tests/support/wire.py), not with our codec.
"""

from __future__ import annotations

import threading

from kafka.protocol.consumer import FetchRequest

from kop.protocol.records import build_batch
from tests.support.clients import create_topic
from tests.support.wire import Negotiated

PARTITIONS = 30


def _fetch(c: Negotiated, topic: str, offsets: dict[int, int], max_wait_ms: int = 0, min_bytes: int = 0) -> dict:
    FT = FetchRequest.FetchTopic
    req = FetchRequest(
        replica_id=-1, max_wait_ms=max_wait_ms, min_bytes=min_bytes, max_bytes=50 << 20, isolation_level=0,
        session_id=0, session_epoch=-1, forgotten_topics_data=[], rack_id="",
        topics=[FT(topic=topic, partitions=[
            FT.FetchPartition(partition=p, current_leader_epoch=-1, fetch_offset=off, log_start_offset=-1,
                              partition_max_bytes=1 << 20) for p, off in offsets.items()])],
    )
    resp = c.send(req, 12)
    assert resp.error_code == 0 and resp.session_id == 0
    (t,) = resp.responses
    return {p.partition_index: p for p in t.partitions}


def _view(p) -> tuple:
    return (p.error_code, p.high_watermark, p.last_stable_offset, p.log_start_offset, bytes(p.records or b""))


def _delete_records(c: Negotiated, topic: str, partition: int, before: int) -> None:
    from kafka.protocol.admin import DeleteRecordsRequest

    T = DeleteRecordsRequest.DeleteRecordsTopic
    resp = c.call(DeleteRecordsRequest(topics=[T(name=topic, partitions=[
        T.DeleteRecordsPartition(partition_index=partition, offset=before)])], timeout_ms=30000), cap=2)
    assert resp.topics[0].partitions[0].error_code == 0


def test_mixed_partitions_answer_as_when_fetched_alone(kop_broker) -> None:
    broker = kop_broker(localStoreFsyncPolicy="none")
    topic = "many-fetch"
    create_topic(broker.bootstrap, topic, PARTITIONS)
    with Negotiated(broker.bootstrap) as c:
        counts = {p: (p % 4) * 2 for p in range(PARTITIONS)}  # 0, 2, 4 or 6 records per partition
        for p, n in counts.items():
            for i in range(0, n, 2):
                assert c.produce(topic, p, build_batch([(b"k", b"p%d-%d" % (p, i)), (None, b"x")])).error_code == 0
        _delete_records(c, topic, 2, 2)  # log start 2 on a partition that is then fetched at its end
        offsets = {}
        for p, n in counts.items():
            offsets[p] = 0 if p % 3 == 0 else n  # from the start (data unless empty) or at the high watermark
        offsets[2] = counts[2]
        offsets[5] = counts[5] + 1  # past the end
        offsets[PARTITIONS + 3] = 0  # no such partition
        together = _fetch(c, topic, offsets)
        assert sorted(together) == sorted(offsets)
        for p, off in offsets.items():
            alone = _fetch(c, topic, {p: off})[p]
            assert _view(together[p]) == _view(alone), f"partition {p} at {off}"
        for p, off in offsets.items():
            got = together[p]
            if p >= PARTITIONS:
                assert got.error_code == 3  # UNKNOWN_TOPIC_OR_PARTITION
                continue
            if p == 5:
                assert got.error_code == 1  # OFFSET_OUT_OF_RANGE
                continue
            n = counts[p]
            assert (got.error_code, got.high_watermark, got.last_stable_offset) == (0, n, n), f"partition {p}"
            assert got.log_start_offset == (2 if p == 2 else 0), f"partition {p}"
            assert bool(got.records) == (off < n), f"partition {p} at {off} of {n}"


def test_long_poll_over_caught_up_partitions_returns_an_append(kop_broker) -> None:
    broker = kop_broker(localStoreFsyncPolicy="none")
    topic = "many-poll"
    create_topic(broker.bootstrap, topic, PARTITIONS)
    result: dict = {}

    def poll() -> None:
        with Negotiated(broker.bootstrap) as c:
            result.update(_fetch(c, topic, dict.fromkeys(range(PARTITIONS), 0), max_wait_ms=30000, min_bytes=1))

    t = threading.Thread(target=poll)
    t.start()
    with Negotiated(broker.bootstrap) as c:
        assert c.produce(topic, 17, build_batch([(b"k", b"woken")])).error_code == 0
    t.join(60)
    assert not t.is_alive()
    with_data = [p for p, d in result.items() if d.records]
    assert with_data == [17]
    assert b"woken" in bytes(result[17].records)
    assert result[17].high_watermark == 1
