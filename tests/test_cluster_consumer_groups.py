"""A KIP-848 consumer group across coordinator moves in cluster mode (two brokers sharing ZooKeeper and the
bookies of tests/support/bookkeeper.py, as tests/test_cluster_takeover.py).

A confluent-kafka consumer with `group.protocol=consumer` keeps consuming while the group's
__consumer_offsets partition moves to a broker that joins and back when that broker stops (SIGTERM): each
new coordinator replays the group's records (types 3-8), so the member's heartbeats go on with the epoch it
had - no fencing, no revocation, no partition changes hands - and nothing produced is skipped.
"""

from __future__ import annotations

from tests.support.clients import create_topic
from tests.support.cluster import coordinator_of, eventually, start_brokers, stop_brokers
from tests.support.groups import produce


def test_consumer_group_survives_coordinator_moves(cluster, tmp_path_factory) -> None:
    from confluent_kafka import Consumer

    from kop.coordinator.records import partition_for

    (first,) = start_brokers(tmp_path_factory, cluster, 1, groupConsumerHeartbeatIntervalMs=500)
    brokers = [first]
    c = None
    try:
        topic, partitions = "cg-moves", 4
        create_topic(first.bootstrap, topic, partitions)
        # a group whose __consumer_offsets partition lies in a bundle the joining broker takes over
        group = next(g for g in (f"cg-{i}" for i in range(50)) if partition_for(g, 4) in (1, 3))
        events: list[tuple[str, list[int]]] = []
        seen: set[str] = set()
        c = Consumer({"bootstrap.servers": first.bootstrap, "group.id": group, "group.protocol": "consumer",
                      "auto.offset.reset": "earliest"})
        c.subscribe([topic], on_assign=lambda _c, ps: events.append(("assign", sorted(p.partition for p in ps))),
                    on_revoke=lambda _c, ps: events.append(("revoke", sorted(p.partition for p in ps))))

        def consumed(round_: str) -> bool:
            seen.update(m.value().decode() for m in c.consume(20, 0.3) if not m.error())
            return {f"{round_}-{p}" for p in range(partitions)} <= seen

        def round_trip(round_: str) -> None:
            produce(brokers[0].bootstrap, topic, {p: [f"{round_}-{p}"] for p in range(partitions)})
            eventually(f"the {round_} records to be consumed", lambda: consumed(round_), timeout=120)

        round_trip("alone")
        assert events == [("assign", list(range(partitions)))]

        brokers += start_brokers(tmp_path_factory, cluster, 1, chroot=first.chroot, first_id=2, settled_ids=[1, 2],
                                 groupConsumerHeartbeatIntervalMs=500)
        assert coordinator_of(brokers, group) is brokers[1]
        round_trip("moved")

        brokers[1].stop()  # SIGTERM: its bundles go back to the first broker
        brokers = [first]
        eventually("the first broker to coordinate the group again",
                   lambda: coordinator_of(brokers, group) is first, timeout=60)
        round_trip("back")
        assert events == [("assign", list(range(partitions)))]  # never fenced, never revoked
    finally:
        if c is not None:
            c.close()
        stop_brokers(brokers)
