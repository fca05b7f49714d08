"""Run the Apache Kafka 4.x tools from the jars that scripts/setup fetched into .cache/kafka-libs-<version>/.

    java -cp '.cache/kafka-libs-4.4.0/*' <main class> args...

The version is tools/java/kafka-libs/pom.xml's kafka.version (scripts/setup names the folder by it too, so a cache
of an older Kafka is never used for a newer one). KOP_KAFKA_LIBS names another folder. Class names were checked
with `unzip -l` against kafka_2.13 / kafka-tools 4.4.0 (see scripts/setup, which refuses a jar folder that lacks
any of them).
"""

from __future__ import annotations

import atexit
import contextlib
import hashlib
import itertools
import os
import re
import shutil
import subprocess
import tempfile
import threading
import zipfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[2]


def pom_kafka_version(pom: Path) -> str:
    """A pom's <kafka.version> property: the one place the suite's Apache Kafka version is written."""
    m = re.search(r"<kafka\.version>([^<]+)</kafka\.version>", pom.read_text())
    if not m:
        raise JavaToolsMissing(f"no <kafka.version> in {pom}")
    return m.group(1)


class JavaToolsMissing(RuntimeError):
    """The Kafka jars are not where scripts/setup puts them. Never a reason to skip: run `make test`."""


#: The suite's Apache Kafka (the `kafka` target, the CLI tools, the bench's Kafka).
KAFKA_VERSION = pom_kafka_version(REPO_ROOT / "tools" / "java" / "kafka-libs" / "pom.xml")
KAFKA_LIBS = Path(os.environ.get("KOP_KAFKA_LIBS", REPO_ROOT / ".cache" / f"kafka-libs-{KAFKA_VERSION}"))
LOG4J2_CONFIG = REPO_ROOT / "tools" / "java" / "log4j2.properties"

