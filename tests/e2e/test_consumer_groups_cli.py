"""Acceptance (issue 3): kafka-consumer-groups from Kafka 4.x, the same scenario against Apache Kafka 4.x and
against our broker, every command's output compared.

The scenario (one topic, three partitions, records whose CreateTime spans 100 minutes in the past):

* a group with two active kafka-python members: --list (with --state and --type filters), --describe
  (offsets; --members; --members --verbose; --state; --state --verbose; --offsets --verbose), --delete and
  --delete-offsets refused while members are subscribed;
* the members leave: --describe again ("has no active members");
* --reset-offsets with --to-earliest, --to-latest, --to-offset, --shift-by (both ways, clamped),
  --to-datetime, --by-duration, --to-current, --all-topics and a partition subset, each --dry-run then
  --execute then --describe;
* a group that only has committed offsets (created by --reset-offsets --execute): --list shows it Empty;
  --delete-offsets of one partition and of a topic that does not exist; --delete; groups that do not exist.

Output is compared after normalizing what differs by nature: consumer (member) ids, hosts, client ids, the
coordinator's host:port (id), and the broker's port. Rows of one table are compared as a multiset, because
the tool orders some tables by member id, which is random. This test runs both brokers itself (it is not
parametrized by KOP_E2E_TARGET): the comparison is the point.
"""

from __future__ import annotations

import base64
import difflib
import json
import re
import subprocess
import sys
import time
import uuid
from pathlib import Path

from tests.support.clients import create_topic, partition_records
from tests.support.groups import PythonMember, committed, wait_for
from tests.support.java import REPO_ROOT

PARTITIONS = 3
PER_PARTITION = 10
SPACING_MS = 10 * 60 * 1000  # ten minutes between records of a partition


def produce_with_times(bootstrap: str, topic: str, base_ms: int) -> None:
    from confluent_kafka import Producer

    p = Producer({"bootstrap.servers": bootstrap, "acks": "all"})
    errors: list[str] = []
    for part in range(PARTITIONS):
        for i in range(PER_PARTITION):
            p.produce(topic, value=f"p{part}-{i}".encode(), partition=part, timestamp=base_ms + i * SPACING_MS,
                      on_delivery=lambda err, msg: errors.append(str(err)) if err else None)
    assert p.flush(60) == 0 and not errors, errors


class Run:
    """Runs kafka-consumer-groups against one broker and records (label, exit status, normalized output)."""

    def __init__(self, java_tools, bootstrap: str, names: dict[str, str]) -> None:
        self.tools = java_tools
        self.b = bootstrap
        self.names = names
        self.outputs: list[tuple[str, list[str]]] = []

    def __call__(self, label: str, *args: object) -> str:
        r = self.tools.run("kafka-consumer-groups", "--bootstrap-server", self.b, *args, "--timeout", 30000,
                           timeout=180)
        out = r.stdout + "\n" + _stderr_errors(r.stderr)
        self.outputs.append((label, [f"rc={r.rc}", *normalize(out, self.b, self.names)]))
        return r.stdout


def _stderr_errors(stderr: str) -> str:
    """The tool's own error lines (e.g. "Error: ...") from stderr, without JVM and logging noise."""
    keep = [ln for ln in stderr.splitlines() if ln.startswith(("Error", "Consumer group", "Deletion", "Group"))]
    return "\n".join(keep)


_ID_COLUMNS = ("CONSUMER-ID", "HOST", "CLIENT-ID")


def normalize(text: str, bootstrap: str, names: dict[str, str]) -> list[str]:
    """Lines split into fields (column widths depend on the longest value, e.g. a member id), with
    member ids, hosts, client ids and the coordinator replaced by placeholders; rows of a table sorted."""
    port = bootstrap.rsplit(":", 1)[1]
    text = text.replace(f"127.0.0.1:{port}", "<broker>")
    for real, alias in names.items():
        text = text.replace(real, alias)
    text = re.sub(r"<broker>\s+\(\d+\)", "<coordinator>", text)
    out: list[str] = []
    table: list[list[str]] = []
    id_cols: set[int] = set()

    def flush() -> None:
        out.extend(sorted(" ".join(r) for r in table))
        table.clear()

    for line in text.splitlines():
        fields = line.split()
        if not fields:
            flush()
            id_cols = set()
            continue
        if fields[0] == "GROUP" and len(fields) > 1:
            flush()
            id_cols = {i for i, f in enumerate(fields) if f in _ID_COLUMNS}
            out.append(" ".join(fields))
            continue
        if id_cols:
            fields = [("<id>" if f != "-" else "-") if i in id_cols else f for i, f in enumerate(fields)]
            table.append(fields)
            continue
        # member ids and client ids in messages (e.g. "member-a-<uuid>")
        line = re.sub(r"member-[ab]-[0-9a-f-]{36}", "<member-id>", " ".join(fields))
        out.append(line)
    flush()
    return out


