"""The topic's write rules apply to Pulsar producers as to Kafka producers (issue 21, "done when" item 1).

A topic's write rules - `max.message.bytes`, the key a `cleanup.policy=compact` topic requires,
`message.timestamp.type=LogAppendTime`, the `message.timestamp.before.max.ms` / `after.max.ms` bounds and
`compression.type` - were applied by the Kafka Produce handler alone (kop/kafka/apis/produce.py); a Pulsar SEND
(kop/pulsar/produce.py) appended around them. Each rule here is tried from a Kafka client and from pulsar-client
(the C++-based Python client; one rule from Pulsar's Java client too) on one broker shared by the module: the
Kafka producer is refused with Kafka's error, the Pulsar send fails with an error (not by timing out), the
client does not reconnect, the refused producer and another producer of the topic keep working, and a Kafka
consumer reads only what was accepted. Both go through the partition seam (kop/topics/partition.py).

How the clients take a SEND_ERROR - why the broker has to choose the ServerError per client:

* pulsar-client (C++; its CONNECT says client_version "Pulsar-CPP-v4.2.0" for pulsar-client 3.13 on PyPI, the
  form being "Pulsar-CPP-v<version>[-<description>]", ClientImpl::getClientVersion): ClientConnection::
  handleSendError (lib/ClientConnection.cc, v4.2.0 and master) fails just the message only for ChecksumError:
  ProducerImpl::removeCorruptMessage pops the pending op whose sequence id matches and completes it with
  ResultChecksumError (Python: pulsar.ChecksumError). Every other ServerError - NotAllowedError included -
  closes the whole connection (close(ResultDisconnected)); the producer reconnects (HandlerBase::
  handleDisconnection -> scheduleReconnection), and ProducerImpl::handleCreateProducer calls resendMessages,
  which sends the same message again: a reconnect-and-resend loop. It does not even end at the send timeout:
  handleCreateProducer re-arms the send timer with the full timeout (startSendTimeoutTimer) at every
  re-creation and the reconnect backoff is reset, so the send never completes (seen while writing these tests,
  with a broker answering NotAllowedError: about 9 reconnects a second for 30 s, send_timeout_millis 10 000).
* Pulsar's Java client (client_version "Pulsar-Java-v<version>[-<description>]", ClientCnx's constructor;
  "Pulsar-Java-v4.0.7" for the jars tests use): ClientCnx.handleSendError switches on the error:
  ChecksumError -> ProducerImpl.recoverChecksumError, which fails the message (ChecksumException) only when
  verifyLocalBufferIsNotCorrupted finds the local copy corrupt and otherwise RESENDS the pending messages
  (resendMessages) - a resend loop for a message the broker refuses by rule; TopicTerminatedError ->
  ProducerImpl.terminated; NotAllowedError -> ProducerImpl.recoverNotAllowedError, which fails just that
  message with NotAllowedException(the broker's message); anything else -> producer.connectionClosed(...)
  (4.0.7 and master; older clients ctx.close()), a reconnect of the producer. (Checked in the 4.0.7 jar's
  bytecode and in apache/pulsar's ClientCnx.java / ProducerImpl.java.)

So a rule refusal that fails the send without a loop is ChecksumError for "Pulsar-CPP-..." clients and
NotAllowedError for "Pulsar-Java-..." ones (checked with a scratch broker answering so: every test here passed;
NotAllowedError to all fails the pulsar-client tests on the hang guard, ChecksumError to all fails the Java
test with TimeoutException after its 30 s send timeout). What the tests assert does not depend on the choice:
the send completes (within a hang guard) with an error other than the client's Timeout, the client opened no
new connection and created its producer no second time (counted from pulsar-client's own log lines, "Create
ClientConnection" / "Connected to broker" / "Created producer on broker", through a Python logger), and the
same producer's next valid send succeeds - a refusal that closed the connection would show there, since that
send must reconnect first.

Pulsar-side module (tests/e2e/conftest.py): runs on our broker only (`kop`): the rules come from Kafka topic
configs set with the Kafka admin client, and Apache Pulsar has no Kafka listener.
"""

