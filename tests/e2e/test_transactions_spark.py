"""Acceptance (issue 15): Spark's Kafka source with kafka.isolation.level=read_committed reads exactly the
committed records of a topic that holds committed and aborted transactions (their markers leave offset gaps),
and read_uncommitted reads the aborted ones too; on our broker and on Apache Kafka 4.x. The audit job
(`kop pipeline audit`) labels the markers and the aborted records of such a topic as what they are."""

from __future__ import annotations

import json
import subprocess
import sys

from tests.support.clients import STALL_TIMEOUT, create_topic


def test_spark_read_committed(target, spark) -> None:
    from confluent_kafka import Producer

    b = target.module_broker()  # one per module: the test never kills or reconfigures it
    topic = target.topic("txn-spark")
    create_topic(b.bootstrap, topic, 2)
    p = Producer({"bootstrap.servers": b.bootstrap, "transactional.id": f"tx-{topic}"})
    p.init_transactions(60)
    committed, aborted = [], []
    for n, commit in enumerate((True, False, True, False, True)):
        p.begin_transaction()
        for i in range(20):
            v = f"{'c' if commit else 'a'}{n}-{i}"
            (committed if commit else aborted).append(v)
            p.produce(topic, value=v.encode(), partition=i % 2)
        p.flush(60)
        (p.commit_transaction if commit else p.abort_transaction)(60)

    def read(isolation: str) -> list[str]:
        df = (spark.read.format("kafka").option("kafka.bootstrap.servers", b.bootstrap).option("subscribe", topic)
              .option("startingOffsets", "earliest").option("endingOffsets", "latest")
              .option("kafka.isolation.level", isolation).load())
        return sorted(r.value.decode() for r in df.select("value").collect())

    assert read("read_committed") == sorted(committed)
    assert read("read_uncommitted") == sorted(committed + aborted)


def test_audit_labels_markers_and_aborted_transactions(target, spark) -> None:
    """`kop pipeline audit` on a topic with plain records, committed and aborted transactions and one still
    open: every marker is a `control` gap, aborted records are `aborted` gaps under read_committed (which stops
    at the last stable offset) and records under read_uncommitted (which reads to the log end); nothing is
    missing and both reports are OK (the command exits 0)."""
    from confluent_kafka import Producer

    from kop.pipeline.audit import GAP_ABORTED, GAP_CONTROL, audit_topic

    b = target.module_broker()  # one per module: the test never kills or reconfigures it
    topic = target.topic("txn-audit")
    create_topic(b.bootstrap, topic, 2)
    offsets: dict[str, dict[int, list[int]]] = {"plain": {0: [], 1: []}, "committed": {0: [], 1: []},
                                               "aborted": {0: [], 1: []}, "open": {0: [], 1: []}}

    def sink(kind: str):
        def on_delivery(err, msg) -> None:
            assert err is None, err
            offsets[kind][msg.partition()].append(msg.offset())
        return on_delivery

    plain = Producer({"bootstrap.servers": b.bootstrap})
    for i in range(10):
        plain.produce(topic, value=f"plain-{i}".encode(), partition=i % 2, on_delivery=sink("plain"))
    assert plain.flush(60) == 0
    p = Producer({"bootstrap.servers": b.bootstrap, "transactional.id": f"tx-{topic}"})
    p.init_transactions(60)
    for n, commit in enumerate((True, False, True, False, True)):
        p.begin_transaction()
        kind = "committed" if commit else "aborted"
        for i in range(20):
            p.produce(topic, value=f"{kind}{n}-{i}".encode(), partition=i % 2, on_delivery=sink(kind))
        assert p.flush(60) == 0
        (p.commit_transaction if commit else p.abort_transaction)(60)
    # An open transaction (long timeout: it stays open during the audits) holds the last stable offset back.
    o = Producer({"bootstrap.servers": b.bootstrap, "transactional.id": f"open-{topic}",
                  "transaction.timeout.ms": 600_000})
    o.init_transactions(60)
    o.begin_transaction()
    for i in range(6):
        o.produce(topic, value=f"open-{i}".encode(), partition=i % 2, on_delivery=sink("open"))
    assert o.flush(60) == 0

    try:
        # one audit of each isolation level covers both partitions (nothing is written while they run)
        report = audit_topic(spark, b.bootstrap, topic)
        assert report.isolation_level == "read_committed" and report.ok, report.format_table()
        loose = audit_topic(spark, b.bootstrap, topic, isolation_level="read_uncommitted")
        assert loose.ok, loose.format_table()
        for part in (0, 1):
            data = {k: set(v[part]) for k, v in offsets.items()}
            log_end = max(data["open"]) + 1
            lso = min(data["open"])
            markers = set(range(log_end)) - set().union(*data.values())
            assert len(markers) == 5 and max(markers) < lso, markers  # one per finished transaction

            pa = report.partitions[part]
            assert (pa.from_offset, pa.to_offset, pa.log_end) == (0, lso, log_end)
            assert pa.records == len(data["plain"] | data["committed"]) and pa.missing == 0
            assert (pa.control_offsets, pa.aborted_offsets, pa.aborted_read) == (5, len(data["aborted"]), 0)
            labelled = {(g.kind, o) for g in report.gaps if g.partition == part for o in range(g.first, g.last + 1)}
            assert labelled == {(GAP_CONTROL, o) for o in markers} | {(GAP_ABORTED, o) for o in data["aborted"]}

            pu = loose.partitions[part]
            assert (pu.from_offset, pu.to_offset) == (0, log_end)
            assert pu.records == log_end - len(markers) and pu.missing == 0
            assert (pu.control_offsets, pu.aborted_offsets, pu.aborted_read) == (5, 0, len(data["aborted"]))
            assert {(g.kind, o) for g in loose.gaps if g.partition == part for o in range(g.first, g.last + 1)} == {
                (GAP_CONTROL, o) for o in markers}
        text = report.format_table()
        assert "transaction markers (control batches): not data" in text
        assert "records of aborted transactions, hidden by read_committed: not data loss" in text
        assert "MISSING" not in text and text.splitlines()[-1].startswith("OK: ")
        assert "aborted records read 40" in loose.format_table().splitlines()[-1]

        proc = subprocess.run(
            [sys.executable, "-m", "kop.cli", "pipeline", "audit", "--bootstrap-server", b.bootstrap, "--topic", topic,
             "--json"], capture_output=True, text=True, timeout=STALL_TIMEOUT * 3)
        assert proc.returncode == 0, f"exit {proc.returncode}\n{proc.stdout}\n{proc.stderr[-4000:]}"
        doc = json.loads(proc.stdout)
        assert doc["ok"] is True and doc["isolation_level"] == "read_committed", doc
        assert doc["totals"]["control_offsets"] == 10 and doc["totals"]["aborted_offsets"] == 40, doc["totals"]
        assert doc["totals"]["missing"] == 0 and {g["kind"] for g in doc["gaps"]} == {GAP_CONTROL, GAP_ABORTED}
    finally:
        o.abort_transaction(60)
