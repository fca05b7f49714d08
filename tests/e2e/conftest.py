"""The broker under test for the end-to-end suite.

Every e2e test takes the `target` fixture and is parametrized over targets:

* `kop`    - our broker on the embedded storage (local ledger files + sqlite), a fresh subprocess per test
             (tests/support/broker.py);
* `kop-bk` - our broker on BookKeeper + ZooKeeper: the shared ZooKeeper + 4 bookies of
             tests/support/bookkeeper.py, a fresh ZooKeeper chroot per broker, ensemble 3 / write quorum 3 /
             ack quorum 2 (issue 7). kill() + restart() keep the chroot: the data lives in ZooKeeper and on
             the bookies, not in the data directory;
* `kafka`  - Apache Kafka 4.x single-node KRaft from the cached jars. Running the suite against it proves the
             tests themselves right;
* `pulsar` - Apache Pulsar 4.0.x standalone from the cached jars (tests/support/pulsar_server.py), one per test
             session: the reference for the Pulsar-side modules, as `kafka` is for the Kafka side.

Kafka-side and Pulsar-side modules. A module that sets `PULSAR_SIDE_TARGETS` (a tuple of targets) is Pulsar-side:
it talks to the broker through `pulsar_broker` (a PulsarEndpoint: `service_url`, `admin_url`) and runs on exactly
those targets by default - `make test` runs test_pulsar_clients on ("pulsar",); adding "kop" (and "kop-bk") there
runs it on our broker too, started with `messagingProtocols=kafka,pulsar` on a free `brokerServicePort`, one
per module and target (shared by its tests like the reference; one per module, target and KoP keys for
`target.pulsar_broker(key=value)`, as the reference's `pulsar_config` ones; `target.pulsar_broker(dedicated=True)`
for one a test may kill). Every
other module is Kafka-side and never runs on `pulsar`. An explicit KOP_E2E_TARGET keeps, per module, the targets
its side can serve (Pulsar side: its PULSAR_SIDE_TARGETS); tests of a module left with none are deselected, not
skipped (KOP_E2E_TARGET=kafka runs no Pulsar-side test, KOP_E2E_TARGET=pulsar only Pulsar-side ones).

Which targets: the environment variable KOP_E2E_TARGET (comma separated) names them for every module. Unset
(the default, hence `make test`): `kop` for every module, plus `kop-bk` for the broker-core client suite
(BROKER_CORE_MODULES below: the modules of issue 2's acceptance tests), which runs unchanged on both storage
backends. Examples: `KOP_E2E_TARGET=kafka make test` (Apache Kafka only), `KOP_E2E_TARGET=kop python -m
pytest tests/e2e` (embedded storage only: a quick local run), `KOP_E2E_TARGET=kop,kafka`,
`KOP_E2E_TARGET=kop-bk` (every module on BookKeeper).

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

from tests.support.bookkeeper import KopBookKeeperBroker, shared_cluster
from tests.support.broker import KopBroker
from tests.support.kafka_server import KafkaServer
from tests.support.net import tail
from tests.support.pulsar_server import PulsarLibsMissing, PulsarServer

KNOWN_TARGETS = ("kop", "kop-bk", "kafka", "pulsar")
KAFKA_SIDE_TARGETS = ("kop", "kop-bk", "kafka")
_NO_TARGET = "no-target"  # the parameter of a module that no selected target serves: deselected at collection
_EXPLICIT = os.environ.get("KOP_E2E_TARGET")
TARGETS = [t.strip() for t in (_EXPLICIT or "kop").split(",") if t.strip()]
for _t in TARGETS:
    if _t not in KNOWN_TARGETS:
        raise pytest.UsageError(f"KOP_E2E_TARGET: unknown target {_t!r} (use a comma-separated list of "
                                f"{', '.join(KNOWN_TARGETS)})")

# The broker-core client suite (issue 2): by default it also runs on BookKeeper + ZooKeeper (issue 7's first
# "done when": these tests pass unchanged with ensemble 3, write quorum 3, ack quorum 2).
BROKER_CORE_MODULES = ("test_clients_roundtrip", "test_durability", "test_list_offsets", "test_java_tools")


def targets_for(module_name: str, pulsar_side: tuple[str, ...] | None = None) -> list[str]:
    """The targets a module runs on (see the module docstring); `pulsar_side` = its PULSAR_SIDE_TARGETS."""
    if pulsar_side is not None:
        unknown = [t for t in pulsar_side if t not in KNOWN_TARGETS or t == "kafka"]
        if unknown:
            raise pytest.UsageError(f"{module_name}: PULSAR_SIDE_TARGETS names {unknown} (use pulsar, kop, kop-bk)")
        return list(pulsar_side) if _EXPLICIT is None else [t for t in TARGETS if t in pulsar_side]
    if _EXPLICIT is None and module_name.rsplit(".", 1)[-1] in BROKER_CORE_MODULES:
        return [*TARGETS, "kop-bk"]
    return [t for t in TARGETS if t in KAFKA_SIDE_TARGETS]


# KoP settings every e2e broker gets (tests add their own on top).
KOP_DEFAULTS: dict[str, object] = {
    "allowAutoTopicCreation": "true",
    "defaultNumPartitions": 1,
    # as the `kafka` target's group.initial.rebalance.delay.ms (tests/support/kafka_server.py): a group's first
    # join is not held 3 s for members that may follow
    "groupInitialRebalanceDelayMs": 0,
}


class BrokerHandle(Protocol):
    bootstrap: str

    def kill(self) -> None: ...
    def restart(self, timeout: float = ...) -> BrokerHandle: ...
    def stop(self) -> object: ...
    def alive(self) -> bool: ...
    def log_tail(self, n: int = ...) -> str: ...


class PulsarEndpoint:
    """Where a Pulsar-side test finds the broker: the binary protocol and the admin REST API."""

    def __init__(self, service_url: str, admin_url: str, handle: KopBroker | PulsarServer) -> None:
        self.service_url = service_url  # pulsar://127.0.0.1:<port>
        self.admin_url = admin_url  # http://127.0.0.1:<port>
        self.handle = handle  # the broker process (kill/restart/log_tail)

    def __repr__(self) -> str:
        return f"PulsarEndpoint({self.service_url}, {self.admin_url})"


class Target:
    def __init__(self, kind: str, request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> None:
        self.kind = kind
        self._request = request
        self._tmp = tmp_path_factory
        self._owned: list[KopBroker | KafkaServer | PulsarServer] = []
        # the session's Apache Pulsar or the module's broker of ours, when this test used it
        self._shared: list[KopBroker | PulsarServer] = []

    @property
    def is_kop(self) -> bool:
        """Our broker, on either storage backend."""
        return self.kind in ("kop", "kop-bk")

    @property
    def is_bookkeeper(self) -> bool:
        return self.kind == "kop-bk"

    def broker(self, kafka_properties: dict[str, str] | None = None, **kop_overrides: object) -> BrokerHandle:
        if self.kind == "kafka" and not kafka_properties:
            return self._request.getfixturevalue("kafka_server")
        return self.dedicated_broker(kafka_properties, **kop_overrides)

    def pulsar_broker(self, pulsar_config: dict[str, str] | None = None, dedicated: bool = False,
                      **kop_overrides: object) -> PulsarEndpoint:
        """A running broker that speaks Pulsar. `pulsar`: the session's Apache Pulsar standalone (tests use
        unique topic names), with `pulsar_config` the module's one with those settings, or with `dedicated` one
        of the test's own. `kop`/`kop-bk`: a
        broker of ours with the Pulsar protocol on - the module's shared one (started on first use, as the
        reference is shared: a broker start is most of a short test's time; with KoP keys the module's one with
        those keys), or with `dedicated` one of the test's own (one it may kill); one that did not come up with a Pulsar listener fails the test. KoP
        keys are keyword arguments (ignored by Apache Pulsar), Pulsar's broker settings `pulsar_config`
        (ignored by ours)."""
        if self.kind == "pulsar":
            if dedicated:
                server: PulsarServer = _start_pulsar(self._tmp, pulsar_config)
                self._owned.append(server)
            elif not pulsar_config:
                server = self._request.getfixturevalue("pulsar_server")
                self._shared.append(server)
            else:  # the module's reference with these settings, shared by its tests as the default one is
                by_config: dict[tuple, PulsarServer] = self._request.getfixturevalue("configured_pulsars")
                key = tuple(sorted(pulsar_config.items()))
                if key not in by_config or not by_config[key].alive():
                    by_config[key] = _start_pulsar(self._tmp, pulsar_config)
                server = by_config[key]
                self._shared.append(server)
            return PulsarEndpoint(server.service_url, server.admin_url, server)
        if not self.is_kop:
            pytest.fail(f"target {self.kind!r} does not speak Pulsar", pytrace=False)
        protocols = str(kop_overrides.pop("messagingProtocols", "kafka,pulsar"))
        if not dedicated and protocols == "kafka,pulsar":
            # the module's broker with these KoP keys (none: the default one), as the reference is per settings
            broker = self._module_kop(messagingProtocols=protocols, **kop_overrides)
        else:
            broker = self.dedicated_broker(messagingProtocols=protocols, **kop_overrides)
        port = getattr(broker, "pulsar_port", None)
        if port is None:
            pytest.fail(f"{broker!r} was started without the pulsar protocol (messagingProtocols={protocols})",
                        pytrace=False)
        return PulsarEndpoint(broker.pulsar_service_url, broker.admin_url, broker)

    def module_broker(self, kafka_properties: dict[str, str] | None = None, **kop_overrides: object) -> BrokerHandle:
        """As `broker`, but for ours the module's broker with these KoP keys, shared by the module's tests that
        ask for the same keys (started on first use): for a Kafka-side module whose tests each use their own
        topics and never kill or reconfigure the broker, a broker start per test is time spent on nothing."""
        if not self.is_kop:
            return self.broker(kafka_properties, **kop_overrides)
        return self._module_kop(**kop_overrides)

    def _module_kop(self, **kop_overrides: object) -> KopBroker:
        shared: dict[tuple, KopBroker] = self._request.getfixturevalue("kop_pulsar_brokers")
        key = (self.kind, *sorted((k, str(v)) for k, v in kop_overrides.items()))
        broker = shared.get(key)
        if broker is None or not broker.alive():  # first use, or its start failed in an earlier test
            if broker is not None:
                _stop_kop(broker)
            broker = shared[key] = self._new_kop(**kop_overrides)
            self._shared.append(broker)  # before the start: a failed start's log goes into the report
            broker.start()
        else:
            self._shared.append(broker)
        return broker

    def dedicated_broker(self, kafka_properties: dict[str, str] | None = None, **kop_overrides: object) -> BrokerHandle:
        if self.kind == "pulsar":
            pytest.fail("the `pulsar` target serves only Pulsar-side tests (use target.pulsar_broker())",
                        pytrace=False)
        if self.kind == "kafka":
            self._request.getfixturevalue("java_tools")  # fails loudly when the jars are missing
            server = KafkaServer(self._tmp.mktemp("apache-kafka"), kafka_properties)
            self._owned.append(server)
            return server.start()
        broker = self._new_kop(**kop_overrides)
        self._owned.append(broker)  # before the start: a failed start's log goes into the report
        return broker.start()

    def _new_kop(self, **kop_overrides: object) -> KopBroker:
        """A broker of ours on this target's storage, not started (the caller decides who stops it)."""
        if self.kind == "kop-bk":
            cluster = shared_cluster()
            cluster.ensure_all_up()  # whatever an earlier test did to the bookies
            broker: KopBroker = KopBookKeeperBroker(self._tmp.mktemp("kop-bk"), cluster,
                                                    {**KOP_DEFAULTS, **kop_overrides})
        else:
            broker = KopBroker(self._tmp.mktemp("kop"), {**KOP_DEFAULTS, **kop_overrides})
        return broker

    def topic(self, hint: str = "t") -> str:
        """A topic name unique to this test run (the Apache Kafka broker is shared)."""
        # only letters, digits and "-": "." and "_" together make kafka-topics warn about metric-name collisions
        name = re.sub(r"[^A-Za-z0-9-]+", "-", self._request.node.name)[:80].strip("-")
        return f"{hint}-{name}-{uuid.uuid4().hex[:8]}"

    def close(self) -> None:
        for b in self._owned:
            if isinstance(b, KopBroker):
                _stop_kop(b)
            elif isinstance(b, PulsarServer):
                b.kill()  # its data goes with the test, and Pulsar's orderly shutdown takes 5 s
            else:
                b.stop()


