"""The chaos checker (tests/chaos/checker.py) on made-up histories: a clean one finds nothing, and each
anomaly, planted alone, is found and only it."""

from __future__ import annotations

from tests.chaos.checker import Ack, Commit, CommittedAnswer, History, Read, check, stalls


def _clean() -> History:
    """p writes 4 values to t-0 (offsets 0-3), g reads and commits them, a txn reader sees t-0."""
    h = History(workloads={"p", "g"})
    for i in range(4):
        h.acks.append(Ack("p", "t", 0, i, f"p-{i}", i, at=10.0 + i))
        h.reads.append(Read("g/m1", "t", 0, i, f"p-{i}"))
    h.final[("t", 0)] = [(i, f"p-{i}") for i in range(4)]
    h.commits += [Commit("g", "t", 0, 2, at=12.5), Commit("g", "t", 0, 4, at=14.5)]
    h.answers.append(CommittedAnswer("g", "t", 0, 4, asked=15.0))
    h.group_topics[("g", "t")] = 0
    return h


def _only(h: History, anomaly: str) -> list[str]:
    found = check(h).anomalies()
    assert set(found) == {anomaly}, found
    return found[anomaly]


def test_a_clean_history_has_no_anomaly():
    r = check(_clean(), healed_at=11.5)
    assert r.acked == 4 and r.anomalies() == {}
    assert r.stalls == {"p": 0.5, "g": 1.0} and r.stuck == []


def test_lost():
    h = _clean()
    h.final[("t", 0)].pop()
    h.reads.pop()  # nobody read it either
    h.commits.pop()  # (and the group did not commit past it)
    h.answers.clear()
    assert _only(h, "lost") == ["p-3 (t-0@3)"]


def test_a_group_that_skipped_offsets_lost_them():
    h = _clean()
    h.reads = [rd for rd in h.reads if rd.position != 1]
    assert _only(h, "lost") == ["group g skipped t-0 offsets [1] (1)"]


def test_duplicated():
    h = _clean()
    h.final[("t", 0)].append((4, "p-2"))
    assert _only(h, "duplicated") == ["p-2 at [('t', 0, 2), ('t', 0, 4)]"]


def test_wrong_offset_in_an_acknowledgement():
    h = _clean()
    h.final[("t", 0)] = [(0, "p-0"), (1, "p-1"), (2, "p-2"), (4, "p-3")]
    h.reads[3] = Read("g/m1", "t", 0, 4, "p-3")
    (finding,) = _only(h, "wrong_offsets")
    assert finding.startswith("p-3 acknowledged at t-0@3")


def test_one_offset_read_with_two_values():
    h = _clean()
    h.reads.append(Read("g/m2", "t", 0, 1, "p-9"))
    (finding,) = _only(h, "wrong_offsets")
    assert "t-0@1 read as p-9" in finding


def test_reordered():
    h = _clean()
    # the log holds p-1 before p-0 and the acknowledgements say so (no wrong offset): sent in one order,
    # stored in the other
    h.acks[0], h.acks[1] = (Ack("p", "t", 0, 1, "p-0", 0, at=10.0), Ack("p", "t", 0, 0, "p-1", 1, at=11.0))
    h.final[("t", 0)][:2] = [(0, "p-1"), (1, "p-0")]
    h.reads[:2] = [Read("g/m1", "t", 0, 0, "p-1"), Read("g/m1", "t", 0, 1, "p-0")]
    assert _only(h, "reordered") == ["p t-0: p-0 after p-1 in the log"]


def test_committed_offset_going_backward():
    h = _clean()
    h.commits.append(Commit("g", "t", 0, 3, at=14.8))
    assert _only(h, "backward_commits") == ["g t-0: committed 3 after 4"]


def test_stale_read_of_a_committed_offset():
    h = _clean()
    h.answers.append(CommittedAnswer("g", "t", 0, 2, asked=16.0))
    assert _only(h, "stale_reads") == ["g t-0: answered 2 after 4 was acknowledged"]


def test_an_answer_asked_before_the_commit_is_not_stale():
    h = _clean()
    h.answers.append(CommittedAnswer("g", "t", 0, 2, asked=13.0))
    assert check(h).anomalies() == {}


def test_aborted_read_by_a_consumer_and_in_the_final_log():
    h = _clean()
    h.aborted = {"x-0"}
    h.reads.append(Read("txn-reader", "out", 0, 0, "x-0", committed=True))
    assert _only(h, "aborted_reads") == ["x-0 read by txn-reader"]
    h.reads.pop()
    h.final[("out", 0)] = [(0, "x-0")]
    h.final_committed.add("out")
    assert _only(h, "aborted_reads") == ["x-0 in the read_committed log of out-0"]


def test_an_aborted_value_read_uncommitted_is_no_anomaly():
    h = _clean()
    h.aborted = {"x-0"}
    h.reads.append(Read("raw", "out", 0, 0, "x-0", committed=False))
    h.final[("out", 0)] = [(0, "x-0")]
    assert check(h).anomalies() == {}


def test_pulsar_message_ids_as_positions():
    h = History(workloads={"pulsar"})
    h.acks += [Ack("pulsar", "pt", 0, (7, 0, -1), "pulsar-0", 0, at=1.0),
               Ack("pulsar", "pt", 0, (7, 1, -1), "pulsar-1", 1, at=2.0)]
    h.final[("pt", 0)] = [((7, 0, -1), "pulsar-0"), ((7, 1, -1), "pulsar-1")]
    assert check(h).anomalies() == {}
    h.final[("pt", 0)] = [((7, 0, -1), "pulsar-1"), ((9, 0, -1), "pulsar-0")]
    found = check(h).anomalies()
    assert set(found) == {"wrong_offsets", "reordered"}, found


def test_stall_and_stuck():
    h = _clean()
    h.workloads.add("txn")
    got = stalls(h, healed_at=12.0)
    assert got == {"p": 0.0, "g": 0.5, "txn": None}
    assert check(h, healed_at=12.0).stuck == ["txn"]


def test_undelivered_by_a_durable_subscription():
    h = History(workloads={"pulsar"})
    h.acks += [Ack("pulsar", "pt", 0, None, "pulsar-0", 0, at=1.0), Ack("pulsar", "pt", 0, None, "pulsar-1", 1, at=2.0)]
    h.final[("pt", 0)] = [(0, "pulsar-0"), (1, "pulsar-1")]
    h.delivered["pt"] = {"pulsar-0", "pulsar-1"}
    assert check(h).anomalies() == {}
    h.delivered["pt"] = {"pulsar-0"}
    assert _only(h, "undelivered") == ["pulsar-1 (pt-0)"]
