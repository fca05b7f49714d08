"""Consumer-group test harness: group members as separate processes, their event logs, committed offsets.

* `PythonMember` runs tests/support/group_member.py (kafka-python or confluent-kafka) and reads its JSON
  event log;
* `JavaMember` runs kafka-console-consumer --group from the Kafka 4.x jars and parses what it prints;
* `committed(bootstrap, group, topic, partitions)` asks the broker (OffsetFetch through confluent-kafka's
  AdminClient) for the group's committed offsets.

Waits are liveness deadlines (a test fails when nothing happens for STALL_TIMEOUT), never measurements.

Members run in their own session (a test's SIGKILL of one must not reach pytest) and die with pytest
(tests/support/proc.py `die_with_parent`): a killed or timed-out run leaks no consumers that would keep
rebalancing groups and eating CPU. Start them from the test's thread, as the tests do.
"""

from __future__ import annotations

import json
import re
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path

from tests.support.clients import STALL_TIMEOUT
from tests.support.java import REPO_ROOT, TOOL_JVM_OPTS, TOOLS, java_command
from tests.support.proc import die_with_parent

TOOL_OPTS = TOOL_JVM_OPTS  # the same options as the tools: the console consumer's class archive is shared


def wait_for(what: str, cond: Callable[[], object], timeout: float = STALL_TIMEOUT, interval: float = 0.1,
             on_timeout: Callable[[], str] | None = None) -> object:
    deadline = time.monotonic() + timeout
    while True:
        got = cond()
        if got:
            return got
        if time.monotonic() > deadline:
            detail = on_timeout() if on_timeout else ""
            raise AssertionError(f"timed out waiting for {what}\n{detail}")
        time.sleep(interval)


class Member:
    name: str
    proc: subprocess.Popen

    def consumed(self) -> list[tuple[int, int, str]]:
        raise NotImplementedError

    def alive(self) -> bool:
        return self.proc.poll() is None

    def kill(self) -> None:
        if self.alive():
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait(30)

    def stop(self, timeout: float = 60) -> None:
        """SIGTERM: a graceful close (commit, LeaveGroup), then wait."""
        if self.alive():
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(30)
                raise AssertionError(f"{self.name} did not stop within {timeout}s") from None


class PythonMember(Member):
    def __init__(self, name: str, client: str, bootstrap: str, topic: str, group: str, workdir: Path,
                 instance_id: str = "", session_timeout_ms: int = 6000, batch_delay_ms: int = 0,
                 max_records: int = 50, client_id: str = "", group_protocol: str = "classic") -> None:
        self.name = name
        self.log_path = workdir / f"{name}.jsonl"
        self.err_path = workdir / f"{name}.stderr"
        cmd = [sys.executable, "-m", "tests.support.group_member", "--client", client, "--bootstrap", bootstrap,
               "--topic", topic, "--group", group, "--log", str(self.log_path),
               "--session-timeout-ms", str(session_timeout_ms), "--batch-delay-ms", str(batch_delay_ms),
               "--max-records", str(max_records)]
        if instance_id:
            cmd += ["--instance-id", instance_id]
        if client_id:
            cmd += ["--client-id", client_id]
        if group_protocol != "classic":
            cmd += ["--group-protocol", group_protocol]
        self._err = open(self.err_path, "ab")  # noqa: SIM115 - lives as long as the process
        self.proc = subprocess.Popen(cmd, cwd=REPO_ROOT, stdin=subprocess.DEVNULL, stdout=self._err,
                                     stderr=subprocess.STDOUT, start_new_session=True, preexec_fn=die_with_parent)

    def events(self) -> list[dict]:
        if not self.log_path.exists():
            return []
        out = []
        for line in self.log_path.read_text().splitlines():
            if line.strip():
                out.append(json.loads(line))
        return out

    def consumed(self) -> list[tuple[int, int, str]]:
        return [(p, o, v) for e in self.events() if e["ev"] == "consumed" for p, o, v in e["recs"]]

    def consumed_at(self) -> list[tuple[int, int, float]]:
        """(partition, offset, monotonic time) of every consumption."""
        return [(p, o, e["t"]) for e in self.events() if e["ev"] == "consumed" for p, o, _ in e["recs"]]

    def assignments(self) -> list[list[int]]:
        return [e["parts"] for e in self.events() if e["ev"] == "assigned"]

    def current_assignment(self) -> list[int] | None:
        current = None
        for e in self.events():
            if e["ev"] == "assigned":
                current = e["parts"]
            elif e["ev"] == "revoked":
                current = None
        return current

    def acked_commits(self) -> dict[int, int]:
        """Highest acknowledged committed offset per partition."""
        out: dict[int, int] = {}
        for e in self.events():
            if e["ev"] == "commit" and e["ok"]:
                for p, o in e["offsets"].items():
                    out[int(p)] = max(out.get(int(p), 0), o)
        return out

    def failed_commit_ranges(self) -> list[tuple[int, int, int]]:
        """(partition, first offset, end offset) of batches whose commit failed."""
        out = []
        last: list[list] = []
        for e in self.events():
            if e["ev"] == "consumed":
                last = e["recs"]
            elif e["ev"] == "commit" and not e["ok"]:
                for p, o in e["offsets"].items():
                    first = min(r[1] for r in last if r[0] == int(p))
                    out.append((int(p), first, o))
        return out

    def describe(self) -> str:
        if self.alive():
            self.proc.send_signal(signal.SIGUSR1)  # the member dumps its threads' stacks (faulthandler)
            time.sleep(0.5)
        err = self.err_path.read_text()[-6000:] if self.err_path.exists() else ""
        tail = self.log_path.read_text().splitlines()[-15:] if self.log_path.exists() else []
        return f"--- {self.name} events (tail)\n" + "\n".join(t[:300] for t in tail) + f"\n--- {self.name} output\n{err}"

    def stop(self, timeout: float = 60) -> None:
        try:
            super().stop(timeout)
        finally:
            self._err.close()

    def kill(self) -> None:
        super().kill()
        self._err.close()


