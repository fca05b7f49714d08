"""Issue 6 acceptance: /metrics, the admin REST (PIP-415 included) and kop-admin, against our broker as a
subprocess with real clients (kafka-python, confluent-kafka) or byte-exact requests (tests/support/wire.py).

These are KoP-only (Apache Kafka has no Pulsar admin REST), so they take `kop_broker`, not `target`.
"""

from __future__ import annotations

import re
import socket
import struct
import threading
import time

from tests.support.admin import Scrape, batch, http_get, kop_admin, kop_admin_json, ok, topic_url, wait_for
from tests.support.inspect import managed_ledger
from tests.support.wire import Negotiated, batch_headers

ROLL = {"managedLedgerMinLedgerRolloverTimeMinutes": 0}


def full(topic: str) -> str:
    return f"persistent://public/default/{topic}"


def produce_batches(bootstrap: str, topic: str, batches: list[bytes]) -> None:
    with Negotiated(bootstrap) as c:
        for i, b in enumerate(batches):
            r = c.produce(topic, 0, b)
            assert r.error_code == 0, f"batch {i}: error {r.error_code}"


def produce_kafka_python_batches(bootstrap: str, topic: str, counts: list[int]) -> None:
    """kafka-python batches exactly the records sent before each flush (linger far away)."""
    from kafka import KafkaProducer

    producer = KafkaProducer(bootstrap_servers=bootstrap, linger_ms=600_000, batch_size=1 << 20, acks="all",
                             delivery_timeout_ms=900_000)
    try:
        n = 0
        for count in counts:
            futures = [producer.send(topic, value=b"record-%d" % (n + i), partition=0) for i in range(count)]
            n += count
            producer.flush(timeout=120)
            for f in futures:
                f.get(timeout=120)
    finally:
        producer.close(timeout=10)


def stored_batches(bootstrap: str, topic: str) -> list[tuple[int, int]]:
    """(base offset, record count) of every stored batch, read back with a Fetch and parsed independently."""
    out: list[tuple[int, int]] = []
    with Negotiated(bootstrap) as c:
        offset = 0
        while True:
            p = c.fetch(topic, 0, offset)
            assert p.error_code == 0, f"fetch at {offset}: error {p.error_code}"
            hs = batch_headers(p.records)
            if not hs:
                return out
            for h in hs:
                out.append((h["base_offset"], h["count"]))
            offset = hs[-1]["base_offset"] + hs[-1]["last_offset_delta"] + 1


def entry_positions(broker, topic: str) -> list[tuple[int, int]]:
    """(ledger id, entry id) of every entry in order, from the managed ledger's own metadata and files
    (kop.offset.inspect, read-only), not from the admin REST."""
    view = managed_ledger(broker, topic, 0)
    return [(lv.ledger_id, e) for lv in view.ledgers for e in range(lv.entries or 0)]


# ------------------------------------------------------------------------------------------------ metrics


