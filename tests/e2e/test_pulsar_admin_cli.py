"""`pulsar-admin`, Apache Pulsar's own CLI (pulsar-client-tools 5.0.1 from Maven Central), driving tenants,
namespaces and their policies, topic policies, topics of both kinds, subscriptions and compaction (issue 22) - on
the reference `pulsar` and on our broker (`kop`, `kop-bk`), the same assertions on each: the CLI's exit code and
what it prints, which is what an operator's scripts read.

The CLI runs through tests/support/pulsar_admin_cli.py: one JVM per broker for the whole module, each command
line through PulsarAdminTool's own entry (exit code 0 or 1, as its main exits). Each test makes its own tenant and
namespace (the reference is shared by the session) and deletes them at its end; a refusal is asserted with the
CLI's exit code and the first line it prints (Pulsar's reason, as the CLI shows it: "<reason>\n\nReason: <reason>").
Messages come from pulsar-client, since what the CLI shows of a topic (stats, backlogs, cursors, compaction)
needs some.

Not compared: topic stats fields this broker does not compute (ownerBroker, oldestBacklogMessageAgeSeconds) - the
assertions read the counters, backlogs and applied policies both brokers show. The call-by-call REST comparison
is tests/e2e/test_pulsar_admin_diff.py, the Java admin client's tests/e2e/test_pulsar_admin_java.py.
"""

from __future__ import annotations

import re
import uuid

import pulsar
import pytest

from tests.support.pulsar_admin_cli import CliResult, PulsarAdminCli, PulsarAdminSession

PULSAR_SIDE_TARGETS = ("pulsar", "kop", "kop-bk")
CLUSTER = "standalone"  # both brokers' clusterName in the suite
RECEIVE_MS = 30_000  # a generous bound for one receive under load; never a measured quantity


@pytest.fixture(scope="module")
def cli_sessions():
    """One pulsar-admin JVM per broker (admin URL) for the whole module."""
    sessions: dict[str, PulsarAdminSession] = {}
    yield sessions
    for s in sessions.values():
        s.close()


@pytest.fixture
def admin(pulsar_broker, cli_sessions) -> PulsarAdminSession:
    s = cli_sessions.get(pulsar_broker.admin_url)
    if s is None or not s.alive():
        s = cli_sessions[pulsar_broker.admin_url] = PulsarAdminCli(pulsar_broker.admin_url).session()
    return s


@pytest.fixture
def client(pulsar_client):
    return pulsar_client


@pytest.fixture
def namespace(admin):
    """A tenant and namespace of the test's own, made and (at the end) removed with the CLI."""
    tenant = f"cli-{uuid.uuid4().hex[:8]}"
    ok(admin("tenants", "create", tenant, "-c", CLUSTER))
    ok(admin("namespaces", "create", f"{tenant}/ns"))
    yield f"{tenant}/ns"
    for kind, listing, delete in (("partitioned", "list-partitioned-topics", "delete-partitioned-topic"),
                                  ("plain", "list", "delete")):
        for topic in admin("topics", listing, f"{tenant}/ns").lines:
            if kind == "partitioned" or "-partition-" not in topic:
                admin("topics", delete, topic)
    ok(admin("namespaces", "delete", f"{tenant}/ns"))
    ok(admin("tenants", "delete", tenant))


def ok(result: CliResult, out: str = "") -> CliResult:
    """A command that succeeded and printed `out` (nothing, by default) and nothing on stderr."""
    result.check()
    assert (result.stdout, result.stderr) == (out, ""), result
    return result


def refused(result: CliResult, reason: str | re.Pattern[str]) -> None:
    """Exit code 1 and Pulsar's reason, as the CLI prints a refusal: the reason, a blank line, "Reason: <reason>".
    A pattern where the reference's words depend on a race (which partition answered first)."""
    assert result.rc == 1, result
    assert result.stdout == "", result
    first, blank, last = (result.stderr.split("\n") + ["", ""])[:3]
    assert (blank, last) == ("", f"Reason: {first}"), result
    if isinstance(reason, str):
        assert first == reason, result
    else:
        assert reason.fullmatch(first), result


def produce(client: pulsar.Client, topic: str, n: int, keys: list[str] | None = None) -> list[pulsar.MessageId]:
    producer = client.create_producer(topic, batching_enabled=False)
    ids = [producer.send(f"v-{i}".encode(), partition_key=keys[i] if keys else None) for i in range(n)]
    producer.close()
    return ids


# ---- tenants and namespaces ---------------------------------------------------------------------------------


