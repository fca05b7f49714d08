"""A SparkSession that can read and write Kafka (on KoP or anywhere else), built without Ivy.

pyspark's wheel carries Spark but not its Kafka connector, nor spark-avro (`from_avro`, which
`kop pipeline stream --value-format avro` decodes with). The connector, the three jars it needs beside what
pyspark already bundles, and spark-avro (spark-sql-kafka-0-10, spark-token-provider-kafka-0-10,
kafka-clients, commons-pool2, spark-avro; its own dependencies, the avro jars, are in pyspark) are fetched
from Maven Central by the project's set-up (scripts/setup, through tools/java/spark-kafka/pom.xml) into
`.cache/spark-jars/`, and handed to Spark with `spark.jars`. spark-avro is always required, not only for
Avro jobs: a process' classpath is fixed by its first session, and a set-up that lacks it should fail at
once, not at the first Avro topic.
`spark.jars.packages` is never used: it resolves through Ivy at session start, which ignores Maven's
settings, needs the network every time the cache is cold, and makes a job's start depend on a repository.

Where the jars are looked for, first match wins:
  1. the `jars_dir` argument (`kop pipeline ... --jars-dir DIR`);
  2. the environment variable KOP_SPARK_JARS (a folder);
  3. `<repository>/.cache/spark-jars`, next to this package in a source checkout (`pip install -e .`).
A missing jar, or a connector or spark-avro built for another Spark version than the installed pyspark, is an
error that
says what to run - a silently different classpath would fail later with a far less readable
ClassNotFoundException or NoSuchMethodError inside a task.

Apache Iceberg's Spark runtime (`kop pipeline tables`) is one more jar, fetched by the set-up through
tools/java/spark-iceberg/pom.xml into `.cache/spark-iceberg/` (or the folder KOP_SPARK_ICEBERG_JARS names).
It is on every session's classpath, like spark-avro and for the same reason: a test
process' first session fixes the classpath of all the later ones. Its Spark line (the `4.0` of
iceberg-spark-runtime-4.0_2.13) must be the installed pyspark's.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

# The artifacts pyspark lacks. Everything else the connector and spark-avro depend on is inside pyspark already.
CONNECTOR_ARTIFACTS: tuple[str, ...] = (
    "spark-sql-kafka-0-10_2.13",
    "spark-token-provider-kafka-0-10_2.13",
    "kafka-clients",
    "commons-pool2",
    "spark-avro_2.13",
)
# The ones built by Spark itself, whose version must be the installed pyspark's.
SPARK_BUILT_ARTIFACTS: tuple[str, ...] = ("spark-sql-kafka-0-10_2.13", "spark-token-provider-kafka-0-10_2.13",
                                          "spark-avro_2.13")

ICEBERG_ARTIFACT_PREFIX = "iceberg-spark-runtime-"
ICEBERG_EXTENSIONS = "org.apache.iceberg.spark.extensions.IcebergSparkSessionExtensions"

_LOG4J2 = Path(__file__).with_name("log4j2.properties")


class SparkSetupError(RuntimeError):
    """The Spark side of the set-up is incomplete (no pyspark, missing or mismatched connector jars)."""


def default_jars_dir() -> Path:
    env = os.environ.get("KOP_SPARK_JARS")
    if env:
        return Path(env)
    return Path(__file__).resolve().parents[2] / ".cache" / "spark-jars"


def connector_jars(jars_dir: str | Path | None = None) -> list[str]:
    """Absolute paths of the connector jars and spark-avro, checked against the installed pyspark's version."""
    try:
        import pyspark
    except ImportError as e:
        raise SparkSetupError(
            "pyspark is not installed: pip install -e '.[spark]' (or run scripts/setup, which installs '.[test]')"
        ) from e
    folder = Path(jars_dir) if jars_dir is not None else default_jars_dir()
    hint = "run scripts/setup (make setup) to fetch them from Maven Central, or point KOP_SPARK_JARS at a folder"
    if not folder.is_dir():
        raise SparkSetupError(f"no Spark Kafka connector jars: {folder} does not exist; {hint}")
    found: dict[str, Path] = {}
    for artifact in CONNECTOR_ARTIFACTS:
        # artifact-<version>.jar, where the version starts with a digit (kafka-clients-3.9.0.jar)
        pattern = re.compile(re.escape(artifact) + r"-(\d[^/]*)\.jar$")
        matches = sorted(p for p in folder.glob("*.jar") if pattern.match(p.name))
        if len(matches) > 1:
            raise SparkSetupError(f"several {artifact} jars in {folder}: {[m.name for m in matches]}; {hint}")
        if matches:
            found[artifact] = matches[0].resolve()
    missing = [a for a in CONNECTOR_ARTIFACTS if a not in found]
    if missing:
        raise SparkSetupError(f"{folder} lacks {', '.join(missing)}; {hint}")
    for artifact in SPARK_BUILT_ARTIFACTS:
        jar = found[artifact].name
        version = jar[len(artifact) + 1:-len(".jar")]
        if version != pyspark.__version__:
            raise SparkSetupError(
                f"{jar} does not match the installed pyspark {pyspark.__version__}: the connector and spark-avro "
                f"must be built for the same Spark version (tools/java/spark-kafka/pom.xml and the pyspark pin in "
                f"pyproject.toml move together); {hint}"
            )
    return [str(found[a]) for a in CONNECTOR_ARTIFACTS]


