"""Share groups (KIP-932, issue 23): 3 share consumers of one group on a 1-partition topic, against Apache Kafka
4.4 (share groups on by default since 4.2) and ours.

* share-1k-1p-3c, share-100b-1p-3c - throughput: kafka-producer-perf-test fills a fresh 1-partition topic
  (acks=all), the group's share.auto.offset.reset is set to earliest (IncrementalAlterConfigs on the GROUP
  resource, as kafka-configs sends it), then Kafka's own kafka-share-consumer-perf-test
  (org.apache.kafka.tools.ShareConsumerPerformance, 4.4 tools jar) reads them with --threads 3: three
  KafkaShareConsumers of the group in one JVM, implicit acknowledgement. Its own figure covers the whole read,
  group join included (the tool starts its clock before subscribing); the fetch phase, from the first delivery
  on, is read from its progress lines (parse_share_perf). The run counts only if the tool saw exactly the
  records written (no redelivery, none missing) and kafka-share-groups --describe then shows no lag (every
  record acknowledged).
* share-e2e-1k-3c - latency: bench/java/ShareLatency.java (ours: 4.4 ships no share-group EndToEndLatency),
  three share consumers in threads, records sent one at a time (acks=1, as e2e-1k-acks1), each timed from just
  before send() to the return of the poll that delivered it; median, p99, p99.9 and average in ms (fractions
  of a ms, not EndToEndLatency's whole ms).

The parsers are pure (tests/test_bench_share.py feeds them canned output).
"""

from __future__ import annotations

import datetime as dt
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from bench.scenarios import ShareLatencyScenario, ShareScenario  # noqa: E402
from bench.tools import TOOL_JVM, BenchError, run_producer  # noqa: E402
from tests.support.clients import create_topic  # noqa: E402
from tests.support.java import JavaTools  # noqa: E402

SHARE_PERF = "org.apache.kafka.tools.ShareConsumerPerformance"
SHARE_GROUPS = "org.apache.kafka.tools.consumer.group.ShareGroupCommand"
PROGRESS_MS = 200  # --reporting-interval: the fetch phase is exact when the group join takes longer than this
LATENCY_PROGRAM = ROOT / "bench" / "java" / "ShareLatency.java"

# ShareConsumerPerformance's result line: start, end, MB, MB/s, records/s, records, fetch time ms.
SHARE_PERF_RE = re.compile(
    r"^(?P<start>\d[^,]*), (?P<end>\d[^,]*), (?P<mb>[\d.]+), (?P<mbps>[\d.]+), (?P<rps>[\d.]+), (?P<records>\d+), (?P<ms>\d+)\s*$", re.M)
# --show-detailed-stats: start, end, MB so far, interval MB/s, interval records/s, records so far, ms; the tool
# ends these lines with " for share consumer <n>" and, in 4.4, sometimes no line break.
_STAMP = r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d:\d{3}"
SHARE_PROGRESS_RE = re.compile(
    rf"(?P<start>{_STAMP}), (?P<end>{_STAMP}), (?P<mb>[\d.]+), [\d.]+, [\d.]+, (?P<records>\d+), \d+ for share consumer "
    r"(?P<idx>\d)")
SHARE_CONSUMER_RE = re.compile(r"^Share consumer (?P<idx>\d+) .*consumption metrics- .*, (?P<records>\d+), \d+\s*$", re.M)
SHARE_LATENCY_RE = re.compile(
    r"SHARE-LATENCY records=(?P<records>\d+) avg_ms=(?P<avg>[\d.]+) p50_ms=(?P<p50>[\d.]+) p99_ms=(?P<p99>[\d.]+) "
    r"p999_ms=(?P<p999>[\d.]+) max_ms=(?P<max>[\d.]+) redelivered=(?P<redelivered>\d+) "
    r"consumers_used=(?P<used>\d+) per_consumer=(?P<per>[\d/]+)")


def _ms(stamp: str) -> float:
    """The tools' default date format (yyyy-MM-dd HH:mm:ss:SSS) -> ms since the epoch (local time on both
    sides of a subtraction, so the zone does not matter)."""
    return dt.datetime.strptime(stamp, "%Y-%m-%d %H:%M:%S:%f").timestamp() * 1000


def parse_share_perf(stdout: str) -> dict[str, float]:
    """ShareConsumerPerformance's result line (the last) -> sh_* metrics: sh_mbps / sh_rps over the whole run,
    group join included; with --show-consumer-stats, sh_consumers_used (consumers that got a record); with
    --show-detailed-stats, the fetch phase: the tool times from before subscribing and gives no fetch-only
    figure (ConsumerPerformance's fetch.MB.sec), so it is taken from the progress lines. A consumer prints its
    first one at its first record once a reporting interval has passed, so the earliest first line (at t0,
    with r0 records and m0 MB read by that consumer) is the group's first delivery when the join took longer
    than the interval (no other consumer can have read before t0 without printing first); sh_fetch_* =
    (total - r0) / (end - t0), sh_join_ms = t0 - start."""
    found = list(SHARE_PERF_RE.finditer(stdout))
    if not found:
        raise BenchError(f"no share consumer perf result line in:\n{stdout[-2000:]}")
    g = found[-1]
    res = {"sh_records": float(g["records"]), "sh_mbps": float(g["mbps"]), "sh_rps": float(g["rps"]),
           "sh_ms": float(g["ms"])}
    per = [int(m["records"]) for m in SHARE_CONSUMER_RE.finditer(stdout)]
    if per:
        res["sh_consumers_used"] = float(sum(1 for n in per if n > 0))
    first = min(SHARE_PROGRESS_RE.finditer(stdout), key=lambda m: _ms(m["end"]), default=None)
    end = _ms(g["end"])
    if first is not None and end > _ms(first["end"]):
        t0 = _ms(first["end"])
        secs = (end - t0) / 1000
        res["sh_join_ms"] = t0 - _ms(g["start"])
        res["sh_fetch_mbps"] = (float(g["mb"]) - float(first["mb"])) / secs
        res["sh_fetch_rps"] = (float(g["records"]) - float(first["records"])) / secs
    return res


