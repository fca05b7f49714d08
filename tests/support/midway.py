"""A write held at a gate, so that a unit test can cancel the request awaiting it midway, as a client's
closed connection cancels its requests' tasks (docs/architecture.md, "A closed connection and the requests
it left")."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any


class HeldWrite:
    """Stands in for an async write: each call waits at the gate, then runs the real one. `issue_first`: the
    real write starts before the wait (its append issued, durable once the gate opens)."""

    def __init__(self, write: Callable[..., Awaitable[Any]], issue_first: bool = False) -> None:
        self.write = write
        self.issue_first = issue_first
        self.gate = asyncio.Event()
        self.entered = asyncio.Event()

    async def __call__(self, *args: Any, **kwargs: Any) -> Any:
        if self.issue_first:
            issued = asyncio.ensure_future(self.write(*args, **kwargs))
            self.entered.set()
            await self.gate.wait()
            return await asyncio.shield(issued)
        self.entered.set()
        await self.gate.wait()
        return await self.write(*args, **kwargs)

    async def cancel_midway(self, call: Awaitable[Any]) -> None:
        """Run `call` until it is inside the held write, cancel it there, then let the write go on."""
        self.gate.clear()
        self.entered.clear()
        task = asyncio.ensure_future(call)
        await self.entered.wait()
        task.cancel()
        await asyncio.sleep(0)
        assert task.cancelled() or task.done()
        self.gate.set()