from __future__ import annotations

import logging
import threading
import time
import uuid

import pulsar
import pytest

from tests.support.clients import consume_kafka_python, create_topic, end_offsets

PULSAR_SIDE_TARGETS = ("kop", "kop-bk")

RECEIVE_MS = 30_000  # a generous bound for one receive; never a measured quantity
SEND_TIMEOUT_MS = 10_000  # the producers' send timeout: a refusal comes sooner (asserted: not Timeout)
ANSWER_GUARD_S = 30  # how long a send may stay without outcome before the test gives up (a hang guard)
MAX_BYTES = 1000
# Over max.message.bytes whatever frame slack the broker gives Pulsar messages on top of it (Pulsar's own
# broker allows 10 KiB of headers over maxMessageSize per frame): the refusal is about the payload.
BIG = 20_000
DAY_MS = 86_400_000


def now_ms() -> int:
    return int(time.time() * 1000)


# ---- pulsar-client with its log lines counted ---------------------------------------------------------------


class ClientLog(logging.Handler):
    """What one pulsar-client Client logged (the C++ client logs through the Python logger it is given)."""

    CONNECTIONS = ("Create ClientConnection", "Connected to broker")
    PRODUCERS = "Created producer on broker"

    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(record.getMessage())

    def count(self, text: str) -> int:
        return sum(text in line for line in list(self.lines))

    def snapshot(self) -> dict[str, int]:
        return {t: self.count(t) for t in (*self.CONNECTIONS, self.PRODUCERS)}


def pulsar_client(url: str) -> tuple[pulsar.Client, ClientLog]:
    log = ClientLog()
    logger = logging.getLogger(f"kop-tests.pulsar-client.{uuid.uuid4().hex[:8]}")
    logger.setLevel(logging.INFO)
    logger.propagate = False
    logger.addHandler(log)
    return pulsar.Client(url, operation_timeout_seconds=30, logger=logger), log


def producer(client: pulsar.Client, topic: str, **kw) -> pulsar.Producer:
    return client.create_producer(topic, batching_enabled=False, send_timeout_millis=SEND_TIMEOUT_MS, **kw)


def send(p: pulsar.Producer, value: bytes, **kw) -> pulsar.Result | None:
    """The outcome of one send_async, or None when the client did not complete it within ANSWER_GUARD_S (a
    guard against a hang, not a timing assertion: pulsar-client in a reconnect-and-resend loop never completes
    the send, its send timeout notwithstanding - seen with NotAllowedError against the 4.2.0 client)."""
    done = threading.Event()
    outcome: list[pulsar.Result] = []

    def callback(result: pulsar.Result, _msg_id: object) -> None:
        outcome.append(result)
        done.set()

    p.send_async(value, callback, **kw)
    return outcome[0] if done.wait(ANSWER_GUARD_S) else None


def assert_send_refused(p: pulsar.Producer, log: ClientLog, value: bytes, good: dict, **kw) -> pulsar.Result:
    """`p.send(value, **kw)` fails with an error the broker answered (not the client's Timeout, nor no answer
    at all: what a reconnect-and-resend loop ends in), the client opens no connection and creates no producer
    again, and the same producer's next send (`good`: send's arguments) succeeds. Returns the send's result."""
    before = log.snapshot()
    refused = send(p, value, **kw)
    tail = "\n".join(log.lines[-20:])
    assert refused is not None, f"the send was not completed within {ANSWER_GUARD_S} s: {log.snapshot()}\n{tail}"
    assert refused not in (pulsar.Result.Ok, pulsar.Result.Timeout), f"{refused}\n{tail}"
    # one that must go through the same connection (or reconnect first, which the log shows)
    assert send(p, **good) == pulsar.Result.Ok
    after = log.snapshot()
    assert after == before, f"the refused send made the client reconnect: {before} -> {after}\n" + "\n".join(
        log.lines[-20:])
    return refused