def test_tenants_and_namespaces(target, admin):
    tenant = f"cli-{uuid.uuid4().hex[:8]}"
    ok(admin("tenants", "create", tenant, "-c", CLUSTER, "-r", "ops"))
    assert tenant in admin("tenants", "list").check().lines
    assert admin("tenants", "get", tenant).json() == {"adminRoles": ["ops"], "allowedClusters": [CLUSTER]}
    refused(admin("tenants", "create", tenant, "-c", CLUSTER), "Tenant already exist")
    refused(admin("namespaces", "create", f"{tenant}-missing/ns"), "Tenant does not exist")
    refused(admin("tenants", "create", f"{tenant}-x", "-c", "no-such-cluster"), "Clusters do not exist")
    refused(admin("namespaces", "delete", f"{tenant}/nope"), f"Namespace {tenant}/nope does not exist.")

    ok(admin("namespaces", "create", f"{tenant}/a"))
    ok(admin("namespaces", "create", f"{tenant}/b"))
    refused(admin("namespaces", "create", f"{tenant}/a"), "Namespace already exists")
    assert sorted(admin("namespaces", "list", tenant).check().lines) == [f"{tenant}/a", f"{tenant}/b"]
    refused(admin("tenants", "delete", tenant), "The tenant still has active namespaces")
    ok(admin("namespaces", "delete", f"{tenant}/a"))
    ok(admin("namespaces", "delete", f"{tenant}/b"))
    assert admin("namespaces", "list", tenant).check().lines == []
    ok(admin("tenants", "delete", tenant))
    assert tenant not in admin("tenants", "list").check().lines
    refused(admin("tenants", "get", tenant), "Tenant does not exist")


# policy -> (set arguments, getter, what the getter prints once set, the remover)
POLICIES: dict[str, tuple[list[str], str, str, str]] = {
    "retention": (["set-retention", "-s", "100M", "-t", "60m"], "get-retention",
                  '{\n  "retentionTimeInMinutes" : 60,\n  "retentionSizeInMB" : 100\n}\n', "remove-retention"),
    "message TTL": (["set-message-ttl", "-ttl", "120"], "get-message-ttl", "120\n", "remove-message-ttl"),
    "deduplication": (["set-deduplication", "--enable"], "get-deduplication", "true\n", "remove-deduplication"),
    "backlog quota": (["set-backlog-quota", "-l", "10M", "-p", "producer_exception"], "get-backlog-quotas",
                      "destination_storage    BacklogQuotaImpl(limit=10485760, limitSize=10485760, limitTime=-1, "
                      "policy=producer_exception)\n", "remove-backlog-quota"),
    "max producers": (["set-max-producers-per-topic", "-p", "3"], "get-max-producers-per-topic", "3\n",
                      "remove-max-producers-per-topic"),
    "max consumers": (["set-max-consumers-per-topic", "-c", "4"], "get-max-consumers-per-topic", "4\n",
                      "remove-max-consumers-per-topic"),
    "auto topic creation": (["set-auto-topic-creation", "--enable", "-t", "partitioned", "-n", "2"],
                            "get-auto-topic-creation", '{\n  "allowAutoTopicCreation" : true,\n  "topicType" : '
                            '"partitioned",\n  "defaultNumPartitions" : 2\n}\n', "remove-auto-topic-creation"),
}


def test_namespace_policies(target, admin, namespace):
    """Each policy: unset, set, read back as the CLI prints it, removed - then unset again."""
    for name, (setter, getter, shown, remover) in POLICIES.items():
        unset = "" if name == "backlog quota" else "null\n"  # the quota map is printed entry by entry
        assert ok(admin("namespaces", getter, namespace), unset), name
        ok(admin("namespaces", setter[0], namespace, *setter[1:]))
        assert ok(admin("namespaces", getter, namespace), shown), name
        ok(admin("namespaces", remover, namespace))
        assert ok(admin("namespaces", getter, namespace), unset), name
    # the schema compatibility strategy has no remover: UNDEFINED is its unset value
    ok(admin("namespaces", "get-schema-compatibility-strategy", namespace), "UNDEFINED\n")
    ok(admin("namespaces", "set-schema-compatibility-strategy", namespace, "-c", "BACKWARD"))
    ok(admin("namespaces", "get-schema-compatibility-strategy", namespace), "BACKWARD\n")
    ok(admin("namespaces", "set-schema-compatibility-strategy", namespace, "-c", "UNDEFINED"))
    ok(admin("namespaces", "get-schema-compatibility-strategy", namespace), "UNDEFINED\n")
    # a namespace with a policy set is deleted with it (the fixture's delete): no leftover refuses it
    ok(admin("namespaces", "set-message-ttl", namespace, "-ttl", "60"))


