"""A SEND refused for the client to send again takes the producer's later SENDs on that connection with it
(kop/pulsar/produce.py `_accepting`), sans-IO.

Issue #24 (the chaos runs, `all-brokers-kill`: 8 acknowledged Pulsar records lost, their receipts naming no entry).
A restarted broker on a loaded machine let its ZooKeeper session lease lapse for a moment: the SEND read then was
answered ServiceNotReady (the client reconnects and sends it again), but the SENDs pipelined behind it on the same
connection were read once the lease was back, and stored. When the client sent the refused message again, its
sequence id was below the stored later ones: de-duplication answered it as a duplicate (a receipt naming no entry)
and it was never stored. Now a refused SEND fails the producer there, as a failed append does: the later SENDs are
refused too, and the client resends them all, in order, on its next connection.

`send` is real, with the partition's de-duplication; the connection, the partition's seam (its appends are
recorded and answered at once) and the policies are minimal stand-ins: the window is the lease lapsing between two
pipelined SENDs, which a real broker only meets by chance.
"""

from __future__ import annotations

import asyncio
from types import SimpleNamespace
from typing import Any, cast

from kop.managed_ledger import Position
from kop.pulsar.codec import commands as c
from kop.pulsar.codec.framing import FrameReader, encode_message
from kop.pulsar.connection import PulsarConnection
from kop.pulsar.dedup import Deduplication
from kop.pulsar.produce import Producer, send
from kop.pulsar.subscription import PartitionState
from kop.topics.names import TopicName

NAME = "chaos-producer"


class Seam:
    """The partition's seam: every append is durable at once; what was stored, by sequence id."""

    def __init__(self) -> None:
        self.topic = SimpleNamespace(name=TopicName("public", "default", "chaos"))
        self.stored: list[int] = []

    async def issue_entry(self, batch: Any, writer: Any, header: Any, name: str, seq: int,
                          on_failed: Any = None) -> asyncio.Future[Any]:
        self.stored.append(seq)
        done = asyncio.get_running_loop().create_future()
        done.set_result((Position(9, len(self.stored) - 1), len(self.stored) - 1))
        return done


class Cursors:
    """The cursor store de-duplication writes its snapshot to."""

    async def save(self, ledger: str, name: str, info: Any, version: int) -> int:
        return version + 1


async def sent(conn: Conn, seq: int) -> None:
    """One SEND handled, then what it left for the loop (an append's receipt) before the next command is read."""
    await send(cast(PulsarConnection, conn), frame(seq))
    await asyncio.sleep(0)


class Conn:
    """What `send` uses of a connection: its producers, the broker's serving state and policies; the answers."""

    checksum_failed = False

    def __init__(self, state: Any, paused: bool) -> None:
        namespaces = SimpleNamespace(effective=lambda name, key: None)  # the broker's setting decides
        topics = SimpleNamespace(paused=paused, namespaces=namespaces)
        self.handler = SimpleNamespace(service=SimpleNamespace(topics=topics),
                                       config=SimpleNamespace(maxMessageSize=5 << 20, brokerDeduplicationEnabled=True))
        self.producers: dict[int, Producer] = {}
        self.answers: list[Any] = []
        self.state = state

    def open_producer(self) -> Producer:
        p = Producer(cast(PulsarConnection, self), 1, NAME, cast(PartitionState, self.state), False)
        self.producers[1] = p
        return p

    def send(self, cmd: Any) -> None:
        self.answers.append(cmd)


def connected(seam: Seam) -> Conn:
    """A connection with the producer open on a partition over `seam`, its de-duplication loaded and empty."""
    state = SimpleNamespace(partition=0, producers={}, seam=seam, msg_in=0, bytes_in=0, ledger_name="chaos-0",
                            handler=SimpleNamespace(cursors=Cursors()))
    state.dedup = Deduplication(cast(PartitionState, state))
    state.dedup._loaded = True  # nothing stored yet: loaded, empty
    conn = Conn(state, paused=False)
    conn.open_producer()
    return conn


def frame(seq: int) -> Any:
    md = c.MessageMetadata(producer_name=NAME, sequence_id=seq, publish_time=1)
    return FrameReader().frames(encode_message(c.command(c.SEND, producer_id=1, sequence_id=seq), md, b"v%d" % seq))[0]


def outcome(cmd: Any) -> tuple[int, str]:
    """(sequence id, 'stored' | 'duplicate' | the error's name) of one answer to a SEND."""
    if cmd.type == c.SEND_RECEIPT:
        receipt = cmd.send_receipt
        return receipt.sequence_id, "duplicate" if receipt.message_id.ledgerId == (1 << 64) - 1 else "stored"
    return cmd.send_error.sequence_id, c.pb.ServerError.Name(cmd.send_error.error)


async def scenario() -> tuple[list[tuple[int, str]], list[int]]:
    seam = Seam()
    conn = connected(seam)
    await sent(conn, 0)  # stored
    conn.handler.service.topics.paused = True  # the lease lapses as SEND 1 is read ...
    await sent(conn, 1)
    conn.handler.service.topics.paused = False  # ... and is back before SEND 2, pipelined behind it, is read
    await sent(conn, 2)
    conn.open_producer()  # the client reconnects (its producer again) and resends what it was not answered
    for seq in (1, 2):
        await sent(conn, seq)
    return [outcome(a) for a in conn.answers], seam.stored


