"""Apache Pulsar standalone, run from the Maven Central jars that scripts/setup fetched.

The reference broker for the Pulsar-side tests (as tests/support/kafka_server.py is for the Kafka side):

    with PulsarServer(tmp_dir) as pulsar:
        pulsar.service_url  # "pulsar://127.0.0.1:<port>"
        pulsar.admin_url    # "http://127.0.0.1:<port>"

    java -cp '.cache/pulsar-libs-<version>/broker/*' org.apache.pulsar.PulsarStandaloneStarter --config standalone.conf
         --no-functions-worker --no-stream-storage --wipe-data --metadata-dir ... --bookkeeper-dir ...

The version is tools/java/pulsar/pom.xml's pulsar.version; scripts/setup names the jar folder by the same rule
(`pulsar_libs_dir`), so a version change fetches into a new folder and a cache of an older Pulsar is never taken for
the new one, nor pulled from under another checkout still using it. KOP_PULSAR_LIBS names another folder.

Metadata lives in RocksDB and one bookie runs inside the broker's JVM (PIP-117's standalone mode: no
ZooKeeper, the bookie takes an ephemeral port), everything under `base_dir`, with the process's working
directory there too - Pulsar picks the ZooKeeper mode when `data/standalone/zookeeper` exists relative to it.
Ready = the admin API lists the `public/default` namespace, which Pulsar creates a few seconds *after* it logs
"messaging service is ready". Logs (INFO, log4j2's default layout) go to <dir>/pulsar.log.
"""

from __future__ import annotations

import base64
import json
import os
import re
import subprocess
import urllib.request
import zipfile
from pathlib import Path

from .java import REPO_ROOT, JavaToolsMissing, java_executable
from .net import free_port, port_open, wait_until
from .proc import ServerProcess, die_with_parent

PULSAR_POM = REPO_ROOT / "tools" / "java" / "pulsar" / "pom.xml"


def pom_pulsar_version(pom: Path = PULSAR_POM) -> str:
    """A pom's <pulsar.version> property: the one place the suite's Apache Pulsar version is written."""
    m = re.search(r"<pulsar\.version>([^<]+)</pulsar\.version>", pom.read_text())
    if not m:
        raise JavaToolsMissing(f"no <pulsar.version> in {pom}")
    return m.group(1)


def pulsar_libs_dir() -> Path:
    """Where scripts/setup puts the Pulsar jars: KOP_PULSAR_LIBS, else .cache/pulsar-libs-<pom's pulsar.version>
    (scripts/setup applies the same rule), so two versions live side by side in a shared .cache."""
    override = os.environ.get("KOP_PULSAR_LIBS")
    return Path(override) if override else REPO_ROOT / ".cache" / f"pulsar-libs-{pom_pulsar_version()}"


PULSAR_LIBS = pulsar_libs_dir()
BROKER_LIBS = PULSAR_LIBS / "broker"
CLIENT_LIBS = PULSAR_LIBS / "client"

MAIN_CLASS = "org.apache.pulsar.PulsarStandaloneStarter"

SERVER_JVM_OPTS = [
    "-Xms256m", "-Xmx768m", "-XX:MaxDirectMemorySize=512m", "-XX:+UseG1GC", "-Djava.awt.headless=true",
    # without a log4j2 configuration file Pulsar prints only errors; INFO makes a failed start explainable
    "-Dorg.apache.logging.log4j.level=INFO",
    # Java 17 otherwise prints IllegalAccessException stack traces from the container-metrics probes
    "--add-opens", "java.base/jdk.internal.platform=ALL-UNNAMED",
    "--add-opens", "java.management/sun.management=ALL-UNNAMED",
    "--add-opens", "java.base/java.lang=ALL-UNNAMED",
]
# Tests only (bench/pulsar_clients.py's BenchPulsar sets quick_start False): the client JIT alone, which starts
# the standalone in about 5.6 s instead of 7.6 (a test's broker moves little data; C2 would not pay back).
QUICK_START_OPTS = ["-XX:TieredStopAtLevel=1"]