def parse_share_latency(stdout: str) -> dict[str, float]:
    """ShareLatency's SHARE-LATENCY line -> she2e_* metrics."""
    m = SHARE_LATENCY_RE.search(stdout)
    if not m:
        raise BenchError(f"no SHARE-LATENCY line in:\n{stdout[-2000:]}")
    return {"she2e_records": float(m["records"]), "she2e_avg_ms": float(m["avg"]), "she2e_p50_ms": float(m["p50"]),
            "she2e_p99_ms": float(m["p99"]), "she2e_p999_ms": float(m["p999"]), "she2e_max_ms": float(m["max"]),
            "she2e_redelivered": float(m["redelivered"]), "she2e_consumers_used": float(m["used"])}


def parse_share_lag(stdout: str, group: str) -> list[int]:
    """kafka-share-groups --describe's rows of the group -> the LAG column of each partition ('-' = unknown)."""
    lags = []
    for line in stdout.splitlines():
        cols = line.split()
        if cols[:1] == [group] and len(cols) >= 5:
            if not cols[-1].lstrip("-").isdigit():
                raise BenchError(f"no lag for {group} in:\n{stdout[-2000:]}")
            lags.append(int(cols[-1]))
    return lags


def set_earliest(bootstrap: str, group: str) -> None:
    """share.auto.offset.reset=earliest on the group (the default, latest, would skip the records written before
    the consumers join): IncrementalAlterConfigs on the GROUP resource, as kafka-configs --entity-type groups
    sends it, from this process (a JVM for it cost the loaded test machine 20 s)."""
    from confluent_kafka.admin import (
        AdminClient,
        AlterConfigOpType,
        ConfigEntry,
        ConfigResource,
        ResourceType,
    )

    entry = ConfigEntry("share.auto.offset.reset", "earliest", incremental_operation=AlterConfigOpType.SET)
    res = ConfigResource(ResourceType.GROUP, group, incremental_configs=[entry])
    admin = AdminClient({"bootstrap.servers": bootstrap})  # held while waiting: a collected client fails its calls
    for fut in admin.incremental_alter_configs([res]).values():
        try:
            fut.result(60)
        except Exception as e:  # noqa: BLE001 - a KafkaException or a timeout: the run is invalid either way
            raise BenchError(f"{bootstrap}: setting share.auto.offset.reset on {group} failed: {e}") from e


def run_share_consume(tools: JavaTools, sc: ShareScenario, bootstrap: str, topic: str,
                      records: int) -> dict[str, float]:
    """Fill the topic, then ShareConsumerPerformance --threads 3 through a new share group; check the count and
    that the group has no lag left."""
    res = run_producer(tools, bootstrap, topic, records, sc.record_size, "all", "none", sc.partitions)
    group = f"{topic}-share"
    set_earliest(bootstrap, group)
    r = tools.run(SHARE_PERF, "--bootstrap-server", bootstrap, "--topic", topic, "--group", group,
                  "--num-records", str(records), "--threads", str(sc.consumers), "--show-consumer-stats",
                  "--show-detailed-stats", "--reporting-interval", str(PROGRESS_MS),
                  "--timeout", "60000", jvm_opts=TOOL_JVM, timeout=1800)
    if r.rc != 0 or "WARNING: Exiting before" in r.stdout:
        raise BenchError(f"share consumer perf test on {bootstrap} failed (rc {r.rc}):\n{r.stdout[-2000:]}\n"
                         f"{r.stderr[-2000:]}")
    res.update(parse_share_perf(r.stdout))
    if int(res["sh_records"]) != records:
        raise BenchError(f"{bootstrap} {topic}: the share consumers got {res['sh_records']:.0f} deliveries of "
                         f"{records} records (a redelivery or a missing record)")
    d = tools.run(SHARE_GROUPS, "--bootstrap-server", bootstrap, "--describe", "--group", group)
    lags = parse_share_lag(d.stdout, group)
    if d.rc != 0 or lags != [0] * sc.partitions:
        raise BenchError(f"{bootstrap} {group}: lag {lags} after the run (not every record acknowledged):\n"
                         f"{d.stdout[-2000:]}\n{d.stderr[-2000:]}")
    return res


def run_share_e2e(tools: JavaTools, sc: ShareLatencyScenario, bootstrap: str, topic: str,
                  records: int) -> dict[str, float]:
    """ShareLatency over a fresh 1-partition topic; every record must reach a consumer."""
    create_topic(bootstrap, topic, 1)
    set_earliest(bootstrap, f"{topic}-share")
    r = tools.run(str(LATENCY_PROGRAM), bootstrap, topic, f"{topic}-share", records, sc.record_size, sc.consumers,
                  sc.acks, jvm_opts=TOOL_JVM, timeout=1800)
    if r.rc != 0:
        raise BenchError(f"share latency on {bootstrap} failed (rc {r.rc}):\n{r.stdout[-2000:]}\n{r.stderr[-2000:]}")
    res = parse_share_latency(r.stdout)
    if int(res["she2e_records"]) != records:
        raise BenchError(f"{bootstrap} {topic}: {res['she2e_records']:.0f} of {records} records timed")
    return res
