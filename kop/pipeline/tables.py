"""`kop pipeline tables`: topics as Apache Iceberg tables, exactly once (issue 26).

A Structured Streaming query reads the topics (read_committed by default) and, in each micro-batch, appends
every topic's records to its own Iceberg table (kop.pipeline.iceberg_schema: the columns, the table names,
the snapshot summary). The catalog is Iceberg's Hadoop catalog on `--warehouse` (a directory or a Hadoop
URL, e.g. s3a://bucket/path), registered in the session as `--catalog` (default `kop`); a table is
`<catalog>.<namespace>.<topic>` (namespace default `kafka`), created on the first batch that meets its topic.

Exactly once. Spark writes a batch's offset range to the checkpoint before the batch runs, so a batch re-run
after a crash reads the same records. Each table commit is atomic and its snapshot summary names the query
(its id, from the checkpoint) and the batch; before appending, the job looks at the table's newest snapshot,
and a batch that is already there is skipped. A crash between the commit and Spark's own commit log therefore
leaves each record in the table once, and so does a crash between two tables' commits of one batch.

Values. With `--schema-registry URL` a topic whose `<topic>-value` subject's latest schema is an Avro record is
a typed table: the values are decoded in the JVM by spark-avro's from_avro (writer schema: the one the record's
Confluent id names; reader schema: the latest), one column per field. A record that does not decode keeps its
bytes in kafka_raw_value. A new schema id met in a batch makes the job ask the registry for the latest
version again: a newer one adds its new top-level fields as columns (ALTER TABLE ... ADD COLUMNS) before the
batch is written. Without a registry, or for a topic without an Avro record schema, the table has kafka_value.

Upsert tables. The table of a compacted topic (cleanup.policy includes compact; or any topic with
`--mode upsert`; `--mode append` turns it off) holds one row per (kafka_partition, kafka_key): the latest
record of the key, and no row for a key whose latest record is a tombstone (a null value). Each batch is
MERGEd (Iceberg's Spark SQL extensions): its last record per key, by offset, replaces or inserts the key's row,
or deletes it when it is a tombstone; records without a key are not rows (Kafka refuses them on a compacted
topic). The MERGE is one commit and carries the same snapshot summary as an append (Iceberg's CommitMetadata),
and applying a batch twice leaves what applying it once does, so the exactly-once argument above holds. The
mode is kept as the table property kop.table-mode; an existing table keeps its mode.

Compaction. Every `--compact-every N` batches each table's small data files are rewritten into larger ones
(Iceberg's rewrite_data_files action), with the kop.* summary carried forward to the rewrite's snapshot.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from kop.pipeline import iceberg_schema as schema
from kop.pipeline.kafka_meta import READ_COMMITTED, PipelineError

if TYPE_CHECKING:
    from py4j.java_gateway import JavaObject
    from pyspark.sql import Column, DataFrame, SparkSession
    from pyspark.sql.streaming import StreamingQuery
    from pyspark.sql.types import StructType

    from kop.pipeline.avro import RegisteredSchema, RegistryClient

log = logging.getLogger("kop.pipeline.tables")


@dataclass
class TablesConfig:
    """Everything `kop pipeline tables` takes (docs/spark.md)."""

    bootstrap: str
    topics: list[str]
    warehouse: str
    checkpoint: str
    topic_pattern: str | None = None  # subscribePattern instead of topics
    catalog: str = "kop"
    namespace: str = "kafka"
    partition_by: str = "day"
    starting_offsets: str = "earliest"
    max_offsets_per_trigger: int | None = None
    fail_on_data_loss: bool = True
    trigger_interval: str = "0 seconds"
    available_now: bool = False
    compact_every: int = 0  # batches; 0: never
    schema_registry: str | None = None
    schema_registry_token: str | None = None
    mode: str = schema.AUTO  # auto (upsert for compacted topics), append or upsert
    isolation_level: str = READ_COMMITTED
    query_name: str | None = None
    source_options: dict[str, str] = field(default_factory=dict)


def catalog_conf(catalog: str, warehouse: str) -> dict[str, str]:
    """The Spark settings that register Iceberg's Hadoop catalog `catalog` on `warehouse` (no table cache)."""
    if "://" not in warehouse:
        warehouse = str(Path(warehouse).resolve())
    return {
        f"spark.sql.catalog.{catalog}": "org.apache.iceberg.spark.SparkCatalog",
        f"spark.sql.catalog.{catalog}.type": "hadoop",
        f"spark.sql.catalog.{catalog}.warehouse": warehouse,
        # Each streaming query runs its batches in a clone of the session, with its own catalog instance: with
        # Iceberg's table cache on, the caller's session would keep reading the snapshot it loaded first.
        f"spark.sql.catalog.{catalog}.cache-enabled": "false",
    }


