"""Issue 23, the admin failures of "Why": `kafka-log-dirs --describe`, `kafka-client-metrics` (--list, and a
subscription's --alter / --describe / --delete, kop/kafka/apis/client_metrics_configs.py),
`kafka-configs --describe --all --entity-type brokers` and the topic configs Kafka 4.3/4.4 added, through Kafka's
own tools (tests/support/java.py), on our broker and on Apache Kafka with the same assertions.

One test compares the two brokers' `kafka-configs --describe --all` directly (ours and the session's Apache
Kafka): the same topic configs, and a broker list of Kafka's names that holds every broker-level synonym Kafka
gives a topic config (issue 23 found 23 broker configs listed).

The tools and the `kafka` target are the suite's Kafka 4.4.0 (tests/support/java.py): LogDirsCommand sends
DescribeLogDirs, ClientMetricsCommand ListConfigResources v1 (KIP-1142), and the four topic configs Kafka 4.3/4.4
added are described, set and validated by both brokers alike. The protocol details (every version, error codes,
decoder limits) are unit tests: tests/test_kafka_admin_44.py, tests/test_protocol_limits.py.
"""

from __future__ import annotations

import json
import os
import re
import uuid

from tests.support.clients import create_topic

LOG_DIRS = "org.apache.kafka.tools.LogDirsCommand"
CLIENT_METRICS = "org.apache.kafka.tools.ClientMetricsCommand"
CLIENT_METRICS_RESOURCE, INVALID_REQUEST = 16, 42
INT_MAX = 2**31 - 1
NEW_TOPIC_CONFIGS = {  # Kafka 4.4's types and defaults (LogConfig)
    "max.decompressed.message.bytes": "2147483639",
    "remote.copy.lag.ms": "0",
    "remote.copy.lag.bytes": "-1",
    "errors.deadletterqueue.group.enable": "false",
}


def _entries(stdout: str) -> dict[str, str]:
    """kafka-configs --describe's `  name=value sensitive=... synonyms={...}` lines as {name: value}."""
    out = {}
    for line in stdout.splitlines():
        m = re.match(r"^  ([^=\s]+)=(.*?) sensitive=(true|false) synonyms=\{.*\}$", line)
        if m:
            out[m.group(1)] = m.group(2)
    return out


def _produce(bootstrap: str, topic: str, partition: int, values: list[bytes]) -> None:
    from confluent_kafka import Producer

    errors: list[object] = []
    p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 0})
    for v in values:
        p.produce(topic, value=v, partition=partition, on_delivery=lambda err, msg: errors.append(err) if err else None)
    assert p.flush(60) == 0 and not errors, errors


def _log_dirs(java_tools, bootstrap: str, topic: str) -> dict:
    r = java_tools.run(LOG_DIRS, "--bootstrap-server", bootstrap, "--describe", "--topic-list", topic, check=True)
    lines = r.lines
    assert lines[0] == "Querying brokers for log directories information", r.stdout
    assert lines[1].startswith("Received log directory information from brokers "), r.stdout
    return json.loads(lines[2])


