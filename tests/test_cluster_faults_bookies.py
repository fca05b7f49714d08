"""Two of four bookies killed under load (issue #24), against the real ZooKeeper and bookies of
tests/support/bookkeeper.py (the shared cluster: both bookies are started again before the test ends).

A broker (E/Qw/Qa 3/3/2) takes acks=all produces on 4 partitions from kafka-python; two bookies are
SIGKILLed. Their registrations outlive them by their ZooKeeper session, so they still look writable:
before issue #24 each ledger swapped its ensemble back and forth between them (306 changes on one
ledger). Now a replacement is never a bookie that failed (on this ledger, or on any within the quarantine),
so every ledger changes its ensemble at most twice (with 4 bookies, E=3: at most once, in fact), then
stops with NotEnoughBookies - one WARNING line per ledger - while the producer retries; the changes are
counted on /metrics (kop_bookkeeper_ensemble_changes_total). Once the bookies are back (registered with
new sessions, which lifts their quarantine) acknowledgements go on.
"""

from __future__ import annotations

import re
import threading
import time
import urllib.request
import uuid
from collections import Counter

from kop.storage.bookkeeper import LedgerMetadata, ledger_path
from tests.support.clients import create_topic
from tests.support.cluster import eventually, start_brokers, stop_brokers


def _ensemble_changes_metric(admin_url: str) -> float:
    text = urllib.request.urlopen(admin_url + "/metrics", timeout=10).read().decode()
    m = re.search(r"^kop_bookkeeper_ensemble_changes_total (\S+)$", text, re.M)
    assert m, "no kop_bookkeeper_ensemble_changes_total in /metrics"
    return float(m.group(1))


def test_two_of_four_bookies_killed_under_load(cluster, tmp_path_factory):
    from kafka import KafkaProducer

    brokers = start_brokers(tmp_path_factory, cluster, 1)
    broker = brokers[0]
    killed: list[int] = []
    stop = threading.Event()
    try:
        topic = "bookies-" + uuid.uuid4().hex[:6]
        partitions = 4
        create_topic(broker.bootstrap, topic, partitions)
        assert _ensemble_changes_metric(broker.admin_url) == 0
        producer = KafkaProducer(bootstrap_servers=broker.bootstrap, acks="all", linger_ms=2, retries=1_000_000,
                                 request_timeout_ms=5000, retry_backoff_ms=100,
                                 max_in_flight_requests_per_connection=1)
        acked = [0]

        def produce() -> None:
            i = 0
            while not stop.is_set():
                try:
                    producer.send(topic, value=f"v-{i}".encode(), partition=i % partitions).get(timeout=60)
                    acked[0] += 1
                except Exception:
                    pass
                i += 1

        t = threading.Thread(target=produce, daemon=True)
        t.start()
        eventually("acks before the kill", lambda: acked[0] >= 200, timeout=120)
        killed = [0, 1]
        killed_at = time.monotonic()
        for i in killed:
            cluster.kill_bookie(i)
        # Under load until every ledger being written has met the dead bookies: some changed their
        # ensemble, and the ones that found no replacement said so.
        eventually("ensemble changes", lambda: _ensemble_changes_metric(broker.admin_url) >= 1, timeout=120)
        eventually("a ledger that found no replacement",
                   lambda: "no bookie can replace" in broker.log_path.read_text(errors="replace"), timeout=120)
        time.sleep(3)  # more load against the two dead bookies (what made the storm)

        zk = cluster.zk()
        changes: dict[int, int] = {}
        for name in broker.managed_ledger_names():
            view = broker.managed_ledger_view(name)
            for lv in view.ledgers if view else []:
                value, _ = zk.get(ledger_path(lv.ledger_id))
                changes[lv.ledger_id] = len(LedgerMetadata.decode(value).segments) - 1
        assert changes and max(changes.values()) <= 2, changes
        metric = _ensemble_changes_metric(broker.admin_url)
        # Every new segment is a counted change (a change before the segment's first ack rewrites it in
        # place: counted, no segment), and none beyond two per ledger.
        assert sum(changes.values()) <= metric <= 2 * len(changes), (metric, changes)
        stops = Counter(re.findall(r"WARNING .*ledger (\d+): no bookie can replace",
                                   broker.log_path.read_text(errors="replace")))
        assert stops and max(stops.values()) == 1, stops
        # Every produce retry tries a ledger switch, which fails while two bookies are gone: logged at most
        # once per managed ledger per 10 s (and each failed produce append once per partition and cause).
        text = broker.log_path.read_text(errors="replace")
        windows = 1 + int((time.monotonic() - killed_at) // 10) + 1
        switches = Counter(re.findall(r"managed ledger (\S+): ledger switch failed", text))
        assert max(switches.values(), default=0) <= windows, switches
        appends = Counter(re.findall(r"ERROR .*append to (\S+) failed: \w+\(.*?(\w+Error)", text))
        assert max(appends.values(), default=0) <= 2 * windows, appends

        for i in killed:
            cluster.start_bookie(i)
        killed = []
        before = acked[0]
        eventually("acks after the bookies are back", lambda: acked[0] >= before + 100, timeout=120)
    finally:
        stop.set()
        stop_brokers(brokers)
        for i in killed:
            cluster.start_bookie(i)
        cluster.ensure_all_up()