def scenario(java_tools, bootstrap: str, tmp: Path, names: dict[str, str], base_ms: int, datetime: str) -> Run:
    """The commands run in one JVM (ToolSession): sixty JVM starts per broker were most of this test's time."""
    with java_tools.session() as tools:
        return _scenario(tools, bootstrap, tmp, names, base_ms, datetime)


def _scenario(tools, bootstrap: str, tmp: Path, names: dict[str, str], base_ms: int, datetime: str) -> Run:  # long: one scenario, read top to bottom
    topic, group, group2 = names["topic"], names["group"], names["group2"]
    run = Run(tools, bootstrap, {v: f"<{k}>" for k, v in names.items()})
    create_topic(bootstrap, topic, PARTITIONS)
    produce_with_times(bootstrap, topic, base_ms)
    members = [PythonMember(f"member-{x}", "kafka-python", bootstrap, topic, group, tmp, client_id=f"member-{x}",
                            session_timeout_ms=10000) for x in "ab"]
    try:
        want = {p: PER_PARTITION for p in range(PARTITIONS)}

        def describe() -> str:
            return "\n".join(m.describe() for m in members)

        wait_for("the group to commit everything", lambda: committed(bootstrap, group, topic, PARTITIONS) == want,
                 on_timeout=describe)
        wait_for("both members to own partitions",
                 lambda: all(m.current_assignment() for m in members) and
                 sum(len(m.current_assignment()) for m in members) == PARTITIONS, on_timeout=describe)

        def listing(label: str, *args: object) -> None:
            run(label, "--list", *args)
            # The Apache Kafka broker is shared with other tests: keep this scenario's groups (aliased <group>
            # and <group2> by the normalization) and the header.
            run.outputs[-1] = (label, [ln for ln in run.outputs[-1][1] if ln.startswith(("rc=", "GROUP", "<group"))])

        listing("list")
        listing("list --state", "--state")
        listing("list --state stable", "--state", "Stable")
        listing("list --type", "--type")
        listing("list --type classic --state stable", "--type", "classic", "--state", "stable")
        run("describe", "--describe", "--group", group)
        run("describe --members", "--describe", "--group", group, "--members")
        run("describe --members --verbose", "--describe", "--group", group, "--members", "--verbose")
        run("describe --state", "--describe", "--group", group, "--state")
        run("describe --state --verbose", "--describe", "--group", group, "--state", "--verbose")
        run("describe --offsets --verbose", "--describe", "--group", group, "--offsets", "--verbose")
        run("delete while active", "--delete", "--group", group)
        run("delete-offsets while subscribed", "--delete-offsets", "--group", group, "--topic", topic)
    finally:
        for m in members:
            m.stop()
    run("describe after leave", "--describe", "--group", group)
    run("describe --members after leave", "--describe", "--group", group, "--members")
    run("describe --state after leave", "--describe", "--group", group, "--state")
    listing("list --state empty", "--state", "Empty")

    for spec in (["--to-earliest"], ["--to-latest"], ["--to-offset", 3], ["--shift-by", -2], ["--shift-by", 100],
                 ["--shift-by", -100], ["--to-datetime", datetime], ["--by-duration", "PT55M"], ["--to-current"]):
        label = " ".join(map(str, spec))
        run(f"reset {label} dry-run", "--reset-offsets", "--group", group, "--topic", topic, *spec, "--dry-run")
        run(f"reset {label} execute", "--reset-offsets", "--group", group, "--topic", topic, *spec, "--execute")
        run(f"describe after reset {label}", "--describe", "--group", group)
    run("reset all-topics", "--reset-offsets", "--group", group, "--all-topics", "--to-earliest", "--execute")
    run("reset partitions 0,2", "--reset-offsets", "--group", group, "--topic", f"{topic}:0,2", "--to-offset", 5,
        "--execute")
    run("describe after partial reset", "--describe", "--group", group)

    run("reset creates group2", "--reset-offsets", "--group", group2, "--topic", topic, "--to-offset", 4, "--execute")
    listing("list with group2", "--state")
    listing("list --type with group2", "--type")
    run("describe group2", "--describe", "--group", group2)
    run("describe group2 --state", "--describe", "--group", group2, "--state")
    run("describe group2 --members", "--describe", "--group", group2, "--members")
    run("delete-offsets group2 partition 0", "--delete-offsets", "--group", group2, "--topic", f"{topic}:0")
    run("describe group2 after delete-offsets", "--describe", "--group", group2)
    run("delete-offsets unknown topic", "--delete-offsets", "--group", group2, "--topic", names["missing"])
    run("delete group2", "--delete", "--group", group2)
    run("describe deleted group2", "--describe", "--group", group2)
    run("delete group", "--delete", "--group", group)
    listing("list after deletes")
    run("delete missing group", "--delete", "--group", names["nogroup"])
    run("describe missing group", "--describe", "--group", names["nogroup"])
    run("describe missing group --state", "--describe", "--group", names["nogroup"], "--state")
    run("delete-offsets missing group", "--delete-offsets", "--group", names["nogroup"], "--topic", topic)
    return run


