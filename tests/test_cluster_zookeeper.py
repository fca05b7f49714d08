"""Brokers and their ZooKeeper session (kop/cluster/ownership.py), against the real ZooKeeper and 4 bookies
of tests/support/bookkeeper.py:

* ZooKeeper is SIGKILLed and restarted while a kafka-python producer (acks=all) produces through two
  brokers: every acknowledged record is in the log at its offset, and acknowledgements continue after
  ZooKeeper is back.
* A broker whose connection to ZooKeeper is cut (a proxy drops it; its session lives on until it expires)
  stops serving its partitions at once - every produce sent to it from then on is refused, and its
  Metadata and FindCoordinator answers name no leader or coordinator for them (LEADER_NOT_AVAILABLE,
  COORDINATOR_NOT_AVAILABLE: retriable) instead of itself - and only
  later, once the session expired, does the other broker take them: the broker's "not serving" log line
  comes before the other's "acquired", and the ownership node still names the cut-off broker when it
  first refuses. The new owner continues the offsets; when the connection returns, the broker finds its
  session expired, registers again and keeps refusing the partition it lost.
"""

from __future__ import annotations

import re
import threading
import uuid
from datetime import datetime

from kop.cluster.bundles import bundle_for
from tests.support.admin import batch
from tests.support.bookkeeper import KopBookKeeperBroker
from tests.support.clients import create_topic
from tests.support.cluster import (
    ZooKeeperProxy,
    broker_id,
    eventually,
    find_coordinator,
    leader_of,
    metadata,
    start_brokers,
    stop_brokers,
)
from tests.support.wire import Negotiated

NOT_LEADER_OR_FOLLOWER = 6
LEADER_NOT_AVAILABLE = 5
COORDINATOR_NOT_AVAILABLE = 15


def test_zookeeper_restart_during_produce(cluster, tmp_path_factory):
    from kafka import KafkaConsumer, KafkaProducer, TopicPartition

    # A session long enough to outlive the restart (10 s: ZooKeeper's cap with the tests' tickTime=500):
    # the brokers keep their bundles; the point here is that a ZooKeeper outage suspends them without
    # losing anything. (Should the restart outlast the session, they re-register and re-acquire, and the
    # same assertions hold.)
    brokers = start_brokers(tmp_path_factory, cluster, 2, metadataStoreSessionTimeoutMillis=10000)
    try:
        topic = "zk-restart-" + uuid.uuid4().hex[:6]
        partitions = 4
        create_topic(brokers[0].bootstrap, topic, partitions)
        bootstrap = ",".join(b.bootstrap for b in brokers)
        producer = KafkaProducer(bootstrap_servers=bootstrap, acks="all", linger_ms=5, retries=1_000_000,
                                 request_timeout_ms=10_000, retry_backoff_ms=200,
                                 max_in_flight_requests_per_connection=1)
        acked: dict[tuple[int, int], bytes] = {}
        acked_after: list[int] = [0]
        restarted = threading.Event()
        stop = threading.Event()

        def produce() -> None:
            i = 0
            while not stop.is_set():
                value = f"z-{i}".encode()
                try:
                    md = producer.send(topic, value=value, partition=i % partitions).get(timeout=120)
                except Exception:
                    continue
                finally:
                    i += 1
                acked[(md.partition, md.offset)] = value
                if restarted.is_set():
                    acked_after[0] += 1

        t = threading.Thread(target=produce, daemon=True)
        t.start()
        eventually("acks before the restart", lambda: len(acked) >= 100, timeout=120)
        cluster.restart_zookeeper()  # SIGKILL, then the same port and data
        restarted.set()
        eventually("acks after ZooKeeper is back", lambda: acked_after[0] >= 100, timeout=180)
        stop.set()
        t.join(180)
        producer.close(timeout=10)

        c = KafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False, auto_offset_reset="earliest")
        try:
            tps = [TopicPartition(topic, p) for p in range(partitions)]
            c.assign(tps)
            ends = c.end_offsets(tps)
            log: dict[tuple[int, int], bytes] = {}
            while any(c.position(tp) < ends[tp] for tp in tps):
                for tp, msgs in c.poll(timeout_ms=1000).items():
                    log.update({(tp.partition, m.offset): m.value for m in msgs})
        finally:
            c.close()
        lost = [k for k, v in acked.items() if log.get(k) != v]
        assert not lost, f"{len(lost)} acknowledged records lost or moved: {sorted(lost)[:10]}"
        assert acked_after[0] >= 100
    finally:
        stop_brokers(brokers)


