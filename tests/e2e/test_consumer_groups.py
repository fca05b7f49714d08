"""Acceptance (issue 3): consumer groups with real clients, against our broker (and Apache Kafka with
KOP_E2E_TARGET=kafka, which proves the tests right).

* a group mixing the Java console consumer (--group), confluent-kafka and kafka-python shares a
  6-partition topic and rebalances when members join, leave and are killed (session timeout); with
  commits after processing, every record is consumed, and only records nobody committed are consumed twice;
* a static member (group.instance.id) killed and restarted within its session timeout gets its partitions
  back with no rebalance (no new generation in __consumer_offsets, the others keep theirs);
* a broker SIGKILL keeps every committed offset and the group (members, generation); consumers go on, and
  new consumers resume exactly from the committed offsets;
* kafka-consumer-perf-test runs against the broker.

Members run as separate processes (tests/support/groups.py) so that they can be SIGKILLed.
"""

from __future__ import annotations

from collections import defaultdict

from tests.support.clients import create_topic
from tests.support.groups import JavaMember, Member, PythonMember, committed, produce, wait_for

PARTS = 6
KOP_GROUP_SETTINGS = {"groupInitialRebalanceDelayMs": 0}


class Scenario:
    """One topic, one group, the records produced so far and the members started."""

    def __init__(self, target, tmp_path, partitions: int = PARTS, hint: str = "grp", **kop) -> None:
        # the module's broker of ours (tests that kill it start their own): each scenario has its own topic and group
        self.broker = target.module_broker(**{**KOP_GROUP_SETTINGS, **kop})
        self.b = self.broker.bootstrap
        self.topic = target.topic(hint)
        self.group = "g-" + self.topic
        self.parts = partitions
        self.tmp = tmp_path
        self.produced: dict[int, list[str]] = {p: [] for p in range(partitions)}
        self.members: list[Member] = []
        create_topic(self.b, self.topic, partitions)

    def produce(self, tag: str, per_partition: int) -> None:
        chunk = {p: [f"{tag}-p{p}-{i}" for i in range(per_partition)] for p in range(self.parts)}
        produce(self.b, self.topic, chunk)
        for p, vs in chunk.items():
            self.produced[p] += vs

    def python(self, name: str, client: str, **kw) -> PythonMember:
        m = PythonMember(name, client, self.b, self.topic, self.group, self.tmp, **kw)
        self.members.append(m)
        return m

    def java(self, name: str, **props: str) -> JavaMember:
        m = JavaMember(name, self.b, self.topic, self.group, self.tmp, props or None)
        self.members.append(m)
        return m

    def committed(self) -> dict[int, int]:
        return committed(self.b, self.group, self.topic, self.parts)

    def describe(self) -> str:
        return "\n".join(m.describe() for m in self.members) + f"\ncommitted: {self.committed()}"

    def wait(self, what: str, cond) -> None:
        wait_for(what, cond, on_timeout=self.describe)

    def wait_all_committed(self) -> None:
        want = {p: len(v) for p, v in self.produced.items()}
        self.wait(f"committed offsets {want}", lambda: self.committed() == want)

    def close(self) -> None:
        for m in self.members:
            try:
                m.stop(30)
            except Exception:
                m.kill()


def _check_consumption(s: Scenario) -> dict[tuple[int, int], list[str]]:
    """Every produced record consumed, with its value; a record consumed twice only when the member that
    consumed it first never committed it (a killed member's tail, or a batch whose commit failed): "no
    record after a committed offset is consumed twice and none is skipped". Returns {(p, o): [members]}."""
    seen: dict[tuple[int, int], list[str]] = defaultdict(list)
    for m in s.members:
        for p, o, v in m.consumed():
            assert o < len(s.produced[p]) and s.produced[p][o] == v, f"{m.name} consumed {v!r} at {p}/{o}"
            seen[(p, o)].append(m.name)
    for p in range(s.parts):
        missing = [o for o in range(len(s.produced[p])) if (p, o) not in seen]
        assert not missing, f"partition {p}: records never consumed (skipped): {missing[:20]}\n{s.describe()}"
    dups = {k for k, names in seen.items() if len(names) > 1}
    if not dups:
        return seen
    python = {m.name: m for m in s.members if isinstance(m, PythonMember)}
    when: dict[tuple[int, int], list[tuple[float, str]]] = defaultdict(list)
    for m in s.members:
        for p, o, t in m.consumed_at():
            if (p, o) in dups:
                when[(p, o)].append((t, m.name))
    bad = {}
    for k in dups:
        # Reads are ordered by the system-wide monotonic clock (a rebalance always lies between two reads of
        # one record). The first reader must be a Python member (they log their commits; the Java member
        # commits what it printed before it gives a partition away) that never committed the record.
        first = min(when[k])[1]
        m = python.get(first)
        if len(when[k]) != 2 or m is None or (k[1] < m.acked_commits().get(k[0], 0) and not any(
                fp == k[0] and lo <= k[1] < hi for fp, lo, hi in m.failed_commit_ranges())):
            bad[k] = sorted(when[k])
    assert not bad, f"records consumed twice although committed: {sorted(bad.items())[:20]}\n{s.describe()}"
    return seen


