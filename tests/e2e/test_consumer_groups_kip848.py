"""Acceptance (issue 16): KIP-848 consumer groups (`group.protocol=consumer`) with real clients, on our broker
and on Apache Kafka 4.x (KOP_E2E_TARGET=kafka proves the tests right).

* Java 4.x console consumers and confluent-kafka consumers, all with `group.protocol=consumer`, share a
  6-partition topic while members of both kinds join, leave and are killed (the broker fences them after its consumer
  session timeout); with commits after processing every record is consumed, and a record is consumed twice
  only when the member that first consumed it never committed it;
* a group is restored by a broker restart: its members keep their partitions and epochs, and consumers
  resume from the committed offsets;
* a regex subscription is resolved by the broker and follows a matching topic created later;
* the group's records in __consumer_offsets are Kafka's bytes (decoded and re-encoded identically,
  on Apache Kafka's log as on ours), and consumer lag metrics cover consumer groups;
* kafka-consumer-groups (--list --type, --describe with --members/--state/--verbose, --delete) prints the
  same for a consumer group on both brokers (differential, normalized as in test_consumer_groups_cli);
* issue 23: two confluent-kafka members commit every record synchronously while one of them closes half-way,
  COMMIT_RUNS times: no commit fails (Kafka 4.3+ accepts a commit carrying the epoch the member had before the
  heartbeat that moved it, for the partitions it held then: KIP-1251; the `kafka` target is 4.4).

Members run as separate processes (tests/support/groups.py) so that they can be SIGKILLed.
"""

from __future__ import annotations

import difflib
import re
import threading
import uuid

from tests.e2e.test_consumer_groups import Scenario, _check_consumption
from tests.e2e.test_consumer_groups_cli import Run
from tests.support.clients import create_topic
from tests.support.groups import JavaMember, PythonMember, committed, produce, wait_for

PARTS = 6
# The consumer session timeout and heartbeat interval the members get, on both brokers (Kafka's minimum
# session timeout is 45 s unless lowered; a killed member is fenced after this): the classic tests' 6 s
# (tests/support/groups.py), six heartbeats. A broker restart's test gives its members 10 s: librdkafka's
# reconnect backoff grows while the broker is down, and a member must heartbeat again within the session.
SESSION_MS = 6_000
RESTART_SESSION_MS = 10_000


def kop_settings(session_ms: int = SESSION_MS) -> dict[str, int]:
    return {"groupConsumerSessionTimeoutMs": session_ms, "groupConsumerHeartbeatIntervalMs": 1000}


def kafka_settings(session_ms: int = SESSION_MS) -> dict[str, str]:
    return {"group.consumer.session.timeout.ms": str(session_ms),
            "group.consumer.min.session.timeout.ms": "6000",
            "group.consumer.heartbeat.interval.ms": "1000",
            "group.consumer.min.heartbeat.interval.ms": "1000"}


KOP_SETTINGS = kop_settings()
KAFKA_SETTINGS = kafka_settings()


class ConsumerProtocolScenario(Scenario):
    """Scenario (test_consumer_groups) on a broker whose consumer session timeout is SESSION_MS, with members
    using the consumer protocol."""

    def __init__(self, target, tmp_path, hint: str = "kip848", dedicated: bool = False,
                 session_ms: int = SESSION_MS) -> None:
        # the module's broker of ours with these settings, unless the test kills it: each scenario has its own
        # topic and group
        start = target.dedicated_broker if dedicated else target.module_broker
        self.broker = start(kafka_settings(session_ms), **kop_settings(session_ms))
        self.b = self.broker.bootstrap
        self.topic = target.topic(hint)
        self.group = "g-" + self.topic
        self.parts = PARTS
        self.tmp = tmp_path
        self.produced = {p: [] for p in range(PARTS)}
        self.members = []
        create_topic(self.b, self.topic, PARTS)

    def confluent(self, name: str, **kw) -> PythonMember:
        m = PythonMember(name, "confluent-kafka", self.b, self.topic, self.group, self.tmp,
                         group_protocol="consumer", client_id=name, **kw)
        self.members.append(m)
        return m

    def java(self, name: str, **props: str) -> JavaMember:
        return super().java(name, **{"group.protocol": "consumer", "client.id": name, **props})


