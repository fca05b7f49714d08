"""Acceptance (issue 15): Kafka Streams with processing.guarantee=exactly_once_v2, an application from Maven
Central jars (Kafka's own WordCountDemo on Kafka Streams 4.4, `.cache/kafka-streams-libs-<version>`, fetched by
scripts/setup from tools/java/kafka-streams/pom.xml), on our broker and on Apache Kafka 4.x.

The application counts words of `streams-plaintext-input` into `streams-wordcount-output` (its topic names are
fixed, hence a dedicated broker per run) through a repartition topic and a changelogged state store, with
one transactional producer per stream thread and read_committed consumers. It is SIGKILLed once mid-way
and started again; the last count of each word read with read_committed must equal the true counts."""

from __future__ import annotations

import collections
import os
import struct
import subprocess
import time
import uuid
from pathlib import Path

import pytest

from tests.support.clients import create_topic
from tests.support.java import LOG4J2_CONFIG, REPO_ROOT, java_executable, pom_kafka_version

STREAMS_POM = REPO_ROOT / "tools" / "java" / "kafka-streams" / "pom.xml"
STREAMS_LIBS = Path(os.environ.get("KOP_KAFKA_STREAMS_LIBS",
                                   REPO_ROOT / ".cache" / f"kafka-streams-libs-{pom_kafka_version(STREAMS_POM)}"))
MAIN = "org.apache.kafka.streams.examples.wordcount.WordCountDemo"
IN, OUT = "streams-plaintext-input", "streams-wordcount-output"
WORDS = ["alpha", "beta", "gamma", "delta", "epsilon", "zeta", "eta"]
pytestmark = pytest.mark.java


def streams_app(props: Path) -> subprocess.Popen:
    if not (STREAMS_LIBS / ".complete").exists():
        pytest.fail(f"Kafka Streams jars not found in {STREAMS_LIBS} - run scripts/setup", pytrace=False)
    cmd = [java_executable(), "-Xmx384m", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1",
           f"-Dlog4j2.configurationFile={LOG4J2_CONFIG}", "-cp", f"{STREAMS_LIBS}/*", MAIN, str(props)]
    return subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)


def produce_lines(bootstrap: str, lines: list[str]) -> None:
    from confluent_kafka import Producer

    p = Producer({"bootstrap.servers": bootstrap, "acks": "all"})
    for line in lines:
        p.produce(IN, value=line.encode(), partition=0)
    assert p.flush(60) == 0


def last_counts(bootstrap: str, want: dict[str, int], timeout: float = 180) -> dict[str, int]:
    """The last count of every word in the output (read_committed), read until it equals `want` or the
    timeout passes."""
    from confluent_kafka import Consumer

    c = Consumer({"bootstrap.servers": bootstrap, "group.id": f"check-{uuid.uuid4().hex[:6]}",
                  "auto.offset.reset": "earliest", "enable.auto.commit": False, "isolation.level": "read_committed"})
    c.subscribe([OUT])
    got: dict[str, int] = {}
    deadline = time.monotonic() + timeout
    try:
        while got != want and time.monotonic() < deadline:
            m = c.poll(0.5)
            if m is not None and m.error() is None and m.key() is not None:
                got[m.key().decode()] = struct.unpack(">q", m.value())[0]
    finally:
        c.close()
    return got


def test_kafka_streams_exactly_once_v2_word_count(target, tmp_path) -> None:
    b = target.dedicated_broker()
    create_topic(b.bootstrap, IN, 1)
    create_topic(b.bootstrap, OUT, 1)
    props = tmp_path / "eos.properties"
    props.write_text("\n".join([
        f"bootstrap.servers={b.bootstrap}", f"application.id=wc-{uuid.uuid4().hex[:8]}",
        "processing.guarantee=exactly_once_v2", "replication.factor=1", "commit.interval.ms=100",
        f"state.dir={tmp_path / 'state'}", "num.stream.threads=1",
        # The killed instance's member is expired after the session timeout before the new instance's rebalance
        # completes: Kafka's minimum (6 s) rather than Streams' 45 s default keeps that wait short.
        "consumer.session.timeout.ms=6000", "consumer.heartbeat.interval.ms=1500", ""]))
    first = [" ".join(WORDS[(i * j) % len(WORDS)] for j in range(1, 4)) for i in range(60)]
    second = [" ".join(WORDS[(i + j) % len(WORDS)] for j in range(2)) for i in range(40)]
    counts_first = collections.Counter(w for line in first for w in line.split())
    counts_all = counts_first + collections.Counter(w for line in second for w in line.split())
    produce_lines(b.bootstrap, first)
    app = streams_app(props)
    try:
        assert last_counts(b.bootstrap, dict(counts_first)) == dict(counts_first)
        app.kill()  # SIGKILL: the next instance fences the old producer and takes over its state
        app.wait(60)
        produce_lines(b.bootstrap, second)
        app = streams_app(props)
        assert last_counts(b.bootstrap, dict(counts_all)) == dict(counts_all)
    finally:
        app.kill()
        app.wait(60)
