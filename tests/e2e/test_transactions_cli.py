"""Acceptance (issue 15): kafka-transactions.sh (Kafka 4.x's TransactionsCommand) against Apache Kafka 4.x
and against our broker on the same scenario, every output compared; and Kafka's TransactionLogMessageFormatter
reading __transaction_state.

The scenario: a topic of two partitions; a Java producer commits one transaction over both; another opens a
transaction on partition 0 and stays open (the "hanging" one). Then `list`, `describe` (both ids and an
unknown one), `describe-producers`, `find-hanging`, `abort` of the open transaction by its start offset (a
WriteTxnMarkers straight to the partition leader, KIP-664), and `describe-producers` again.

Both brokers finalize transaction.version 2 (the Java producer bumps its epoch at every commit on both).
Output is compared after normalizing what differs by nature: producer ids, time stamps and durations, and
the broker's port. This test runs both brokers itself (it is not parametrized by KOP_E2E_TARGET).
"""

from __future__ import annotations

import difflib
import json
import re
import subprocess
import uuid
from pathlib import Path

from tests.support.clients import create_topic
from tests.support.java import java_command, run_java
from tests.support.kafka_server import KafkaServer

PROBE = Path(__file__).resolve().parent.parent / "support" / "TxnProbe.java"
JVM = ["-Xmx256m", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1"]
TOOL = "org.apache.kafka.tools.TransactionsCommand"


def probe(*args: object) -> list[str]:
    r = run_java(str(PROBE), args, jvm_opts=JVM, capture_output=True, text=True, timeout=180)
    assert r.returncode == 0, f"TxnProbe exited {r.returncode}\n{r.stdout[-2000:]}\n{r.stderr[-4000:]}"
    return r.stdout.splitlines()


_VARYING = {"CurrentTransactionStartTimeMs": "<ts>", "LastTimestamp": "<ts>", "TransactionDurationMs": "<ms>",
            "Duration(min)": "<min>"}


def normalize(text: str, names: dict[str, str], pids: dict[str, str]) -> list[str]:
    """Table rows with names and producer ids replaced by labels and times by placeholders; the rows of a
    table sorted (the tool lists transactions in the order brokers answer)."""
    for key, value in names.items():
        text = text.replace(value, f"<{key}>")
    out: list[str] = []
    header: list[str] | None = None
    rows: list[str] = []
    for line in text.splitlines():
        cells = line.split()
        if not cells:
            continue
        if header is None and len(cells) > 2 and all(re.match(r"^[A-Z][A-Za-z()]+$", c) for c in cells):
            header = cells
            out.append(" ".join(cells))
            continue
        if header is not None and len(cells) >= len(header) - 1:
            for i, col in enumerate(header[:len(cells)]):
                if col in _VARYING:
                    cells[i] = _VARYING[col]
                elif col == "ProducerId":
                    cells[i] = pids.get(cells[i], "<pid>")
            rows.append(" ".join(cells))
            continue
        out.append(" ".join(cells))
    return out + sorted(rows)


def scenario(tools, bootstrap: str, names: dict[str, str]) -> list[tuple[str, list[str]]]:
    topic = names["topic"]
    create_topic(bootstrap, topic, 2)
    assert probe("produce", bootstrap, topic, names["done"], "C2")[-1] == "OK"
    hang = subprocess.Popen(java_command(str(PROBE), ["hang", bootstrap, topic, names["open"], "3"], jvm_opts=JVM),
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    outputs: list[tuple[str, list[str]]] = []
    pids: dict[str, str] = {}
    starts: list[str] = []
    try:
        assert hang.stdout.readline().strip() == "READY", hang.stderr.read()[-4000:]

        def run(label: str, *args: object) -> str:
            r = tools.run(TOOL, "--bootstrap-server", bootstrap, *args, timeout=120)
            text = r.stdout + "\n" + "\n".join(ln for ln in r.stderr.splitlines() if "rror" in ln or "xception" in ln)
            if label == "list":  # learn the producer ids, so they normalize to names
                for line in r.stdout.splitlines()[1:]:
                    cells = line.split()
                    if len(cells) >= 3:
                        pids[cells[2]] = "<pid-" + {names["done"]: "done", names["open"]: "open"}.get(cells[0], "?") + ">"
            if label == "describe-producers p0":  # the open transaction's start offset, for `abort`
                starts.extend(ln.split()[-1] for ln in r.stdout.splitlines()[1:] if ln.split()[-1:] != ["None"])
            outputs.append((label, [f"rc={r.rc}", *normalize(text, names, pids)]))
            return r.stdout

        run("list", "list")
        run("describe done", "describe", "--transactional-id", names["done"])
        run("describe open", "describe", "--transactional-id", names["open"])
        run("describe unknown", "describe", "--transactional-id", names["unknown"])
        run("describe-producers p0", "describe-producers", "--topic", topic, "--partition", 0)
        run("describe-producers p1", "describe-producers", "--topic", topic, "--partition", 1)
        run("find-hanging", "find-hanging", "--broker-id", 1)
        assert len(starts) == 1, outputs[-3:]
        run("abort", "abort", "--topic", topic, "--partition", 0, "--start-offset", starts[0])
        run("describe-producers after abort", "describe-producers", "--topic", topic, "--partition", 0)
    finally:
        hang.kill()
        hang.wait(30)
    return outputs


def test_kafka_transactions_tool_matches_apache_kafka(kop_broker, java_tools, tmp_path) -> None:
    kop = kop_broker(kafkaBrokerId=1)
    kafka = KafkaServer(tmp_path / "apache-kafka").start()  # transaction.version 2, as ours finalizes
    results = {}
    try:
        with java_tools.session() as tools:  # one JVM for every kafka-transactions command
            for label, b in (("apache-kafka", kafka.bootstrap), ("kop", kop.bootstrap)):
                suffix = uuid.uuid4().hex[:8]
                names = {"topic": f"txc-topic-{suffix}", "done": f"txc-done-{suffix}", "open": f"txc-open-{suffix}",
                         "unknown": f"txc-unknown-{suffix}", "bootstrap": b}
                results[label] = scenario(tools, b, names)
    finally:
        kafka.stop()
    print(json.dumps(results, indent=1))
    want, got = results["apache-kafka"], results["kop"]
    assert [label for label, _ in want] == [label for label, _ in got]
    mismatches = []
    for (label, w), (_, g) in zip(want, got, strict=True):
        if w != g:
            diff = "\n".join(difflib.unified_diff(w, g, "apache-kafka", "kop", lineterm="", n=2))
            mismatches.append(f"== kafka-transactions {label}\n{diff}")
    assert not mismatches, f"{len(mismatches)} of {len(want)} outputs differ:\n" + "\n".join(mismatches)