def _sizes(*members: PythonMember) -> list[int]:
    return [len(m.current_assignment() or []) for m in members]


def test_java_and_confluent_members_join_leave_and_die_without_loss(target, java_tools, tmp_path) -> None:
    s = ConsumerProtocolScenario(target, tmp_path)
    try:
        s.produce("a", 40)
        a = s.confluent("A-confluent")
        s.wait_all_committed()
        s.wait("A to own every partition", lambda: a.current_assignment() == list(range(PARTS)))

        b = s.confluent("B-confluent")  # joins: A revokes three, B gets them once A released them
        s.wait("A and B to share the partitions", lambda: _sizes(a, b) == [3, 3])
        s.produce("b", 40)
        s.wait_all_committed()

        c = s.java("C-java")  # a Java 4.x consumer joins
        s.wait("A and B to give one partition each to the Java member", lambda: _sizes(a, b) == [2, 2])
        s.produce("c", 40)
        s.wait_all_committed()
        s.wait("the Java member to have consumed", lambda: any(v.startswith("c-") for _, _, v in c.consumed()))

        # A second Java member joins, consumes, commits everything it printed, and is killed: the broker
        # fences it after the session timeout and its partitions go to the others.
        c2 = s.java("C2-java")
        rounds = iter(range(10**6))

        def c2_consumed() -> bool:
            # Records keep coming until the new member (a JVM starting on a busy machine) has its share.
            s.produce(f"f{next(rounds)}", 2)
            return any(v.startswith("f") for _, _, v in c2.consumed())

        wait_for("the second Java member to have consumed", c2_consumed, interval=1.0, on_timeout=s.describe)
        s.wait_all_committed()
        c2.kill()
        s.produce("g", 40)
        s.wait_all_committed()  # only once C2's partitions were given to live members

        b.stop()  # leaves (heartbeat with epoch -1)
        s.wait("A to take one of B's partitions", lambda: _sizes(a) == [3])
        s.produce("d", 40)
        s.wait_all_committed()

        # A slow member joins and is killed in the middle of its work: the broker fences it after the
        # session timeout and its partitions go to the others, from its last committed offsets.
        d = s.confluent("D-confluent-slow", batch_delay_ms=100, max_records=5)
        s.wait("D to get two partitions", lambda: _sizes(d) == [2])
        s.produce("e", 100)
        s.wait("D to be in the middle of its partitions",
               lambda: sum(v.startswith("e-") for _, _, v in d.consumed()) >= 20)
        d.kill()
        s.wait("A to take over after D's session timeout", lambda: _sizes(a) == [3])
        s.wait_all_committed()

        a.stop()
        c.stop()
        seen = _check_consumption(s)
        for m in (a, b, c, c2, d):
            assert any(m.name in names for names in seen.values()), f"{m.name} consumed nothing"
    finally:
        s.close()


def test_broker_restart_restores_the_group(target, java_tools, tmp_path) -> None:
    """SIGKILL the broker under a stable consumer group: after the restart the members go on with their
    partitions (the group and its assignments were replayed from __consumer_offsets), and nothing is lost."""
    s = ConsumerProtocolScenario(target, tmp_path, hint="restart", dedicated=True, session_ms=RESTART_SESSION_MS)
    try:
        s.produce("a", 30)
        a, b = s.confluent("A-confluent"), s.confluent("B-confluent")
        s.wait("A and B to share the partitions", lambda: _sizes(a, b) == [3, 3])
        s.wait_all_committed()
        before = (a.current_assignment(), b.current_assignment())
        changes = tuple(sum(e["ev"] in ("assigned", "revoked") for e in m.events()) for m in (a, b))
        s.broker.kill()
        s.broker = s.broker.restart()
        s.produce("b", 30)
        s.wait_all_committed()
        # Neither member was fenced or saw a rebalance: they heartbeat on with the epochs they had.
        assert (a.current_assignment(), b.current_assignment()) == before
        assert tuple(sum(e["ev"] in ("assigned", "revoked") for e in m.events()) for m in (a, b)) == changes
        a.stop()
        b.stop()
        _check_consumption(s)
    finally:
        s.close()


