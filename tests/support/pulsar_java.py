"""Pulsar's own Java client and Java admin client, from the jars scripts/setup fetched (<pulsar libs>/client,
<pulsar libs> being .cache/pulsar-libs-<version>: tests/support/pulsar_server.py's pulsar_libs_dir).

`tools/java/pulsar/src/PulsarJava.java` reads commands on stdin and answers each with one JSON line; it is
compiled with `javac` on first use into <pulsar libs>/classes-<hash of source>/ (a few seconds, once per
source version), so a test pays one JVM start for a whole conversation:

    java = PulsarJava(service_url, admin_url)
    ids, msgs = java.run("produce persistent://public/default/t 10 true LZ4",
                         "consume persistent://public/default/t sub Shared 10")

A test whose next command depends on an earlier answer (ack the message it got, seek to an id a consumer
saw) talks to the same JVM one command at a time instead:

    with java.session() as s:
        s("subscribe c1 persistent://public/default/t sub Shared")
        [m] = s("receive c1 1 ack=false")
        s(f"nack c1 {m['id']}")

The command list is in the Java file's class comment. The pulsar-admin CLI (`pulsar-client-tools`) is not on
Maven Central, hence this small program rather than the CLI.
"""

from __future__ import annotations

import hashlib
import json
import os
import queue
import shutil
import subprocess
import tempfile
import threading
from pathlib import Path

from .java import REPO_ROOT, adopt_archive, cds_options, classes_jar, java_executable
from .pulsar_server import CLIENT_LIBS, PULSAR_LIBS, check_pulsar_libs

