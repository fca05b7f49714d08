"""PySpark jobs over KoP topics, run with `kop pipeline ...` against a running broker (docs/spark.md).

* `stream` (kop.pipeline.stream): Structured Streaming from topics to a topic and to Parquet, per-key
  aggregates of JSON events, exactly-once checkable at both sinks;
* `audit` (kop.pipeline.audit): a batch read of a topic (or an offset range) reporting, per partition, the
  first/last offset, count, gaps (below log start / compaction / transaction markers / aborted transactions /
  missing) and duplicates.

Spark's Kafka source is the client that broke on KoP's old, sparse offsets: it reads N, then asks for N+1,
checks earliest/latest around every poll and fails a query on gaps it cannot explain. These jobs are how the
project proves continuous offsets across ledger rollovers, retention and restarts (tests/e2e/test_spark_*.py).

pyspark is an optional dependency (`pip install -e '.[spark]'`); nothing here imports it at module import
time, so the broker never needs it. The connector jars come from kop.pipeline.session.
"""
