"""Acceptance (c): ListOffsets earliest / latest / by timestamp / max timestamp (-3) equal what offset
arithmetic over the produced records says - through kafka-python (beginning_offsets, end_offsets,
offsets_for_times), the Java GetOffsetShell (--time -1/-2/-3/<ts>) and a raw ListOffsets - before and after
retention deleted old ledgers; a fetch below the log start offset gets OFFSET_OUT_OF_RANGE.

Offset arithmetic, for a partition whose retained records are offsets [start, end) with timestamps ts[o]:
* earliest (-2) = start; latest (-1) = end;
* by timestamp T = the smallest retained offset o with ts[o] >= T (none if no such record) - timestamps are
  deliberately NOT monotonic, as with several producers, so "first by offset" and "first by time" differ;
* max timestamp (-3) = the offset of the record with the largest timestamp (the first such, by offset).

Retention on Apache Kafka works on segments (segment.ms is set tiny and batches are far apart in record
time, so every batch rolls a segment); on our broker on ledgers (managedLedgerMaxEntriesPerLedger small).
The two delete at different boundaries, so after retention the tests derive `start` from what the broker
reports and check that every API agrees with it and with the arithmetic over [start, end).
"""

from __future__ import annotations

import time

import pytest

from tests.support.clients import STALL_TIMEOUT, create_topic
from tests.support.inspect import ledger_counts

KOP_SMALL_LEDGERS = {
    "managedLedgerMaxEntriesPerLedger": 3,
    "managedLedgerMinLedgerRolloverTimeMinutes": 0,
    "retentionCheckIntervalMs": 200,
}
# Apache Kafka: roll a segment whenever a batch's timestamps are > 100 ms (record time) past the segment's first.
KAFKA_SMALL_SEGMENTS = {"segment.ms": "100"}
BATCH = 25  # records per producer batch (the producer is flushed after each)


def produce_batches(bootstrap: str, topic: str, partition: int, timestamps: list[int], first_index: int = 0) -> None:
    """Produce one record per timestamp, flushing every BATCH records so batches (= ledger entries) are
    small and many. Values encode the record's index for later checks."""
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 1000, "enable.idempotence": True})
    errors: list[str] = []

    def on_delivery(err, msg) -> None:
        if err is not None:
            errors.append(str(err))

    for i, ts in enumerate(timestamps):
        idx = first_index + i
        producer.produce(topic, value=b"rec-%06d" % idx, key=b"%d" % idx, partition=partition, timestamp=ts, on_delivery=on_delivery)
        if i % BATCH == BATCH - 1:
            assert producer.flush(STALL_TIMEOUT) == 0
    assert producer.flush(STALL_TIMEOUT) == 0
    assert not errors, errors[:5]


def expected_for_time(ts: list[int], start: int, target: int) -> int | None:
    return next((o for o in range(start, len(ts)) if ts[o] >= target), None)


def expected_max_timestamp(ts: list[int], start: int) -> int | None:
    if start >= len(ts):
        return None
    top = max(ts[start:])
    return next(o for o in range(start, len(ts)) if ts[o] == top)


def probe_targets(ts: list[int]) -> list[int]:
    """Timestamps to look up: before everything, every exact timestamp of a sample, between two, after all."""
    s = sorted(set(ts))
    targets = [s[0] - 1_000_000, s[0], s[-1], s[-1] + 1]
    for o in range(0, len(ts), 17):
        targets += [ts[o], ts[o] + 1, ts[o] - 1]
    return sorted(set(targets))