def test_log_dirs_client_metrics_and_broker_configs_as_kafka(target, java_tools) -> None:
    b = target.module_broker()
    topic = target.topic("logdirs")
    create_topic(b.bootstrap, topic, 2)

    # kafka-log-dirs --describe: one broker, one log dir (ours: the data dir), the topic's two partitions with
    # their real sizes; a partition without records is empty, and the size grows with what is written.
    _produce(b.bootstrap, topic, 0, [b"v" * 1000] * 5)
    described = _log_dirs(java_tools, b.bootstrap, topic)
    assert described["version"] == 1
    (broker,) = described["brokers"]
    assert broker["broker"] == 1
    (log_dir,) = broker["logDirs"]
    assert log_dir["error"] is None
    if target.is_bookkeeper:  # no local directory: the result is named after the BookKeeper metadata service
        assert log_dir["logDir"].startswith("zk"), log_dir["logDir"]
    else:
        assert os.path.isabs(log_dir["logDir"]) and os.path.isdir(log_dir["logDir"])
    sizes = {p["partition"]: p["size"] for p in log_dir["partitions"]}
    assert set(sizes) == {f"{topic}-0", f"{topic}-1"}
    assert sizes[f"{topic}-1"] == 0
    assert sizes[f"{topic}-0"] >= 5000
    assert all(p["offsetLag"] == 0 and p["isFuture"] is False for p in log_dir["partitions"])
    _produce(b.bootstrap, topic, 0, [b"w" * 4000])
    grown = {p["partition"]: p["size"] for p in _log_dirs(java_tools, b.bootstrap, topic)["brokers"][0]["logDirs"][0]
             ["partitions"]}
    assert grown[f"{topic}-0"] >= sizes[f"{topic}-0"] + 4000

    # kafka-client-metrics --list: no client-metrics subscription exists, nothing is listed.
    r = java_tools.run(CLIENT_METRICS, "--bootstrap-server", b.bootstrap, "--list", check=True)
    assert r.stdout.strip() == "", r.stdout

    # kafka-configs --describe --all for the broker: every broker-level synonym of a topic config is there,
    # each INT within an INT (log.segment.bytes is one), the listeners among them.
    r = java_tools.run("kafka-configs", "--bootstrap-server", b.bootstrap, "--describe", "--all",
                       "--entity-type", "brokers", "--entity-name", "1", check=True)
    assert r.lines[0] == "All configs for broker 1 are:", r.stdout
    configs = _entries(r.stdout)
    for name in ("log.segment.bytes", "log.retention.ms", "log.cleanup.policy", "message.max.bytes", "listeners",
                 "num.partitions", "log.roll.ms", "compression.type", "log.cleaner.min.compaction.lag.ms",
                 "log.message.timestamp.after.max.ms", "log.local.retention.ms", "unclean.leader.election.enable"):
        assert name in configs, name
    assert 1 << 20 <= int(configs["log.segment.bytes"]) <= INT_MAX


def _client_metrics(java_tools, bootstrap: str, *args: str, check: bool = True):
    return java_tools.run(CLIENT_METRICS, "--bootstrap-server", bootstrap, *args, check=check)


def _described_subscription(java_tools, bootstrap: str, name: str) -> list[str]:
    """`kafka-client-metrics --describe --name`: the header, then the configs' `name=value` lines."""
    lines = [line.strip() for line in _client_metrics(java_tools, bootstrap, "--describe", "--name", name).lines]
    assert lines[0] == f"Client metrics configs for {name} are:", lines
    return lines[1:]


def _legacy_alter(bootstrap: str, name: str, configs: dict[str, str]) -> tuple[int, str | None]:
    """AlterConfigs v2 (the legacy whole-set form) on a client metrics subscription: (error, message)."""
    from kafka.protocol.admin import AlterConfigsRequest as A

    from tests.support.wire import WireClient

    resource = A.AlterConfigsResource(resource_type=CLIENT_METRICS_RESOURCE, resource_name=name, configs=[
        A.AlterConfigsResource.AlterableConfig(name=k, value=v) for k, v in configs.items()])
    with WireClient(bootstrap) as c:
        (res,) = c.send(A(resources=[resource], validate_only=False), version=2).responses
    return res.error_code, res.error_message or None


def _described_in_full(bootstrap: str, name: str) -> list[tuple]:
    """DescribeConfigs v4 of a client metrics subscription with synonyms and documentation, sorted by name."""
    from kafka.protocol.admin import DescribeConfigsRequest as D

    from tests.support.wire import WireClient

    resource = D.DescribeConfigsResource(resource_type=CLIENT_METRICS_RESOURCE, resource_name=name,
                                         configuration_keys=None)
    with WireClient(bootstrap) as c:
        (res,) = c.send(D(resources=[resource], include_synonyms=True, include_documentation=True), version=4).results
    assert res.error_code == 0, res
    return sorted((e.name, e.value, e.config_source, e.config_type, e.documentation,
                   [(s.name, s.value, s.source) for s in e.synonyms]) for e in res.configs)


