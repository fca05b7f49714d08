"""kop.pipeline.session.connector_jars: the five jars pyspark lacks (the Kafka connector's four and spark-avro),
matched to the installed pyspark.

A missing folder or jar, two versions of one jar, or a connector or spark-avro built for another Spark version
must stop
a job before the JVM starts, with a message that says what to run - not fail later inside a task with a
ClassNotFoundException or NoSuchMethodError. Real files in a temporary folder; the repository's own folder
(filled by scripts/setup) must pass.
"""

from __future__ import annotations

from pathlib import Path

import pyspark
import pytest

from kop.pipeline.session import CONNECTOR_ARTIFACTS, SparkSetupError, connector_jars, default_jars_dir

V = pyspark.__version__


def make(folder: Path, names: list[str]) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    for n in names:
        (folder / n).write_bytes(b"PK")
    return folder


def good_names(spark_version: str = V) -> list[str]:
    return [f"spark-sql-kafka-0-10_2.13-{spark_version}.jar", f"spark-token-provider-kafka-0-10_2.13-{spark_version}.jar",
            "kafka-clients-3.9.0.jar", "commons-pool2-2.12.0.jar", f"spark-avro_2.13-{spark_version}.jar"]


def test_the_five_jars_are_found_in_order(tmp_path: Path) -> None:
    folder = make(tmp_path / "jars", [*good_names(), "unrelated-1.0.jar"])
    jars = connector_jars(folder)
    assert [Path(j).name for j in jars] == good_names()
    assert all(Path(j).is_absolute() for j in jars)


def test_a_missing_jar_names_itself_and_the_fix(tmp_path: Path) -> None:
    folder = make(tmp_path / "jars", good_names()[:3])
    with pytest.raises(SparkSetupError, match="lacks commons-pool2, spark-avro_2.13; run scripts/setup"):
        connector_jars(folder)
    # A cache filled before spark-avro joined the set-up: refused for JSON jobs too (a process' classpath is
    # fixed by its first session), with the fix named.
    old = make(tmp_path / "old", good_names()[:4])
    with pytest.raises(SparkSetupError, match="lacks spark-avro_2.13; run scripts/setup"):
        connector_jars(old)
    with pytest.raises(SparkSetupError, match="does not exist"):
        connector_jars(tmp_path / "nowhere")


def test_two_versions_of_a_jar_are_refused(tmp_path: Path) -> None:
    folder = make(tmp_path / "jars", [*good_names(), "kafka-clients-3.4.1.jar"])
    with pytest.raises(SparkSetupError, match="several kafka-clients jars"):
        connector_jars(folder)


def test_a_connector_for_another_spark_is_refused(tmp_path: Path) -> None:
    folder = make(tmp_path / "jars", good_names("3.5.1"))
    with pytest.raises(SparkSetupError, match=f"does not match the installed pyspark {V}"):
        connector_jars(folder)


def test_a_spark_avro_for_another_spark_is_refused(tmp_path: Path) -> None:
    folder = make(tmp_path / "jars", [*good_names()[:4], "spark-avro_2.13-3.5.1.jar"])
    with pytest.raises(SparkSetupError, match=f"spark-avro_2.13-3.5.1.jar does not match the installed pyspark {V}"):
        connector_jars(folder)


def test_env_var_points_elsewhere(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("KOP_SPARK_JARS", str(tmp_path))
    assert default_jars_dir() == tmp_path


def test_the_cache_filled_by_setup_is_complete() -> None:
    jars = connector_jars()  # KOP_SPARK_JARS or .cache/spark-jars, where scripts/setup puts them
    assert len(jars) == len(CONNECTOR_ARTIFACTS) == 5
    assert any(Path(j).name == f"spark-avro_2.13-{V}.jar" for j in jars)


def test_setup_fetches_what_the_session_requires() -> None:
    """scripts/setup's artifact list and the pom's dependencies cover CONNECTOR_ARTIFACTS: a jar the session
    requires but the set-up does not fetch would only show on a fresh machine."""
    root = Path(__file__).resolve().parents[1]
    setup = (root / "scripts" / "setup").read_text()
    (line,) = [ln for ln in setup.splitlines() if ln.startswith("SPARK_ARTIFACTS=")]
    assert set(line.split("=", 1)[1].split(",")) == set(CONNECTOR_ARTIFACTS)
    pom = (root / "tools" / "java" / "spark-kafka" / "pom.xml").read_text()
    assert "<artifactId>spark-avro_${scala.binary.version}</artifactId>" in pom


def test_the_iceberg_runtime_is_found_and_matched_to_pyspark(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from kop.pipeline.session import iceberg_jar

    line = ".".join(V.split(".")[:2])
    assert Path(iceberg_jar()).name.startswith(f"iceberg-spark-runtime-{line}_2.13-")  # scripts/setup's fetch
    monkeypatch.setenv("KOP_SPARK_ICEBERG_JARS", str(make(tmp_path / "other", ["iceberg-spark-runtime-3.5_2.13-1.10.1.jar"])))
    with pytest.raises(SparkSetupError, match=f"built for Spark 3.5, the installed pyspark is {V}"):
        iceberg_jar()
    monkeypatch.setenv("KOP_SPARK_ICEBERG_JARS", str(tmp_path / "nowhere"))
    with pytest.raises(SparkSetupError, match="found none; run scripts/setup"):
        iceberg_jar()
