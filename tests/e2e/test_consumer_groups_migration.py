"""Acceptance (issue 16): a rolling switch of a live group from the classic to the consumer protocol and back
(KIP-848's online migration), with Java 4.x consumers under a steady producer, on our broker and on Apache
Kafka 4.x (KOP_E2E_TARGET=kafka proves the test right).

Three kafka-console-consumer members (`group.protocol=classic`, the range assignor, auto-commit after
processing) consume a 6-partition topic while a producer keeps writing to every partition. They are
restarted one at a time with `group.protocol=consumer`: the first upgrades the group to a consumer group
(its classic members are then served through JoinGroup/SyncGroup/Heartbeat), the last classic one leaving
leaves a consumer group. Then they are restarted one at a time with `group.protocol=classic` again: the last
consumer-protocol member leaving turns the group classic and it rebalances. Each restarted member must
consume before the next restart.

What is asserted afterwards, and why (Kafka's promise for a consumer that commits after processing is
at-least-once: a partition's new owner starts from the group's committed offset, which is never past what
its previous owner processed, and may be behind it):

* no loss: every produced record is consumed, with its value, and the group's committed offsets reach the
  end of every partition;
* duplicates only from a restart at a committed offset: per partition, the reads (all members, in time
  order) form runs of consecutive offsets by one member; each run starts no later than one past the highest
  offset read before it (nothing skipped) and no earlier than the previous run's start (a committed offset
  never moves back, and the previous run began at the committed offset of its time). So a record is read
  twice only when it lies in the tail a previous owner read after the offset committed when it took the
  partition - never two members reading a partition at the same time (their interleaved reads would break
  the runs), never a member re-reading within its own run, never a rewind past a commit.

The group's type is checked on the way (the admin client's describe: consumer after the upgrade, classic at
the end). Members run as separate processes (tests/support/groups.py).
"""

from __future__ import annotations

import threading
import time
from collections import defaultdict

from tests.support.clients import create_topic
from tests.support.groups import JavaMember, committed, wait_for

PARTS = 6
MEMBERS = 3
SESSION_MS = 10_000
KOP_SETTINGS = {"groupConsumerSessionTimeoutMs": SESSION_MS, "groupConsumerHeartbeatIntervalMs": 1000,
                "groupInitialRebalanceDelayMs": 0}
KAFKA_SETTINGS = {"group.consumer.session.timeout.ms": str(SESSION_MS),
                  "group.consumer.min.session.timeout.ms": "6000",
                  "group.consumer.heartbeat.interval.ms": "1000",
                  "group.consumer.min.heartbeat.interval.ms": "1000"}


class SteadyProducer:
    """Writes a record to each partition in turn, about 60 a second, until stopped; keeps what each
    partition got at which offset (idempotent, so a partition's offsets are its write order)."""

    def __init__(self, bootstrap: str, topic: str) -> None:
        from confluent_kafka import Producer

        self.topic = topic
        self.producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5, "acks": "all",
                                  "enable.idempotence": True})
        self.produced: dict[int, dict[int, str]] = defaultdict(dict)
        self.errors: list[str] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="steady-producer", daemon=True)
        self._thread.start()

    def _delivered(self, err, msg) -> None:
        if err is not None:
            self.errors.append(str(err))
        else:
            self.produced[msg.partition()][msg.offset()] = msg.value().decode()

    def _run(self) -> None:
        seq = 0
        while not self._stop.is_set():
            for p in range(PARTS):
                self.producer.produce(self.topic, value=f"r{seq}-p{p}".encode(), partition=p,
                                      on_delivery=self._delivered)
            seq += 1
            self.producer.poll(0)
            time.sleep(0.1)

    def stop(self) -> dict[int, int]:
        """Stop, flush, and give each partition's end offset."""
        self._stop.set()
        self._thread.join(30)
        assert self.producer.flush(60) == 0, "records not delivered"
        assert not self.errors, self.errors[:5]
        for p in range(PARTS):
            assert sorted(self.produced[p]) == list(range(len(self.produced[p]))), f"partition {p} has gaps"
        return {p: len(self.produced[p]) for p in range(PARTS)}


