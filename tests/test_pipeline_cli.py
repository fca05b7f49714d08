"""`kop pipeline ...` as a command: bad input is reported in one line with exit status 2, before any JVM
starts (an operator should not wait for Spark to learn that a topic name is misspelt). The jobs themselves
run against our broker in tests/e2e/test_spark_*.py.

`--value-format avro` (kop.pipeline.avro): the registry URL and the latest schemas are checked before Spark
starts too - the URL parsing (basic auth from the user info, never echoed) and the reader-schema checks are
pure functions, tested here directly. The registry's Bearer token (`--schema-registry-token` or
KOP_SCHEMA_REGISTRY_TOKEN) is tested against a broker of ours whose admin REST authenticates: with it, the job gets
past the schema step (and stops at the missing Spark jars, still before a JVM); without it, it stops there with
exit 2 and a message that says what is missing; the token is never printed."""

from __future__ import annotations

import base64
import json
import os
import subprocess
import sys
import urllib.request
from pathlib import Path

import pytest

from kop.pipeline.avro import RegisteredSchema, check_reader_schema, redact, split_registry_url
from kop.pipeline.kafka_meta import PipelineError


def kop(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    environ = {k: v for k, v in os.environ.items() if k != "KOP_SCHEMA_REGISTRY_TOKEN"} | (env or {})
    return subprocess.run([sys.executable, "-m", "kop.cli", "pipeline", *args], capture_output=True, text=True,
                          timeout=120, env=environ)


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


TOKEN_SECRET = b"0123456789abcdef0123456789abcdef"
AMOUNTS = json.dumps({"type": "record", "name": "E", "fields": [{"name": "key", "type": "string"},
                                                                {"name": "amount", "type": "long"}]})


def test_a_registry_behind_admin_authentication_takes_the_token(kop_broker, tmp_path: Path) -> None:
    import jwt

    (tmp_path / "token.key").write_bytes(TOKEN_SECRET)
    broker = kop_broker(**{
        "messagingProtocols": "kafka", "authenticationEnabled": "true",
        "authenticationProviders": "org.apache.pulsar.broker.authentication.AuthenticationProviderToken",
        "tokenSecretKey": f"file://{tmp_path / 'token.key'}", "superUserRoles": "admin",
        "authorizationEnabled": "true", "saslAllowedMechanisms": "PLAIN"})
    token = jwt.encode({"sub": "admin"}, TOKEN_SECRET, algorithm="HS256")
    register = urllib.request.Request(
        f"{broker.admin_url}/subjects/paid-value/versions", json.dumps({"schema": AMOUNTS}).encode(), method="POST",
        headers={"Content-Type": "application/json", "Authorization": f"Bearer {token}"})
    with urllib.request.urlopen(register, timeout=30) as resp:
        assert json.loads(resp.read()) == {"id": 1}
    avro = ("stream", "--bootstrap-server", broker.bootstrap, "--topic", "paid", "--output-topic", "o",
            "--parquet", str(tmp_path / "p"), "--checkpoint", str(tmp_path / "c"), "--value-format", "avro",
            "--schema-registry", broker.admin_url, "--jars-dir", str(tmp_path / "no-jars"))

    r = kop(*avro)
    assert r.returncode == 2, r.stderr
    assert "/subjects/paid-value/versions/latest answered 401" in r.stderr, r.stderr
    assert "--schema-registry-token" in r.stderr and "KOP_SCHEMA_REGISTRY_TOKEN" in r.stderr, r.stderr
    assert "Spark" not in r.stderr and "jdk.incubator" not in r.stderr  # no JVM was started

    # with the token (flag or environment) the schema is fetched and checked: the job goes on to Spark's jars
    for given in ({"args": ("--schema-registry-token", token)}, {"env": {"KOP_SCHEMA_REGISTRY_TOKEN": token}}):
        r = kop(*avro, *given.get("args", ()), env=given.get("env"))
        assert r.returncode == 2, r.stderr
        assert "reader schema = subject paid-value version 1 (id 1)" in r.stderr, r.stderr
        assert f"no Spark Kafka connector jars: {tmp_path / 'no-jars'} does not exist" in r.stderr, r.stderr
        assert token not in r.stderr + r.stdout

    forged = jwt.encode({"sub": "admin"}, b"another key of 32 bytes, not it!", algorithm="HS256")
    r = kop(*avro, env={"KOP_SCHEMA_REGISTRY_TOKEN": forged})
    assert r.returncode == 2 and "answered 401" in r.stderr and "the Bearer token was refused" in r.stderr, r.stderr
    assert forged not in r.stderr
    r = kop(*avro[:-4], "--schema-registry", broker.admin_url.replace("://", "://me:pw@"), "--jars-dir", "x",
            "--schema-registry-token", token)
    assert r.returncode == 2 and "not both" in r.stderr and token not in r.stderr, r.stderr


def test_the_token_needs_avro() -> None:
    r = kop(*STREAM, "--schema-registry-token", "t0k3n")
    assert r.returncode == 2 and "--schema-registry-token is only used with --value-format avro" in r.stderr
    assert "t0k3n" not in r.stderr


def test_tables_and_audit_table_usage_errors_exit_2_without_spark(kop_broker, tmp_path: Path) -> None:
    """`kop pipeline tables` and `audit --table` (issue 26) refuse bad input before a JVM starts."""
    r = kop("audit", "--bootstrap-server", "127.0.0.1:1", "--topic", "t", "--table")
    assert r.returncode == 2 and "--table needs --warehouse" in r.stderr, r.stderr
    r = kop("tables", "--bootstrap-server", "127.0.0.1:1", "--topic", "t", "--warehouse", str(tmp_path / "w"),
            "--checkpoint", str(tmp_path / "c"), "--namespace", "a-b")
    assert r.returncode == 2 and "namespace 'a-b': expected an identifier" in r.stderr, r.stderr
    r = kop("tables", "--bootstrap-server", "127.0.0.1:1", "--topic", "t", "--topic-pattern", "x.*",
            "--warehouse", str(tmp_path / "w"), "--checkpoint", str(tmp_path / "c"))
    assert r.returncode == 2 and "not allowed with argument" in r.stderr, r.stderr
    r = kop("tables", "--bootstrap-server", "127.0.0.1:1", "--topic", "t", "--warehouse", str(tmp_path / "w"),
            "--checkpoint", str(tmp_path / "c"), "--mode", "merge")
    assert r.returncode == 2 and "argument --mode: invalid choice: 'merge'" in r.stderr, r.stderr
    broker = kop_broker()
    r = kop("audit", "--bootstrap-server", broker.bootstrap, "--topic", "nope", "--table",
            "--warehouse", str(tmp_path / "w"))
    assert r.returncode == 2 and "topic 'nope' does not exist" in r.stderr, r.stderr
    assert "Spark" not in r.stderr and "jdk.incubator" not in r.stderr  # no JVM was started