def kafka_values(bootstrap: str, topic: str) -> list[tuple[bytes | None, bytes | None]]:
    """(key, value) of every record of partition 0, read by kafka-python up to the end offset."""
    end = end_offsets(bootstrap, topic, 1)
    return [(g.key, g.value) for g in consume_kafka_python(bootstrap, topic, end)]


def kafka_refusal(bootstrap: str, topic: str, value: bytes, key: bytes | None = None,
                  timestamp_ms: int | None = None) -> Exception:
    """The error kafka-python's producer gets for one record (none: AssertionError)."""
    from kafka import KafkaProducer

    p = KafkaProducer(bootstrap_servers=bootstrap, acks="all", retries=0, request_timeout_ms=30000,
                      max_request_size=4 << 20)
    try:
        fut = p.send(topic, key=key, value=value, partition=0, timestamp_ms=timestamp_ms)
        try:
            fut.get(timeout=60)
        except Exception as e:  # noqa: BLE001 - the refusal under test
            return e
        raise AssertionError(f"{topic}: the record was accepted")
    finally:
        p.close(timeout=10)


@pytest.fixture
def broker(pulsar_broker):
    """(Kafka bootstrap, Pulsar service URL) of the module's broker."""
    return pulsar_broker.handle.bootstrap, pulsar_broker.service_url


# ---- a. max.message.bytes --------------------------------------------------------------------------------------


def test_max_message_bytes_refuses_a_big_kafka_record(target, broker):
    bootstrap, _ = broker
    topic = target.topic("maxbytes-kafka")
    create_topic(bootstrap, topic, config={"max.message.bytes": str(MAX_BYTES)})
    e = kafka_refusal(bootstrap, topic, b"k" * BIG)
    assert type(e).__name__ == "MessageSizeTooLargeError", repr(e)  # MESSAGE_TOO_LARGE (10)
    assert kafka_values(bootstrap, topic) == []


def test_max_message_bytes_refuses_a_big_pulsar_message(target, broker):
    """A message over max.message.bytes fails its send; the producer's next small message, and another
    producer's, are stored; a Kafka consumer reads the small ones only."""
    bootstrap, url = broker
    topic = target.topic("maxbytes-pulsar")
    create_topic(bootstrap, topic, config={"max.message.bytes": str(MAX_BYTES)})
    client, log = pulsar_client(url)
    other_client, _ = pulsar_client(url)
    try:
        p = producer(client, topic)
        assert_send_refused(p, log, b"p" * BIG, good={"value": b"small-1"})
        assert_send_refused(p, log, b"q" * BIG, good={"value": b"small-2"})  # and again: still no reconnect
        producer(other_client, topic).send(b"small-other")
    finally:
        client.close()
        other_client.close()
    assert [v for _, v in kafka_values(bootstrap, topic)] == [b"small-1", b"small-2", b"small-other"]


# ---- b. cleanup.policy=compact needs keys ---------------------------------------------------------------------


def test_compacted_topic_refuses_a_keyless_kafka_record(target, broker):
    bootstrap, _ = broker
    topic = target.topic("compact-kafka")
    create_topic(bootstrap, topic, config={"cleanup.policy": "compact"})
    e = kafka_refusal(bootstrap, topic, b"no key")
    assert type(e).__name__ == "InvalidRecordError", repr(e)  # INVALID_RECORD (87)
    assert kafka_values(bootstrap, topic) == []


def test_compacted_topic_refuses_a_keyless_pulsar_message(target, broker):
    """A keyless message fails its send; a keyed one (partition_key) is stored and a Kafka consumer sees its
    key."""
    bootstrap, url = broker
    topic = target.topic("compact-pulsar")
    create_topic(bootstrap, topic, config={"cleanup.policy": "compact"})
    client, log = pulsar_client(url)
    other_client, _ = pulsar_client(url)
    try:
        p = producer(client, topic)
        assert_send_refused(p, log, b"no key", good={"value": b"keyed", "partition_key": "k1"})
        producer(other_client, topic).send(b"keyed-other", partition_key="k2")
    finally:
        client.close()
        other_client.close()
    assert kafka_values(bootstrap, topic) == [(b"k1", b"keyed"), (b"k2", b"keyed-other")]


