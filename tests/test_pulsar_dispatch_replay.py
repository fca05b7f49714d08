"""A Shared subscription's replay queue survives its dispatcher being stopped mid-read (kop/pulsar/subscription.py
`Subscription._step`, `_requeue`), sans-IO.

Issue #24's `bookie-quorum` trial: one acknowledged Pulsar record was in the log but never handed to the durable
subscription. While the ack quorum was lost, every SEND_ERROR made the client close its connection - the one its
consumer shared - so the consumer left and came back again and again. Each time it left, its unacknowledged
entries went to the replay queue; when it came back the dispatcher took the first of them off the queue and read it,
and when the consumer left again during that read (the next SEND_ERROR), `stop()` cancelled the dispatcher with the
entry taken off the queue: neither pending, nor queued, nor acknowledged, it was never sent again and the
subscription's mark-delete position stayed before it for good.

The same holds when the dispatcher fails (a read the storage cannot serve): it closes its consumers, and what they
were sent and had not acknowledged goes to the consumers that come back, as when they leave.

The subscription here is real; its partition, log and connections are minimal stand-ins (the log's read waits on a
gate, so the test decides when the read is under way), since the window is a single await that a real broker
only meets by chance.
"""

from __future__ import annotations

import asyncio
from types import SimpleNamespace
from typing import Any, cast

from kop.managed_ledger import Position
from kop.offset.api import FetchedBatch, ReadResult
from kop.pulsar.codec import commands as c
from kop.pulsar.subscription import SHARED, Consumer, Entry, PartitionState, Subscription
from kop.storage.api import StorageError

POS = Position(7, 3)  # the entry delivered to the first consumer, holding offset 0
POS2 = Position(7, 4)  # one delivered to the second consumer, holding offset 1


class GatedLog:
    """A partition log of one stored entry (offset 0) whose reads wait until the test opens the gate."""

    def __init__(self, fail: BaseException | None = None) -> None:
        self.fail = fail  # raised by reads once the gate opens (a read the storage cannot serve)
        self.gate = asyncio.Event()
        self.reading = asyncio.Event()  # set when a read is waiting on the gate
        self.log_start_offset = 0
        self.last_stable_offset = 1
        self.reads = 0

    async def read(self, offset: int, max_bytes: int) -> ReadResult:
        self.reads += 1
        self.reading.set()
        await self.gate.wait()
        if self.fail is not None:
            raise self.fail
        fb = FetchedBatch(0, 0, memoryview(b"batch"), POS)
        return ReadResult([fb], 1, None)

    async def load_transactions(self) -> None:
        return None

    def wait_for_append(self) -> asyncio.Future[None]:
        return asyncio.get_running_loop().create_future()  # nothing more is appended here


class Conn:
    """What the dispatcher uses of a client connection: the frames it was written."""

    backlogged = False
    protocol_version = 20
    broker_entry_metadata = False

    def __init__(self) -> None:
        self.consumers: dict[int, Consumer] = {}
        self.frames: list[bytes] = []
        self.wrote = asyncio.Event()

    def write(self, data: bytes) -> None:
        self.frames.append(data)
        self.wrote.set()

    def send(self, cmd: Any) -> None:
        pass


def partition(plog: GatedLog) -> PartitionState:
    config = SimpleNamespace(delayedDeliveryTickTimeMillis=1000, delayedDeliveryEnabled=True)
    handler = SimpleNamespace(config=config, service=SimpleNamespace(topics=SimpleNamespace(paused=False)))
    state = SimpleNamespace(plog=plog, handler=handler, partition=1, ledger_name="t-partition-1", subscriptions={},
                            converted=lambda fb: (b"headers-and-payload", 1, 0, (), -1))
    return cast(PartitionState, state)


def consumer(sub: Subscription, cid: int) -> tuple[Consumer, Conn]:
    conn = Conn()
    k = Consumer(cast(Any, conn), cid, sub, f"k{cid}", 0, None)
    k.permits = 100
    return k, conn


async def test_an_entry_being_replayed_when_the_last_consumer_leaves_is_replayed_to_the_next_one():
    plog = GatedLog()
    sub = Subscription(partition(plog), "chaos-durable", SHARED, False, 1)
    # The entry holding offset 0 went to a first consumer, which did not acknowledge it.
    first, _ = consumer(sub, 1)
    sub.consumers.append(first)
    sub.outstanding[POS] = Entry(POS, 0, 0)
    sub.pending[POS] = first
    first.pending.add(POS)
    second, _ = consumer(sub, 2)
    sub.add_consumer(second)  # the dispatcher starts; nothing to replay yet, nothing new to read

    sub.remove_consumer(first)  # its connection closed: its entry goes to the replay queue
    await asyncio.wait_for(plog.reading.wait(), 10)  # the dispatcher took it off the queue and reads it
    sub.remove_consumer(second)  # the last consumer leaves during that read: the dispatcher is stopped
    await asyncio.sleep(0)

    assert [e.position for e in sub.replay] == [POS], "the entry being replayed left the replay queue for good"
    assert POS in sub.outstanding and POS not in sub.pending

    third, conn = consumer(sub, 3)
    plog.gate.set()
    sub.add_consumer(third)
    await asyncio.wait_for(conn.wrote.wait(), 10)
    sub.stop()
    sent = c.message_id(POS.ledger_id, POS.entry_id, 1).SerializeToString()
    assert sent in conn.frames[0] and sub.pending[POS] is third and not sub.replay