def test_metrics_equal_a_known_workload_byte_for_byte(kop_broker) -> None:
    broker = kop_broker()
    admin = broker.admin_url
    topic = "metrics-wire"
    counts = [1, 3, 2, 5, 1]
    batches = [batch([b"v%d-%d" % (k, i) for i in range(n)]) for k, n in enumerate(counts)]
    from kafka.protocol.consumer import FetchRequest, ListOffsetsRequest
    from kafka.protocol.producer import ProduceRequest

    with Negotiated(broker.bootstrap) as c:  # one ApiVersions (v3)
        before = Scrape(admin)
        for b in batches:
            assert c.produce(topic, 0, b).error_code == 0
        p = c.fetch(topic, 0, 0)
        assert [h["count"] for h in batch_headers(p.records)] == counts
        assert c.list_offset(topic, 0, -1)[1] == sum(counts)
        versions = {
            "Produce": c.version(ProduceRequest[None], 9),
            "Fetch": c.version(FetchRequest[None], 12),
            "ListOffsets": c.version(ListOffsetsRequest[None], 9),
        }
        after = Scrape(admin)

    t = full(topic)
    assert after.value("kop_server_bytes_in_total", topic=t) == sum(len(b) for b in batches)
    assert after.value("kop_server_records_in_total", topic=t) == sum(counts)
    assert after.value("kop_server_batches_in_total", topic=t) == len(batches)
    assert after.value("kop_server_bytes_out_total", topic=t) == sum(len(b) for b in batches)
    assert after.value("kop_server_records_out_total", topic=t) == sum(counts)
    assert after.value("kop_server_batches_out_total", topic=t) == len(batches)

    def delta(name: str, **labels: str) -> float:
        return after.value(name, **labels) - before.value(name, **labels)

    want = {"Produce": len(batches), "Fetch": 1, "ListOffsets": 1}
    for api, n in want.items():
        assert delta("kop_server_request_latency_seconds_count", api=api, version=str(versions[api])) == n, api
        assert delta("kop_server_request_queue_seconds_count", api=api) == n, api
    # nothing else was asked of the broker between the two scrapes
    assert after.total("kop_server_request_latency_seconds_count") - before.total(
        "kop_server_request_latency_seconds_count") == sum(want.values())
    assert before.value("kop_server_request_latency_seconds_count", api="ApiVersions", version="3") == 1
    assert delta("kop_server_produce_encode_seconds_count") == len(batches)
    assert delta("kop_server_produce_publish_seconds_count") == len(batches)
    assert delta("kop_server_fetch_read_seconds_count") == 1
    assert after.value("kop_server_active_connections") == 1  # the wire client, still open at the scrape


def test_metrics_with_real_clients_and_connection_gauges(kop_broker) -> None:
    from confluent_kafka import Consumer, TopicPartition
    from kafka import KafkaProducer

    broker = kop_broker()
    admin = broker.admin_url
    topic = "metrics-clients"
    n = 25
    producer = KafkaProducer(bootstrap_servers=broker.bootstrap, acks="all")
    try:
        for i in range(n):  # one record per Produce request: each send is awaited before the next
            producer.send(topic, key=b"k%d" % i, value=b"value-%03d" % i, partition=0).get(timeout=120)
    finally:
        producer.close(timeout=10)

    consumer = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "unused-no-commits",
                         "enable.auto.commit": False, "fetch.wait.max.ms": 100})
    got = 0
    try:
        consumer.assign([TopicPartition(topic, 0, 0)])
        deadline = time.monotonic() + 120
        while got < n:
            assert time.monotonic() < deadline, f"consumed {got} of {n}"
            m = consumer.poll(1.0)
            if m is not None and m.error() is None:
                got += 1
        s = Scrape(admin)
    finally:
        consumer.close()

    t = full(topic)
    assert s.value("kop_server_records_in_total", topic=t) == n
    assert s.value("kop_server_batches_in_total", topic=t) == n
    assert s.total("kop_server_request_latency_seconds_count", api="Produce") == n
    assert s.value("kop_server_records_out_total", topic=t) == n
    # every stored batch went out exactly once, byte for byte
    assert s.value("kop_server_bytes_out_total", topic=t) == s.value("kop_server_bytes_in_total", topic=t) > 0
    stats = ok(topic_url(admin, f"{topic}-partition-0") + "/stats")
    assert (stats["msgInCounter"], stats["bytesInCounter"]) == (n, s.value("kop_server_bytes_in_total", topic=t))
    assert stats["highWatermark"] == n

    # connection gauges: all clients gone -> 0 open; one raw connection -> 1
    wait_for("clients disconnected", lambda: Scrape(admin).value("kop_server_active_connections") == 0)
    with socket.create_connection(("127.0.0.1", broker.port)):
        wait_for("one connection open", lambda: Scrape(admin).value("kop_server_active_connections") == 1)
    assert Scrape(admin).value("kop_server_connections_total") >= 3


