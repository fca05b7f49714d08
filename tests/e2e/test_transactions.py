"""Acceptance (issue 15): transactions end to end with real clients, on our broker and on Apache Kafka 4.x.

* a Java transactional producer (tests/support/TxnProbe.java, Kafka 4.x client) commits and aborts
  transactions over two partitions; a Java consumer with isolation.level=read_committed reads exactly the
  committed records, one with read_uncommitted reads the aborted ones too;
* confluent-kafka's transactional producer (librdkafka: AddPartitionsToTxn v0, EndTxn v1) and its
  read_committed / read_uncommitted consumers;
* kafka-python's transactional producer;
* aiokafka's transactional producer (every transaction API at v0) in a consume-transform-produce loop with
  send_offsets_to_transaction: the group's committed offset moves with the committed transaction only, and
  an aborted transaction leaves neither output nor offsets behind.
"""

from __future__ import annotations

import asyncio
import subprocess
import time
import uuid
from pathlib import Path

import pytest

from tests.support.clients import create_topic, partition_records
from tests.support.groups import wait_for
from tests.support.java import java_command, run_java

PROBE = Path(__file__).resolve().parent.parent / "support" / "TxnProbe.java"
JVM = ["-Xmx256m", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1"]
pytestmark = pytest.mark.java


def probe(*args: object, timeout: float = 180) -> list[str]:
    r = run_java(str(PROBE), args, jvm_opts=JVM, capture_output=True, text=True, timeout=timeout)
    assert r.returncode == 0, f"TxnProbe {args[0]} exited {r.returncode}\n{r.stdout[-2000:]}\n{r.stderr[-4000:]}"
    return r.stdout.splitlines()


def consume_confluent(bootstrap: str, topic: str, isolation: str, want: int, timeout: float = 60) -> list[str]:
    """Every value of `topic` from the beginning: until `want` arrived (or the timeout), then on until every
    partition is read to its end (librdkafka's partition EOF: the fetch position reached the high watermark,
    for read_committed the last stable offset), so that a record that should not be there is seen - or for at
    most a second more, as before the end was watched. The partitions are assigned, not subscribed to: a
    group's first join waits out the broker's initial rebalance delay (3 s), and no group is needed here."""
    from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, TopicPartition

    c = Consumer({"bootstrap.servers": bootstrap, "group.id": f"read-{uuid.uuid4().hex[:6]}",
                  "enable.auto.commit": False, "isolation.level": isolation, "enable.partition.eof": True})
    got: list[str] = []
    at_end: dict[int, bool] = {}  # per partition: the last thing it delivered was its EOF
    deadline = time.monotonic() + timeout
    extra = None
    try:
        partitions = c.list_topics(topic, timeout=timeout).topics[topic].partitions
        c.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in partitions])
        while time.monotonic() < deadline:
            m = c.poll(0.2)
            if m is not None and m.error() is None:
                got.append(m.value().decode())
                at_end[m.partition()] = False
            elif m is not None and m.error().code() == KafkaError._PARTITION_EOF:
                at_end[m.partition()] = True
            if len(got) >= want and extra is None:
                extra = time.monotonic() + 1.0
            if extra is not None and (time.monotonic() > extra or _read_to_the_end(c, at_end)):
                break
    finally:
        c.close()
    return got


def _read_to_the_end(consumer, at_end: dict[int, bool]) -> bool:
    assignment = consumer.assignment()
    return bool(assignment) and all(at_end.get(tp.partition, False) for tp in assignment)


def test_java_transactional_producer_and_read_committed_consumer(target, java_tools) -> None:
    b = target.module_broker()  # one per module: the test never kills or reconfigures it
    topic = target.topic("txn-java")
    create_topic(b.bootstrap, topic, 2)
    assert probe("produce", b.bootstrap, topic, f"tx-{topic}", "C3,A2,C4,A3")[-1] == "OK"
    committed = {f"c0-{i}" for i in range(3)} | {f"c2-{i}" for i in range(4)}
    aborted = {f"a1-{i}" for i in range(2)} | {f"a3-{i}" for i in range(3)}
    lines = probe("consume", b.bootstrap, topic, "read_committed", len(committed), 60000)
    assert lines[-1] == "END"
    assert sorted(lines[:-1]) == sorted(committed)
    lines = probe("consume", b.bootstrap, topic, "read_uncommitted", len(committed | aborted), 60000)
    assert sorted(lines[:-1]) == sorted(committed | aborted)
    # a librdkafka consumer filters the same way
    assert sorted(consume_confluent(b.bootstrap, topic, "read_committed", len(committed))) == sorted(committed)


