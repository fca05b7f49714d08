"""Topic compaction for Pulsar users, as Apache Pulsar answers it (issue #22): the admin REST's trigger and status,
and `readCompacted` consumers and readers.

A Pulsar-side module (tests/e2e/conftest.py): the same assertions run on Apache Pulsar standalone (`pulsar`, the
README's reference), which proves them right, and on our broker (`kop`, `kop-bk`). Both run on Pulsar's defaults, so
a producer auto-creates a non-partitioned topic; the first test creates its topic partitioned (one partition) over
the admin REST and asks the per-partition answers of `<topic>-partition-0`.

What is checked:
- `GET .../compaction` answers LongRunningProcessStatus JSON: NOT_RUN before any trigger, SUCCESS once the
  compaction `PUT .../compaction` (on the partitioned topic: every partition) started is done;
- a readCompacted reader, and an Exclusive readCompacted consumer (whose cumulative acknowledgement holds), read the
  latest value of each key up to the compaction's horizon - keyless messages are gone, a key whose latest message is
  an unbatched empty value is gone too (Pulsar 4.2 judges an unbatched message by its payload's size alone; 4.0
  counted its metadata and kept it: apache/pulsar#25817, tests/test_pulsar_compaction_rule.py), a batch loses only
  the superseded messages - and then everything written after it; a reader without readCompacted reads everything;
- the same on a non-partitioned topic with Pulsar's Java admin client (triggerCompaction, compactionStatus) and a
  Java readCompacted reader,
  which skips the batch slots compaction emptied (the pulsar-admin CLI is not on the Maven Central we fetch
  from: tests/support/pulsar_java.py);
- a readCompacted reader is not promised the topic's last message when compaction removed it (hasMessageAvailable);
- a readCompacted SUBSCRIBE on a Shared or Key_Shared subscription is refused NotAllowedError (Pulsar: Exclusive and
  Failover only); the clients refuse it before asking.
"""

from __future__ import annotations

import json
import time
import urllib.error
import urllib.request

import pulsar
import pytest

from kop.pulsar.codec import commands as c
from tests.support.admin import create_partitioned_topic
from tests.support.pulsar_java import PulsarJava
from tests.support.pulsar_wire import WireClient

PULSAR_SIDE_TARGETS = ("pulsar", "kop", "kop-bk")

RECEIVE_MS = 30_000  # a generous bound for one receive under load; never a measured quantity
COMPACTION_WAIT_S = 60  # how long the test waits for a compaction to end (a wait, not an assertion on time)
EXCLUSIVE, SHARED, KEY_SHARED = 0, 1, 3  # CommandSubscribe.SubType


def _rest(endpoint, method: str, path: str) -> tuple[int, object]:
    req = urllib.request.Request(endpoint.admin_url + "/admin/v2/persistent/public/default/" + path, method=method)
    try:
        with urllib.request.urlopen(req, timeout=60) as resp:
            raw = resp.read()
            return resp.status, json.loads(raw) if raw else None
    except urllib.error.HTTPError as e:
        raw = e.read()
        try:
            return e.code, json.loads(raw) if raw else None
        except ValueError:
            return e.code, raw.decode(errors="replace")


def _wait_compacted(endpoint, partition: str) -> dict:
    deadline = time.monotonic() + COMPACTION_WAIT_S
    while True:
        status, body = _rest(endpoint, "GET", f"{partition}/compaction")
        assert status == 200, body
        assert isinstance(body, dict)
        if body["status"] not in ("RUNNING", "NOT_RUN") or time.monotonic() > deadline:
            return body
        time.sleep(0.2)


@pytest.fixture
def client(pulsar_service_url: str):
    c = pulsar.Client(pulsar_service_url, operation_timeout_seconds=60,
                      logger=pulsar.ConsoleLogger(pulsar.LoggerLevel.Error))
    yield c
    c.close()


