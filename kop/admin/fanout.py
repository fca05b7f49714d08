"""A call on a partitioned topic's base name, done on every partition by the partition's owner (cluster mode).

Why: Apache Pulsar's broker answers a base-name call that acts on each partition - create, delete, reset (by time),
clear or expire a subscription, list the subscriptions, trigger compaction - by making that call for each partition
through its own admin client, which the broker that does not own the partition redirects to the owner
(PersistentTopicsBase: `pulsar().getAdminClient().topics().createSubscriptionAsync(partition, ...)` and the like).
So any broker of a cluster answers for the whole topic. Here, a partition this broker owns is served in process; any
other partition is asked of its owner with the same request (method, path with the partition's name, query, body,
and the caller's `Authorization`, so the owner authorizes the same role), following the owner's redirect when the
partition moved meanwhile. The partitions are asked a few at a time (kop/admin/gather.py: Pulsar starts them all at
once); an owner's refusal (4xx with Pulsar's `{"reason"}`) is the answer - of several, the lowest partition's, as
Pulsar's combined future fails with the first partition's error. Opening a partition here instead
would take it from its owner (fence its ledger) - which is why a call about one partition is redirected, not
served (AdminServer._redirect_if_not_owner).

Embedded mode, and a cluster broker that owns every partition, never leave the process.
"""

from __future__ import annotations

import functools
import json
import logging
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, TypeVar
from urllib.parse import quote

from aiohttp import ClientSession, ClientTimeout, web

from kop.admin import gather
from kop.admin.views import AdminError, TopicRef

if TYPE_CHECKING:
    from kop.services import BrokerServices

log = logging.getLogger("kop.admin")
T = TypeVar("T")

FORWARDED_HEADERS = ("Authorization", "Content-Type")
# /admin/v2/{persistent|non-persistent}/{tenant}/{namespace}/{topic}/...: the topic's segment, once split on "/"
TOPIC_SEGMENT = 6
TIMEOUT_S = 30


def forwarded_headers(request: web.Request) -> dict[str, str]:
    """The caller's headers a forwarded call carries: its credentials (the owner checks the same role) and body type."""
    return {h: request.headers[h] for h in FORWARDED_HEADERS if h in request.headers}


def partition_path(request: web.Request, ref: TopicRef, partition: int, suffix: str | None = None) -> str:
    """The request's path and query naming one partition instead of the base name; with `suffix` the part after the
    topic is that instead (a different call about the same partition)."""
    parts = request.rel_url.raw_path.split("/")
    local = ref.topic.name.local
    parts[TOPIC_SEGMENT] = quote(f"{local}-partition-{partition}" if ref.topic.partitioned else local, safe="")
    if suffix is not None:
        parts[TOPIC_SEGMENT + 1:] = [suffix]
    path = "/".join(parts)
    query = request.rel_url.raw_query_string
    return f"{path}?{query}" if query and suffix is None else path


async def each_partition(service: BrokerServices, request: web.Request, ref: TopicRef,
                         local: Callable[[int], Awaitable[T]], convert: Callable[[object], T], *,
                         method: str | None = None, suffix: str | None = None) -> list[T]:
    """`local(p)` for each partition of the base name this broker owns, the same call forwarded to the owner of each
    other one (with `method` / `suffix`: that call instead, e.g. a GET of `subscriptions`); the answers in partition
    order, a forwarded one as `convert` makes it of its JSON body (None when empty): what `local` would answer. 412 "Failed to find ownership"
    for a partition no live broker could take, as Pulsar answers. A non-partitioned topic is its one partition."""
    ownership = service.ownership
    parts = range(ref.topic.partitions)
    if not ownership.clustered:
        return [await local(p) for p in parts]
    body = await request.read() if method is None else b""
    headers = forwarded_headers(request)
    async with ClientSession(timeout=ClientTimeout(total=TIMEOUT_S)) as session:
        async def one(p: int) -> T:
            owner = await ownership.owner_of(ref.topic.name, p)
            if owner is None:
                raise AdminError(412, f"Failed to find ownership for topic: {ref.partition_name(p)}")
            if owner.broker_id == ownership.local.broker_id:
                return await local(p)
            if not owner.web_url:
                raise AdminError(412, f"{ref.partition_name(p)} is owned by broker {owner.broker_id}, which serves "
                                      "no admin HTTP (webServicePort=-1)")
            url = owner.web_url.rstrip("/") + partition_path(request, ref, p, suffix)
            return convert(await _forward(session, method or request.method, url, body, headers, owner.broker_id))

        # a few partitions at a time, answered as in partition order (kop/admin/gather.py)
        return await gather.in_order([functools.partial(one, p) for p in parts])


async def _forward(session: ClientSession, method: str, url: str, body: bytes, headers: dict[str, str],
                   broker_id: int) -> object:
    """One forwarded call: its JSON answer, or the owner's refusal as this broker's answer."""
    log.debug("admin: %s %s (broker %d owns the partition)", method, url, broker_id)
    async with session.request(method, url, data=body or None, headers=headers, max_redirects=3) as resp:
        text = await resp.text()
        if resp.status >= 300:
            try:
                reason = json.loads(text)["reason"]
            except (ValueError, KeyError, TypeError):
                reason = f"broker {broker_id} answered {resp.status}: {text[:200]}"
            raise AdminError(resp.status, str(reason))
        answer: object = json.loads(text) if text.strip() else None
        return answer


def nothing(answer: object) -> None:
    """`convert` for a call that answers no content (204)."""
    return None


def same(answer: object) -> object:
    """`convert` for a call whose JSON answer is taken as it is."""
    return answer


def names(answer: object) -> list[str]:
    """`convert` for a list of names (subscriptions)."""
    return [str(n) for n in answer] if isinstance(answer, list) else []
