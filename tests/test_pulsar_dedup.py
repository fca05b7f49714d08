"""Pulsar de-duplication's decisions (kop/pulsar/dedup.py `Deduplication.check`, `failed`), sans-IO: Pulsar's
three answers - a new message, a resend of a stored one (DUP), a resend of one still being written (UNKNOWN,
never taken for a duplicate: issue #24's lost acknowledged messages after a lost ack quorum)."""

from __future__ import annotations

from typing import cast

from kop.pulsar.dedup import DUP, NOT_DUP, UNKNOWN, Deduplication
from kop.pulsar.subscription import PartitionState


def restored(persisted: dict[str, int]) -> Deduplication:
    """The state as a broker loads it from the partition's `pulsar.dedup` cursor (pushed = persisted)."""
    d = Deduplication(cast(PartitionState, None))  # the state is used by load/save only
    d.persisted, d.pushed = dict(persisted), dict(persisted)
    return d


def test_new_messages_then_resends_of_stored_ones():
    d = restored({"p": 4})
    assert d.check("p", 4, 4) == DUP and d.check("p", 0, 0) == DUP
    assert d.check("p", 5, 5) == NOT_DUP and d.check("p", 6, 8) == NOT_DUP  # a batch up to 8
    assert d.pushed["p"] == 8 and d.check("q", 0, 0) == NOT_DUP  # producers are independent


def test_a_resend_of_a_message_still_being_written_is_unknown_not_a_duplicate():
    """5 and 6 are pushed (their appends pending) when the connection drops; the client resends them: they may
    yet fail, so the resends are refused (the client sends again) rather than answered as stored."""
    d = restored({"p": 4})
    assert d.check("p", 5, 5) == NOT_DUP and d.check("p", 6, 6) == NOT_DUP
    assert d.check("p", 5, 5) == UNKNOWN and d.check("p", 6, 6) == UNKNOWN
    assert d.check("p", 4, 4) == DUP


def test_after_a_failed_append_the_resends_are_stored():
    d = restored({"p": 4})
    for seq in (5, 6, 7):
        assert d.check("p", seq, seq) == NOT_DUP
    d.failed("p")  # the append of 5 failed (and the ones behind it with it)
    assert [d.check("p", seq, seq) for seq in (5, 6, 7)] == [NOT_DUP] * 3



def test_a_failure_told_before_an_earlier_success_leaves_that_success_a_duplicate():
    """5 is durable and 6 fails in the next loop turn: the failure hook runs at once, before 5's callback records
    it as persisted. The reset must not leave 5 below the pushed id: its resend is a duplicate, not a second copy."""
    import asyncio

    async def run() -> None:
        d = restored({"p": 4})
        assert d.check("p", 5, 5) == NOT_DUP and d.check("p", 6, 6) == NOT_DUP
        d.failed("p")  # 6's hook: pushed back to the persisted 4
        d.persisted_up_to("p", 5, 6)  # 5's callback, a turn later
        if d._saver is not None:
            d._saver.cancel()  # no cursor store here: the snapshot's write is not the point
        assert d.check("p", 5, 5) == DUP and d.check("p", 6, 6) == NOT_DUP

    asyncio.run(run())

def test_a_producer_cancelled_while_the_state_loads_leaves_the_load_to_the_others():
    """Two PRODUCERs of a partition wait for its de-duplication state; one's connection closes (its command
    cancelled). The other still gets the loaded state, and so does every later PRODUCER: the shared future,
    awaited directly, was cancelled with the first and stayed so - each later PRODUCER then ended its
    connection's command loop with a CancelledError, leaving the connection open and deaf."""
    import asyncio

    async def run() -> None:
        d = Deduplication(cast(PartitionState, None))
        gate = asyncio.Event()
        loads = []

        async def load() -> None:  # the snapshot and the replay (a read of the metadata store and the log)
            loads.append(1)
            await gate.wait()
            d.persisted = {"p": 4}

        d._load = load  # type: ignore[method-assign]
        first = asyncio.ensure_future(d.load())
        await asyncio.sleep(0)
        second = asyncio.ensure_future(d.load())
        await asyncio.sleep(0)
        second.cancel()  # its connection closed
        await asyncio.sleep(0)
        gate.set()
        await first
        await asyncio.wait_for(d.load(), 1)  # a later PRODUCER: loaded, not cancelled
        assert loads == [1] and d.last_sequence_id("p") == 4

    asyncio.run(run())