def _stop_kop(broker: KopBroker) -> None:
    broker.stop()
    if isinstance(broker, KopBookKeeperBroker):
        broker.purge()  # its ledgers and chroot: the cluster is shared by the whole run


@pytest.fixture(scope="module")
def kop_pulsar_brokers():
    """Per target kind and KoP keys, the broker of ours that a module's tests share (Target.pulsar_broker,
    Target.module_broker)."""
    brokers: dict[tuple, KopBroker] = {}  # by (kind, KoP keys)
    yield brokers
    for b in brokers.values():
        _stop_kop(b)


@pytest.fixture(scope="module")
def configured_pulsars():
    """Per settings, the Apache Pulsar a module's tests share when they ask for non-default settings."""
    servers: dict[tuple, PulsarServer] = {}
    yield servers
    for server in servers.values():
        server.kill()  # its data goes with the module, and Pulsar's orderly shutdown takes 5 s


def _start_pulsar(tmp_path_factory: pytest.TempPathFactory, config: dict[str, str] | None = None) -> PulsarServer:
    try:
        server = PulsarServer(tmp_path_factory.mktemp("apache-pulsar"), config)
    except PulsarLibsMissing as e:
        pytest.fail(f"Apache Pulsar unavailable: {e}", pytrace=False)
    try:
        return server.start()
    except Exception as e:
        server.kill()
        pytest.fail(f"Apache Pulsar {server.version} did not start: {e}", pytrace=False)