def test_client_metrics_subscriptions_as_kafka(target, java_tools) -> None:
    """kafka-client-metrics --alter / --describe / --list / --delete of a KIP-714 subscription and Kafka 4.4's
    two refusals, with Kafka 4.4's output on both brokers."""
    b = target.module_broker()
    name = f"cm-{uuid.uuid4().hex[:8]}"
    r = _client_metrics(java_tools, b.bootstrap, "--alter", "--name", name, "--metrics", "org.apache.kafka.producer.",
                        "--interval", "60000")
    assert r.stdout.strip() == f"Altered client metrics config for {name}.", r.stdout
    assert sorted(_described_subscription(java_tools, b.bootstrap, name)) == [
        "interval.ms=60000", "match=", "metrics=org.apache.kafka.producer."]
    assert name in _client_metrics(java_tools, b.bootstrap, "--list").lines
    # DescribeConfigs in full: set configs CLIENT_METRICS_CONFIG (7) with themselves as synonym, the others
    # DEFAULT_CONFIG (5); INT (3) / LIST (7) types and ConfigDef's documentation
    assert _described_in_full(b.bootstrap, name) == [
        ("interval.ms", "60000", 7, 3, "Metrics push interval in milliseconds", [("interval.ms", "60000", 7)]),
        ("match", "", 5, 7, "Client match criteria", []),
        ("metrics", "org.apache.kafka.producer.", 7, 7, "Telemetry metric name prefix list",
         [("metrics", "org.apache.kafka.producer.", 7)])]

    for args, message in (
        (("--interval", "5"), "Invalid value 5 for interval.ms, interval must be between 100 and 3600000 (1 hour)"),
        (("--match", "client_idx=a"), "Illegal client matching pattern: client_idx=a"),
    ):
        r = _client_metrics(java_tools, b.bootstrap, "--alter", "--name", name, *args, check=False)
        assert r.rc != 0 and message in r.stdout, (r.stdout, r.stderr)

    # the legacy AlterConfigs serves it too, as Kafka's controller does: the named configs become the whole set
    legacy = f"{name}-legacy"
    assert _legacy_alter(b.bootstrap, legacy, {"interval.ms": "1000", "match": "client_id=x.*"}) == (0, None)
    assert sorted(_described_subscription(java_tools, b.bootstrap, legacy)) == [
        "interval.ms=1000", "match=client_id=x.*", "metrics="]
    assert _legacy_alter(b.bootstrap, legacy, {"intervals": "1"}) == (
        INVALID_REQUEST, "Unknown client metrics configuration: intervals")
    assert _legacy_alter(b.bootstrap, legacy, {}) == (0, None)  # nothing left: the subscription is gone

    r = _client_metrics(java_tools, b.bootstrap, "--delete", "--name", name)
    assert r.stdout.strip() == f"Deleted client metrics config for {name}.", r.stdout
    listed = _client_metrics(java_tools, b.bootstrap, "--list").lines
    assert name not in listed and legacy not in listed
    r = _client_metrics(java_tools, b.bootstrap, "--describe", "--name", name)
    assert r.stdout.strip() == f"The client metric resource {name} doesn't exist and doesn't have dynamic config.", \
        r.stdout


def test_a_client_metrics_subscription_survives_a_restart(kop_broker, java_tools) -> None:
    """Ours only: a subscription is in the metadata store before the answer, so a broker killed and started
    again lists and describes it."""
    b = kop_broker()
    _client_metrics(java_tools, b.bootstrap, "--alter", "--name", "kept", "--metrics", "a.,b.", "--match",
                    "client_software_name=kafka-.*")
    b.kill()  # SIGKILL: stored before the answer, nothing left to flush
    b.start()
    assert sorted(_described_subscription(java_tools, b.bootstrap, "kept")) == [
        "interval.ms=300000", "match=client_software_name=kafka-.*", "metrics=a.,b."]


