"""The pure parts of `kop pipeline tables` (sans Spark): a topic's table columns, names, and the snapshot summary.

Columns. A table has Kafka's own columns first, all prefixed with `kafka_` (not `_`: Iceberg reserves
`_partition`, `_file`, `_pos`, ... for its metadata columns); a value field of the same name is refused:

    kafka_partition INT, kafka_offset BIGINT, kafka_timestamp TIMESTAMP, kafka_timestamp_type INT, kafka_key BINARY,
    kafka_headers ARRAY<STRUCT<key: STRING, value: BINARY>>

then, for a topic whose `<topic>-value` subject holds an Avro record schema, one column per top-level field of
that schema (typed as spark-avro's `from_avro` decodes it, so the table's columns are exactly what the job
writes) and `kafka_schema_id INT` (the Confluent id the record was written with) and `kafka_raw_value BINARY` (the value,
only when it could not be decoded: nothing is ever dropped); for a topic without a usable schema, `kafka_value BINARY`.
Pulsar-produced records carry their event time (else their publish time) as `kafka_timestamp`, their partition key as
`kafka_key` and their properties as `kafka_headers` (the broker's mapping, kop/pulsar/convert.py); the publish time of a
message with an event time, and the producer name, are not part of a Kafka record, so Spark's kafka source never sees them.

Snapshot summary. Every snapshot the job commits carries, as string properties (Iceberg summaries are
string -> string), the state that makes a re-run batch idempotent and lets `kop pipeline audit --table` say what
the table covers:

    kop.query-id        the streaming query's id (from its checkpoint; a new checkpoint is a new query)
    kop.batch-id        the micro-batch that made the snapshot
    kop.kafka.topic     the topic
    kop.kafka.offsets   JSON {"<partition>": <end>}: every offset below `end` that the job read is in the table
                        (cumulative over all batches: this snapshot and its ancestors)
    kop.kafka.batch     JSON {"<partition>": [first, last, count]}: the records this batch added

Compaction commits copy the first four forward, so the newest snapshot always answers.

Table modes (the table property `kop.table-mode`, fixed when the table is created):

    append   every record is a row (the archive of the topic)
    upsert   one row per (kafka_partition, kafka_key): the latest record of the key, a tombstone (null value)
             deletes the row; the job MERGEs each batch's last record per key (merge_sql)

`--mode auto` (the default) makes the table of a topic whose cleanup.policy includes `compact` an upsert table
and any other an append table (wanted_mode); an existing table keeps its mode (choose_mode).
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping

from kop.pipeline.kafka_meta import PipelineError

KAFKA_COLUMNS: tuple[tuple[str, str], ...] = (
    ("kafka_partition", "INT"),
    ("kafka_offset", "BIGINT"),
    ("kafka_timestamp", "TIMESTAMP"),
    ("kafka_timestamp_type", "INT"),
    ("kafka_key", "BINARY"),
    ("kafka_headers", "ARRAY<STRUCT<key: STRING, value: BINARY>>"),
)
TYPED_EXTRA_COLUMNS: tuple[tuple[str, str], ...] = (("kafka_schema_id", "INT"), ("kafka_raw_value", "BINARY"))
RAW_VALUE_COLUMNS: tuple[tuple[str, str], ...] = (("kafka_value", "BINARY"),)

# --partition-by: Iceberg's hidden partitioning of the record timestamp
PARTITIONINGS: dict[str, str | None] = {
    "day": "days(kafka_timestamp)", "hour": "hours(kafka_timestamp)", "month": "months(kafka_timestamp)", "none": None,
}

SUMMARY_QUERY = "kop.query-id"
SUMMARY_BATCH_ID = "kop.batch-id"
SUMMARY_TOPIC = "kop.kafka.topic"
SUMMARY_OFFSETS = "kop.kafka.offsets"
SUMMARY_BATCH = "kop.kafka.batch"
CARRIED_FORWARD = (SUMMARY_QUERY, SUMMARY_BATCH_ID, SUMMARY_TOPIC, SUMMARY_OFFSETS)

TABLE_MODE_PROPERTY = "kop.table-mode"
APPEND, UPSERT, AUTO = "append", "upsert", "auto"
MODES = (AUTO, APPEND, UPSERT)
# the MERGE source's flag for a record with a null value (a tombstone): not a table column
TOMBSTONE_COLUMN = "_kop_tombstone"

_PRIMITIVES = {
    "null": "VOID", "boolean": "BOOLEAN", "int": "INT", "long": "BIGINT", "float": "FLOAT", "double": "DOUBLE",
    "bytes": "BINARY", "string": "STRING",
}
# spark-avro's SchemaConverters for logical types (others fall back to the underlying type)
_LOGICAL = {
    ("int", "date"): "DATE",
    ("long", "timestamp-millis"): "TIMESTAMP", ("long", "timestamp-micros"): "TIMESTAMP",
    ("long", "local-timestamp-millis"): "TIMESTAMP_NTZ", ("long", "local-timestamp-micros"): "TIMESTAMP_NTZ",
}
# Iceberg's metadata columns (MetadataColumns), which a table column may not shadow
_ICEBERG_METADATA = ("_file", "_pos", "_deleted", "_spec_id", "_partition", "_row_id", "_last_updated_sequence_number")
_RESERVED = frozenset(c for c, _ in (*KAFKA_COLUMNS, *TYPED_EXTRA_COLUMNS, *RAW_VALUE_COLUMNS)) | set(_ICEBERG_METADATA)
_IDENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*$")


def _quote(name: str) -> str:
    return "`" + name.replace("`", "``") + "`"


def spark_type(t: object, named: dict[str, str] | None = None) -> str:
    """The Spark SQL type (DDL text) that spark-avro's from_avro gives an Avro type.

    Follows org.apache.spark.sql.avro.SchemaConverters: a union of null and one type is that type (nullable),
    [int, long] is BIGINT, [float, double] is DOUBLE, any other union a struct of member0, member1, ... (nulls
    left out); enum is STRING, fixed is BINARY, map is MAP<STRING, V>; decimal keeps precision and scale.
    `named`: the record, enum and fixed types defined so far, by full and short name (a later reference)."""
    named = {} if named is None else named
    if isinstance(t, str):
        if t in _PRIMITIVES:
            return _PRIMITIVES[t]
        if t in named:
            return named[t]
        raise PipelineError(f"Avro type {t!r} is not defined before its use")
    if isinstance(t, list):
        branches = [b for b in t if b != "null"]
        if len(branches) == 1:
            return spark_type(branches[0], named)
        if sorted(map(str, branches)) == ["int", "long"]:
            return "BIGINT"
        if sorted(map(str, branches)) == ["double", "float"]:
            return "DOUBLE"
        members = ", ".join(f"member{i}: {spark_type(b, named)}" for i, b in enumerate(branches))
        return f"STRUCT<{members}>"
    if not isinstance(t, dict):
        raise PipelineError(f"not an Avro type: {t!r}")
    raw_kind = t.get("type")
    kind = raw_kind if isinstance(raw_kind, str) else ""
    logical = str(t.get("logicalType"))
    if logical == "decimal" and kind in ("bytes", "fixed"):
        out = f"DECIMAL({int(t['precision'])}, {int(t.get('scale', 0))})"
    elif (kind, logical) in _LOGICAL:
        out = _LOGICAL[(kind, logical)]
    elif kind == "record":
        fields = ", ".join(f"{_quote(f['name'])}: {spark_type(f['type'], named)}" for f in t.get("fields", []))
        out = f"STRUCT<{fields}>"
    elif kind == "enum":
        out = "STRING"
    elif kind == "fixed":
        out = "BINARY"
    elif kind == "array":
        out = f"ARRAY<{spark_type(t['items'], named)}>"
    elif kind == "map":
        out = f"MAP<STRING, {spark_type(t['values'], named)}>"
    else:
        out = spark_type(raw_kind, named)
    if kind in ("record", "enum", "fixed") and "name" in t:
        name = str(t["name"])
        named[name] = out
        if t.get("namespace"):
            named[f"{t['namespace']}.{name}"] = out
    return out


def value_columns(schema_text: str) -> list[tuple[str, str]]:
    """The value columns of an Avro record schema: (field name, Spark SQL type) per top-level field, in order.
    PipelineError for a schema that is not a record, or a field name that is not a plain identifier or is one of
    the Kafka columns or Iceberg's metadata columns."""
    try:
        doc = json.loads(schema_text)
    except ValueError as e:
        raise PipelineError(f"the value schema is not JSON: {e}") from None
    if not isinstance(doc, dict) or doc.get("type") != "record":
        raise PipelineError("the value schema is not an Avro record: a table needs named fields as columns")
    named: dict[str, str] = {}
    whole = spark_type(doc, named)  # registers the named types in order, as the fields below meet them
    del whole
    cols = []
    for f in doc.get("fields", []):
        name = str(f.get("name"))
        if not _IDENT.match(name) or name.lower() in _RESERVED:
            raise PipelineError(f"value field {name!r}: a column must be an identifier, other than the Kafka "
                                f"columns and Iceberg's metadata columns ({', '.join(sorted(_RESERVED))})")
        cols.append((name, spark_type(f["type"], named)))
    return cols


