"""`kop pipeline tables` (issue 26): records/s from topic to Iceberg table, and the lag from produce to visible.

    python bench/tables.py [--records 200000] [--partitions 4] [--value-bytes 100] [--keys 10000]
                           [--per-trigger 50000] [--lag-samples 20] [--rounds 3] [--master 'local[2]'] [--quick]

One broker of ours (tests/support/broker.py) and one Spark session (kop.pipeline.session.build_session: local
mode, so one executor - the driver's JVM - with --master's cores) for the whole run; the Spark JVM is started
before anything is timed.

Throughput, per round and mode: a fresh topic of --partitions partitions gets --records records from a
confluent-kafka producer (keys k-0 .. k-<keys-1>, values of --value-bytes bytes, no schema: a raw table), then the
tables job (kop.pipeline.tables.start_tables, the code `kop pipeline tables --available-now` runs) reads it into a
fresh warehouse with --per-trigger records a micro-batch. records/s = records / the query's wall time, from its
start to its end (table creation and every batch's Iceberg commit included). Modes: `append` (a plain topic:
every record a row) and `upsert` (a compacted topic: each batch MERGEd, one row per key).

Lag, once per run: a continuous query (trigger "0 seconds": a batch starts as soon as there is something new) on
a fresh topic; one record at a time is produced (acks=all), and DuckDB (kop.pipeline.duckdb_read) queries the
table for that record's (partition, offset) every --poll-ms until the query returns it. The lag is the time
from just before the send to the end of the first query that returns the row: the broker's append, Spark's
offset polling, the micro-batch, the Iceberg commit, and up to one poll interval. Samples follow each other
after the previous record is visible, so they do not queue behind each other.

Outputs: the table on the terminal and bench/results/tables-<time>.json. The machine's other load changes both
numbers: quote rounds from a quiet machine (docs/benchmarks.md says which).
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
# `python bench/tables.py` puts bench/ first on the path, where bench/profile.py hides the standard library's
# `profile` that pyspark imports (through cProfile): the repository root instead.
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != ROOT / "bench"]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from kop.pipeline import iceberg_schema as schema  # noqa: E402
from kop.pipeline.tables import TablesConfig, TableWriter, start_tables  # noqa: E402
from tests.support.broker import KopBroker  # noqa: E402
from tests.support.clients import create_topic  # noqa: E402

MODES = ("append", "upsert")


def produce(bootstrap: str, topic: str, records: int, value_bytes: int, keys: int) -> None:
    from confluent_kafka import Producer

    producer, errors = Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 20,
                                 "batch.num.messages": 10_000, "compression.type": "none"}), []
    pad = b"x" * max(0, value_bytes - 12)
    for i in range(records):
        while True:
            try:
                producer.produce(topic, key=f"k-{i % keys}".encode(), value=f"{i:012d}".encode() + pad,
                                 on_delivery=lambda err, _m: errors.append(str(err)) if err else None)
                break
            except BufferError:  # the local queue is full: let deliveries drain it
                producer.poll(0.05)
        producer.poll(0)
    if producer.flush(120) != 0 or errors:
        raise RuntimeError(f"produce failed: {errors[:3]}")


def throughput_round(spark, broker: KopBroker, work: Path, name: str, mode: str, args) -> dict[str, float]:
    """One topic filled, then one available-now run of the job over it: its wall time."""
    topic = f"bench-{name}"
    create_topic(broker.bootstrap, topic, args.partitions, {"cleanup.policy": "compact"} if mode == "upsert" else {})
    produce(broker.bootstrap, topic, args.records, args.value_bytes, args.keys)
    cfg = TablesConfig(bootstrap=broker.bootstrap, topics=[topic], warehouse=str(work / "warehouse"),
                       checkpoint=str(work / f"{name}.ckpt"), max_offsets_per_trigger=args.per_trigger,
                       available_now=True, catalog="kopbench", mode=mode)
    writer = TableWriter(cfg)
    t0 = time.monotonic()
    query = start_tables(spark, cfg, writer)
    query.awaitTermination()
    wall = time.monotonic() - t0
    if query.exception() is not None:
        raise RuntimeError(f"the query failed: {query.exception()}")
    rows = spark.table(schema.table_identifier("kopbench", "kafka", topic)).count()
    expected = args.records if mode == "append" else min(args.keys, args.records)
    if rows != expected:
        raise RuntimeError(f"{name}: {rows} rows in the table, expected {expected}")
    return {"wall_s": wall, "records_per_s": args.records / wall, "batches": (writer.tables[topic].last_batch or 0) + 1}


def lag_samples(spark, broker: KopBroker, work: Path, args) -> list[float]:
    """Produce one record, query the table with DuckDB until it returns it; `--lag-samples` times."""
    from confluent_kafka import Producer

    from kop.pipeline.duckdb_read import connect

    topic = "bench-lag"
    create_topic(broker.bootstrap, topic, 1)
    cfg = TablesConfig(bootstrap=broker.bootstrap, topics=[topic], warehouse=str(work / "warehouse"),
                       checkpoint=str(work / "lag.ckpt"), catalog="kopbench", mode="append")
    query = start_tables(spark, cfg, TableWriter(cfg))
    producer = Producer({"bootstrap.servers": broker.bootstrap, "acks": "all", "linger.ms": 0})
    table_dir = work / "warehouse" / "kafka" / schema.table_name(topic)
    con = connect()
    out: list[float] = []
    delivered: list[int] = []
    try:
        for i in range(args.lag_samples + 1):  # the first one also creates the table: not a sample
            delivered.clear()
            t0 = time.monotonic()
            producer.produce(topic, key=b"lag", value=str(i).encode(),
                             on_delivery=lambda err, m: delivered.append(m.offset()) if err is None else None)
            if producer.flush(60) != 0 or not delivered:
                raise RuntimeError("the lag record was not delivered")
            while True:
                if query.exception() is not None:
                    raise RuntimeError(f"the query failed: {query.exception()}")
                if (table_dir / "metadata" / "version-hint.text").exists() and con.sql(
                        f"SELECT count(*) FROM iceberg_scan('{table_dir}') WHERE kafka_offset = {delivered[0]}"
                ).fetchone()[0]:
                    break
                if time.monotonic() - t0 > 300:
                    raise RuntimeError(f"record {delivered[0]} not visible after 300 s")
                time.sleep(args.poll_ms / 1000)
            if i:
                out.append(time.monotonic() - t0)
    finally:
        con.close()
        query.stop()
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--records", type=int, default=200_000)
    ap.add_argument("--partitions", type=int, default=4)
    ap.add_argument("--value-bytes", type=int, default=100)
    ap.add_argument("--keys", type=int, default=10_000, help="distinct keys (the upsert table's rows)")
    ap.add_argument("--per-trigger", type=int, default=50_000, help="maxOffsetsPerTrigger")
    ap.add_argument("--lag-samples", type=int, default=20)
    ap.add_argument("--poll-ms", type=int, default=50)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--modes", default=",".join(MODES))
    ap.add_argument("--master", default="local[2]")
    ap.add_argument("--quick", action="store_true", help="smoke run: 5 000 records, 1 round, 3 lag samples")
    args = ap.parse_args()
    if args.quick:
        args.records, args.keys, args.per_trigger, args.rounds, args.lag_samples = 5_000, 500, 2_000, 1, 3
    modes = [m for m in args.modes.split(",") if m]
    assert all(m in MODES for m in modes), f"--modes: {', '.join(MODES)}"

    from kop.pipeline.session import build_session

    started = dt.datetime.now(dt.UTC)
    load_before = os.getloadavg()[0]
    with tempfile.TemporaryDirectory(prefix="kop-bench-tables-") as tmp:
        work = Path(tmp)
        broker = KopBroker(work / "broker").start()
        spark = build_session("kop-bench-tables", args.master)
        try:
            runs: dict[str, list[dict[str, float]]] = {m: [] for m in modes}
            for r in range(args.rounds):
                for mode in modes if r % 2 == 0 else modes[::-1]:
                    runs[mode].append(throughput_round(spark, broker, work, f"{mode}-{r}", mode, args))
                    print(f"round {r + 1} {mode}: {runs[mode][-1]['records_per_s']:.0f} records/s "
                          f"({runs[mode][-1]['wall_s']:.1f} s, {runs[mode][-1]['batches']} batches)", flush=True)
            lags = lag_samples(spark, broker, work, args) if args.lag_samples else []
        finally:
            spark.stop()
            broker.stop()
    result = {"started": started.isoformat(timespec="seconds"), "load_before": load_before, "args": vars(args),
              "throughput": {m: {"records_per_s": statistics.median(x["records_per_s"] for x in v),
                                 "wall_s": statistics.median(x["wall_s"] for x in v), "runs": v}
                             for m, v in runs.items()},
              "lag_s": {"samples": lags, **({"p50": statistics.median(lags), "max": max(lags),
                                              "p90": sorted(lags)[int(0.9 * (len(lags) - 1))]} if lags else {})}}
    print(f"\ntopic -> table, {args.records} records of {args.value_bytes} B, {args.partitions} partitions, "
          f"{args.per_trigger} a batch, {args.master}, median of {args.rounds} (load before {load_before:.2f}):")
    for m, t in result["throughput"].items():
        print(f"  {m:7s} {t['records_per_s']:10.0f} records/s  ({t['wall_s']:.1f} s)")
    if lags:
        lag = result["lag_s"]
        print(f"  produce -> visible to a DuckDB query: p50 {lag['p50']:.2f} s, p90 {lag['p90']:.2f} s, "
              f"max {lag['max']:.2f} s over {len(lags)} records")
    out = ROOT / "bench" / "results" / f"tables-{started:%Y%m%dT%H%M%S}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=2))
    print(f"  -> {out.relative_to(ROOT)}")


if __name__ == "__main__":
    main()
