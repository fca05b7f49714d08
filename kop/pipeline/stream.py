"""`kop pipeline stream`: a Structured Streaming job from KoP topics to a KoP topic and to Parquet.

Input: one or more topics read with Spark's Kafka source (startingOffsets earliest / latest / JSON, or
startingTimestamp; maxOffsetsPerTrigger; failOnDataLoss). Record values are JSON events such as
`{"key": "user-7", "amount": 250}`: `key` is a string (the Kafka record key when the field is absent) and
`amount` an integer (e.g. cents - integers keep every sum exact). A value that is not such an object still
counts as a record of its key, with `invalid` = 1 and no amount. With value_format "avro" the values are
Confluent-serialized Avro records with the same two fields, decoded in the JVM with the schemas of a schema
registry (kop.pipeline.avro says how, and what happens to records of other schema versions).

Output, per micro-batch and key (one row per (batch_id, key)):

    batch_id, key, records, amount, invalid, checksum, first_timestamp, last_timestamp

`records`/`amount` are the batch's contribution to the key's running totals: a key's totals are the sums
over all batches. `checksum` is the XOR over the batch's records of xxhash64(topic, partition, offset): it
names exactly which input records contributed, so a reader can prove that each record was counted once (XOR
over all batches = XOR over the input records; a record counted twice cancels out, a missing one is absent).

Why per-batch rows rather than running totals: exactly-once has to be checkable at the sinks, and a Kafka
sink is at-least-once (a micro-batch that fails or is interrupted after writing some rows is run again on
restart). Spark writes the batch's offset range to the checkpoint before running it, so a re-run reads the
same records and, the aggregate being deterministic, produces the same rows under the same batch_id. Hence:

* Parquet (`<parquet>/batch_id=N/`): each batch overwrites its own partition (dynamic partition overwrite),
  so a re-run replaces what the first attempt wrote - exactly once on disk.
* Kafka (the output topic, keyed by `key`, value = the row as JSON): a re-run may append the same rows
  again. Consumers treat (batch_id, key) as the identity of a row (an idempotent keyed upsert) and get
  exactly once; `kop.pipeline.stream.dedupe_sink_rows` does that and refuses two *different* rows with the
  same identity, which would be a real exactly-once violation.

The checkpoint location holds the offsets, so a stopped query restarted with the same --checkpoint resumes
where it stopped (startingOffsets / startingTimestamp only apply to a query's first start).
"""

from __future__ import annotations

import logging
import signal
import threading
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

from kop.pipeline.kafka_meta import PipelineError

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame, SparkSession
    from pyspark.sql.streaming import StreamingQuery

    from kop.pipeline.avro import AvroValues

log = logging.getLogger("kop.pipeline.stream")

VALUE_FORMATS = ("json", "avro")

OUTPUT_COLUMNS = ("batch_id", "key", "records", "amount", "invalid", "checksum", "first_timestamp", "last_timestamp")


@dataclass
class StreamConfig:
    """Everything `kop pipeline stream` takes (see docs/spark.md for the options)."""

    bootstrap: str
    topics: list[str]
    output_topic: str
    parquet_path: str
    checkpoint: str
    starting_offsets: str = "latest"  # earliest | latest | Spark offsets JSON
    starting_timestamp: int | None = None  # epoch ms; wins over starting_offsets
    max_offsets_per_trigger: int | None = None
    fail_on_data_loss: bool = True
    trigger_interval: str = "0 seconds"
    available_now: bool = False  # process what is there (in maxOffsetsPerTrigger steps), then stop
    key_field: str = "key"
    amount_field: str = "amount"
    query_name: str | None = None
    source_options: dict[str, str] = field(default_factory=dict)  # extra Kafka source options (kafka.* ...)
    sink_options: dict[str, str] = field(default_factory=dict)  # extra Kafka sink options
    value_format: str = "json"  # json | avro (Confluent wire format, schemas from schema_registry)
    schema_registry: str | None = None  # Confluent-compatible registry URL (KoP: the broker's admin URL)