def test_kafka_consumer_groups_matches_apache_kafka(kafka_server, kop_broker, java_tools, tmp_path) -> None:
    kop = kop_broker(groupInitialRebalanceDelayMs=0, kafkaBrokerId=1)
    suffix = uuid.uuid4().hex[:8]
    names = {"topic": f"cg-topic-{suffix}", "group": f"cg-group-{suffix}", "group2": f"cg-group2-{suffix}",
             "missing": f"cg-missing-{suffix}", "nogroup": f"cg-nogroup-{suffix}"}
    base_ms = (int(time.time() * 1000) // SPACING_MS) * SPACING_MS - 100 * 60 * 1000
    cut = base_ms + 4 * SPACING_MS + SPACING_MS // 2  # between the 5th and 6th record of each partition
    datetime = time.strftime("%Y-%m-%dT%H:%M:%S", time.localtime(cut / 1000)) + ".000"

    # Both scenarios run at once: Apache Kafka's in a child process, ours here.
    spec = tmp_path / "spec.json"
    spec.write_text(json.dumps({"bootstrap": kafka_server.bootstrap, "workdir": str(tmp_path / "kafka"),
                                "names": names, "base_ms": base_ms, "datetime": datetime}))
    child_err = tmp_path / "kafka-scenario.stderr"
    with child_err.open("w") as err_file:
        child = subprocess.Popen([sys.executable, "-X", "faulthandler", "-m", "tests.e2e.test_consumer_groups_cli",
                                  str(spec)], cwd=REPO_ROOT, stdout=subprocess.PIPE, stderr=err_file, text=True)
    (tmp_path / "kop").mkdir()
    try:
        kop_out = scenario(java_tools, kop.bootstrap, tmp_path / "kop", names, base_ms, datetime).outputs
    finally:
        out, _ = child.communicate(timeout=900)
    err = "\n".join(ln for ln in child_err.read_text(errors="replace").splitlines() if "BGQUEUE" not in ln)
    assert child.returncode == 0, f"scenario against Apache Kafka failed ({child.returncode}):\n{err[-6000:]}"
    kafka_out = [(label, lines) for label, lines in json.loads(out)]
    assert [label for label, _ in kafka_out] == [label for label, _ in kop_out]
    mismatches = []
    for (label, want), (_, got) in zip(kafka_out, kop_out, strict=True):
        if want != got:
            diff = "\n".join(difflib.unified_diff(want, got, "apache-kafka", "kop", lineterm="", n=2))
            mismatches.append(f"== kafka-consumer-groups {label}\n{diff}")
    assert not mismatches, f"{len(mismatches)} of {len(kafka_out)} outputs differ:\n" + "\n".join(mismatches)
    # The scenario really exercised something: the active describe listed both members and all partitions.
    describe = dict(kafka_out)["describe"]
    assert sum(1 for ln in describe if re.match(r"<group> <topic> \d+ 10 10 0 <id> <id> <id>$", ln)) == PARTITIONS, describe


if __name__ == "__main__":
    # The Apache Kafka side of the comparison, run as a child process by the test above.
    from tests.support.java import JavaTools

    args = json.loads(Path(sys.argv[1]).read_text())
    Path(args["workdir"]).mkdir()
    result = scenario(JavaTools(), args["bootstrap"], Path(args["workdir"]), args["names"], args["base_ms"],
                      args["datetime"])
    print(json.dumps(result.outputs))


def _json_objects(text: str) -> list[dict]:
    """The formatters print one JSON object per record, not always separated by newlines."""
    dec = json.JSONDecoder()
    out, pos = [], 0
    while True:
        pos = text.find("{", pos)
        if pos < 0:
            return out
        obj, pos = dec.raw_decode(text, pos)
        out.append(obj)


def _topic_id(bootstrap: str, topic: str) -> str:
    """The topic's id as Kafka prints a Uuid (URL-safe base64 of its 16 bytes, unpadded)."""
    from confluent_kafka import TopicCollection
    from confluent_kafka.admin import AdminClient

    admin = AdminClient({"bootstrap.servers": bootstrap})
    uid = admin.describe_topics(TopicCollection([topic]))[topic].result(60).topic_id
    raw = (uid.get_most_significant_bits() % 2**64).to_bytes(8, "big") + (
        uid.get_least_significant_bits() % 2**64).to_bytes(8, "big")
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def test_kafka_formatters_read_consumer_offsets(target, java_tools) -> None:
    """__consumer_offsets holds Kafka's own records: Kafka 4.x's OffsetsMessageFormatter and
    GroupMetadataMessageFormatter decode what the broker wrote (an offset commit with the topic's id, which Kafka
    4.4 fills in for a commit by topic name; group metadata)."""
    from kafka import KafkaConsumer, OffsetAndMetadata, TopicPartition

    from kop.coordinator.records import partition_for

    broker = target.broker(groupInitialRebalanceDelayMs=0)
    b = broker.bootstrap
    topic = target.topic("fmt")
    group = "g-" + topic
    create_topic(b, topic, 1)
    c = KafkaConsumer(bootstrap_servers=b, group_id=group, client_id="fmt-client", enable_auto_commit=False)
    try:
        c.partitions_for_topic(topic)
        c.subscribe([topic])
        wait_for("an assignment", lambda: c.poll(timeout_ms=100) is not None and c.assignment())
        c.commit({TopicPartition(topic, 0): OffsetAndMetadata(7, "meta", 3)})
    finally:
        c.close(autocommit=False)
    n = len(KafkaConsumer(bootstrap_servers=b).partitions_for_topic("__consumer_offsets"))
    part = partition_for(group, n)
    # the group's records are in the log once its commit and its close have been answered: the formatters read
    # exactly the partition's records (--max-messages ends each run; --timeout-ms is liveness only)
    count = len(partition_records(b, "__consumer_offsets", [part])[part])
    outputs = {}
    for fmt in ("OffsetsMessageFormatter", "GroupMetadataMessageFormatter"):
        r = java_tools.run("kafka-console-consumer", "--bootstrap-server", b, "--topic", "__consumer_offsets",
                           "--partition", part, "--offset", "earliest", "--max-messages", count,
                           "--timeout-ms", 60000, "--formatter", f"org.apache.kafka.tools.consumer.{fmt}")
        outputs[fmt] = [o for o in _json_objects(r.stdout) if o["key"]["data"].get("group") == group]
    offsets = [o for o in outputs["OffsetsMessageFormatter"] if o["key"]["type"] == 1]
    assert [(o["key"]["data"], o["value"]["version"], {k: v for k, v in o["value"]["data"].items()
                                                        if k != "commitTimestamp"}) for o in offsets] == [
        ({"group": group, "topic": topic, "partition": 0}, 4,
         {"offset": 7, "leaderEpoch": 3, "metadata": "meta", "topicId": _topic_id(b, topic)})]
    groups = [o["value"] for o in outputs["GroupMetadataMessageFormatter"] if o["key"]["type"] == 2]
    stable = [g["data"] for g in groups if g and g["data"]["members"]]
    assert stable and all(g["protocolType"] == "consumer" and g["protocol"] == "range" for g in stable), groups
    assert {(m["clientId"], m["clientHost"]) for g in stable for m in g["members"]} == {("fmt-client", "/127.0.0.1")}
    assert groups[-1]["version"] == 3 and groups[-1]["data"]["members"] == [], groups[-1]  # it left: Empty
