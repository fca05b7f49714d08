"""The ZooKeeper session lease's arithmetic (kop/cluster/lease.py), sans-IO with a fake clock: a proof is the
*send* time of an answered read, on the held session; the lease lasts 2/3 of the session timeout after it."""

from __future__ import annotations

import pytest

from kop.cluster.lease import SessionLease


class Clock:
    def __init__(self, t: float = 100.0) -> None:
        self.t = t

    def __call__(self) -> float:
        return self.t


def held(timeout: float = 4.0, session: int = 7) -> tuple[SessionLease, Clock]:
    clock = Clock()
    lease = SessionLease(timeout, clock=clock)
    lease.hold(session)
    return lease, clock


def test_no_proof_no_lease():
    lease, _ = held()
    assert not lease.valid()
    assert SessionLease(4.0, clock=Clock()).valid() is False  # no session held at all


def test_lasts_two_thirds_of_the_session_after_the_send_time():
    lease, clock = held(timeout=30.0)
    sent = lease.now()
    clock.t += 5.0  # the answer took 5 s to come back: the proof dates from the send, not the answer
    assert lease.proved(sent, 7)
    assert lease.length == pytest.approx(20.0) and lease.expires_at() == pytest.approx(sent + 20.0)
    assert lease.valid(sent + 19.999)
    assert not lease.valid(sent + 20.0)
    clock.t = sent + 19.9
    assert lease.valid()
    clock.t = sent + 20.1  # e.g. woken from SIGSTOP: the monotonic clock kept running
    assert not lease.valid()


def test_a_proof_on_another_session_does_not_count():
    lease, clock = held(session=7)
    assert not lease.proved(clock(), 8)  # kazoo opened a new session: ours may have expired
    assert not lease.proved(clock(), None)  # the read failed
    assert not lease.valid()


def test_an_older_proof_does_not_shorten_or_extend_it():
    lease, clock = held()
    late, early = 110.0, 105.0
    assert lease.proved(late, 7)
    assert not lease.proved(early, 7)  # answered after a newer one: adds nothing
    assert lease.expires_at() == pytest.approx(late + 4.0 * 2 / 3)


def test_a_new_session_forgets_the_old_proofs():
    lease, clock = held(session=7)
    assert lease.proved(clock(), 7) and lease.valid()
    lease.hold(None)  # the session expired
    assert not lease.valid() and not lease.proved(clock(), 7)
    lease.hold(9)  # registered again on a new session: nothing proven on it yet
    assert not lease.valid()
    assert lease.proved(clock(), 9) and lease.valid()
    lease.hold(9)  # the same session again: the proof stays
    assert lease.valid()


def test_renewals_come_several_times_per_lease():
    lease, _ = held(timeout=4.0)
    assert lease.renew_every == pytest.approx(lease.length / 4)


@pytest.mark.parametrize("fraction", [0.0, 1.0, 1.5, -0.1])
def test_the_margin_cannot_be_given_away(fraction):
    with pytest.raises(ValueError):
        SessionLease(4.0, fraction=fraction)


def test_the_broker_gate_asks_the_lease_on_every_call():
    """ZooKeeperOwnership.serving (what owns(), owner_cached() and TopicManager.paused consult): the session
    state alone is not enough - a lapsed lease refuses at once, without any callback, and asks for a renewal
    read; a renewal on the held session serves again. Nothing here talks to ZooKeeper."""
    from kop.cluster.ownership import ZooKeeperOwnership
    from kop.config import BrokerConfig

    config = BrokerConfig()
    config.metadataStoreSessionTimeoutMillis = 4000
    own = ZooKeeperOwnership(config, None, None)  # type: ignore[arg-type]  # the store is not used here
    clock = Clock()
    own.lease = SessionLease(4.0, clock=clock)
    own.lease.hold(7)
    own._serving = True  # the session was reported connected
    assert not own.serving  # ... but nothing proves it alive yet
    own._renew.clear()
    assert own.lease.proved(clock(), 7)
    assert own.serving
    clock.t += 2.6
    assert own.serving and not own._renew.is_set()
    clock.t += 0.1  # 2.7 s after the last proof (> 2/3 of 4 s): e.g. just woken from SIGSTOP
    assert not own.serving and own._renew.is_set()
    assert own.lease.proved(clock(), 7)  # the renewal read, sent now, answered on the same session
    assert own.serving
    own._serving = False  # suspended: the lease alone does not make it serve
    assert not own.serving