# ---------------------------------------------------------------------------------------- kafka-consumer-groups


def cli_scenario(java_tools, bootstrap: str, tmp, names: dict[str, str]) -> Run:
    """Two confluent-kafka members with the consumer protocol, then kafka-consumer-groups."""
    topic, group = names["topic"], names["group"]
    run = Run(java_tools, bootstrap, {v: f"<{k}>" for k, v in names.items()})
    create_topic(bootstrap, topic, 3)
    produce(bootstrap, topic, {p: [f"p{p}-{i}" for i in range(10)] for p in range(3)})
    members = [PythonMember(f"member-{x}", "confluent-kafka", bootstrap, topic, group, tmp, client_id=f"member-{x}",
                            group_protocol="consumer") for x in "ab"]

    def describe() -> str:
        return "\n".join(m.describe() for m in members)

    try:
        wait_for("both members to consume and commit everything",
                 lambda: committed(bootstrap, group, topic, 3) == dict.fromkeys(range(3), 10)
                 and sorted(_sizes(*members)) == [1, 2], on_timeout=describe)
        wait_for("every member to have acknowledged its assignment (Stable)", lambda: _reconciled(bootstrap, group),
                 on_timeout=describe)
        run("list-consumer", "--list", "--type", "consumer")
        run("list-classic", "--list", "--type", "classic")
        run("describe", "--describe", "--group", group)
        run("describe-members", "--describe", "--group", group, "--members")
        run("describe-members-verbose", "--describe", "--group", group, "--members", "--verbose")
        run("describe-state", "--describe", "--group", group, "--state")
        run("describe-state-verbose", "--describe", "--group", group, "--state", "--verbose")
        run("delete-active", "--delete", "--group", group)
    finally:
        for m in members:
            m.stop()
    # The members left (epoch -1 heartbeats): the group is Empty at once on both brokers.
    run("describe-empty", "--describe", "--group", group)
    run("describe-state-empty", "--describe", "--group", group, "--state")
    run("delete", "--delete", "--group", group)
    run("describe-deleted", "--describe", "--group", group)
    return run


def _reconciled(bootstrap: str, group: str) -> bool:
    """The group is Stable and each of its two members holds its target assignment (ConsumerGroupDescribe, through
    confluent-kafka's AdminClient: milliseconds, where a kafka-consumer-groups run takes a second): what every
    later kafka-consumer-groups --describe then prints the same on both brokers."""
    from confluent_kafka import ConsumerGroupState
    from confluent_kafka.admin import AdminClient

    admin = AdminClient({"bootstrap.servers": bootstrap})  # kept until the answer: it runs the request
    d = admin.describe_consumer_groups([group])[group].result(30)

    def parts(assignment) -> list[tuple[str, int]]:
        return sorted((tp.topic, tp.partition) for tp in assignment.topic_partitions) if assignment else []

    return d.state == ConsumerGroupState.STABLE and len(d.members) == 2 and all(
        m.target_assignment is not None and parts(m.assignment) == parts(m.target_assignment) for m in d.members)


def test_kafka_consumer_groups_describes_consumer_groups_as_apache_kafka(kafka_server, kop_broker, java_tools,
                                                                        tmp_path) -> None:
    suffix = uuid.uuid4().hex[:8]
    names = {"topic": f"kip848-topic-{suffix}", "group": f"kip848-group-{suffix}"}
    (tmp_path / "kafka").mkdir()
    (tmp_path / "kop").mkdir()
    with java_tools.session() as tools:  # one JVM for every kafka-consumer-groups command
        kafka_out = cli_scenario(tools, kafka_server.bootstrap, tmp_path / "kafka", names).outputs
        kop = kop_broker(kafkaBrokerId=1)
        kop_out = cli_scenario(tools, kop.bootstrap, tmp_path / "kop", names).outputs
    assert [label for label, _ in kafka_out] == [label for label, _ in kop_out]
    mismatches = []
    for (label, want), (_, got) in zip(kafka_out, kop_out, strict=True):
        if want != got:
            diff = "\n".join(difflib.unified_diff(want, got, "apache-kafka", "kop", lineterm="", n=2))
            mismatches.append(f"== kafka-consumer-groups {label}\n{diff}")
    assert not mismatches, f"{len(mismatches)} of {len(kafka_out)} outputs differ:\n" + "\n".join(mismatches)
    describe = dict(kafka_out)["describe"]
    assert sum(1 for ln in describe if re.match(r"<group> <topic> \d+ 10 10 0 <id> <id> <id>$", ln)) == 3, describe


