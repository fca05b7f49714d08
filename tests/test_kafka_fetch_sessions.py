"""Fetch sessions (KIP-227): kop/kafka/fetch_sessions.py, and Fetch v12 with sessions on a real broker.

* Sans-IO: which partitions a request covers and which an answer carries, for every (session id, epoch)
  case; epochs and unknown ids get Kafka's errors; forgotten partitions leave; answered partitions move
  to the end of the session; a full cache evicts only a session idle for 2 minutes; 0 slots = no sessions.
* Wire, raw requests: a session answers only what changed (records, a new high watermark or log start
  offset), remembers fetch offsets between requests, and refuses a replayed epoch or a closed session.
* Real clients: kafka-python and a Java consumer (kafka-console-consumer) read every record through
  incremental fetches - the broker's incremental-fetch counter moves for each of them - and with sessions
  turned off (maxIncrementalFetchSessionCacheSlots=0) the same reads work on full fetches.
"""

from __future__ import annotations

import urllib.request

import pytest
from kafka.protocol.consumer import FetchRequest

from kop.kafka.fetch_sessions import FINAL_EPOCH, INITIAL_EPOCH, CachedPartition, FetchSessionCache
from kop.protocol.errors import ErrorCode
from tests.support.clients import create_topic
from tests.support.wire import Negotiated, batch_headers

# ---- sans-IO -----------------------------------------------------------------------------------------------


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def parts(*indexes: int, offset: int = 0) -> list[tuple[int, int, int, int]]:
    return [(i, offset, 1 << 20, -1) for i in indexes]


class Result:
    """Stands for a PartitionData: what _must_answer in kop.kafka.apis.fetch looks at."""

    def __init__(self, index: int, records: bytes = b"", hw: int = 0, log_start: int = 0, error: int = 0) -> None:
        self.partition_index = index
        self.records = records
        self.high_watermark = hw
        self.log_start_offset = log_start
        self.error_code = error


def answer(ctx, results):
    from kop.kafka.apis.fetch import _must_answer

    out = ctx.answer(results, partition_of=lambda r: r.partition_index, must_answer=_must_answer)
    return [(t, [r.partition_index for r in rs]) for t, rs in out]


def test_without_a_session_the_request_is_the_fetch():
    cache = FetchSessionCache(10)
    for version, sid, epoch in ((12, 0, FINAL_EPOCH), (6, 0, INITIAL_EPOCH), (4, 5, 3)):
        ctx = cache.begin(version, sid, epoch, [("t", parts(0, 1))], [])
        assert (ctx.session_id, ctx.error, ctx.partitions) == (0, 0, [("t", parts(0, 1))])
    assert len(cache) == 0


def test_a_new_session_answers_in_full_then_only_what_changed():
    cache = FetchSessionCache(10)
    ctx = cache.begin(12, 0, INITIAL_EPOCH, [("a", parts(0, 1)), ("b", parts(0))], [])
    assert ctx.session_id != 0 and not ctx.incremental and len(cache) == 1
    full = [("a", [Result(0, hw=5), Result(1)]), ("b", [Result(0)])]
    assert answer(ctx, full) == [("a", [0, 1]), ("b", [0])]  # all, though nothing has records

    # Incremental, nothing listed: the fetch covers the whole session, at the remembered offsets.
    ctx = cache.begin(12, ctx.session_id, 1, [], [])
    assert ctx.incremental and ctx.partitions == [("a", parts(0, 1)), ("b", parts(0))]
    assert answer(ctx, full) == []  # nothing changed since the last answer
    # Records on a/1, b/0's high watermark moved, a/0 unchanged (no records, same watermarks).
    ctx = cache.begin(12, ctx.session_id, 2, [], [])
    got = answer(ctx, [("a", [Result(0, hw=5), Result(1, records=b"x", hw=3)]), ("b", [Result(0, hw=7)])])
    assert got == [("a", [1]), ("b", [0])]
    # The answered ones moved to the end: the next fetch starts with a/0.
    ctx = cache.begin(12, ctx.session_id, 3, [("a", parts(1, offset=3))], [])
    assert ctx.partitions == [("a", [(0, 0, 1 << 20, -1), (1, 3, 1 << 20, -1)]), ("b", parts(0))]
    # An error or a new log start offset is always answered; so is records again at the same watermark.
    ctx = cache.begin(12, ctx.session_id, 4, [], [])
    got = answer(ctx, [("a", [Result(0, hw=5, error=ErrorCode.NOT_LEADER_OR_FOLLOWER), Result(1, hw=3)]),
                       ("b", [Result(0, hw=7, log_start=2)])])
    assert got == [("a", [0]), ("b", [0])]


def test_incremental_requests_add_update_and_forget_partitions():
    cache = FetchSessionCache(10)
    sid = cache.begin(12, 0, INITIAL_EPOCH, [("a", parts(0, 1))], []).session_id
    ctx = cache.begin(12, sid, 1, [("b", parts(2)), ("a", parts(1, offset=9))], [("a", [0])])
    assert ctx.partitions == [("a", parts(1, offset=9)), ("b", parts(2))]
    ctx = cache.begin(12, sid, 2, [], [("a", [1]), ("b", [7])])  # an unknown forgotten partition is ignored
    assert ctx.partitions == [("b", parts(2))]


