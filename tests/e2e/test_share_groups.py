"""Issue 23, share groups (KIP-932): Kafka 4.4's KafkaShareConsumer (tests/support/ShareProbe.java, on the
suite's Kafka 4.4 jars, tests/support/java.py KAFKA_LIBS) on our broker and on Apache Kafka (the suite's 4.4;
share groups are on by default since 4.2, their dead-letter queue with share.version 2 since 4.4).

Three share consumers of one group read a 1-partition topic at once (explicit acknowledgement, 3 records per
poll): every record is delivered, a record released at its first delivery comes again with delivery count 2,
an accepted one is never delivered again - neither to the three nor to a fourth consumer of the group that
reads after them and gets only the record produced after (the group config share.auto.offset.reset=earliest is
set first through IncrementalAlterConfigs on the GROUP resource). The state machine's rules in detail (locks
with a fake clock, the delivery-count limit, acknowledgement types) are unit tests:
tests/test_share_partition.py, tests/test_share_groups_unit.py. Also here: the tools (and kafka-share-groups
--reset-offsets / --describe --offsets / --delete-offsets over the share coordinator's RPCs), a crashed consumer,
read_committed, a kill -9 (share-partition state, a member with its epoch and a group config survive it) and
the dead-letter queue; the membership records' and DLQ records' layouts: tests/test_share_group_records.py,
tests/test_share_dlq.py; hostile input: tests/test_share_hostile.py.
"""

from __future__ import annotations

import json
import os
import subprocess
import uuid
from pathlib import Path

from tests.e2e.test_kafka44_versions import _request_counts
from tests.support.clients import create_topic, partition_records
from tests.support.java import REPO_ROOT, JavaToolsMissing, check_kafka_libs, compiled_probe, java_executable

PROBE = Path(__file__).resolve().parent.parent / "support" / "ShareProbe.java"
COUNT = 30
CONSUMERS = 3


def _run_probe(bootstrap: str, topic: str, group: str, *args: object) -> list[str]:
    libs = check_kafka_libs()
    if not list(libs.glob("kafka-clients-4.4.*.jar")):
        raise JavaToolsMissing(f"the Kafka 4.4 client is not in {libs} - run scripts/setup")
    classpath = f"{libs}/*"
    jar = compiled_probe(PROBE, classpath)
    cmd = [java_executable(), "-Xmx256m", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1",
           f"-Dlog4j2.configurationFile={REPO_ROOT / 'tools' / 'java' / 'log4j2.properties'}",
           "-cp", f"{classpath}{os.pathsep}{jar}", PROBE.stem, *(args[:1] or ("run",)), bootstrap, topic, group,
           *map(str, args[1:] if args else (COUNT, CONSUMERS))]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=180, stdin=subprocess.DEVNULL)
    assert r.returncode == 0, f"ShareProbe exited {r.returncode}\n{r.stdout[-3000:]}\n{r.stderr[-4000:]}"
    return [line for line in r.stdout.splitlines()
            if line.split(" ", 1)[0] in ("SENT", "DELIVERY", "AFTER", "GOT", "HELD", "DONE")]


def test_three_share_consumers_on_one_partition(target) -> None:
    broker = target.module_broker()
    topic = f"share-{uuid.uuid4().hex[:8]}"
    group = f"share-g-{uuid.uuid4().hex[:8]}"
    create_topic(broker.bootstrap, topic, partitions=1)
    before = _request_counts(broker.admin_url) if target.is_kop else {}  # the module's broker: other tests' too

    out = _run_probe(broker.bootstrap, topic, group)

    assert out[0] == f"SENT {COUNT}" and out[-1] == "DONE"
    deliveries = [line.split()[1:] for line in out if line.startswith("DELIVERY ")]
    by_value: dict[str, list[tuple[int, str]]] = {}
    for _consumer, value, count, ack in deliveries:
        by_value.setdefault(value, []).append((int(count), ack))
    # Every record delivered; each accepted exactly once and never delivered after that.
    assert sorted(by_value) == sorted(f"v{i}" for i in range(COUNT))
    for value, seen in by_value.items():
        assert [ack for _, ack in seen].count("ACCEPT") == 1, (value, seen)
        assert seen[-1][1] == "ACCEPT", (value, seen)
        released = int(value[1:]) % 3 == 0
        # A released record comes back with its delivery count up; the others are delivered once.
        assert seen == ([(1, "RELEASE"), (2, "ACCEPT")] if released else [(1, "ACCEPT")]), (value, seen)
    # A consumer of the group reading afterwards gets only the record produced afterwards.
    assert [line for line in out if line.startswith("AFTER ")] == ["AFTER marker"]
    if target.is_kop:  # the 4.4 client used Kafka 4.4's newest versions: ShareFetch v2 (KIP-1206/1222) and the rest
        counts = _request_counts(broker.admin_url)
        for api, version in (("ShareGroupHeartbeat", 1), ("ShareFetch", 2), ("ShareAcknowledge", 2)):
            assert counts.get((api, version), 0) > before.get((api, version), 0), (
                api, sorted(k for k in counts if k[0].startswith("Share")))