class Offsets:
    """The three ways of asking: kafka-python, GetOffsetShell, raw ListOffsets."""

    def __init__(self, bootstrap: str, topic: str, partitions: int, java_tools) -> None:
        from kafka import KafkaConsumer

        self.bootstrap, self.topic, self.partitions, self.java = bootstrap, topic, partitions, java_tools
        self.consumer = KafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False)

    def close(self) -> None:
        self.consumer.close()

    def tps(self):
        from kafka import TopicPartition

        return [TopicPartition(self.topic, p) for p in range(self.partitions)]

    def kafka_python(self, spec: int) -> dict[int, int | None]:
        tps = self.tps()
        if spec == -2:
            return {tp.partition: o for tp, o in self.consumer.beginning_offsets(tps).items()}
        if spec == -1:
            return {tp.partition: o for tp, o in self.consumer.end_offsets(tps).items()}
        res = self.consumer.offsets_for_times({tp: spec for tp in tps})
        return {tp.partition: (None if r is None else r.offset) for tp, r in res.items()}

    def kafka_python_with_ts(self, target: int) -> dict[int, tuple[int, int] | None]:
        res = self.consumer.offsets_for_times({tp: target for tp in self.tps()})
        return {tp.partition: (None if r is None else (r.offset, r.timestamp)) for tp, r in res.items()}

    def get_offset_shell(self, spec: int) -> dict[int, int | None]:
        r = self.java.run("kafka-get-offsets", "--bootstrap-server", self.bootstrap, "--topic", self.topic, "--time", spec, check=True)
        out: dict[int, int | None] = {p: None for p in range(self.partitions)}
        for line in r.lines:
            topic, part, off = line.rsplit(":", 2)
            assert topic == self.topic, line
            out[int(part)] = int(off) if off else None
        return out

    def raw(self, spec: int) -> dict[int, int | None]:
        from tests.support.wire import Negotiated

        out = {}
        with Negotiated(self.bootstrap) as wire:
            for p in range(self.partitions):
                err, off, _ts = wire.list_offset(self.topic, p, spec)
                assert err == 0, f"ListOffsets({spec}) partition {p}: error {err}"
                out[p] = None if off == -1 else off
        return out


