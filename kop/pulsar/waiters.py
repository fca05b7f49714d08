"""The queue of WaitForExclusive producers waiting for a topic (issue #22), sans-IO.

Pulsar's AbstractTopic keeps `waitingExclusiveProducers`: a WaitForExclusive PRODUCER that finds the topic taken is
answered PRODUCER_SUCCESS with ``producer_ready=false`` and queued; when the topic comes free the first waiter takes
it (FIFO) and is answered a second PRODUCER_SUCCESS, ready. Who is queued and who goes next is decided here, apart
from the wire (kop/pulsar/produce.py does the answering), so the order rules are unit-tested without a connection:
a waiter that goes away (CLOSE_PRODUCER, its connection closed) leaves the queue without a trace; an
ExclusiveWithFencing producer or the partition leaving this broker empties it, each waiter refused.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterator
from typing import Generic, Protocol, TypeVar


class Refusable(Protocol):
    def refuse(self, code: int, message: str) -> None:
        """Answer the waiter's PRODUCER with an ERROR (it leaves the queue)."""


class Withdrawable(Protocol):
    def withdraw(self) -> None:
        """It went away before its turn: out of its queue and its connection's ``waiting_producers``."""


W = TypeVar("W", bound=Refusable)


class WaitQueue(Generic[W]):
    """FIFO of waiting producers; empty most of the time, so it costs a partition nothing until one waits."""

    __slots__ = ("_waiting",)

    def __init__(self) -> None:
        self._waiting: deque[W] = deque()

    def __len__(self) -> int:
        return len(self._waiting)

    def __iter__(self) -> Iterator[W]:
        return iter(self._waiting)

    def add(self, waiter: W) -> None:
        self._waiting.append(waiter)

    def withdraw(self, waiter: W) -> bool:
        """Remove ``waiter`` (it closed, or its connection did); whether it was there."""
        try:
            self._waiting.remove(waiter)
        except ValueError:
            return False
        return True

    def next_when_free(self, producers: int) -> W | None:
        """The waiter that takes the topic now that it has ``producers`` producers, removed from the queue; None
        while producers remain or nobody waits. Also when the last of the Shared producers a waiter queued behind
        goes, as Pulsar 4.2's AbstractTopic.handleProducerRemoved does (4.0 left that one queued)."""
        if producers or not self._waiting:
            return None
        return self._waiting.popleft()

    def refuse_all(self, code: int, message: str) -> None:
        """Empty the queue, refusing each waiter in order (ExclusiveWithFencing, the partition leaving here)."""
        while self._waiting:
            self._waiting.popleft().refuse(code, message)