SHARE_GROUPS = "org.apache.kafka.tools.consumer.group.ShareGroupCommand"
STATE_FORMATTER = "org.apache.kafka.tools.consumer.group.share.ShareGroupStateMessageFormatter"
GROUP_FORMATTER = "org.apache.kafka.tools.consumer.ShareGroupMessageFormatter"
CONSOLE_SHARE_CONSUMER = "org.apache.kafka.tools.consumer.ConsoleShareConsumer"


def _configs_tool(java_tools) -> str:
    # kafka-configs moved from core (kafka.admin) to the tools jar in 4.3.
    return "org.apache.kafka.tools.ConfigCommand" if java_tools.version >= "4.3" else "kafka-configs"


def _produce(bootstrap: str, topic: str, values: list[str]) -> None:
    from confluent_kafka import Producer

    errors: list[object] = []
    p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 0})
    for v in values:
        p.produce(topic, value=v.encode(), on_delivery=lambda err, msg: errors.append(err) if err else None)
    assert p.flush(60) == 0 and not errors, errors


def _offsets(java_tools, bootstrap: str, group: str) -> list[list[str]]:
    """kafka-share-groups --describe's rows: [group, topic, partition, start offset, lag]."""
    r = java_tools.run(SHARE_GROUPS, "--bootstrap-server", bootstrap, "--describe", "--group", group, check=True)
    return [line.split() for line in r.lines if line.startswith(group)]


def test_share_group_tools(target, java_tools) -> None:
    """kafka-configs --alter on a GROUP resource, kafka-console-share-consumer, and kafka-share-groups --list,
    --describe, --reset-offsets and --delete, with the same output on both brokers (but the start offset of a
    fully acknowledged share-partition, below)."""
    b = target.module_broker().bootstrap  # the module's: the test never kills or reconfigures it
    topic = f"share-tools-{uuid.uuid4().hex[:8]}"
    group = f"share-tg-{uuid.uuid4().hex[:8]}"
    create_topic(b, topic, partitions=1)
    _produce(b, topic, [f"r{i}" for i in range(5)])
    r = java_tools.run(_configs_tool(java_tools), "--bootstrap-server", b, "--alter", "--entity-type", "groups",
                       "--entity-name", group, "--add-config", "share.auto.offset.reset=earliest", check=True)
    assert f"Completed updating config for group {group}." in r.stdout

    r = java_tools.run(CONSOLE_SHARE_CONSUMER, "--bootstrap-server", b, "--topic", topic, "--group", group,
                       "--max-messages", "5")
    assert [line for line in r.lines if line.startswith("r")] == [f"r{i}" for i in range(5)], r.stdout

    listed = java_tools.run(SHARE_GROUPS, "--bootstrap-server", b, "--list", check=True).lines
    assert group in listed
    # All five consumed: no lag. The start offset shown is 5 on ours, 0 on Kafka 4.4 (its persisted state keeps
    # the acknowledged batch and moves the start offset at its next write), so only the lag is compared.
    (row,) = _offsets(java_tools, b, group)
    assert row[:3] == [group, topic, "0"] and row[3] in ("0", "5") and row[4] == "0", row

    r = java_tools.run(SHARE_GROUPS, "--bootstrap-server", b, "--reset-offsets", "--to-earliest", "--execute",
                       "--topic", topic, "--group", group, check=True)
    assert [line.split() for line in r.lines if line.startswith(group)] == [[group, topic, "0", "0"]], r.stdout

    r = java_tools.run(SHARE_GROUPS, "--bootstrap-server", b, "--delete", "--group", group, check=True)
    assert f"Deletion of requested share groups ('{group}') was successful." in r.stdout, r.stdout


