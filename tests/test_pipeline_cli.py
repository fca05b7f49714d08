"""`kop pipeline ...` as a command: bad input is reported in one line with exit status 2, before any JVM
starts (an operator should not wait for Spark to learn that a topic name is misspelt). The jobs themselves
run against our broker in tests/e2e/test_spark_*.py."""

from __future__ import annotations

import subprocess
import sys


def kop(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "kop.cli", "pipeline", *args], capture_output=True, text=True,
                          timeout=120)


def test_unknown_topic_and_impossible_ranges_exit_2_without_spark(kop_broker) -> None:
    from tests.support.clients import create_topic

    broker = kop_broker(allowAutoTopicCreation="true")
    r = kop("audit", "--bootstrap-server", broker.bootstrap, "--topic", "nope")
    assert r.returncode == 2 and "kop pipeline: topic 'nope' does not exist" in r.stderr, r.stderr
    assert "Spark" not in r.stderr and "jdk.incubator" not in r.stderr  # no JVM was started

    create_topic(broker.bootstrap, "two", 2)
    r = kop("audit", "--bootstrap-server", broker.bootstrap, "--topic", "two", "--from-offsets", '{"5": 0}')
    assert r.returncode == 2 and "has partitions [0, 1], not [5]" in r.stderr, r.stderr
    r = kop("audit", "--bootstrap-server", broker.bootstrap, "--topic", "two", "--to-offsets", '{"0": 10}')
    assert r.returncode == 2 and "past the log end offset 0" in r.stderr, r.stderr
    assert "nope" not in broker.log_path.read_text(), "the audit's Metadata request auto-created the topic"


def test_bad_json_exits_2() -> None:
    r = kop("audit", "--bootstrap-server", "127.0.0.1:1", "--topic", "t", "--from-offsets", "{oops")
    assert r.returncode == 2 and "offsets JSON '{oops'" in r.stderr, r.stderr


def test_contradicting_isolation_levels_exit_2() -> None:
    r = kop("audit", "--bootstrap-server", "127.0.0.1:1", "--topic", "t", "--isolation-level", "read_committed",
            "--option", "kafka.isolation.level=read_uncommitted")
    assert r.returncode == 2 and "contradicts the option kafka.isolation.level=read_uncommitted" in r.stderr, r.stderr


def test_stream_requires_its_sinks() -> None:
    r = kop("stream", "--bootstrap-server", "127.0.0.1:1", "--topic", "t")
    assert r.returncode == 2 and "--output-topic" in r.stderr and "--checkpoint" in r.stderr, r.stderr