def record_checksum(topic: Column | str = "topic", partition: Column | str = "partition",
                    offset: Column | str = "offset") -> Column:
    """The 64-bit fingerprint of one input record, xxhash64(topic, partition, offset). XORed per output row."""
    from pyspark.sql import functions as F

    return F.xxhash64(topic, partition, offset)


def aggregate_events(df: DataFrame, batch_id: int, key_field: str = "key", amount_field: str = "amount") -> DataFrame:
    """Per-key contribution of one micro-batch of Kafka rows (the source's schema) to the running totals."""
    from pyspark.sql import functions as F
    from pyspark.sql.types import LongType, StringType, StructField, StructType

    schema = StructType([StructField(key_field, StringType()), StructField(amount_field, LongType())])
    parsed = F.from_json(F.col("value").cast("string"), schema)
    events = df.select(
        F.coalesce(parsed[key_field], F.col("key").cast("string")).alias("key"),
        parsed[amount_field].alias("amount"),
        "topic", "partition", "offset", "timestamp",
    )
    return aggregate_decoded(events, batch_id)


def aggregate_decoded(events: DataFrame, batch_id: int) -> DataFrame:
    """The per-key aggregate of decoded events (key, amount - null when invalid - topic, partition, offset,
    timestamp): OUTPUT_COLUMNS, and `unknown_ids` (the set of the group's schema ids not fetched yet) when the
    events have an `unknown_id` column (the Avro path, kop.pipeline.avro)."""
    from pyspark.sql import functions as F

    extra = [F.collect_set("unknown_id").alias("unknown_ids")] if "unknown_id" in events.columns else []
    return events.groupBy("key").agg(
        F.count(F.lit(1)).alias("records"),
        F.coalesce(F.sum("amount"), F.lit(0).cast("long")).alias("amount"),
        F.sum(F.when(F.col("amount").isNull(), 1).otherwise(0)).cast("long").alias("invalid"),
        F.bit_xor(record_checksum()).alias("checksum"),
        F.min("timestamp").alias("first_timestamp"),
        F.max("timestamp").alias("last_timestamp"),
        *extra,
    ).select(F.lit(batch_id).cast("long").alias("batch_id"), *OUTPUT_COLUMNS[1:], *(["unknown_ids"] if extra else []))


# What Spark looks for in a foreachBatch error to tell "interrupted by stop()" from a failure
# (StreamExecution.PROXY_ERROR / IO_EXCEPTION_NAMES).
_PROXY_ERROR_PREFIX = "py4j.protocol.Py4JJavaError: An error occurred while calling"
_INTERRUPTIONS = ("java.lang.InterruptedException", "java.io.InterruptedIOException",
                  "java.nio.channels.ClosedByInterruptException")


class BatchInterrupted(Exception):
    """A micro-batch cut short by our own stop of the query (see BatchWriter.stopping)."""


class Stoppable(Protocol):
    """A foreachBatch function that wait_or_stop tells when the stop is ours (BatchWriter, TableWriter)."""

    stopping: bool


def interrupted_by_stop(e: Exception, stopping: bool, batch_id: int) -> BatchInterrupted | None:
    """The two-line error for a batch cut short by our own stop (BatchWriter says why), None for other errors."""
    text = str(e)
    hit = next((name for name in _INTERRUPTIONS if name in text), None) if stopping else None
    if hit is None:
        return None
    return BatchInterrupted(f"batch {batch_id}: {_PROXY_ERROR_PREFIX} (stopping): {hit}")


