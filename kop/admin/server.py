"""The admin HTTP server: /metrics, Pulsar admin-v2-shaped REST (with PIP-415), health and readiness, and
Confluent Schema Registry's REST API at the root (/subjects, /schemas, /config, /mode, /compatibility).

It runs in the broker's process and event loop, beside the Kafka listeners, on webServicePort (Pulsar's
key; 8080 by default, 0 = an ephemeral port, -1 = off) and, with webServicePortTls (-1 = off), the same
routes over HTTPS with the broker's tls* certificate (kop/net/tls.py); it reads the same BrokerServices the
handlers use.

Why aiohttp rather than a hand-written server on asyncio streams: it is asyncio-native (runs on our
uvloop loop, no thread), well kept, and gets the parts of HTTP/1.1 we would otherwise have to get right
ourselves (keep-alive, chunked bodies, percent-decoding of topic names in paths, HEAD, malformed-request
handling) - none of which is worth owning for an admin port.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import TYPE_CHECKING, Any
from urllib.parse import quote

from aiohttp import web
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from kop.admin import (
    auth,
    compaction,
    fanout,
    lag,
    lookup,
    non_persistent,
    permissions,
    registry,
    schemas,
    subscriptions,
    topic_policies,
    topics,
    views,
)
from kop.admin import namespaces as namespace_routes
from kop.admin.views import AdminError

if TYPE_CHECKING:
    from kop.services import BrokerServices

log = logging.getLogger("kop.admin")

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]

V2 = "/admin/v2"
TOPIC = V2 + "/persistent/{tenant}/{namespace}/{topic}"


def _json(data: Any, status: int = 200) -> web.Response:
    return web.Response(text=json.dumps(data, indent=None), status=status, content_type="application/json")


@web.middleware
async def _errors(request: web.Request, handler: Handler) -> web.StreamResponse:
    """AdminError -> its status with Pulsar's {"reason": ...} body; anything unexpected -> 500, logged."""
    try:
        return await handler(request)
    except AdminError as e:
        return _json({"reason": e.reason}, e.status)
    except web.HTTPException:
        raise
    except Exception as e:
        log.exception("admin request %s %s failed", request.method, request.path)
        return _json({"reason": f"internal error: {e!r}"}, 500)


