"""Run the Apache Kafka 4.x tools from the jars that scripts/setup fetched into .cache/kafka-libs/.

    java -cp '.cache/kafka-libs/*' <main class> args...

Class names were checked with `unzip -l` against kafka_2.13 / kafka-tools 4.2.0 (see scripts/setup,
which refuses a jar folder that lacks any of them).
"""

from __future__ import annotations

import os
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[2]
KAFKA_LIBS = Path(os.environ.get("KOP_KAFKA_LIBS", REPO_ROOT / ".cache" / "kafka-libs"))
LOG4J2_CONFIG = REPO_ROOT / "tools" / "java" / "log4j2.properties"

# script name (as in the Kafka tarball's bin/) -> main class in Kafka 4.0-4.2
TOOLS: dict[str, str] = {
    "kafka-topics": "org.apache.kafka.tools.TopicCommand",
    # kafka.admin.ConfigCommand lives in core (kafka_2.13) up to 4.2; 4.3 moves it to org.apache.kafka.tools.
    "kafka-configs": "kafka.admin.ConfigCommand",
    "kafka-console-producer": "org.apache.kafka.tools.ConsoleProducer",
    "kafka-console-consumer": "org.apache.kafka.tools.consumer.ConsoleConsumer",
    "kafka-producer-perf-test": "org.apache.kafka.tools.ProducerPerformance",
    "kafka-consumer-perf-test": "org.apache.kafka.tools.ConsumerPerformance",
    "kafka-get-offsets": "org.apache.kafka.tools.GetOffsetShell",
    "kafka-consumer-groups": "org.apache.kafka.tools.consumer.group.ConsumerGroupCommand",
    "kafka-e2e-latency": "org.apache.kafka.tools.EndToEndLatency",
    "kafka-acls": "org.apache.kafka.tools.AclCommand",
    "kafka-storage": "kafka.tools.StorageTool",
    "kafka-server-start": "kafka.Kafka",
}

# Short-lived tools: a small heap and quick start-up (C1 only) - they are I/O bound against a local broker.
TOOL_JVM_OPTS = ["-Xmx256m", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1", "-Xshare:auto"]


class JavaToolsMissing(RuntimeError):
    """The Kafka jars are not where scripts/setup puts them. Never a reason to skip: run `make test`."""


@dataclass
class ToolResult:
    args: list[str]
    rc: int
    stdout: str
    stderr: str

    def check(self) -> ToolResult:
        if self.rc != 0:
            raise AssertionError(
                f"{' '.join(self.args[-20:])}\nexited {self.rc}\n--- stdout\n{self.stdout[-4000:]}"
                f"\n--- stderr\n{self.stderr[-4000:]}"
            )
        return self

    @property
    def lines(self) -> list[str]:
        return self.stdout.splitlines()


def java_executable() -> str:
    java_home = os.environ.get("JAVA_HOME")
    if java_home and (Path(java_home) / "bin" / "java").exists():
        return str(Path(java_home) / "bin" / "java")
    java = shutil.which("java")
    if not java:
        raise JavaToolsMissing("java is not on PATH (Java 17+ is needed for the Kafka 4.x tools)")
    return java


def check_kafka_libs() -> Path:
    stamp = KAFKA_LIBS / ".complete"
    if not stamp.exists() or not any(KAFKA_LIBS.glob("kafka-tools-*.jar")):
        raise JavaToolsMissing(
            f"Kafka 4.x jars not found in {KAFKA_LIBS} - run scripts/setup (make test does it)"
        )
    return KAFKA_LIBS


def kafka_version() -> str:
    jars = sorted(check_kafka_libs().glob("kafka-clients-*.jar"))
    return jars[0].name.removeprefix("kafka-clients-").removesuffix(".jar") if jars else "?"


def java_command(main_class: str, args: list[str] | tuple[str, ...] = (), jvm_opts: list[str] | None = None) -> list[str]:
    libs = check_kafka_libs()
    return [
        java_executable(),
        *(TOOL_JVM_OPTS if jvm_opts is None else jvm_opts),
        f"-Dlog4j2.configurationFile={LOG4J2_CONFIG}",
        "-cp",
        f"{libs}/*",
        main_class,
        *[str(a) for a in args],
    ]


class JavaTools:
    """`tools.run("kafka-topics", "--bootstrap-server", b, "--list")` -> ToolResult."""

    def __init__(self) -> None:
        check_kafka_libs()
        java_executable()
        self.version = kafka_version()

    def main_class(self, tool: str) -> str:
        return TOOLS.get(tool, tool)  # a tool name from TOOLS, or a fully qualified class name

    def run(
        self,
        tool: str,
        *args: object,
        input: str | None = None,
        timeout: float = 120,
        jvm_opts: list[str] | None = None,
        check: bool = False,
    ) -> ToolResult:
        cmd = java_command(self.main_class(tool), [str(a) for a in args], jvm_opts)
        try:
            proc = subprocess.run(
                cmd,
                input=input,
                stdin=None if input is not None else subprocess.DEVNULL,
                capture_output=True,
                text=True,
                timeout=timeout,
            )
        except subprocess.TimeoutExpired as e:
            out = e.stdout.decode() if isinstance(e.stdout, bytes) else (e.stdout or "")
            err = e.stderr.decode() if isinstance(e.stderr, bytes) else (e.stderr or "")
            raise AssertionError(
                f"{tool} {' '.join(map(str, args))} did not finish within {timeout}s\n--- stdout\n{out[-4000:]}"
                f"\n--- stderr\n{err[-4000:]}"
            ) from None
        result = ToolResult(cmd, proc.returncode, proc.stdout, proc.stderr)
        return result.check() if check else result