class BatchWriter:
    """The foreachBatch function: one batch's aggregate to Parquet, then to the output topic.

    `stopping` is set by run_stream just before it stops the query. A batch interrupted by that stop then
    fails with a two-line error instead of py4j's full Java stack trace: Spark 4.0 matches such errors
    against the regex StreamExecution.PROXY_ERROR, `((.|\\r\\n|\\r|\\n)*)`, which recurses once per character
    and overflows the stack on a trace of a few thousand characters (a StackOverflowError of 1 000 frames
    on the console, although the stop itself works). The short message still matches, so Spark still
    classifies the batch as interrupted by stop, and the batch is re-run from the checkpoint at restart.
    """

    def __init__(self, cfg: StreamConfig, avro: AvroValues | None = None) -> None:
        """With cfg.value_format "avro", `avro` is the decoding state; None fetches it from the registry now
        (kop.pipeline.avro.AvroValues.fetch: PipelineError when a topic has no usable schema)."""
        self.cfg = cfg
        self.stopping = False
        self.avro = avro
        if cfg.value_format not in VALUE_FORMATS:
            raise PipelineError(f"value format {cfg.value_format!r}: expected one of {', '.join(VALUE_FORMATS)}")
        if cfg.value_format == "avro" and avro is None:
            from kop.pipeline.avro import AvroValues

            if not cfg.schema_registry:
                raise PipelineError("--value-format avro needs --schema-registry URL")
            self.avro = AvroValues.fetch(cfg.schema_registry, cfg.topics, cfg.key_field, cfg.amount_field)

    def aggregate(self, batch_df: DataFrame, batch_id: int) -> DataFrame:
        """The batch's per-key rows (OUTPUT_COLUMNS; Avro: and unknown_ids)."""
        if self.avro is None:
            return aggregate_events(batch_df, batch_id, self.cfg.key_field, self.cfg.amount_field)
        return aggregate_decoded(self.avro.events(batch_df), batch_id)

    def __call__(self, batch_df: DataFrame, batch_id: int) -> None:
        from py4j.protocol import Py4JJavaError

        try:
            self._write(batch_df, batch_id)
        except Py4JJavaError as e:
            short = interrupted_by_stop(e, self.stopping, batch_id)
            if short is None:
                raise
            raise short from None

    def _write(self, batch_df: DataFrame, batch_id: int) -> None:
        from pyspark.sql import functions as F

        cfg = self.cfg
        cached = self._aggregate_known(batch_df, batch_id)
        try:
            agg = cached.select(*OUTPUT_COLUMNS)
            summary = agg.agg(F.count(F.lit(1)).alias("keys"), F.sum("records").alias("records"),
                              F.sum("invalid").alias("invalid")).first()
            if summary is None or not summary["keys"]:
                log.info("batch %d: no records", batch_id)
                return
            (
                agg.write.mode("overwrite")
                .option("partitionOverwriteMode", "dynamic")  # replace this batch's partition only
                .partitionBy("batch_id")
                .parquet(cfg.parquet_path)
            )
            writer = (
                agg.select(F.col("key"), F.to_json(F.struct(*OUTPUT_COLUMNS)).alias("value"))
                .write.format("kafka")
                .option("kafka.bootstrap.servers", cfg.bootstrap)
                .option("topic", cfg.output_topic)
            )
            for k, v in cfg.sink_options.items():
                writer = writer.option(k, v)
            writer.save()
            log.info("batch %d: %d records (%d invalid), %d keys -> %s and topic %s", batch_id, summary["records"],
                     summary["invalid"], summary["keys"], cfg.parquet_path, cfg.output_topic)
        finally:
            cached.unpersist()

    def _aggregate_known(self, batch_df: DataFrame, batch_id: int) -> DataFrame:
        """The batch's aggregate, persisted. Avro: schema ids met for the first time are fetched first, and the
        batch aggregated again with their decoders - once per id, as an id the registry lacks is remembered
        as undecodable, so the loop ends."""
        from pyspark import StorageLevel
        from pyspark.sql import functions as F

        while True:
            cached = self.aggregate(batch_df, batch_id).persist(StorageLevel.MEMORY_AND_DISK)
            if self.avro is None:
                return cached
            row = cached.agg(F.array_distinct(F.flatten(F.collect_list("unknown_ids"))).alias("ids")).first()
            ids = list(row["ids"] or []) if row is not None else []
            if not ids or not self.avro.learn(ids):
                return cached
            cached.unpersist()


