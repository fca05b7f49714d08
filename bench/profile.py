"""Where the time goes: one extra, untimed round of a scenario against our broker under py-spy, and a summary of
the samples as text.

The recorder runs `py-spy record --pid <broker> -r 100 -f raw --idle --threads --nolineno --nonblocking` for the
length of the round and stops it with SIGINT (py-spy then writes its file). The output is "folded" stacks, one
line per distinct stack with its sample count:

    thread (4242): MainThread;<module> (kop/cli.py);main (kop/cli.py);...;handle_produce (kop/x.py) 17

--idle keeps the samples where the event loop waits, so busy / total is the share of wall time the main thread
ran Python code; --nonblocking samples without stopping the broker (the round is not timed either way, and is
kept out of the medians). With uvloop the loop itself is C, so a sample whose leaf is the Python frame that
entered the loop (uvloop's run, asyncio's runner, a selector's select) is an idle wait - or C work of the loop
(socket reads and writes), which py-spy cannot tell apart without --native; run.py therefore also records the
main thread's CPU seconds from /proc (all work, C included) next to the sample shares.

The parser and the summary are pure functions (tests/test_bench_report.py feeds them a canned file).
"""

from __future__ import annotations

import re
import shutil
import signal
import subprocess
from dataclasses import dataclass, field
from pathlib import Path

LINE_RE = re.compile(r"^(?P<stack>.*) (?P<count>\d+)$")
THREAD_RE = re.compile(r"^thread \((?P<tid>[0-9a-fx]+)\): ?(?P<name>.*)$", re.IGNORECASE)
MAIN_THREAD = "MainThread"
# Leaf frames that mean "the event loop is waiting" (or doing C-level loop work py-spy cannot see): the frame
# that called into the loop (uvloop.run, asyncio's runner, run_until_complete / run_forever) or a selector.
IDLE_LEAF_RE = re.compile(
    r"^(?:\S*select \(selectors\.py\)|\S*\.?(?:run|run_until_complete|run_forever|_run_once) "
    r"\((?:\S*/)?(?:uvloop/__init__\.py|asyncio/runners\.py|asyncio/base_events\.py)\))$"
)
# Leaf frames of a helper thread waiting for work (a ThreadPoolExecutor worker blocked on its queue, a thread
# waiting on a condition or an event).
THREAD_IDLE_LEAF_RE = re.compile(
    r"^(?:_worker \(concurrent/futures/thread\.py\)|Thread\.run \(threading\.py\)|"
    r"(?:Condition|Event|Semaphore)\.(?:wait|acquire) \(threading\.py\)|\S*select \(selectors\.py\))$"
)


@dataclass
class Profile:
    """Sample counts of one profiled round: per thread name, and the main thread's frames."""

    total: int = 0  # samples of every thread
    threads: dict[str, int] = field(default_factory=dict)
    thread_busy: dict[str, int] = field(default_factory=dict)  # samples not waiting for work
    main_total: int = 0
    main_idle: int = 0
    inclusive: dict[str, int] = field(default_factory=dict)  # main thread, busy samples only
    self_: dict[str, int] = field(default_factory=dict)

    @property
    def main_busy(self) -> int:
        return self.main_total - self.main_idle

    @property
    def busy_share(self) -> float | None:
        """Share of the main thread's samples that ran Python code (not waiting in the loop)."""
        return self.main_busy / self.main_total if self.main_total else None

    def top(self, n: int = 8, by: str = "inclusive") -> list[tuple[str, int, float]]:
        """[(frame, samples, share of the main thread's busy samples)], most first."""
        counts = self.inclusive if by == "inclusive" else self.self_
        busy = self.main_busy or 1
        return [(f, c, c / busy) for f, c in sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))[:n]]


def is_idle(leaf: str) -> bool:
    return bool(IDLE_LEAF_RE.match(leaf.strip()))


