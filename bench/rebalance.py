#!/usr/bin/env python3
"""Rebalance time of a consumer group of 10 members when an 11th joins: the classic protocol against KIP-848's
consumer protocol, on our broker and on Apache Kafka 4.x (issue 16).

    python bench/rebalance.py                    # 3 rounds per (broker, protocol), medians
    python bench/rebalance.py --rounds 1 --brokers kop

Each run: a fresh topic of 20 partitions and a group of 10 confluent-kafka consumers (each polled by its own
thread) that has settled at two partitions each; then the 11th consumer is started, and the time is taken
from its start until every partition is owned by exactly one member, the newcomer owns one, and no member
owns more than two - the group is consuming again in its new shape. Both brokers run with their defaults
for each protocol (classic: librdkafka's eager range assignor, session 45 s, heartbeat 3 s; consumer: the
broker's uniform assignor and 5 s heartbeat interval), except that a new group starts without Kafka's
initial rebalance delay. The brokers run one after the other, never at the same time.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import threading
import time
import uuid
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from bench import brokers as B  # noqa: E402
from tests.support.clients import create_topic  # noqa: E402

PARTITIONS = 20
MEMBERS = 10
TIMEOUT_S = 180.0


class Member(threading.Thread):
    """One consumer, polled until stopped; `owned` is its assignment after its latest poll."""

    def __init__(self, bootstrap: str, topic: str, group: str, protocol: str) -> None:
        super().__init__(daemon=True)
        from confluent_kafka import Consumer

        conf = {"bootstrap.servers": bootstrap, "group.id": group, "auto.offset.reset": "earliest",
                "enable.auto.commit": False}
        if protocol == "consumer":
            conf["group.protocol"] = "consumer"
        self.consumer = Consumer(conf)
        self.consumer.subscribe([topic])
        self.owned: frozenset[int] = frozenset()
        self.stopped = threading.Event()

    def run(self) -> None:
        while not self.stopped.is_set():
            self.consumer.consume(100, 0.05)
            self.owned = frozenset(tp.partition for tp in self.consumer.assignment())
        self.consumer.close()


def _settled(members: list[Member], newcomer: Member | None) -> bool:
    owned = [m.owned for m in members]
    every = [p for o in owned for p in o]
    return (sorted(every) == list(range(PARTITIONS)) and max(len(o) for o in owned) <= 2
            and (newcomer is None or len(newcomer.owned) >= 1))


def _wait(cond, what: str) -> None:
    deadline = time.monotonic() + TIMEOUT_S
    while not cond():
        if time.monotonic() > deadline:
            raise TimeoutError(what)
        time.sleep(0.01)


def one_run(bootstrap: str, protocol: str) -> float:
    """Milliseconds from the 11th member's start until the group has its new shape."""
    suffix = uuid.uuid4().hex[:8]
    topic, group = f"rebalance-{suffix}", f"rebalance-{protocol}-{suffix}"
    create_topic(bootstrap, topic, PARTITIONS)
    members = [Member(bootstrap, topic, group, protocol) for _ in range(MEMBERS)]
    try:
        for m in members:
            m.start()
        _wait(lambda: _settled(members, None) and all(len(m.owned) == 2 for m in members), "10 members to settle")
        start = time.monotonic()
        newcomer = Member(bootstrap, topic, group, protocol)
        members.append(newcomer)
        newcomer.start()
        _wait(lambda: _settled(members, newcomer), "the group to take in the 11th member")
        return (time.monotonic() - start) * 1000
    finally:
        for m in members:
            m.stopped.set()
        for m in members:
            m.join(30)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--brokers", default="kop,kafka", help="comma separated: kop, kafka")
    args = ap.parse_args()
    results: dict[str, dict[str, list[float]]] = {}
    work = Path(tempfile.mkdtemp(prefix="kop-bench-rebalance-"))
    for name in [b.strip() for b in args.brokers.split(",") if b.strip()]:
        broker = B.kop_broker(work) if name == "kop" else B.kafka_broker(work)
        broker.start()
        try:
            for protocol in ("classic", "consumer"):
                runs = results.setdefault(name, {}).setdefault(protocol, [])
                for _ in range(args.rounds):
                    runs.append(one_run(broker.bootstrap, protocol))
                    print(f"{name:6} {protocol:9} {runs[-1]:9.0f} ms", flush=True)
        finally:
            broker.stop()
    print(f"\nrebalance time of {MEMBERS} members when one joins ({PARTITIONS} partitions), median of "
          f"{args.rounds}, ms")
    print(f"{'broker':8}{'classic':>10}{'consumer':>10}")
    for name, by in results.items():
        print(f"{name:8}" + "".join(f"{statistics.median(by[p]):10.0f}" for p in ("classic", "consumer")))
    out = ROOT / "bench" / "results" / f"rebalance-{time.strftime('%Y%m%d-%H%M%S')}.json"
    out.parent.mkdir(exist_ok=True)
    out.write_text(json.dumps(results, indent=1))
    print(f"written to {out}")


if __name__ == "__main__":
    main()
