"""Issue 17, first defect: a librdkafka (confluent-kafka) consumer whose position is out of range resets per
auto.offset.reset and reads on, with no protocol error in its log.

Fetch used to answer a partition in error with null records; librdkafka drops such a whole answer
(`PROTOERR ... invalid MessageSetSize -1`), so the reset never happened and the consumer read nothing. Every
test here collects librdkafka's own log (the `logger` config, with protocol/fetch debug on) and its error
callback, and fails on any PROTOERR / protocol parse complaint.
"""

from __future__ import annotations

import logging
import time

import pytest

from tests.support.clients import STALL_TIMEOUT, create_topic

PROTOCOL_COMPLAINTS = ("PROTOERR", "MessageSetSize", "Protocol parse failure", "protocol parse")


class RdLog(logging.Handler):
    """Everything librdkafka logs through the `logger` config and every error_cb call."""

    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.lines: list[str] = []
        self.logger = logging.getLogger(f"rdkafka-{id(self)}")
        self.logger.propagate = False
        self.logger.setLevel(logging.DEBUG)
        self.logger.addHandler(self)

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(record.getMessage())

    def error_cb(self, err: object) -> None:
        self.lines.append(f"error_cb: {err}")

    def config(self) -> dict[str, object]:
        return {"logger": self.logger, "error_cb": self.error_cb, "debug": "protocol,fetch,consumer"}

    def assert_clean(self) -> None:
        bad = [ln for ln in self.lines if any(c in ln for c in PROTOCOL_COMPLAINTS)]
        assert not bad, "librdkafka complained about the protocol:\n" + "\n".join(bad[:10])
        assert any("Fetch" in ln for ln in self.lines), "the debug log was not captured (no Fetch lines)"


def produce(bootstrap: str, topic: str, values: list[bytes], partition: int = 0) -> None:
    from confluent_kafka import Producer

    errors: list[object] = []
    p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 0})
    for v in values:
        p.produce(topic, value=v, key=v, partition=partition,
                  on_delivery=lambda err, msg: errors.append(err) if err else None)
    assert p.flush(60) == 0 and not errors, errors


def consumer(bootstrap: str, rd: RdLog, reset: str, group: str | None = None, **extra: object):
    from confluent_kafka import Consumer

    conf: dict[str, object] = {
        "bootstrap.servers": bootstrap, "group.id": group or f"g-{time.monotonic_ns()}", "auto.offset.reset": reset,
        "enable.auto.commit": False, "fetch.wait.max.ms": 100, "topic.metadata.refresh.interval.ms": 1000,
        **rd.config(), **extra,
    }
    return Consumer(conf)


def read_values(c, n: int, also: object = None) -> list[bytes]:
    """Poll until n records came (liveness deadline only); `also()` runs between polls."""
    got: list[bytes] = []
    deadline = time.monotonic() + STALL_TIMEOUT
    while len(got) < n:
        assert time.monotonic() < deadline, f"read {len(got)} of {n} records"
        m = c.poll(0.2)
        if callable(also):
            also()
        if m is None:
            continue
        if m.error():
            continue  # partition EOF and the like; protocol errors show in the log, checked by the caller
        got.append(m.value())
    return got


def assign_at(c, topic: str, offset: int) -> None:
    from confluent_kafka import TopicPartition

    c.assign([TopicPartition(topic, 0, offset)])


@pytest.mark.parametrize("reset", ["earliest", "latest"])
def test_position_past_the_end_resets(target, reset: str) -> None:
    b = target.module_broker()
    topic = target.topic("past")
    create_topic(b.bootstrap, topic)
    first = [b"a%d" % i for i in range(10)]
    produce(b.bootstrap, topic, first)
    rd = RdLog()
    c = consumer(b.bootstrap, rd, reset)
    try:
        assign_at(c, topic, 1000)
        if reset == "earliest":
            assert read_values(c, 10) == first
        else:
            _read_after_latest_reset(c, b.bootstrap, topic, first)
    finally:
        c.close()
    rd.assert_clean()