def test_topic_policies(target, admin, namespace):
    """`topicPolicies`: a topic's own policy over its namespace's, and `-ap` (applied) showing which one holds."""
    topic = f"persistent://{namespace}/policed"
    ok(admin("topics", "create", topic))
    ok(admin("namespaces", "set-message-ttl", namespace, "-ttl", "300"))
    ok(admin("topicPolicies", "get-message-ttl", topic), "null\n")
    ok(admin("topicPolicies", "get-message-ttl", topic, "-ap"), "300\n")
    ok(admin("topicPolicies", "set-message-ttl", topic, "-t", "120"))
    ok(admin("topicPolicies", "get-message-ttl", topic), "120\n")
    ok(admin("topicPolicies", "get-message-ttl", topic, "-ap"), "120\n")
    ok(admin("topicPolicies", "set-max-producers", topic, "-p", "2"))
    ok(admin("topicPolicies", "get-max-producers", topic), "2\n")
    ok(admin("topicPolicies", "set-retention", topic, "-s", "10M", "-t", "1h"))
    ok(admin("topicPolicies", "get-retention", topic),
       '{\n  "retentionTimeInMinutes" : 60,\n  "retentionSizeInMB" : 10\n}\n')
    ok(admin("topicPolicies", "set-deduplication", topic, "--enable"))
    ok(admin("topicPolicies", "get-deduplication", topic), "true\n")
    ok(admin("topicPolicies", "remove-message-ttl", topic))
    ok(admin("topicPolicies", "get-message-ttl", topic), "null\n")
    ok(admin("topicPolicies", "get-message-ttl", topic, "-ap"), "300\n")
    missing = f"persistent://{namespace}/missing"
    refused(admin("topicPolicies", "get-message-ttl", missing), f"Topic {missing} not found")


# ---- topics --------------------------------------------------------------------------------------------------


def test_topics_of_both_kinds(target, admin, client, namespace):
    plain, parted = f"persistent://{namespace}/plain", f"persistent://{namespace}/parted"
    ok(admin("topics", "create", plain))
    ok(admin("topics", "create-partitioned-topic", parted, "-p", "3"))
    refused(admin("topics", "create", plain), "This topic already exists")
    refused(admin("topics", "create-partitioned-topic", parted, "-p", "3"), "This topic already exists")
    assert sorted(admin("topics", "list", namespace).check().lines) == sorted(
        [plain, *(f"{parted}-partition-{p}" for p in range(3))])
    assert admin("topics", "list-partitioned-topics", namespace).check().lines == [parted]
    assert admin("topics", "get-partitioned-topic-metadata", parted).json() == {"partitions": 3, "deleted": False}
    assert admin("topics", "get-partitioned-topic-metadata", plain).json() == {"partitions": 0, "deleted": False}

    produce(client, plain, 4)
    produce(client, parted, 6, keys=[f"k{i}" for i in range(6)])
    stats = admin("topics", "stats", plain).json()
    assert isinstance(stats, dict), stats
    assert (stats["msgInCounter"], stats["publishers"], stats["subscriptions"]) == (4, [], {})
    # the policies that apply, as the stats show them: no backlog quota (-1), de-duplication off
    assert (stats["backlogQuotaLimitSize"], stats["backlogQuotaLimitTime"], stats["deduplicationStatus"]) == (
        -1, -1, "Disabled")
    parted_stats = admin("topics", "partitioned-stats", parted, "--per-partition").json()
    assert isinstance(parted_stats, dict), parted_stats
    assert parted_stats["msgInCounter"] == 6
    assert parted_stats["metadata"] == {"partitions": 3, "deleted": False}
    assert (parted_stats["backlogQuotaLimitSize"], parted_stats["backlogQuotaLimitTime"]) == (-1, -1)
    assert sorted(parted_stats["partitions"]) == [f"{parted}-partition-{p}" for p in range(3)]
    msg_counts = {p: s["msgInCounter"] for p, s in parted_stats["partitions"].items()}
    assert sum(msg_counts.values()) == 6

    # subscriptions on a partitioned topic's base name act on each partition; a missing one is named by partition
    ok(admin("topics", "create-subscription", parted, "-s", "s1", "-m", "earliest"))
    assert admin("topics", "subscriptions", parted).check().lines == ["s1"]
    assert {p: s["subscriptions"]["s1"]["msgBacklog"] for p, s in admin(
        "topics", "partitioned-stats", parted, "--per-partition").json()["partitions"].items()} == msg_counts
    refused(admin("topics", "unsubscribe", parted, "-s", "s2"), "Subscription not found")
    refused(admin("topics", "reset-cursor", parted, "-s", "s2", "-t", "1h"),
            re.compile(f"Subscription s2 not found for topic {re.escape(parted)}-partition-[0-2]"))
    ok(admin("topics", "unsubscribe", parted, "-s", "s1"))

    # what does not exist
    missing = f"persistent://{namespace}/missing"
    for verb in ("stats", "subscriptions", "compaction-status"):
        refused(admin("topics", verb, missing), f"Topic {missing} not found")
    refused(admin("topics", "create", f"persistent://{namespace}-nope/t"), "Namespace not found")
    refused(admin("topics", "list", f"{namespace}-nope"), "Namespace does not exist")

    # the wrong delete for the kind: the CLI prints the 409 on stdout and exits 0 for `delete`, 1 for the other
    wrong = admin("topics", "delete", parted).check()
    assert wrong.stdout == (f"Failed to delete topic: {parted}. Exception: org.apache.pulsar.client.admin."
                            f"PulsarAdminException$ConflictException: {parted} is a partitioned topic, instead of "
                            f"calling delete topic, please call delete-partitioned-topic.\n"), wrong
    refused(admin("topics", "delete-partitioned-topic", plain),
            f"{plain} is a non-partitioned topic. Instead of calling delete-partitioned-topic please call delete.")
    ok(admin("topics", "delete", plain))
    ok(admin("topics", "delete-partitioned-topic", parted))
    assert admin("topics", "list", namespace).check().lines == []
    assert admin("topics", "list-partitioned-topics", namespace).check().lines == []