def table_columns(schema_text: str | None) -> list[tuple[str, str]]:
    """All columns of a topic's table: Kafka's, then the value's (typed) or `kafka_value` (no schema)."""
    if schema_text is None:
        return [*KAFKA_COLUMNS, *RAW_VALUE_COLUMNS]
    return [*KAFKA_COLUMNS, *value_columns(schema_text), *TYPED_EXTRA_COLUMNS]


def create_table_sql(name: str, columns: Iterable[tuple[str, str]], partition_by: str, mode: str = APPEND) -> str:
    """CREATE TABLE IF NOT EXISTS for Iceberg (format v2), hidden-partitioned by `partition_by` (PARTITIONINGS),
    its mode (append or upsert) recorded as the table property kop.table-mode (an existing table keeps its own)."""
    if partition_by not in PARTITIONINGS:
        raise PipelineError(f"--partition-by {partition_by!r}: expected one of {', '.join(PARTITIONINGS)}")
    if mode not in (APPEND, UPSERT):
        raise PipelineError(f"table mode {mode!r}: expected {APPEND} or {UPSERT}")
    cols = ",\n  ".join(f"{_quote(c)} {t}" for c, t in columns)
    transform = PARTITIONINGS[partition_by]
    parts = f"\nPARTITIONED BY ({transform})" if transform else ""
    return (f"CREATE TABLE IF NOT EXISTS {name} (\n  {cols}\n) USING iceberg{parts}\n"
            f"TBLPROPERTIES ('format-version' = '2', 'write.parquet.compression-codec' = 'zstd', "
            f"'{TABLE_MODE_PROPERTY}' = '{mode}')")