def _read_after_latest_reset(c, bootstrap: str, topic: str, old: list[bytes]) -> None:
    """After a reset to the end the consumer reads only records produced later: produce one record at a time
    until some arrive (the reset's moment is not observable), then none of the older ones may be among them."""
    deadline = time.monotonic() + STALL_TIMEOUT
    got: list[bytes] = []
    i = 0
    while not got:
        assert time.monotonic() < deadline, "nothing read after the reset to latest"
        produce(bootstrap, topic, [b"late%d" % i])
        i += 1
        end = time.monotonic() + 1
        while time.monotonic() < end:
            m = c.poll(0.2)
            if m is not None and not m.error():
                got.append(m.value())
    assert all(v.startswith(b"late") for v in got) and not set(got) & set(old), got[:5]


@pytest.mark.parametrize("reset", ["earliest", "latest"])
def test_position_below_log_start_resets(target, reset: str) -> None:
    from confluent_kafka import TopicPartition
    from confluent_kafka.admin import AdminClient

    b = target.module_broker()
    topic = target.topic("below")
    create_topic(b.bootstrap, topic)
    values = [b"v%d" % i for i in range(20)]
    produce(b.bootstrap, topic, values)
    admin = AdminClient({"bootstrap.servers": b.bootstrap})
    res = admin.delete_records([TopicPartition(topic, 0, 12)], request_timeout=60)
    for f in res.values():
        assert f.result(60).low_watermark == 12
    rd = RdLog()
    c = consumer(b.bootstrap, rd, reset)
    try:
        assign_at(c, topic, 3)
        if reset == "earliest":
            assert read_values(c, 8) == values[12:]
        else:
            _read_after_latest_reset(c, b.bootstrap, topic, values)
    finally:
        c.close()
    rd.assert_clean()


def test_group_rebalance_and_recreated_topic(target) -> None:
    """A group of two consumers, a third joining mid-read (rebalance), then the topic deleted and recreated:
    every record of both incarnations is read and librdkafka never reports a protocol error."""
    from confluent_kafka.admin import AdminClient

    b = target.module_broker()
    topic = target.topic("grp")
    create_topic(b.bootstrap, topic, partitions=3)
    group = f"grp-{time.monotonic_ns()}"
    rds = [RdLog() for _ in range(3)]
    cs = [consumer(b.bootstrap, rds[i], "earliest", group=group, **{"session.timeout.ms": 10000})
          for i in range(2)]
    try:
        for c in cs:
            c.subscribe([topic])
        first = [b"one-%d" % i for i in range(60)]
        for p in range(3):
            produce(b.bootstrap, topic, first[p::3], partition=p)
        got = _read_group(cs, 30)
        cs.append(consumer(b.bootstrap, rds[2], "earliest", group=group, **{"session.timeout.ms": 10000}))
        cs[2].subscribe([topic])
        got += _read_group(cs, 60, allow_more=True, want=set(first) - set(got))
        assert set(first) <= set(got), sorted(set(first) - set(got))[:5]
        # Delete and recreate: the consumers' positions are past the end of the new incarnation.
        admin = AdminClient({"bootstrap.servers": b.bootstrap})
        admin.delete_topics([topic], operation_timeout=30)[topic].result(60)
        _wait_gone(admin, topic)
        create_topic(b.bootstrap, topic, partitions=3)
        second = [b"two-%d" % i for i in range(30)]
        for p in range(3):
            produce(b.bootstrap, topic, second[p::3], partition=p)
        got2 = _read_group(cs, 30, allow_more=True, want=set(second))
        assert set(second) <= set(got2)
    finally:
        for c in cs:
            c.close()
    for rd in rds:
        rd.assert_clean()


def _wait_gone(admin, topic: str) -> None:
    deadline = time.monotonic() + STALL_TIMEOUT
    while topic in admin.list_topics(timeout=10).topics:
        assert time.monotonic() < deadline, f"{topic} still listed after delete"
        time.sleep(0.2)


def _read_group(cs: list, n: int, allow_more: bool = False, want: set[bytes] | None = None) -> list[bytes]:
    got: list[bytes] = []
    deadline = time.monotonic() + STALL_TIMEOUT
    while (len(got) < n) if want is None else not want <= set(got):
        assert time.monotonic() < deadline, f"the group read {len(got)} of {n}"
        for c in cs:
            m = c.poll(0.1)
            if m is not None and not m.error():
                got.append(m.value())
    if not allow_more:
        assert len(got) >= n
    return got