def test_confluent_kafka_transactions(target) -> None:
    from confluent_kafka import Producer

    b = target.module_broker()  # one per module: the test never kills or reconfigures it
    topic = target.topic("txn-confluent")
    create_topic(b.bootstrap, topic, 2)
    p = Producer({"bootstrap.servers": b.bootstrap, "transactional.id": f"tx-{topic}"})
    p.init_transactions(60)
    p.begin_transaction()
    for i in range(5):
        p.produce(topic, value=f"c{i}".encode(), partition=i % 2)
    p.commit_transaction(60)
    p.begin_transaction()
    for i in range(3):
        p.produce(topic, value=f"a{i}".encode(), partition=i % 2)
    p.flush(60)
    p.abort_transaction(60)
    p.begin_transaction()
    p.produce(topic, value=b"c-last", partition=0)
    p.commit_transaction(60)
    committed = [f"c{i}" for i in range(5)] + ["c-last"]
    assert sorted(consume_confluent(b.bootstrap, topic, "read_committed", len(committed))) == sorted(committed)
    everything = committed + [f"a{i}" for i in range(3)]
    assert sorted(consume_confluent(b.bootstrap, topic, "read_uncommitted", len(everything))) == sorted(everything)


def _aiokafka_cycle(bootstrap: str, src: str, dst: str, group: str, commit: bool, n: int) -> None:
    asyncio.run(_aiokafka_txn(bootstrap, src, dst, group, commit, n))


async def _aiokafka_txn(bootstrap: str, src: str, dst: str, group: str, commit: bool, n: int) -> None:
    """One consume-transform-produce transaction over the next `n` records of `src` (from the group's
    committed offset), committed or aborted."""
    from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition

    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, transactional_id=f"tx-{dst}")
    consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, group_id=group, enable_auto_commit=False,
                                auto_offset_reset="earliest", isolation_level="read_committed")
    await producer.start()
    await consumer.start()
    try:
        tp = TopicPartition(src, 0)
        consumer.assign([tp])
        batch: list = []
        deadline = time.monotonic() + 60
        while len(batch) < n and time.monotonic() < deadline:
            for msgs in (await consumer.getmany(tp, timeout_ms=500, max_records=n - len(batch))).values():
                batch.extend(msgs)
        assert len(batch) == n
        await producer.begin_transaction()
        for m in batch:
            await producer.send_and_wait(dst, b"out-" + m.value, partition=0)
        await producer.send_offsets_to_transaction({tp: batch[-1].offset + 1}, group)
        if commit:
            await producer.commit_transaction()
        else:
            await producer.abort_transaction()
    finally:
        await consumer.stop()
        await producer.stop()


async def _committed(bootstrap: str, group: str, topic: str, want: int | None) -> int | None:
    """The group's committed offset of `topic`-0, read until it is `want` (or 30 s pass). EndTxn answers once
    the commit is decided, and the markers that turn pending offsets into committed ones land just after (as
    in Kafka); aiokafka's OffsetFetch has no require_stable, so until then it reads the previous offset."""
    from aiokafka import AIOKafkaConsumer, TopicPartition

    c = AIOKafkaConsumer(bootstrap_servers=bootstrap, group_id=group, enable_auto_commit=False)
    await c.start()
    try:
        deadline = time.monotonic() + 30
        while (got := await c.committed(TopicPartition(topic, 0))) != want and time.monotonic() < deadline:
            await asyncio.sleep(0.1)
        return got
    finally:
        await c.stop()


def test_aiokafka_consume_transform_produce(target) -> None:
    from confluent_kafka import Producer

    b = target.module_broker()  # one per module: the test never kills or reconfigures it
    src, dst = target.topic("txn-src"), target.topic("txn-dst")
    create_topic(b.bootstrap, src, 1)
    create_topic(b.bootstrap, dst, 1)
    p = Producer({"bootstrap.servers": b.bootstrap, "acks": "all"})
    for i in range(10):
        p.produce(src, value=f"{i}".encode(), partition=0)
    assert p.flush(60) == 0
    group = f"g-{dst}"
    _aiokafka_cycle(b.bootstrap, src, dst, group, False, 5)  # aborted: no output, no offset
    assert asyncio.run(_committed(b.bootstrap, group, src, None)) is None
    _aiokafka_cycle(b.bootstrap, src, dst, group, True, 5)
    assert asyncio.run(_committed(b.bootstrap, group, src, 5)) == 5
    _aiokafka_cycle(b.bootstrap, src, dst, group, True, 5)
    assert asyncio.run(_committed(b.bootstrap, group, src, 10)) == 10
    want = [f"out-{i}" for i in range(10)]
    assert consume_confluent(b.bootstrap, dst, "read_committed", len(want)) == want
    everything = consume_confluent(b.bootstrap, dst, "read_uncommitted", 15)
    assert sorted(everything) == sorted(want + [f"out-{i}" for i in range(5)])


