"""Broker metrics: cheap counters on the hot path, Prometheus exposition at scrape time.

Why plain ints instead of prometheus-client's Counter/Histogram objects on the hot path: every metric
here is touched only by the event-loop thread, so the per-value locks prometheus-client takes (it is
written for threaded servers) buy nothing and cost about a microsecond per observation. The produce and
fetch paths therefore bump slotted ints and bisect a bucket list; a custom `Collector` turns them into
prometheus-client metric families when /metrics is scraped, and prometheus-client does the exposition
format, the registry and the process/platform/GC collectors. No labels are created per request: every
labelled child (a histogram per (API, version), a counter set per partition) is created once and cached.

Label cardinality is bounded (docs/operability.md):

* `api`, `version`: the served API table (15 APIs, at most ~13 versions each);
* `topic`: the first `metricsMaxTopicLabels` topics seen get their own label (full Pulsar name,
  `persistent://tenant/ns/topic`); later ones share `__other__`. A topic keeps its label for the life of
  the process, so every series stays monotonic;
* `group`: the first `metricsMaxGroupLabels` groups (by name, at each scrape) get their own label, the rest
  are summed under `__other__`; `partition` is bounded by the partitions those groups commit offsets for.
"""

from __future__ import annotations

import bisect
import logging
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import Any

from prometheus_client import CollectorRegistry
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily, Metric
from prometheus_client.registry import Collector

log = logging.getLogger("kop.metrics")
slow_log = logging.getLogger("kop.requests.slow")

OTHER = "__other__"

# Seconds. Requests span ~100 us (metadata) to the long-poll cap; fsync'd appends sit in the ms range.
LATENCY_BUCKETS = (
    0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0,
)


class Histogram:
    """A histogram owned by one thread (the event loop): a bisect and two additions per observation."""

    __slots__ = ("bounds", "counts", "sum")

    def __init__(self, bounds: tuple[float, ...] = LATENCY_BUCKETS) -> None:
        self.bounds = bounds
        self.counts = [0] * (len(bounds) + 1)  # last slot: above the largest bound (+Inf)
        self.sum = 0.0

    def observe(self, value: float) -> None:
        self.counts[bisect.bisect_left(self.bounds, value)] += 1
        self.sum += value

    @property
    def count(self) -> int:
        return sum(self.counts)

    def buckets(self) -> list[tuple[str, int]]:
        """Cumulative (le, count) pairs as Prometheus wants them."""
        out = []
        acc = 0
        for bound, n in zip(self.bounds, self.counts, strict=False):
            acc += n
            out.append((repr(float(bound)), acc))
        acc += self.counts[-1]
        out.append(("+Inf", acc))
        return out


class PartitionCounters:
    """Traffic of one partition since start-up; `topic_label` is fixed when the counters are created."""

    __slots__ = (
        "topic", "partition", "topic_label",
        "bytes_in", "records_in", "batches_in", "bytes_out", "records_out", "batches_out",
        "_snap", "rate_records_in", "rate_bytes_in", "rate_records_out", "rate_bytes_out",
    )

    def __init__(self, topic: str, partition: int, topic_label: str) -> None:
        self.topic = topic
        self.partition = partition
        self.topic_label = topic_label
        self.bytes_in = self.records_in = self.batches_in = 0
        self.bytes_out = self.records_out = self.batches_out = 0
        self._snap: tuple[float, int, int, int, int] | None = None
        self.rate_records_in = self.rate_bytes_in = self.rate_records_out = self.rate_bytes_out = 0.0

    def sample(self, now: float) -> None:
        """Rates over the window since the previous sample (Pulsar's statsUpdateFrequencyInSecs)."""
        snap = (now, self.records_in, self.bytes_in, self.records_out, self.bytes_out)
        prev = self._snap
        self._snap = snap
        if prev is None:
            return
        dt = now - prev[0]
        if dt <= 0:
            return
        self.rate_records_in = (snap[1] - prev[1]) / dt
        self.rate_bytes_in = (snap[2] - prev[2]) / dt
        self.rate_records_out = (snap[3] - prev[3]) / dt
        self.rate_bytes_out = (snap[4] - prev[4]) / dt