async def test_an_entry_acknowledged_while_its_replay_read_was_cancelled_is_not_queued_again():
    plog = GatedLog()
    sub = Subscription(partition(plog), "chaos-durable", SHARED, False, 1)
    first, _ = consumer(sub, 1)
    sub.consumers.append(first)
    sub.outstanding[POS] = Entry(POS, 0, 0)
    sub.pending[POS] = first
    first.pending.add(POS)
    second, _ = consumer(sub, 2)
    sub.add_consumer(second)
    sub.remove_consumer(first)
    await asyncio.wait_for(plog.reading.wait(), 10)
    sub.ack([POS], cumulative=False)  # the first consumer's ack, sent before it left, arrives now
    sub.remove_consumer(second)
    await asyncio.sleep(0)
    assert not sub.replay and POS not in sub.outstanding and sub.mark_delete == POS


async def test_a_failed_dispatcher_hands_what_its_consumers_had_not_acknowledged_to_the_next_ones():
    plog = GatedLog(fail=StorageError("no bookie of the write set answered"))
    sub = Subscription(partition(plog), "chaos-durable", SHARED, False, 1)
    first, _ = consumer(sub, 1)
    second, _ = consumer(sub, 2)
    sub.consumers.append(first)
    for pos, k, offset in ((POS, first, 0), (POS2, second, 1)):
        sub.outstanding[pos] = Entry(pos, offset, offset)
        sub.pending[pos] = k
        k.pending.add(pos)
    sub.add_consumer(second)
    dispatcher = sub._task
    assert dispatcher is not None
    sub.remove_consumer(first)  # POS goes to the replay queue; the dispatcher reads it
    await asyncio.wait_for(plog.reading.wait(), 10)
    plog.gate.set()  # that read fails: the dispatcher fails and closes its consumers
    await asyncio.wait({dispatcher}, timeout=10)
    assert dispatcher.done() and not sub.consumers and not second.pending
    assert sorted(e.position for e in sub.replay) == [POS, POS2], "a closed consumer's entries were never sent again"
    assert not sub.pending


class HeldCursors:
    """The cursor store: a save waits until the test opens the gate; what is stored, by subscription."""

    def __init__(self) -> None:
        self.stored: dict[str, Any] = {}
        self.gate, self.saving = asyncio.Event(), asyncio.Event()

    async def save(self, ledger: str, name: str, info: Any, version: int) -> int:
        self.saving.set()
        await self.gate.wait()
        self.stored[name] = info
        return version + 1

    async def delete(self, ledger: str, name: str) -> None:
        self.stored.pop(name, None)


async def test_a_flush_or_unsubscribe_cancelled_with_its_connection_still_persists_the_cursor():
    """CLOSE_CONSUMER awaits the cursor's flush, UNSUBSCRIBE its deletion; the connection closing cancels them.
    Awaited directly, the cursor's saver was cancelled with them: the acks it had taken were never stored (no
    later save knew of them), and an unsubscribed cursor stayed stored, to come back at the next load."""
    plog = GatedLog()
    state = partition(plog)
    cursors = HeldCursors()
    state.handler.cursors = cursors  # type: ignore[attr-defined]
    for name, cancelled in (("closing", "flush"), ("unsubscribing", "delete")):
        sub = Subscription(state, name, SHARED, True, 1)
        state.subscriptions[name] = sub
        cursors.gate.set()
        sub.save()
        await sub.flush()  # the cursor is stored
        cursors.gate.clear()
        cursors.saving.clear()
        sub.mark_delete = POS
        sub.save()  # the client's ack
        task = asyncio.ensure_future(getattr(sub, cancelled)())
        await asyncio.wait_for(cursors.saving.wait(), 10)
        task.cancel()  # the connection closes
        await asyncio.sleep(0)
        cursors.gate.set()
        for _ in range(100):
            await asyncio.sleep(0.01)
        if cancelled == "flush":
            assert cursors.stored["closing"].mark_delete == POS, "the acknowledged position was never stored"
        else:
            assert "unsubscribing" not in cursors.stored, "the unsubscribed cursor stayed stored"