def test_an_open_transaction_survives_a_broker_kill_and_is_aborted_by_the_next_session(target) -> None:
    """The coordinator's state and the partition's open transaction come back after kill -9: read_committed
    readers stay below the open transaction, and the next producer session with the same transactional id
    fences and aborts it before its own transaction commits."""
    from confluent_kafka import Producer

    b = target.dedicated_broker()
    topic = target.topic("txn-restart")
    create_topic(b.bootstrap, topic, 1)
    tid = f"tx-{topic}"
    p = Producer({"bootstrap.servers": b.bootstrap, "transactional.id": tid, "transaction.timeout.ms": 600000})
    p.init_transactions(60)
    p.begin_transaction()
    for i in range(3):
        p.produce(topic, value=f"c{i}".encode(), partition=0)
    p.commit_transaction(60)
    p.begin_transaction()
    for i in range(2):
        p.produce(topic, value=f"open{i}".encode(), partition=0)
    assert p.flush(60) == 0
    b.kill()
    b.restart()
    p2 = Producer({"bootstrap.servers": b.bootstrap, "transactional.id": tid})
    p2.init_transactions(120)
    p2.begin_transaction()
    p2.produce(topic, value=b"after", partition=0)
    p2.commit_transaction(60)
    want = ["c0", "c1", "c2", "after"]
    assert consume_confluent(b.bootstrap, topic, "read_committed", len(want)) == want
    assert consume_confluent(b.bootstrap, topic, "read_uncommitted", 6) == ["c0", "c1", "c2", "open0", "open1", "after"]


def test_transaction_log_formatter_reads_transaction_state(target, java_tools) -> None:
    """__transaction_state holds Kafka's own records: Kafka 4.x's TransactionLogMessageFormatter decodes the
    states a committed transaction went through (Kafka 4.4's prints each state byte by its name)."""
    import json

    from kafka import KafkaConsumer

    from kop.coordinator.records import partition_for

    b = target.module_broker()  # one per module: the test never kills or reconfigures it
    topic = target.topic("txn-fmt")
    create_topic(b.bootstrap, topic, 2)
    tid = f"tx-{topic}"
    assert probe("produce", b.bootstrap, topic, tid, "C4")[-1] == "OK"
    c = KafkaConsumer(bootstrap_servers=b.bootstrap)
    try:
        n = len(c.partitions_for_topic("__transaction_state") or ())
    finally:
        c.close()
    assert n > 0
    part = partition_for(tid, n)
    # The coordinator writes CompleteCommit after the commit's answer: wait for it in the log (decoded with our
    # codec), then read exactly the partition's records with Kafka's formatter (--max-messages ends the run;
    # --timeout-ms is liveness only).
    from kop.coordinator.transactions import records as txn_records

    found: list[tuple[bytes | None, bytes | None]] = []

    def complete() -> bool:
        found[:] = partition_records(b.bootstrap, "__transaction_state", [part])[part]
        mine = [v for k, v in found if k is not None and txn_records.decode_key(k) == tid and v is not None]
        return bool(mine) and txn_records.decode_value(mine[-1]).status == 4  # CompleteCommit

    wait_for("CompleteCommit in __transaction_state", complete)
    count = len(found)
    r = java_tools.run("kafka-console-consumer", "--bootstrap-server", b.bootstrap, "--topic", "__transaction_state",
                       "--partition", part, "--offset", "earliest", "--max-messages", count,
                       "--timeout-ms", 60000,
                       "--formatter", "org.apache.kafka.tools.consumer.TransactionLogMessageFormatter")
    dec = json.JSONDecoder()
    records, pos = [], 0
    while (pos := r.stdout.find("{", pos)) >= 0:
        obj, pos = dec.raw_decode(r.stdout, pos)
        records.append(obj)
    mine = [o["value"]["data"] for o in records if o["key"]["data"].get("transactionalId") == tid]
    statuses: list[str] = []
    for v in mine:
        if not statuses or statuses[-1] != v["transactionStatus"]:
            statuses.append(v["transactionStatus"])
    assert statuses == ["Empty", "Ongoing", "PrepareCommit", "CompleteCommit"], mine  # state bytes 0, 1, 2, 4
    ongoing = [v for v in mine if v["transactionStatus"] == "Ongoing"][-1]
    assert [(tp["topic"], sorted(tp["partitionIds"])) for tp in ongoing["transactionPartitions"]] == [(topic, [0, 1])]
    assert mine[-1]["transactionPartitions"] == [] and mine[-1]["transactionTimeoutMs"] == 60000


