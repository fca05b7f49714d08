"""The broker-wide request-bytes bound (kop/net/request_bytes.py), sans-IO: the interleavings that once let it be
exceeded by more than its docstring promises (one frame plus the growth step that reached it), or left every
connection waiting.

Fake readers stand for connections here; tests/test_kafka_request_bytes.py has the basic rules and a broker under
many Kafka producers, tests/test_pulsar_hostile.py the Pulsar connection's reads and a broker under Pulsar producers.
"""

from __future__ import annotations

from kop.net.request_bytes import RequestBytesBound


class Conn:
    """A connection as the bound sees it: whether it is inside a frame, and whether the bound let it read."""

    def __init__(self, bound: RequestBytesBound, name: str) -> None:
        self.bound = bound
        self.name = name
        self.mid_frame = False
        self.paused = False
        self.own_pause = False

    def update_reading(self) -> None:
        if self.own_pause:
            self.bound.leave(self)
            self.paused = True
        else:
            self.paused = not self.bound.may_read(self)

    def __repr__(self) -> str:
        return self.name


def _setup(n: int, limit: int = 800) -> tuple[RequestBytesBound, list[Conn]]:
    conns: list[Conn] = []
    bound = RequestBytesBound(limit, lambda: conns)
    conns += [Conn(bound, "abcdefgh"[i]) for i in range(n)]
    return bound, conns


def test_the_holder_gives_up_its_place_with_its_frame_even_with_its_next_frame_begun():
    """A pipelining client's read that completes a frame often brings the start of the next one: the connection
    is still `mid_frame`. Its place must end with the frame all the same. It used not to: the holder went on
    through every frame its client had pipelined, each over the bound (12 Pulsar producers x 4 frames of 1 MiB
    peaked at the bound + 3 frames)."""
    bound, (a, b, c) = _setup(3)
    a.mid_frame = b.mid_frame = True
    bound.add(700, a)
    bound.add(100, b)  # b reaches the bound while receiving: it holds the place
    assert bound.holder is b and a.paused and c.paused
    bound.add(300, b)  # b's frame completes (350 bytes) and 50 bytes of its next frame come with it
    bound.complete(350, b)
    b.update_reading()  # its read is done
    assert bound.holder is None and b.paused, "the holder read on into its next frame"
    assert bound.peak == 1100  # the bound + b's frame less what it had: nothing more can come in now
    bound.release(350)  # b's request answered: 750 partly received, nothing else to answer
    assert bound.reached  # 750 is not below 7/8 of 800
    assert bound.holder is a and not a.paused and b.paused and c.paused  # the one waiting longest, only it
    bound.add(100, a)
    a.mid_frame = False
    bound.complete(800, a)
    a.update_reading()
    assert a.paused and bound.holder is None
    bound.release(800)  # below 7/8: everyone reads again
    assert not bound.reached and not (a.paused or b.paused or c.paused)


def test_a_holder_whose_frame_is_dropped_hands_over():
    """A frame dropped as soon as it is received (an unknown Pulsar command) is never answered: with nothing
    else to answer, the place must go to another partly received frame, or every connection waits forever."""
    bound, (a, b, c) = _setup(3)
    a.mid_frame = b.mid_frame = True
    bound.add(700, a)
    bound.add(100, b)
    assert bound.holder is b
    b.mid_frame = False
    bound.release(100, partial=100)  # b's frame dropped unanswered (700 left: the bound is still reached)
    b.update_reading()
    assert bound.holder is a and not a.paused and b.paused and c.paused


def test_many_connections_resumed_at_once_pause_again_at_the_first_step_that_reaches_the_bound():
    """Below 7/8 of the bound every waiting connection reads again; the first allocation that reaches the bound
    pauses all the others before they read, so the bound is exceeded by that one step (plus the holder's frame)."""
    bound, conns = _setup(8)
    for x in conns:
        x.mid_frame = True
        bound.add(100, x)  # 800: reached by h, which holds the place
        bound.complete(100, x)
        x.mid_frame = False
        x.update_reading()
    assert bound.reached and all(x.paused for x in conns)
    bound.release(200)  # 600 < 700: every connection reads again
    assert not any(x.paused for x in conns)
    for x in conns:  # each gets a turn to read in order, as an event loop would run their callbacks
        if not x.paused:
            x.mid_frame = True
            bound.add(150, x)
    assert bound.used == 900 and bound.peak == 900  # 600 + 150 + 150: b's step reached it; no one read after
    conns[1].update_reading()  # b's read is done: 600 bytes wait to be answered, so no frame needs the place
    assert all(x.paused for x in conns) and bound.holder is None
