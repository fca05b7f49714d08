"""Acceptance (issue 15): Spark's Kafka source with kafka.isolation.level=read_committed reads exactly the
committed records of a topic that holds committed and aborted transactions (their markers leave offset gaps),
and read_uncommitted reads the aborted ones too; on our broker and on Apache Kafka 4.x."""

from __future__ import annotations

import pytest

from tests.support.clients import create_topic
from tests.support.spark import spark_session


@pytest.fixture(scope="module")
def spark():
    session = spark_session("kop-test-spark-transactions")
    yield session
    session.stop()


def test_spark_read_committed(target, spark) -> None:
    from confluent_kafka import Producer

    b = target.broker()
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
