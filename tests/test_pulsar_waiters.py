"""The WaitForExclusive queue (kop/pulsar/waiters.py), sans-IO: who takes the topic when it comes free."""

from __future__ import annotations

from kop.pulsar.waiters import WaitQueue


class Waiter:
    def __init__(self, name: str, refusals: list[tuple[str, int, str]]) -> None:
        self.name = name
        self.refusals = refusals

    def refuse(self, code: int, message: str) -> None:
        self.refusals.append((self.name, code, message))


def test_waiters_take_the_topic_in_the_order_they_came():
    refusals: list[tuple[str, int, str]] = []
    q: WaitQueue[Waiter] = WaitQueue()
    a, b, c = (Waiter(n, refusals) for n in "abc")
    for w in (a, b, c):
        q.add(w)
    assert q.next_when_free(producers=1) is None  # the holder is still there: nobody moves
    assert len(q) == 3
    assert q.next_when_free(producers=0) is a
    assert q.next_when_free(producers=1) is None  # a holds it now
    assert q.next_when_free(producers=0) is b
    assert q.next_when_free(producers=0) is c
    assert q.next_when_free(producers=0) is None
    assert refusals == []


def test_a_waiter_that_goes_leaves_no_trace():
    q: WaitQueue[Waiter] = WaitQueue()
    a, b, c = (Waiter(n, []) for n in "abc")
    for w in (a, b, c):
        q.add(w)
    assert q.withdraw(b)
    assert not q.withdraw(b)  # twice (CLOSE_PRODUCER, then the connection's close) is harmless
    assert list(q) == [a, c]
    assert q.next_when_free(0) is a
    assert q.next_when_free(0) is c
    assert len(q) == 0


def test_fencing_refuses_every_waiter_in_order_and_empties_the_queue():
    refusals: list[tuple[str, int, str]] = []
    q: WaitQueue[Waiter] = WaitQueue()
    for n in "ab":
        q.add(Waiter(n, refusals))
    q.refuse_all(25, "Fenced out")
    assert refusals == [("a", 25, "Fenced out"), ("b", 25, "Fenced out")]
    assert len(q) == 0 and q.next_when_free(0) is None