def load_table(spark: SparkSession, name: str) -> JavaObject:
    """The org.apache.iceberg.Table behind a Spark table name (py4j), fresh from the catalog."""
    jvm = spark.sparkContext._jvm
    assert jvm is not None
    table = jvm.org.apache.iceberg.spark.Spark3Util.loadIcebergTable(spark._jsparkSession, name)
    table.refresh()
    return table


def kop_summary(table: JavaObject) -> dict[str, str]:
    """The summary of the newest snapshot the job (or a compaction of it) wrote: the current one, or the nearest
    ancestor with kop.kafka.offsets (another writer's commit, e.g. a DELETE, carries none). {} for none."""
    snap = table.currentSnapshot()
    while snap is not None:
        summary = {str(k): str(v) for k, v in dict(snap.summary()).items()}
        if schema.SUMMARY_OFFSETS in summary:
            return summary
        parent = snap.parentId()
        snap = table.snapshot(parent) if parent is not None else None
    return {}


def read_query_id(spark: SparkSession, checkpoint: str) -> str:
    """The streaming query's id, which Spark keeps in `<checkpoint>/metadata` ({"id": ...}) from its first start."""
    if "://" not in checkpoint or checkpoint.startswith("file:"):
        path = Path(checkpoint.removeprefix("file://").removeprefix("file:")) / "metadata"
        text = path.read_text()
    else:
        row = spark.read.text(checkpoint.rstrip("/") + "/metadata").first()
        text = row[0] if row is not None else "{}"
    return str(json.loads(text.splitlines()[0])["id"])


@dataclass
class TopicTable:
    """One topic's table as the job knows it between batches."""

    topic: str
    name: str
    columns: list[tuple[str, str]]  # what the job writes: Kafka's and the reader schema's
    reader: RegisteredSchema | None  # the latest Avro record schema, or None: kafka_value
    table_schema: StructType | None = None  # the table's columns: those the job does not write get nulls
    writers: dict[int, str | None] = field(default_factory=dict)  # Confluent id -> schema text (None: unusable)
    last_batch: int | None = None  # the last batch of this query in the table
    covered: dict[int, int] = field(default_factory=dict)
    batches_since_compaction: int = 0
    upsert: bool = False  # MERGE by (kafka_partition, kafka_key) instead of append


