"""Pulsar admin v2 for non-persistent topics (`/admin/v2/non-persistent/...`), over the pulsar handler's in-memory
topics (kop/pulsar/nonpersistent.py, through kop/services.py PulsarNonPersistent).

- `GET /admin/v2/non-persistent/{tenant}/{namespace}`: the non-persistent topics served now (partitions by their
  `-partition-N` names), as Pulsar lists the active ones; 404 "Namespace does not exist".
- `GET .../{namespace}/partitioned`: the partitioned non-persistent topics.
- `PUT .../{topic}/partitions` (body: the partition count): createPartitionedTopic; 204, 409 "This topic already
  exists", 406 for a count below 1. `GET .../{topic}/partitions`: {"partitions": N, "deleted": false}, N = 0 for a
  topic that is not partitioned. `DELETE .../{topic}/partitions`: 204, 404 "Topic ... not found.". A namespace
  with non-persistent topics (served now, or partitioned ones) is not deleted: 409 "Cannot delete non empty
  namespace" (kop/admin/namespaces.py).
- `GET .../{topic}/stats`: Pulsar's NonPersistentTopicStats of a topic or partition served now (msgDropRate and
  per-subscription msgDropRate, plus our msgDropCount), 404 "Topic not found" otherwise. `GET
  .../{topic}/partitioned-stats`: the partitions' counters summed, with `metadata` and (perPartition, the default)
  each partition's stats.
Differences: in cluster mode a broker answers stats for the topics it serves itself (no redirect to the owner).
"""

from __future__ import annotations

import functools
import json
from collections.abc import Iterable
from typing import TYPE_CHECKING

from aiohttp import web

from kop.admin import views
from kop.admin.views import AdminError
from kop.services import PulsarNonPersistent
from kop.topics.names import InvalidTopicName, TopicName, check_local_name

if TYPE_CHECKING:
    from kop.admin.server import AdminServer

_SUMMED = ("msgInCounter", "bytesInCounter", "msgOutCounter", "bytesOutCounter", "msgDropRate")
Stats = dict[str, object]


def add_routes(server: AdminServer, r: web.UrlDispatcher, v2: str) -> None:
    ns_path = v2 + "/non-persistent/{tenant}/{namespace}"
    topic_path = ns_path + "/{topic}"
    routes = (
        (r.add_get, ns_path, topic_list), (r.add_get, ns_path + "/partitioned", partitioned_list),
        (r.add_put, topic_path + "/partitions", create_partitioned), (r.add_get, topic_path + "/partitions", partitions),
        (r.add_delete, topic_path + "/partitions", delete_partitioned), (r.add_get, topic_path + "/stats", stats),
        (r.add_get, topic_path + "/partitioned-stats", partitioned_stats),
    )
    for add, path, fn in routes:
        add(path, functools.partial(fn, server))


def _served(server: AdminServer) -> PulsarNonPersistent:
    np = server.service.pulsar_non_persistent
    if np is None:
        raise AdminError(404, "non-persistent topics are served by the pulsar protocol handler, which is off")
    return np


def _name(server: AdminServer, request: web.Request) -> TopicName:
    """The topic a URL names (a partition's name included), 404 for an unknown namespace, 412 for a bad name."""
    m = request.match_info
    views.check_namespace(server.service, m["tenant"], m["namespace"])
    partition = views.PARTITION_SUFFIX.match(m["topic"])
    try:
        check_local_name(partition["base"] if partition else m["topic"])
    except InvalidTopicName as e:
        raise AdminError(412, str(e)) from None
    return TopicName(m["tenant"], m["namespace"], m["topic"])


async def topic_list(server: AdminServer, request: web.Request) -> web.Response:
    m = request.match_info
    views.check_namespace(server.service, m["tenant"], m["namespace"])
    return web.json_response(_served(server).served(m["tenant"], m["namespace"]))


async def partitioned_list(server: AdminServer, request: web.Request) -> web.Response:
    m = request.match_info
    views.check_namespace(server.service, m["tenant"], m["namespace"])
    return web.json_response(await _served(server).partitioned_names(m["tenant"], m["namespace"]))


async def create_partitioned(server: AdminServer, request: web.Request) -> web.Response:
    topic = _name(server, request)
    try:
        count = int(json.loads(await request.read() or b"null"))
    except (TypeError, ValueError):
        raise AdminError(400, "the body must be the number of partitions") from None
    if count < 1:
        raise AdminError(406, "Number of partitions should be more than 0")
    if not await _served(server).create_partitioned(topic, count):
        raise AdminError(409, "This topic already exists")
    return web.Response(status=204)


async def partitions(server: AdminServer, request: web.Request) -> web.Response:
    count = await _served(server).partitions(_name(server, request))
    return web.json_response({"partitions": count, "deleted": False})


async def delete_partitioned(server: AdminServer, request: web.Request) -> web.Response:
    topic = _name(server, request)
    if not await _served(server).delete_partitioned(topic):
        raise AdminError(404, f"Topic non-persistent://{topic.tenant}/{topic.namespace}/{topic.local} not found.")
    return web.Response(status=204)


async def stats(server: AdminServer, request: web.Request) -> web.Response:
    topic = _name(server, request)
    m = views.PARTITION_SUFFIX.match(topic.local)
    base, partition = (TopicName(topic.tenant, topic.namespace, m["base"]), int(m["index"])) if m else (topic, None)
    got = _served(server).stats(base, partition)
    if got is None:
        raise AdminError(404, "Topic not found")
    return web.json_response(got)


async def partitioned_stats(server: AdminServer, request: web.Request) -> web.Response:
    topic = _name(server, request)
    n = await _served(server).partitions(topic)
    if n == 0:
        raise AdminError(404, "Partitioned topic does not exist")
    per: dict[str, Stats] = {}
    for i in range(n):
        got = _served(server).stats(topic, i)
        if got is not None:
            per[f"non-persistent://{topic.tenant}/{topic.namespace}/{topic.local}-partition-{i}"] = got
    out: Stats = {k: _total(per.values(), k) for k in _SUMMED}
    out["metadata"] = {"partitions": n, "deleted": False}
    if request.query.get("perPartition", "true").lower() != "false":
        out["partitions"] = per
    return web.json_response(out)


def _total(parts: Iterable[Stats], key: str) -> int | float:
    """The sum of one field over the partitions' stats (a counter stays an int, a rate a float)."""
    values = [v for p in parts if isinstance(v := p.get(key), int | float)]
    return sum(values) if values else 0