def test_mixed_group_rebalances_without_loss(target, java_tools, tmp_path) -> None:
    s = Scenario(target, tmp_path)
    try:
        s.produce("a", 40)
        a = s.python("A-kafka-python", "kafka-python")
        s.wait_all_committed()
        assert a.current_assignment() == list(range(PARTS))

        b = s.python("B-confluent", "confluent-kafka")  # join
        s.wait("A and B to share the partitions",
               lambda: len(a.current_assignment() or []) == 3 and len(b.current_assignment() or []) == 3)
        s.produce("b", 40)
        s.wait_all_committed()

        c = s.java("C-java")  # join: three members, three clients
        s.wait("A and B to give two partitions each to the Java member",
               lambda: len(a.current_assignment() or []) == 2 and len(b.current_assignment() or []) == 2)
        s.produce("c", 40)
        s.wait_all_committed()
        s.wait("the Java member to have consumed", lambda: any(v.startswith("c-") for _, _, v in c.consumed()))
        assert sorted(a.current_assignment() + b.current_assignment()) != list(range(PARTS))

        b.stop()  # leave (LeaveGroup)
        s.wait("A to take over B's partitions", lambda: len(a.current_assignment() or []) == 3)
        s.produce("d", 40)
        s.wait_all_committed()

        # A slow member joins and is killed in the middle of its work: its partitions go to the others after
        # its session timeout, from its last committed offsets.
        d = s.python("D-kafka-python-slow", "kafka-python", batch_delay_ms=100, max_records=5)
        s.wait("D to get two partitions", lambda: len(d.current_assignment() or []) == 2)
        s.produce("e", 100)
        s.wait("D to be in the middle of its partitions",
               lambda: sum(v.startswith("e-") for _, _, v in d.consumed()) >= 20)
        d.kill()
        s.wait("A to take over after D's session timeout", lambda: len(a.current_assignment() or []) == 3)
        s.wait_all_committed()

        a.stop()
        c.stop()
        seen = _check_consumption(s)
        for m in (a, b, c, d):
            assert any(m.name in names for names in seen.values()), f"{m.name} consumed nothing"
        assert not a.failed_commit_ranges() and not b.failed_commit_ranges(), s.describe()
    finally:
        s.close()


def _group_generations(bootstrap: str, group: str) -> list[int]:
    """Generations of every group metadata record of `group` in __consumer_offsets, in log order (Kafka's own
    record format, so this reads Apache Kafka and our broker alike)."""
    from kafka import KafkaConsumer, TopicPartition

    from kop.coordinator.records import (
        GroupMetadataKey,
        decode_group_metadata_value,
        decode_key,
        partition_for,
    )

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
                k = decode_key(r.key)
                if isinstance(k, GroupMetadataKey) and k.group == group and r.value is not None:
                    out.append(decode_group_metadata_value(r.value).generation)
        return out
    finally:
        c.close()


def test_static_member_restart_keeps_its_partitions(target, java_tools, tmp_path) -> None:
    s = Scenario(target, tmp_path, hint="static")
    try:
        s.produce("a", 20)
        # The Java member joins first and stays the leader: kafka-python's range assignor drops a dynamic
        # member when static and dynamic members alternate in the member list (itertools.groupby on an
        # unsorted list), against Apache Kafka as well; Java's assignor orders static members properly.
        c = s.java("C-java")
        s.wait_all_committed()
        a = s.python("A-kafka-python", "kafka-python")
        s.wait("A to get half of the partitions", lambda: len(a.current_assignment() or []) == 3)
        st = s.python("S-confluent-static", "confluent-kafka", instance_id="static-1", session_timeout_ms=30000)
        s.wait("three members with two partitions each",
               lambda: len(a.current_assignment() or []) == 2 and len(st.current_assignment() or []) == 2)
        s.wait_all_committed()
        before = st.current_assignment()
        a_assignments = len(a.assignments())
        generations = _group_generations(s.b, s.group)
        assert generations, "no group metadata record in __consumer_offsets"

        st.kill()  # a crash: no LeaveGroup
        st2 = s.python("S2-confluent-static", "confluent-kafka", instance_id="static-1", session_timeout_ms=30000)
        s.wait("the restarted static member to get partitions", lambda: st2.current_assignment())
        assert st2.current_assignment() == before, "the static member did not get its partitions back"
        s.produce("b", 20)
        s.wait_all_committed()
        s.wait("the restarted static member to consume", lambda: any(v.startswith("b-") for _, _, v in st2.consumed()))

        after = _group_generations(s.b, s.group)
        assert after[len(generations):] and max(after) == max(generations), (
            f"the rejoin of the static member rebalanced the group: generations {generations} -> {after}")
        assert len(a.assignments()) == a_assignments, "the other members were rebalanced"
        assert not any(v.startswith("b-") for _, _, v in st.consumed())
        # st was killed after everything was committed; st2 resumed from the committed offsets.
        _check_consumption(s)
        assert c.alive()
    finally:
        s.close()