def _backlog(admin: PulsarAdminSession, topic: str, sub: str) -> int:
    stats = admin("topics", "stats", topic).json()
    assert isinstance(stats, dict), stats
    return stats["subscriptions"][sub]["msgBacklog"]


def test_subscriptions(target, admin, client, namespace):
    topic = f"persistent://{namespace}/subs"
    ids = produce(client, topic, 5)
    ok(admin("topics", "create-subscription", topic, "-s", "s1", "-m", "earliest"))
    ok(admin("topics", "create-subscription", topic, "-s", "s2"))  # at the end (latest): no backlog
    refused(admin("topics", "create-subscription", topic, "-s", "s1"), "Subscription already exists for topic")
    assert sorted(admin("topics", "subscriptions", topic).check().lines) == ["s1", "s2"]
    assert (_backlog(admin, topic, "s1"), _backlog(admin, topic, "s2")) == (5, 0)

    ok(admin("topics", "skip", topic, "-s", "s1", "-n", "2"))
    assert _backlog(admin, topic, "s1") == 3
    ok(admin("topics", "reset-cursor", topic, "-s", "s1", "-m", f"{ids[1].ledger_id()}:{ids[1].entry_id()}"))
    assert _backlog(admin, topic, "s1") == 4
    ok(admin("topics", "reset-cursor", topic, "-s", "s2", "-t", "1h"))  # every message is younger than an hour
    assert _backlog(admin, topic, "s2") == 5
    consumer = client.subscribe(topic, "s1")  # the reset cursor decides where a consumer starts
    assert consumer.receive(RECEIVE_MS).data() == b"v-1"
    consumer.close()

    ok(admin("topics", "unsubscribe", topic, "-s", "s1"))
    assert admin("topics", "subscriptions", topic).check().lines == ["s2"]
    refused(admin("topics", "unsubscribe", topic, "-s", "s1"), f"Subscription s1 not found for topic {topic}")
    refused(admin("topics", "skip", topic, "-s", "s1", "-n", "1"), f"Subscription s1 not found for topic {topic}")


def test_compaction(target, admin, client, namespace):
    topic = f"persistent://{namespace}/compacted"
    produce(client, topic, 6, keys=["a", "b", "a", "c", "b", "a"])
    ok(admin("topics", "compaction-status", topic), f"Compaction has not been run for {topic} since broker startup\n")
    ok(admin("topics", "compact", topic), f"Topic compaction requested for {topic}\n")
    ok(admin("topics", "compaction-status", topic, "-w"), "Compaction was a success\n")
    reader = client.create_reader(topic, pulsar.MessageId.earliest, is_read_compacted=True)
    latest = [reader.read_next(RECEIVE_MS) for _ in range(3)]
    reader.close()
    assert [(m.partition_key(), m.data()) for m in latest] == [("c", b"v-3"), ("b", b"v-4"), ("a", b"v-5")]