# Settings that make a one-node Pulsar usable and quick for tests; callers may override any of them.
DEFAULT_CONFIG: dict[str, str] = {
    "clusterName": "standalone",
    "bindAddress": "127.0.0.1",
    "advertisedAddress": "127.0.0.1",
    # the in-JVM bookie reads this file too (PulsarStandalone loads it as its ServerConfiguration); BookKeeper
    # 4.18 (Pulsar 5.0) refuses to listen on 127.0.0.1 without it, where 4.17's standalone bookie did not
    "allowLoopback": "true",
    "managedLedgerDefaultEnsembleSize": "1",
    "managedLedgerDefaultWriteQuorum": "1",
    "managedLedgerDefaultAckQuorum": "1",
    "functionsWorkerEnabled": "false",
    "brokerServicePortTls": "",
    "webServicePortTls": "",
    # as our broker stores entries: broker timestamp + index (PIP-415's getMessageIdByIndex needs the index)
    "brokerEntryMetadataInterceptors": (
        "org.apache.pulsar.common.intercept.AppendBrokerTimestampMetadataInterceptor,"
        "org.apache.pulsar.common.intercept.AppendIndexMetadataInterceptor"
    ),
    "exposingBrokerEntryMetadataToClientEnabled": "true",
    "allowAutoTopicCreation": "true",
    # tests use many short-lived topics; Pulsar would otherwise GC inactive ones under the tests' feet
    "brokerDeleteInactiveTopicsEnabled": "false",
}


class PulsarLibsMissing(JavaToolsMissing):
    """The Pulsar jars are not where scripts/setup puts them. Never a reason to skip: run `make test`."""


def check_pulsar_libs() -> Path:
    for sub, probe in ((BROKER_LIBS, "pulsar-broker-*.jar"), (CLIENT_LIBS, "pulsar-client-admin-*.jar")):
        if not (PULSAR_LIBS / ".complete").exists() or not any(sub.glob(probe)):
            raise PulsarLibsMissing(
                f"Apache Pulsar jars not found in {sub} - run scripts/setup (make test does it)"
            )
    return PULSAR_LIBS


BROKER_PROBE = ("pulsar-broker-[0-9]*.jar", "org/apache/pulsar/broker/PulsarService.class")
JVM_DIR = Path("/usr/lib/jvm")  # where Debian's and Temurin's JDKs install (temurin-25-jdk-amd64 on these machines)


def class_release(jar: Path, member: str) -> int:
    """The Java release a class in a jar was compiled for (its class-file major version - 44)."""
    with zipfile.ZipFile(jar) as z, z.open(member) as f:
        return int.from_bytes(f.read(8)[6:8], "big") - 44


def broker_java_release() -> int:
    """The Java release the reference broker needs: 17 for Pulsar 4.x, 21 for Pulsar 5.0 (its server-side classes
    are compiled for Java 21, where its clients stay on 17); read from the broker jar, so a version change
    needs no table here."""
    pattern, member = BROKER_PROBE
    jars = sorted(check_pulsar_libs().glob(f"broker/{pattern}"))
    if not jars:
        raise PulsarLibsMissing(f"no {pattern} in {BROKER_LIBS}")
    return class_release(jars[0], member)


def jdk_release(java: Path) -> int:
    """A JDK's feature release from the `release` file beside its bin/ (JAVA_VERSION="25.0.1"); 0 if unknown."""
    release = java.resolve().parents[1] / "release"
    m = re.search(r'^JAVA_VERSION="(\d+)', release.read_text(), re.M) if release.exists() else None
    return int(m.group(1)) if m else 0


def broker_java() -> str:
    """The `java` that runs the reference: the suite's own (JAVA_HOME, else PATH) when it is new enough, else the
    newest JDK in /usr/lib/jvm that is (Java 25 from Temurin beside the default 17 here). None: an error naming
    the release needed, never a skip - scripts/setup checks the same before any test runs."""
    need = broker_java_release()
    default = Path(java_executable())
    candidates = [default, *sorted(JVM_DIR.glob("*/bin/java"), key=jdk_release, reverse=True)]
    for java in candidates:
        if java.exists() and jdk_release(java) >= need:
            return str(java)
    raise JavaToolsMissing(f"Apache Pulsar {pulsar_version()} needs Java {need}+ to run its broker: none in "
                           f"JAVA_HOME, on PATH ({default}) or under {JVM_DIR}")


def pulsar_version() -> str:
    jars = sorted(check_pulsar_libs().glob("broker/pulsar-broker-[0-9]*.jar"))
    return jars[0].name.removeprefix("pulsar-broker-").removesuffix(".jar") if jars else "?"


