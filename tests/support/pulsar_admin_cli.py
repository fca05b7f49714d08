"""`pulsar-admin`, Apache Pulsar's own admin CLI (pulsar-client-tools), from the jars scripts/setup fetched into
.cache/pulsar-admin-<version>/ (tools/java/pulsar-admin/pom.xml's pulsar.admin.version; KOP_PULSAR_ADMIN_LIBS names
another folder). 5.0.1 whatever the suite's Pulsar reference is: the only version Maven Central serves here, and a
client of the admin REST only (tests/e2e/test_pulsar_admin_cli.py passes against Apache Pulsar 4.0.7 and 4.2.4).

    cli = PulsarAdminCli(admin_url)                       # auth_plugin=/auth_params= for a broker with auth
    with cli.session() as admin:
        admin("tenants", "create", "t1", "-c", "standalone").check()
        r = admin("namespaces", "create", "nope/ns")      # -> CliResult(rc=1, stdout, stderr)

A session is one JVM (tools/java/pulsar-admin/src/PulsarAdminDriver.java) that runs every command line through
PulsarAdminTool's own entry, as `pulsar-admin <client.conf> words...` would, and answers each with the CLI's exit
code (0 or 1, as its main exits) and what it printed: a JVM start is 1-2 s of CPU here, so a module of a hundred
commands pays for one or two. The driver is compiled on first use (tests/support/java.py's compiled_probe, into
.cache/java-probes/) and runs with the Kafka tools' short-lived JVM options and class data sharing.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import subprocess
import tempfile
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import NoReturn

from .java import REPO_ROOT, JavaToolsMissing, adopt_archive, cds_options, compiled_probe, java_executable

ADMIN_POM = REPO_ROOT / "tools" / "java" / "pulsar-admin" / "pom.xml"
DRIVER = REPO_ROOT / "tools" / "java" / "pulsar-admin" / "src" / "PulsarAdminDriver.java"
MAIN_CLASS = "PulsarAdminDriver"
# Short-lived, I/O bound against a local broker: a small heap and quick start-up (C1 only), as the Kafka tools.
JVM_OPTS = ["-Xmx256m", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1", "-Xshare:auto"]
HEADER = re.compile(r"@@pulsar-admin (-?\d+) (\d+) (\d+)\n")


def pulsar_admin_version() -> str:
    """tools/java/pulsar-admin/pom.xml's <pulsar.admin.version> (scripts/setup names the folder by it too)."""
    m = re.search(r"<pulsar\.admin\.version>([^<]+)</pulsar\.admin\.version>", ADMIN_POM.read_text())
    if not m:
        raise JavaToolsMissing(f"no <pulsar.admin.version> in {ADMIN_POM}")
    return m.group(1)


def pulsar_admin_libs() -> Path:
    """The jar folder, checked: a missing or incomplete one is an error (never a skip), naming the set-up step."""
    override = os.environ.get("KOP_PULSAR_ADMIN_LIBS")
    libs = Path(override) if override else REPO_ROOT / ".cache" / f"pulsar-admin-{pulsar_admin_version()}"
    if not (libs / ".complete").exists() or not any(libs.glob("pulsar-client-tools-*.jar")):
        raise JavaToolsMissing(f"pulsar-admin jars not found in {libs} - run scripts/setup "
                               f"(`KOP_SETUP_ONLY=pulsar-admin scripts/setup`; make test does it)")
    return libs


@dataclass
class CliResult:
    args: tuple[str, ...]
    rc: int
    stdout: str
    stderr: str

    def check(self) -> CliResult:
        """The result, or an AssertionError with the command line and everything it printed."""
        if self.rc != 0:
            raise AssertionError(f"pulsar-admin {' '.join(self.args)} exited {self.rc}\n--- stdout\n"
                                 f"{self.stdout[-4000:]}\n--- stderr\n{self.stderr[-4000:]}")
        return self

    def json(self) -> object:
        """stdout as JSON (what `get`, `list -o json`, `stats` and the policy getters print), after check()."""
        return json.loads(self.check().stdout)

    @property
    def lines(self) -> list[str]:
        return [line for line in self.stdout.splitlines() if line.strip()]