def _log_time(broker: KopBookKeeperBroker, pattern: str) -> datetime:
    for line in broker.log_path.read_text(errors="replace").splitlines():
        if re.search(pattern, line):
            return datetime.strptime(line[:23], "%Y-%m-%d %H:%M:%S,%f")
    raise AssertionError(f"{broker} never logged {pattern!r}\n{broker.log_tail()}")


def test_an_expiring_session_stops_serving_before_another_broker_takes_over(cluster, tmp_path_factory):
    proxy = ZooKeeperProxy(cluster.zk_port)
    chroot = f"/kop-cluster-{uuid.uuid4().hex[:10]}"
    # Broker 1 reaches ZooKeeper through the proxy (its bookies directly); it starts first and, without
    # hand-over to later brokers, owns every bundle.
    brokers = start_brokers(tmp_path_factory, cluster, 2, chroot=chroot, loadBalancerEnabled="false",
                            per_broker={1: {"metadataStoreUrl": f"zk:{proxy.connect}{chroot}"}})
    try:
        cut_off, other = brokers
        topic = "expiry-" + uuid.uuid4().hex[:6]
        create_topic(cut_off.bootstrap, topic, 1)
        assert leader_of(brokers, topic, 0) is cut_off
        acked: dict[int, bytes] = {}
        with Negotiated(cut_off.bootstrap) as w:
            for i in range(10):
                r = w.produce(topic, 0, batch([f"before-{i}".encode()]))
                assert r.error_code == 0
                acked[r.base_offset] = f"before-{i}".encode()

        zk = cluster.zk()
        node = f"{chroot}/namespace/public/default/{bundle_for('public', 'default', topic, 0, 4).range_name}"
        proxy.cut()
        with Negotiated(cut_off.bootstrap) as w:
            def refused():
                r = w.produce(topic, 0, batch([b"before the cut was noticed"]))
                if r.error_code == 0:  # the broker had not seen the connection drop yet: a real ack
                    acked[r.base_offset] = b"before the cut was noticed"
                return r.error_code == NOT_LEADER_OR_FOLLOWER and r

            first = eventually("the cut-off broker refuses", refused)
            assert first.error_code == NOT_LEADER_OR_FOLLOWER
            owner_then = zk.get(node)[0].decode()  # the session has not expired yet: still its node
            assert f'"brokerId": {broker_id(cut_off)}' in owner_then
            # Nor does it name itself as the leader or the coordinator meanwhile: retriable "none yet".
            assert metadata(cut_off.bootstrap, [topic]).leaders[(topic, 0)] == (-1, LEADER_NOT_AVAILABLE)
            assert find_coordinator(cut_off.bootstrap, "g-" + topic)[0] == COORDINATOR_NOT_AVAILABLE
            eventually("the other broker leads the partition", lambda: metadata(other.bootstrap, [topic]).leaders[
                (topic, 0)][0] == broker_id(other), timeout=120)
            # Refused all along: the other broker owns it now.
            for _ in range(5):
                assert w.produce(topic, 0, batch([b"refused"])).error_code == NOT_LEADER_OR_FOLLOWER
        stopped_at = _log_time(cut_off, r"ZooKeeper connection lost: not serving")
        acquired_at = _log_time(other, r"acquired bundle public/default/" + re.escape(node.rsplit("/", 1)[1]))
        assert stopped_at < acquired_at, (stopped_at, acquired_at)

        with Negotiated(other.bootstrap) as w:
            for i in range(10):
                value = f"after-{i}".encode()
                r = eventually("a produce to the new owner", lambda w=w, v=value: (
                    r := w.produce(topic, 0, batch([v]))).error_code == 0 and r)
                acked[r.base_offset] = value
            # Offsets continue where the old owner stopped, after everything it acknowledged.
            assert len(acked) >= 20 and sorted(acked) == list(range(len(acked)))

        proxy.restore()
        eventually("the cut-off broker registered again", lambda: _log_time(
            cut_off, r"registered broker 1 .*") and cut_off.log_path.read_text().count("registered broker 1 ") >= 2,
            timeout=120)
        eventually("both brokers live", lambda: metadata(other.bootstrap, None).brokers.keys() == {1, 2})
        with Negotiated(cut_off.bootstrap) as w:
            assert eventually("still refused", lambda: w.produce(
                topic, 0, batch([b"late"])).error_code == NOT_LEADER_OR_FOLLOWER)
        with Negotiated(other.bootstrap) as w:
            got = w.fetch(topic, 0, 0)
            assert got.error_code == 0 and got.high_watermark == len(acked)
    finally:
        stop_brokers(brokers)
        proxy.close()