def test_broker_sigkill_keeps_offsets_and_group(target, java_tools, tmp_path) -> None:
    broker = target.dedicated_broker(**KOP_GROUP_SETTINGS)
    s = Scenario.__new__(Scenario)
    s.broker, s.b, s.parts, s.tmp, s.members = broker, broker.bootstrap, PARTS, tmp_path, []
    s.topic = target.topic("kill")
    s.group = "g-" + s.topic
    s.produced = {p: [] for p in range(PARTS)}
    create_topic(s.b, s.topic, PARTS)
    try:
        s.produce("a", 30)
        # Sessions outlive the broker's restart (Apache Kafka takes ~10 s): the members keep their ids.
        a = s.python("A-kafka-python", "kafka-python", session_timeout_ms=45000)
        b = s.python("B-confluent", "confluent-kafka", session_timeout_ms=45000)
        s.wait("two members with three partitions each",
               lambda: len(a.current_assignment() or []) == 3 and len(b.current_assignment() or []) == 3)
        s.wait_all_committed()
        before = s.committed()
        described = _describe(s.b, s.group)
        assert described[0] == "Stable" and len(described[1]) == 2, described

        broker.kill()
        broker.restart()
        assert s.committed() == before, "committed offsets changed across a broker SIGKILL"
        state, members = _describe(s.b, s.group)
        # A group loaded soon after its rebalance rebalances once (kop/coordinator/group_state.py, librdkafka's
        # lost OffsetFetch); confluent-kafka names those states PREPARING_REBALANCING / COMPLETING_REBALANCING.
        assert members == described[1] and state in ("Stable", "PreparingRebalancing", "CompletingRebalancing"), (
            f"group before the kill: {described}, after: {state} {members}")

        s.produce("b", 30)
        s.wait_all_committed()  # the running members carry on
        a.stop()
        b.stop()
        s.produce("c", 30)
        n = s.python("N-kafka-python", "kafka-python")  # a new member resumes from the committed offsets
        s.wait_all_committed()
        n.stop()
        _check_consumption(s)
        assert not any(v.startswith(("a-", "b-")) for _, _, v in n.consumed()), "the new member re-read committed records"
    finally:
        s.close()


def _describe(bootstrap: str, group: str) -> tuple[str, list[tuple[str, str]]]:
    """(state, sorted [(member id, client id)]) through DescribeGroups."""
    from confluent_kafka.admin import AdminClient

    admin = AdminClient({"bootstrap.servers": bootstrap})
    d = admin.describe_consumer_groups([group])[group].result(60)
    return d.state.name.title().replace("_", ""), sorted((m.member_id, m.client_id) for m in d.members)


def test_consumer_perf_test(target, java_tools) -> None:
    broker = target.module_broker(**KOP_GROUP_SETTINGS)
    b = broker.bootstrap
    topic = target.topic("cperf")
    create_topic(b, topic, 3)
    n = 50_000
    java_tools.run("kafka-producer-perf-test", "--bootstrap-server", b, "--topic", topic, "--num-records", n,
                   "--record-size", 100, "--throughput", -1, "--command-property", "acks=all", "linger.ms=5",
                   "batch.size=65536", jvm_opts=["-Xmx512m"], timeout=600, check=True)
    r = java_tools.run("kafka-consumer-perf-test", "--bootstrap-server", b, "--topic", topic, "--num-records", n,
                       "--group", f"perf-{topic}", "--timeout", 120000, jvm_opts=["-Xmx512m"], timeout=600, check=True)
    header = next(i for i, line in enumerate(r.lines) if line.startswith("start.time,"))
    columns = [c.strip() for c in r.lines[header].split(",")]
    values = dict(zip(columns, (v.strip() for v in r.lines[header + 1].split(",")), strict=True))
    assert int(values["data.consumed.in.nMsg"]) == n, r.stdout
    assert "ERROR" not in r.stderr, r.stderr[-3000:]
    print(f"kafka-consumer-perf-test against {target.kind}: {r.lines[header]}\n{r.lines[header + 1]}")
