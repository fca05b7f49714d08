"""Issue 23: dynamic broker configs through Kafka's own `kafka-configs` (tests/support/java.py; the suite's 4.2
tools send IncrementalAlterConfigs and DescribeConfigs as 4.4's do), on our broker and on Apache Kafka with the
same assertions: `--alter --entity-default` / `--alter --broker 1`, `--describe --entity-type brokers` (dynamic
sources and synonyms), `--delete-config`, a config Kafka keeps static refused with its message, and a dynamic
message.max.bytes refusing a produce without a restart.

Both targets answer broker id 1. Apache Kafka is the session's shared broker: every change is undone in a
`finally`. Kafka applies a committed change when its broker replays the metadata record, a moment after the
tool returns, hence the waits (never a timed assertion). Kafka's rules in detail, and the store a ZooKeeper
cluster shares: tests/test_kafka_broker_configs.py.
"""

from __future__ import annotations

import re

from tests.support.clients import create_topic
from tests.support.net import wait_until

TOOL = "kafka-configs"


def _configs(java_tools, bootstrap: str, *args: str, check: bool = True):
    return java_tools.run(TOOL, "--bootstrap-server", bootstrap, *args, check=check)


def _described(stdout: str) -> dict[str, tuple[str, str]]:
    """kafka-configs --describe's `  name=value sensitive=... synonyms={...}` lines: {name: (value, synonyms)}."""
    out = {}
    for line in stdout.splitlines():
        m = re.match(r"^  ([^=\s]+)=(.*?) sensitive=(?:true|false) synonyms=\{(.*)\}$", line)
        if m:
            out[m.group(1)] = (m.group(2), m.group(3))
    return out


def _send(bootstrap: str, topic: str, size: int) -> bool:
    """Whether a record of `size` bytes is accepted (False: MESSAGE_TOO_LARGE)."""
    from kafka import KafkaProducer
    from kafka.errors import MessageSizeTooLargeError

    p = KafkaProducer(bootstrap_servers=bootstrap, linger_ms=0, retries=0)
    try:
        p.send(topic, b"x" * size).get(timeout=30)
        return True
    except MessageSizeTooLargeError:
        return False
    finally:
        p.close()


def test_kafka_configs_alters_describes_and_deletes_broker_configs(target, java_tools) -> None:
    b = target.broker()
    default = ("--entity-type", "brokers", "--entity-default")
    broker1 = ("--entity-type", "brokers", "--entity-name", "1")
    try:
        # --broker-defaults: the spelling of issue 23's report, the same request as --entity-default
        r = _configs(java_tools, b.bootstrap, "--alter", "--broker-defaults", "--add-config",
                     "log.retention.ms=86400000,log.cleaner.threads=2")
        assert "Completed updating default config for brokers in the cluster." in r.stdout, r.stdout
        r = _configs(java_tools, b.bootstrap, "--alter", "--broker", "1", "--add-config", "log.retention.ms=3600000")
        assert "Completed updating config for broker 1." in r.stdout, r.stdout

        def default_described() -> dict[str, tuple[str, str]]:
            return _described(_configs(java_tools, b.bootstrap, "--describe", *default).stdout)

        wait_until("the default applied", lambda: "log.cleaner.threads" in default_described(), 30)
        r = _configs(java_tools, b.bootstrap, "--describe", *default)
        assert r.lines[0] == "Default configs for brokers in the cluster are:", r.stdout
        mine = ("log.retention.ms", "log.cleaner.threads")
        # (a KRaft cluster's format may have set others, min.insync.replicas: only ours are compared)
        assert {k: v for k, v in _described(r.stdout).items() if k in mine} == {
            "log.retention.ms": ("86400000", "DYNAMIC_DEFAULT_BROKER_CONFIG:log.retention.ms=86400000"),
            "log.cleaner.threads": ("2", "DYNAMIC_DEFAULT_BROKER_CONFIG:log.cleaner.threads=2"),
        }

        r = _configs(java_tools, b.bootstrap, "--describe", *broker1)
        assert r.lines[0] == "Dynamic configs for broker 1 are:", r.stdout
        value, synonyms = _described(r.stdout)["log.retention.ms"]
        assert value == "3600000"
        assert synonyms.startswith("DYNAMIC_BROKER_CONFIG:log.retention.ms=3600000, "
                                   "DYNAMIC_DEFAULT_BROKER_CONFIG:log.retention.ms=86400000"), synonyms

        r = _configs(java_tools, b.bootstrap, "--describe", "--all", *broker1)
        everything = _described(r.stdout)
        assert everything["log.retention.ms"][0] == "3600000"
        assert everything["log.cleaner.threads"][0] == "2"

        # A config Kafka keeps static is refused with Kafka's message; nothing changes.
        r = _configs(java_tools, b.bootstrap, "--alter", "--broker", "1", "--add-config", "num.partitions=3",
                     check=False)
        assert r.rc != 0
        assert "InvalidRequestException: Cannot update these configs dynamically: [num.partitions]" in (
            r.stdout + r.stderr), r.stdout + r.stderr
        # So is a listener setting for every broker at once.
        r = _configs(java_tools, b.bootstrap, "--alter", *default, "--add-config",
                     "listener.security.protocol.map=[PLAINTEXT:PLAINTEXT]", check=False)
        assert r.rc != 0
        assert ("Cannot update these configs at default cluster level, broker id must be specified: "
                "[listener.security.protocol.map]") in r.stdout + r.stderr, r.stdout + r.stderr

        r = _configs(java_tools, b.bootstrap, "--alter", *default, "--delete-config",
                     "log.retention.ms,log.cleaner.threads")
        assert "Completed updating default config for brokers in the cluster." in r.stdout, r.stdout
        wait_until("the default deleted", lambda: not set(mine) & set(default_described()), 30)
    finally:
        _configs(java_tools, b.bootstrap, "--alter", *default, "--delete-config",
                 "log.retention.ms,log.cleaner.threads", check=False)
        _configs(java_tools, b.bootstrap, "--alter", *broker1, "--delete-config", "log.retention.ms", check=False)
    r = _configs(java_tools, b.bootstrap, "--describe", *broker1)
    assert "log.retention.ms" not in _described(r.stdout), r.stdout


def test_a_dynamic_message_max_bytes_refuses_a_produce_without_restart(target, java_tools) -> None:
    b = target.broker()
    topic = target.topic("dyn-max-bytes")
    create_topic(b.bootstrap, topic, 1)
    assert _send(b.bootstrap, topic, 5000)
    default = ("--entity-type", "brokers", "--entity-default")
    try:
        _configs(java_tools, b.bootstrap, "--alter", *default, "--add-config", "message.max.bytes=2000")
        wait_until("message.max.bytes=2000 applied", lambda: not _send(b.bootstrap, topic, 5000), 30)
        assert _send(b.bootstrap, topic, 500)
        r = _configs(java_tools, b.bootstrap, "--describe", "--entity-type", "topics", "--entity-name", topic,
                     "--all")
        value, synonyms = _described(r.stdout)["max.message.bytes"]
        assert value == "2000"
        assert synonyms.startswith("DYNAMIC_DEFAULT_BROKER_CONFIG:message.max.bytes=2000"), synonyms
    finally:
        _configs(java_tools, b.bootstrap, "--alter", *default, "--delete-config", "message.max.bytes", check=False)
    wait_until("message.max.bytes deleted", lambda: _send(b.bootstrap, topic, 5000), 30)