def test_consumer_lag_metrics_cover_consumer_groups(kop_broker) -> None:
    """kop_consumer_group_lag (issue 6) for a consumer-protocol group: log end offset - committed offset."""
    from confluent_kafka import Consumer, TopicPartition

    from tests.support.admin import Scrape

    broker = kop_broker(**KOP_SETTINGS)
    topic, group = "lag848", "lag848-group"
    create_topic(broker.bootstrap, topic, 2)
    produce(broker.bootstrap, topic, {0: [f"a{i}" for i in range(10)], 1: [f"b{i}" for i in range(4)]})
    c = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": group, "group.protocol": "consumer",
                  "enable.auto.commit": False, "auto.offset.reset": "earliest"})
    try:
        c.subscribe([topic])
        got: list[object] = []
        wait_for("the consumer to read both partitions", lambda: len(got.extend(c.consume(20, 0.5)) or got) >= 14)
        c.commit(offsets=[TopicPartition(topic, 0, 7), TopicPartition(topic, 1, 4)], asynchronous=False)
        full = f"persistent://public/default/{topic}"
        assert Scrape(broker.admin_url).series("kop_consumer_group_lag") == {
            frozenset({("group", group), ("topic", full), ("partition", "0")}): 3,
            frozenset({("group", group), ("topic", full), ("partition", "1")}): 0,
        }
    finally:
        c.close()


def _group_records(bootstrap: str, group: str) -> list[tuple[bytes, bytes | None]]:
    """Every consumer-group record (types 3-8, 16) of `group` in __consumer_offsets, in log order."""
    from kafka import KafkaConsumer, TopicPartition

    from kop.coordinator import consumer_records as crec
    from kop.coordinator.records import partition_for

    c = KafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False)
    try:
        n = len(c.partitions_for_topic("__consumer_offsets"))
        tp = TopicPartition("__consumer_offsets", partition_for(group, n))
        c.assign([tp])
        c.seek_to_beginning(tp)
        end = c.end_offsets([tp])[tp]
        out = []
        while c.position(tp) < end:
            for r in c.poll(timeout_ms=1000).get(tp, []):
                if int.from_bytes(r.key[:2], "big") in crec.TYPES and crec.decode_key(r.key).group == group:
                    out.append((r.key, r.value))
        return out
    finally:
        c.close()