def start_stream(spark: SparkSession, cfg: StreamConfig, writer: BatchWriter | None = None) -> StreamingQuery:
    """Start the query (returns at once; the caller waits on it or stops it)."""
    reader = (
        spark.readStream.format("kafka")
        .option("kafka.bootstrap.servers", cfg.bootstrap)
        .option("subscribe", ",".join(cfg.topics))
        .option("failOnDataLoss", "true" if cfg.fail_on_data_loss else "false")
    )
    if cfg.starting_timestamp is not None:
        reader = reader.option("startingTimestamp", str(cfg.starting_timestamp))
    else:
        reader = reader.option("startingOffsets", cfg.starting_offsets)
    if cfg.max_offsets_per_trigger is not None:
        reader = reader.option("maxOffsetsPerTrigger", str(cfg.max_offsets_per_trigger))
    for k, v in cfg.source_options.items():
        reader = reader.option(k, v)
    stream = reader.load().writeStream.foreachBatch(writer or BatchWriter(cfg))
    stream = stream.option("checkpointLocation", cfg.checkpoint)
    if cfg.query_name:
        stream = stream.queryName(cfg.query_name)
    if cfg.available_now:
        stream = stream.trigger(availableNow=True)
    else:
        stream = stream.trigger(processingTime=cfg.trigger_interval)
    return stream.start()


def run_stream(spark: SparkSession, cfg: StreamConfig, writer: BatchWriter | None = None) -> None:
    """Run until the query ends (available-now), fails (raises StreamingQueryException), or SIGINT/SIGTERM
    asks it to stop - then stop it cleanly, so the checkpoint is consistent for the next start."""
    writer = writer or BatchWriter(cfg)
    wait_or_stop(start_stream(spark, cfg, writer), writer)


def wait_or_stop(query: StreamingQuery, writer: Stoppable) -> None:
    """Wait for a started query until it ends or fails (raises StreamingQueryException), or until SIGINT/SIGTERM;
    then set `writer.stopping` (see BatchWriter) and stop it cleanly, so the checkpoint is consistent."""
    stop = threading.Event()
    previous: dict[signal.Signals, Any] = {}
    if threading.current_thread() is threading.main_thread():
        for sig in (signal.SIGINT, signal.SIGTERM):
            previous[sig] = signal.signal(sig, lambda *_: stop.set())
    try:
        # A short wait in a loop rather than one blocking awaitTermination(): the signal handler only sets a
        # flag, and the loop (not the handler, which may interrupt a py4j call) stops the query.
        while query.isActive and not stop.is_set():
            query.awaitTermination(1)
        if stop.is_set():
            log.info("stopping the query (signal)")
            writer.stopping = True
            query.stop()
        query.awaitTermination()  # raises StreamingQueryException if the query failed
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


# ---- reading the sinks back ------------------------------------------------------------------------------


def dedupe_sink_rows(rows: Iterable[Mapping[str, Any]]) -> dict[tuple[int, str | None], dict[str, Any]]:
    """Rows of the output topic (parsed JSON values) keyed by their identity (batch_id, key). A re-run batch
    repeats identical rows, which collapse; two different rows with one identity raise ValueError."""
    out: dict[tuple[int, str | None], dict[str, Any]] = {}
    for row in rows:
        ident = (int(row["batch_id"]), row.get("key"))
        prev = out.setdefault(ident, dict(row))
        if prev != dict(row):
            raise ValueError(f"two different rows for batch {ident[0]} key {ident[1]!r}: {prev} vs {dict(row)}")
    return out


def totals_by_key(rows: Iterable[Mapping[str, Any]]) -> dict[str | None, dict[str, int]]:
    """Running totals per key from unique per-batch rows: records, amount, invalid summed, checksum XORed."""
    out: dict[str | None, dict[str, int]] = {}
    for row in rows:
        t = out.setdefault(row["key"], {"records": 0, "amount": 0, "invalid": 0, "checksum": 0})
        t["records"] += int(row["records"])
        t["amount"] += int(row["amount"])
        t["invalid"] += int(row["invalid"])
        t["checksum"] ^= int(row["checksum"])
    return out