# ---- c. message.timestamp.type=LogAppendTime ------------------------------------------------------------------


def _log_append_views(bootstrap: str, url: str, topic: str, before: int, send) -> tuple[object, pulsar.Message, int]:
    """Send with `send(client)`, then read the one record back with kafka-python and pulsar-client; returns
    (the Kafka record, the Pulsar message, the time after both were read)."""
    client, _ = pulsar_client(url)
    try:
        send(client)
        [rec] = consume_kafka_python(bootstrap, topic, {0: 1})
        consumer = client.subscribe(topic, "s", initial_position=pulsar.InitialPosition.Earliest)
        msg = consumer.receive(RECEIVE_MS)
        consumer.acknowledge(msg)
        after = now_ms()
    finally:
        client.close()
    assert before <= rec.timestamp <= after, (before, rec.timestamp, after)
    return rec, msg, after


def test_log_append_time_restamps_a_kafka_record(target, broker):
    """The reference for the Pulsar test below: a Kafka record sent with timestamp 1000 (1970) to a
    LogAppendTime topic is read by a Kafka consumer with timestamp type LogAppendTime and the broker's time, and
    by a Pulsar consumer with publish time = event time = that broker time (kop/pulsar/convert.py
    kafka_to_pulsar: a LogAppendTime batch's max_timestamp stands for every message's event time and for the
    entry's publish time)."""
    from kafka import KafkaProducer

    bootstrap, url = broker
    topic = target.topic("lat-kafka")
    create_topic(bootstrap, topic, config={"message.timestamp.type": "LogAppendTime"})
    before = now_ms()

    def kafka_send(_client: pulsar.Client) -> None:
        p = KafkaProducer(bootstrap_servers=bootstrap, acks="all")
        try:
            p.send(topic, key=b"k", value=b"from kafka", partition=0, timestamp_ms=1000).get(timeout=60)
        finally:
            p.close(timeout=10)

    rec, msg, _ = _log_append_views(bootstrap, url, topic, before, kafka_send)
    assert not rec.create_time  # timestamp type LogAppendTime
    assert msg.data() == b"from kafka"
    assert msg.publish_timestamp() == msg.event_timestamp() == rec.timestamp


def test_log_append_time_restamps_a_pulsar_message(target, broker):
    """A Pulsar message sent with event_timestamp=1000 (1970) to a LogAppendTime topic gets the broker's time.

    Kafka consumer: timestamp type LogAppendTime, timestamp within [before the send, after the reads] of the
    broker's clock (the test runs on the broker's machine). Pulsar consumer: publish_timestamp is that same
    broker time, and event_timestamp too - not 1000 and not unset. Why event time = the broker time: LogAppendTime
    replaces the record's timestamp for every reader (Kafka keeps no CreateTime a consumer could see), and a
    Pulsar consumer reads the stored Kafka batch through kafka_to_pulsar (kop/pulsar/convert.py), which maps a
    LogAppendTime batch's timestamp to each message's event_time and to the entry's publish_time - exactly what a
    Pulsar consumer sees for a Kafka record on such a topic (test_log_append_time_restamps_a_kafka_record). A
    Pulsar message and a Kafka record on one LogAppendTime topic thus look alike to both kinds of consumer."""
    bootstrap, url = broker
    topic = target.topic("lat-pulsar")
    create_topic(bootstrap, topic, config={"message.timestamp.type": "LogAppendTime"})
    before = now_ms()
    rec, msg, _ = _log_append_views(
        bootstrap, url, topic, before, lambda client: producer(client, topic).send(b"from pulsar", event_timestamp=1000))
    assert rec.value == b"from pulsar"
    assert not rec.create_time  # timestamp type LogAppendTime
    assert msg.publish_timestamp() == rec.timestamp
    assert msg.event_timestamp() == rec.timestamp


# ---- d. message.timestamp.before.max.ms / after.max.ms ---------------------------------------------------------