def _run_ctp(b, src: str, dst: str, group: str, tid: str, total: int, stop_after: int | None) -> bool:
    """Run the Java consume-transform-produce loop; kill -9 it inside the transaction after `stop_after`
    commits - its records written, its offsets and commit not yet (None: let it finish). True when it
    printed DONE."""
    proc = subprocess.Popen(java_command(str(PROBE), ["ctp", b.bootstrap, src, dst, group, tid, str(total)],
                                         jvm_opts=JVM), stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    commits = 0
    try:
        for line in proc.stdout:
            if line.startswith("COMMITTED"):
                commits += 1
            elif line.startswith("SENT") and stop_after is not None and commits >= stop_after:
                proc.kill()  # SIGKILL: no close, no abort, the transaction open with records in the log
                break
            elif line.strip() == "DONE":
                return True
    finally:
        proc.kill()
        proc.wait(60)
    return False


def test_java_consume_transform_produce_killed_repeatedly_is_exactly_once(target) -> None:
    """Issue 15's loop: the Java loop is SIGKILLed after a few commits, again and again, and the broker is
    SIGKILLed once too; in the end the output holds each input record's result exactly once."""
    from confluent_kafka import Producer

    b = target.dedicated_broker()
    src, dst = target.topic("ctp-in"), target.topic("ctp-out")
    create_topic(b.bootstrap, src, 1)
    create_topic(b.bootstrap, dst, 1)
    total = 300
    p = Producer({"bootstrap.servers": b.bootstrap, "acks": "all", "linger.ms": 50})
    for i in range(total):
        p.produce(src, key=str(i).encode(), value=str(i).encode(), partition=0)
    assert p.flush(60) == 0
    group, tid = f"g-{dst}", f"tx-{dst}"
    for stop_after in (2, 3, 1, 4):
        assert not _run_ctp(b, src, dst, group, tid, total, stop_after)
    b.kill()
    b.restart()
    for _ in range(5):
        if _run_ctp(b, src, dst, group, tid, total, None):
            break
    else:
        pytest.fail("the loop never finished")
    got = consume_confluent(b.bootstrap, dst, "read_committed", total, timeout=120)
    assert sorted(got, key=lambda v: int(v[4:])) == [f"out-{i}" for i in range(total)]
    # the killed transactions did leave records behind: read_uncommitted sees them
    assert len(consume_confluent(b.bootstrap, dst, "read_uncommitted", total + 4, timeout=120)) >= total + 4


def test_kafka_python_transactions(target) -> None:
    """kafka-python's transactional producer (its own version choice of every transaction API)."""
    from kafka import KafkaProducer

    b = target.module_broker()  # one per module: the test never kills or reconfigures it
    topic = target.topic("txn-kafka-python")
    create_topic(b.bootstrap, topic, 2)
    p = KafkaProducer(bootstrap_servers=b.bootstrap, transactional_id=f"tx-{topic}")
    try:
        p.init_transactions()
        for n, commit in enumerate((True, False, True)):
            p.begin_transaction()
            for i in range(4):
                p.send(topic, value=f"{'c' if commit else 'a'}{n}-{i}".encode(), partition=i % 2)
            p.flush()
            (p.commit_transaction if commit else p.abort_transaction)()
    finally:
        p.close()
    committed = [f"c{n}-{i}" for n in (0, 2) for i in range(4)]
    assert sorted(consume_confluent(b.bootstrap, topic, "read_committed", len(committed))) == sorted(committed)
    assert len(consume_confluent(b.bootstrap, topic, "read_uncommitted", 12)) == 12