def default_iceberg_dir() -> Path:
    env = os.environ.get("KOP_SPARK_ICEBERG_JARS")
    if env:
        return Path(env)
    return Path(__file__).resolve().parents[2] / ".cache" / "spark-iceberg"


def iceberg_jar(iceberg_dir: str | Path | None = None) -> str:
    """The absolute path of Iceberg's Spark runtime jar, checked against the installed pyspark's Spark line."""
    import pyspark

    folder = Path(iceberg_dir) if iceberg_dir is not None else default_iceberg_dir()
    hint = ("run scripts/setup (make setup) to fetch it from Maven Central (tools/java/spark-iceberg/pom.xml), or "
            "point KOP_SPARK_ICEBERG_JARS at a folder")
    pattern = re.compile(re.escape(ICEBERG_ARTIFACT_PREFIX) + r"(\d+\.\d+)_2\.13-(\d[^/]*)\.jar$")
    matches = sorted(p for p in folder.glob("*.jar") if pattern.match(p.name)) if folder.is_dir() else []
    if len(matches) != 1:
        found = [m.name for m in matches] if matches else "none"
        raise SparkSetupError(f"expected one Iceberg Spark runtime jar in {folder}, found {found}; {hint}")
    m = pattern.match(matches[0].name)
    assert m is not None
    spark_line = ".".join(pyspark.__version__.split(".")[:2])
    if m.group(1) != spark_line:
        raise SparkSetupError(f"{matches[0].name} is built for Spark {m.group(1)}, the installed pyspark is "
                              f"{pyspark.__version__}; {hint}")
    return str(matches[0].resolve())


def build_session(
    app_name: str = "kop-pipeline",
    master: str = "local[2]",
    jars_dir: str | Path | None = None,
    conf: Mapping[str, str] | None = None,
) -> SparkSession:
    """A SparkSession with the Kafka connector, spark-avro and Iceberg's runtime on its classpath, sized for one
    machine. Iceberg's SQL extensions (MERGE, DELETE, CALL) are on: its parser hands every other statement to
    Spark's.

    The defaults keep a local job lean: two cores, as many shuffle partitions as cores (Spark's default of
    200 turns a per-key aggregate over a few thousand keys into 200 tiny tasks per micro-batch), no web UI,
    no console progress bar, WARN-level logging from the first line (log4j2.properties next to this file),
    UTC session time zone so timestamps print the same everywhere. In local mode the driver binds to the
    loopback address: nothing needs to reach it from outside, and a host name that resolves oddly
    would otherwise cost a reverse lookup (and a warning) at every start. `conf` wins over all of these.

    The jars are fixed when the JVM starts, i.e. by the first session of the process; later sessions in the
    same process reuse that JVM (and its classpath).
    """
    from pyspark.sql import SparkSession

    jars = [*connector_jars(jars_dir), iceberg_jar()]
    builder = SparkSession.builder.appName(app_name).master(master)
    settings: dict[str, str] = {
        "spark.jars": ",".join(jars),
        "spark.ui.enabled": "false",
        "spark.ui.showConsoleProgress": "false",
        "spark.sql.shuffle.partitions": "2",
        "spark.default.parallelism": "2",
        "spark.sql.session.timeZone": "UTC",
        "spark.driver.extraJavaOptions": f"-Dlog4j2.configurationFile=file:{_LOG4J2}",
        "spark.sql.extensions": ICEBERG_EXTENSIONS,
    }
    if master.startswith("local"):
        os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")  # read by the JVM's start-up, before any setting
        settings["spark.driver.host"] = "127.0.0.1"
        settings["spark.driver.bindAddress"] = "127.0.0.1"
    settings.update(conf or {})
    for k, v in settings.items():
        builder = builder.config(k, v)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel(os.environ.get("KOP_SPARK_LOG_LEVEL", "WARN"))
    return spark
