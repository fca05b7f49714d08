"""`kop pipeline audit` and `kop pipeline stream`: the PySpark jobs as commands against a running broker.

    kop pipeline audit  --bootstrap-server H:P --topic T [--from-offsets JSON] [--to-offsets JSON] [--json]
                        [--isolation-level read_committed|read_uncommitted]
    kop pipeline audit  --bootstrap-server H:P --topic T --table [NAME] --warehouse DIR|URL [--catalog kop]
    kop pipeline tables --bootstrap-server H:P --topic T [--topic T2 ...] | --topic-pattern REGEX
                        --warehouse DIR|URL --checkpoint DIR [--schema-registry URL] [--namespace kafka]
                        [--partition-by day|hour|month|none] [--compact-every N] [--mode auto|append|upsert]
                        [--available-now] ...
    kop pipeline stream --bootstrap-server H:P --topic T [--topic T2 ...] --output-topic O
                        --parquet DIR --checkpoint DIR [--starting-offsets earliest|latest|JSON]
                        [--starting-timestamp MS] [--max-offsets-per-trigger N] [--fail-on-data-loss true|false]
                        [--trigger-interval '5 seconds' | --available-now]
                        [--value-format json | --value-format avro --schema-registry URL
                         [--schema-registry-token TOKEN]]

With `--value-format avro` against a broker whose admin REST authenticates, the registry's Bearer token comes from
`--schema-registry-token` or, better (it stays out of the process list), the environment variable
KOP_SCHEMA_REGISTRY_TOKEN; it is never printed (kop.pipeline.avro).

Exit status: 0 success (audit: no data loss, no duplicates), 1 the audit found problems or the streaming
query failed, 2 a usage or set-up problem (bad arguments, unknown topic, missing pyspark or jars).
pyspark is imported only when a job runs, so `kop standalone` never needs it.
"""

from __future__ import annotations

import argparse
import logging
import sys
from typing import Any

from kop.pipeline.kafka_meta import ISOLATION_LEVELS, READ_COMMITTED, PipelineError
from kop.pipeline.stream import VALUE_FORMATS  # stream.py imports pyspark only when a job runs

COMMON_HELP = "Spark master (default local[2]: the jobs run inside this process' JVM on two cores)"


def _common(p: argparse.ArgumentParser) -> None:
    p.add_argument("--bootstrap-server", required=True, metavar="HOST:PORT", help="the broker to read from")
    p.add_argument("--master", default="local[2]", help=COMMON_HELP)
    p.add_argument("--jars-dir", help="folder with the Spark Kafka connector jars (default: KOP_SPARK_JARS, "
                                      "else .cache/spark-jars of the source checkout, filled by scripts/setup)")
    p.add_argument("--conf", action="append", default=[], metavar="KEY=VALUE", help="a Spark setting (repeatable)")
    p.add_argument("--option", action="append", default=[], metavar="KEY=VALUE",
                   help="a Kafka source option, e.g. kafka.request.timeout.ms=60000 (repeatable)")


