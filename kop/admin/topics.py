"""Pulsar admin v2's topic creation and deletion for both kinds of topic (kop/topics/manager.py Topic.partitioned).

- `PUT /admin/v2/persistent/{tenant}/{namespace}/{topic}`: createNonPartitionedTopic - a topic of one partition stored
  under its own name, that Kafka clients see as partition 0; 204, 409 "This topic already exists" when a topic of
  that name exists (of either kind) or the name is an existing partition's, 412 for another `-partition-N` name
  (Pulsar's answer when no partitioned topic has that partition) or a name that is not a topic's.
- `DELETE .../{topic}`: deleteTopic, a non-partitioned topic; 404 "Topic ... not found" when none of that name
  exists, 409 for a partitioned topic's base name (Pulsar's message: call delete-partitioned-topic).
- `DELETE .../{topic}/partitions`: deletePartitionedTopic; 404 for a missing name, 409 for a non-partitioned topic.
- `PUT .../{topic}/unload`: unload (its Pulsar clients reconnect), every partition of a partitioned topic's base name.
Both deletions answer 412 while Pulsar producers or consumers are connected, unless `?force=true` (they are then
told to reconnect, and may auto-create the topic again, as on Pulsar). Kafka clients do not hold a topic.
Statuses and messages are Apache Pulsar 4.0's (checked by tests/e2e/test_pulsar_nonpartitioned.py).
`PUT .../partitions` (createPartitionedTopic) lives in kop/admin/server.py.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from aiohttp import web

from kop.admin import fanout, views
from kop.admin.views import AdminError
from kop.topics.manager import Topic, TopicError
from kop.topics.names import InvalidTopicName, TopicName, check_local_name

if TYPE_CHECKING:
    from kop.admin.server import AdminServer


def add_routes(server: AdminServer, r: web.UrlDispatcher, topic_path: str) -> None:
    async def create(request: web.Request) -> web.Response:
        m = request.match_info
        await create_non_partitioned(server, m["tenant"], m["namespace"], m["topic"])
        return web.Response(status=204)

    async def delete(request: web.Request) -> web.Response:
        await _delete(server, request, partitioned=False)
        return web.Response(status=204)

    async def delete_partitioned(request: web.Request) -> web.Response:
        await _delete(server, request, partitioned=True)
        return web.Response(status=204)

    async def unload(request: web.Request) -> web.Response:
        await _unload(server, request)
        return web.Response(status=204)

    r.add_put(topic_path, create)
    r.add_delete(topic_path, delete)
    r.add_delete(topic_path + "/partitions", delete_partitioned)
    r.add_put(topic_path + "/unload", unload)


async def _unload(server: AdminServer, request: web.Request) -> None:
    """Pulsar's unload: a partition's (or a non-partitioned topic's) Pulsar clients reconnect; a partitioned topic's
    base name unloads every partition, each by its owner (kop/admin/fanout.py); a partition owned by another broker
    is redirected (307) there. 404 for an unknown topic; 204 without the Pulsar protocol (nothing is loaded)."""
    ref = await server._ref(request)
    pulsar = server.service.pulsar_subscriptions

    async def here(p: int) -> None:
        if pulsar is not None:
            pulsar.unload(ref.topic, p)

    if ref.partition is not None or not ref.topic.partitioned:
        partition = ref.partition or 0
        await server._redirect_if_not_owner(request, ref, partition)
        await here(partition)
    else:
        await fanout.each_partition(server.service, request, ref, here, fanout.nothing)


async def create_non_partitioned(server: AdminServer, tenant: str, namespace: str, local: str) -> None:
    """Pulsar's createNonPartitionedTopic: 412 for a bad name, 409 when the name is taken by either kind."""
    service = server.service
    if not await service.topics.namespaces.exists(tenant, namespace):
        raise AdminError(404, "Namespace not found")  # Pulsar's words for a create, as for a partitioned one
    m = views.PARTITION_SUFFIX.match(local)
    if m:
        parent = service.topics.get(TopicName(tenant, namespace, m["base"]))
        if parent is not None and parent.partitioned and int(m["index"]) < parent.partitions:
            raise AdminError(409, "This topic already exists")
        raise AdminError(412, f"Can't create topic {local} with \"-partition-\" followed by numeric value: it names "
                              "a partition of a partitioned topic here")
    try:
        check_local_name(local)
    except InvalidTopicName as e:
        raise AdminError(412, str(e)) from None
    try:
        await service.topics.create(TopicName(tenant, namespace, local), 1, partitioned=False)
    except TopicError as e:
        if e.error == "TOPIC_ALREADY_EXISTS":
            raise AdminError(409, "This topic already exists") from None
        raise AdminError(412, e.message) from None


async def _delete(server: AdminServer, request: web.Request, partitioned: bool) -> None:
    m = request.match_info
    tenant, namespace, local = m["tenant"], m["namespace"], m["topic"]
    views.topic_list(server.service, tenant, namespace)  # 404 for an unknown namespace
    topic: Topic | None = None
    try:
        check_local_name(local)
        topic = server.service.topics.get(TopicName(tenant, namespace, local))
    except InvalidTopicName:
        pass
    shown = f"persistent://{tenant}/{namespace}/{local}"
    if topic is None or topic.internal:
        raise AdminError(404, f"Topic {shown} not found" + ("." if partitioned else ""))
    if topic.partitioned and not partitioned:
        raise AdminError(409, f"{shown} is a partitioned topic, instead of calling delete topic, please call "
                              "delete-partitioned-topic.")
    if partitioned and not topic.partitioned:
        raise AdminError(409, f"{shown} is a non-partitioned topic. Instead of calling delete-partitioned-topic "
                              "please call delete.")
    pulsar = server.service.pulsar_subscriptions
    if request.query.get("force", "false").lower() != "true" and pulsar is not None:
        async def here(p: int) -> int:
            return pulsar.connected(topic, p)

        # each partition's clients as its owner counts them (in cluster mode another broker's, from its stats)
        clients = sum(await fanout.each_partition(server.service, request, views.TopicRef(topic, None), here,
                                                  _clients, method="GET", suffix="stats"))
        if clients:  # Pulsar's answers (a partitioned topic's are per partition there, summed up here)
            raise AdminError(412, "Topic has active producers/subscriptions" if partitioned
                             else f"Topic has {clients} connected producers/consumers")
    await server.service.topics.delete(topic)


def _clients(stats: object) -> int:
    """Pulsar producers and consumers of a partition, from its TopicStats (publishers, subscriptions' consumers)."""
    if not isinstance(stats, dict):
        return 0
    subs = stats.get("subscriptions")
    publishers = stats.get("publishers")
    count = len(publishers) if isinstance(publishers, list) else 0
    for sub in subs.values() if isinstance(subs, dict) else ():
        consumers = sub.get("consumers") if isinstance(sub, dict) else None
        count += len(consumers) if isinstance(consumers, list) else 0
    return count