_JAVA_LINE = re.compile(r"^Partition:(\d+)\tOffset:(\d+)\t(.*)$")


class JavaMember(Member):
    """kafka-console-consumer --group: auto-commit after processing (it commits what it printed, and
    synchronously before giving partitions away in a rebalance and on close). What it prints is read through
    a pipe and stamped with the system-wide monotonic clock on arrival (the console consumer flushes every
    record), so its reads can be put in order with the Python members' reads."""

    def __init__(self, name: str, bootstrap: str, topic: str, group: str, workdir: Path,
                 properties: dict[str, str] | None = None) -> None:
        self.name = name
        self.out_path = workdir / f"{name}.out"
        self.err_path = workdir / f"{name}.err"
        props = {"session.timeout.ms": "6000", "heartbeat.interval.ms": "1000", "max.poll.interval.ms": "30000",
                 "auto.commit.interval.ms": "1000", "client.id": "member-java", **(properties or {})}
        if props.get("group.protocol") == "consumer":
            # KIP-848: the broker sets these; the Java consumer refuses them (ConfigException)
            props.pop("session.timeout.ms")
            props.pop("heartbeat.interval.ms")
        args = ["--bootstrap-server", bootstrap, "--topic", topic, "--group", group, "--from-beginning",
                "--formatter-property", "print.partition=true", "--formatter-property", "print.offset=true"]
        for k, v in props.items():
            args += ["--command-property", f"{k}={v}"]
        self._errf = open(self.err_path, "ab")  # noqa: SIM115
        self.proc = subprocess.Popen(java_command(TOOLS["kafka-console-consumer"], args, TOOL_OPTS),
                                     stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=self._errf,
                                     start_new_session=True, preexec_fn=die_with_parent)
        self._lines: list[tuple[float, str]] = []
        self._reader = threading.Thread(target=self._read, name=f"{name}-stdout", daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        with open(self.out_path, "a") as out:
            for raw in self.proc.stdout:
                t = time.monotonic()
                line = raw.decode(errors="replace").rstrip("\n")
                self._lines.append((t, line))
                out.write(f"{t:.6f}\t{line}\n")
                out.flush()

    def consumed(self) -> list[tuple[int, int, str]]:
        return [(p, o, v) for p, o, v, _ in self._records()]

    def consumed_at(self) -> list[tuple[int, int, float]]:
        return [(p, o, t) for p, o, _, t in self._records()]

    def _records(self) -> list[tuple[int, int, str, float]]:
        out = []
        for t, line in list(self._lines):
            m = _JAVA_LINE.match(line)
            if m:
                out.append((int(m[1]), int(m[2]), m[3], t))
        return out

    def describe(self) -> str:
        return f"--- {self.name} stderr\n{self.err_path.read_text(errors='replace')[-4000:]}"

    def _close(self) -> None:
        self._reader.join(30)
        self._errf.close()

    def stop(self, timeout: float = 60) -> None:
        try:
            super().stop(timeout)
        finally:
            self._close()

    def kill(self) -> None:
        super().kill()
        self._close()


_admins: dict[str, object] = {}
_admins_lock = threading.Lock()


def committed(bootstrap: str, group: str, topic: str, partitions: int) -> dict[int, int]:
    """The group's committed offsets (-1: none), through OffsetFetch (kafka-python's admin client).

    Not confluent-kafka's list_consumer_group_offsets: librdkafka 2.x crashes the interpreter (SIGSEGV in
    rd_kafka_cgrp_op, called from rd_kafka_handle_OffsetFetch) when an admin OffsetFetch is answered
    with a coordinator error, which any broker may answer right after a start or while busy."""
    from kafka import TopicPartition
    from kafka.admin import KafkaAdminClient
    from kafka.errors import KafkaError

    with _admins_lock:
        admin = _admins.get(bootstrap)
        if admin is None:
            admin = _admins[bootstrap] = KafkaAdminClient(bootstrap_servers=bootstrap, request_timeout_ms=30000)
    tps = [TopicPartition(topic, p) for p in range(partitions)]
    deadline = time.monotonic() + STALL_TIMEOUT
    while True:
        try:
            got = admin.list_group_offsets({group: tps})[group]  # type: ignore[attr-defined]
            return {p: (got[TopicPartition(topic, p)].offset if TopicPartition(topic, p) in got else -1)
                    for p in range(partitions)}
        except KafkaError as e:
            # Retriable (e.g. COORDINATOR_LOAD_IN_PROGRESS right after a broker start).
            if not getattr(e, "retriable", False) or time.monotonic() > deadline:
                raise
            time.sleep(0.2)


def produce(bootstrap: str, topic: str, values_by_partition: dict[int, list[str]]) -> None:
    from confluent_kafka import Producer

    p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5, "acks": "all"})
    errors: list[str] = []

    def cb(err, msg) -> None:
        if err is not None:
            errors.append(str(err))

    for part, values in values_by_partition.items():
        for v in values:
            p.produce(topic, value=v.encode(), partition=part, on_delivery=cb)
    assert p.flush(STALL_TIMEOUT) == 0, "messages not delivered"
    assert not errors, errors[:5]