class TableWriter:
    """The foreachBatch function: each topic's records of the batch appended to its table, once."""

    def __init__(self, cfg: TablesConfig) -> None:
        self.cfg = cfg
        self.stopping = False
        self.tables: dict[str, TopicTable] = {}
        self.query_id: str | None = None
        self.registry: RegistryClient | None = None
        if cfg.schema_registry:
            from kop.pipeline.avro import RegistryClient

            self.registry = RegistryClient(cfg.schema_registry, token=cfg.schema_registry_token)

    def __call__(self, batch_df: DataFrame, batch_id: int) -> None:
        from py4j.protocol import Py4JJavaError

        from kop.pipeline.stream import interrupted_by_stop

        try:
            self._write(batch_df, batch_id)
        except Py4JJavaError as e:  # the short message kop.pipeline.stream.BatchWriter explains
            short = interrupted_by_stop(e, self.stopping, batch_id)
            if short is None:
                raise
            raise short from None

    def _write(self, batch_df: DataFrame, batch_id: int) -> None:
        from pyspark import StorageLevel
        from pyspark.sql import functions as F

        spark = batch_df.sparkSession
        if self.query_id is None:
            self.query_id = read_query_id(spark, self.cfg.checkpoint)
        batch = batch_df.persist(StorageLevel.MEMORY_AND_DISK)
        try:
            # One job for what the batch holds: its offsets per partition and the Confluent ids of its values.
            prefixed, schema_id = confluent_prefix()
            stats: dict[str, dict[int, tuple[int, int, int]]] = {}
            ids: dict[str, set[int]] = {}
            for r in batch.groupBy("topic", "partition").agg(
                    F.min("offset").alias("first"), F.max("offset").alias("last"), F.count(F.lit(1)).alias("n"),
                    F.collect_set(F.when(prefixed, schema_id)).alias("ids"),
            ).collect():
                stats.setdefault(r["topic"], {})[int(r["partition"])] = (int(r["first"]), int(r["last"]), int(r["n"]))
                ids.setdefault(r["topic"], set()).update(int(i) for i in r["ids"])
            for topic in sorted(stats):
                self._write_topic(spark, batch.where(F.col("topic") == topic), batch_id, topic, stats[topic],
                                  ids[topic])
        finally:
            batch.unpersist()

    def _write_topic(self, spark: SparkSession, rows: DataFrame, batch_id: int, topic: str,
                     stats: dict[int, tuple[int, int, int]], ids: set[int]) -> None:
        t = self._table(spark, topic)
        if t.last_batch is not None and batch_id <= t.last_batch:
            log.info("batch %d: already in %s (a re-run after a restart): skipped", batch_id, t.name)
            return
        if t.reader is not None:
            self._learn_ids(spark, ids, t)
        out = self._rows(rows, t)
        covered = schema.merge_covered(t.covered, stats)
        assert self.query_id is not None
        summary = schema.batch_summary(self.query_id, batch_id, topic, covered, stats)
        if t.upsert:
            merge(spark, out, t.name, [f.name for f in spark.table(t.name).schema.fields], summary)
        else:
            writer = out.writeTo(t.name)
            for k, v in summary.items():
                writer = writer.option(f"snapshot-property.{k}", v)
            writer.append()
        t.last_batch, t.covered = batch_id, covered
        log.info("batch %d: %d records of %s -> %s%s", batch_id, sum(n for *_, n in stats.values()), topic, t.name,
                 " (merged: the last record per key)" if t.upsert else "")
        t.batches_since_compaction += 1
        if self.cfg.compact_every and t.batches_since_compaction >= self.cfg.compact_every:
            compact(spark, t.name)
            t.batches_since_compaction = 0

    def _table(self, spark: SparkSession, topic: str) -> TopicTable:
        """The topic's table, created on first sight; a restarted job reads its last batch from the summary."""
        if topic in self.tables:
            return self.tables[topic]
        cfg = self.cfg
        name = schema.table_identifier(cfg.catalog, cfg.namespace, topic)
        reader = self._latest_schema(topic)
        columns = schema.table_columns(reader.schema if reader is not None else None)
        spark.sql(f"CREATE NAMESPACE IF NOT EXISTS {cfg.catalog}.{cfg.namespace}")
        spark.sql(schema.create_table_sql(name, columns, cfg.partition_by, self._wanted_mode(spark, name, topic)))
        existing = [str(c) for c in spark.table(name).columns]
        alter = schema.add_columns_sql(name, existing, columns)
        if alter:  # the schema evolved while the job was stopped
            spark.sql(alter)
        t = TopicTable(topic, name, columns, reader, spark.table(name).schema)
        if reader is not None:
            t.writers[reader.id] = reader.schema
        jtable = load_table(spark, name)
        t.upsert = schema.choose_mode(cfg.mode, jtable.properties().get(schema.TABLE_MODE_PROPERTY),
                                      name) == schema.UPSERT
        summary = kop_summary(jtable)
        assert self.query_id is not None
        t.last_batch = schema.committed_batch(summary, self.query_id)
        if summary and t.last_batch is None:
            log.warning("table %s was last written by another query (%s): this query (%s) appends after it",
                        name, summary.get(schema.SUMMARY_QUERY), self.query_id)
        t.covered = schema.decode_offsets(summary.get(schema.SUMMARY_OFFSETS))
        self.tables[topic] = t
        log.info("topic %s -> %s table %s (%s)", topic, schema.UPSERT if t.upsert else schema.APPEND, name,
                 f"Avro schema id {reader.id}" if reader is not None else "raw values")
        return t

    def _wanted_mode(self, spark: SparkSession, name: str, topic: str) -> str:
        """The mode a table made now would get; --mode auto asks the broker for the topic's cleanup.policy (only
        when the table does not exist yet: an existing table keeps its own mode)."""
        from kop.pipeline.kafka_meta import snapshot_topic

        if self.cfg.mode != schema.AUTO or spark.catalog.tableExists(name):
            return schema.wanted_mode(self.cfg.mode, compacted=False)
        return schema.wanted_mode(schema.AUTO, snapshot_topic(self.cfg.bootstrap, topic).compacted)

    def _latest_schema(self, topic: str) -> RegisteredSchema | None:
        """The latest `<topic>-value` schema when it is an Avro record the table can have as columns, else None."""
        if self.registry is None:
            return None
        try:
            latest = self.registry.latest(f"{topic}-value")
        except PipelineError as e:
            if "has no subject" not in str(e):
                raise
            return None
        if latest.schema_type.upper() != "AVRO" or latest.references:
            log.warning("topic %s: its value schema is %s%s: raw values", topic, latest.schema_type,
                        " with references" if latest.references else "")
            return None
        schema.value_columns(latest.schema)  # refuses a schema that cannot be columns (PipelineError)
        return latest

    def _learn_ids(self, spark: SparkSession, ids: set[int], t: TopicTable) -> None:
        """Fetch the writer schemas of ids met for the first time; a newer latest version evolves the table."""
        assert self.registry is not None and t.reader is not None
        new = sorted(ids - set(t.writers))
        if not new:
            return
        for sid in new:
            found = self.registry.schema_by_id(sid)
            usable = found is not None and found.schema_type.upper() == "AVRO" and not found.references
            t.writers[sid] = found.schema if found is not None and usable else None
            if not usable:
                log.warning("topic %s: schema id %d is unknown or not plain Avro: kept as kafka_raw_value", t.topic, sid)
        latest = self.registry.latest(f"{t.topic}-value")
        if latest.id != t.reader.id and latest.schema_type.upper() == "AVRO" and not latest.references:
            columns = schema.table_columns(latest.schema)
            alter = schema.add_columns_sql(t.name, [c for c, _ in t.columns], columns)
            if alter:
                log.info("topic %s: schema version %d (id %d) adds columns: %s", t.topic, latest.version, latest.id,
                         alter)
                spark.sql(alter)
            t.reader, t.columns, t.table_schema = latest, columns, spark.table(t.name).schema
            t.writers[latest.id] = latest.schema

    def _rows(self, rows: DataFrame, t: TopicTable) -> DataFrame:
        """The batch's records of one topic as the table's rows."""
        from pyspark.sql import functions as F

        kafka = [F.col("partition").alias("kafka_partition"), F.col("offset").alias("kafka_offset"),
                 F.col("timestamp").alias("kafka_timestamp"), F.col("timestampType").alias("kafka_timestamp_type"),
                 F.col("key").alias("kafka_key"), F.col("headers").alias("kafka_headers")]
        if t.upsert:
            kafka.append(F.col("value").isNull().alias(schema.TOMBSTONE_COLUMN))
        if t.reader is None:
            return _with_missing_columns(rows.select(*kafka, F.col("value").alias("kafka_value")), t)
        record = decode_column(t.reader.schema, t.writers)
        decoded = rows.withColumn("_record", record)
        prefixed, schema_id = confluent_prefix()
        fields = [c for c, _ in t.columns if c not in {k for k, _ in (*schema.KAFKA_COLUMNS,
                                                                     *schema.TYPED_EXTRA_COLUMNS)}]
        return _with_missing_columns(decoded.select(
            *kafka,
            *[F.col("_record")[f].alias(f) for f in fields],
            F.when(prefixed, schema_id.cast("int")).alias("kafka_schema_id"),
            F.when(F.col("_record").isNull(), F.col("value")).alias("kafka_raw_value"),
        ), t)


