"""kop/coordinator/sansio.py: the deadlines and write outcomes both group state machines are driven by."""

from __future__ import annotations

from kop.coordinator.sansio import SansIOMachine, Write


def test_timers_fire_in_deadline_order_and_a_reset_or_cancel_wins() -> None:
    m = SansIOMachine()
    fired: list[str] = []
    m._schedule(("a", "g"), 30, fired.append, "a")
    m._schedule(("b", "g"), 10, fired.append, "b")
    m._schedule(("c", "h"), 20, fired.append, "c")
    m._schedule(("a", "g"), 5, fired.append, "a-again")  # re-set: only the new deadline counts
    m._cancel(("c", "h"))
    assert m.next_deadline() == 5
    m.expire_timers(9)
    assert fired == ["a-again"]
    m.expire_timers(100)
    assert fired == ["a-again", "b"] and m.next_deadline() is None


def test_timers_set_while_serving_count_from_that_call_and_group_timers_go_together() -> None:
    m = SansIOMachine()
    fired: list[int] = []
    m._schedule(("first", "g"), 10, lambda: m._schedule(("chained", "g"), 10, fired.append, 2))
    m.expire_timers(15)  # the chained timer counts from 15, not from 10
    assert m.next_deadline() == 25
    m._schedule(("other", "g"), 1, fired.append, 3)
    m._cancel_group_timers("g")
    assert m.next_deadline() is None and fired == []


def test_writes_are_effects_and_their_outcome_reaches_the_callback_once() -> None:
    m = SansIOMachine(wall_ms=lambda: 42)
    outcomes: list[int] = []
    m._write("g", [(b"k", None)], outcomes.append)
    [w] = m.take_effects()
    assert isinstance(w, Write) and w.group_id == "g" and w.records == [(b"k", None)]
    m.write_done(w.write_id, 16, now=7)
    m.write_done(w.write_id, 0, now=8)  # reported twice: the first outcome counts
    assert outcomes == [16] and m.take_effects() == [] and m.timestamp() == 42