class PulsarAdminCli:
    def __init__(self, admin_url: str, auth_plugin: str | None = None, auth_params: str | None = None) -> None:
        self.libs = pulsar_admin_libs()
        self.version = pulsar_admin_version()
        self.conf = {"webServiceUrl": admin_url}
        if auth_plugin:
            self.conf |= {"authPlugin": auth_plugin, "authParams": auth_params or ""}

    def session(self, timeout: float = 120) -> PulsarAdminSession:
        """One JVM for many commands; close it, or use `with`."""
        return PulsarAdminSession(self, timeout)

    def run(self, *args: object, timeout: float = 120) -> CliResult:
        """One command in a JVM of its own (prefer a session for more than one)."""
        with self.session(timeout) as s:
            return s(*args)


class PulsarAdminSession:
    """A running PulsarAdminDriver: `session(*words)` runs one pulsar-admin command line and returns its CliResult.
    A command that does not answer within `timeout` seconds (or a JVM that died) is an AssertionError carrying the
    JVM's own stderr (the admin client's log lines land there, not in a command's stderr)."""

    def __init__(self, cli: PulsarAdminCli, timeout: float) -> None:
        self.timeout = timeout
        fd, conf = tempfile.mkstemp(prefix="pulsar-admin-", suffix=".conf")
        with os.fdopen(fd, "w") as f:
            f.writelines(f"{k}={v}\n" for k, v in cli.conf.items())
        self._conf = Path(conf)
        classpath = f"{cli.libs}/*{os.pathsep}{compiled_probe(DRIVER, f'{cli.libs}/*')}"
        cds, self._pending = cds_options(classpath, MAIN_CLASS, JVM_OPTS, dump=True)
        self._log = tempfile.TemporaryFile()  # noqa: SIM115 - closed by close()
        self._log_text = ""
        self.proc = subprocess.Popen([java_executable(), *JVM_OPTS, *cds, "-cp", classpath, MAIN_CLASS, conf],
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self._log)

    def alive(self) -> bool:
        return self.proc.poll() is None and not self._log.closed

    def __call__(self, *args: object) -> CliResult:
        words = tuple(str(a) for a in args)
        assert not any("\t" in w or "\n" in w for w in words), words
        proc = self.proc
        assert proc.stdin is not None and proc.stdout is not None
        timer = threading.Timer(self.timeout, proc.kill)  # a hung command: the JVM goes, the failure says so
        timer.start()
        try:
            proc.stdin.write(("\t".join(words) + "\n").encode())
            proc.stdin.flush()
            header = HEADER.fullmatch(proc.stdout.readline().decode(errors="replace"))
            if header is None:
                self._fail(words, f"no answer within {self.timeout}s, or the JVM died (rc {proc.poll()})")
            rc, n_out, n_err = (int(g) for g in header.groups())
            out, err = proc.stdout.read(n_out), proc.stdout.read(n_err)
        except OSError as e:
            self._fail(words, f"the JVM is gone ({e})")
        finally:
            timer.cancel()
        return CliResult(words, rc, out.decode(errors="replace"), err.decode(errors="replace"))

    def _fail(self, words: tuple[str, ...], why: str) -> NoReturn:
        log = self.close()
        raise AssertionError(f"pulsar-admin {' '.join(words)}: {why}\n--- JVM stderr\n{log[-4000:]}")

    def close(self) -> str:
        """stdin closed: the driver exits (killed if it does not within a minute), its class archive adopted;
        what the JVM printed on its own stderr (the admin client's log lines)."""
        if self.proc.stdin and not self.proc.stdin.closed:
            with contextlib.suppress(OSError):
                self.proc.stdin.close()
        try:
            self.proc.wait(60)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        if not self._log.closed:
            self._log.seek(0)
            self._log_text = self._log.read().decode(errors="replace")
            self._log.close()
            adopt_archive(self._pending, self.proc.returncode == 0)
            self._pending = None
            self._conf.unlink(missing_ok=True)
        return self._log_text

    def __enter__(self) -> PulsarAdminSession:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