class PulsarServer(ServerProcess):
    stop_timeout = 30
    quick_start = True  # QUICK_START_OPTS: tests' servers; the bench's server runs with both JITs

    def __init__(self, base_dir: Path, config: dict[str, str] | None = None) -> None:
        super().__init__()
        self.base_dir = Path(base_dir)
        self.base_dir.mkdir(parents=True, exist_ok=True)
        self.log_path = self.base_dir / "pulsar.log"
        self.config_path = self.base_dir / "standalone.conf"
        self.data_dir = self.base_dir / "data"
        self.port = free_port()
        self.web_port = free_port()
        self.extra = dict(config or {})
        self.version = pulsar_version()
        self._wipe = True  # the first start formats; restart() keeps the data

    @property
    def service_url(self) -> str:
        return f"pulsar://127.0.0.1:{self.port}"

    @property
    def admin_url(self) -> str:
        return f"http://127.0.0.1:{self.web_port}"

    # shape shared with the other e2e brokers (tests/e2e/conftest.py's BrokerHandle)
    @property
    def bootstrap(self) -> str:
        return self.service_url

    def config(self) -> dict[str, str]:
        cfg = dict(DEFAULT_CONFIG)
        cfg.update({"brokerServicePort": str(self.port), "webServicePort": str(self.web_port)})
        # {brokerServicePort}: the port picked for this server, for settings that name it (advertisedListeners)
        cfg.update({k: v.replace("{brokerServicePort}", str(self.port)) for k, v in self.extra.items()})
        return cfg

    def command(self) -> list[str]:
        return [
            broker_java(), *SERVER_JVM_OPTS, *(QUICK_START_OPTS if self.quick_start else []),
            "-cp", f"{BROKER_LIBS}/*", MAIN_CLASS,
            "--config", str(self.config_path),
            "--no-functions-worker", "--no-stream-storage",
            "--metadata-dir", str(self.data_dir / "metadata"),
            "--bookkeeper-dir", str(self.data_dir / "bookkeeper"),
            *(["--wipe-data"] if self._wipe else []),
        ]

    def start(self, timeout: float = 180) -> PulsarServer:
        assert not self.alive(), "already running"
        self.config_path.write_text("".join(f"{k}={v}\n" for k, v in sorted(self.config().items())))
        env = dict(os.environ)
        for var in ("PULSAR_STANDALONE_USE_ZOOKEEPER", "PULSAR_EXTRA_OPTS", "JAVA_TOOL_OPTIONS"):
            env.pop(var, None)
        self._spawn_in(self.command(), env)
        self._wipe = False
        try:
            wait_until(
                f"Apache Pulsar {self.version} on {self.service_url}",
                lambda: port_open("127.0.0.1", self.port) and self._default_namespace_ready(),
                timeout,
                self.proc,
                self.log_path,
                interval=0.25,
            )
        except Exception:
            self.kill()
            raise
        return self

    def _spawn_in(self, cmd: list[str], env: dict[str, str]) -> None:
        """ServerProcess._spawn with the data folder as working directory: PulsarStandalone resolves
        `data/standalone/zookeeper` against it (see the module docstring)."""
        self._log_file = open(self.log_path, "ab")  # noqa: SIM115 - lives as long as the process
        self.proc = subprocess.Popen(
            cmd,
            cwd=self.base_dir,
            stdin=subprocess.DEVNULL,
            stdout=self._log_file,
            stderr=subprocess.STDOUT,
            env=env,
            start_new_session=True,
            preexec_fn=die_with_parent,
        )

    def _admin_request(self, path: str) -> urllib.request.Request:
        """A GET on the admin REST API, as the broker's own client role when authentication is on (the
        token, or AuthenticationBasic's {"userId", "password"}, of `brokerClientAuthenticationParameters`, which
        the tests make a super user's)."""
        headers = {}
        params = self.extra.get("brokerClientAuthenticationParameters", "")
        if self.extra.get("authenticationEnabled") == "true" and params.startswith("token:"):
            headers["Authorization"] = "Bearer " + params.removeprefix("token:")
        elif self.extra.get("authenticationEnabled") == "true" and params.startswith("{"):
            user = json.loads(params)
            pair = f"{user['userId']}:{user['password']}".encode()
            headers["Authorization"] = "Basic " + base64.b64encode(pair).decode()
        return urllib.request.Request(f"{self.admin_url}{path}", headers=headers)

    def _default_namespace_ready(self) -> bool:
        try:
            with urllib.request.urlopen(self._admin_request("/admin/v2/namespaces/public"), timeout=2) as r:
                return "public/default" in json.loads(r.read())
        except Exception:
            return False

    def admin_get(self, path: str) -> object:
        """GET on the admin REST API, JSON-decoded."""
        with urllib.request.urlopen(self._admin_request(path), timeout=30) as r:
            return json.loads(r.read())