def wanted_mode(requested: str, compacted: bool) -> str:
    """The mode a new table gets: --mode append or upsert as given; auto: upsert for a compacted topic."""
    if requested not in MODES:
        raise PipelineError(f"--mode {requested!r}: expected one of {', '.join(MODES)}")
    if requested != AUTO:
        return requested
    return UPSERT if compacted else APPEND


def choose_mode(requested: str, existing: str | None, name: str) -> str:
    """The mode the job writes a table in: the table's own (`existing`, its kop.table-mode; None, a table made
    before modes existed, is append). An explicit --mode that differs is refused: an append table turned upsert
    would keep every old row of a key, an upsert table turned append would get a row per record."""
    have = existing or APPEND
    if have not in (APPEND, UPSERT):
        raise PipelineError(f"table {name} has {TABLE_MODE_PROPERTY}={have!r}: expected {APPEND} or {UPSERT}")
    if requested not in (AUTO, have):
        raise PipelineError(f"table {name} is an {have} table (its {TABLE_MODE_PROPERTY}), not {requested}: "
                            f"write it with --mode {have} or auto, or into another --namespace")
    return have


def merge_sql(name: str, source: str, columns: Iterable[str]) -> str:
    """The MERGE of one batch into an upsert table. `source` (a view) holds the batch's last record per
    (kafka_partition, kafka_key), keys not null, with TOMBSTONE_COLUMN true where the value is null; `columns`
    are the table's. A tombstone deletes its key's row; any other record replaces it or is inserted. Applying
    the same batch twice leaves what applying it once left (a re-run batch after a crash changes nothing)."""
    cols = [_quote(c) for c in columns]
    updates = ", ".join(f"t.{c} = s.{c}" for c in cols)
    return (f"MERGE INTO {name} t USING {source} s\n"
            f"ON t.kafka_partition = s.kafka_partition AND t.kafka_key = s.kafka_key\n"
            f"WHEN MATCHED AND s.{TOMBSTONE_COLUMN} THEN DELETE\n"
            f"WHEN MATCHED THEN UPDATE SET {updates}\n"
            f"WHEN NOT MATCHED AND NOT s.{TOMBSTONE_COLUMN} THEN INSERT ({', '.join(cols)}) "
            f"VALUES ({', '.join(f's.{c}' for c in cols)})")


