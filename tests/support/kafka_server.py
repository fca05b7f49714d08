"""Apache Kafka 4.x, single-node KRaft (combined broker+controller), run from the cached Maven jars.

The reference broker for differential tests and the bench:

    with KafkaServer(tmp_dir) as kafka:
        kafka.bootstrap  # "127.0.0.1:<port>"

Start = `kafka.tools.StorageTool random-uuid`, `StorageTool format -t <id> -c server.properties`, then
`java -Xmx512m kafka.Kafka server.properties`; ready once a Metadata request through confluent-kafka lists
the broker. Logs go to <dir>/kafka.log (WARN and above, see tools/java/log4j2.properties).
"""

from __future__ import annotations

import os
from pathlib import Path

from .java import JavaTools, java_command
from .net import free_port, port_open, wait_until
from .proc import ServerProcess

# As bin/kafka-run-class.sh runs the broker (KAFKA_JVM_PERFORMANCE_OPTS), with a smaller heap for tests.
SERVER_JVM_OPTS = [
    "-Xms512m", "-Xmx512m", "-XX:+UseG1GC", "-XX:MaxGCPauseMillis=20", "-XX:InitiatingHeapOccupancyPercent=35",
    "-XX:+ExplicitGCInvokesConcurrent", "-Djava.awt.headless=true",
]
# Tests only (bench/ passes quick_start=False): the client JIT alone. A test's broker lives seconds to
# minutes and moves little data, so C2's compilations cost more start-up time than they pay back.
QUICK_START_OPTS = ["-XX:TieredStopAtLevel=1"]

# Settings that make a one-node cluster usable and quick for tests; callers may override any of them.
DEFAULT_PROPERTIES: dict[str, str] = {
    "process.roles": "broker,controller",
    "node.id": "1",
    "controller.listener.names": "CONTROLLER",
    "inter.broker.listener.name": "PLAINTEXT",
    "listener.security.protocol.map": "CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT",
    "num.partitions": "1",
    "auto.create.topics.enable": "true",
    "offsets.topic.replication.factor": "1",
    "offsets.topic.num.partitions": "5",
    "transaction.state.log.replication.factor": "1",
    "transaction.state.log.min.isr": "1",
    "transaction.state.log.num.partitions": "5",
    "share.coordinator.state.topic.replication.factor": "1",
    "share.coordinator.state.topic.min.isr": "1",
    "group.initial.rebalance.delay.ms": "0",
    # retention is applied by a background task: let tests see it quickly
    "log.retention.check.interval.ms": "500",
    "log.initial.task.delay.ms": "0",
    "log.segment.delete.delay.ms": "0",
    "file.delete.delay.ms": "0",
    "delete.topic.enable": "true",
}


class KafkaServer(ServerProcess):
    stop_timeout = 60

    def __init__(self, base_dir: Path, properties: dict[str, str] | None = None, heap: str = "512m",
                 quick_start: bool = True) -> None:
        super().__init__()
        self.base_dir = Path(base_dir)
        self.base_dir.mkdir(parents=True, exist_ok=True)
        self.log_dir = self.base_dir / "data"
        self.log_path = self.base_dir / "kafka.log"
        self.config_path = self.base_dir / "server.properties"
        self.port = free_port()
        self.controller_port = free_port()
        self.extra = dict(properties or {})
        self.jvm_opts = [o.replace("512m", heap) for o in SERVER_JVM_OPTS] + (QUICK_START_OPTS if quick_start else [])
        self._formatted = False

    # -- configuration --------------------------------------------------------------------------------
    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"

    def properties(self) -> dict[str, str]:
        props = dict(DEFAULT_PROPERTIES)
        props.update(
            {
                "controller.quorum.voters": f"1@127.0.0.1:{self.controller_port}",
                "listeners": f"PLAINTEXT://127.0.0.1:{self.port},CONTROLLER://127.0.0.1:{self.controller_port}",
                "advertised.listeners": f"PLAINTEXT://127.0.0.1:{self.port}",
                "log.dirs": str(self.log_dir),
            }
        )
        props.update(self.extra)
        return props

    def _write_config(self) -> None:
        self.config_path.write_text("".join(f"{k}={v}\n" for k, v in sorted(self.properties().items())))

    def _format(self) -> None:
        tools = JavaTools()
        cluster_id = tools.run("kafka-storage", "random-uuid", check=True).stdout.strip().splitlines()[-1]
        tools.run(
            "kafka-storage", "format", "-t", cluster_id, "-c", self.config_path, "--ignore-formatted", check=True
        )
        self._formatted = True

    # -- lifecycle ---------------------------------------------------------------------------------------
    def start(self, timeout: float = 120) -> KafkaServer:
        assert self.proc is None or self.proc.poll() is not None, "already running"
        self._write_config()
        if not self._formatted:
            self._format()
        env = dict(os.environ)
        env.pop("KAFKA_OPTS", None)
        self._spawn(java_command("kafka.Kafka", [str(self.config_path)], self.jvm_opts), env)
        wait_until(
            f"Apache Kafka on {self.bootstrap}",
            lambda: port_open("127.0.0.1", self.port) and self._metadata_ok(),
            timeout,
            self.proc,
            self.log_path,
            interval=0.25,
        )
        return self

    def _metadata_ok(self) -> bool:
        from confluent_kafka.admin import AdminClient

        try:
            md = AdminClient({"bootstrap.servers": self.bootstrap, "log_level": 0}).list_topics(timeout=2)
        except Exception:
            return False
        return len(md.brokers) >= 1 and md.controller_id is not None and md.controller_id >= 0
