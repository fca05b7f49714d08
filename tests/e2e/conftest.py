"""The broker under test for the end-to-end suite.

Every e2e test takes the `target` fixture and is parametrized over the targets named by the environment
variable KOP_E2E_TARGET (comma separated):

* `kop`   (default) - our broker, a fresh subprocess per test (tests/support/broker.py);
* `kafka` (opt-in)  - Apache Kafka 4.x single-node KRaft from the cached jars. Running the suite against it
                      proves the tests themselves right: `KOP_E2E_TARGET=kafka make test` or
                      `KOP_E2E_TARGET=kop,kafka python -m pytest tests/e2e`.

`target.broker(**kop_overrides)` gives a running broker (for Apache Kafka: the shared session broker, so
tests use unique topic names); `target.dedicated_broker(...)` gives one the test may SIGKILL and restart.
Broker config that only one side understands is passed separately: KoP keys as keyword arguments
(ignored for Apache Kafka), Apache Kafka broker properties as `kafka_properties` (ignored for ours).
"""

from __future__ import annotations

import os
import re
import uuid
from typing import Protocol

import pytest

from tests.support.broker import KopBroker
from tests.support.kafka_server import KafkaServer

TARGETS = [t.strip() for t in os.environ.get("KOP_E2E_TARGET", "kop").split(",") if t.strip()]
for _t in TARGETS:
    if _t not in ("kop", "kafka"):
        raise pytest.UsageError(f"KOP_E2E_TARGET: unknown target {_t!r} (use kop, kafka or kop,kafka)")

# KoP settings every e2e broker gets (tests add their own on top).
KOP_DEFAULTS: dict[str, object] = {
    "allowAutoTopicCreation": "true",
    "defaultNumPartitions": 1,
}


class BrokerHandle(Protocol):
    bootstrap: str

    def kill(self) -> None: ...
    def restart(self, timeout: float = ...) -> BrokerHandle: ...
    def stop(self) -> object: ...
    def alive(self) -> bool: ...
    def log_tail(self, n: int = ...) -> str: ...


class Target:
    def __init__(self, kind: str, request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> None:
        self.kind = kind
        self._request = request
        self._tmp = tmp_path_factory
        self._owned: list[KopBroker | KafkaServer] = []

    @property
    def is_kop(self) -> bool:
        return self.kind == "kop"

    def broker(self, kafka_properties: dict[str, str] | None = None, **kop_overrides: object) -> BrokerHandle:
        if self.kind == "kafka" and not kafka_properties:
            return self._request.getfixturevalue("kafka_server")
        return self.dedicated_broker(kafka_properties, **kop_overrides)

    def dedicated_broker(self, kafka_properties: dict[str, str] | None = None, **kop_overrides: object) -> BrokerHandle:
        if self.kind == "kafka":
            self._request.getfixturevalue("java_tools")  # fails loudly when the jars are missing
            server = KafkaServer(self._tmp.mktemp("apache-kafka"), kafka_properties)
            self._owned.append(server)
            return server.start()
        broker = KopBroker(self._tmp.mktemp("kop"), {**KOP_DEFAULTS, **kop_overrides})
        self._owned.append(broker)
        return broker.start()

    def topic(self, hint: str = "t") -> str:
        """A topic name unique to this test run (the Apache Kafka broker is shared)."""
        # only letters, digits and "-": "." and "_" together make kafka-topics warn about metric-name collisions
        name = re.sub(r"[^A-Za-z0-9-]+", "-", self._request.node.name)[:80].strip("-")
        return f"{hint}-{name}-{uuid.uuid4().hex[:8]}"

    def close(self) -> None:
        for b in self._owned:
            b.stop()


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if "target" in metafunc.fixturenames:
        metafunc.parametrize("target", TARGETS, indirect=True)


@pytest.fixture
def target(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory):
    t = Target(request.param, request, tmp_path_factory)
    yield t
    t.close()


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo):
    """On failure, append the tail of every broker log the test started (what the broker said matters)."""
    report = yield
    if report.when == "call" and report.failed:
        t = item.funcargs.get("target") if hasattr(item, "funcargs") else None
        if isinstance(t, Target):
            for b in t._owned:
                report.sections.append((f"broker log {b!r}", b.log_tail(60)))
    return report
