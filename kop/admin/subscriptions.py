"""Pulsar admin v2's subscription endpoints: list, create at a position, delete, reset cursor (by time, by
message id), skip, skip_all (clear backlog), expireMessages, peek (`position/{n}`).

Paths, status codes and bodies are Apache Pulsar 4.x's (PersistentTopics): 204 No Content for a change, 404
"Subscription <sub> not found for topic <partition, or the non-partitioned topic>" (a partitioned topic's base
name in a delete: "Subscription not found"), 409 "Subscription already exists for topic", 412 "Subscription has active connected
consumers" (delete without force), 405 for what Pulsar refuses on a partitioned topic's base name (skip, peek,
reset to a message id). On a base name, list / create / delete / reset by time / skip_all / expire act on every
partition, as Pulsar does - in cluster mode each partition by its owner (kop/admin/fanout.py). The work is done by the pulsar handler behind kop/services.py's
`PulsarSubscriptions`; without the pulsar handler every endpoint answers 404 (no subscription exists).
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

from aiohttp import web

from kop.admin import fanout
from kop.admin.views import AdminError
from kop.services import PulsarSubscriptions, SubscriptionError

if TYPE_CHECKING:
    from kop.admin.server import AdminServer

SUB = "/subscription/{subscription}"
NO_CONTENT = 204


def add_routes(server: AdminServer, r: web.UrlDispatcher, topic_path: str) -> None:
    h = _Handlers(server)
    r.add_get(topic_path + "/subscriptions", h.list)
    r.add_put(topic_path + SUB, h.create)
    r.add_delete(topic_path + SUB, h.delete)
    r.add_post(topic_path + SUB + "/resetcursor/{timestamp}", h.reset_time)
    r.add_post(topic_path + SUB + "/resetcursor", h.reset_position)
    r.add_post(topic_path + SUB + "/skip/{count}", h.skip)
    r.add_post(topic_path + SUB + "/skip_all", h.skip_all)
    r.add_post(topic_path + SUB + "/expireMessages/{seconds}", h.expire)
    r.add_post(topic_path + "/all_subscription/expireMessages/{seconds}", h.expire_all)
    r.add_get(topic_path + SUB + "/position/{n}", h.peek)


def _long(request: web.Request, name: str) -> int:
    text = request.match_info[name]
    try:
        return int(text)
    except ValueError:
        raise AdminError(400, f"{name} must be an integer, got {text!r}") from None


async def _position(request: web.Request) -> tuple[int, int, bool, int]:
    """(ledgerId, entryId, isExcluded, partitionIndex) from a ResetCursorData / MessageIdImpl body;
    no body = MessageId.latest (what pulsar-admin's create-subscription defaults to)."""
    raw = await request.read()
    if not raw.strip():
        return (1 << 63) - 1, (1 << 63) - 1, False, -1
    try:
        body = json.loads(raw)
        return (int(body.get("ledgerId", -1)), int(body.get("entryId", -1)), bool(body.get("isExcluded", False)),
                int(body.get("partitionIndex", -1)))
    except (ValueError, AttributeError, TypeError):
        raise AdminError(400, "the body must be a message id: {\"ledgerId\": ..., \"entryId\": ...}") from None


class _Handlers:
    def __init__(self, server: AdminServer) -> None:
        self.server = server

    @property
    def api(self) -> PulsarSubscriptions | None:
        return self.server.service.pulsar_subscriptions

    async def _each(self, request: web.Request, op: Callable[[PulsarSubscriptions, Any, int], Awaitable[Any]],
                    base_allowed: str | None = None) -> list[Any]:
        """Run `op(api, topic, partition)` on the partition the URL names, or (base name) on each
        partition; `base_allowed` is the 405 reason when Pulsar refuses the base name."""
        ref = await self.server._ref(request)
        api = self.api
        if api is None:
            raise AdminError(404, "Subscription not found")
        sub = request.match_info.get("subscription")

        async def here(p: int) -> object:
            try:
                return await op(api, ref.topic, p)
            except SubscriptionError as e:
                if e.status == 404 and sub is not None:  # Pulsar names the subscription and the partition
                    shown = ref.partition_name(p) if ref.topic.partitioned else ref.base_name
                    raise AdminError(404, f"Subscription {sub} not found for topic {shown}") from None
                raise AdminError(e.status, e.reason) from None

        if ref.partition is not None:
            await self.server._redirect_if_not_owner(request, ref, ref.partition)
            return [await here(ref.partition)]
        if base_allowed is not None:
            raise AdminError(405, base_allowed)
        # each partition by its owner: this broker for its own, the owner's admin REST for the others (fanout.py)
        return await fanout.each_partition(self.server.service, request, ref, here, fanout.same)

    async def list(self, request: web.Request) -> web.Response:
        if self.api is None:
            await self.server._ref(request)  # still 404 for an unknown topic
            return web.json_response([])
        found = await self._each(request, lambda a, t, p: a.names(t, p))
        return web.json_response(sorted({n for names in found for n in names}))

    async def create(self, request: web.Request) -> web.Response:
        sub = request.match_info["subscription"]
        ledger, entry, _excluded, _part = await _position(request)
        ref = await self.server._ref(request)
        api = self.api
        if ref.partition is None and api is not None:  # Pulsar: 409 when any partition has it already

            async def names(p: int) -> list[str]:
                try:
                    return await api.names(ref.topic, p)
                except SubscriptionError as e:
                    raise AdminError(e.status, e.reason) from None

            found = await fanout.each_partition(self.server.service, request, ref, names, fanout.names,
                                                method="GET", suffix="subscriptions")
            if any(sub in got for got in found):
                raise AdminError(409, "Subscription already exists for topic")
        await self._each(request, lambda a, t, p: a.create(t, p, sub, ledger, entry))
        return web.Response(status=NO_CONTENT)

    async def delete(self, request: web.Request) -> web.Response:
        sub = request.match_info["subscription"]
        force = request.query.get("force", "false").lower() == "true"
        try:
            await self._each(request, lambda a, t, p: a.delete(t, p, sub, force))
        except AdminError as e:
            # a partitioned topic's base name: Pulsar gathers its partitions' refusals into its plain words
            if e.status == 404 and e.reason.startswith(f"Subscription {sub} not found") and \
                    (await self.server._ref(request)).partition is None:
                raise AdminError(404, "Subscription not found") from None
            raise
        return web.Response(status=NO_CONTENT)

    async def reset_time(self, request: web.Request) -> web.Response:
        sub = request.match_info["subscription"]
        ts = _long(request, "timestamp")
        await self._each(request, lambda a, t, p: a.reset_to_time(t, p, sub, ts))
        return web.Response(status=NO_CONTENT)

    async def reset_position(self, request: web.Request) -> web.Response:
        sub = request.match_info["subscription"]
        ledger, entry, excluded, _part = await _position(request)
        await self._each(request, lambda a, t, p: a.reset_to_position(t, p, sub, ledger, entry, excluded),
                         base_allowed="Reset-cursor at position is not allowed for partitioned-topic")
        return web.Response(status=NO_CONTENT)

    async def skip(self, request: web.Request) -> web.Response:
        sub = request.match_info["subscription"]
        n = _long(request, "count")
        await self._each(request, lambda a, t, p: a.skip(t, p, sub, n),
                         base_allowed="Skip messages on a partitioned topic is not allowed")
        return web.Response(status=NO_CONTENT)

    async def skip_all(self, request: web.Request) -> web.Response:
        sub = request.match_info["subscription"]
        await self._each(request, lambda a, t, p: a.skip_all(t, p, sub))
        return web.Response(status=NO_CONTENT)

    async def expire(self, request: web.Request) -> web.Response:
        sub = request.match_info["subscription"]
        seconds = _long(request, "seconds")
        await self._each(request, lambda a, t, p: a.expire(t, p, sub, seconds))
        return web.Response(status=NO_CONTENT)

    async def expire_all(self, request: web.Request) -> web.Response:
        seconds = _long(request, "seconds")

        async def op(a: PulsarSubscriptions, t: Any, p: int) -> None:
            for name in await a.names(t, p):
                await a.expire(t, p, name, seconds)

        await self._each(request, op)
        return web.Response(status=NO_CONTENT)

    async def peek(self, request: web.Request) -> web.Response:
        sub = request.match_info["subscription"]
        n = _long(request, "n")
        got = await self._each(request, lambda a, t, p: a.peek(t, p, sub, n),
                               base_allowed="Peek messages on a partitioned topic is not allowed")
        headers, body = got[0]
        # application/json is what Pulsar 4.0 labels the raw payload with; the Java client reads the bytes
        return web.Response(body=body, headers=headers, content_type="application/json")