class AdminServer:
    def __init__(self, service: BrokerServices) -> None:
        self.service = service
        cfg = service.config
        self.host = cfg.webServiceBindAddress
        self.port = cfg.webServicePort
        self.tls_port = cfg.webServicePortTls  # -1: no HTTPS
        self._runner: web.AppRunner | None = None
        self._sampler: asyncio.Task[None] | None = None
        self._ready_cache: tuple[float, list[str]] | None = None
        self._ready_lock = asyncio.Lock()
        service.metrics.storage_status = lambda: views.storage_status(service)
        self.app = self._build()

    @property
    def url(self) -> str:
        """Where a client on this machine reaches the server (a wildcard bind is reached on 127.0.0.1)."""
        host = "127.0.0.1" if self.host in ("", "0.0.0.0", "::") else self.host
        if ":" in host:
            host = f"[{host}]"
        return f"http://{host}:{self.port}"

    def _build(self) -> web.Application:
        authenticate = auth.middleware(self.service.config, registry.PREFIXES + lookup.PREFIXES, registry.ROLE_KEY,
                                       self.service.topics.namespaces)  # None: authenticationEnabled is false
        app = web.Application(middlewares=[_errors] if authenticate is None else [authenticate, _errors])
        r = app.router
        r.add_get("/metrics", self.metrics)
        for path in ("/health", V2 + "/brokers/health"):
            r.add_get(path, self.health)
        for path in ("/ready", V2 + "/brokers/ready"):
            r.add_get(path, self.ready)
        r.add_get(V2 + "/clusters", self.clusters)
        namespace_routes.add_routes(self, r, V2)  # tenants, namespaces, their policies (kop/admin/namespaces.py)
        r.add_get(V2 + "/persistent/{tenant}/{namespace}", self.topic_list)
        r.add_get(V2 + "/persistent/{tenant}/{namespace}/partitioned", self.partitioned_topic_list)
        r.add_get(TOPIC + "/partitions", self.partitioned_metadata)
        r.add_put(TOPIC + "/partitions", self.create_partitioned_topic)
        r.add_get(TOPIC + "/stats", self.stats)
        r.add_get(TOPIC + "/partitioned-stats", self.partitioned_stats)
        r.add_get(TOPIC + "/internalStats", self.internal_stats)
        r.add_get(TOPIC + "/partitioned-internalStats", self.partitioned_internal_stats)
        r.add_get(TOPIC + "/getMessageIdByIndex", self.message_id_by_index)
        r.add_get(TOPIC + "/getIndexByMessageId", self.index_by_message_id)
        r.add_get(V2 + "/non-persistent/{tenant}/{namespace}/{topic}/getMessageIdByIndex", self.non_persistent)
        non_persistent.add_routes(self, r, V2)  # non-persistent topics: list, partitions, stats (kop/admin/non_persistent.py)
        subscriptions.add_routes(self, r, TOPIC)
        permissions.add_routes(self, r, TOPIC)  # Pulsar's grant/revoke as Kafka ACLs (kop/admin/permissions.py)
        topics.add_routes(self, r, TOPIC)  # create a non-partitioned topic, delete either kind (kop/admin/topics.py)
        compaction.add_routes(self, r, TOPIC)  # Pulsar's topic compaction (kop/admin/compaction.py)
        topic_policies.add_routes(self, r, TOPIC)  # topic-level policies (kop/admin/topic_policies.py)
        schemas.add_routes(self, r, V2 + "/schemas/{tenant}/{namespace}/{topic}")
        lookup.add_routes(self, r, registry.ROLE_KEY)  # Pulsar's HTTP lookup (kop/admin/lookup.py)
        registry.add_routes(self, r)  # Confluent Schema Registry's API, at the root (kop/admin/registry.py)
        return app

    # ------------------------------------------------------------------ lifecycle
    async def start(self) -> None:
        runner = web.AppRunner(self.app, access_log=None, handle_signals=False)
        await runner.setup()
        try:
            if self.port >= 0:
                site = web.TCPSite(runner, self.host or None, self.port, reuse_address=True)
                await site.start()
                if self.port == 0:
                    self.port = runner.addresses[0][1]
            if self.tls_port >= 0:
                await self._start_tls(runner)
        except OSError as e:
            await runner.cleanup()
            raise OSError(e.errno, f"admin HTTP server (webServiceBindAddress={self.host}, "
                                   f"webServicePort={self.port}, webServicePortTls={self.tls_port}): "
                                   f"{e.strerror or e}") from e
        except BaseException:
            await runner.cleanup()
            raise
        self._runner = runner
        self.service.metrics.sample_rates()
        self._sampler = asyncio.create_task(self._sample_loop(), name="admin-stats-sampler")

    async def _start_tls(self, runner: web.AppRunner) -> None:
        from kop.config import PROVIDER_TLS
        from kop.net.acceptor import listen
        from kop.net.tls import server_context

        cfg = self.service.config
        # AuthenticationProviderTls names the role by the client certificate: ask for one (verified against
        # tlsTrustCertsFilePath; optional unless tlsRequireTrustedClientCertOnConnect), as Pulsar's web service does
        tls_auth = cfg.authenticationEnabled and PROVIDER_TLS in cfg.authentication_providers
        context = server_context(cfg, client_certs=tls_auth)
        socks = listen(self.host or None, self.tls_port)
        self.tls_port = socks[0].getsockname()[1]
        for sock in socks:
            await web.SockSite(runner, sock, ssl_context=context).start()

    @property
    def tls_url(self) -> str | None:
        """The HTTPS address (webServicePortTls), None without one."""
        if self.tls_port < 0:
            return None
        host = "127.0.0.1" if self.host in ("", "0.0.0.0", "::") else self.host
        return f"https://{f'[{host}]' if ':' in host else host}:{self.tls_port}"

    async def _sample_loop(self) -> None:
        interval = self.service.config.statsUpdateFrequencyInSecs
        while True:
            await asyncio.sleep(interval)
            self.service.metrics.sample_rates()

    async def stop(self) -> None:
        if self._sampler is not None:
            self._sampler.cancel()
            try:
                await self._sampler
            except asyncio.CancelledError:
                pass
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None

    # ------------------------------------------------------------------ metrics, health
    async def metrics(self, request: web.Request) -> web.Response:
        await lag.refresh(self.service)
        pulsar = self.service.pulsar_subscriptions
        self.service.metrics.pulsar = await pulsar.served() if pulsar is not None else []
        body = generate_latest(self.service.metrics.registry)
        resp = web.Response(body=body)
        resp.headers["Content-Type"] = CONTENT_TYPE_LATEST
        return resp

    async def health(self, request: web.Request) -> web.Response:
        """Liveness: the event loop answers and the broker is not stopped."""
        if self.service.stopped:
            return web.Response(text="stopped\n", status=503)
        return web.Response(text="ok\n")

    async def ready(self, request: web.Request) -> web.Response:
        """Readiness: topics loaded, every listener accepting, both stores writable (probed) and every
        __consumer_offsets partition loaded; 503 with the reasons, one a line, otherwise. Probe results
        are reused for a second, so frequent probes do not turn into a write load."""
        if not self.service.ready:
            return web.Response(text="not ready: starting or stopping\n", status=503)
        async with self._ready_lock:
            now = asyncio.get_running_loop().time()
            if self._ready_cache is None or now - self._ready_cache[0] >= 1.0:
                self._ready_cache = (now, await views.not_ready_reasons(self.service))
            reasons = self._ready_cache[1]
        if reasons:
            return web.Response(text="".join(f"not ready: {r}\n" for r in reasons), status=503)
        return web.Response(text="ok\n")

    # ------------------------------------------------------------------ admin v2
    async def clusters(self, request: web.Request) -> web.Response:
        return _json([self.service.config.clusterName])

    async def topic_list(self, request: web.Request) -> web.Response:
        m = request.match_info
        return _json(views.topic_list(self.service, m["tenant"], m["namespace"]))

    async def partitioned_topic_list(self, request: web.Request) -> web.Response:
        m = request.match_info
        return _json(views.partitioned_topic_list(self.service, m["tenant"], m["namespace"]))

    async def _ref(self, request: web.Request) -> views.TopicRef:
        m = request.match_info
        return await views.resolve_fresh(self.service, m["tenant"], m["namespace"], m["topic"])

    async def partitioned_metadata(self, request: web.Request) -> web.Response:
        if request.query.get("checkAllowAutoCreation", "").lower() == "true":  # an HTTP lookup client's
            if await lookup.auto_create(self, request, registry.ROLE_KEY):  # first call: kop/admin/lookup.py
                return _json({"partitions": 0})  # a non-partitioned topic its producer or consumer will create
        return _json(views.partitioned_metadata(await self._ref(request)))

    async def create_partitioned_topic(self, request: web.Request) -> web.Response:
        """Pulsar's createPartitionedTopic (body: the partition count): a Kafka topic with that many
        partitions and the broker's default configs; 204, 409 when it exists, as Pulsar answers."""
        m = request.match_info
        try:
            count = int(json.loads(await request.read() or b"null"))
        except (TypeError, ValueError):
            raise AdminError(400, "the body must be the number of partitions") from None
        await views.create_partitioned_topic(self.service, m["tenant"], m["namespace"], m["topic"], count)
        return web.Response(status=204)

    async def stats(self, request: web.Request) -> web.Response:
        ref = await self._ref(request)
        partition = views.need_partition(ref, "stats")
        await self._redirect_if_not_owner(request, ref, partition)
        return _json(await views.partition_stats(self.service, ref.topic, partition))

    async def partitioned_stats(self, request: web.Request) -> web.Response:
        per_partition = request.query.get("perPartition", "true").lower() != "false"
        ref = await self._ref(request)
        async with self._from_owners(request, ref, "stats", views.partition_stats) as source:
            return _json(await views.partitioned_stats(self.service, ref, per_partition, source))

    async def internal_stats(self, request: web.Request) -> web.Response:
        ref = await self._ref(request)
        partition = views.need_partition(ref, "internalStats")
        await self._redirect_if_not_owner(request, ref, partition)
        return _json(await views.internal_stats(self.service, ref.topic, partition))

    async def partitioned_internal_stats(self, request: web.Request) -> web.Response:
        ref = await self._ref(request)
        async with self._from_owners(request, ref, "internalStats", views.internal_stats) as source:
            return _json(await views.partitioned_internal_stats(self.service, ref, source))

    @contextlib.asynccontextmanager
    async def _from_owners(self, request: web.Request, ref: views.TopicRef, what: str,
                           local: Callable[..., Awaitable[dict[str, Any]]]) -> AsyncIterator[views.PartitionSource]:
        """Where each partition's part of a partitioned-* answer comes from: computed here for a partition
        this broker owns (always, in embedded mode), else asked of its owner's admin endpoint for that one
        partition, with the caller's credentials (kop/admin/fanout.py) - as Pulsar gathers partitioned stats
        from each partition's broker. Opening the partition here instead would take it from its owner (fence its
        ledger)."""
        ownership = self.service.ownership
        if not ownership.clustered:
            yield lambda p: local(self.service, ref.topic, p)
            return
        import aiohttp

        async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=30)) as session:
            async def source(p: int) -> dict[str, Any]:
                owner = await ownership.owner_of(ref.topic.name, p)
                if owner is None:
                    raise AdminError(412, f"Failed to find ownership for {ref.partition_name(p)}")
                if owner.broker_id == ownership.local.broker_id:
                    return await local(self.service, ref.topic, p)
                if not owner.web_url:
                    raise AdminError(412, f"{ref.partition_name(p)} is owned by broker {owner.broker_id}, "
                                          "which serves no admin HTTP (webServicePort=-1)")
                t = ref.topic.name
                url = (f"{owner.web_url.rstrip('/')}{V2}/persistent/{t.tenant}/{t.namespace}/"
                       f"{quote(f'{t.local}-partition-{p}', safe='')}/{what}")
                async with session.get(url, allow_redirects=False, headers=fanout.forwarded_headers(request)) as resp:
                    if resp.status != 200:
                        raise AdminError(503 if resp.status >= 300 else resp.status,
                                         f"broker {owner.broker_id} answered {resp.status} for "
                                         f"{ref.partition_name(p)}: {(await resp.text())[:200]}")
                    return await resp.json()

            yield source

    async def message_id_by_index(self, request: web.Request) -> web.Response:
        ref = await self._ref(request)
        index = views.parse_long(request.query, "index")
        await self._redirect_if_not_owner(request, ref, ref.partition)
        return _json(await views.message_id_by_index(self.service, ref, index))

    async def index_by_message_id(self, request: web.Request) -> web.Response:
        ref = await self._ref(request)
        q = request.query
        ledger_id = views.parse_long(q, "ledgerId")
        entry_id = views.parse_long(q, "entryId")
        batch_index = views.parse_long(q, "batchIndex", required=False, default=-1)
        await self._redirect_if_not_owner(request, ref, ref.partition)
        return _json(await views.index_by_message_id(self.service, ref, ledger_id, entry_id, batch_index))

    async def non_persistent(self, request: web.Request) -> web.Response:
        """Pulsar's merged PIP-415 answers 405 for non-persistent topics (the PIP text said 406); this
        broker has no non-persistent topics at all, so the answer is the same for any name."""
        return _json({"reason": "getMessageIdByIndex is not allowed for non-persistent topics"}, 405)

    async def _redirect_if_not_owner(self, request: web.Request, ref: views.TopicRef,
                                     partition: int | None) -> None:
        """In cluster mode, a call about one partition made to a broker that does not own it answers, as
        Pulsar's validateTopicOwnership does, 307 Temporary Redirect with Location = the owner's web URL +
        the same path and query (HTTP clients, kop-admin and pulsar-admin included, repeat the GET there).
        Why redirect rather than answer here: only the owner has the partition's managed ledger open, and
        opening it anywhere else would fence the owner's ledger - a stats call must not move a topic.

        The `authoritative` parameter does not stop the redirect (in Pulsar it only tells the receiver to
        take ownership of an unowned bundle; here a lookup takes an unowned bundle anyway). No owner found
        (no live broker chose it in time) -> 412, Pulsar's "Failed to find ownership". Embedded mode, and
        a name without a partition (resolved to 404 by the endpoints), never redirect."""
        ownership = self.service.ownership
        if partition is None or not ownership.clustered:
            return
        owner = await ownership.owner_of(ref.topic.name, partition)
        if owner is None:
            raise AdminError(412, f"Failed to find ownership for topic: persistent://{ref.topic.name.tenant}/"
                                  f"{ref.topic.name.namespace}/{ref.name}")
        if owner.broker_id == ownership.local.broker_id:
            return
        if not owner.web_url:
            raise AdminError(412, f"{ref.name} is owned by broker {owner.broker_id}, which serves no admin "
                                  "HTTP (webServicePort=-1)")
        location = owner.web_url.rstrip("/") + str(request.rel_url)
        log.debug("admin %s: partition owned by broker %d, redirecting to %s", request.path, owner.broker_id,
                  location)
        raise web.HTTPTemporaryRedirect(location)