def group_type(bootstrap: str, group: str) -> str:
    """"consumer" or "classic", as the admin client describes the group (ConsumerGroupDescribe, then
    DescribeGroups for a classic group)."""
    from confluent_kafka.admin import AdminClient

    admin = AdminClient({"bootstrap.servers": bootstrap})
    desc = admin.describe_consumer_groups([group], request_timeout=30)[group].result(60)
    return desc.type.name.lower()


def check_runs(reads: dict[int, list[tuple[float, str, int]]], produced: dict[int, dict[int, str]]) -> int:
    """The run rule of the module docstring, per partition; returns how many reads were repeats."""
    repeats = 0
    for p, rs in reads.items():
        rs.sort()
        runs: list[tuple[str, int, int]] = []  # (member, first offset, last offset)
        for _, member, offset in rs:
            if runs and runs[-1][0] == member and offset == runs[-1][2] + 1:
                runs[-1] = (member, runs[-1][1], offset)
            else:
                runs.append((member, offset, offset))
        high = -1
        for i, (member, first, last) in enumerate(runs):
            assert first <= high + 1, f"partition {p}: {member} started at {first} after {high} was read: skipped\n{runs}"
            if i:
                assert first >= runs[i - 1][1], f"partition {p}: {member} rewound to {first}, before the " \
                                                f"previous run's start {runs[i - 1][1]}\n{runs}"
            repeats += max(0, min(last, high) - first + 1)
            high = max(high, last)
        assert high + 1 == len(produced[p]), f"partition {p}: read up to {high}, produced {len(produced[p])}"
    return repeats


def test_rolling_switch_classic_to_consumer_and_back(target, java_tools, tmp_path) -> None:
    broker = target.dedicated_broker(KAFKA_SETTINGS, **KOP_SETTINGS)
    b = broker.bootstrap
    topic = target.topic("migrate")
    group = "g-" + topic
    create_topic(b, topic, PARTS)
    members: list[JavaMember] = []
    producer = SteadyProducer(b, topic)

    def start(name: str, protocol: str) -> JavaMember:
        m = JavaMember(name, b, topic, group, tmp_path, {"group.protocol": protocol, "client.id": name})
        members.append(m)
        return m

    def describe() -> str:
        return "\n".join(m.describe() for m in members) + f"\ncommitted: {committed(b, group, topic, PARTS)}"

    def consumes(m: JavaMember) -> None:
        """The member reads records written after it started: it holds partitions of the live group."""
        seen = len(m.consumed())
        wait_for(f"{m.name} to consume", lambda: m.alive() and len(m.consumed()) > seen + 5, interval=0.5,
                 on_timeout=describe)

    try:
        live = [start(f"classic-{i}", "classic") for i in range(MEMBERS)]
        for m in live:
            consumes(m)
        assert group_type(b, group) == "classic"
        for i in range(MEMBERS):  # upgrade, one member at a time
            live[i].stop()
            live[i] = start(f"consumer-{i}", "consumer")
            consumes(live[i])
            if i == 0:
                assert group_type(b, group) == "consumer"  # upgraded with classic members inside
        for i in range(MEMBERS):  # and back
            live[i].stop()
            live[i] = start(f"classic-again-{i}", "classic")
            consumes(live[i])
        assert group_type(b, group) == "classic"
        ends = producer.stop()
        wait_for(f"committed offsets {ends}", lambda: committed(b, group, topic, PARTS) == ends, on_timeout=describe)
        for m in live:
            m.stop()
        reads: dict[int, list[tuple[float, str, int]]] = defaultdict(list)
        for m in members:
            for p, o, t in m.consumed_at():
                reads[p].append((t, m.name, o))
            for p, o, v in m.consumed():
                assert producer.produced[p].get(o) == v, f"{m.name} read {v!r} at {p}/{o}"
        repeats = check_runs(reads, producer.produced)
        total = sum(ends.values())
        print(f"{total} records produced, {repeats} read again after a restart from a committed offset")
    finally:
        producer._stop.set()
        for m in members:
            try:
                m.stop(30)
            except Exception:
                m.kill()