def test_share_partition_state_survives_a_kill(target, java_tools) -> None:
    """Three of five records accepted, two released; the broker is killed (SIGKILL) and restarted: a consumer of
    the group then gets only the two not accepted - the state came back from __share_group_state (Kafka: its
    share coordinator's same topic), whose records Kafka's own ShareGroupStateMessageFormatter reads. A member
    that crashed before the kill is still a member afterwards, with its epoch (membership in __consumer_offsets),
    and the group config it set is still set (the metadata store; Kafka: its metadata log)."""
    broker = target.dedicated_broker()
    topic = f"share-kill-{uuid.uuid4().hex[:8]}"
    group = f"share-kg-{uuid.uuid4().hex[:8]}"
    create_topic(broker.bootstrap, topic, partitions=1)
    _produce(broker.bootstrap, topic, [f"r{i}" for i in range(5)])

    first = _run_probe(broker.bootstrap, topic, group, "part", 3, 3)
    assert sorted(line.rsplit(" ", 1)[0] for line in first if "ACCEPT" in line) == [f"GOT r{i} ACCEPT" for i in range(3)]
    # A member that stays (its JVM halted: no leave), and a group config: both survive the kill too.
    _run_probe(broker.bootstrap, topic, group, "crash")
    members = _members(java_tools, broker.bootstrap, group)
    assert len(members) == 1, members
    broker.kill()
    broker.restart()
    assert _members(java_tools, broker.bootstrap, group) == members  # its member id and epoch, from the log
    r = java_tools.run(_configs_tool(java_tools), "--bootstrap-server", broker.bootstrap, "--describe",
                       "--entity-type", "groups", "--entity-name", group, check=True)
    assert "share.record.lock.duration.ms=15000" in r.stdout, r.stdout
    # The membership records, as Kafka's own ShareGroupMessageFormatter reads them from __consumer_offsets.
    out = _formatted(java_tools, broker.bootstrap, "__consumer_offsets", group, GROUP_FORMATTER)
    records = [s for s in _json_values(out) if s.get("key", {}).get("data", {}).get("groupId") == group]
    current = {s["key"]["data"]["memberId"]: s["value"]["data"]["memberEpoch"] for s in records
               if s["key"]["type"] == 14 and s.get("value")}
    assert {s["key"]["type"] for s in records} >= {10, 11, 14}, out[-3000:]
    assert [[members[0][1], str(current[members[0][1]])]] == [[m[1], m[5]] for m in members], (current, members)

    after = _run_probe(broker.bootstrap, topic, group, "part", 5, 2)
    assert [line.rsplit(" ", 1)[0] for line in after if line.startswith("GOT ")] == ["GOT r3 ACCEPT", "GOT r4 ACCEPT"]

    out = _formatted(java_tools, broker.bootstrap, "__share_group_state", group, STATE_FORMATTER)
    mine = [s for s in _json_values(out) if s["key"]["data"]["groupId"] == group]
    # ShareSnapshot (0) records here; Kafka writes mostly ShareUpdate (1) records after its first snapshot.
    assert mine and all(s["key"]["type"] in (0, 1) and s["key"]["data"]["partition"] == 0 for s in mine), out
    # The last state has nothing left to deliver: the start offset past r4, or (Kafka, which moves the start
    # offset at its next write) every record from it on acknowledged.
    last = mine[-1]["value"]["data"]
    done = all(b["deliveryState"] == 2 for b in last["stateBatches"])
    assert last["startOffset"] == 5 or (done and last["stateBatches"][-1]["lastOffset"] == 4), last


def _formatted(java_tools, bootstrap: str, topic: str, group: str, formatter: str) -> str:
    """Kafka's `formatter` over the partition of the internal `topic` that holds the group's records, read to its
    end: the records are counted first, so --max-messages ends the run (--timeout-ms is liveness only, not a wait
    for stragglers: the records asked about were written before their requests were answered)."""
    from confluent_kafka.admin import AdminClient

    n = len(AdminClient({"bootstrap.servers": bootstrap}).list_topics(topic, timeout=30).topics[topic].partitions)
    records = partition_records(bootstrap, topic, range(n))
    holding = [p for p, recs in records.items() if any(k is not None and group.encode() in k for k, _ in recs)]
    assert len(holding) == 1, f"{topic}: the group's records in partitions {holding}"
    (p,) = holding
    r = java_tools.run("kafka-console-consumer", "--bootstrap-server", bootstrap, "--topic", topic, "--partition", p,
                       "--offset", "earliest", "--max-messages", len(records[p]), "--timeout-ms", 60000,
                       "--formatter", formatter)
    return r.stdout