def test_waiting_fetches_gauge_follows_a_long_poll(kop_broker) -> None:
    from kafka.protocol.consumer import FetchRequest

    broker = kop_broker()
    admin = broker.admin_url
    topic = "long-poll"
    produce_batches(broker.bootstrap, topic, [batch([b"first"])])
    result: dict[str, object] = {}

    def long_poll() -> None:
        with Negotiated(broker.bootstrap) as c:
            FT = FetchRequest.FetchTopic
            req = FetchRequest(
                replica_id=-1, max_wait_ms=60000, min_bytes=1, max_bytes=1 << 20, isolation_level=0,
                session_id=0, session_epoch=-1, forgotten_topics_data=[], rack_id="",
                topics=[FT(topic=topic, partitions=[FT.FetchPartition(
                    partition=0, current_leader_epoch=-1, fetch_offset=1, log_start_offset=-1,
                    partition_max_bytes=1 << 20)])],
            )
            result["response"] = c.call(req, cap=12)

    th = threading.Thread(target=long_poll)
    th.start()
    try:
        wait_for("a fetch waiting", lambda: Scrape(admin).value("kop_server_waiting_fetches") == 1)
        produce_batches(broker.bootstrap, topic, [batch([b"second"])])
    finally:
        th.join(120)
    assert not th.is_alive()
    (t,) = result["response"].responses  # type: ignore[attr-defined]
    assert [h["base_offset"] for h in batch_headers(t.partitions[0].records)] == [1]
    assert Scrape(admin).value("kop_server_waiting_fetches") == 0


def test_topic_labels_are_capped(kop_broker) -> None:
    broker = kop_broker(metricsMaxTopicLabels=2)
    admin = broker.admin_url
    for name in ("cap-a", "cap-b", "cap-c", "cap-d"):
        produce_batches(broker.bootstrap, name, [batch([b"x", b"y"])])
    series = Scrape(admin).series("kop_server_records_in_total")
    assert series == {
        frozenset({("topic", full("cap-a"))}): 2,
        frozenset({("topic", full("cap-b"))}): 2,
        frozenset({("topic", "__other__")}): 4,
    }
    # deleting topics forgets their partitions, but no exported counter goes down
    from kafka.admin import KafkaAdminClient

    client = KafkaAdminClient(bootstrap_servers=broker.bootstrap)
    try:
        client.delete_topics(["cap-a", "cap-c"])
    finally:
        client.close()
    assert Scrape(admin).series("kop_server_records_in_total") == series


# ------------------------------------------------------------------------------------------------ logs


def test_one_structured_line_per_slow_request_and_per_connection_error(kop_broker) -> None:
    broker = kop_broker(slowRequestThresholdMs=0)  # every request is "slow": each one must log exactly once
    admin = broker.admin_url
    produce_batches(broker.bootstrap, "slow", [batch([b"a"]), batch([b"b"]), batch([b"c"])])

    def lines(pattern: str) -> list[str]:
        return [ln for ln in broker.log_path.read_text(errors="replace").splitlines() if re.search(pattern, ln)]

    wait_for("3 slow Produce lines", lambda: len(lines(r"slow request api=Produce ")) >= 3)
    produce_lines = lines(r"slow request api=Produce ")
    assert len(produce_lines) == 3
    kv = re.compile(r'(\w+)=("(?:[^"\\]|\\.)*"|\S+)')
    fields = [dict(kv.findall(ln.split("slow request ", 1)[1])) for ln in produce_lines]
    assert sorted(int(f["correlation_id"]) for f in fields) == [2, 3, 4]  # after ApiVersions (1)
    assert all(f["client_id"] == "kop-tests-wire" and float(f["latency_ms"]) >= 0 for f in fields)
    assert Scrape(admin).value("kop_server_slow_requests_total", api="Produce") == 3

    # a frame that is not a Kafka request: the connection is closed with one line, and counted
    with socket.create_connection(("127.0.0.1", broker.port)) as s:
        s.sendall(struct.pack(">i", 4) + b"\xff\xff\xff\xff")
        try:
            closed = s.recv(1) == b""
        except ConnectionResetError:
            closed = True
        assert closed, "the broker kept the connection open"
    wait_for("connection error line", lambda: len(lines(r"connection error peer=")) >= 1)
    (line,) = lines(r"connection error peer=")
    assert re.search(r"connection error peer=127\.0\.0\.1:\d+ listener=PLAINTEXT client_id=\S+ reason=\S", line)
    assert Scrape(admin).value("kop_server_connection_errors_total") == 1


