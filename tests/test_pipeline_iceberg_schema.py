"""kop.pipeline.iceberg_schema: the pure parts of `kop pipeline tables` (issue 26).

* An Avro value schema becomes the table's columns with the Spark SQL types spark-avro's from_avro gives its
  fields (the e2e test tests/e2e/test_spark_tables.py writes decoded records into tables created from these
  types, so a wrong mapping fails there too); names that would shadow the Kafka columns or Iceberg's metadata
  columns are refused.
* The snapshot summary round-trips (offsets covered per partition, the batch's ranges) and says which batch of
  which query the newest snapshot holds - what makes a re-run batch a no-op.
* Table modes: a compacted topic gets an upsert table under --mode auto, an existing table keeps its mode and an
  explicit other mode is refused; the MERGE of an upsert batch deletes on tombstones and never inserts one.
"""

from __future__ import annotations

import json

import pytest

from kop.pipeline import iceberg_schema as s
from kop.pipeline.kafka_meta import PipelineError

ORDER = json.dumps({
    "type": "record", "name": "Order", "namespace": "shop", "fields": [
        {"name": "customer", "type": "string"},
        {"name": "cents", "type": "long"},
        {"name": "note", "type": ["null", "string"], "default": None},
        {"name": "qty", "type": ["int", "long"]},
        {"name": "ratio", "type": ["float", "double"]},
        {"name": "either", "type": ["null", "int", "string"]},
        {"name": "status", "type": {"type": "enum", "name": "Status", "symbols": ["NEW", "PAID"]}},
        {"name": "prev", "type": ["null", "Status"]},
        {"name": "tags", "type": {"type": "array", "items": "string"}},
        {"name": "attrs", "type": {"type": "map", "values": "double"}},
        {"name": "addr", "type": {"type": "record", "name": "Addr", "fields": [
            {"name": "city", "type": "string"}, {"name": "zip", "type": ["null", "int"]}]}},
        {"name": "id", "type": {"type": "fixed", "name": "Id", "size": 16}},
        {"name": "price", "type": {"type": "bytes", "logicalType": "decimal", "precision": 10, "scale": 2}},
        {"name": "at", "type": {"type": "long", "logicalType": "timestamp-millis"}},
        {"name": "local_at", "type": {"type": "long", "logicalType": "local-timestamp-micros"}},
        {"name": "day", "type": {"type": "int", "logicalType": "date"}},
        {"name": "blob", "type": "bytes"},
        {"name": "ok", "type": "boolean"},
    ]})


def test_avro_fields_become_columns_typed_as_from_avro_decodes_them() -> None:
    assert s.value_columns(ORDER) == [
        ("customer", "STRING"), ("cents", "BIGINT"), ("note", "STRING"), ("qty", "BIGINT"), ("ratio", "DOUBLE"),
        ("either", "STRUCT<member0: INT, member1: STRING>"), ("status", "STRING"), ("prev", "STRING"),
        ("tags", "ARRAY<STRING>"), ("attrs", "MAP<STRING, DOUBLE>"),
        ("addr", "STRUCT<`city`: STRING, `zip`: INT>"), ("id", "BINARY"), ("price", "DECIMAL(10, 2)"),
        ("at", "TIMESTAMP"), ("local_at", "TIMESTAMP_NTZ"), ("day", "DATE"), ("blob", "BINARY"), ("ok", "BOOLEAN"),
    ]


def test_table_columns_put_kafka_first_and_raw_bytes_without_a_schema() -> None:
    kafka = ["kafka_partition", "kafka_offset", "kafka_timestamp", "kafka_timestamp_type", "kafka_key", "kafka_headers"]
    assert [c for c, _ in s.table_columns(None)] == [*kafka, "kafka_value"]
    typed = [c for c, _ in s.table_columns(ORDER)]
    assert typed[:6] == kafka and typed[-2:] == ["kafka_schema_id", "kafka_raw_value"] and typed[6] == "customer"


@pytest.mark.parametrize("name", ["kafka_offset", "_partition", "_file", "bad-name"])
def test_field_names_that_cannot_be_columns_are_refused(name: str) -> None:
    doc = json.dumps({"type": "record", "name": "R", "fields": [{"name": name, "type": "int"}]})
    with pytest.raises(PipelineError, match=repr(name)):
        s.value_columns(doc)


def test_a_value_schema_that_is_not_a_record_is_refused() -> None:
    with pytest.raises(PipelineError, match="not an Avro record"):
        s.value_columns('"string"')
    with pytest.raises(PipelineError, match="not defined before its use"):
        s.value_columns(json.dumps({"type": "record", "name": "R", "fields": [{"name": "x", "type": "Later"}]}))


