"""ZooKeeper down for less than the session timeout (issue #24), against the real ZooKeeper and bookies of
tests/support/bookkeeper.py: ZooKeeper is SIGKILLed, kept down 20 s and started again on the same data,
with two brokers on a 30 s session (conf/broker.conf's). The brokers reconnect with the sessions they
had (kazoo's bounded retry policy, kop/storage/zookeeper/metadata.py `connection_retry`): no session
expires, every broker and bundle node is still owned by the same session, no bundle is released, and
produce and fetch work on every partition afterwards, at the offsets that follow the acknowledged ones.

(Without the policy kazoo's pauses between attempts double up to an hour: after 20 s down a broker
tried again seconds after ZooKeeper was back, and at a production session that could be too late.)
"""

from __future__ import annotations

import signal
import time
import uuid

from kazoo.client import KazooClient

from tests.support.admin import batch
from tests.support.clients import create_topic
from tests.support.cluster import broker_id, eventually, leader_of, start_brokers, stop_brokers
from tests.support.wire import Negotiated

OUTAGE_S = 20
SESSION_MS = 30000


def _ephemeral_owners(zk: KazooClient, chroot: str) -> dict[str, tuple[bytes, int]]:
    """Every ephemeral node under the chroot (broker registrations, bundle owners): path -> (value,
    owning session id)."""
    out: dict[str, tuple[bytes, int]] = {}

    def walk(path: str) -> None:
        value, stat = zk.get(path)
        if stat.ephemeralOwner:
            out[path] = (value, stat.ephemeralOwner)
        for child in zk.get_children(path):
            walk(f"{path}/{child}")

    for root in ("loadbalance", "kop/brokers", "namespace"):
        if zk.exists(f"{chroot}/{root}"):
            walk(f"{chroot}/{root}")
    return out


def _wait_usable(zk: KazooClient, timeout: float = 60) -> None:
    """Until a read on `zk` succeeds: a kazoo client answers SessionExpiredError / ConnectionLoss while it
    reconnects (bounded wait, not a measurement)."""
    from kazoo.exceptions import KazooException

    deadline = time.monotonic() + timeout
    while True:
        try:
            zk.get_children("/")
            return
        except KazooException:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.2)


def test_zookeeper_down_for_less_than_the_session(cluster, tmp_path_factory):
    brokers = start_brokers(tmp_path_factory, cluster, 2, metadataStoreSessionTimeoutMillis=SESSION_MS)
    chroot = brokers[0].chroot
    try:
        topic = "zk-outage-" + uuid.uuid4().hex[:6]
        partitions = 4
        create_topic(brokers[0].bootstrap, topic, partitions)
        leaders = {p: leader_of(brokers, topic, p) for p in range(partitions)}
        assert {broker_id(b) for b in leaders.values()} == {1, 2}  # both brokers have something to lose
        acked: dict[int, list[bytes]] = {p: [] for p in range(partitions)}
        for p, b in leaders.items():
            with Negotiated(b.bootstrap) as w:
                for i in range(5):
                    value = f"before-{p}-{i}".encode()
                    assert w.produce(topic, p, batch([value])).error_code == 0
                    acked[p].append(value)
        before = _ephemeral_owners(cluster.zk(), chroot)
        assert sum("/namespace/" in path for path in before) >= 8  # both namespaces' bundles are owned

        log_start = {b: len(b.log_path.read_bytes()) for b in brokers}  # hand-overs at start-up came before
        proc = cluster.zk_proc
        assert proc is not None
        proc.send_signal(signal.SIGKILL)
        proc.wait(30)
        time.sleep(OUTAGE_S)  # the fault itself: ZooKeeper away for 20 s, under the 30 s session
        cluster.start_zookeeper()
        _wait_usable(cluster.zk())  # the tests' own client (shared with the next tests) is back too

        # Clients keep working: every partition accepts a produce again on the same leader (refused,
        # retriably, while the broker is still suspended), and the offsets continue.
        for p, b in leaders.items():
            with Negotiated(b.bootstrap) as w:
                for i in range(5):
                    value = f"after-{p}-{i}".encode()
                    r = eventually(f"a produce to {topic}-{p}", lambda w=w, p=p, v=value: (
                        r := w.produce(topic, p, batch([v]))).error_code == 0 and r, timeout=90)
                    assert r.base_offset == len(acked[p])
                    acked[p].append(value)
                got = w.fetch(topic, p, 0)
                assert got.error_code == 0 and got.high_watermark == len(acked[p])

        zk = KazooClient(cluster.zk_connect, timeout=10)
        zk.start(timeout=30)
        try:
            after = _ephemeral_owners(zk, chroot)
        finally:
            zk.stop()
            zk.close()
        # Same nodes, same owning sessions: no session expired, nothing was released or re-acquired.
        assert after == before
        for b in brokers:
            text = b.log_path.read_bytes()[log_start[b]:].decode(errors="replace")
            assert "ZooKeeper connection lost: not serving" in text  # the outage was seen ...
            assert "ZooKeeper connection back" in text  # ... and ended within the session
            assert "session expired" not in text and "released bundle" not in text, text
    finally:
        stop_brokers(brokers)


def test_the_connection_retry_policy_is_bounded():
    """kazoo's own retry loop run with our policy (its sleeps recorded instead of slept): it never gives up,
    and no pause between connection attempts exceeds 1 s plus the 20% jitter - so a broker tries again
    within ~1.2 s of ZooKeeper answering, however long it was away."""
    from kazoo.exceptions import ConnectionLoss

    from kop.storage.zookeeper.metadata import connection_retry

    policy = connection_retry()
    assert policy.max_tries == -1
    pauses: list[float] = []
    policy.sleep_func = pauses.append
    attempts = 0

    def connect() -> str:
        nonlocal attempts
        attempts += 1
        if attempts <= 200:  # ZooKeeper away for 200 attempts
            raise ConnectionLoss()
        return "connected"

    assert policy(connect) == "connected"
    assert len(pauses) == 200 and max(pauses) <= 1.2 and pauses[0] <= 0.12
    assert sum(pauses) >= 200 * 0.8 * 0.9  # ... and not hammering it: mostly ~1 s apart