@pytest.fixture(scope="session")
def pulsar_server(tmp_path_factory: pytest.TempPathFactory):
    """Apache Pulsar standalone shared by the session's `pulsar` target tests (started on first use)."""
    server = _start_pulsar(tmp_path_factory)
    yield server
    server.kill()  # its data goes with the session, and Pulsar's orderly shutdown takes 5 s


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if "target" in metafunc.fixturenames:
        targets = targets_for(metafunc.module.__name__, getattr(metafunc.module, "PULSAR_SIDE_TARGETS", None))
        metafunc.parametrize("target", targets or [_NO_TARGET], indirect=True)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Tests of a module that no selected target serves are deselected (visible in pytest's summary)."""
    gone = [i for i in items if getattr(i, "callspec", None) and i.callspec.params.get("target") == _NO_TARGET]
    if gone:
        config.hook.pytest_deselected(items=gone)
        items[:] = [i for i in items if i not in gone]


@pytest.fixture
def target(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory):
    t = Target(request.param, request, tmp_path_factory)
    yield t
    t.close()


@pytest.fixture
def pulsar_broker(target: Target) -> PulsarEndpoint:
    """The Pulsar-side tests' broker with default settings (target.pulsar_broker(...) for others)."""
    return target.pulsar_broker()


@pytest.fixture
def pulsar_service_url(pulsar_broker: PulsarEndpoint) -> str:
    return pulsar_broker.service_url


@pytest.fixture
def pulsar_client(pulsar_broker: PulsarEndpoint):
    """A pulsar-client Client of the target's Pulsar broker (a 60 s operation timeout: a bound under load, not a
    measured quantity), closed after the test."""
    import pulsar

    c = pulsar.Client(pulsar_broker.service_url, operation_timeout_seconds=60,
                      logger=pulsar.ConsoleLogger(pulsar.LoggerLevel.Warn))
    yield c
    c.close()


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo):
    """On failure, append the tail of every broker log the test started (what the broker said matters), and
    for `kop-bk` the bookies' logs too."""
    report = yield
    if report.when == "call" and report.failed:
        t = item.funcargs.get("target") if hasattr(item, "funcargs") else None
        if isinstance(t, Target):
            for b in [*t._owned, *t._shared]:
                report.sections.append((f"broker log {b!r}", b.log_tail(60)))
            if t.is_bookkeeper and (t._owned or t._shared):
                for bookie in shared_cluster().bookies:
                    report.sections.append((f"bookie log {bookie.bookie_id}", tail(bookie.log_path, 20)))
    return report


@pytest.fixture(scope="session")
def _spark_sessions():
    """The Spark modules' SparkSession, made on first use (`spark`), stopped at the end of the run."""
    held: list = []
    yield held
    for session in held:
        session.stop()


@pytest.fixture
def spark(_spark_sessions: list):
    """One SparkSession for every Spark module of the run (tests/e2e/test_spark_*.py, test_transactions_spark):
    a session's start (its SparkContext, in the JVM the process keeps) costs seconds, and the modules share
    nothing through it but the JVM, which they share anyway (its classpath is fixed by the first session). Made
    again when something stopped it (a module that builds its own session with getOrCreate while this one
    runs gets this one, and stops it)."""
    from tests.support.spark import spark_session

    if not _spark_sessions or _spark_sessions[-1].sparkContext._jsc is None:
        _spark_sessions.append(spark_session("kop-test-spark"))
    return _spark_sessions[-1]