def test_consumer_group_records_in_kafkas_layout(target, tmp_path) -> None:
    """The group's records in __consumer_offsets decode with our codec and re-encode to the same bytes, and
    replaying them gives the group the members see. Against Apache Kafka this checks our layouts against
    Kafka's own bytes (Kafka 4.1+ adds a tagged field to the group epoch record, 4.3+ one to the assignment
    epoch record, which we do not write: their epochs are compared; 4.3+'s assignment epochs of record 8 are
    read and written as Kafka's)."""
    from kop.coordinator import consumer_records as crec
    from kop.coordinator.consumer_group import ConsumerGroupReplayer

    s = ConsumerProtocolScenario(target, tmp_path, hint="records")
    try:
        s.produce("a", 5)
        a, b = s.confluent("A-confluent"), s.confluent("B-confluent")
        s.wait("A and B to share the partitions", lambda: _sizes(a, b) == [3, 3])
        s.wait_all_committed()
        records = _group_records(s.b, s.group)
        replayer = ConsumerGroupReplayer()
        decoders = {crec.PARTITION_METADATA: (crec.decode_partition_metadata, crec.encode_partition_metadata),
                    crec.MEMBER_METADATA: (crec.decode_member_metadata, crec.encode_member_metadata),
                    crec.TARGET_ASSIGNMENT_MEMBER: (crec.decode_target_member, crec.encode_target_member),
                    crec.CURRENT_MEMBER_ASSIGNMENT: (crec.decode_current_assignment, crec.encode_current_assignment),
                    crec.REGULAR_EXPRESSION: (crec.decode_regex, crec.encode_regex),
                    crec.TARGET_ASSIGNMENT_METADATA: (crec.decode_epoch, crec.encode_epoch),
                    crec.GROUP_EPOCH: (crec.decode_epoch, crec.encode_epoch)}
        kinds = set()
        for key, value in records:
            k = crec.decode_key(key)
            assert crec.encode_key(k) == key
            kinds.add(k.type)
            if value is not None:
                decode, encode = decoders[k.type]
                again = encode(decode(value))
                epoch_only = k.type in (crec.GROUP_EPOCH, crec.TARGET_ASSIGNMENT_METADATA)
                assert (again[:6] == value[:6]) if epoch_only else (again == value), (k, value.hex())
            replayer.replay(k, value)
        assert {crec.GROUP_EPOCH, crec.MEMBER_METADATA, crec.TARGET_ASSIGNMENT_MEMBER,
                crec.TARGET_ASSIGNMENT_METADATA, crec.CURRENT_MEMBER_ASSIGNMENT} <= kinds
        [group] = replayer.result()
        assert len(group.members) == 2 and group.assignment_epoch == group.group_epoch
        owned = [p for m in group.members.values() for ps in m.assigned.values() for p in ps]
        assert sorted(owned) == list(range(PARTS))
        assert sorted(sorted(len(ps) for ps in m.assigned.values()) for m in group.members.values()) == [[3], [3]]
        assert {m.client_id for m in group.members.values()} == {"A-confluent", "B-confluent"}
        a.stop()
        b.stop()
    finally:
        s.close()


def test_regex_subscription_follows_new_topics(target, tmp_path) -> None:
    """librdkafka sends a `^`-prefixed subscription to the broker as SubscribedTopicRegex (KIP-848 v1): the
    broker resolves it (whole-name RE2 match) and, when a matching topic is created later, assigns it too."""
    from confluent_kafka import Consumer

    broker = target.module_broker(KAFKA_SETTINGS, **KOP_SETTINGS)  # its topics are the test's own
    prefix = target.topic("re")
    first, second, other = f"{prefix}-one", f"{prefix}-two", f"x{prefix}"
    for t in (first, other):
        create_topic(broker.bootstrap, t, 2)
        produce(broker.bootstrap, t, {0: [f"{t}-a"], 1: [f"{t}-b"]})
    c = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": f"g-{prefix}", "group.protocol": "consumer",
                  "auto.offset.reset": "earliest", "topic.metadata.refresh.interval.ms": 1000})
    seen: set[str] = set()

    def consumed(*values: str) -> bool:
        seen.update(m.value().decode() for m in c.consume(10, 0.5) if not m.error())
        return set(values) <= seen

    try:
        c.subscribe([f"^{prefix}-.*"])
        wait_for("the first matching topic to be consumed", lambda: consumed(f"{first}-a", f"{first}-b"))
        create_topic(broker.bootstrap, second, 2)
        produce(broker.bootstrap, second, {0: [f"{second}-a"], 1: [f"{second}-b"]})
        wait_for("the topic created later to be consumed too", lambda: consumed(f"{second}-a", f"{second}-b"))
        assert not any(v.startswith(other) for v in seen)  # "x<prefix>" does not match the whole pattern
        assert {tp.topic for tp in c.assignment()} == {first, second}
        # The broker, not the client, resolved it: its resolution is in __consumer_offsets (record type 16).
        from kop.coordinator import consumer_records as crec

        regexes = [crec.decode_key(k).second for k, v in _group_records(broker.bootstrap, f"g-{prefix}")
                   if crec.decode_key(k).type == crec.REGULAR_EXPRESSION and v is not None]
        assert f"(^{prefix}-.*)" in regexes  # librdkafka sends its subscriptions joined, in parentheses
    finally:
        c.close()


