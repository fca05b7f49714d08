"""kop/admin/gather.py: the per-partition calls of a cluster-mode admin call run a few at a time, and the answer is
the one a partition-order loop gives (results in order; of several failures, the lowest partition's)."""

from __future__ import annotations

import asyncio

import pytest

from kop.admin import gather
from kop.admin.views import AdminError


class Calls:
    """Per-partition calls that record how many run at once. Each waits for `release`, set once `limit` calls are
    inside or every call has started, so the calls really overlap and nothing depends on timing; with `gated`,
    each then also waits for its own turn (the test decides which partition's broker answers first)."""

    def __init__(self, n: int, limit: int, fail: dict[int, AdminError] | None = None, gated: bool = False) -> None:
        self.n, self.limit, self.fail, self.gated = n, limit, fail or {}, gated
        self.inside = self.peak = 0
        self.started: list[int] = []
        self.done: list[int] = []
        self.release = asyncio.Event()
        self.turns = {p: asyncio.Event() for p in range(n)}

    def call(self, p: int):
        async def run() -> str:
            self.started.append(p)
            self.inside += 1
            self.peak = max(self.peak, self.inside)
            if self.inside >= self.limit or len(self.started) == self.n:
                self.release.set()
            await self.release.wait()
            if self.gated:
                await self.turns[p].wait()
            self.inside -= 1
            self.done.append(p)
            if p in self.fail:
                raise self.fail[p]
            return f"answer-{p}"
        return run

    async def finish(self, p: int) -> None:
        """Let partition p's call end, and wait until it has."""
        self.turns[p].set()
        for _ in range(1000):  # loop turns, not time: a call that cannot end fails the test instead of hanging it
            if p in self.done:
                return
            await asyncio.sleep(0)
        raise AssertionError(f"partition {p}'s call did not end")


def test_results_in_partition_order_at_most_limit_at_once():
    async def main() -> None:
        calls = Calls(20, limit=4)
        got = await gather.in_order([calls.call(p) for p in range(20)], limit=4)
        assert got == [f"answer-{p}" for p in range(20)]
        assert calls.peak == 4  # overlapping, never more than the bound
        assert sorted(calls.started) == list(range(20))

    asyncio.run(main())


def test_one_at_a_time_with_limit_one():
    async def main() -> None:
        calls = Calls(5, limit=1)
        assert await gather.in_order([calls.call(p) for p in range(5)], limit=1) == [f"answer-{p}" for p in range(5)]
        assert calls.peak == 1 and calls.started == list(range(5))

    asyncio.run(main())


def test_the_lowest_partitions_failure_is_the_answer_whatever_ends_first():
    """Partitions 1 and 3 fail; 3 fails first in time (its broker is quicker): the answer is 1's, as a sequential
    loop (and Pulsar's allOf) gives - and every partition was still called."""
    async def main() -> None:
        fail = {1: AdminError(409, "Subscription already exists for topic"), 3: AdminError(412, "other")}
        calls = Calls(5, limit=5, fail=fail, gated=True)
        task = asyncio.ensure_future(gather.in_order([calls.call(p) for p in range(5)], limit=5))
        for p in [3, 4, 0, 2, 1]:
            await calls.finish(p)
        assert calls.done == [3, 4, 0, 2, 1]
        with pytest.raises(AdminError) as e:
            await task
        assert (e.value.status, str(e.value)) == (409, "Subscription already exists for topic")
        assert sorted(calls.started) == list(range(5))

    asyncio.run(main())


def test_a_bad_limit_is_refused():
    async def main() -> None:
        with pytest.raises(ValueError):
            await gather.in_order([], limit=0)

    asyncio.run(main())