def _read_all(consumer, until: bytes) -> list[tuple[str, bytes]]:
    """(partition key, value) of each message received until the one whose value is `until` (which a consumer
    acknowledges cumulatively)."""
    got = []
    reader = isinstance(consumer, pulsar.Reader)
    while True:
        msg = consumer.read_next(RECEIVE_MS) if reader else consumer.receive(RECEIVE_MS)
        if msg.data() == until:
            if not reader:
                consumer.acknowledge_cumulative(msg)
            return [*got, (msg.partition_key(), msg.data())]
        if msg.partition_key() or msg.data():
            got.append((msg.partition_key(), msg.data()))
        # else: a batch slot that compaction emptied - Apache Pulsar and ours send it (compacted_out, no key, no
        # payload), the C++ client hands it out, the Java client skips it


def _send_history(client, topic: str) -> None:
    """Values of keys k1..k5, one keyless message, an emptied key (k2) and a batch of three (k4 twice, k5)."""
    single = client.create_producer(topic, batching_enabled=False)
    for key, value in [("k1", b"a"), ("k2", b"b"), ("k1", b"c"), (None, b"keyless"), ("k3", b"x"), ("k2", b"")]:
        if key is None:
            single.send(value)
        else:
            single.send(value, partition_key=key)
    single.close()
    batched = client.create_producer(topic, batching_enabled=True, batching_max_messages=3,
                                     batching_max_publish_delay_ms=60_000)
    for key, value in [("k4", b"1"), ("k4", b"2"), ("k5", b"1")]:
        batched.send_async(value, None, partition_key=key)
    batched.flush()
    batched.close()


ALL = [("k1", b"a"), ("k2", b"b"), ("k1", b"c"), ("", b"keyless"), ("k3", b"x"), ("k2", b""), ("k4", b"1"),
       ("k4", b"2"), ("k5", b"1"), ("k1", b"after")]
COMPACTED = [("k1", b"c"), ("k3", b"x"), ("k4", b"2"), ("k5", b"1"), ("k1", b"after")]  # k2's empty value deletes it


def test_compaction_trigger_status_and_read_compacted(target, pulsar_broker, client):
    name = target.topic("cmp")
    topic = f"persistent://public/default/{name}"
    partition = f"{name}-partition-0"
    create_partitioned_topic(pulsar_broker.admin_url, topic, 1)
    _send_history(client, topic)
    assert _rest(pulsar_broker, "GET", f"{partition}/compaction") == (200, {"status": "NOT_RUN", "lastError": ""})
    status, body = _rest(pulsar_broker, "PUT", f"{name}/compaction")  # the partitioned topic: each partition
    assert status == 204, body
    assert _wait_compacted(pulsar_broker, partition) == {"status": "SUCCESS", "lastError": ""}
    assert _rest(pulsar_broker, "GET", f"{name}/compaction")[0] == 404  # the status is a partition's
    after = client.create_producer(topic, batching_enabled=False)
    after.send(b"after", partition_key="k1")
    after.close()

    reader = client.create_reader(f"persistent://public/default/{partition}", pulsar.MessageId.earliest,
                                  is_read_compacted=True)
    assert _read_all(reader, b"after") == COMPACTED
    reader.close()
    exclusive = client.subscribe(f"persistent://public/default/{partition}", "compacted-excl",
                                 consumer_type=pulsar.ConsumerType.Exclusive, is_read_compacted=True,
                                 initial_position=pulsar.InitialPosition.Earliest)
    assert _read_all(exclusive, b"after") == COMPACTED
    exclusive.close()
    # the cumulative acknowledgement holds: the subscription resumes after "after" (individual acknowledgements of
    # compacted messages do not hold on Apache Pulsar - tests/test_pulsar_compacted.py, docs/pulsar.md)
    again = client.create_producer(topic, batching_enabled=False)
    again.send(b"again", partition_key="k6")
    again.close()
    exclusive = client.subscribe(f"persistent://public/default/{partition}", "compacted-excl",
                                 consumer_type=pulsar.ConsumerType.Exclusive, is_read_compacted=True)
    assert exclusive.receive(RECEIVE_MS).data() == b"again"
    exclusive.close()
    plain = client.create_reader(f"persistent://public/default/{partition}", pulsar.MessageId.earliest)
    assert _read_all(plain, b"again") == [*ALL, ("k6", b"again")]
    plain.close()