def add_columns_sql(name: str, existing: Iterable[str], columns: Iterable[tuple[str, str]]) -> str | None:
    """ALTER TABLE ... ADD COLUMNS for the columns not in the table yet (schema evolution), None when none."""
    have = {c.lower() for c in existing}
    new = [(c, t) for c, t in columns if c.lower() not in have]
    if not new:
        return None
    return f"ALTER TABLE {name} ADD COLUMNS ({', '.join(f'{_quote(c)} {t}' for c, t in new)})"


def table_name(topic: str) -> str:
    """The table of a topic: its name with every character outside [A-Za-z0-9_] replaced by `_`, lower case
    (Iceberg's Hadoop catalog is a directory tree; Spark SQL identifiers are case-insensitive)."""
    return re.sub(r"[^A-Za-z0-9_]", "_", topic).lower()


def table_identifier(catalog: str, namespace: str, topic: str) -> str:
    for what, part in (("catalog", catalog), ("namespace", namespace)):
        if not _IDENT.match(part):
            raise PipelineError(f"{what} {part!r}: expected an identifier ([A-Za-z_][A-Za-z0-9_]*)")
    return f"{catalog}.{namespace}.{table_name(topic)}"


# ---- the snapshot summary ----------------------------------------------------------------------------------


def encode_offsets(offsets: Mapping[int, int]) -> str:
    return json.dumps({str(p): int(o) for p, o in sorted(offsets.items())}, separators=(",", ":"))


def decode_offsets(text: str | None) -> dict[int, int]:
    """kop.kafka.offsets back to {partition: end}; {} when absent. PipelineError when it is not ours."""
    if not text:
        return {}
    try:
        doc = json.loads(text)
        return {int(p): int(o) for p, o in doc.items()}
    except (ValueError, AttributeError, TypeError) as e:
        raise PipelineError(f"snapshot summary {SUMMARY_OFFSETS}={text!r:.200} is not a partition -> offset map: {e}") from None


def merge_covered(covered: Mapping[int, int], batch: Mapping[int, tuple[int, int, int]]) -> dict[int, int]:
    """The covered ends after a batch: per partition the larger of the old end and the batch's last + 1."""
    out = dict(covered)
    for p, (_first, last, _count) in batch.items():
        out[p] = max(out.get(p, 0), last + 1)
    return out


def batch_summary(query_id: str, batch_id: int, topic: str, covered: Mapping[int, int],
                  batch: Mapping[int, tuple[int, int, int]]) -> dict[str, str]:
    """The snapshot properties of one batch's commit to one table."""
    return {
        SUMMARY_QUERY: query_id,
        SUMMARY_BATCH_ID: str(batch_id),
        SUMMARY_TOPIC: topic,
        SUMMARY_OFFSETS: encode_offsets(covered),
        SUMMARY_BATCH: json.dumps({str(p): list(v) for p, v in sorted(batch.items())}, separators=(",", ":")),
    }


def committed_batch(summary: Mapping[str, str], query_id: str) -> int | None:
    """The last batch of query `query_id` in this summary (the newest snapshot's); None when another query
    (or none) wrote it."""
    if summary.get(SUMMARY_QUERY) != query_id or SUMMARY_BATCH_ID not in summary:
        return None
    return int(summary[SUMMARY_BATCH_ID])
