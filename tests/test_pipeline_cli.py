"""`kop pipeline ...` as a command: bad input is reported in one line with exit status 2, before any JVM
starts (an operator should not wait for Spark to learn that a topic name is misspelt). The jobs themselves
run against our broker in tests/e2e/test_spark_*.py.

`--value-format avro` (kop.pipeline.avro): the registry URL and the latest schemas are checked before Spark
starts too - the URL parsing (basic auth from the user info, never echoed) and the reader-schema checks are
pure functions, tested here directly."""

from __future__ import annotations

import base64
import json
import subprocess
import sys

import pytest

from kop.pipeline.avro import RegisteredSchema, check_reader_schema, redact, split_registry_url
from kop.pipeline.kafka_meta import PipelineError


def kop(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "kop.cli", "pipeline", *args], capture_output=True, text=True,
                          timeout=120)


def test_unknown_topic_and_impossible_ranges_exit_2_without_spark(kop_broker) -> None:
    from tests.support.clients import create_topic

    broker = kop_broker(allowAutoTopicCreation="true")
    r = kop("audit", "--bootstrap-server", broker.bootstrap, "--topic", "nope")
    assert r.returncode == 2 and "kop pipeline: topic 'nope' does not exist" in r.stderr, r.stderr
    assert "Spark" not in r.stderr and "jdk.incubator" not in r.stderr  # no JVM was started

    create_topic(broker.bootstrap, "two", 2)
    r = kop("audit", "--bootstrap-server", broker.bootstrap, "--topic", "two", "--from-offsets", '{"5": 0}')
    assert r.returncode == 2 and "has partitions [0, 1], not [5]" in r.stderr, r.stderr
    r = kop("audit", "--bootstrap-server", broker.bootstrap, "--topic", "two", "--to-offsets", '{"0": 10}')
    assert r.returncode == 2 and "past the log end offset 0" in r.stderr, r.stderr
    assert "nope" not in broker.log_path.read_text(), "the audit's Metadata request auto-created the topic"


def test_bad_json_exits_2() -> None:
    r = kop("audit", "--bootstrap-server", "127.0.0.1:1", "--topic", "t", "--from-offsets", "{oops")
    assert r.returncode == 2 and "offsets JSON '{oops'" in r.stderr, r.stderr


def test_contradicting_isolation_levels_exit_2() -> None:
    r = kop("audit", "--bootstrap-server", "127.0.0.1:1", "--topic", "t", "--isolation-level", "read_committed",
            "--option", "kafka.isolation.level=read_uncommitted")
    assert r.returncode == 2 and "contradicts the option kafka.isolation.level=read_uncommitted" in r.stderr, r.stderr


def test_stream_requires_its_sinks() -> None:
    r = kop("stream", "--bootstrap-server", "127.0.0.1:1", "--topic", "t")
    assert r.returncode == 2 and "--output-topic" in r.stderr and "--checkpoint" in r.stderr, r.stderr


STREAM = ("stream", "--bootstrap-server", "127.0.0.1:1", "--topic", "t", "--output-topic", "o", "--parquet", "p",
          "--checkpoint", "c")


def test_avro_needs_a_registry_and_the_registry_needs_avro() -> None:
    r = kop(*STREAM, "--value-format", "avro")
    assert r.returncode == 2 and "--value-format avro needs --schema-registry URL" in r.stderr, r.stderr
    r = kop(*STREAM, "--schema-registry", "http://127.0.0.1:1")
    assert r.returncode == 2 and "--schema-registry is only used with --value-format avro" in r.stderr, r.stderr
    r = kop(*STREAM, "--value-format", "protobuf")
    assert r.returncode == 2 and "invalid choice: 'protobuf'" in r.stderr, r.stderr


def test_an_unreachable_registry_exits_2_before_spark_without_the_password() -> None:
    r = kop(*STREAM, "--value-format", "avro", "--schema-registry", "http://me:s3cret@127.0.0.1:1")
    assert r.returncode == 2, r.stderr
    assert "kop pipeline: schema registry at http://127.0.0.1:1 cannot be reached" in r.stderr, r.stderr
    assert "s3cret" not in r.stderr
    assert "Spark" not in r.stderr and "jdk.incubator" not in r.stderr  # no JVM was started
    r = kop(*STREAM, "--value-format", "avro", "--schema-registry", "ftp://me:s3cret@127.0.0.1:1")
    assert r.returncode == 2 and "expected http(s)://" in r.stderr and "s3cret" not in r.stderr, r.stderr


def test_registry_url_user_info_becomes_basic_auth() -> None:
    assert split_registry_url("http://127.0.0.1:8080/") == ("http://127.0.0.1:8080", None)
    assert split_registry_url("https://reg.example/api/") == ("https://reg.example/api", None)
    base, auth = split_registry_url("http://al%40ice:p%3Ass@127.0.0.1:8080")
    assert base == "http://127.0.0.1:8080"
    assert auth == "Basic " + base64.b64encode(b"al@ice:p:ss").decode()
    assert redact("http://alice:pw@h:1/x") == "http://alice:***@h:1/x"
    assert redact("http://h:1") == "http://h:1"
    with pytest.raises(PipelineError, match="expected http"):
        split_registry_url("127.0.0.1:8080")


def schema(fields: list[dict], schema_type: str = "AVRO", kind: str = "record") -> RegisteredSchema:
    return RegisteredSchema(7, json.dumps({"type": kind, "name": "E", "fields": fields}), schema_type, "t-value", 2)


KEY = {"name": "key", "type": "string"}


def test_reader_schema_checks() -> None:
    assert check_reader_schema(schema([KEY, {"name": "amount", "type": "long"}]), "key", "amount") is True
    assert check_reader_schema(schema([{"name": "amount", "type": ["null", "int"]}]), "key", "amount") is False
    assert check_reader_schema(schema([{"name": "user", "type": ["null", "long"]},
                                       {"name": "cents", "type": "int"}]), "user", "cents") is True
    refused = [
        (schema([KEY]), "has no field 'amount'"),
        (schema([KEY, {"name": "amount", "type": "double"}]), "not an int or long"),
        (schema([KEY, {"name": "amount", "type": ["null", "string"]}]), "not an int or long"),
        (schema([{"name": "key", "type": {"type": "array", "items": "string"}}, {"name": "amount", "type": "long"}]),
         "not a string or an integer"),
        (schema([KEY, {"name": "amount", "type": "long"}], schema_type="JSON"), "is JSON, not AVRO"),
        (RegisteredSchema(7, '"string"', "AVRO", "t-value"), "not an Avro record"),
        (RegisteredSchema(7, "{oops", "AVRO", "t-value"), "not JSON"),
        (schema([KEY, {"name": "amount", "type": {"type": "long", "logicalType": "timestamp-millis"}}]),
         "not an int or long"),
        (RegisteredSchema(7, schema([KEY, {"name": "amount", "type": "long"}]).schema, "AVRO", "t-value",
                          references=True), "has schema references"),
    ]
    for bad, why in refused:
        with pytest.raises(PipelineError, match=why):
            check_reader_schema(bad, "key", "amount")