# ------------------------------------------------------------------------------------------------ PIP-415


def test_message_id_by_index_returns_the_containing_entry_for_every_index(kop_broker) -> None:
    broker = kop_broker(managedLedgerMaxEntriesPerLedger=2, **ROLL)
    admin = broker.admin_url
    topic = "pip415"
    counts = [3, 2, 1, 4, 2]  # entries hold indexes 0-2, 3-4, 5, 6-9, 10-11 (the seed's example first)
    produce_kafka_python_batches(broker.bootstrap, topic, counts)
    stored = stored_batches(broker.bootstrap, topic)
    assert stored == [(0, 3), (3, 2), (5, 1), (6, 4), (10, 2)], "kafka-python did not batch per flush"
    positions = entry_positions(broker, topic)
    assert len(positions) == len(stored)
    assert len({lid for lid, _ in positions}) == 3  # 2 entries per ledger: the lookups cross ledgers

    url = topic_url(admin, f"{topic}-partition-0")
    name = f"persistent://public/default/{topic}-partition-0"
    for (base, count), (ledger_id, entry_id) in zip(stored, positions, strict=True):
        for index in range(base, base + count):
            want = {"ledgerId": ledger_id, "entryId": entry_id, "partitionIndex": 0}
            assert ok(f"{url}/getMessageIdByIndex?index={index}") == want, f"index {index}"
            assert kop_admin_json(admin, "topics", "get-message-id-by-index", "--index", str(index), name) == want
        # the reverse lookup: message id -> index (the entry's last record, or one record with batchIndex)
        back = ok(f"{url}/getIndexByMessageId?ledgerId={ledger_id}&entryId={entry_id}")
        assert (back["index"], back["firstIndex"], back["numMessages"]) == (base + count - 1, base, count)
        for i in range(count):
            assert ok(f"{url}/getIndexByMessageId?ledgerId={ledger_id}&entryId={entry_id}&batchIndex={i}")[
                "index"] == base + i
        cli = kop_admin_json(admin, "topics", "get-index-by-message-id", "-l", str(ledger_id), "-e", str(entry_id),
                             f"{topic}-partition-0")
        assert cli == back

    # the default (table) output carries the same numbers
    ledger_id, entry_id = positions[3]
    table = kop_admin(admin, "topics", "get-message-id-by-index", "--index", "8", name)
    assert table.returncode == 0, table.stderr
    rows = dict(line.split() for line in table.stdout.splitlines())
    assert rows == {"ledgerId": str(ledger_id), "entryId": str(entry_id), "partitionIndex": "0"}


