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
import signal
import subprocess
from pathlib import Path

from .java import JavaTools, java_command
from .net import free_port, port_open, read_vm_hwm_kib, tail, wait_until
from .proc import die_with_parent

# As bin/kafka-run-class.sh runs the broker (KAFKA_JVM_PERFORMANCE_OPTS), with a smaller heap for tests.
SERVER_JVM_OPTS = [
    "-Xms512m", "-Xmx512m", "-XX:+UseG1GC", "-XX:MaxGCPauseMillis=20", "-XX:InitiatingHeapOccupancyPercent=35",
    "-XX:+ExplicitGCInvokesConcurrent", "-Djava.awt.headless=true",
]

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


class KafkaServer:
    def __init__(self, base_dir: Path, properties: dict[str, str] | None = None, heap: str = "512m") -> None:
        self.base_dir = Path(base_dir)
        self.base_dir.mkdir(parents=True, exist_ok=True)
        self.log_dir = self.base_dir / "data"
        self.log_path = self.base_dir / "kafka.log"
        self.config_path = self.base_dir / "server.properties"
        self.port = free_port()
        self.controller_port = free_port()
        self.extra = dict(properties or {})
        self.jvm_opts = [o.replace("512m", heap) for o in SERVER_JVM_OPTS]
        self.proc: subprocess.Popen | None = None
        self._log_file = None
        self._formatted = False
        self.peak_rss_kib: int | None = None

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
        self._log_file = open(self.log_path, "ab")  # noqa: SIM115 - lives as long as the process
        env = dict(os.environ)
        env.pop("KAFKA_OPTS", None)
        self.proc = subprocess.Popen(
            java_command("kafka.Kafka", [str(self.config_path)], self.jvm_opts),
            stdin=subprocess.DEVNULL,
            stdout=self._log_file,
            stderr=subprocess.STDOUT,
            env=env,
            start_new_session=True,
            preexec_fn=die_with_parent,
        )
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

    @property
    def pid(self) -> int | None:
        return self.proc.pid if self.proc else None

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def _sample_rss(self) -> None:
        if self.alive():
            hwm = read_vm_hwm_kib(self.proc.pid)
            if hwm is not None:
                self.peak_rss_kib = max(self.peak_rss_kib or 0, hwm)

    def stop(self, timeout: float = 60) -> None:
        if not self.alive():
            self._close_log()
            return
        self._sample_rss()
        self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(30)
        self._close_log()

    def kill(self) -> None:
        """SIGKILL: no shutdown hooks, nothing flushed beyond what the OS already has."""
        if self.alive():
            self._sample_rss()
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait(30)
        self._close_log()

    def restart(self, timeout: float = 120) -> KafkaServer:
        """Start again on the same ports and log dirs (after stop() or kill())."""
        if self.alive():
            self.stop()
        return self.start(timeout)

    def _close_log(self) -> None:
        if self._log_file is not None:
            self._log_file.close()
            self._log_file = None

    def log_tail(self, n: int = 80) -> str:
        return tail(self.log_path, n)

    def __enter__(self) -> KafkaServer:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()

    def __repr__(self) -> str:
        return f"KafkaServer({self.bootstrap}, dir={self.base_dir})"