# ---------------------------------------------------------------------------------------- commits while one leaves

COMMIT_RUNS = 20
COMMIT_RECORDS = 50  # per partition
# A short heartbeat interval: the survivor's heartbeat after the other member left (the one that moves its
# epoch and gives it the partitions) comes while it is still committing its own records.
COMMIT_HEARTBEAT_MS = 250


def _commit_run(bootstrap: str, topic: str) -> list[str]:
    """One run of issue 23's scenario on a fresh topic and group: A and B (confluent-kafka, the consumer
    protocol, no auto-commit) share 6 partitions, then the records come; each member commits every record
    synchronously; B closes after a quarter of them, and A consumes the rest. The commit errors either saw."""
    from confluent_kafka import Consumer, KafkaException

    group = "g-" + topic
    create_topic(bootstrap, topic, PARTS)
    total = PARTS * COMMIT_RECORDS
    consumed = {"A": 0, "B": 0}
    assigned = {"A": threading.Event(), "B": threading.Event()}
    errors: list[str] = []
    done = threading.Event()

    def member(name: str, close_after: int | None) -> None:
        c = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "group.protocol": "consumer",
                      "enable.auto.commit": False, "auto.offset.reset": "earliest", "client.id": name})
        try:
            c.subscribe([topic])
            while not done.is_set():
                msg = c.poll(0.1)
                if c.assignment():
                    assigned[name].set()
                if msg is None or msg.error():
                    continue
                try:
                    c.commit(message=msg, asynchronous=False)
                except KafkaException as e:
                    errors.append(f"{name}: {e}")
                consumed[name] += 1
                if consumed[name] == close_after:
                    return
        except Exception as e:  # the test fails on it, not the thread
            errors.append(f"{name}: {e!r}")
        finally:
            c.close()

    a = threading.Thread(target=member, args=("A", None), daemon=True)
    b = threading.Thread(target=member, args=("B", total // 4), daemon=True)
    a.start()
    b.start()
    try:
        wait_for("A and B to share the partitions", lambda: all(e.is_set() for e in assigned.values()))
        produce(bootstrap, topic, {p: [f"{p}-{i}" for i in range(COMMIT_RECORDS)] for p in range(PARTS)})
        wait_for("B to consume its quarter and leave", lambda: not b.is_alive() or errors)
        wait_for("A to consume the rest", lambda: sum(consumed.values()) >= total or errors,
                 on_timeout=lambda: f"consumed {consumed}")
    finally:
        done.set()
        a.join()
        b.join()
    if not errors:
        assert consumed == {"A": total - total // 4, "B": total // 4}, consumed
        assert committed(bootstrap, group, topic, PARTS) == dict.fromkeys(range(PARTS), COMMIT_RECORDS)
    return errors


def test_synchronous_commits_while_a_member_leaves_never_fail(target, tmp_path) -> None:
    """Issue 23: on Kafka 4.4, a synchronous commit never fails while the other member leaves. The heartbeat
    that gives A the leaver's partitions moves A to a new member epoch, and is answered while A's commit with
    the old epoch is on its way: Kafka 4.3+ accepts it for the partitions A already held at that epoch; we
    refused it (STALE_MEMBER_EPOCH) in 3 runs of 10 before. Each run is a fresh topic and group."""
    kafka_props = {**KAFKA_SETTINGS, "group.consumer.heartbeat.interval.ms": str(COMMIT_HEARTBEAT_MS),
                   "group.consumer.min.heartbeat.interval.ms": str(COMMIT_HEARTBEAT_MS)}
    broker = target.dedicated_broker(kafka_props, **{**KOP_SETTINGS,
                                                     "groupConsumerHeartbeatIntervalMs": COMMIT_HEARTBEAT_MS})
    failed = {}
    for run in range(COMMIT_RUNS):
        errors = _commit_run(broker.bootstrap, target.topic(f"commit{run}"))
        if errors:
            failed[run] = errors[:3]
    assert not failed, f"{len(failed)} of {COMMIT_RUNS} runs saw commit errors: {failed}"
