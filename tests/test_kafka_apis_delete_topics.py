"""DeleteTopics (kop/kafka/apis/delete_topics.py): topics of one request go side by side, the answer waits at
most timeout_ms (REQUEST_TIMED_OUT after it, the deletion still finishing), duplicates are INVALID_REQUEST, and
a deletion once started finishes even when its requester goes away."""

from __future__ import annotations

import time

from kafka.protocol.admin import CreateTopicsRequest, DeleteTopicsRequest
from kafka.protocol.metadata import MetadataRequest

from tests.support.clients import create_topic
from tests.support.wire import WireClient

REQUEST_TIMED_OUT, INVALID_REQUEST, UNKNOWN_TOPIC_OR_PARTITION, TOPIC_ALREADY_EXISTS = 7, 42, 3, 36


def existing(bootstrap: str, names: list[str]) -> set[str]:
    with WireClient(bootstrap) as c:
        m = c.send(MetadataRequest(topics=[MetadataRequest.MetadataRequestTopic(name=n) for n in names],
                                   allow_auto_topic_creation=False), version=9)
    return {t.name for t in m.topics if t.error_code == 0}


def wait_gone(bootstrap: str, names: list[str], timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while existing(bootstrap, names):
        assert time.monotonic() < deadline, f"still there: {existing(bootstrap, names)}"
        time.sleep(0.2)


def delete(c: WireClient, names: list[str], timeout_ms: int) -> dict[str, tuple[int, str | None]]:
    r = c.send(DeleteTopicsRequest(topic_names=names, timeout_ms=timeout_ms), version=5)
    return {t.name: (t.error_code, t.error_message) for t in r.responses}


def create_when_free(bootstrap: str, name: str, partitions: int) -> None:
    """Create `name` once its old logs are gone; until then a create is refused, saying why."""
    deadline = time.monotonic() + 60
    with WireClient(bootstrap) as c:
        while True:
            r = c.send(CreateTopicsRequest(topics=[CreateTopicsRequest.CreatableTopic(
                name=name, num_partitions=partitions, replication_factor=1, assignments=[], configs=[])],
                timeout_ms=30_000, validate_only=False), version=5)
            code, message = r.topics[0].error_code, r.topics[0].error_message
            if code == 0:
                return
            assert code == TOPIC_ALREADY_EXISTS and message == f"Topic '{name}' is marked for deletion.", message
            assert time.monotonic() < deadline
            time.sleep(0.05)


def touch_every_partition(bootstrap: str, topic: str, partitions: int) -> None:
    """Open every partition's log (a produce to each), so deleting has real work per partition."""
    from confluent_kafka import Producer

    p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5})
    for i in range(partitions):
        p.produce(topic, b"x", partition=i)
    assert p.flush(60) == 0


def test_several_topics_in_one_request_and_duplicates(kop_broker) -> None:
    b = kop_broker()
    for t in ("dt-a", "dt-b", "dt-dup"):
        create_topic(b.bootstrap, t, 2)
    with WireClient(b.bootstrap) as c:
        got = delete(c, ["dt-a", "dt-dup", "dt-b", "dt-dup", "dt-none"], 30_000)
    assert got["dt-a"][0] == 0 and got["dt-b"][0] == 0
    assert got["dt-dup"] == (INVALID_REQUEST, "Duplicate topic name.")
    assert got["dt-none"][0] == UNKNOWN_TOPIC_OR_PARTITION
    assert existing(b.bootstrap, ["dt-a", "dt-b", "dt-dup"]) == {"dt-dup"}  # a duplicated name is not deleted


def test_an_answer_past_timeout_ms_is_request_timed_out_and_the_deletion_still_ends(kop_broker) -> None:
    b = kop_broker()
    create_topic(b.bootstrap, "dt-slow", 100)
    touch_every_partition(b.bootstrap, "dt-slow", 100)
    with WireClient(b.bootstrap) as c:
        code, message = delete(c, ["dt-slow"], 1)["dt-slow"]  # 100 open logs are not closed in 1 ms
    assert code == REQUEST_TIMED_OUT and "still in progress" in message
    wait_gone(b.bootstrap, ["dt-slow"])
    create_when_free(b.bootstrap, "dt-slow", 1)
    with WireClient(b.bootstrap) as c:
        assert delete(c, ["dt-slow"], 30_000)["dt-slow"][0] == 0


def test_a_requester_that_goes_away_does_not_leave_a_half_deleted_topic(kop_broker) -> None:
    b = kop_broker()
    create_topic(b.bootstrap, "dt-gone", 100)
    touch_every_partition(b.bootstrap, "dt-gone", 100)
    c = WireClient(b.bootstrap)
    c._correlation_id += 1
    req = DeleteTopicsRequest(topic_names=["dt-gone"], timeout_ms=30_000)
    req.API_VERSION = 4
    req.with_header(correlation_id=c._correlation_id, client_id=c.client_id)
    c.sock.sendall(req.encode(version=4, header=True, framed=True))
    c.close()  # before the answer: the request's task is cancelled with its connection
    wait_gone(b.bootstrap, ["dt-gone"])
    b.stop()
    b.start()  # the topic record went too, not just the in-memory topic
    assert existing(b.bootstrap, ["dt-gone"]) == set()
    assert "deleting a topic failed" not in b.log_path.read_text(errors="replace")


def test_a_broker_killed_mid_deletion_finishes_it_at_its_next_start(kop_broker) -> None:
    """The record says `deleting` before any log goes: a kill -9 in between does not bring back a topic
    with part of its data removed; the restarted broker finishes the deletion."""
    b = kop_broker()
    create_topic(b.bootstrap, "dt-killed", 100)
    touch_every_partition(b.bootstrap, "dt-killed", 100)
    with WireClient(b.bootstrap) as c:
        assert delete(c, ["dt-killed"], 1)["dt-killed"][0] == REQUEST_TIMED_OUT
    b.kill()
    b.start()
    assert existing(b.bootstrap, ["dt-killed"]) == set()
    create_when_free(b.bootstrap, "dt-killed", 3)
    from confluent_kafka import Consumer, TopicPartition

    c = Consumer({"bootstrap.servers": b.bootstrap, "group.id": "dt"})
    try:
        for p in range(3):  # nothing of the old topic's data under the new one
            assert c.get_watermark_offsets(TopicPartition("dt-killed", p), timeout=30) == (0, 0)
    finally:
        c.close()