BOUNDS = {"message.timestamp.before.max.ms": "3600000", "message.timestamp.after.max.ms": "3600000"}


def test_timestamp_bounds_refuse_an_old_kafka_record(target, broker):
    bootstrap, _ = broker
    topic = target.topic("bounds-kafka")
    create_topic(bootstrap, topic, config=BOUNDS)
    e = kafka_refusal(bootstrap, topic, b"old", key=b"k", timestamp_ms=now_ms() - DAY_MS)
    assert type(e).__name__ == "InvalidTimestampError", repr(e)  # INVALID_TIMESTAMP (32)
    e = kafka_refusal(bootstrap, topic, b"future", key=b"k", timestamp_ms=now_ms() + DAY_MS)
    assert type(e).__name__ == "InvalidTimestampError", repr(e)
    assert kafka_values(bootstrap, topic) == []


def test_timestamp_bounds_refuse_an_old_pulsar_message(target, broker):
    """An event time a day in the past (and one a day ahead) fails the send; a message without event time
    (the broker's publish time stands for it) and one with a current event time are stored."""
    bootstrap, url = broker
    topic = target.topic("bounds-pulsar")
    create_topic(bootstrap, topic, config=BOUNDS)
    client, log = pulsar_client(url)
    other_client, _ = pulsar_client(url)
    try:
        p = producer(client, topic)
        assert_send_refused(p, log, b"old", good={"value": b"no event time"}, event_timestamp=now_ms() - DAY_MS)
        assert_send_refused(p, log, b"future", good={"value": b"now", "event_timestamp": now_ms()},
                            event_timestamp=now_ms() + DAY_MS)
        producer(other_client, topic).send(b"other")
    finally:
        client.close()
        other_client.close()
    assert [v for _, v in kafka_values(bootstrap, topic)] == [b"no event time", b"now", b"other"]


def test_timestamp_bounds_refuse_a_java_client_message(target, broker, pulsar_broker):
    """Pulsar's Java client: PulsarJava's `produce` gives message i the event time 1700000000000+i (Nov 2023),
    out of a one-hour message.timestamp.before.max.ms. The send fails with NotAllowedException - the failure
    recoverNotAllowedError gives, without a reconnect - not with a TimeoutException (what a reconnect or
    ChecksumError resend loop ends in, after the 30 s send timeout)."""
    from tests.support.pulsar_java import PulsarJava

    bootstrap, url = broker
    topic = target.topic("bounds-java")
    create_topic(bootstrap, topic, config=BOUNDS)
    java = PulsarJava(url, pulsar_broker.admin_url)
    with pytest.raises(AssertionError) as refused:
        java.run(f"produce persistent://public/default/{topic} 1 false NONE")
    text = str(refused.value)
    assert "NotAllowedException" in text and "TimeoutException" not in text, text
    assert kafka_values(bootstrap, topic) == []


# ---- e. compression.type ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("codec", ["LZ4", "NONE"])
def test_compression_type_applies_to_pulsar_messages(target, broker, codec):
    """A compression.type=gzip topic stores what a Pulsar producer (LZ4 or uncompressed) writes as gzip batches
    (the batch header's codec, read raw with a Fetch), and a Kafka consumer still decodes the values."""
    from tests.support.wire import Negotiated, batch_headers

    bootstrap, url = broker
    topic = target.topic(f"gzip-{codec.lower()}")
    create_topic(bootstrap, topic, config={"compression.type": "gzip"})
    values = [b"value-%d-" % i + b"z" * 300 for i in range(3)]
    client, _ = pulsar_client(url)
    try:
        p = producer(client, topic, compression_type=getattr(pulsar.CompressionType, codec))
        for v in values:
            p.send(v)
    finally:
        client.close()
    with Negotiated(bootstrap) as wire:
        part = wire.fetch(topic, 0, 0)
    assert part.error_code == 0
    headers = batch_headers(part.records)
    assert sum(h["count"] for h in headers) == len(values)
    assert {h["compression"] for h in headers} == {1}, headers  # gzip
    assert [v for _, v in kafka_values(bootstrap, topic)] == values
