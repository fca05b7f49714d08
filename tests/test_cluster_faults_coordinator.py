"""A group coordinator that is not serving expires nobody (issue #24), against the real ZooKeeper and
bookies of tests/support/bookkeeper.py.

The coordinator broker reaches ZooKeeper through a proxy (tests/support/cluster.py ZooKeeperProxy). A
member joins a classic group with a 6 s session and then the proxy cuts the broker off for 10 s - longer
than the group session, shorter than the broker's 20 s ZooKeeper session. Meanwhile the broker refuses
the member's heartbeats (NOT_COORDINATOR), so the member cannot keep its session alive; before issue #24
its timers ran on and removed the member ("no heartbeat within 6000 ms"), forcing a rebalance after every
ZooKeeper blip. Now the timers wait while the broker does not serve and restart with fresh deadlines
when it serves again (kop/coordinator/sansio.py refresh_timers): the member's first heartbeat after the
cut is accepted in the same generation, and the broker logged no expiry.
"""

from __future__ import annotations

import time
import uuid

from kafka.protocol.consumer import HeartbeatRequest, JoinGroupRequest, SyncGroupRequest

from tests.support.cluster import ZooKeeperProxy, eventually, start_brokers, stop_brokers
from tests.support.wire import Negotiated

NONE, NOT_COORDINATOR, COORDINATOR_NOT_AVAILABLE, MEMBER_ID_REQUIRED = 0, 16, 15, 79
GROUP_SESSION_MS = 6000
CUT_S = 10


def test_a_coordinator_cut_off_from_zookeeper_expires_no_member(cluster, tmp_path_factory):
    proxy = ZooKeeperProxy(cluster.zk_port)
    chroot = f"/kop-cluster-{uuid.uuid4().hex[:10]}"
    brokers = start_brokers(tmp_path_factory, cluster, 1, chroot=chroot, metadataStoreSessionTimeoutMillis=20000,
                            per_broker={1: {"metadataStoreUrl": f"zk:{proxy.connect}{chroot}"}})
    try:
        broker = brokers[0]
        group = "paused-" + uuid.uuid4().hex[:6]
        with Negotiated(broker.bootstrap) as w:
            P = JoinGroupRequest.JoinGroupRequestProtocol

            def join(member_id: str):  # noqa: ANN202 - kafka-python's response class
                return w.call(JoinGroupRequest(
                    group_id=group, session_timeout_ms=GROUP_SESSION_MS, rebalance_timeout_ms=GROUP_SESSION_MS,
                    member_id=member_id, group_instance_id=None, protocol_type="consumer",
                    protocols=[P(name="range", metadata=b"")], reason=None), cap=9)

            r = eventually("the coordinator answers", lambda: (r := join("")).error_code == MEMBER_ID_REQUIRED and r)
            r = join(r.member_id)
            assert r.error_code == NONE and r.leader == r.member_id
            member, generation = r.member_id, r.generation_id
            A = SyncGroupRequest.SyncGroupRequestAssignment
            s = w.call(SyncGroupRequest(group_id=group, generation_id=generation, member_id=member,
                                        group_instance_id=None, protocol_type="consumer", protocol_name="range",
                                        assignments=[A(member_id=member, assignment=b"")]), cap=5)
            assert s.error_code == NONE

            def heartbeat() -> int:
                return w.call(HeartbeatRequest(group_id=group, generation_id=generation, member_id=member,
                                               group_instance_id=None), cap=4).error_code

            assert heartbeat() == NONE
            log_start = len(broker.log_path.read_bytes())
            proxy.cut()
            # The broker stops serving at once: the member's heartbeats are refused from then on.
            eventually("heartbeats refused", lambda: heartbeat() in (NOT_COORDINATOR, COORDINATOR_NOT_AVAILABLE))
            time.sleep(CUT_S)  # the fault: cut off for longer than the group session
            assert heartbeat() in (NOT_COORDINATOR, COORDINATOR_NOT_AVAILABLE)
            proxy.restore()
            err = eventually("the coordinator serves again", lambda: (
                e := heartbeat()) not in (NOT_COORDINATOR, COORDINATOR_NOT_AVAILABLE) and str(e), timeout=60)
            assert int(err) == NONE  # still a member, same generation: not expired, no rebalance
        text = broker.log_path.read_bytes()[log_start:].decode(errors="replace")
        assert "ZooKeeper connection back" in text and "session expired" not in text, text
        assert "no heartbeat within" not in text, text
    finally:
        stop_brokers(brokers)
        proxy.close()


def test_refreshed_timers_start_over_from_the_resume():
    """The sans-IO part: every pending timer of a machine gets `now` + the delay it was set with."""
    from kop.coordinator.sansio import SansIOMachine

    m: SansIOMachine[object] = SansIOMachine()
    fired: list[str] = []
    m.expire_timers(1000)
    m._schedule(("session", "g", "a"), 6000, fired.append, "a")  # due at 7000
    m.expire_timers(5000)
    m._schedule(("session", "g", "b"), 6000, fired.append, "b")  # due at 11000
    m.refresh_timers(20000)  # served again at 20 s: both overdue, neither fired
    assert m.next_deadline() == 26000
    m.expire_timers(25999)
    assert fired == []
    m.expire_timers(26000)
    assert fired == ["a", "b"]