@dataclass(slots=True)
class LagSample:
    group: str
    topic: str  # full Pulsar name of the topic
    partition: int
    committed: int
    log_end_offset: int

    @property
    def lag(self) -> int:
        return self.log_end_offset - self.committed


class BrokerMetrics:
    """Everything the handlers count, plus the registry /metrics exposes.

    Created by the BrokerService; the Kafka handler reaches it as `handler.metrics`. Gauges that can be
    read from live state (connections, rollovers) are read at scrape time through `sources`, so the hot
    path does not maintain them."""

    def __init__(self, max_topic_labels: int = 1000, max_group_labels: int = 100,
                 slow_request_threshold_ms: int = 1000, api_name: Callable[[int], str] | None = None) -> None:
        self.max_topic_labels = max_topic_labels
        self.max_group_labels = max_group_labels
        self.slow_threshold = slow_request_threshold_ms / 1000 if slow_request_threshold_ms >= 0 else float("inf")
        self._api_name = api_name or _api_name
        self.requests: dict[tuple[int, int], Histogram] = {}
        self.queue: dict[int, Histogram] = {}
        self.slow_requests: dict[int, int] = {}
        self.produce_encode = Histogram()
        self.produce_publish = Histogram()
        self.fetch_read = Histogram()
        self.waiting_fetches = 0
        self.fetch_sendfile_bytes = 0  # bytes of Fetch answers sent from ledger files by sendfile (kop/kafka/sendfile.py)
        self.connections_accepted = 0
        self.connection_errors = 0
        # Kafka authentications by mechanism (SSL for client certificates): {(mechanism, outcome): count}
        self.authentications: dict[tuple[str, str], int] = {}
        self.partitions: dict[str, PartitionCounters] = {}  # by managed-ledger name, live partitions only
        self._topic_labels: dict[str, str] = {}
        self._own_labels = 0  # topics ever given their own label (never decreases: the cap bounds series)
        self._retired: dict[str, list[int]] = {}  # topic label -> counts of deleted topics' partitions
        # Whether a topic (full Pulsar name) still exists; set by the broker service. Deleted topics'
        # counters are folded into _retired at scrape time, so memory follows the live partitions while
        # every exported series stays monotonic.
        self.topic_exists: Callable[[str], bool] = lambda topic: True
        self.lag: list[LagSample] = []
        # Read at scrape time: set by whoever owns the state (the broker service, the Kafka handler).
        self.active_connections: Callable[[], int] = lambda: 0
        self.fetch_sessions: Callable[[], int] = lambda: 0
        self.incremental_fetches: Callable[[], int] = lambda: 0
        self.request_bytes: Callable[[], int] = lambda: 0
        self.request_bytes_peak: Callable[[], int] = lambda: 0
        self.request_bytes_pauses: Callable[[], int] = lambda: 0
        self.connections_rejected: Callable[[], int] = lambda: 0
        self.open_logs: Callable[[], dict[str, Any]] = dict
        self.storage_status: Callable[[], dict[str, Any]] = dict  # set by the admin server (views.storage_status)
        self._rollovers_seen: dict[str, int] = {}
        self._rollovers_retired = 0
        self.registry = CollectorRegistry(auto_describe=False)
        self.registry.register(_Collector(self))
        from prometheus_client.gc_collector import GCCollector
        from prometheus_client.platform_collector import PlatformCollector
        from prometheus_client.process_collector import ProcessCollector

        ProcessCollector(registry=self.registry)
        PlatformCollector(registry=self.registry)
        GCCollector(registry=self.registry)

    # ------------------------------------------------------------------ hot path
    def authenticated(self, mechanism: str, ok: bool) -> None:
        key = (mechanism, "success" if ok else "failure")
        self.authentications[key] = self.authentications.get(key, 0) + 1

    def request_done(self, conn: Any, pending: Any, now: float) -> None:
        """One request answered (or, for acks=0 produce, finished): latency, queue time, slow-request log."""
        key = pending.api_key
        seconds = now - pending.started
        h = self.requests.get((key, pending.version))
        if h is None:
            h = self.requests[(key, pending.version)] = Histogram()
        h.observe(seconds)
        q = self.queue.get(key)
        if q is None:
            q = self.queue[key] = Histogram()
        queued = pending.dequeued - pending.started if pending.dequeued else 0.0
        q.observe(queued)
        if seconds - pending.allowance > self.slow_threshold:
            self.slow_requests[key] = self.slow_requests.get(key, 0) + 1
            slow_log.warning(
                "slow request api=%s version=%d correlation_id=%d client_id=%s peer=%s listener=%s "
                "latency_ms=%.1f queue_ms=%.1f allowance_ms=%.0f threshold_ms=%.0f",
                self._api_name(key), pending.version, pending.correlation_id, log_value(conn.client_id), conn.peer,
                conn.listener_name, seconds * 1000, queued * 1000, pending.allowance * 1000,
                self.slow_threshold * 1000,
            )

    pulsar: list[dict[str, Any]] = []  # Pulsar subscriptions, refreshed by the admin server at each scrape

    def partition(self, topic: str, partition: int, ledger_name: str) -> PartitionCounters:
        """The counters of one partition (cached; the first call for a topic fixes its label)."""
        c = self.partitions.get(ledger_name)
        if c is None:
            c = self.partitions[ledger_name] = PartitionCounters(topic, partition, self.topic_label(topic))
        return c

    def topic_label(self, topic: str) -> str:
        """The `topic` label of a topic: its own name for the first max_topic_labels topics, then OTHER."""
        label = self._topic_labels.get(topic)
        if label is None:
            if self._own_labels < self.max_topic_labels:
                label = topic
                self._own_labels += 1
            else:
                label = OTHER
            self._topic_labels[topic] = label
        return label

    def sweep_deleted_topics(self) -> None:
        """Fold the counters of deleted topics into their label's retired counts and forget them (a topic
        that had its own label keeps it, so the series continues if the topic is created again)."""
        exists: dict[str, bool] = {}
        for key, c in list(self.partitions.items()):
            alive = exists.get(c.topic)
            if alive is None:
                alive = exists[c.topic] = self.topic_exists(c.topic)
            if alive:
                continue
            acc = self._retired.setdefault(c.topic_label, [0, 0, 0, 0, 0, 0])
            for i, v in enumerate(_counts(c)):
                acc[i] += v
            del self.partitions[key]
            if self._topic_labels.get(c.topic) == OTHER:
                del self._topic_labels[c.topic]

    # ------------------------------------------------------------------ periodic / scrape-time
    def sample_rates(self, now: float | None = None) -> None:
        now = time.monotonic() if now is None else now
        for c in self.partitions.values():
            c.sample(now)

    def rollovers_total(self) -> int:
        """Ledger rollovers since start-up, kept monotonic when a log closes (its last count is retired)."""
        logs = self.open_logs()
        current: dict[str, int] = {}
        for name, plog in logs.items():
            current[name] = plog.rollovers
        for name, n in self._rollovers_seen.items():
            if name not in current:
                self._rollovers_retired += n
            elif current[name] < n:  # reopened: the new instance counts from zero
                self._rollovers_retired += n
        self._rollovers_seen = current
        return self._rollovers_retired + sum(current.values())

    def group_labels(self, groups: Iterable[str]) -> dict[str, str]:
        names = sorted(set(groups))
        keep = set(names[: self.max_group_labels])
        return {g: (g if g in keep else OTHER) for g in names}


