"""A subscription reads about as many new entries as its consumers can take (kop/pulsar/subscription.py
`Subscription._read_bytes`), sans-IO.

Issue #24 (the chaos short form, `all-brokers-kill`: the tail of one partition - 727 and 2165 acknowledged records -
never handed to the durable subscription). After the restart the subscription was far behind: its cursor a few
hundred entries back, the producer resending a thousand pending messages. Each read of new entries asked for 1 MiB
of batches - about ten thousand entries of one small message - from BookKeeper, on a machine at a load of 17 that
took about 20 s, and the dispatcher sent the thousand its consumer had permits for and dropped the rest, to read
them again next time. It delivered about a thousand entries per 20 s while the producer wrote a hundred a second:
the subscription never caught up, and the tail was never delivered before the run ended. Now a read asks for about
as many entries as the consumers have permits for (the entries' size taken from the previous read).

The subscription is real; its log (entries of 100 bytes, each one record: one message), partition and connection are
minimal stand-ins that count what is read and sent.
"""

from __future__ import annotations

import asyncio
from types import SimpleNamespace
from typing import Any, cast

from kop.managed_ledger import Position
from kop.offset.api import FetchedBatch, ReadResult
from kop.pulsar.codec import commands as c
from kop.pulsar.subscription import SHARED, Consumer, PartitionState, Subscription

ENTRIES = 5000
ENTRY_BYTES = 100
PERMITS = 10  # what the consumer can take at a time (its receiver queue, here small)


class Log:
    """ENTRIES stored entries of one record each (offset n in entry n of ledger 7); counts the entries its reads
    return."""

    def __init__(self) -> None:
        self.log_start_offset = 0
        self.last_stable_offset = self.high_watermark = ENTRIES
        self.entries_read = 0

    async def read(self, offset: int, max_bytes: int) -> ReadResult:
        batches = []
        for n in range(offset, ENTRIES):
            if batches and (len(batches) + 1) * ENTRY_BYTES > max_bytes:
                break
            batches.append(FetchedBatch(n, n, memoryview(bytes(ENTRY_BYTES)), Position(7, n)))
        self.entries_read += len(batches)
        return ReadResult(batches, offset + len(batches), None)

    async def load_transactions(self) -> None:
        return None

    def is_aborted_batch(self, batch: Any, base_offset: int) -> bool:
        return False

    def wait_for_append(self) -> asyncio.Future[None]:
        return asyncio.get_running_loop().create_future()


class Conn:
    backlogged = False
    protocol_version = 20
    broker_entry_metadata = False

    def __init__(self) -> None:
        self.frames: list[bytes] = []
        self.wrote = asyncio.Event()

    def write(self, data: bytes) -> None:
        self.frames.append(data)
        if len(self.frames) % PERMITS == 0:
            self.wrote.set()

    def send(self, cmd: Any) -> None:
        pass


def partition(plog: Log) -> PartitionState:
    config = SimpleNamespace(delayedDeliveryTickTimeMillis=1000, delayedDeliveryEnabled=False)
    handler = SimpleNamespace(config=config, service=SimpleNamespace(topics=SimpleNamespace(paused=False)))
    state = SimpleNamespace(plog=plog, handler=handler, partition=0, ledger_name="t-partition-0", subscriptions={},
                            converted=lambda fb: (b"headers-and-payload", 1, 0, (), -1))
    return cast(PartitionState, state)


async def deliver(rounds: int) -> tuple[Log, Conn]:
    """The consumer takes PERMITS messages `rounds` times (a FLOW after each PERMITS it received)."""
    plog = Log()
    sub = Subscription(partition(plog), "chaos-durable", SHARED, True, 0)
    conn = Conn()
    k = Consumer(cast(Any, conn), 1, sub, "k1", 0, None)
    for _ in range(rounds):
        conn.wrote.clear()
        k.permits += PERMITS
        if sub.consumers:
            sub.wake()
        else:
            sub.add_consumer(k)
        await asyncio.wait_for(conn.wrote.wait(), 10)
    sub.stop()
    return plog, conn


def test_a_subscription_far_behind_reads_about_what_its_consumer_can_take():
    plog, conn = asyncio.run(deliver(rounds=3))
    assert len(conn.frames) == 3 * PERMITS
    # the first read guesses the entries' size from the smallest batch there is, the next ones know it: about one
    # consumer's permits per read, where 1 MiB was read each time before (all 5000 entries, three times over)
    assert plog.entries_read <= 3 * PERMITS + PERMITS, plog.entries_read


def test_entries_go_out_once_each_in_log_order():
    _, conn = asyncio.run(deliver(rounds=3))
    ids = [c.message_id(7, n, 0).SerializeToString() for n in range(3 * PERMITS)]
    assert all(mid in frame for mid, frame in zip(ids, conn.frames, strict=True))