def _with_missing_columns(df: DataFrame, t: TopicTable) -> DataFrame:
    """`df` with nulls for the table's columns it lacks (a field a later schema version removed, the kafka_value of
    a table that was raw before its topic had a schema): an append must name every column of the table."""
    from pyspark.sql import functions as F

    have = set(df.columns)
    gone = [F.lit(None).cast(f.dataType).alias(f.name) for f in (t.table_schema.fields if t.table_schema else [])
            if f.name not in have]
    return df.select("*", *gone) if gone else df


def confluent_prefix() -> tuple[Column, Column]:
    """(the value starts with Confluent's 0x00 + id prefix, the id) as Spark columns."""
    from pyspark.sql import functions as F

    value = F.col("value")
    prefixed = (F.length(value) >= 5) & (F.substring(value, 1, 1) == F.lit(bytearray(b"\x00")))
    schema_id = F.conv(F.hex(F.substring(value, 2, 4)), 16, 10).cast("long")
    return prefixed, schema_id


def decode_column(reader: str, writers: Mapping[int, str | None]) -> Column:
    """The value decoded to the reader schema's record (null when it does not decode): CASE over the writer ids
    of from_avro(body, writer schema, reader schema), in the JVM."""
    from pyspark.sql import functions as F
    from pyspark.sql.avro.functions import from_avro

    prefixed, schema_id = confluent_prefix()
    body = F.expr("substring(value, 6)")
    options = {"mode": "PERMISSIVE", "avroSchema": reader}
    record: Column | None = None
    for sid, writer in sorted(writers.items()):
        if writer is None:
            continue
        cond = prefixed & (schema_id == F.lit(sid))
        decoded = from_avro(body, writer, options)
        record = F.when(cond, decoded) if record is None else record.when(cond, decoded)
    assert record is not None  # the reader's own id is always a writer
    return record