def test_create_and_evolve_ddl() -> None:
    ddl = s.create_table_sql("kop.kafka.orders", s.table_columns(None), "day")
    assert ddl.startswith("CREATE TABLE IF NOT EXISTS kop.kafka.orders (\n  `kafka_partition` INT,")
    assert "PARTITIONED BY (days(kafka_timestamp))" in ddl and "'format-version' = '2'" in ddl
    assert "PARTITIONED BY" not in s.create_table_sql("t", s.table_columns(None), "none")
    with pytest.raises(PipelineError, match="--partition-by 'week'"):
        s.create_table_sql("t", [], "week")
    v2 = [("a", "INT"), ("b", "STRING"), ("c", "DOUBLE")]
    assert s.add_columns_sql("t", ["A", "b"], v2) == "ALTER TABLE t ADD COLUMNS (`c` DOUBLE)"
    assert s.add_columns_sql("t", ["a", "b", "c"], v2) is None


def test_table_names() -> None:
    assert s.table_identifier("kop", "kafka", "Orders.EU-1") == "kop.kafka.orders_eu_1"
    with pytest.raises(PipelineError, match="namespace 'a-b'"):
        s.table_identifier("kop", "a-b", "t")


def test_the_summary_round_trips_and_names_the_batch() -> None:
    covered = s.merge_covered({0: 10, 2: 7}, {0: (10, 19, 10), 1: (0, 4, 5)})
    assert covered == {0: 20, 1: 5, 2: 7}
    summary = s.batch_summary("q-1", 3, "orders", covered, {0: (10, 19, 10), 1: (0, 4, 5)})
    assert summary[s.SUMMARY_OFFSETS] == '{"0":20,"1":5,"2":7}'
    assert json.loads(summary[s.SUMMARY_BATCH]) == {"0": [10, 19, 10], "1": [0, 4, 5]}
    assert s.decode_offsets(summary[s.SUMMARY_OFFSETS]) == covered
    assert s.committed_batch(summary, "q-1") == 3
    assert s.committed_batch(summary, "q-2") is None  # another query's snapshot: not ours to skip on
    assert s.committed_batch({}, "q-1") is None and s.decode_offsets(None) == {}
    # a batch that re-reads an older range (never happens with one query) does not move the end back
    assert s.merge_covered(covered, {0: (3, 4, 2)}) == covered
    with pytest.raises(PipelineError, match="not a partition -> offset map"):
        s.decode_offsets("[1, 2]")


def test_table_mode_is_chosen_from_the_cleanup_policy_and_kept_by_an_existing_table() -> None:
    assert s.wanted_mode("auto", compacted=True) == "upsert"
    assert s.wanted_mode("auto", compacted=False) == "append"
    assert s.wanted_mode("append", compacted=True) == "append"
    assert s.wanted_mode("upsert", compacted=False) == "upsert"
    with pytest.raises(PipelineError, match="--mode 'merge'"):
        s.wanted_mode("merge", compacted=True)
    assert "'kop.table-mode' = 'upsert'" in s.create_table_sql("t", s.table_columns(None), "day", "upsert")
    assert "'kop.table-mode' = 'append'" in s.create_table_sql("t", s.table_columns(None), "day")
    assert s.choose_mode("auto", "upsert", "t") == "upsert"
    assert s.choose_mode("auto", None, "t") == "append"  # a table made before modes existed
    assert s.choose_mode("upsert", "upsert", "t") == "upsert"
    with pytest.raises(PipelineError, match="table kop.kafka.t is an append table .*, not upsert"):
        s.choose_mode("upsert", None, "kop.kafka.t")
    with pytest.raises(PipelineError, match="table t is an upsert table"):
        s.choose_mode("append", "upsert", "t")


def test_merge_deletes_on_a_tombstone_and_never_inserts_one() -> None:
    sql = s.merge_sql("kop.kafka.users", "src", ["kafka_partition", "kafka_key", "name"])
    assert sql.splitlines() == [
        "MERGE INTO kop.kafka.users t USING src s",
        "ON t.kafka_partition = s.kafka_partition AND t.kafka_key = s.kafka_key",
        "WHEN MATCHED AND s._kop_tombstone THEN DELETE",
        "WHEN MATCHED THEN UPDATE SET t.`kafka_partition` = s.`kafka_partition`, t.`kafka_key` = s.`kafka_key`, "
        "t.`name` = s.`name`",
        "WHEN NOT MATCHED AND NOT s._kop_tombstone THEN INSERT (`kafka_partition`, `kafka_key`, `name`) "
        "VALUES (s.`kafka_partition`, s.`kafka_key`, s.`name`)",
    ]
