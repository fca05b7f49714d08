"""Talking to a broker's admin HTTP server in tests: GET with the status kept, /metrics parsed with
prometheus-client's own parser, kop-admin run as the installed console script, record batches built with
kafka-python's builder (independent of our codec), and a liveness wait."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any

STALL_TIMEOUT = 120.0


def http_get(url: str) -> tuple[int, Any]:
    """(status, parsed JSON or text) without raising on 4xx/5xx and without following redirects."""

    class _NoRedirect(urllib.request.HTTPRedirectHandler):
        def redirect_request(self, *args: Any, **kwargs: Any) -> None:
            return None

    opener = urllib.request.build_opener(_NoRedirect)
    try:
        with opener.open(url, timeout=60) as resp:
            status, body = resp.status, resp.read()
    except urllib.error.HTTPError as e:
        status, body = e.code, e.read()
    try:
        return status, json.loads(body)
    except ValueError:
        return status, body.decode(errors="replace")


def ok(url: str) -> Any:
    status, body = http_get(url)
    assert status == 200, f"GET {url}: HTTP {status}: {body}"
    return body


def topic_url(admin: str, topic: str, tenant: str = "public", namespace: str = "default") -> str:
    return f"{admin}/admin/v2/persistent/{tenant}/{namespace}/{urllib.parse.quote(topic, safe='')}"


def create_partitioned_topic(admin: str, topic: str, partitions: int) -> None:
    """Create `topic` (`persistent://tenant/ns/local` or a local name in public/default) as a partitioned topic over
    the admin REST, as a Pulsar user does: a Pulsar client's producer or consumer auto-creates a non-partitioned one
    (Pulsar's default allowAutoTopicCreationType), on Apache Pulsar and on ours."""
    tenant, namespace, local = "public", "default", topic
    if "://" in topic:
        tenant, namespace, local = topic.split("://", 1)[1].split("/", 2)
    req = urllib.request.Request(topic_url(admin.rstrip("/"), local, tenant, namespace) + "/partitions",
                                 data=str(partitions).encode(), method="PUT",
                                 headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=60) as resp:
        assert resp.status == 204, f"create {topic} ({partitions} partitions): HTTP {resp.status}"


def rest(admin: str, method: str, path: str, body: object = None) -> tuple[int, Any]:
    """(status, parsed JSON body or None) of one call to `admin`/admin/v2/`path`, without raising on 4xx/5xx."""
    data = None if body is None else json.dumps(body).encode()
    req = urllib.request.Request(f"{admin}/admin/v2/{path}", data=data, method=method,
                                 headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=60) as resp:
            raw = resp.read()
            return resp.status, json.loads(raw) if raw else None
    except urllib.error.HTTPError as e:
        return e.code, None


class Scrape:
    """One /metrics scrape: sample values by name and labels."""

    def __init__(self, admin: str) -> None:
        from prometheus_client.parser import text_string_to_metric_families

        status, text = http_get(admin + "/metrics")
        assert status == 200, f"/metrics answered {status}"
        self.text = text
        self.samples: dict[tuple[str, frozenset[tuple[str, str]]], float] = {}
        for fam in text_string_to_metric_families(text):
            for s in fam.samples:
                self.samples[(s.name, frozenset(s.labels.items()))] = s.value

    def value(self, name: str, **labels: str) -> float:
        """The sample's value; 0 when the series does not exist (yet)."""
        return self.samples.get((name, frozenset(labels.items())), 0.0)

    def total(self, name: str, **labels: str) -> float:
        """Sum over every series of `name` whose labels include `labels`."""
        want = set(labels.items())
        return sum(v for (n, ls), v in self.samples.items() if n == name and want <= ls)

    def series(self, name: str) -> dict[frozenset[tuple[str, str]], float]:
        return {ls: v for (n, ls), v in self.samples.items() if n == name}


def kop_admin_path() -> str:
    """The installed `kop-admin` console script (pyproject [project.scripts])."""
    beside = Path(sys.executable).parent / "kop-admin"
    found = str(beside) if beside.exists() else shutil.which("kop-admin")
    if not found:
        raise AssertionError("kop-admin is not installed: run `pip install -e .` (make test does)")
    return found


def kop_admin(admin: str, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([kop_admin_path(), "--admin-url", admin, *args], capture_output=True, text=True,
                          timeout=120)


def kop_admin_json(admin: str, *args: str) -> Any:
    r = kop_admin(admin, "--json", *args)
    assert r.returncode == 0, f"kop-admin {' '.join(args)}: exit {r.returncode}\n{r.stderr}"
    return json.loads(r.stdout)


def batch(values: list[bytes], base_timestamp: int = 1_700_000_000_000) -> bytes:
    """One uncompressed v2 record batch built by kafka-python (not by our codec)."""
    from kafka.record.default_records import DefaultRecordBatchBuilder

    b = DefaultRecordBatchBuilder(magic=2, compression_type=0, is_transactional=False, producer_id=-1,
                                  producer_epoch=-1, base_sequence=-1, batch_size=1 << 20)
    for i, v in enumerate(values):
        b.append(i, timestamp=base_timestamp + i, key=None, value=v, headers=[])
    return bytes(b.build())


def wait_for(what: str, predicate: Callable[[], bool], timeout: float = STALL_TIMEOUT) -> None:
    """Liveness only: poll until true, fail after `timeout` (never a measure of speed)."""
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"{what}: not true after {timeout}s")
        time.sleep(0.05)