def test_epochs_unknown_sessions_and_closing():
    cache = FetchSessionCache(10)
    sid = cache.begin(12, 0, INITIAL_EPOCH, [("a", parts(0))], []).session_id
    assert cache.begin(12, sid, 2, [], []).error == ErrorCode.INVALID_FETCH_SESSION_EPOCH  # expects 1
    assert cache.begin(12, sid, 1, [], []).error == 0
    assert cache.begin(12, sid, 1, [], []).error == ErrorCode.INVALID_FETCH_SESSION_EPOCH  # replayed
    assert cache.begin(12, sid + 1, 1, [], []).error == ErrorCode.FETCH_SESSION_ID_NOT_FOUND
    # Epoch -1 with the id closes the session; the request itself is a sessionless full fetch.
    ctx = cache.begin(12, sid, FINAL_EPOCH, [("a", parts(3))], [])
    assert (ctx.session_id, ctx.partitions) == (0, [("a", parts(3))])
    assert cache.begin(12, sid, 2, [], []).error == ErrorCode.FETCH_SESSION_ID_NOT_FOUND
    # Epoch 0 with an id replaces that session by a new one.
    old = cache.begin(12, 0, INITIAL_EPOCH, [("a", parts(0))], []).session_id
    new = cache.begin(12, old, INITIAL_EPOCH, [("a", parts(1))], []).session_id
    assert new != old and cache.get(old) is None and list(cache.get(new).parts) == [("a", 1)]
    assert len(cache) == 1


def test_a_full_cache_evicts_only_a_session_idle_for_two_minutes():
    clock = Clock()
    cache = FetchSessionCache(2, clock=clock)
    first = cache.begin(12, 0, INITIAL_EPOCH, [("a", parts(0))], []).session_id
    second = cache.begin(12, 0, INITIAL_EPOCH, [("a", parts(0))], []).session_id
    clock.now += 100
    assert cache.begin(12, first, 1, [], []).error == 0  # first is now the most recently used
    ctx = cache.begin(12, 0, INITIAL_EPOCH, [("a", parts(0))], [])
    assert ctx.session_id == 0 and ctx.partitions == [("a", parts(0))]  # full, nothing idle long enough
    clock.now += 21  # second idle for 121 s, first for 21 s
    third = cache.begin(12, 0, INITIAL_EPOCH, [("a", parts(0))], []).session_id
    assert third != 0 and cache.get(second) is None and cache.get(first) is not None
    assert cache.evictions == 1
    assert FetchSessionCache(0).begin(12, 0, INITIAL_EPOCH, [("a", parts(0))], []).session_id == 0


def test_the_cached_partition_tracks_what_the_client_was_told():
    from kop.kafka.apis.fetch import _must_answer

    c = CachedPartition(0, 100, -1)
    assert _must_answer(Result(0, hw=0, log_start=0), c)  # never answered yet (-1)
    assert not _must_answer(Result(0, hw=0, log_start=0), c)
    assert _must_answer(Result(0, hw=1), c) and (c.high_watermark, c.log_start_offset) == (1, 0)


# ---- on the wire -------------------------------------------------------------------------------------------


def _fetch(w: Negotiated, session_id: int, epoch: int, topics: dict[str, dict[int, int]],
           forgotten: dict[str, list[int]] | None = None, max_wait_ms: int = 50):
    FT = FetchRequest.FetchTopic
    req = FetchRequest(
        replica_id=-1, max_wait_ms=max_wait_ms, min_bytes=1, max_bytes=1 << 20, isolation_level=0,
        session_id=session_id, session_epoch=epoch, rack_id="",
        topics=[FT(topic=t, partitions=[FT.FetchPartition(partition=p, current_leader_epoch=-1, fetch_offset=o,
                                                          log_start_offset=-1, partition_max_bytes=1 << 20)
                                        for p, o in ps.items()]) for t, ps in topics.items()],
        forgotten_topics_data=[FetchRequest.ForgottenTopic(topic=t, partitions=ps)
                               for t, ps in (forgotten or {}).items()],
    )
    return w.call(req, cap=12)


def _answered(resp) -> dict[tuple[str, int], tuple[int, int, list[int]]]:
    """(topic, partition) -> (error, high watermark, base offsets of the batches carried)."""
    return {(t.topic, p.partition_index): (p.error_code, p.high_watermark,
                                           [h["base_offset"] for h in batch_headers(p.records or b"")])
            for t in resp.responses for p in t.partitions}


