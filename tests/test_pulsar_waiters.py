"""The WaitForExclusive queue (kop/pulsar/waiters.py), sans-IO: who takes the topic when it comes free; and a
non-persistent topic handing itself to its waiters (kop/pulsar/nonpersistent.py NPWaiter) with plain objects for
connections. The e2e side is tests/e2e/test_pulsar_message_answers.py (test_wait_for_exclusive_*)."""

from __future__ import annotations

from kop.pulsar.codec import commands as c
from kop.pulsar.nonpersistent import NonPersistentTopics, NPConsumer, NPProducer, NPTopic, NPWaiter
from kop.pulsar.waiters import WaitQueue, Withdrawable
from kop.topics.names import TopicName


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


# ------------------------------------------------------------------ a non-persistent topic's waiters, sans-IO

class Conn:
    """A connection's outside as a non-persistent topic sees it (a Sink): the commands it was sent."""

    def __init__(self) -> None:
        self.protocol_version = 21
        self.peer = "127.0.0.1:1"
        self.client_version = "test"
        self.backlogged = False
        self.np_producers: dict[int, NPProducer] = {}
        self.np_consumers: dict[int, NPConsumer] = {}
        self.waiting_producers: dict[int, Withdrawable] = {}
        self.commands: list[c.pb.BaseCommand] = []

    def write(self, data: bytes) -> None:
        pass

    def send(self, cmd: c.pb.BaseCommand) -> None:
        self.commands.append(cmd)


def queue(topic: NPTopic, conn: Conn, pid: int, name: str) -> NPWaiter:
    req = c.pb.CommandProducer(topic="non-persistent://public/default/t", producer_id=pid, request_id=100 + pid,
                               producer_name=name, producer_access_mode=2)
    w = NPWaiter(conn, req, name, topic, b"")
    topic.waiting.add(w)
    conn.waiting_producers[pid] = w
    return w


def test_a_non_persistent_topic_hands_itself_to_its_waiters_in_turn():
    registry = NonPersistentTopics()
    topic = registry.open(TopicName("public", "default", "t"), None)
    holder_conn, conn = Conn(), Conn()
    holder = NPProducer(holder_conn, 1, "holder", topic, b"", exclusive=True)
    topic.producers["holder"] = holder
    topic.topic_epoch = 0
    queue(topic, conn, 2, "a")
    gone = queue(topic, conn, 3, "gone")
    queue(topic, conn, 4, "b")
    gone.withdraw()
    holder.close()
    assert list(topic.producers) == ["a"] and topic.topic_epoch == 1
    ready = conn.commands[-1]
    assert ready.type == c.PRODUCER_SUCCESS and ready.producer_success.request_id == 102
    assert ready.producer_success.producer_ready and ready.producer_success.topic_epoch == 1
    conn.np_producers[2].close()
    assert list(topic.producers) == ["b"] and conn.commands[-1].producer_success.request_id == 104
    assert not conn.waiting_producers and len(topic.waiting) == 0
    conn.np_producers[4].close()
    assert registry.topics == {}  # idle again: the topic goes
