"""The node's one admin HTTP address (webServicePort), served by the supervisor.

* `/metrics`: every live worker's `/metrics`, each sample labelled `worker="i"` (as Prometheus users expect
  of several processes behind one target), each metric family's HELP and TYPE once. The answer closes the
  connection, so a scraper's next scrape comes back here rather than riding a connection elsewhere.
* `/ready`: 200 when every worker answers its own /ready with 200 (the node serves all its partitions).
* anything else (Pulsar's admin REST, Confluent's registry, `/health`, ...): forwarded as is to a live worker,
  which answers it as a broker of a cluster does - itself, or a 307 redirect to the owner's own admin address
  for a partition another worker owns. `kop-admin` and Pulsar's admin clients follow those redirects.

Workers are found through their registrations in the node's metadata store (kop/cluster/workers.py).
"""

from __future__ import annotations

import asyncio
import itertools
import json
import logging
import re
from collections.abc import Awaitable, Callable

import aiohttp
from aiohttp import web

log = logging.getLogger(__name__)

_HOP = {"connection", "keep-alive", "transfer-encoding", "content-length", "host", "upgrade",
        "proxy-connection", "te", "trailer", "content-encoding"}
_SAMPLE = re.compile(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{.*\})?(\s.*)$")


def label_samples(text: str, worker: int, families: dict[str, list[str]], order: list[str]) -> None:
    """Add one worker's exposition to `families` (family name -> HELP/TYPE lines then samples), each sample
    labelled worker="i"; `order` keeps the families in the order first seen."""
    family = ""
    for line in text.splitlines():
        if not line.strip():
            continue
        if line.startswith("#"):
            parts = line.split(None, 3)
            if len(parts) >= 3 and parts[1] in ("HELP", "TYPE"):
                family = parts[2]
                if family not in families:
                    families[family] = []
                    order.append(family)
                if line not in families[family]:
                    families[family].insert(sum(1 for x in families[family] if x.startswith("#")), line)
            continue
        m = _SAMPLE.match(line)
        if m is None:
            continue
        name, labels, rest = m.group(1), m.group(2), m.group(3)
        inner = f'worker="{worker}"' + (f",{labels[1:-1]}" if labels and labels != "{}" else "")
        key = family if family and name.startswith(family) else name
        if key not in families:
            families[key] = []
            order.append(key)
        families[key].append(f"{name}{{{inner}}}{rest}")


def merge_metrics(texts: dict[int, str]) -> str:
    """The node's exposition from each worker's (worker index -> text)."""
    families: dict[str, list[str]] = {}
    order: list[str] = []
    for worker in sorted(texts):
        label_samples(texts[worker], worker, families, order)
    return "".join(line + "\n" for name in order for line in families[name])


class NodeAdmin:
    """The supervisor's HTTP server; `workers()` answers the live workers' admin base URLs by index."""

    def __init__(self, host: str | None, port: int, workers: Callable[[], Awaitable[dict[int, str]]],
                 expected: int) -> None:
        self.host = host
        self.expected = expected
        self.port = port
        self.workers = workers
        self._runner: web.AppRunner | None = None
        self._session: aiohttp.ClientSession | None = None
        self._turn = itertools.count()

    async def start(self) -> None:
        app = web.Application(client_max_size=1 << 30)
        app.router.add_get("/metrics", self.metrics)
        app.router.add_get("/ready", self.ready)
        app.router.add_route("*", "/{tail:.*}", self.forward)
        self._session = aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=60))
        self._runner = web.AppRunner(app, access_log=None)
        await self._runner.setup()
        site = web.TCPSite(self._runner, self.host, self.port, reuse_address=True)
        await site.start()
        if self.port == 0:
            self.port = self._runner.addresses[0][1]

    @property
    def url(self) -> str:
        host = self.host if self.host not in (None, "", "0.0.0.0", "::") else "127.0.0.1"
        return f"http://{host}:{self.port}"

    async def stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()
        if self._session is not None:
            await self._session.close()

    async def _get(self, url: str) -> tuple[int, str]:
        assert self._session is not None
        try:
            async with self._session.get(url, timeout=aiohttp.ClientTimeout(total=10)) as r:
                return r.status, await r.text()
        except (aiohttp.ClientError, TimeoutError) as e:
            return 0, str(e)

    async def metrics(self, request: web.Request) -> web.Response:
        urls = await self.workers()
        got = await asyncio.gather(*(self._get(u + "/metrics") for u in urls.values()))
        texts = {i: text for i, (status, text) in zip(urls, got, strict=True) if status == 200}
        resp = web.Response(text=merge_metrics(texts), content_type="text/plain", charset="utf-8",
                            headers={"Connection": "close"})
        resp.force_close()
        return resp

    async def not_ready(self) -> list[str]:
        """Why the node is not ready (empty: every worker answers /ready with 200)."""
        urls = await self.workers()
        got = await asyncio.gather(*(self._get(u + "/ready") for u in urls.values()))
        reasons = [f"worker {i}: {text.strip() or status}" for i, (status, text) in zip(urls, got, strict=True)
                   if status != 200]
        return reasons + [f"worker {i}: not running" for i in range(self.expected) if i not in urls]

    async def ready(self, request: web.Request) -> web.Response:
        reasons = await self.not_ready()
        if reasons:
            return web.Response(text="".join(f"not ready: {r}\n" for r in reasons), status=503)
        return web.Response(text="ok\n")

    async def forward(self, request: web.Request) -> web.StreamResponse:
        urls = await self.workers()
        if not urls:
            return web.Response(text="no worker is running\n", status=503)
        ordered = sorted(urls)
        target = urls[ordered[next(self._turn) % len(ordered)]]
        assert self._session is not None
        headers = {k: v for k, v in request.headers.items() if k.lower() not in _HOP}
        body = await request.read()
        try:
            async with self._session.request(request.method, target + request.path_qs, headers=headers,
                                             data=body or None, allow_redirects=False) as r:
                data = await r.read()
                out = {k: v for k, v in r.headers.items() if k.lower() not in _HOP}
                return web.Response(body=data, status=r.status, headers=out)
        except (aiohttp.ClientError, TimeoutError) as e:
            return web.Response(text=json.dumps({"reason": f"worker unreachable: {e}"}), status=503,
                                content_type="application/json")
