"""The group coordinator's internal topic as clients see it: CreateTopics for `__consumer_offsets` once it
exists answers TOPIC_ALREADY_EXISTS (Apache Kafka's answer; a client that "ensures" its topics must not see an
invalid-name error), and it is listed as internal in Metadata."""

from __future__ import annotations

from tests.support.clients import STALL_TIMEOUT


def _ensure_offsets_topic(bootstrap: str, group: str) -> None:
    """Kafka creates __consumer_offsets on the first FindCoordinator; a committed offset makes sure."""
    from kafka import KafkaConsumer, TopicPartition
    from kafka.structs import OffsetAndMetadata

    from tests.support.clients import create_topic

    create_topic(bootstrap, f"{group}-data", 1)
    consumer = KafkaConsumer(bootstrap_servers=bootstrap, group_id=group, enable_auto_commit=False,
                             request_timeout_ms=int(STALL_TIMEOUT * 1000))
    try:
        consumer.commit({TopicPartition(f"{group}-data", 0): OffsetAndMetadata(0, "", -1)})
    finally:
        consumer.close()


def test_creating_consumer_offsets_says_it_already_exists(target) -> None:
    from kafka.admin import KafkaAdminClient, NewTopic
    from kafka.errors import TopicAlreadyExistsError

    b = target.broker()
    _ensure_offsets_topic(b.bootstrap, target.topic("g"))
    admin = KafkaAdminClient(bootstrap_servers=b.bootstrap)
    try:
        try:
            admin.create_topics([NewTopic("__consumer_offsets", 1, 1)])
        except TopicAlreadyExistsError:
            pass
        else:
            raise AssertionError("creating __consumer_offsets succeeded")
        (meta,) = admin.describe_topics(["__consumer_offsets"])
        assert meta["error_code"] == 0
        assert meta["is_internal"] is True
        assert len(meta["partitions"]) >= 1
    finally:
        admin.close()