def add_pipeline_parser(sub: Any) -> None:
    """Register `pipeline` under the `kop` command's subparsers."""
    p = sub.add_parser("pipeline", help="PySpark jobs over a running broker: audit a topic, stream aggregates")
    jobs = p.add_subparsers(dest="job", required=True)

    a = jobs.add_parser("audit", help="per partition: first/last offset, count, gaps and duplicates",
                        description="Read a topic with Spark's batch Kafka source and report, per partition, the "
                                    "first and last offset, the record count, gaps (classified as below the log "
                                    "start, compaction, transaction markers, aborted "
                                    "transactions, or missing) and duplicates. Exit status 1 when records are "
                                    "missing or duplicated (markers and aborted records are not).")
    _common(a)
    a.add_argument("--topic", required=True)
    a.add_argument("--from-offsets", metavar="JSON",
                   help='start per partition, Spark JSON: {"T": {"0": 0, "1": -2}} or {"0": 0} (-2 earliest, '
                        "-1 latest; partitions left out start at the log start offset)")
    a.add_argument("--to-offsets", metavar="JSON", help="end (exclusive) per partition, same format (default latest)")
    a.add_argument("--json", action="store_true", help="print the report as JSON instead of a table")
    a.add_argument("--isolation-level", choices=ISOLATION_LEVELS, default=None,
                   help="how Spark reads (kafka.isolation.level). read_committed (default): up to the last stable "
                        "offset, records of aborted transactions are hidden gaps; read_uncommitted: up to the log "
                        "end, aborted records are read and counted")
    a.add_argument("--max-gap-ranges", type=int, default=1000, help="list at most this many gaps (all are counted)")
    a.add_argument("--table", nargs="?", const="", metavar="NAME",
                   help="audit the topic's Iceberg table of `kop pipeline tables` instead: which offsets of the "
                        "topic are in it, which are missing, per partition (an upsert table: whether each key's row is "
                        "its latest record). NAME: [CATALOG.]NAMESPACE.TABLE "
                        "(default: the topic's table in --namespace)")
    _catalog_args(a, warehouse_required=False)

    _add_tables_parser(jobs)

    s = jobs.add_parser("stream", help="per-key aggregates of JSON or Avro events to a topic and to Parquet",
                        description="Structured Streaming from --topic(s) to --output-topic and --parquet, with "
                                    "a checkpoint. Runs until SIGINT/SIGTERM (then stops cleanly), or until the "
                                    "available data is processed with --available-now. See docs/spark.md.")
    _common(s)
    s.add_argument("--topic", action="append", required=True, dest="topics", help="input topic (repeatable)")
    s.add_argument("--output-topic", required=True, help="where the per-batch per-key rows go (kafka sink)")
    s.add_argument("--parquet", required=True, metavar="DIR", help="Parquet output (partitioned by batch_id)")
    s.add_argument("--checkpoint", required=True, metavar="DIR", help="checkpoint location (offsets, commits)")
    s.add_argument("--starting-offsets", default="latest",
                   help="first start only: earliest, latest (default) or Spark offsets JSON")
    s.add_argument("--starting-timestamp", type=int, metavar="EPOCH_MS",
                   help="first start only: begin at the first record with a timestamp >= this (wins over "
                        "--starting-offsets)")
    s.add_argument("--max-offsets-per-trigger", type=int, metavar="N", help="cap on records per micro-batch")
    s.add_argument("--fail-on-data-loss", choices=("true", "false"), default="true",
                   help="true (default): fail when offsets to read are gone; false: continue at the log start")
    trig = s.add_mutually_exclusive_group()
    trig.add_argument("--trigger-interval", default="0 seconds",
                      help="micro-batch interval, e.g. '10 seconds' (default: back to back)")
    trig.add_argument("--available-now", action="store_true",
                      help="process what is available now (in --max-offsets-per-trigger steps), then exit")
    s.add_argument("--key-field", default="key", help="JSON/Avro field with the event key (default: key)")
    s.add_argument("--amount-field", default="amount",
                   help="JSON/Avro field with the integer amount (default: amount)")
    s.add_argument("--value-format", choices=VALUE_FORMATS, default="json",
                   help="json (default): JSON objects; avro: Confluent-serialized Avro records (magic byte, "
                        "schema id, body), decoded with the schemas of --schema-registry")
    s.add_argument("--schema-registry", metavar="URL",
                   help="with --value-format avro (required there): a Confluent-compatible schema registry, e.g. "
                        "KoP's admin URL http://HOST:ADMINPORT; http://USER:PASSWORD@HOST:PORT for basic auth. "
                        "Each topic's latest <topic>-value schema is read at start")
    s.add_argument("--schema-registry-token", metavar="TOKEN",
                   help="with --value-format avro: a Bearer token for the registry (KoP's admin REST with "
                        "authenticationEnabled takes Pulsar JWTs); default: the environment variable "
                        "KOP_SCHEMA_REGISTRY_TOKEN, which keeps it out of the process list. Never printed")
    s.add_argument("--sink-option", action="append", default=[], metavar="KEY=VALUE",
                   help="a Kafka sink option, e.g. kafka.linger.ms=5 (repeatable)")
    s.add_argument("--query-name", help="name of the streaming query (shown in Spark's logs)")


