"""A Kafka 4.4 Java client (kafka-clients 4.4.0, the suite's Kafka jars: tests/support/java.py) against the
broker: its admin client describes a topic and the cluster, its producer writes to it, its consumer reads it back in a group,
commits and reads the committed offsets; then a transactional producer and a read_committed consumer read the
records again and commit their offsets in a transaction (tests/support/Kafka44Probe.java).

On `kop` the broker's request metrics (kop_server_request_latency_seconds_count, by api and version, on the
admin port's /metrics) then show that every connection asked ApiVersions once, at v5 (no UNSUPPORTED_VERSION
answer and retry at v4: that answer is counted as v0), and that Produce, Fetch, ListOffsets, Metadata,
OffsetCommit, OffsetFetch, DescribeTopicPartitions, DescribeCluster, TxnOffsetCommit and EndTxn ran at the versions Kafka 4.4
uses against Apache Kafka, never lower; and, transaction.version 2 being finalized, that the producer sent
neither AddPartitionsToTxn nor AddOffsetsToTxn (KIP-890: the broker adds the partitions itself). On `kafka`
(Apache Kafka 4.4) the same client gives the same output.
"""

from __future__ import annotations

import os
import re
import subprocess
import urllib.request
import uuid
from pathlib import Path

from tests.support.clients import create_topic
from tests.support.java import (
    KAFKA_LIBS,
    REPO_ROOT,
    JavaToolsMissing,
    check_kafka_libs,
    compiled_probe,
    java_executable,
)

PROBE = Path(__file__).resolve().parent.parent / "support" / "Kafka44Probe.java"

#: api name -> the version a Kafka 4.4 client uses (its newest) for it
KAFKA44_VERSIONS = {
    "ApiVersions": 5, "Produce": 13, "Fetch": 18, "ListOffsets": 11, "Metadata": 13, "OffsetCommit": 10,
    "OffsetFetch": 10, "DescribeTopicPartitions": 0, "TxnOffsetCommit": 6, "EndTxn": 5,
    "DescribeCluster": 2,
}
#: what a transaction.version 2 producer never sends
CLASSIC_TXN_APIS = ("AddPartitionsToTxn", "AddOffsetsToTxn")
COUNT = 12
PARTITIONS = 3

_SAMPLE = re.compile(r'^kop_server_request_latency_seconds_count\{api="([^"]+)",version="(\d+)"\} (\S+)$', re.M)


def _libs() -> Path:
    libs = check_kafka_libs()
    if not list(libs.glob("kafka-clients-4.4.*.jar")):
        raise JavaToolsMissing(f"the Kafka 4.4 client is not in {KAFKA_LIBS} - run scripts/setup")
    return libs


def _run_probe(bootstrap: str, topic: str, group: str) -> list[str]:
    classpath = f"{_libs()}/*"
    jar = compiled_probe(PROBE, classpath)
    cmd = [java_executable(), "-Xmx256m", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1",
           f"-Dlog4j2.configurationFile={REPO_ROOT / 'tools' / 'java' / 'log4j2.properties'}",
           "-cp", f"{classpath}{os.pathsep}{jar}", PROBE.stem, "run", bootstrap, topic, group, str(COUNT)]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=180, stdin=subprocess.DEVNULL)
    assert r.returncode == 0, f"Kafka44Probe exited {r.returncode}\n{r.stdout[-2000:]}\n{r.stderr[-4000:]}"
    return [line for line in r.stdout.splitlines() if line.split(" ", 1)[0] in
            ("PARTITIONS", "NODES", "SENT", "READ", "COMMITTED", "TXN", "DONE")]


def _request_counts(admin_url: str) -> dict[tuple[str, int], float]:
    text = urllib.request.urlopen(admin_url + "/metrics", timeout=30).read().decode()
    return {(api, int(v)): float(n) for api, v, n in _SAMPLE.findall(text)}


def test_kafka44_client_round_trip_at_its_own_versions(target) -> None:
    broker = target.broker()
    topic = f"k44-{uuid.uuid4().hex[:8]}"
    group = f"k44-g-{uuid.uuid4().hex[:8]}"
    create_topic(broker.bootstrap, topic, partitions=PARTITIONS)
    before = _request_counts(broker.admin_url) if target.is_kop else {}

    out = _run_probe(broker.bootstrap, topic, group)

    assert out[:3] == [f"PARTITIONS {PARTITIONS}", "NODES 1", f"SENT {COUNT}"]
    read = sorted(line.split()[1] for line in out if line.startswith("READ "))
    assert read == sorted(f"v{i}" for i in range(COUNT))
    committed = {int(p): int(o) for _, p, o in (line.split() for line in out if line.startswith("COMMITTED "))}
    assert set(committed) == set(range(PARTITIONS)) and sum(committed.values()) == COUNT
    # the transactional group committed, with the transaction, the same positions (the records before its own)
    in_txn = {int(p): int(o) for _, p, o in (line.split() for line in out if line.startswith("TXN "))}
    assert in_txn == committed, out
    assert out[-1] == "DONE"
    if not target.is_kop:
        return

    after = _request_counts(broker.admin_url)
    ran = {key: n - before.get(key, 0) for key, n in after.items() if n - before.get(key, 0) > 0}
    by_api: dict[str, dict[int, float]] = {}
    for (api, version), n in ran.items():
        by_api.setdefault(api, {})[version] = n
    for api, version in KAFKA44_VERSIONS.items():
        assert by_api.get(api, {}).keys() == {version}, f"{api} ran at {by_api.get(api)}, expected only v{version}: {by_api}"
    assert not set(CLASSIC_TXN_APIS) & set(by_api), by_api