def test_java_admin_and_reader(target, pulsar_broker, client):
    name = target.topic("cmp-java")
    topic = f"persistent://public/default/{name}"  # non-partitioned: the producer creates it
    _send_history(client, topic)
    after = client.create_producer(topic, batching_enabled=False)
    with PulsarJava(pulsar_broker.service_url, pulsar_broker.admin_url).session() as java:
        assert java(f"compaction-status {topic}") == {"status": "NOT_RUN", "lastError": ""}
        assert java(f"compact {topic}") is True
        deadline = time.monotonic() + COMPACTION_WAIT_S
        while (status := java(f"compaction-status {topic}"))["status"] in ("NOT_RUN", "RUNNING"):
            assert time.monotonic() < deadline, "the compaction did not end"
            time.sleep(0.2)
        assert status == {"status": "SUCCESS", "lastError": ""}
        after.send(b"after", partition_key="k1")
        java(f"reader r {topic} earliest compacted=true")
        got = java(f"read r {len(COMPACTED)}")
        assert [(m["key"], m["value"].encode()) for m in got] == COMPACTED  # the Java client skips emptied slots
        assert java("has-available r") is False
    after.close()


def test_a_trailing_empty_value_is_not_announced(target, pulsar_broker, client):
    """When the topic's last message is one the compaction removed (an empty value) and nothing came after it, a
    readCompacted reader is told the view's last message as the last one (GET_LAST_MESSAGE_ID: Pulsar answers from
    the compacted ledger), so hasMessageAvailable turns false once it read that one instead of promising a
    message that never comes."""
    topic = f"persistent://public/default/{target.topic('cmp-tail')}"
    producer = client.create_producer(topic, batching_enabled=False)
    for key, value in [("k1", b"a"), ("k2", b"b"), ("k1", b"")]:
        producer.send(value, partition_key=key)
    producer.close()
    status, body = _rest(pulsar_broker, "PUT", f"{topic.rsplit('/', 1)[1]}/compaction")
    assert status == 204, body
    assert _wait_compacted(pulsar_broker, topic.rsplit("/", 1)[1]) == {"status": "SUCCESS", "lastError": ""}
    reader = client.create_reader(topic, pulsar.MessageId.earliest, is_read_compacted=True)
    msg = reader.read_next(RECEIVE_MS)
    assert (msg.partition_key(), msg.data()) == ("k2", b"b")
    assert not reader.has_message_available()
    reader.close()


def test_read_compacted_needs_exclusive_or_failover(target, pulsar_broker, client):
    """The clients refuse readCompacted on Shared themselves (the C++ one InvalidConfiguration), so the broker's
    answer is asked on the wire: NotAllowedError for Shared and Key_Shared, SUCCESS for Exclusive (Failover: the
    Python clients above)."""
    topic = f"persistent://public/default/{target.topic('cmp-shared')}"
    client.create_producer(topic).close()  # the topic exists (non-partitioned)
    w = WireClient(int(pulsar_broker.service_url.rsplit(":", 1)[1]))
    w.connect()
    try:
        for rid, sub_type in enumerate((SHARED, KEY_SHARED, EXCLUSIVE), start=1):
            w.send(c.command(c.SUBSCRIBE, topic=topic, subscription=f"s{sub_type}", subType=sub_type,
                             consumer_id=rid, request_id=rid, read_compacted=True))
            got = w.expect(c.SUCCESS if sub_type == EXCLUSIVE else c.ERROR)
            if sub_type != EXCLUSIVE:
                assert got.error == c.ServerError.NotAllowedError
                assert "exclusive" in got.message
        with pytest.raises(pulsar.InvalidConfiguration):  # what an application meets first
            client.subscribe(topic, "shared", consumer_type=pulsar.ConsumerType.Shared, is_read_compacted=True)
        client.subscribe(topic, "failover", consumer_type=pulsar.ConsumerType.Failover, is_read_compacted=True).close()
    finally:
        w.close()
