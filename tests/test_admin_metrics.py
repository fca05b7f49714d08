"""kop.metrics without a broker: histogram buckets, bounded labels, the exposition prometheus-client
parses back, structured log values, and the admin config keys."""

from __future__ import annotations

import pytest
from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from kop.config import BrokerConfig, ConfigError
from kop.metrics import OTHER, BrokerMetrics, Histogram, LagSample, log_value


def samples(m: BrokerMetrics) -> dict[tuple[str, frozenset[tuple[str, str]]], float]:
    text = generate_latest(m.registry).decode()
    return {(s.name, frozenset(s.labels.items())): s.value
            for fam in text_string_to_metric_families(text) for s in fam.samples}


def test_histogram_buckets_are_cumulative_and_le_inclusive():
    h = Histogram((0.1, 1.0))
    for v in (0.05, 0.1, 0.5, 1.0, 7.0):
        h.observe(v)
    assert h.buckets() == [("0.1", 2), ("1.0", 4), ("+Inf", 5)]
    assert h.count == 5 and h.sum == pytest.approx(8.65)


def test_topic_labels_are_capped_and_stable():
    m = BrokerMetrics(max_topic_labels=2)
    a = m.partition("persistent://public/default/a", 0, "public/default/persistent/a-partition-0")
    b = m.partition("persistent://public/default/b", 0, "public/default/persistent/b-partition-0")
    c0 = m.partition("persistent://public/default/c", 0, "public/default/persistent/c-partition-0")
    c1 = m.partition("persistent://public/default/c", 1, "public/default/persistent/c-partition-1")
    assert (a.topic_label, b.topic_label, c0.topic_label, c1.topic_label) == (
        "persistent://public/default/a", "persistent://public/default/b", OTHER, OTHER)
    assert m.partition("persistent://public/default/a", 0, "public/default/persistent/a-partition-0") is a
    for counters, n in ((a, 1), (b, 2), (c0, 3), (c1, 4)):
        counters.records_in += n
        counters.bytes_in += 10 * n
    s = samples(m)
    assert s[("kop_server_records_in_total", frozenset({("topic", "persistent://public/default/a")}))] == 1
    assert s[("kop_server_records_in_total", frozenset({("topic", OTHER)}))] == 7
    assert s[("kop_server_bytes_in_total", frozenset({("topic", OTHER)}))] == 70
    assert len([k for k in s if k[0] == "kop_server_records_in_total"]) == 3


def test_lag_is_exported_per_group_and_partition_with_bounded_groups():
    m = BrokerMetrics(max_group_labels=1)
    t = "persistent://public/default/t"
    m.lag = [LagSample("g1", t, 0, 3, 10), LagSample("g1", t, 1, 5, 5), LagSample("g2", t, 0, 1, 10),
             LagSample("g3", t, 0, 4, 10)]
    s = samples(m)
    lag = {k[1]: v for k, v in s.items() if k[0] == "kop_consumer_group_lag"}
    assert lag == {
        frozenset({("group", "g1"), ("topic", t), ("partition", "0")}): 7,
        frozenset({("group", "g1"), ("topic", t), ("partition", "1")}): 0,
        frozenset({("group", OTHER), ("topic", t), ("partition", "0")}): 15,  # g2 (9) + g3 (6)
    }


def test_rates_come_from_the_last_window():
    m = BrokerMetrics()
    c = m.partition("persistent://public/default/r", 0, "public/default/persistent/r-partition-0")
    m.sample_rates(100.0)
    c.records_in += 50
    c.bytes_in += 5000
    m.sample_rates(110.0)
    assert (c.rate_records_in, c.rate_bytes_in, c.rate_records_out) == (5.0, 500.0, 0.0)


def test_exposition_has_every_documented_family():
    names = {fam.name for fam in text_string_to_metric_families(generate_latest(BrokerMetrics().registry).decode())}
    for name in ("kop_server_request_latency_seconds", "kop_server_request_queue_seconds",
                 "kop_server_slow_requests", "kop_server_produce_encode_seconds",
                 "kop_server_produce_publish_seconds", "kop_server_fetch_read_seconds", "kop_server_bytes_in",
                 "kop_server_records_in", "kop_server_batches_in", "kop_server_bytes_out",
                 "kop_server_records_out", "kop_server_batches_out", "kop_server_waiting_fetches",
                 "kop_server_fetch_sendfile_bytes",
                 "kop_server_active_connections", "kop_server_connections", "kop_server_connection_errors",
                 "kop_managed_ledger_rollovers", "kop_consumer_group_lag", "process_cpu_seconds"):
        assert name in names, name


@pytest.mark.parametrize("value,logged", [
    (None, "-"), ("rdkafka", "rdkafka"), ("consumer-1@host:9", "consumer-1@host:9"),
    ("two words", '"two words"'), ('say "hi"\nnow', '"say \\"hi\\" now"'), ("", '""'),
])
def test_log_values_stay_one_token(value, logged):
    assert log_value(value) == logged


def test_admin_config_keys():
    c = BrokerConfig.load()
    assert (c.webServicePort, c.webServiceBindAddress, c.exposingBrokerEntryMetadataToAdminEnabled) == (
        8080, "0.0.0.0", True)
    assert BrokerConfig.load(overrides={"webServicePort": "-1"}).webServicePort == -1
    for key, value in (("webServicePort", "-2"), ("webServicePort", "70000"), ("slowRequestThresholdMs", "-5"),
                       ("statsUpdateFrequencyInSecs", "0"), ("metricsMaxTopicLabels", "-1")):
        with pytest.raises(ConfigError, match=key):
            BrokerConfig.load(overrides={key: value})


def test_deleted_topics_are_forgotten_but_their_series_stay_monotonic():
    m = BrokerMetrics(max_topic_labels=1)
    live = {"persistent://public/default/a", "persistent://public/default/b", "persistent://public/default/c"}
    m.topic_exists = lambda topic: topic in live
    for name, n in (("a", 1), ("b", 2), ("c", 4)):
        c = m.partition(f"persistent://public/default/{name}", 0, f"public/default/persistent/{name}-partition-0")
        c.records_in += n
    def traffic() -> dict:
        return {k: v for k, v in samples(m).items() if k[0].startswith("kop_server_") and "topic" in dict(k[1])}

    before = traffic()
    live -= {"persistent://public/default/a", "persistent://public/default/b"}
    assert traffic() == before  # same series, same values
    assert set(m.partitions) == {"public/default/persistent/c-partition-0"}
    # a topic created again under an own label continues its series
    live.add("persistent://public/default/a")
    m.partition("persistent://public/default/a", 0, "public/default/persistent/a-partition-0").records_in += 10
    a = ("kop_server_records_in_total", frozenset({("topic", "persistent://public/default/a")}))
    assert samples(m)[a] == 11
