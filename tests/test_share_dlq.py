"""The share-group dead-letter queue (KIP-1191, kop/coordinator/share/dlq.py), sans-IO: which records a
share-partition lists for the DLQ, the DLQ records and headers Kafka 4.4 writes, Kafka's refusals of a DLQ
topic, the group configs and the share.version gate. The write itself, on our broker and on Apache Kafka 4.4:
tests/e2e/test_share_groups.py::test_dead_letter_queue."""

from __future__ import annotations

import pytest

from kop.coordinator.share import dlq
from kop.coordinator.share.coordinator import ShareCoordinator
from kop.coordinator.share.partition import CLIENT_REJECT, DELIVERY_COUNT_EXCEEDED, AckType, SharePartition
from kop.kafka.apis import group_configs
from kop.kafka.apis.configs_common import ConfigRequestError
from kop.protocol.errors import ErrorCode
from kop.topics.manager import Topic
from kop.topics.names import TopicName

T1 = b"\x01" * 16


def test_rejected_and_exhausted_records_are_listed_for_the_dlq() -> None:
    sp = SharePartition(0, lock_ms=100, delivery_limit=2)
    sp.dlq = True
    sp.acquire("a", [(0, 5)], 10, now=0)
    assert sp.acknowledge("a", 0, 1, [AckType.REJECT]) == 0  # a run of rejected records
    assert sp.acknowledge("a", 2, 2, [AckType.ACCEPT]) == 0
    assert sp.acknowledge("a", 3, 5, [AckType.RELEASE]) == 0  # first delivery: back to AVAILABLE
    assert sp.take_dead() == [(0, 1, 1, CLIENT_REJECT)]
    sp.acquire("a", [(0, 5)], 10, now=0)
    assert sp.acknowledge("a", 3, 3, [AckType.RELEASE]) == 0  # second delivery: the limit, archived
    assert sp.expire_locks(1000) == 2  # a lock timing out at the limit too
    assert sp.take_dead() == [(3, 5, 2, DELIVERY_COUNT_EXCEEDED)]  # one run: same count, same cause
    assert sp.take_dead() == [] and sp.start_offset == 6


def test_no_dlq_lists_nothing_and_gaps_are_never_dead_letters() -> None:
    sp = SharePartition(0, delivery_limit=2)
    sp.acquire("a", [(0, 1)], 10, now=0)
    sp.acknowledge("a", 0, 0, [AckType.REJECT])
    assert sp.dead == []
    sp.dlq = True
    sp.acknowledge("a", 1, 1, [AckType.GAP])
    assert sp.dead == []


def test_dlq_records_carry_kafkas_headers() -> None:
    runs = [(4, 5, 3, DELIVERY_COUNT_EXCEEDED)]
    records = dlq.dlq_records("g", "orders", 2, runs, {4: (b"k", b"v")}, 1234)
    assert [(r.key, r.value, r.timestamp) for r in records] == [(b"k", b"v", 1234), (None, None, 1234)]
    assert records[1].headers == [
        ("__dlq.errors.topic", b"orders"), ("__dlq.errors.partition", b"2"), ("__dlq.errors.offset", b"5"),
        ("__dlq.errors.group", b"g"), ("__dlq.errors.delivery.count", b"3"),
        ("__dlq.errors.message", b"Offset delivery count exceeded the threshold.")]


def _topic(configs: dict[str, str]) -> Topic:
    return Topic(TopicName("public", "default", "dlq.x"), 1, T1, configs, 0)


@pytest.mark.parametrize(("name", "topic", "message"), [
    ("", None, "Configured DLQ topic name in share group: g is empty."),
    ("__x", None, "Configured DLQ topic name in share group: g cannot start with __, topic: __x."),
    ("x", None, "Configured DLQ topic name does not comply with the DLQ topic prefix in share group: g, topic: x, "
                "prefix: dlq.."),
    ("dlq.x", None, "DLQ topic does not exist and auto create is disabled on cluster for share group: g, "
                    "topic: dlq.x."),
    ("dlq.x", {}, "DLQ is not enabled on configured DLQ topic for share group: g, topic: dlq.x."),
    ("dlq.x", {"errors.deadletterqueue.group.enable": "true"}, None),
])
def test_dlq_topic_refusals_are_kafkas(name: str, topic: dict[str, str] | None, message: str | None) -> None:
    assert dlq.refusal("g", name, None if topic is None else _topic(topic)) == message


class _Levels:
    """A DeadLetterQueue's view of share.version, without a topic manager (enabled() reads only this)."""

    def __init__(self, level: int) -> None:
        self.level = level


def test_the_group_configs_and_share_version_turn_the_dlq_on() -> None:
    share = ShareCoordinator(lambda: {}, 45_000, 5000)
    level = _Levels(2)
    share.dlq = dlq.DeadLetterQueue(None, lambda: level.level)  # enabled() does not touch the topics
    sp = share.share_partition(("g", T1, 0), 0, 0)
    assert not sp.dlq  # no DLQ topic named
    group_configs.alter(share, "g", [(dlq.TOPIC_NAME, group_configs.SET, "dlq.t"),
                                     (dlq.COPY_RECORD, group_configs.SET, "true")], validate_only=False)
    assert sp.dlq
    assert (dlq.COPY_RECORD, "true", group_configs.SOURCE_GROUP, group_configs.TYPE_BOOLEAN) in \
        group_configs.describe(share, "g")
    level.level = 1  # share.version 1: no dead-letter queue
    assert not share.share_partition(("g", T1, 0), 0, 0).dlq
    for name, value, message in (
            (dlq.TOPIC_NAME, "__dlq", "errors.deadletterqueue.topic.name: DLQ topic name must not start with '__'"),
            (dlq.COPY_RECORD, "yes", "Invalid value yes for configuration errors.deadletterqueue.copy.record.enable: "
                                     "Expected value to be either true or false")):
        with pytest.raises(ConfigRequestError) as e:
            group_configs.alter(share, "g", [(name, group_configs.SET, value)], validate_only=False)
        assert (e.value.error, str(e.value)) == (ErrorCode.INVALID_CONFIG, message)