def parse_folded(text: str) -> Profile:
    """Folded stacks (py-spy -f raw, with --threads) -> Profile. Lines without a thread frame count as the main
    thread (py-spy without --threads)."""
    p = Profile()
    for line in text.splitlines():
        m = LINE_RE.match(line.strip())
        if not m:
            continue
        count = int(m.group("count"))
        frames = m.group("stack").split(";")
        thread = MAIN_THREAD
        t = THREAD_RE.match(frames[0])
        if t:
            thread = t.group("name").strip() or t.group("tid")
            frames = frames[1:]
        p.total += count
        p.threads[thread] = p.threads.get(thread, 0) + count
        if thread != MAIN_THREAD:
            if frames and not THREAD_IDLE_LEAF_RE.match(frames[-1].strip()):
                p.thread_busy[thread] = p.thread_busy.get(thread, 0) + count
            continue
        p.main_total += count
        if not frames or is_idle(frames[-1]):
            p.main_idle += count
            continue
        for f in set(frames):  # a recursive frame counts once per sample
            p.inclusive[f] = p.inclusive.get(f, 0) + count
        p.self_[frames[-1]] = p.self_.get(frames[-1], 0) + count
    return p


# Frames every busy sample of the broker's main thread passes through: the entry and the loop's callback
# dispatch; listing them as "top inclusive" says nothing.
_TRIVIAL_RE = re.compile(r"^(?:<module>|main|run|run_broker|Handle\._run|Runner\.run|run_until_complete|run_forever|"
                         r"_run_once|_run_module_as_main|_run_code|cli|standalone) \(")


def summary_lines(p: Profile, n: int = 8) -> list[str]:
    """The profile as markdown lines: busy share, other threads, top n frames by inclusive and by self time."""
    out = []
    share = p.busy_share
    out.append(f"main thread: {p.main_total:,} samples, {p.main_busy:,} running Python "
               f"({'-' if share is None else f'{share:.0%}'} of wall time), the rest waiting in the event loop")
    others = {t: c for t, c in p.threads.items() if t != MAIN_THREAD}
    if others:
        out.append("other threads, busy share of their samples: " + ", ".join(
            f"{t} {p.thread_busy.get(t, 0) / c:.0%}"
            for t, c in sorted(others.items(), key=lambda kv: (-p.thread_busy.get(kv[0], 0), kv[0]))[:4]))
    incl = [(f, c, s) for f, c, s in p.top(n + 12, "inclusive") if not _TRIVIAL_RE.match(f)][:n]
    if incl:
        out.append("top inclusive (share of busy samples): " + "; ".join(f"`{f}` {s:.0%}" for f, _, s in incl))
    slf = p.top(n, "self")
    if slf:
        out.append("top self: " + "; ".join(f"`{f}` {s:.0%}" for f, _, s in slf))
    return out


class PySpy:
    """`with PySpy(pid, out):` samples pid for the length of the block."""

    def __init__(self, pid: int, out: Path, rate: int = 100) -> None:
        self.pid, self.out, self.rate = pid, out, rate
        self.proc: subprocess.Popen | None = None

    @staticmethod
    def available() -> bool:
        return shutil.which("py-spy") is not None

    def __enter__(self) -> PySpy:
        self.out.parent.mkdir(parents=True, exist_ok=True)
        self.proc = subprocess.Popen(
            ["py-spy", "record", "--pid", str(self.pid), "-r", str(self.rate), "-f", "raw", "--idle", "--threads",
             "--nolineno", "--nonblocking", "-o", str(self.out)],
            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        return self

    def __exit__(self, *exc: object) -> None:
        assert self.proc is not None
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGINT)  # py-spy writes its file on Ctrl-C
        try:
            _, err = self.proc.communicate(timeout=60)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            _, err = self.proc.communicate()
        if not self.out.exists():
            raise RuntimeError(f"py-spy wrote no {self.out}: {err[-500:]}")
