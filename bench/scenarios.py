"""The scenario list: names, parameters, record counts, and the --scenarios filter.

Names are short and stable (they are keys in the JSON and rows of docs/benchmarks.md):

    p-1k-16p-all-lz4     kafka-producer-perf-test, 1 KiB records, 16 partitions, acks=all, lz4 - followed by
                         kafka-consumer-perf-test over the same records (metrics c_*)
    e2e-1k-acks1         EndToEndLatency (kafka-e2e-latency), 1 KiB records, one partition, acks=1
    bk-p-1k-16p-all-none the p-1k-16p-all-none run again with a third broker: ours on ZooKeeper + 4 bookies
                         (E3/Qw3/Qa2: three copies, acks=all at two)
    bk-e1-p-1k-16p-all-none  the same against Kafka and ours on ZooKeeper + 1 bookie (E1/Qw1/Qa1: one copy,
                         Kafka's RF=1 durability; bench/brokers.py says which bookie settings match Kafka's)
    scale-*              the scale scenarios of bench/scale.py
    share-1k-1p-3c       share groups (bench/share.py): kafka-share-consumer-perf-test --threads 3 (3 share
                         consumers of one group) over a 1-partition topic just filled (metrics sh_*)
    share-e2e-1k-3c      bench/java/ShareLatency.java: produce -> delivery to one of 3 share consumers, one record
                         at a time, acks=1 (metrics she2e_*)
    cap-1k-16p           capacity (bench/capacity.py): the Go generator bench/loadgen produces then consumes 1 KiB
                         records over 16 partitions, acks=all, against Kafka and ours with 1, 2 ... N workers

Record counts are sized by bytes (--producer-mb) and capped (--max-records), so a 100 B scenario does not
take ten times as long as a 1 KiB one: the per-record cost dominates small records on both brokers.
"""

from __future__ import annotations

import fnmatch
from dataclasses import dataclass

RECORD_SIZES = {"1k": 1024, "100b": 100}
PARTITIONS = (1, 16)
ACKS = ("1", "all")
COMPRESSIONS = ("none", "lz4")
SHARE_CONSUMERS = 3  # share consumers of one group on one partition (issue 23)


class _Sized:
    """What every scenario derives from its record size's name (one rule: the record count of a run)."""

    size_name: str

    @property
    def record_size(self) -> int:
        return RECORD_SIZES[self.size_name]

    def records(self, producer_mb: float, max_records: int) -> int:
        """Records of a run of producer_mb MB, at least 1000 and at most max_records."""
        return max(1000, min(max_records, int(producer_mb * 1_000_000 / self.record_size)))



@dataclass(frozen=True)
class ProducerScenario(_Sized):
    """kafka-producer-perf-test then kafka-consumer-perf-test on one fresh topic."""

    size_name: str
    partitions: int
    acks: str
    compression: str
    bk: bool = False  # run against the BookKeeper-mode broker too (the issue 7 row)
    # copies of each entry in BookKeeper mode: 3 = E3/Qw3/Qa2 on 4 bookies (the issue 7 row), 1 = E1/Qw1/Qa1 on one
    # bookie (issue 27's matched-durability row: one copy, as Kafka with RF=1)
    bk_copies: int = 3

    @property
    def name(self) -> str:
        base = f"p-{self.size_name}-{self.partitions}p-{self.acks}-{self.compression}"
        if not self.bk:
            return base
        return f"bk-{base}" if self.bk_copies == 3 else f"bk-e{self.bk_copies}-{base}"


@dataclass(frozen=True)
class E2EScenario(_Sized):
    """org.apache.kafka.tools.EndToEndLatency: one record at a time, produce then poll until it arrives."""

    size_name: str
    acks: str

    @property
    def name(self) -> str:
        return f"e2e-{self.size_name}-acks{self.acks}"


@dataclass(frozen=True)
class CapacityScenario(_Sized):
    """The light Go generator (bench/loadgen) produces then consumes back one fresh topic (bench/capacity.py)."""

    size_name: str
    partitions: int

    @property
    def name(self) -> str:
        return f"cap-{self.size_name}-{self.partitions}p"


@dataclass(frozen=True)
class ShareScenario(_Sized):
    """ShareConsumerPerformance --threads 3 over a topic of one partition filled just before."""

    size_name: str
    partitions: int = 1
    consumers: int = SHARE_CONSUMERS

    @property
    def name(self) -> str:
        return f"share-{self.size_name}-{self.partitions}p-{self.consumers}c"


@dataclass(frozen=True)
class ShareLatencyScenario(_Sized):
    """bench/java/ShareLatency.java: one record at a time to 3 share consumers."""

    size_name: str
    acks: str = "1"
    consumers: int = SHARE_CONSUMERS

    @property
    def name(self) -> str:
        return f"share-e2e-{self.size_name}-{self.consumers}c"


SHARE_SCENARIOS = (ShareScenario("1k"), ShareScenario("100b"))
SHARE_LATENCY_SCENARIOS = (ShareLatencyScenario("1k"),)


CAPACITY_SCENARIOS = tuple(CapacityScenario(s, p) for p in (16, 64) for s in ("1k", "100b"))
SCALE_SCENARIOS = ("scale-offset-search", "scale-1000-connections", "scale-10k-partitions")
BK_SCENARIO = ProducerScenario("1k", 16, "all", "none", bk=True)
BK_MATCHED_SCENARIO = ProducerScenario("1k", 16, "all", "none", bk=True, bk_copies=1)
BK_SCENARIOS = (BK_SCENARIO, BK_MATCHED_SCENARIO)


def producer_matrix() -> list[ProducerScenario]:
    return [
        ProducerScenario(s, p, a, c)
        for s in RECORD_SIZES for p in PARTITIONS for a in ACKS for c in COMPRESSIONS
    ]


def e2e_scenarios() -> list[E2EScenario]:
    return [E2EScenario("1k", "1"), E2EScenario("1k", "all"), E2EScenario("100b", "1")]


def all_names() -> list[str]:
    return ([s.name for s in producer_matrix()] + [s.name for s in e2e_scenarios()] + [s.name for s in BK_SCENARIOS]
            + [s.name for s in SHARE_SCENARIOS] + [s.name for s in SHARE_LATENCY_SCENARIOS]
            + [s.name for s in CAPACITY_SCENARIOS] + list(SCALE_SCENARIOS))


def matches(name: str, patterns: list[str] | None) -> bool:
    """--scenarios is a comma-separated list of shell patterns (fnmatch); none given = everything."""
    return not patterns or any(fnmatch.fnmatchcase(name, p) for p in patterns)


def parse_patterns(text: str | None) -> list[str] | None:
    if not text:
        return None
    pats = [p.strip() for p in text.split(",") if p.strip()]
    unknown = [p for p in pats if not any(fnmatch.fnmatchcase(n, p) for n in all_names())]
    if unknown:
        raise SystemExit(f"--scenarios: {unknown} match no scenario; known: {', '.join(all_names())}")
    return pats