def _catalog_args(p: argparse.ArgumentParser, warehouse_required: bool) -> None:
    p.add_argument("--warehouse", required=warehouse_required, metavar="DIR|URL",
                   help="the Iceberg warehouse: a directory or a Hadoop URL (s3a://bucket/path); Iceberg's Hadoop "
                        "catalog keeps the tables there")
    p.add_argument("--catalog", default="kop", help="the catalog's name in Spark SQL (default kop)")
    p.add_argument("--namespace", default="kafka", help="the tables' namespace (default kafka)")


def _add_tables_parser(jobs: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    from kop.pipeline.iceberg_schema import PARTITIONINGS

    t = jobs.add_parser("tables", help="topics as Iceberg tables, exactly once",
                        description="Structured Streaming from the topics to one Apache Iceberg table per topic "
                                    "(Kafka columns + the value's Avro fields, or raw bytes), exactly once; the "
                                    "snapshot summary records the offsets covered. See docs/spark.md.")
    _common(t)
    src = t.add_mutually_exclusive_group(required=True)
    src.add_argument("--topic", action="append", dest="topics", help="input topic (repeatable, or a,b,c)")
    src.add_argument("--topic-pattern", metavar="REGEX", help="every topic whose name matches (Spark's "
                                                              "subscribePattern)")
    _catalog_args(t, warehouse_required=True)
    t.add_argument("--checkpoint", required=True, metavar="DIR", help="checkpoint location (offsets, commits)")
    t.add_argument("--starting-offsets", default="earliest",
                   help="first start only: earliest (default), latest or Spark offsets JSON")
    t.add_argument("--max-offsets-per-trigger", type=int, metavar="N", help="cap on records per micro-batch")
    t.add_argument("--fail-on-data-loss", choices=("true", "false"), default="true")
    trig = t.add_mutually_exclusive_group()
    trig.add_argument("--trigger-interval", default="0 seconds", help="micro-batch interval, e.g. '1 minute'")
    trig.add_argument("--available-now", action="store_true", help="process what is available now, then exit")
    t.add_argument("--partition-by", choices=tuple(PARTITIONINGS), default="day",
                   help="hidden partitioning by the record timestamp (default day)")
    t.add_argument("--compact-every", type=int, default=0, metavar="N",
                   help="rewrite each table's small data files every N batches (default 0: never)")
    t.add_argument("--schema-registry", metavar="URL",
                   help="a Confluent-compatible registry (KoP: the admin URL): topics whose <topic>-value is an "
                        "Avro record get its fields as columns; without it every table has raw kafka_value")
    t.add_argument("--schema-registry-token", metavar="TOKEN",
                   help="Bearer token for the registry (default: KOP_SCHEMA_REGISTRY_TOKEN). Never printed")
    t.add_argument("--isolation-level", choices=ISOLATION_LEVELS, default=READ_COMMITTED,
                   help="how the topics are read (default read_committed)")
    t.add_argument("--mode", choices=("auto", "append", "upsert"), default="auto",
                   help="auto (default): a compacted topic (cleanup.policy compact) gets an upsert table, one row "
                        "per key with its latest value, tombstones delete; any other topic an append table, one row "
                        "per record. append/upsert: that mode for every topic. An existing table keeps its mode")
    t.add_argument("--query-name", help="name of the streaming query (shown in Spark's logs)")


def _pairs(items: list[str], what: str) -> dict[str, str]:
    out = {}
    for item in items:
        k, sep, v = item.partition("=")
        if not sep or not k:
            raise PipelineError(f"{what} {item!r}: expected KEY=VALUE")
        out[k] = v
    return out


def run_pipeline(args: argparse.Namespace) -> int:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s", stream=sys.stderr)
    # kafka-python's admin client logs every connection (INFO) and slow event-loop steps (WARNING); py4j logs
    # its gateway's life. Neither says anything about the job.
    logging.getLogger("kafka").setLevel(logging.ERROR)
    logging.getLogger("py4j").setLevel(logging.WARNING)
    from kop.pipeline.session import SparkSetupError, build_session

    try:
        conf = _pairs(args.conf, "--conf")
        options = _pairs(args.option, "--option")
        if args.job == "audit" and args.table is not None:
            return _audit_table(args, conf)
        if args.job == "tables":
            return _tables(args, conf, options)
        if args.job == "audit":
            from kop.pipeline.audit import isolation_of
            from kop.pipeline.kafka_meta import parse_offsets_json, resolve_range, snapshot_topic

            from_offsets = parse_offsets_json(args.from_offsets, args.topic)
            to_offsets = parse_offsets_json(args.to_offsets, args.topic)
            args.isolation_level = isolation_of(args.isolation_level, options)
            # An unknown topic or an impossible range is reported before a JVM is started for nothing.
            resolve_range(snapshot_topic(args.bootstrap_server, args.topic), from_offsets, to_offsets,
                          args.isolation_level == READ_COMMITTED)
            spark = build_session("kop-pipeline-audit", args.master, args.jars_dir, conf)
            return _audit(spark, args, from_offsets, to_offsets, options)
        cfg = _stream_config(args, options)
        from kop.pipeline.stream import BatchWriter

        avro = None
        if cfg.value_format == "avro":  # the registry's schemas, checked before a JVM starts
            from kop.pipeline.avro import AvroValues

            avro = AvroValues.fetch(cfg.schema_registry, cfg.topics, cfg.key_field, cfg.amount_field,
                                    token=args.schema_registry_token)
        writer = BatchWriter(cfg, avro)
        spark = build_session("kop-pipeline-stream", args.master, args.jars_dir, conf)
        return _stream(spark, cfg, writer)
    except (PipelineError, SparkSetupError) as e:
        print(f"kop pipeline: {e}", file=sys.stderr)
        return 2


def _audit(spark: Any, args: argparse.Namespace, from_offsets: dict[int, int], to_offsets: dict[int, int],
           options: dict[str, str]) -> int:
    from kop.pipeline.audit import audit_topic

    # Reading below the log start makes Spark's consumer log a data-loss warning with a stack trace per
    # partition; the audit reports those offsets itself (as below-log-start), so the warning is noise here.
    jvm = spark.sparkContext._jvm
    jvm.org.apache.logging.log4j.core.config.Configurator.setLevel(
        "org.apache.spark.sql.kafka010.consumer.KafkaDataConsumer", jvm.org.apache.logging.log4j.Level.ERROR
    )
    try:
        report = audit_topic(spark, args.bootstrap_server, args.topic, from_offsets, to_offsets,
                             args.max_gap_ranges, options, args.isolation_level)
    finally:
        spark.stop()
    print(report.to_json() if args.json else report.format_table())
    return 0 if report.ok else 1


def _audit_table(args: argparse.Namespace, conf: dict[str, str]) -> int:
    from kop.pipeline.iceberg_schema import table_identifier
    from kop.pipeline.kafka_meta import snapshot_topic
    from kop.pipeline.session import build_session
    from kop.pipeline.table_audit import audit_table
    from kop.pipeline.tables import catalog_conf

    if not args.warehouse:
        raise PipelineError("--table needs --warehouse DIR|URL (where `kop pipeline tables` keeps the tables)")
    parts = args.table.split(".") if args.table else []
    if len(parts) > 3 or any(not p for p in parts):
        raise PipelineError(f"--table {args.table!r}: expected [CATALOG.]NAMESPACE.TABLE or TABLE")
    name = (table_identifier(args.catalog, args.namespace, args.topic) if not parts else
            ".".join([args.catalog, args.namespace, *parts][-3:]) if len(parts) < 3 else args.table)
    level = args.isolation_level or READ_COMMITTED
    snapshot_topic(args.bootstrap_server, args.topic)  # an unknown topic is reported before a JVM starts
    spark = build_session("kop-pipeline-audit-table", args.master, args.jars_dir,
                          {**catalog_conf(args.catalog, args.warehouse), **conf})
    try:
        report = audit_table(spark, args.bootstrap_server, args.topic, name, level, args.max_gap_ranges)
    finally:
        spark.stop()
    print(report.to_json() if args.json else report.format_table())
    return 0 if report.ok else 1


def _tables(args: argparse.Namespace, conf: dict[str, str], options: dict[str, str]) -> int:
    from pyspark.errors import StreamingQueryException

    from kop.pipeline.iceberg_schema import table_identifier
    from kop.pipeline.session import build_session
    from kop.pipeline.tables import TablesConfig, TableWriter, run_tables

    cfg = TablesConfig(
        bootstrap=args.bootstrap_server,
        topics=[t for spec in (args.topics or []) for t in spec.split(",") if t],
        topic_pattern=args.topic_pattern, warehouse=args.warehouse, checkpoint=args.checkpoint,
        catalog=args.catalog, namespace=args.namespace, partition_by=args.partition_by,
        starting_offsets=args.starting_offsets, max_offsets_per_trigger=args.max_offsets_per_trigger,
        fail_on_data_loss=args.fail_on_data_loss == "true", trigger_interval=args.trigger_interval,
        available_now=args.available_now, compact_every=args.compact_every,
        schema_registry=args.schema_registry, schema_registry_token=args.schema_registry_token, mode=args.mode,
        isolation_level=args.isolation_level, query_name=args.query_name, source_options=options,
    )
    for topic in cfg.topics:
        table_identifier(cfg.catalog, cfg.namespace, topic)  # bad names are usage errors before a JVM starts
    writer = TableWriter(cfg)
    spark = build_session("kop-pipeline-tables", args.master, args.jars_dir, conf)
    try:
        run_tables(spark, cfg, writer)
    except StreamingQueryException as e:
        print(f"kop pipeline tables: the query failed: {e}", file=sys.stderr)
        return 1
    finally:
        spark.stop()
    return 0


def _stream_config(args: argparse.Namespace, options: dict[str, str]) -> Any:
    from kop.pipeline.stream import StreamConfig

    if args.value_format == "avro" and not args.schema_registry:
        raise PipelineError("--value-format avro needs --schema-registry URL (KoP: the broker's admin URL)")
    if args.value_format != "avro" and args.schema_registry:
        raise PipelineError("--schema-registry is only used with --value-format avro")
    if args.value_format != "avro" and args.schema_registry_token is not None:
        raise PipelineError("--schema-registry-token is only used with --value-format avro")

    return StreamConfig(
        bootstrap=args.bootstrap_server,
        topics=[t for spec in args.topics for t in spec.split(",") if t],
        output_topic=args.output_topic,
        parquet_path=args.parquet,
        checkpoint=args.checkpoint,
        starting_offsets=args.starting_offsets,
        starting_timestamp=args.starting_timestamp,
        max_offsets_per_trigger=args.max_offsets_per_trigger,
        fail_on_data_loss=args.fail_on_data_loss == "true",
        trigger_interval=args.trigger_interval,
        available_now=args.available_now,
        key_field=args.key_field,
        amount_field=args.amount_field,
        query_name=args.query_name,
        source_options=options,
        sink_options=_pairs(args.sink_option, "--sink-option"),
        value_format=args.value_format,
        schema_registry=args.schema_registry,
    )


def _stream(spark: Any, cfg: Any, writer: Any) -> int:
    from pyspark.errors import StreamingQueryException

    from kop.pipeline.stream import run_stream

    try:
        run_stream(spark, cfg, writer)
    except StreamingQueryException as e:
        print(f"kop pipeline stream: the query failed: {e}", file=sys.stderr)
        return 1
    finally:
        spark.stop()
    return 0
