"""Pulsar admin v2's topic compaction endpoints: `PUT .../compaction` triggers it, `GET .../compaction` answers its
LongRunningProcessStatus ({"status": NOT_RUN|RUNNING|SUCCESS|ERROR, "lastError": ...}).

As Pulsar's PersistentTopics: the trigger answers 204 at once (the compaction runs in the background), on a
partitioned topic's base name it starts one per partition (in cluster mode each by the partition's owner:
kop/admin/fanout.py), and a trigger while one runs is 409 "Compaction already in progress"; the status is per
partition (a base name is 404 naming a partition, as the other per-partition endpoints here answer). What a compaction
does - and what it means on a topic whose cleanup.policy is delete - is kop/pulsar/compacted.py's. The work is done by
the pulsar handler behind kop/services.py's `PulsarSubscriptions`; without the pulsar handler both endpoints answer
404 (no Pulsar topic is served).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from aiohttp import web

from kop.admin import fanout, views
from kop.admin.views import AdminError
from kop.services import PulsarSubscriptions, SubscriptionError

if TYPE_CHECKING:
    from kop.admin.server import AdminServer

NO_CONTENT = 204


def add_routes(server: AdminServer, r: web.UrlDispatcher, topic_path: str) -> None:
    h = _Handlers(server)
    r.add_put(topic_path + "/compaction", h.trigger)
    r.add_get(topic_path + "/compaction", h.status)


class _Handlers:
    def __init__(self, server: AdminServer) -> None:
        self.server = server

    def _api(self) -> PulsarSubscriptions:
        api = self.server.service.pulsar_subscriptions
        if api is None:
            raise AdminError(404, "Topic compaction needs the Pulsar protocol (messagingProtocols=...,pulsar)")
        return api

    async def trigger(self, request: web.Request) -> web.Response:
        ref = await self.server._ref(request)
        api = self._api()
        async def here(p: int) -> None:
            try:
                await api.trigger_compaction(ref.topic, p)
            except SubscriptionError as e:
                raise AdminError(e.status, e.reason) from None

        if ref.partition is not None:
            await self.server._redirect_if_not_owner(request, ref, ref.partition)
            await here(ref.partition)
        else:  # each partition by its owner (kop/admin/fanout.py), as Pulsar's broker forwards it
            await fanout.each_partition(self.server.service, request, ref, here, fanout.nothing)
        return web.Response(status=NO_CONTENT)

    async def status(self, request: web.Request) -> web.Response:
        ref = await self.server._ref(request)
        partition = views.need_partition(ref, "compaction status")
        api = self._api()
        await self.server._redirect_if_not_owner(request, ref, partition)
        return web.json_response(await api.compaction_status(ref.topic, partition))