def test_a_session_on_the_wire_answers_only_what_changed(kop_broker):
    from tests.support.admin import batch

    broker = kop_broker()
    topic = "sessions"
    create_topic(broker.bootstrap, topic, 3)
    with Negotiated(broker.bootstrap) as w:
        assert w.produce(topic, 0, batch([b"a0", b"a1"])).error_code == 0
        r = _fetch(w, 0, INITIAL_EPOCH, {topic: {0: 0, 1: 0, 2: 0}})
        sid = r.session_id
        assert r.error_code == 0 and sid != 0
        assert _answered(r) == {(topic, 0): (0, 2, [0]), (topic, 1): (0, 0, []), (topic, 2): (0, 0, [])}

        # The client moves partition 0 to offset 2; nothing is new anywhere: an empty answer after the wait.
        r = _fetch(w, sid, 1, {topic: {0: 2}})
        assert (r.error_code, r.session_id, _answered(r)) == (0, sid, {})
        # Records on partition 1 (fetched from offset 0, which the session remembers): only it is answered.
        assert w.produce(topic, 1, batch([b"b0"])).error_code == 0
        r = _fetch(w, sid, 2, {}, max_wait_ms=5000)
        assert _answered(r) == {(topic, 1): (0, 1, [0])}
        # Partition 0 gets records at offset 2, where the session now fetches it from.
        assert w.produce(topic, 0, batch([b"a2"])).error_code == 0
        r = _fetch(w, sid, 3, {topic: {1: 1}}, max_wait_ms=5000)
        assert _answered(r) == {(topic, 0): (0, 3, [2])}
        # Forgotten partitions are not fetched any more (partition 0 moves past what it got).
        assert w.produce(topic, 2, batch([b"c0"])).error_code == 0
        r = _fetch(w, sid, 4, {topic: {0: 3}}, forgotten={topic: [2]})
        assert _answered(r) == {}

        # A replayed epoch and an unknown id get Kafka's errors and no partitions.
        r = _fetch(w, sid, 4, {})
        assert (r.error_code, r.session_id, r.responses) == (ErrorCode.INVALID_FETCH_SESSION_EPOCH, 0, [])
        r = _fetch(w, sid ^ 1, 1, {})
        assert (r.error_code, r.responses) == (ErrorCode.FETCH_SESSION_ID_NOT_FOUND, [])
        # Closing (epoch -1) answers as a sessionless full fetch; the session is gone afterwards.
        r = _fetch(w, sid, FINAL_EPOCH, {topic: {2: 0}})
        assert (r.error_code, r.session_id, _answered(r)) == (0, 0, {(topic, 2): (0, 1, [0])})
        assert _fetch(w, sid, 5, {}).error_code == ErrorCode.FETCH_SESSION_ID_NOT_FOUND


def _incremental_fetches(broker) -> float:
    text = urllib.request.urlopen(broker.admin_url + "/metrics", timeout=10).read().decode()
    return next(float(line.split()[1]) for line in text.splitlines()
                if line.startswith("kop_server_incremental_fetches_total "))


def _consume_in_small_fetches(bootstrap: str, topic: str, ends: dict[int, int]) -> list[tuple[int, int]]:
    """kafka-python, assigned every partition, 16 KiB per partition per fetch: many fetches per partition."""
    import time

    from kafka import KafkaConsumer, TopicPartition

    c = KafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False, auto_offset_reset="earliest",
                      max_partition_fetch_bytes=16 * 1024, fetch_max_bytes=64 * 1024)
    got: list[tuple[int, int]] = []
    try:
        c.assign([TopicPartition(topic, p) for p in ends])
        deadline = time.monotonic() + 120  # liveness only
        while len(got) < sum(ends.values()):
            for tp, msgs in c.poll(timeout_ms=1000).items():
                got.extend((tp.partition, m.offset) for m in msgs)
            assert time.monotonic() < deadline, f"stalled at {len(got)} records"
    finally:
        c.close()
    return got


@pytest.mark.parametrize("slots", [1000, 0], ids=["sessions", "no-sessions"])
def test_java_and_kafka_python_consumers_read_everything_through_sessions(kop_broker, java_tools, slots):
    import re

    from tests.support.clients import make_records, produce_kafka_python

    broker = kop_broker(maxIncrementalFetchSessionCacheSlots=slots)
    topic = "sessions-clients"
    partitions = 8
    create_topic(broker.bootstrap, topic, partitions)
    records = make_records(4000, partitions, base_ts=1_700_000_000_000)
    produce_kafka_python(broker.bootstrap, topic, records, "none")
    expected = sorted((r.partition, o) for p in range(partitions)
                      for o, r in enumerate(r for r in records if r.partition == p))
    ends = {p: sum(1 for r in records if r.partition == p) for p in range(partitions)}

    got = _consume_in_small_fetches(broker.bootstrap, topic, ends)
    assert sorted(got) == expected
    after_python = _incremental_fetches(broker)
    assert (after_python > 0) == (slots > 0)

    out = java_tools.run("kafka-console-consumer", "--bootstrap-server", broker.bootstrap, "--topic", topic,
                         "--from-beginning", "--max-messages", len(records), "--timeout-ms", 60000,
                         "--property", "print.partition=true", "--property", "print.offset=true",
                         "--consumer-property", "max.partition.fetch.bytes=16384", check=True)
    seen = sorted((int(m[1]), int(m[2])) for m in re.finditer(r"Partition:(\d+)\s+Offset:(\d+)", out.stdout))
    assert seen == expected, out.stderr[-3000:]
    assert (_incremental_fetches(broker) > after_python) == (slots > 0)  # the Java consumer's own