def test_the_43_44_topic_configs_through_kafka_configs(target, java_tools) -> None:
    b = target.module_broker()
    topic = target.topic("cfg44")
    create_topic(b.bootstrap, topic, 1)
    tool = "kafka-configs"

    def configs(*extra: str) -> dict[str, str]:
        r = java_tools.run(tool, "--bootstrap-server", b.bootstrap, "--describe", *extra, "--entity-type", "topics",
                           "--entity-name", topic, check=True)
        return _entries(r.stdout)

    # Described with Kafka's defaults before anything is set.
    every = configs("--all")
    assert {n: every[n] for n in NEW_TOPIC_CONFIGS} == NEW_TOPIC_CONFIGS
    # Set, stored, described as the topic's own with the broker-level synonyms below them.
    r = java_tools.run(tool, "--bootstrap-server", b.bootstrap, "--alter", "--entity-type", "topics",
                       "--entity-name", topic, "--add-config",
                       "max.decompressed.message.bytes=1048576,remote.copy.lag.ms=-1,remote.copy.lag.bytes=0,"
                       "errors.deadletterqueue.group.enable=true", check=True)
    assert r.stdout.strip() == f"Completed updating config for topic {topic}."
    r = java_tools.run(tool, "--bootstrap-server", b.bootstrap, "--describe", "--entity-type", "topics",
                       "--entity-name", topic, check=True)
    assert sorted(r.lines[1:]) == [
        "  errors.deadletterqueue.group.enable=true sensitive=false "
        "synonyms={DYNAMIC_TOPIC_CONFIG:errors.deadletterqueue.group.enable=true}",
        "  max.decompressed.message.bytes=1048576 sensitive=false "
        "synonyms={DYNAMIC_TOPIC_CONFIG:max.decompressed.message.bytes=1048576, "
        "DEFAULT_CONFIG:max.decompressed.message.bytes=2147483639}",
        "  remote.copy.lag.bytes=0 sensitive=false "
        "synonyms={DYNAMIC_TOPIC_CONFIG:remote.copy.lag.bytes=0, DEFAULT_CONFIG:log.remote.copy.lag.bytes=-1}",
        "  remote.copy.lag.ms=-1 sensitive=false "
        "synonyms={DYNAMIC_TOPIC_CONFIG:remote.copy.lag.ms=-1, DEFAULT_CONFIG:log.remote.copy.lag.ms=0}",
    ], r.stdout
    # Validated with Kafka's rules and messages; a refused change leaves the topic as it was.
    for config, message in [
        ("max.decompressed.message.bytes=0",
         "Invalid value 0 for configuration max.decompressed.message.bytes: Value must be at least 1"),
        ("remote.copy.lag.ms=-2", "Invalid value -2 for configuration remote.copy.lag.ms: Value must be at least -1"),
        ("errors.deadletterqueue.group.enable=yes",
         "Invalid value yes for configuration errors.deadletterqueue.group.enable: Expected value to be either "
         "true or false"),
    ]:
        r = java_tools.run(tool, "--bootstrap-server", b.bootstrap, "--alter", "--entity-type", "topics",
                           "--entity-name", topic, "--add-config", config)
        assert r.rc != 0 and message in r.stdout + r.stderr, (config, r.stdout, r.stderr)
    assert configs()["max.decompressed.message.bytes"] == "1048576"


def _described_all(java_tools, bootstrap: str, *entity: str) -> dict[str, str]:
    """{name: synonyms} of `kafka-configs --describe --all` for an entity."""
    r = java_tools.run("kafka-configs", "--bootstrap-server", bootstrap, "--describe", "--all", *entity, check=True)
    out = {}
    for line in r.stdout.splitlines():
        m = re.match(r"^  ([^=\s]+)=.*? sensitive=(?:true|false) synonyms=\{(.*)\}$", line)
        if m:
            out[m.group(1)] = m.group(2)
    return out


def test_describe_all_lists_kafkas_topic_and_broker_configs(kafka_server, kop_broker, java_tools) -> None:
    """Ours only (it compares with the session's Apache Kafka 4.4): the topic configs of `--describe --all` are
    Kafka's, the broker's are Kafka's names, and among them every broker-level synonym (the log.* name) that Kafka
    shows for a topic config and lists for its broker."""
    ours = kop_broker()
    found = {}
    for name, b in (("kop", ours), ("kafka", kafka_server)):
        topic = f"descall-{uuid.uuid4().hex[:8]}"
        create_topic(b.bootstrap, topic, 1)
        found[name] = (_described_all(java_tools, b.bootstrap, "--entity-type", "topics", "--entity-name", topic),
                       _described_all(java_tools, b.bootstrap, "--entity-type", "brokers", "--entity-name", "1"))
    (kop_topic, kop_broker_cfg), (kafka_topic, kafka_broker_cfg) = found["kop"], found["kafka"]
    assert sorted(kop_topic) == sorted(kafka_topic)
    assert set(kop_broker_cfg) <= set(kafka_broker_cfg), sorted(set(kop_broker_cfg) - set(kafka_broker_cfg))
    synonyms = {s for syn in kafka_topic.values() for s in re.findall(r"[A-Z_]+:([^=]+)=", syn)}
    wanted = synonyms & set(kafka_broker_cfg) - set(kafka_topic)
    assert len(wanted) >= 20, wanted
    assert not wanted - set(kop_broker_cfg), sorted(wanted - set(kop_broker_cfg))
