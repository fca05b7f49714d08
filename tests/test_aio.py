"""kop/aio.py: keyed single flight and the periodic task every background chore runs on."""

from __future__ import annotations

import asyncio
import logging

import pytest

from kop.aio import PeriodicTask, SingleFlight


async def test_concurrent_calls_for_one_key_share_one_run():
    flight: SingleFlight[str, object] = SingleFlight()
    gate = asyncio.Event()
    runs = []

    async def opener() -> object:
        runs.append(1)
        await gate.wait()
        return object()

    calls = [asyncio.create_task(flight.run("a", opener)) for _ in range(5)]
    other = asyncio.create_task(flight.run("b", opener))
    await asyncio.sleep(0)
    assert "a" in flight and "b" in flight
    gate.set()
    results = await asyncio.gather(*calls)
    assert all(r is results[0] for r in results)
    assert await other is not results[0]
    assert len(runs) == 2  # one per key
    assert "a" not in flight  # nothing is cached once the run ended


async def test_a_failed_run_fails_every_waiter_and_the_next_call_runs_again():
    flight: SingleFlight[str, int] = SingleFlight()
    gate = asyncio.Event()
    attempts = 0

    async def opener() -> int:
        nonlocal attempts
        attempts += 1
        await gate.wait()
        if attempts == 1:
            raise OSError("disk gone")
        return 7

    calls = [asyncio.create_task(flight.run("k", opener)) for _ in range(3)]
    await asyncio.sleep(0)
    gate.set()
    for c in calls:
        with pytest.raises(OSError):
            await c
    assert await flight.run("k", opener) == 7
    assert attempts == 2


async def test_a_cancelled_waiter_does_not_cancel_the_run_the_others_wait_for():
    flight: SingleFlight[str, str] = SingleFlight()
    gate = asyncio.Event()

    async def opener() -> str:
        await gate.wait()
        return "open"

    first = asyncio.create_task(flight.run("k", opener))
    waiter = asyncio.create_task(flight.run("k", opener))
    await asyncio.sleep(0)
    waiter.cancel()
    with pytest.raises(asyncio.CancelledError):
        await waiter
    gate.set()
    assert await first == "open"
    await flight.wait("k")  # nothing in progress: returns at once
    await flight.wait_all()



async def test_the_first_caller_cancelled_does_not_cancel_the_run_the_others_wait_for():
    """The first caller runs the opener; its request cancelled (its connection closed), the others still get the
    opened value - not a CancelledError of their own, which ended a Pulsar connection's command loop."""
    flight: SingleFlight[str, str] = SingleFlight()
    gate = asyncio.Event()
    runs = []

    async def opener() -> str:
        runs.append(1)
        await gate.wait()
        return "open"

    first = asyncio.create_task(flight.run("k", opener))
    await asyncio.sleep(0)
    waiter = asyncio.create_task(flight.run("k", opener))
    await asyncio.sleep(0)
    first.cancel()
    with pytest.raises(asyncio.CancelledError):
        await first
    assert "k" in flight  # the run goes on: a call now waits for it rather than opening again
    gate.set()
    assert await waiter == "open"
    assert runs == [1] and "k" not in flight

async def test_periodic_task_survives_a_failing_pass_and_stops():
    passes = []
    third = asyncio.Event()

    async def chore() -> None:
        passes.append(len(passes))
        if len(passes) == 1:
            raise RuntimeError("one bad pass")
        if len(passes) == 3:
            third.set()

    task = PeriodicTask("test-chore", 0, chore, logging.getLogger("test"))
    task.start()
    assert task.running
    await third.wait()  # the loop went on after the failure
    await task.stop()
    assert not task.running
    done = len(passes)
    await asyncio.sleep(0.01)
    assert len(passes) == done  # stopped for good
    await task.stop()  # a second stop is harmless


async def test_describe_task_names_the_innermost_await() -> None:
    """A stuck task is described down to the coroutine that waits, not just its outermost one."""
    from kop.aio import describe_task, describe_threads

    never: asyncio.Future[None] = asyncio.get_running_loop().create_future()

    async def inner() -> None:
        await never

    async def outer() -> None:
        await inner()

    task = asyncio.create_task(outer())
    await asyncio.sleep(0)
    text = describe_task(task)
    assert text.index("in outer") < text.index("in inner") and "waiting on <Future pending" in text
    assert "thread MainThread" in describe_threads()
    task.cancel()