SOURCE_DIR = REPO_ROOT / "tools" / "java" / "pulsar" / "src"
SOURCE = SOURCE_DIR / "PulsarJava.java"  # the main class; it hands admin calls to PulsarAdminCalls.java beside it
MAIN_CLASS = "PulsarJava"
# Short-lived clients: a small heap and quick start-up (C1 only), as tests/support/java.py runs Kafka's tools.
CLIENT_JVM_OPTS = ["-Xmx256m", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1", "-Xshare:auto"]


def javac_executable() -> str:
    java_home = os.environ.get("JAVA_HOME")
    if java_home and (Path(java_home) / "bin" / "javac").exists():
        return str(Path(java_home) / "bin" / "javac")
    javac = shutil.which("javac") or str(Path(java_executable()).resolve().parent / "javac")
    if not Path(javac).exists():
        raise AssertionError("javac is not on PATH (a JDK 17+ is needed to compile tools/java/pulsar/src)")
    return javac


def compiled_classes() -> Path:
    """The folder holding PulsarJava.class for the current source, compiling it when missing. Compiled into a
    temporary folder and renamed into place, so concurrent test processes never see half a compilation."""
    check_pulsar_libs()
    sources = sorted(SOURCE_DIR.glob("*.java"))
    digest = hashlib.sha256(b"".join(s.name.encode() + b"\0" + s.read_bytes() for s in sources)).hexdigest()[:16]
    out = PULSAR_LIBS / f"classes-{digest}"
    if (out / f"{MAIN_CLASS}.class").exists():
        return out
    tmp = Path(tempfile.mkdtemp(prefix="classes-", dir=PULSAR_LIBS))
    proc = subprocess.run(
        [javac_executable(), "-d", str(tmp), "-cp", f"{CLIENT_LIBS}/*", *map(str, sources)],
        capture_output=True, text=True, timeout=300,
    )
    if proc.returncode != 0:
        shutil.rmtree(tmp, ignore_errors=True)
        raise AssertionError(f"javac {SOURCE_DIR} failed ({proc.returncode})\n{proc.stdout}\n{proc.stderr}")
    try:
        tmp.rename(out)
    except OSError:  # another process won the race: its classes are the same
        shutil.rmtree(tmp, ignore_errors=True)
    return out


class PulsarJava:
    def __init__(self, service_url: str, admin_url: str) -> None:
        self.service_url = service_url
        self.admin_url = admin_url
        self.classes = compiled_classes()

    def command(self, dump: bool = False) -> tuple[list[str], Path | None]:
        """The JVM's command line, mapping the class archive (tests/support/java.py) when there is one; with
        `dump` and none, writing it at exit to the pending path returned."""
        classpath = f"{CLIENT_LIBS}/*:{classes_jar(self.classes)}"
        cds, pending = cds_options(classpath, MAIN_CLASS, CLIENT_JVM_OPTS, dump)
        cmd = [java_executable(), *CLIENT_JVM_OPTS, *cds, "-cp", classpath, MAIN_CLASS, self.service_url,
               self.admin_url]
        return cmd, pending

    def run(self, *commands: str, timeout: float = 300) -> list[object]:
        """Run the commands in one JVM; the result of each, in order. A command the Java side failed, or a
        JVM that died, is an AssertionError carrying what it printed."""
        script = "".join(f"{c}\n" for c in commands)
        cmd, pending = self.command(dump=True)
        try:
            proc = subprocess.run(cmd, input=script, capture_output=True, text=True, timeout=timeout)
            adopt_archive(pending, proc.returncode == 0)
        except subprocess.TimeoutExpired as e:
            adopt_archive(pending, False)
            out = e.stdout.decode() if isinstance(e.stdout, bytes) else (e.stdout or "")
            err = e.stderr.decode() if isinstance(e.stderr, bytes) else (e.stderr or "")
            raise AssertionError(f"PulsarJava did not finish within {timeout}s\n--- script\n{script}"
                                 f"--- stdout\n{out[-4000:]}\n--- stderr\n{err[-4000:]}") from None
        answers = [json.loads(line) for line in proc.stdout.splitlines() if line.startswith("{")]
        failed = [a for a in answers if "error" in a]
        if proc.returncode != 0 or failed or len(answers) != len(commands):
            raise AssertionError(
                f"PulsarJava exited {proc.returncode}, {len(answers)} answers to {len(commands)} commands"
                f"{': ' + failed[0]['error'] if failed else ''}\n--- script\n{script}"
                f"--- stdout\n{proc.stdout[-4000:]}\n--- stderr\n{proc.stderr[-4000:]}"
            )
        return [a["ok"] for a in answers]

    def session(self, timeout: float = 300) -> PulsarJavaSession:
        """One JVM answering commands one at a time (see the module docstring); close it, or use `with`."""
        return PulsarJavaSession(*self.command(dump=True), timeout)


class PulsarJavaSession:
    """A running PulsarJava: `session(command)` sends one command and returns its answer. A command the Java
    side failed (it exits then), a JVM that died, or no answer within `timeout` seconds is an AssertionError
    carrying the commands since the last `begin()` and what the JVM printed."""

    def __init__(self, command: list[str], pending_archive: Path | None, timeout: float) -> None:
        self.timeout = timeout
        self._pending_archive = pending_archive  # written at exit (tests/support/java.py's class data sharing)
        self.script: list[str] = []
        self._stderr = tempfile.TemporaryFile()  # noqa: SIM115 - closed by close()
        self.proc = subprocess.Popen(command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self._stderr,
                                     text=True, bufsize=1)
        self._lines: queue.Queue[str | None] = queue.Queue()
        self._stdout: list[str] = []
        threading.Thread(target=self._pump, daemon=True).start()

    def _pump(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self._lines.put(line)
        self._lines.put(None)

    def alive(self) -> bool:
        return self.proc.poll() is None and not self._stderr.closed

    def begin(self) -> None:
        """A new conversation on the same JVM (a failure report shows the commands from here on)."""
        self.script.clear()
        self._stdout.clear()

    def __call__(self, command: str, timeout: float | None = None) -> object:
        assert self.proc.stdin is not None
        self.script.append(command)
        try:
            self.proc.stdin.write(command + "\n")
            self.proc.stdin.flush()
        except OSError:
            self._fail("the JVM is gone")
        while True:
            try:
                line = self._lines.get(timeout=timeout or self.timeout)
            except queue.Empty:
                self._fail(f"no answer within {timeout or self.timeout}s")
            if line is None:
                self._fail(f"the JVM exited ({self.proc.wait()}) without answering")
            self._stdout.append(line)
            if line.startswith("{"):
                answer = json.loads(line)
                if "error" in answer:
                    self._fail(answer["error"])
                return answer["ok"]

    def _fail(self, why: str) -> None:
        self._end()
        self._stderr.seek(0)
        err = self._stderr.read().decode(errors="replace")
        self.close()
        script = "".join(f"{c}\n" for c in self.script)
        raise AssertionError(f"PulsarJava: {why}\n--- commands\n{script}--- stdout\n{''.join(self._stdout)[-4000:]}"
                             f"\n--- stderr\n{err[-4000:]}")

    def _end(self) -> None:
        """stdin closed, the JVM exits (see PulsarJava.java's main); killed if it does not within a minute."""
        if self.proc.stdin and not self.proc.stdin.closed:
            try:
                self.proc.stdin.close()
            except OSError:
                pass
        try:
            self.proc.wait(60)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()

    def close(self) -> None:
        self._end()
        self._stderr.close()
        adopt_archive(self._pending_archive, self.proc.returncode == 0)
        self._pending_archive = None

    def __enter__(self) -> PulsarJavaSession:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