# script name (as in the Kafka tarball's bin/) -> main class in Kafka 4.4
TOOLS: dict[str, str] = {
    "kafka-topics": "org.apache.kafka.tools.TopicCommand",
    # kafka.admin.ConfigCommand (core, kafka_2.13) up to 4.2; 4.3 moved it to the tools jar.
    "kafka-configs": "org.apache.kafka.tools.ConfigCommand",
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


# ---- faster JVM starts -----------------------------------------------------------------------------------------
# The suite starts a JVM a few hundred times (the Kafka tools, the probes, Java clients), and on a 2-core machine
# most of a short tool's time is the JVM loading classes. Two remedies, both invisible to what the program does:
#
# * class data sharing (AppCDS, JDK 13+): the first run of a program writes the classes it loaded to an archive
#   (-XX:ArchiveClassesAtExit) and later runs map it (-XX:SharedArchiveFile): `kafka-topics --list` 1.2 s -> 0.6 s.
#   An archive is keyed by all the JVM checks (java binary, class path, options, main class), so a stale one is
#   never offered; a JVM that still cannot use one runs without it. Its notes about that are switched off
#   (-Xlog:cds*=off): they go to stdout, which tests parse. KOP_TEST_CDS=0 turns sharing off.
# * a probe given as a source file (`java Probe.java`) is compiled once into .cache/java-probes/ instead of by the
#   source launcher on every run (0.7 s each).
CDS_DIR = REPO_ROOT / ".cache" / "cds"
PROBES_DIR = REPO_ROOT / ".cache" / "java-probes"
_QUIET_CDS = "-Xlog:cds*=off"
_pending_ids = itertools.count()
# Writing an archive costs a run about 2 s more, and saves about 0.6 s on each later one: only a program run a
# few times in this process earns one.
_DUMP_ON_RUN = 3
_runs: dict[Path, int] = {}


def _cds_archive(classpath: str, main_class: str, jvm_opts: Sequence[str]) -> Path:
    h = hashlib.sha256()
    java = Path(java_executable()).resolve()
    parts = [str(java), str(java.stat().st_mtime_ns), main_class, *jvm_opts]
    for entry in classpath.split(os.pathsep):
        files = sorted(Path(entry[:-2]).glob("*.jar")) if entry.endswith("/*") else [Path(entry)]
        for f in files:
            st = f.stat()
            parts.append(f"{f}:{st.st_size}:{st.st_mtime_ns}")
    for part in parts:
        h.update(part.encode() + b"\0")
    return CDS_DIR / f"{main_class.rsplit('.', 1)[-1]}-{h.hexdigest()[:16]}.jsa"


def cds_options(classpath: str, main_class: str, jvm_opts: Sequence[str], dump: bool = False) -> tuple[list[str], Path | None]:
    """JVM options that map this program's class archive when there is one. Without one and with `dump` (on the
    program's third run), options that write it at exit to a pending path (returned): the caller hands that to
    adopt_archive() once the JVM has exited. Only callers that wait for the JVM dump; others just run without
    sharing until one has."""
    if os.environ.get("KOP_TEST_CDS", "1") == "0":
        return [], None
    archive = _cds_archive(classpath, main_class, jvm_opts)
    if archive.exists():
        return [f"-XX:SharedArchiveFile={archive}", _QUIET_CDS], None
    _runs[archive] = _runs.get(archive, 0) + 1
    if not dump or _runs[archive] < _DUMP_ON_RUN:
        return [], None
    CDS_DIR.mkdir(parents=True, exist_ok=True)
    pending = archive.with_name(f"{archive.stem}.{os.getpid()}-{next(_pending_ids)}.pending")
    return [f"-XX:ArchiveClassesAtExit={pending}", _QUIET_CDS], pending


def adopt_archive(pending: Path | None, ok: bool) -> None:
    """Move a finished run's archive into place (atomically: a concurrent JVM sees none or all of it)."""
    if pending is None:
        return
    if ok and pending.exists():
        os.replace(pending, pending.with_name(pending.name.split(".", 1)[0] + ".jsa"))
    else:
        pending.unlink(missing_ok=True)


def classes_jar(classes: Path) -> Path:
    """`<classes>.jar` holding the .class files under `classes`, made once: class data sharing takes classes from
    jars only (a JVM refuses an archive whose class path has a non-empty folder)."""
    jar = classes.with_suffix(".jar")
    if not jar.exists():
        fd, tmp = tempfile.mkstemp(prefix=f"{classes.name}-", suffix=".tmp", dir=classes.parent)
        os.close(fd)
        with zipfile.ZipFile(tmp, "w") as z:
            for f in sorted(classes.rglob("*.class")):
                z.write(f, f.relative_to(classes).as_posix())
        os.replace(tmp, jar)
    return jar


def compiled_probe(source: Path, classpath: str) -> Path:
    """The jar of a single-file Java program, compiling it on first use (into a temporary folder renamed into
    place, so a concurrent process never sees half a compilation)."""
    digest = hashlib.sha256(source.read_bytes() + classpath.encode()).hexdigest()[:16]
    out = PROBES_DIR / f"{source.stem}-{digest}"
    if (out / f"{source.stem}.class").exists():
        return classes_jar(out)
    PROBES_DIR.mkdir(parents=True, exist_ok=True)
    javac = Path(java_executable()).resolve().parent / "javac"
    tmp = Path(tempfile.mkdtemp(prefix=f"{source.stem}-", dir=PROBES_DIR))
    proc = subprocess.run([str(javac if javac.exists() else "javac"), "-nowarn", "-d", str(tmp), "-cp", classpath,
                           str(source)], capture_output=True, text=True, timeout=300)
    if proc.returncode != 0:
        shutil.rmtree(tmp, ignore_errors=True)
        raise AssertionError(f"javac {source} failed ({proc.returncode})\n{proc.stdout}\n{proc.stderr}")
    try:
        tmp.rename(out)
    except OSError:  # another process compiled the same source first
        shutil.rmtree(tmp, ignore_errors=True)
    return classes_jar(out)


def _java_command(main_class: str, args: Sequence[object], jvm_opts: list[str] | None,
                  dump: bool) -> tuple[list[str], Path | None]:
    libs = check_kafka_libs()
    classpath = f"{libs}/*"
    if main_class.endswith(".java"):  # a single-file program: run its compiled classes
        source = Path(main_class)
        classpath = f"{classpath}{os.pathsep}{compiled_probe(source, classpath)}"
        main_class = source.stem
    opts = TOOL_JVM_OPTS if jvm_opts is None else jvm_opts
    cds, pending = cds_options(classpath, main_class, opts, dump)
    cmd = [java_executable(), *opts, *cds, f"-Dlog4j2.configurationFile={LOG4J2_CONFIG}", "-cp", classpath,
           main_class, *[str(a) for a in args]]
    return cmd, pending


def java_command(main_class: str, args: Sequence[object] = (), jvm_opts: list[str] | None = None) -> list[str]:
    """`java ... main_class args` on the Kafka jars; `main_class` may be the path of a single-file program."""
    return _java_command(main_class, args, jvm_opts, dump=False)[0]


def run_java(main_class: str, args: Sequence[object] = (), jvm_opts: list[str] | None = None,
             **run_kwargs: object) -> subprocess.CompletedProcess:
    """subprocess.run(java_command(...), **run_kwargs), writing the program's class archive on its first
    successful run."""
    cmd, pending = _java_command(main_class, args, jvm_opts, dump=True)
    ok = False
    try:
        proc = subprocess.run(cmd, **run_kwargs)  # type: ignore[call-overload]
        ok = proc.returncode == 0
        return proc
    finally:
        adopt_archive(pending, ok)


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
        main_class = self.main_class(tool)
        if input is None and jvm_opts is None and _shared_session_fits(main_class):
            return _shared_session(self).run(main_class, *args, timeout=timeout, check=check)
        try:
            proc = run_java(
                main_class, [str(a) for a in args], jvm_opts,
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
        result = ToolResult(list(proc.args), proc.returncode, proc.stdout, proc.stderr)
        return result.check() if check else result

    def session(self) -> ToolSession:
        """Many commands, one JVM: `with tools.session() as s: s.run("kafka-consumer-groups", ...)`."""
        return ToolSession(self)


TOOL_RUNNER = Path(__file__).with_name("ToolRunner.java")
_SHARED: dict[str, ToolSession] = {}
_SHARED_LOCK = threading.Lock()


def _shared_session_fits(main_class: str) -> bool:
    """Whether JavaTools.run may use the process's shared ToolSession for this tool: the Java tools of
    org.apache.kafka.tools (the Scala ones print through scala.Console, which keeps the first System.out it
    saw, so their output would not be captured per command); KOP_TOOL_SESSION=0 turns it off."""
    return main_class.startswith("org.apache.kafka.tools.") and os.environ.get("KOP_TOOL_SESSION", "1") != "0"


def _shared_session(tools: JavaTools) -> ToolSession:
    with _SHARED_LOCK:
        session = _SHARED.get("tools")
        if session is None:
            session = _SHARED["tools"] = ToolSession(tools, locked=True)
            atexit.register(session.close)
        return session


class ToolSession:
    """Kafka tool commands run one after another in one JVM (tests/support/ToolRunner.java): `run` has
    JavaTools.run's signature and answers the same ToolResult, less a JVM start per command (about a second
    of CPU each on the suite's 2 cores: a test of 60 commands against two brokers saved a minute).

    What differs from a fresh JVM per command: log4j's lines go to the session's own stderr (kept in a file,
    `log`), not into a command's stderr - the tools' own messages (System.err) are still in it; a command that
    ends through Exit.exit leaves its thread parked, not its resources closed. Not for commands reading stdin."""

    def __init__(self, tools: JavaTools, locked: bool = False) -> None:
        self.tools = tools
        self._lock = threading.Lock() if locked else contextlib.nullcontext()  # shared: one command at a time
        self._proc: subprocess.Popen[bytes] | None = None
        self._log = tempfile.NamedTemporaryFile(prefix="kop-tool-session-", suffix=".log", delete=False)  # noqa: SIM115
        self.log = Path(self._log.name)

    def __enter__(self) -> ToolSession:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _start(self) -> subprocess.Popen[bytes]:
        if self._proc is None or self._proc.poll() is not None:
            cmd, _ = _java_command(str(TOOL_RUNNER), [], None, dump=False)
            self._proc = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self._log)
        return self._proc

    def run(self, tool: str, *args: object, input: str | None = None, timeout: float = 120,
            jvm_opts: list[str] | None = None, check: bool = False) -> ToolResult:
        if input is not None or jvm_opts is not None:
            return self.tools.run(tool, *args, input=input, timeout=timeout, jvm_opts=jvm_opts, check=check)
        with self._lock:
            return self._run(tool, args, timeout, check)

    def _run(self, tool: str, args: Sequence[object], timeout: float, check: bool) -> ToolResult:
        words = [self.tools.main_class(tool), *map(str, args)]
        assert not any("\t" in w or "\n" in w for w in words), words
        proc = self._start()
        assert proc.stdin is not None and proc.stdout is not None
        proc.stdin.write(("\t".join(words) + "\n").encode())
        proc.stdin.flush()
        timer = threading.Timer(timeout, proc.kill)  # a hung command: the session ends, the next run starts another
        timer.start()
        try:
            header = proc.stdout.readline().decode()
            if not header.startswith("@@tool "):
                raise AssertionError(f"{tool} {' '.join(map(str, args))} did not finish within {timeout}s (or the "
                                     f"tool session died: rc {proc.poll()}); session log {self.log}")
            rc, n_out, n_err = (int(x) for x in header.split()[1:])
            out, err = proc.stdout.read(n_out), proc.stdout.read(n_err)
        finally:
            timer.cancel()
        result = ToolResult(words, rc, out.decode(errors="replace"), err.decode(errors="replace"))
        return result.check() if check else result

    def close(self) -> None:
        if self._proc is not None:
            assert self._proc.stdin is not None
            with contextlib.suppress(OSError):
                self._proc.stdin.close()
            try:
                self._proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self._proc.kill()
                self._proc.wait()
            self._proc = None
        self._log.close()