def _counts(c: PartitionCounters) -> tuple[int, int, int, int, int, int]:
    return (c.bytes_in, c.records_in, c.batches_in, c.bytes_out, c.records_out, c.batches_out)


def _api_name(key: int) -> str:
    from kop.protocol import api_info

    try:
        return api_info(key).name
    except KeyError:
        return f"api#{key}"


def log_value(value: str | None) -> str:
    """A value for a key=value log line that stays one token: bare when simple, else double-quoted with
    backslash escapes (newlines flattened), so every line parses with one regex."""
    if value is None:
        return "-"
    if value and all(c.isalnum() or c in "-_.:/@" for c in value):
        return value
    return '"' + value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", " ") + '"'


def _storage_families(st: dict[str, Any]) -> Iterator[Metric]:
    """Damaged ledger files, the reads they failed, recovery steps and write failures (issue #12)."""
    damaged = GaugeMetricFamily("kop_storage_damaged", "Damaged places found in ledger files (each one is "
                                "logged once; admin internalStats lists them)", labels=["kind"])
    kinds: dict[str, int] = {}
    for d in st.get("damage", []):
        kinds[d["kind"]] = kinds.get(d["kind"], 0) + 1
    for kind, n in sorted(kinds.items()):
        damaged.add_metric([kind], n)
    yield damaged
    yield CounterMetricFamily("kop_storage_damaged_reads", "Reads of damaged entries (answered KAFKA_STORAGE_ERROR)",
                              value=st.get("damagedReads", 0))
    steps = CounterMetricFamily("kop_storage_recovery_steps", "Recovery steps taken when opening ledgers: "
                                "torn_tails, torn_bytes (bytes dropped), damaged_entries_kept, ledgers_recovered, "
                                "empty_ledgers_dropped, damaged_last_entry", labels=["step"])
    for step, n in sorted(st.get("recovery", {}).items()):
        steps.add_metric([step], n)
    yield steps
    yield CounterMetricFamily("kop_storage_write_errors", "Failed ledger writes (a full or failing disk; the "
                              "produce answered KAFKA_STORAGE_ERROR)", value=st.get("writeErrors", 0))
    if "ensembleChanges" in st:  # cluster mode: BookKeeper ledgers
        yield CounterMetricFamily("kop_bookkeeper_ensemble_changes", "BookKeeper ensemble changes of the ledgers "
                                  "this broker writes (a failed bookie replaced; at most writable bookies - E per "
                                  "ledger, docs/cluster.md)", value=st["ensembleChanges"])