def test_sends_behind_a_refused_one_are_refused_too_and_every_message_is_stored_once_in_order():
    answers, stored = asyncio.run(scenario())
    assert stored == [0, 1, 2]  # without the refusal of 2 it was stored before 1, and 1's resend was a "duplicate"
    assert answers == [(0, "stored"), (1, "ServiceNotReady"), (2, "PersistenceError"), (1, "stored"), (2, "stored")]


class HeldSeam(Seam):
    """A seam whose next append is prepared until `gate` opens (a large batch recompressed in a thread)."""

    def __init__(self) -> None:
        super().__init__()
        self.gate = asyncio.Event()
        self.gate.set()
        self.entered = asyncio.Event()

    async def issue_entry(self, batch: Any, writer: Any, header: Any, name: str, seq: int,
                          on_failed: Any = None) -> asyncio.Future[Any]:
        self.entered.set()
        await self.gate.wait()
        return await super().issue_entry(batch, writer, header, name, seq, on_failed)


async def cancelled_scenario() -> tuple[list[tuple[int, str]], list[int]]:
    seam = HeldSeam()
    conn = connected(seam)
    await sent(conn, 0)  # stored
    seam.gate.clear()
    seam.entered.clear()
    task = asyncio.ensure_future(send(cast(PulsarConnection, conn), frame(1)))
    await seam.entered.wait()
    task.cancel()  # the connection closes while SEND 1 is prepared: its command task is cancelled
    await asyncio.sleep(0)
    assert task.cancelled()
    seam.gate.set()
    conn.open_producer()  # the client reconnects and resends what it was not answered
    await sent(conn, 1)
    await sent(conn, 2)
    return [outcome(a) for a in conn.answers], seam.stored


def test_a_send_cancelled_before_its_append_is_stored_when_resent():
    """A SEND whose command task is cancelled (its connection closed) before its append was issued leaves no
    trace in de-duplication: the resend on the next connection is stored, not answered PersistenceError ("still
    being persisted") forever."""
    answers, stored = asyncio.run(cancelled_scenario())
    assert stored == [0, 1, 2]
    assert answers == [(0, "stored"), (1, "stored"), (2, "stored")]


class FailingSeam(Seam):
    """A seam whose appends stay in flight until `fail` fails them all as the managed ledger does: each one's
    failure hook at once, in order, then its future (whose callbacks run a loop turn later)."""

    def __init__(self) -> None:
        super().__init__()
        self.in_flight: list[tuple[int, Any, asyncio.Future[Any]]] = []

    async def issue_entry(self, batch: Any, writer: Any, header: Any, name: str, seq: int,
                          on_failed: Any = None) -> asyncio.Future[Any]:
        fut = asyncio.get_running_loop().create_future()
        self.in_flight.append((seq, on_failed, fut))
        return fut

    def fail(self) -> None:
        for _, hook, fut in self.in_flight:
            if hook is not None:
                hook(RuntimeError("ledger stopped"))
            fut.set_exception(RuntimeError("ledger stopped"))
        self.in_flight.clear()

    def store_all(self) -> None:
        for seq, _, fut in self.in_flight:
            self.stored.append(seq)
            fut.set_result((Position(9, len(self.stored) - 1), len(self.stored) - 1))
        self.in_flight.clear()


async def failed_scenario() -> tuple[list[tuple[int, str]], list[int]]:
    seam = FailingSeam()
    conn = connected(seam)
    for seq in (0, 1):
        await send(cast(PulsarConnection, conn), frame(seq))
    seam.fail()  # the ledger stops under SENDs 0 and 1 ...
    await send(cast(PulsarConnection, conn), frame(2))  # ... and SEND 2 is read before their callbacks ran
    seam.store_all()  # (had it been taken, the next ledger would have stored it behind the hole)
    await asyncio.sleep(0)
    conn.open_producer()  # the client reconnects on the SEND_ERROR and resends what it was not answered
    for seq in (0, 1, 2):
        await send(cast(PulsarConnection, conn), frame(seq))
        seam.store_all()
        await asyncio.sleep(0)
    return [outcome(a) for a in conn.answers], seam.stored


def test_a_send_read_after_a_failed_append_before_its_callback_is_refused():
    """Issue #24 (the chaos suite's Pulsar duplicates after `bookie-quorum`): the managed ledger failed the appends
    in flight, and a SEND read in the loop turn before their callbacks ran was taken - stored in the next ledger
    behind the failed ones, where the resend of those made it a second copy. The failure hook marks the producer
    failed at once, so that SEND is refused and every message is stored once, in order."""
    answers, stored = asyncio.run(failed_scenario())
    assert stored == [0, 1, 2]
    assert sorted(answers[:3]) == [(0, "PersistenceError"), (1, "PersistenceError"), (2, "PersistenceError")]
    assert answers[3:] == [(0, "stored"), (1, "stored"), (2, "stored")]
