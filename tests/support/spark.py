"""Helpers for the Spark end-to-end tests (tests/e2e/test_spark_*.py): a lean SparkSession, JSON event
records with known offsets and timestamps, and a producer that reports where every record landed.

The SparkSession is the project's own (kop.pipeline.session.build_session: the connector jars fetched by
scripts/setup, local[2], two shuffle partitions, no UI, WARN logging). A missing pyspark or jar is an error
(SparkSetupError), never a skip.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from .clients import STALL_TIMEOUT

# Every Spark driver JVM the tests start - the test process's own session and each `kop pipeline` command run as a
# process, which inherits this - compiles with C1 only: the tests' jobs are short, so a JVM spends its life
# starting up, and on two cores C2's compiler threads compete with it. A `kop pipeline audit` process took 12-13 s
# instead of 20-21 s (measured back to back on the shared machine). spark-submit puts SPARK_SUBMIT_OPTS on the
# driver's command line in client mode; it is set on import, before any session exists.
os.environ.setdefault("SPARK_SUBMIT_OPTS", "-XX:TieredStopAtLevel=1")


@dataclass(frozen=True, slots=True)
class Event:
    """One produced JSON event and where the broker put it."""

    topic: str
    partition: int
    offset: int
    key: str
    amount: int
    timestamp: int  # CreateTime, ms
    value: bytes


def event_value(key: str, amount: int, seq: int) -> bytes:
    return json.dumps({"key": key, "amount": amount, "seq": seq}, separators=(",", ":")).encode()


class EventProducer:
    """confluent-kafka producer of JSON events to explicit partitions, flushed per chunk so that each chunk
    becomes at least one batch (= one ledger entry) per partition: the tests control how many entries, and
    so how many ledgers, a topic gets. Every delivery report is kept: offsets come from the broker, not
    from assumptions."""

    def __init__(self, bootstrap: str) -> None:
        from confluent_kafka import Producer

        self._producer = Producer({
            "bootstrap.servers": bootstrap, "acks": "all", "enable.idempotence": True, "linger.ms": 1000,
            "batch.num.messages": 100_000, "batch.size": 4 * 1024 * 1024,
        })
        self.delivered: list[Event] = []
        self._errors: list[str] = []
        self._seq = 0

    def produce(self, topic: str, rows: Iterable[tuple[int, str, int, int]]) -> list[Event]:
        """rows: (partition, key, amount, timestamp). Flushes, checks every delivery, returns the events."""
        start = len(self.delivered)

        for partition, key, amount, ts in rows:
            value = event_value(key, amount, self._seq)
            self._seq += 1

            def on_delivery(err, msg, key=key, amount=amount, ts=ts, value=value) -> None:
                if err is not None:
                    self._errors.append(str(err))
                else:
                    self.delivered.append(Event(msg.topic(), msg.partition(), msg.offset(), key, amount, ts, value))

            self._producer.produce(topic, value=value, key=key.encode(), partition=partition, timestamp=ts,
                                   on_delivery=on_delivery)
            self._producer.poll(0)
        remaining = self._producer.flush(STALL_TIMEOUT)
        assert remaining == 0, f"{remaining} records not delivered within {STALL_TIMEOUT}s"
        assert not self._errors, self._errors[:5]
        return self.delivered[start:]

    def end_offsets(self, topic: str) -> dict[int, int]:
        out: dict[int, int] = {}
        for e in self.delivered:
            if e.topic == topic:
                out[e.partition] = max(out.get(e.partition, 0), e.offset + 1)
        return out


def spark_session(app: str):
    from kop.pipeline.session import build_session

    return build_session(app)


def expected_totals(spark, events: Sequence[Event]) -> dict[str, dict[str, int]]:
    """Per key: records, amount, invalid (0) and the XOR of the records' checksums, computed with the job's
    own fingerprint function (Spark's xxhash64) over the offsets the broker reported at delivery."""
    from pyspark.sql import functions as F

    from kop.pipeline.stream import record_checksum

    totals: dict[str, dict[str, int]] = {}
    for e in events:
        t = totals.setdefault(e.key, {"records": 0, "amount": 0, "invalid": 0, "checksum": 0})
        t["records"] += 1
        t["amount"] += e.amount
    if events:
        df = spark.createDataFrame([(e.topic, e.partition, e.offset, e.key) for e in events],
                                   "topic STRING, partition INT, offset LONG, key STRING")
        for r in df.groupBy("key").agg(F.bit_xor(record_checksum()).alias("checksum")).collect():
            totals[r["key"]]["checksum"] = r["checksum"]
    return totals
