"""Run one call per partition a few at a time, and answer as if they had run in partition order.

Why: an admin call on a partitioned topic's base name in cluster mode asks each partition's owner over HTTP
(kop/admin/fanout.py, the partitioned stats of kop/admin/server.py). One at a time, a 100-partition topic costs 100
round trips end to end; Apache Pulsar starts every partition's call at once and waits for all of them
(FutureUtil.waitForAll). Here at most `limit` run at once, so a topic with thousands of partitions does not open
thousands of connections to the other brokers at one instant.

The answer does not depend on which broker is slowest: the results come back in the calls' order, and when some
fail, the failure of the lowest index is raised once every call has ended - the one a sequential loop would have
met first, and the one `CompletableFuture.allOf` over the partitions' futures reports (its tree gives the left
operand's failure precedence). Unlike the sequential loop, the partitions after a failed one are still called, as
in Pulsar, where every partition's call was already started.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Sequence
from typing import TypeVar

T = TypeVar("T")

LIMIT = 8  # partitions asked at once by one admin call


async def in_order(calls: Sequence[Callable[[], Awaitable[T]]], limit: int = LIMIT) -> list[T]:
    """Await every call, at most `limit` at a time; their results in the calls' order, or the exception of the
    lowest-indexed call that failed (raised after all have ended)."""
    if limit < 1:
        raise ValueError(f"limit must be at least 1, not {limit}")
    gate = asyncio.Semaphore(limit)

    async def one(call: Callable[[], Awaitable[T]]) -> T:
        async with gate:
            return await call()

    results = await asyncio.gather(*(one(c) for c in calls), return_exceptions=True)
    out: list[T] = []
    for r in results:
        if isinstance(r, BaseException):
            raise r
        out.append(r)
    return out