class _Collector(Collector):
    """Builds the metric families from BrokerMetrics at scrape time."""

    def __init__(self, m: BrokerMetrics) -> None:
        self.m = m

    def describe(self) -> Iterable[Metric]:
        return []

    # long: the catalogue of exported families in /metrics order; split up it would only scatter the list
    def collect(self) -> Iterator[Metric]:
        m = self.m
        api = m._api_name
        lat = HistogramMetricFamily(
            "kop_server_request_latency_seconds",
            "Kafka requests by API and version: time from the request frame arriving to its response being "
            "handed to the socket (the _count is the number of requests)",
            labels=["api", "version"],
        )
        for (key, version), h in sorted(m.requests.items()):
            lat.add_metric([api(key), str(version)], h.buckets(), h.sum)
        yield lat
        queue = HistogramMetricFamily(
            "kop_server_request_queue_seconds",
            "Time from a request frame arriving to its handler starting (event-loop queueing)",
            labels=["api"],
        )
        for key, h in sorted(m.queue.items()):
            queue.add_metric([api(key)], h.buckets(), h.sum)
        yield queue
        slow = CounterMetricFamily(
            "kop_server_slow_requests", "Requests slower than slowRequestThresholdMs (each one is logged)",
            labels=["api"],
        )
        for key, n in sorted(m.slow_requests.items()):
            slow.add_metric([api(key)], n)
        yield slow
        for name, h, doc in (
            ("kop_server_produce_encode_seconds", m.produce_encode,
             "Produce, per partition: topic lookup, batch checks (header, CRC32C, sequence) until the append is issued"),
            ("kop_server_produce_publish_seconds", m.produce_publish,
             "Produce, per partition: from issuing the append to the entry being durable"),
            ("kop_server_fetch_read_seconds", m.fetch_read,
             "Fetch: time reading entries for one pass over the request's partitions"),
        ):
            fam = HistogramMetricFamily(name, doc)
            fam.add_metric([], h.buckets(), h.sum)
            yield fam

        m.sweep_deleted_topics()
        per_topic: dict[str, list[int]] = {label: list(acc) for label, acc in m._retired.items()}
        for c in m.partitions.values():
            acc = per_topic.get(c.topic_label)
            if acc is None:
                acc = per_topic[c.topic_label] = [0, 0, 0, 0, 0, 0]
            for i, v in enumerate(_counts(c)):
                acc[i] += v
        for i, (name, doc) in enumerate((
            ("kop_server_bytes_in", "Record-batch bytes appended by Produce (retried duplicates not counted)"),
            ("kop_server_records_in", "Records appended by Produce"),
            ("kop_server_batches_in", "Record batches (= ledger entries) appended by Produce"),
            ("kop_server_bytes_out", "Record-batch bytes sent in Fetch responses"),
            ("kop_server_records_out", "Records in the batches sent in Fetch responses (whole batches)"),
            ("kop_server_batches_out", "Record batches sent in Fetch responses"),
        )):
            counter = CounterMetricFamily(name, doc, labels=["topic"])
            for label, acc in sorted(per_topic.items()):
                counter.add_metric([label], acc[i])
            yield counter

        yield GaugeMetricFamily("kop_server_waiting_fetches", "Fetch requests waiting for data (long poll)",
                                value=m.waiting_fetches)
        yield CounterMetricFamily("kop_server_fetch_sendfile_bytes", "Bytes of Fetch answers sent from the ledger "
                                  "files with sendfile (zero copy; the rest of bytes_out was read and written)",
                                  value=m.fetch_sendfile_bytes)
        yield GaugeMetricFamily("kop_server_active_connections", "Open Kafka client connections",
                                value=m.active_connections())
        yield GaugeMetricFamily("kop_server_fetch_sessions", "Fetch sessions (KIP-227) in the cache",
                                value=m.fetch_sessions())
        yield CounterMetricFamily("kop_server_incremental_fetches", "Fetch requests served as incremental "
                                  "(KIP-227: only changes listed and answered)", value=m.incremental_fetches())
        yield CounterMetricFamily("kop_server_connections", "Kafka client connections accepted",
                                  value=m.connections_accepted)
        yield CounterMetricFamily("kop_server_connections_rejected", "Kafka connections closed at accept: "
                                  "maxConnectionsPerIp reached for the address", value=m.connections_rejected())
        yield GaugeMetricFamily("kop_server_request_bytes", "Bytes of requests (Kafka and Pulsar) being received or not yet "
                                "answered, all connections (bounded by queuedMaxRequestBytes)", value=m.request_bytes())
        yield GaugeMetricFamily("kop_server_request_bytes_peak", "Highest kop_server_request_bytes since start",
                                value=m.request_bytes_peak())
        yield CounterMetricFamily("kop_server_request_bytes_pauses", "Times queuedMaxRequestBytes was reached "
                                  "(reading paused on every connection)", value=m.request_bytes_pauses())
        yield CounterMetricFamily(
            "kop_server_connection_errors",
            "Kafka connections closed because of an error (bad frame, failed request, reset; each one is logged)",
            value=m.connection_errors,
        )
        auth = CounterMetricFamily("kop_server_authentications", "Kafka authentications by mechanism (SSL: client "
                                   "certificates) and result (success, failure)", labels=["mechanism", "result"])
        for (mech, result), n in sorted(m.authentications.items()):
            auth.add_metric([mech, result], n)
        yield auth
        yield CounterMetricFamily("kop_managed_ledger_rollovers", "Ledger rollovers of all managed ledgers",
                                  value=m.rollovers_total())
        yield from _storage_families(m.storage_status())

        lag = GaugeMetricFamily(
            "kop_consumer_group_lag",
            "Consumer lag: log end offset - committed offset, per group and partition (refreshed at each scrape)",
            labels=["group", "topic", "partition"],
        )
        labels = m.group_labels(s.group for s in m.lag)
        sums: dict[tuple[str, str, str], int] = {}
        for s in m.lag:
            lag_key = (labels[s.group], m.topic_label(s.topic), str(s.partition))
            sums[lag_key] = sums.get(lag_key, 0) + s.lag
        for lag_labels, total in sorted(sums.items()):
            lag.add_metric(list(lag_labels), total)
        yield lag
        yield from _pulsar_families(m)


