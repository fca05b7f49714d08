"""Shared fixtures: real servers and real tools, never mocks.

* `java_tools`   - session: the Kafka 4.x CLI tools (tests/support/java.py). Missing jars = test error.
* `kafka_server` - session: Apache Kafka 4.x single-node KRaft, started only when a test asks for it.
* `kop_broker`   - function: factory that starts OUR broker as a subprocess with config overrides:
                   `b = kop_broker(managedLedgerMaxEntriesPerLedger=10)`; all are stopped at teardown.
* `broker`       - module: one default broker (Kafka and Pulsar ports) shared by a module's tests; a module
                   that needs other settings defines its own `broker`, which wins.
* `client`       - function: a `pulsar.Client` of that broker, closed after the test.

With KOP_FAIL_ON_SKIP=1 (set by `make test`, hence CI) a skipped test fails the run: a test requirement
that is absent must be visible, not silently skipped.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

# `tests.support` is imported as a package from the repository root, whatever pytest's rootdir logic does.
_ROOT = str(Path(__file__).resolve().parents[1])
if _ROOT not in sys.path:
    sys.path.insert(0, _ROOT)

from tests.support.broker import KopBroker  # noqa: E402
from tests.support.java import JavaTools, JavaToolsMissing  # noqa: E402
from tests.support.kafka_server import KafkaServer  # noqa: E402


@pytest.fixture
def cluster():  # noqa: ANN201 - tests.support.bookkeeper.BookKeeperCluster, imported lazily
    """The real ZooKeeper + 4 bookies of this test process (tests/support/bookkeeper.py, started on first
    use), with every bookie running and registered - whatever an earlier test did to them."""
    from tests.support.bookkeeper import shared_cluster

    c = shared_cluster()
    c.ensure_all_up()
    return c


@pytest.fixture(scope="session")
def java_tools() -> JavaTools:
    try:
        return JavaTools()
    except JavaToolsMissing as e:
        pytest.fail(f"Java Kafka tools unavailable: {e}", pytrace=False)


@pytest.fixture(scope="session")
def kafka_server(tmp_path_factory: pytest.TempPathFactory, java_tools: JavaTools) -> Iterator[KafkaServer]:
    server = KafkaServer(tmp_path_factory.mktemp("apache-kafka"))
    try:
        server.start()
    except Exception as e:
        server.kill()
        pytest.fail(f"Apache Kafka {java_tools.version} did not start: {e}", pytrace=False)
    yield server
    server.stop()


@pytest.fixture
def kop_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Callable[..., KopBroker]]:
    started: list[KopBroker] = []

    def start(_config_file: Path | None = None, _timeout: float = 60, **overrides: object) -> KopBroker:
        broker = KopBroker(tmp_path_factory.mktemp("kop"), overrides, config_file=_config_file)
        started.append(broker)
        return broker.start(_timeout)

    yield start
    for broker in started:
        broker.stop()


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[KopBroker]:
    b = KopBroker(tmp_path_factory.mktemp("kop-module"))
    b.start()
    yield b
    b.stop()


@pytest.fixture
def client(broker: KopBroker):  # noqa: ANN201 - a pulsar.Client; pulsar is imported only by tests that use it
    import pulsar

    cl = pulsar.Client(broker.pulsar_url, operation_timeout_seconds=30)
    yield cl
    cl.close()


def pytest_configure(config: pytest.Config) -> None:
    # kafka-python 3.0.12 loads its JSON schemas with a deprecated importlib.resources API (hundreds of lines)
    config.addinivalue_line("filterwarnings", "ignore:.*is deprecated. Use files\\(\\) instead:DeprecationWarning")


# ---- no silent skips ------------------------------------------------------------------------------------


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    if os.environ.get("KOP_FAIL_ON_SKIP") != "1":
        return
    reporter = session.config.pluginmanager.get_plugin("terminalreporter")
    skipped = reporter.stats.get("skipped", []) if reporter else []
    if skipped and session.exitstatus == 0:
        session.exitstatus = pytest.ExitCode.TESTS_FAILED


def pytest_terminal_summary(terminalreporter, exitstatus: int, config: pytest.Config) -> None:
    _module_durations(terminalreporter)
    if os.environ.get("KOP_FAIL_ON_SKIP") != "1":
        return
    skipped = terminalreporter.stats.get("skipped", [])
    if skipped:
        terminalreporter.write_sep("!", f"KOP_FAIL_ON_SKIP=1: {len(skipped)} skipped test(s) fail the run", red=True)
        for rep in skipped:
            terminalreporter.write_line(f"SKIPPED {rep.nodeid}: {rep.longrepr}")


def _module_durations(terminalreporter) -> None:
    """The 25 test files that took longest (setup, call and teardown summed): the suite's time budget is
    spent per module (a module's servers, its reference runs), which --durations' per-test list hides."""
    totals: dict[str, float] = {}
    for reports in terminalreporter.stats.values():
        for rep in reports:
            if isinstance(rep, pytest.TestReport):
                path = rep.nodeid.split("::", 1)[0]
                totals[path] = totals.get(path, 0.0) + rep.duration
    if len(totals) < 2:
        return
    terminalreporter.write_sep("=", "slowest 25 test files (setup + call + teardown)")
    for path, secs in sorted(totals.items(), key=lambda kv: -kv[1])[:25]:
        terminalreporter.write_line(f"{secs:8.1f}s {path}")