def test_message_id_by_index_error_statuses(kop_broker) -> None:
    broker = kop_broker()
    admin = broker.admin_url
    topic = "pip415-errors"
    produce_batches(broker.bootstrap, topic, [batch([b"a", b"b", b"c"]), batch([b"d", b"e"])])  # indexes 0..4
    url = topic_url(admin, f"{topic}-partition-0") + "/getMessageIdByIndex"

    status, body = http_get(f"{url}?index=-1")
    assert status == 404 and "Invalid index -1" in body["reason"]
    status, body = http_get(f"{url}?index=5")  # one past the latest (4)
    assert status == 404 and "Invalid index 5" in body["reason"]
    assert http_get(f"{url}?index=4")[0] == 200
    assert http_get(f"{url}?index=four")[0] == 400
    assert http_get(url)[0] == 400
    # unknown topic, partition, namespace; the base name of a partitioned topic
    assert http_get(topic_url(admin, "no-such-topic-partition-0") + "/getMessageIdByIndex?index=0")[0] == 404
    assert http_get(topic_url(admin, f"{topic}-partition-1") + "/getMessageIdByIndex?index=0")[0] == 404
    assert http_get(topic_url(admin, f"{topic}-partition-0", namespace="nope")
                    + "/getMessageIdByIndex?index=0")[0] == 404
    status, body = http_get(topic_url(admin, topic) + "/getMessageIdByIndex?index=0")
    assert status == 404 and f"{topic}-partition-0" in body["reason"]
    # non-persistent topics: 405 (Pulsar's merged code; the PIP text said 406)
    status, _ = http_get(f"{admin}/admin/v2/non-persistent/public/default/{topic}-partition-0/getMessageIdByIndex?index=0")
    assert status == 405
    # reverse lookup of an entry that does not exist
    rurl = topic_url(admin, f"{topic}-partition-0") + "/getIndexByMessageId"
    assert http_get(f"{rurl}?ledgerId=999&entryId=0")[0] == 404
    assert http_get(f"{rurl}?ledgerId=0&entryId=x")[0] == 400

    # kop-admin: the server's reason and exit status 1; bad arguments: exit status 2
    r = kop_admin(admin, "topics", "get-message-id-by-index", "--index", "5", f"{topic}-partition-0")
    assert r.returncode == 1 and "Invalid index 5" in r.stderr and "HTTP 404" in r.stderr
    r = kop_admin(admin, "topics", "get-message-id-by-index", "--index", "0", "no-such-topic-partition-0")
    assert r.returncode == 1 and "not found" in r.stderr
    r = kop_admin(admin, "topics", "get-message-id-by-index", "--index", "x", f"{topic}-partition-0")
    assert r.returncode == 2 and "--index" in r.stderr
    r = kop_admin(admin, "topics", "get-message-id-by-index", f"{topic}-partition-0")
    assert r.returncode == 2 and "--index" in r.stderr
    r = kop_admin(admin, "topics", "get-message-id-by-index", "--index", "0", "a/b/c/d")
    assert r.returncode == 2 and "invalid topic name" in r.stderr


def test_index_deleted_by_retention_answers_message_id_earliest(kop_broker) -> None:
    from kafka.admin import KafkaAdminClient, NewTopic

    broker = kop_broker(managedLedgerMaxEntriesPerLedger=1, retentionCheckIntervalMs=100, **ROLL)
    admin = broker.admin_url
    topic = "pip415-retention"
    client = KafkaAdminClient(bootstrap_servers=broker.bootstrap)
    try:
        client.create_topics([NewTopic(topic, 1, 1, topic_configs={"retention.bytes": "1"})])
    finally:
        client.close()
    produce_batches(broker.bootstrap, topic, [batch([b"a", b"b"]), batch([b"c"]), batch([b"d", b"e"])])
    stats_url = topic_url(admin, f"{topic}-partition-0") + "/internalStats"
    wait_for("retention deleted the first ledgers", lambda: ok(stats_url)["logStartOffset"] == 3)

    url = topic_url(admin, f"{topic}-partition-0") + "/getMessageIdByIndex"
    earliest = {"ledgerId": -1, "entryId": -1, "partitionIndex": -1}  # Pulsar's MessageId.earliest
    for index in (0, 1, 2):
        assert ok(f"{url}?index={index}") == earliest
    live = ok(f"{url}?index=3")
    assert live["partitionIndex"] == 0 and live["ledgerId"] >= 0
    assert ok(f"{url}?index=4") == live
    r = kop_admin(admin, "topics", "get-message-id-by-index", "--index", "0", f"{topic}-partition-0")
    assert r.returncode == 0 and "MessageId.earliest" in r.stdout and "-1" in r.stdout


def test_index_lookups_answer_412_when_broker_entry_metadata_is_not_exposed(kop_broker) -> None:
    broker = kop_broker(exposingBrokerEntryMetadataToAdminEnabled="false")
    admin = broker.admin_url
    topic = "pip415-412"
    produce_batches(broker.bootstrap, topic, [batch([b"a"])])
    base = topic_url(admin, f"{topic}-partition-0")
    status, body = http_get(base + "/getMessageIdByIndex?index=0")
    assert status == 412 and "not enabled" in body["reason"]
    assert http_get(base + "/getIndexByMessageId?ledgerId=0&entryId=0")[0] == 412
    r = kop_admin(admin, "topics", "get-message-id-by-index", "--index", "0", f"{topic}-partition-0")
    assert r.returncode == 1 and "HTTP 412" in r.stderr
    assert http_get(base + "/internalStats")[0] == 200  # only the index lookups are refused