def _members(java_tools, bootstrap: str, group: str) -> list[list[str]]:
    """kafka-share-groups --describe --members' rows: [group, consumer id, host, client id, (assignment...)]."""
    r = java_tools.run(SHARE_GROUPS, "--bootstrap-server", bootstrap, "--describe", "--members", "--verbose",
                       "--group", group, check=True)
    return [line.split() for line in r.lines if line.startswith(group)]


def _json_values(text: str) -> list[dict]:
    """The formatter's JSON documents (it writes them one after the other, with no separator)."""
    out, pos, decoder = [], 0, json.JSONDecoder()
    while (pos := text.find("{", pos)) >= 0:
        value, pos = decoder.raw_decode(text, pos)
        out.append(value)
    return out


def test_a_crashed_consumers_records_come_back(target) -> None:
    """A share consumer acquires records and its JVM halts (no acknowledgement, no close): another consumer of
    the group gets them, at their second delivery - released when the crashed consumer's connection closed, as
    Kafka 4.x does, before their acquisition locks (share.record.lock.duration.ms 15000) would time out. The
    lock time-out itself is tested with a fake clock: tests/test_share_partition.py."""
    b = target.module_broker().bootstrap  # the module's: the test never kills or reconfigures it
    topic = f"share-crash-{uuid.uuid4().hex[:8]}"
    group = f"share-cg-{uuid.uuid4().hex[:8]}"
    create_topic(b, topic, partitions=1)
    _produce(b, topic, [f"r{i}" for i in range(4)])

    held = [line.split()[1] for line in _run_probe(b, topic, group, "crash") if line.startswith("HELD ")]
    assert held and set(held) <= {f"r{i}" for i in range(4)}
    got = [line.split()[1:] for line in _run_probe(b, topic, group, "part", 4, 4) if line.startswith("GOT ")]
    assert sorted(v for v, _, _ in got) == [f"r{i}" for i in range(4)]
    assert {v: int(n) for v, _, n in got} == {f"r{i}": 2 if f"r{i}" in held else 1 for i in range(4)}


def test_read_committed_share_group_skips_aborted_transactions(target) -> None:
    """share.isolation.level=read_committed: records of an aborted transaction are never delivered, those of
    committed ones are."""
    from confluent_kafka import Producer

    b = target.module_broker().bootstrap  # the module's: the test never kills or reconfigures it
    topic = f"share-txn-{uuid.uuid4().hex[:8]}"
    group = f"share-xg-{uuid.uuid4().hex[:8]}"
    create_topic(b, topic, partitions=1)
    p = Producer({"bootstrap.servers": b, "transactional.id": f"share-tx-{uuid.uuid4().hex[:8]}", "linger.ms": 0})
    p.init_transactions(60)
    for values, commit in ((["c0", "c1"], True), (["a2", "a3"], False), (["c4"], True)):
        p.begin_transaction()
        for v in values:
            p.produce(topic, value=v.encode())
        (p.commit_transaction if commit else p.abort_transaction)(60)

    got = _run_probe(b, topic, group, "part", 10, 3, "share.isolation.level=read_committed")
    assert [line.split()[1] for line in got if line.startswith("GOT ")] == ["c0", "c1", "c4"], got


def test_dead_letter_queue(target) -> None:
    """share.version 2 (KIP-1191): the group names a DLQ topic (errors.deadletterqueue.topic.name, the topic
    created with errors.deadletterqueue.group.enable=true and Kafka's "dlq." prefix) and copies records to it;
    a REJECTed record and one released at the delivery-count limit (2 here) go to the DLQ topic, with the key
    and value copied and Kafka's __dlq.errors.* headers; accepted records do not."""
    from confluent_kafka import Consumer, Producer

    b = target.module_broker().bootstrap  # the module's: the test never kills or reconfigures it
    topic = f"share-dlq-{uuid.uuid4().hex[:8]}"
    dlq = f"dlq.share-{uuid.uuid4().hex[:8]}"
    group = f"share-dg-{uuid.uuid4().hex[:8]}"
    create_topic(b, topic, partitions=1)
    create_topic(b, dlq, partitions=1, config={"errors.deadletterqueue.group.enable": "true"})
    p = Producer({"bootstrap.servers": b, "linger.ms": 0})
    for v in ("x0", "r1", "a2", "end"):
        p.produce(topic, key=f"k-{v}".encode(), value=v.encode())
        p.flush(60)

    got = _run_probe(b, topic, group, "dlq", 2, "share.delivery.count.limit=2",
                     f"errors.deadletterqueue.topic.name={dlq}", "errors.deadletterqueue.copy.record.enable=true")
    assert {line.rsplit(" ", 1)[0] for line in got if line.startswith("GOT ")} == {
        "GOT x0 reject", "GOT r1 release", "GOT a2 accept", "GOT end accept"}, got

    c = Consumer({"bootstrap.servers": b, "group.id": f"dlq-reader-{uuid.uuid4().hex[:8]}",
                  "auto.offset.reset": "earliest", "enable.auto.commit": False})
    c.subscribe([dlq])
    dead = []
    try:
        for _ in range(120):  # Kafka writes the DLQ in the background: read until both records are there
            msg = c.poll(0.5)
            if msg is not None and msg.error() is None:
                dead.append(msg)
            if len(dead) >= 2:
                break
    finally:
        c.close()
    rows = sorted((m.key(), m.value(), {k: v.decode() for k, v in m.headers() or []}) for m in dead)
    assert rows == [
        (b"k-r1", b"r1", {"__dlq.errors.topic": topic, "__dlq.errors.partition": "0", "__dlq.errors.offset": "1",
                          "__dlq.errors.group": group, "__dlq.errors.delivery.count": "2",
                          "__dlq.errors.message": "Offset delivery count exceeded the threshold."}),
        (b"k-x0", b"x0", {"__dlq.errors.topic": topic, "__dlq.errors.partition": "0", "__dlq.errors.offset": "0",
                          "__dlq.errors.group": group, "__dlq.errors.delivery.count": "1",
                          "__dlq.errors.message": "Offset rejected by client."}),
    ], rows


