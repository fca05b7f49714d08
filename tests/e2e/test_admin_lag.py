"""Consumer lag (issue 6): for a real group (kafka-python consumer with group_id, committing offsets), the
`kop_consumer_group_lag` series and the topic/internal stats equal log end offset - committed offset for
each partition, as the client itself sees both numbers."""

from __future__ import annotations

from tests.support.admin import Scrape, batch, kop_admin_json, ok, topic_url, wait_for
from tests.support.wire import Negotiated

STALL = 120


def test_lag_equals_log_end_offset_minus_committed_for_every_partition(kop_broker) -> None:
    from kafka import KafkaConsumer, KafkaProducer, TopicPartition
    from kafka.admin import KafkaAdminClient, NewTopic
    from kafka.structs import OffsetAndMetadata

    broker = kop_broker(groupInitialRebalanceDelayMs=0)
    admin = broker.admin_url
    topic, group = "lag", "lag-group"
    full = f"persistent://public/default/{topic}"
    client = KafkaAdminClient(bootstrap_servers=broker.bootstrap)
    try:
        client.create_topics([NewTopic(topic, 3, 1)])
    finally:
        client.close()
    producer = KafkaProducer(bootstrap_servers=broker.bootstrap, acks="all")
    try:
        for p, n in ((0, 10), (1, 6), (2, 4)):
            for i in range(n):
                producer.send(topic, value=b"%d-%d" % (p, i), partition=p)
        producer.flush(timeout=STALL)
    finally:
        producer.close(timeout=10)

    consumer = KafkaConsumer(topic, bootstrap_servers=broker.bootstrap, group_id=group, enable_auto_commit=False,
                             auto_offset_reset="earliest")
    try:
        wait_for("partitions assigned", lambda: bool(consumer.poll(timeout_ms=200) is not None
                                                      and len(consumer.assignment()) == 3), STALL)
        tps = [TopicPartition(topic, p) for p in range(3)]
        # commit a different position on each partition: mid-log, the end, and nothing on partition 2
        consumer.commit({tps[0]: OffsetAndMetadata(4, "", -1), tps[1]: OffsetAndMetadata(6, "", -1)})
        ends = consumer.end_offsets(tps)
        committed = {tp.partition: consumer.committed(tp) for tp in tps}
        assert committed == {0: 4, 1: 6, 2: None}

        lag = Scrape(admin).series("kop_consumer_group_lag")
        want = {
            frozenset({("group", group), ("topic", full), ("partition", str(tp.partition))}):
                ends[tp] - committed[tp.partition]
            for tp in tps if committed[tp.partition] is not None
        }
        assert want == {
            frozenset({("group", group), ("topic", full), ("partition", "0")}): 6,
            frozenset({("group", group), ("topic", full), ("partition", "1")}): 0,
        }
        assert lag == want

        # the log grows: lag follows at the next scrape
        with Negotiated(broker.bootstrap) as c:
            assert c.produce(topic, 1, batch([b"x", b"y", b"z"])).error_code == 0
        assert Scrape(admin).value("kop_consumer_group_lag", group=group, topic=full, partition="1") == 3

        # the same backlog in the topic stats (one subscription per group) and as a cursor in internal stats
        stats = ok(topic_url(admin, f"{topic}-partition-0") + "/stats")
        assert stats["subscriptions"][group] == {"msgBacklog": 6, "committedOffset": 4, "type": "KafkaConsumerGroup"}
        internal = ok(topic_url(admin, f"{topic}-partition-1") + "/internalStats")
        cursor = internal["cursors"][group]
        assert (cursor["messagesConsumedCounter"], cursor["msgBacklog"]) == (6, 3)
        # offset 6 is the first record of the last entry: the group reads it next, everything before is consumed
        assert cursor["readPosition"] == internal["lastConfirmedEntry"]
        last_ledger, last_entry = map(int, internal["lastConfirmedEntry"].split(":"))
        mark_ledger, mark_entry = map(int, cursor["markDeletePosition"].split(":"))
        assert (mark_ledger, mark_entry) < (last_ledger, last_entry)
        assert kop_admin_json(admin, "topics", "partitioned-stats", topic)["subscriptions"][group]["msgBacklog"] == 9
    finally:
        consumer.close()