# ------------------------------------------------------------------------------------------------ REST


def test_internal_stats_agree_with_the_managed_ledger_after_forced_rollovers(kop_broker) -> None:
    broker = kop_broker(managedLedgerMaxEntriesPerLedger=3, **ROLL)
    admin = broker.admin_url
    topic = "internal"
    counts = [2, 1, 3, 1, 1, 2, 1, 1, 4, 1]  # 10 entries, 17 records: ledgers of 3, 3, 3, 1 entries
    produce_batches(broker.bootstrap, topic, [batch([b"r"] * n) for n in counts])

    stats = ok(topic_url(admin, f"{topic}-partition-0") + "/internalStats")
    view = managed_ledger(broker, topic, 0)
    assert [(li["ledgerId"], li["entries"]) for li in stats["ledgers"]] == [
        (lv.ledger_id, lv.entries) for lv in view.ledgers]
    assert [li["entries"] for li in stats["ledgers"]] == [3, 3, 3, 1]
    closed = [lv for lv in view.ledgers if not lv.current]
    assert [li["size"] for li in stats["ledgers"][: len(closed)]] == [lv.size for lv in closed]
    assert stats["numberOfEntries"] == view.entries == len(counts)
    assert stats["currentIndex"] == sum(counts) - 1 == stats["highWatermark"] - 1
    assert stats["logStartOffset"] == 0
    last = view.ledgers[-1]
    assert stats["lastConfirmedEntry"] == f"{last.ledger_id}:{last.entries - 1}"
    assert (stats["currentLedgerEntries"], stats["rollovers"]) == (1, 3)
    assert stats["properties"]["index"] == view.properties["index"]  # the ledger info's recovery point
    assert Scrape(admin).value("kop_managed_ledger_rollovers_total") == 3
    assert kop_admin_json(admin, "topics", "internal-stats", f"persistent://public/default/{topic}-partition-0") \
        == stats
    table = kop_admin(admin, "topics", "internal-stats", f"{topic}-partition-0")
    assert table.returncode == 0
    for lv in view.ledgers:
        assert re.search(rf"^{lv.ledger_id}\s+{lv.entries}\s", table.stdout, re.M), table.stdout

    # the internal stats survive a restart unchanged, apart from the new (empty) current ledger
    broker.restart()
    admin = broker.admin_url
    again = ok(topic_url(admin, f"{topic}-partition-0") + "/internalStats")
    assert [(li["ledgerId"], li["entries"]) for li in again["ledgers"] if li["entries"]] == [
        (li["ledgerId"], li["entries"]) for li in stats["ledgers"]]
    assert again["currentIndex"] == stats["currentIndex"]