def _share_groups(java_tools, bootstrap: str, group: str, *args: str) -> list[list[str]]:
    """A kafka-share-groups command's rows about the group."""
    r = java_tools.run(SHARE_GROUPS, "--bootstrap-server", bootstrap, "--group", group, *args, check=True)
    return [line.split() for line in r.lines if line.startswith(group)]


def test_share_group_offsets_reset_describe_delete(target, java_tools) -> None:
    """kafka-share-groups --reset-offsets, --describe --offsets and --delete-offsets, over the share
    coordinator's InitializeShareGroupState, ReadShareGroupStateSummary and DeleteShareGroupState (83/87/86):
    a reset before the group ever consumed gives it state at offset 2 (start 2, lag 4 of 6 records); a share
    consumer then gets r2-r5 only; the lag is 0; --delete-offsets removes the topic's state, so the group shows
    no offsets for it, and a consumer afterwards starts again at share.auto.offset.reset (latest: nothing)."""
    b = target.module_broker().bootstrap  # the module's: the test never kills or reconfigures it
    topic = f"share-offs-{uuid.uuid4().hex[:8]}"
    group = f"share-og-{uuid.uuid4().hex[:8]}"
    create_topic(b, topic, partitions=1)
    _produce(b, topic, [f"r{i}" for i in range(6)])
    java_tools.run(_configs_tool(java_tools), "--bootstrap-server", b, "--alter", "--entity-type", "groups",
                   "--entity-name", group, "--add-config", "share.auto.offset.reset=earliest", check=True)
    r = java_tools.run(CONSOLE_SHARE_CONSUMER, "--bootstrap-server", b, "--topic", topic, "--group", group,
                       "--max-messages", "6")
    assert [line for line in r.lines if line.startswith("r")] == [f"r{i}" for i in range(6)], r.stdout
    reset = _share_groups(java_tools, b, group, "--reset-offsets", "--to-offset", "2", "--execute", "--topic", topic)
    assert reset == [[group, topic, "0", "2"]], reset
    described = _share_groups(java_tools, b, group, "--describe", "--offsets")
    assert [row[:5] for row in described] == [[group, topic, "0", "2", "4"]], described

    r = java_tools.run(CONSOLE_SHARE_CONSUMER, "--bootstrap-server", b, "--topic", topic, "--group", group,
                       "--max-messages", "4")
    assert [line for line in r.lines if line.startswith("r")] == [f"r{i}" for i in range(2, 6)], r.stdout
    (row,) = _share_groups(java_tools, b, group, "--describe", "--offsets")
    assert row[:3] == [group, topic, "0"] and row[3] in ("2", "6") and row[4] == "0", row

    r = java_tools.run(SHARE_GROUPS, "--bootstrap-server", b, "--group", group, "--delete-offsets", "--topic", topic,
                       check=True)
    assert [line.split() for line in r.lines if line.startswith(topic)] == [[topic, "Successful"]], r.stdout
    r = java_tools.run(SHARE_GROUPS, "--bootstrap-server", b, "--group", group, "--describe", "--offsets",
                       check=True)
    assert f"Share group '{group}' has no offset information." in r.stdout, r.stdout