def check_all(q: Offsets, ts: dict[int, list[int]], start: dict[int, int], java_targets: int = 6) -> None:
    """Every API agrees with the arithmetic over retained records [start[p], len(ts[p]))."""
    end = {p: len(t) for p, t in ts.items()}
    assert q.kafka_python(-2) == start, "beginning_offsets"
    assert q.kafka_python(-1) == end, "end_offsets"
    assert q.raw(-2) == start, "raw ListOffsets(-2 earliest)"
    assert q.raw(-1) == end, "raw ListOffsets(-1 latest)"
    want_max = {p: expected_max_timestamp(ts[p], start[p]) for p in ts}
    assert q.raw(-3) == want_max, "raw ListOffsets(-3 max timestamp)"
    for spec, want in ((-1, end), (-2, start), (-3, want_max)):
        assert q.get_offset_shell(spec) == want, f"GetOffsetShell --time {spec}"

    all_targets = sorted(set().union(*(probe_targets(t) for t in ts.values() if t)))
    for target in all_targets:
        want = {p: expected_for_time(ts[p], start[p], target) for p in ts}
        got = q.kafka_python_with_ts(target)
        assert {p: (g[0] if g else None) for p, g in got.items()} == want, f"offsets_for_times({target})"
        for p, g in got.items():
            if g is not None:
                assert g[1] == ts[p][g[0]], f"offsets_for_times({target}) partition {p}: timestamp {g[1]} != {ts[p][g[0]]}"
    # The Java tool is slow to start: a spread of targets rather than all of them.
    step = max(1, len(all_targets) // java_targets)
    for target in all_targets[::step]:
        want = {p: expected_for_time(ts[p], start[p], target) for p in ts}
        assert q.get_offset_shell(target) == want, f"GetOffsetShell --time {target}"


def timestamps_for(n: int, base: int, partition: int) -> list[int]:
    """ts[o] = base + 1000*o, except partition 0 where offset 137 carries the largest timestamp of all and
    offset 300 the smallest (non-monotonic, as with several producers)."""
    ts = [base + 1000 * o for o in range(n)]
    if partition == 0 and n > 300:
        ts[137] = base + 1000 * (10 * n)
        ts[300] = base - 5000
    return ts


def test_list_offsets_arithmetic(target, java_tools) -> None:
    broker = target.module_broker(**KOP_SMALL_LEDGERS)
    topic = target.topic("lo")
    partitions, n = 2, 400
    create_topic(broker.bootstrap, topic, partitions)
    base = int(time.time() * 1000) - 4 * 3_600_000
    ts = {p: timestamps_for(n, base, p) for p in range(partitions)}
    for p in range(partitions):
        produce_batches(broker.bootstrap, topic, p, ts[p])

    q = Offsets(broker.bootstrap, topic, partitions, java_tools)
    try:
        check_all(q, ts, {p: 0 for p in range(partitions)})
    finally:
        q.close()


def _set_topic_config(how: str, bootstrap: str, topic: str, key: str, value: str, java_tools) -> None:
    if how == "kafka-configs":
        java_tools.run(
            "kafka-configs", "--bootstrap-server", bootstrap, "--entity-type", "topics", "--entity-name", topic,
            "--alter", "--add-config", f"{key}={value}", check=True,
        )
    else:
        from confluent_kafka.admin import AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource

        admin = AdminClient({"bootstrap.servers": bootstrap})
        res = ConfigResource(
            ConfigResource.Type.TOPIC, topic,
            incremental_configs=[ConfigEntry(key, value, incremental_operation=AlterConfigOpType.SET)],
        )
        admin.incremental_alter_configs([res])[res].result(30)


def _wait_for_log_start(q: Offsets, partition: int, above: int) -> int:
    deadline = time.monotonic() + STALL_TIMEOUT
    while True:
        start = q.kafka_python(-2)[partition]
        if start > above:
            return start
        if time.monotonic() > deadline:
            raise AssertionError(f"retention did not advance the log start offset past {above} within {STALL_TIMEOUT}s")
        time.sleep(0.2)


def _wait_for_stable_log_start(q: Offsets, partition: int) -> int:
    """A retention pass that was under way when retention was switched off may still delete: wait until the
    log start offset reads the same five times in a row, 0.5 s apart (longer than either retention timer)."""
    last, same = None, 0
    deadline = time.monotonic() + STALL_TIMEOUT
    while same < 5:
        start = q.kafka_python(-2)[partition]
        same = same + 1 if start == last else 1
        last = start
        if time.monotonic() > deadline:
            raise AssertionError("log start offset kept moving after retention was switched off")
        time.sleep(0.5)
    return last


@pytest.mark.parametrize(
    "retention",
    [
        pytest.param(("retention.ms", "kafka-configs"), id="retention.ms-kafka-configs"),
        pytest.param(("retention.bytes", "admin-client"), id="retention.bytes-AdminClient"),
    ],
)
def test_list_offsets_after_retention(target, java_tools, retention) -> None:
    key, how = retention
    broker = target.module_broker(**KOP_SMALL_LEDGERS)
    topic = target.topic("ret")
    create_topic(broker.bootstrap, topic, 1, config=None if target.is_kop else KAFKA_SMALL_SEGMENTS)
    n1, n2 = 600, 200
    base = int(time.time() * 1000) - 4 * 3_600_000
    # Monotonic in the part retention works on (an out-of-order timestamp would stop Apache Kafka from rolling
    # segments by time), out of order in the part produced afterwards.
    ts_all = [base + 1000 * o for o in range(n1 + n2)]
    ts_all[n1 + 50] = base + 1000 * 10 * (n1 + n2)
    ts_all[n1 + 120] = base + 1000 * 7
    ts = ts_all[:n1]
    produce_batches(broker.bootstrap, topic, 0, ts)

    q = Offsets(broker.bootstrap, topic, 1, java_tools)
    try:
        check_all(q, {0: ts}, {0: 0}, java_targets=3)
        if target.is_kop:
            ledgers_before = ledger_counts(broker, topic, 1)[0]
            assert ledgers_before >= 5, f"only {ledgers_before} ledgers: managedLedgerMaxEntriesPerLedger not applied?"

        # retention.ms=1: everything that retention may delete is expired; retention.bytes: keep about a third.
        if key == "retention.ms":
            value = "1"
        else:
            from tests.support.wire import Negotiated

            with Negotiated(broker.bootstrap) as wire:
                stored = 0
                offset = 0
                while offset < n1:  # total stored bytes: sum of the batch sizes
                    from tests.support.wire import batch_headers

                    part = wire.fetch(topic, 0, offset, max_bytes=1 << 20)
                    hs = batch_headers(part.records)
                    assert hs, f"raw Fetch at {offset} returned no batch (error {part.error_code})"
                    stored += sum(12 + h["length"] for h in hs)
                    offset = hs[-1]["base_offset"] + hs[-1]["last_offset_delta"] + 1
            value = str(stored // 3)
        _set_topic_config(how, broker.bootstrap, topic, key, value, java_tools)
        start = _wait_for_log_start(q, 0, 0)
        # No new data arrives, so nothing else becomes deletable; stop retention before producing more.
        _set_topic_config(how, broker.bootstrap, topic, key, "-1", java_tools)
        start = _wait_for_stable_log_start(q, 0)
        assert 0 < start <= n1
        if key == "retention.bytes":
            assert start < n1, "retention.bytes deleted everything, not just the oldest data"

        if target.is_kop:
            ledgers_after = ledger_counts(broker, topic, 1)[0]
            assert ledgers_after < ledgers_before, f"log start moved to {start} but no ledger was deleted ({ledgers_after})"
        check_all(q, {0: ts}, {0: start}, java_targets=3)
        _assert_out_of_range_below(broker.bootstrap, topic, start, n1)

        # Producing continues the sequence at n1, and lookups cover old and new records.
        produce_batches(broker.bootstrap, topic, 0, ts_all[n1:], first_index=n1)
        check_all(q, {0: ts_all}, {0: start}, java_targets=3)
        _assert_consumable(broker.bootstrap, topic, start, n1 + n2, ts_all)
    finally:
        q.close()


def _assert_out_of_range_below(bootstrap: str, topic: str, start: int, end: int) -> None:
    from kafka import KafkaConsumer, TopicPartition
    from kafka.errors import OffsetOutOfRangeError

    from tests.support.wire import Negotiated

    with Negotiated(bootstrap) as wire:
        for off in sorted({0, start - 1}):
            part = wire.fetch(topic, 0, off)
            assert part.error_code == 1, f"raw Fetch at {off} (log start {start}): error {part.error_code}, want 1 OFFSET_OUT_OF_RANGE"
            assert part.log_start_offset in (-1, start), f"Fetch log_start_offset {part.log_start_offset} != {start}"
        part = wire.fetch(topic, 0, end + 1)
        assert part.error_code == 1, f"raw Fetch above the high watermark: error {part.error_code}, want 1"
        part = wire.fetch(topic, 0, start)
        assert part.error_code == 0 and part.high_watermark == end, (part.error_code, part.high_watermark)

    consumer = KafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False, auto_offset_reset="none")
    try:
        tp = TopicPartition(topic, 0)
        consumer.assign([tp])
        consumer.seek(tp, start - 1)
        with pytest.raises(OffsetOutOfRangeError):
            deadline = time.monotonic() + STALL_TIMEOUT
            while time.monotonic() < deadline:
                records = consumer.poll(timeout_ms=500)
                assert not records, f"consumer got records at {start - 1}, below the log start offset {start}"
    finally:
        consumer.close()


def _assert_consumable(bootstrap: str, topic: str, start: int, end: int, ts: list[int]) -> None:
    from tests.support.clients import consume_kafka_python

    got = consume_kafka_python(bootstrap, topic, {0: end}, start={0: start})
    assert [g.offset for g in got] == list(range(start, end))
    for g in got:
        assert g.value == b"rec-%06d" % g.offset and g.timestamp == ts[g.offset], g