def test_topic_listing_metadata_and_stats(kop_broker) -> None:
    from kafka.admin import KafkaAdminClient, NewTopic

    broker = kop_broker()
    admin = broker.admin_url
    client = KafkaAdminClient(bootstrap_servers=broker.bootstrap)
    try:
        client.create_topics([NewTopic("three", 3, 1), NewTopic("tenant2/ns2/other", 1, 1)])
    finally:
        client.close()
    with Negotiated(broker.bootstrap) as c:
        for p, values in enumerate(([b"a"], [b"b", b"c"], [])):
            if values:
                r = c.call(_produce_request("three", p, batch(values)), cap=9)
                assert r.responses[0].partition_responses[0].error_code == 0

    assert "public" in ok(f"{admin}/admin/v2/tenants") and "tenant2" in ok(f"{admin}/admin/v2/tenants")
    assert ok(f"{admin}/admin/v2/namespaces/tenant2") == ["tenant2/ns2"]
    assert http_get(f"{admin}/admin/v2/namespaces/nobody")[0] == 404
    assert ok(f"{admin}/admin/v2/persistent/public/default") == [
        f"persistent://public/default/three-partition-{p}" for p in range(3)]
    assert ok(f"{admin}/admin/v2/persistent/public/default/partitioned") == ["persistent://public/default/three"]
    assert ok(f"{admin}/admin/v2/persistent/tenant2/ns2") == ["persistent://tenant2/ns2/other-partition-0"]
    assert http_get(f"{admin}/admin/v2/persistent/public/nope")[0] == 404
    assert ok(topic_url(admin, "three") + "/partitions") == {"partitions": 3}
    assert ok(topic_url(admin, "three-partition-1") + "/partitions") == {"partitions": 0}
    assert http_get(topic_url(admin, "missing") + "/partitions")[0] == 404

    one = ok(topic_url(admin, "three-partition-1") + "/stats")
    assert (one["msgInCounter"], one["highWatermark"], one["logStartOffset"]) == (2, 2, 0)
    agg = ok(topic_url(admin, "three") + "/partitioned-stats")
    assert agg["msgInCounter"] == 3 and agg["metadata"] == {"partitions": 3}
    assert sorted(agg["partitions"]) == [f"persistent://public/default/three-partition-{p}" for p in range(3)]
    assert agg["partitions"]["persistent://public/default/three-partition-1"] == one
    assert http_get(topic_url(admin, "three") + "/stats")[0] == 404  # a partitioned topic's base name

    # kop-admin prints the same
    assert kop_admin_json(admin, "topics", "list", "public/default") == ok(f"{admin}/admin/v2/persistent/public/default")
    assert kop_admin_json(admin, "topics", "stats", "three-partition-1") == one
    listing = kop_admin(admin, "topics", "list", "public/default")
    assert listing.stdout.split() == [f"persistent://public/default/three-partition-{p}" for p in range(3)]
    r = kop_admin(admin, "topics", "stats", "persistent://public/default/missing-partition-0")
    assert r.returncode == 1 and "not found" in r.stderr
    r = kop_admin(admin, "topics", "list", "no-slash")
    assert r.returncode == 2 and "tenant/namespace" in r.stderr


def _produce_request(topic: str, partition: int, records: bytes):
    from kafka.protocol.producer import ProduceRequest

    T = ProduceRequest.TopicProduceData
    return ProduceRequest(transactional_id=None, acks=-1, timeout_ms=30000, topic_data=[
        T(name=topic, partition_data=[T.PartitionProduceData(index=partition, records=records)])])


def test_health_and_readiness(kop_broker) -> None:
    broker = kop_broker()
    admin = broker.admin_url
    for path in ("/health", "/ready", "/admin/v2/brokers/health", "/admin/v2/brokers/ready"):
        assert http_get(admin + path) == (200, "ok\n"), path
    assert ok(f"{admin}/admin/v2/clusters") == ["standalone"]
    r = kop_admin(admin, "brokers", "healthcheck")
    assert (r.returncode, r.stdout.strip()) == (0, "ok")


def test_web_service_port_minus_one_disables_the_admin_server(kop_broker) -> None:
    broker = kop_broker(webServicePort=-1)
    produce_batches(broker.bootstrap, "no-admin", [batch([b"a"])])
    assert "admin HTTP listening" not in broker.log_path.read_text()


def test_admin_port_in_use_stops_start_up_with_a_message_naming_it(tmp_path) -> None:
    import subprocess
    import sys

    from tests.support.net import free_port

    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        r = subprocess.run(
            [sys.executable, "-m", "kop.cli", "standalone", "--data-dir", str(tmp_path / "data"),
             "--override", f"kafkaListeners=PLAINTEXT://127.0.0.1:{free_port()}",
             "--override", f"webServicePort={port}", "--override", "webServiceBindAddress=127.0.0.1"],
            capture_output=True, text=True, timeout=120,
        )
    assert r.returncode == 1
    assert f"admin HTTP server (webServiceBindAddress=127.0.0.1, webServicePort={port}," in r.stderr