def merge(spark: SparkSession, out: DataFrame, name: str, columns: list[str], summary: Mapping[str, str]) -> None:
    """One batch's rows MERGEd into an upsert table (iceberg_schema.merge_sql): per (kafka_partition, kafka_key)
    the record with the highest offset; keyless records dropped. One Iceberg commit, whose snapshot summary gets
    `summary` through Iceberg's CommitMetadata (a MERGE has no write options; the properties are a thread-local
    of the thread that commits, which is the one running the statement: the call below, through py4j)."""
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    last = Window.partitionBy("kafka_partition", "kafka_key").orderBy(F.col("kafka_offset").desc())
    latest = (out.where(F.col("kafka_key").isNotNull()).withColumn("_kop_rank", F.row_number().over(last))
              .where(F.col("_kop_rank") == 1).drop("_kop_rank"))
    view = "kop_upsert_" + name.replace(".", "_")
    latest.createOrReplaceTempView(view)
    try:
        sql = schema.merge_sql(name, view, columns)
        jvm = spark.sparkContext._jvm
        assert jvm is not None
        props = jvm.java.util.HashMap()
        for k, v in summary.items():
            props.put(k, v)
        exc = jvm.java.lang.Class.forName("java.lang.RuntimeException")
        jvm.org.apache.iceberg.spark.CommitMetadata.withCommitProperties(props, _JavaCallable(lambda: spark.sql(sql)),
                                                                         exc)
    finally:
        spark.catalog.dropTempView(view)


class _JavaCallable:
    """A Python function as a java.util.concurrent.Callable (py4j's callback server, which foreachBatch runs on)."""

    def __init__(self, fn: Callable[[], object]) -> None:
        self.fn = fn

    def call(self) -> None:
        self.fn()

    class Java:
        implements = ["java.util.concurrent.Callable"]


def compact(spark: SparkSession, name: str) -> None:
    """Rewrite the table's small data files (Iceberg's rewrite_data_files), the kop.* summary carried forward."""
    jvm = spark.sparkContext._jvm
    assert jvm is not None
    table = load_table(spark, name)
    summary = kop_summary(table)
    action = jvm.org.apache.iceberg.spark.actions.SparkActions.get(spark._jsparkSession).rewriteDataFiles(table)
    action = action.option("min-input-files", "2")
    for k in schema.CARRIED_FORWARD:
        if k in summary:
            action = action.snapshotProperty(k, summary[k])
    result = action.execute()
    log.info("compaction of %s: %d data files rewritten into %d", name, result.rewrittenDataFilesCount(),
             result.addedDataFilesCount())


def start_tables(spark: SparkSession, cfg: TablesConfig, writer: TableWriter | None = None) -> StreamingQuery:
    """Start the query (returns at once)."""
    reader = (
        spark.readStream.format("kafka")
        .option("kafka.bootstrap.servers", cfg.bootstrap)
        .option("failOnDataLoss", "true" if cfg.fail_on_data_loss else "false")
        .option("includeHeaders", "true")
        .option("kafka.isolation.level", cfg.isolation_level)
        .option("startingOffsets", cfg.starting_offsets)
    )
    reader = (reader.option("subscribePattern", cfg.topic_pattern) if cfg.topic_pattern
              else reader.option("subscribe", ",".join(cfg.topics)))
    if cfg.max_offsets_per_trigger is not None:
        reader = reader.option("maxOffsetsPerTrigger", str(cfg.max_offsets_per_trigger))
    for k, v in cfg.source_options.items():
        reader = reader.option(k, v)
    for k, v in catalog_conf(cfg.catalog, cfg.warehouse).items():
        spark.conf.set(k, v)
    stream = reader.load().writeStream.foreachBatch(writer or TableWriter(cfg))
    stream = stream.option("checkpointLocation", cfg.checkpoint)
    if cfg.query_name:
        stream = stream.queryName(cfg.query_name)
    stream = stream.trigger(availableNow=True) if cfg.available_now else stream.trigger(
        processingTime=cfg.trigger_interval)
    return stream.start()


def run_tables(spark: SparkSession, cfg: TablesConfig, writer: TableWriter | None = None) -> None:
    """Run until the query ends (available-now), fails, or SIGINT/SIGTERM stops it (kop.pipeline.stream's loop)."""
    from kop.pipeline.stream import wait_or_stop

    writer = writer or TableWriter(cfg)
    wait_or_stop(start_tables(spark, cfg, writer), writer)