def _pulsar_families(m: BrokerMetrics) -> Iterator[Metric]:
    """Pulsar's topic and subscription metrics (names as Pulsar's broker exports them) for the partitions the
    pulsar handler serves, from the samples taken at scrape time. Topics past metricsMaxTopicLabels share the
    topic label OTHER, as the kop_server_* families do."""
    topics: dict[tuple[str, str], list[int]] = {}
    subs: dict[tuple[str, str, str], list[int]] = {}
    for s in m.pulsar:
        label = m.topic_label(s["topic"])
        t = topics.setdefault((s["namespace"], label), [0, 0, 0, 0, 0, 0, 0, 0])
        t[0] = max(t[0], s["msgInCounter"]) if label != OTHER else t[0] + s["msgInCounter"]
        t[1] = max(t[1], s["bytesInCounter"]) if label != OTHER else t[1] + s["bytesInCounter"]
        if s["subscription"] is None:
            t[7] = max(t[7], s["producers"])
            continue
        t[2] += s["msgOutCounter"]
        t[3] += s["bytesOutCounter"]
        t[4] += s["msgBacklog"]
        t[5] += 1
        t[6] += s["consumers"]
        t[7] = max(t[7], s["producers"])
        acc = subs.setdefault((s["namespace"], label, s["subscription"]), [0, 0, 0, 0, 0, 0])
        for i, k in enumerate(("msgBacklog", "unackedMessages", "consumers", "msgOutCounter", "bytesOutCounter")):
            acc[i] += s[k]
        acc[5] += s.get("msgDropCount", 0)  # non-persistent subscriptions (kop/pulsar/nonpersistent.py)
    for i, (name, doc, kind) in enumerate((
        ("pulsar_in_messages_total", "Messages Pulsar producers stored", CounterMetricFamily),
        ("pulsar_in_bytes_total", "Bytes Pulsar producers stored (as Kafka batches)", CounterMetricFamily),
        ("pulsar_out_messages_total", "Messages dispatched to Pulsar consumers", CounterMetricFamily),
        ("pulsar_out_bytes_total", "Bytes dispatched to Pulsar consumers", CounterMetricFamily),
        ("pulsar_msg_backlog", "Entries not acknowledged, summed over the topic's subscriptions", GaugeMetricFamily),
        ("pulsar_subscriptions_count", "Pulsar subscriptions", GaugeMetricFamily),
        ("pulsar_consumers_count", "Connected Pulsar consumers", GaugeMetricFamily),
        ("pulsar_producers_count", "Connected Pulsar producers", GaugeMetricFamily),
    )):
        fam = kind(name.removesuffix("_total") if kind is CounterMetricFamily else name, doc,
                   labels=["namespace", "topic"])
        for (ns, topic), acc in sorted(topics.items()):
            fam.add_metric([ns, topic], acc[i])
        yield fam
    for i, (name, doc) in enumerate((
        ("pulsar_subscription_back_log", "Entries the subscription has not acknowledged (msgBacklog)"),
        ("pulsar_subscription_unacked_messages", "Messages dispatched and not acknowledged yet"),
        ("pulsar_subscription_consumers_count", "Connected consumers of the subscription"),
        ("pulsar_subscription_msg_out", "Messages dispatched to the subscription's consumers (a counter)"),
        ("pulsar_subscription_bytes_out", "Bytes dispatched to the subscription's consumers (a counter)"),
        ("pulsar_subscription_msg_drop", "Messages a non-persistent subscription dropped (a counter; Pulsar's "
                                         "msgDropRate is its rate)"),
    )):
        kind = CounterMetricFamily if i >= 3 else GaugeMetricFamily
        fam = kind(name, doc, labels=["namespace", "topic", "subscription"])
        for key, acc in sorted(subs.items()):
            fam.add_metric(list(key), acc[i])
        yield fam
