"""A broker paused past its ZooKeeper session answers nothing from stale state (issue #24), against the real
ZooKeeper and bookies of tests/support/bookkeeper.py and two of our brokers on a 4 s session.

Broker 1 leads the topic's partition and coordinates the group (it started alone; loadBalancerEnabled=false
keeps everything where it is). It is SIGSTOPped until its session expired and broker 2 leads the partition
and coordinates the group, where a newer offset is committed. Meanwhile requests are written on connections
opened to broker 1 before the pause - Metadata, OffsetFetch, Produce and Fetch on the Kafka port, a SEND of
an open producer on the Pulsar port - and broker 1 is SIGCONTed. It reads them at once, before kazoo has
reported anything; its session lease (kop/cluster/lease.py: 2/3 of the session after the last proof of
life, on the monotonic clock that ran on while it was stopped) has lapsed, so each gets a retriable error
(or no answer): Metadata does not name broker 1 leader, OffsetFetch does not give the old offset, the
Produce and the SEND are not acknowledged and the Fetch returns nothing. The new owner then holds exactly
the acknowledged records.
"""

from __future__ import annotations

import os
import signal
import uuid
from typing import Any

from kafka.protocol.consumer import OffsetCommitRequest, OffsetFetchRequest
from kafka.protocol.metadata import MetadataRequest

from kop.pulsar.codec import commands as c
from tests.support.admin import batch
from tests.support.clients import create_topic
from tests.support.cluster import (
    ZooKeeperProxy,
    broker_id,
    eventually,
    find_coordinator,
    metadata,
    start_brokers,
    stop_brokers,
)
from tests.support.pulsar_wire import WireClient as PulsarWire
from tests.support.wire import Negotiated, fetch_request, produce_request

NOT_LEADER_OR_FOLLOWER, LEADER_NOT_AVAILABLE = 6, 5
COORDINATOR_ERRORS = {14, 15, 16}  # LOAD_IN_PROGRESS, NOT_AVAILABLE, NOT_COORDINATOR
OLD_OFFSET, NEW_OFFSET = 5, 10
ANSWER_WAIT_S = 15  # how long a pipelined request may stay unanswered (then: "no answer", which is allowed)


def _commit(group: str, topic: str, offset: int) -> Any:
    T = OffsetCommitRequest.OffsetCommitRequestTopic
    return OffsetCommitRequest(group_id=group, generation_id_or_member_epoch=-1, member_id="", group_instance_id=None,
                               retention_time_ms=-1, topics=[T(name=topic, partitions=[
                                   T.OffsetCommitRequestPartition(partition_index=0, committed_offset=offset,
                                                                  committed_leader_epoch=-1, committed_metadata="")])])


def _offset_fetch(group: str, topic: str) -> Any:
    FT = OffsetFetchRequest.OffsetFetchRequestTopic
    return OffsetFetchRequest(group_id=group, topics=[FT(name=topic, partition_indexes=[0])], require_stable=False)


def _metadata(topic: str) -> Any:
    return MetadataRequest(topics=[MetadataRequest.MetadataRequestTopic(name=topic)], allow_auto_topic_creation=False)


class Pipelined:
    """One request written on an already-open connection without reading; answer() reads it later (None: no
    answer within ANSWER_WAIT_S, or the connection closed)."""

    def __init__(self, conn: Negotiated, request: Any, cap: int) -> None:
        self.conn, self.request = conn, request
        self.version = conn.version(type(request)[None], cap)

    def submit(self) -> None:
        self.conn.submit(self.request, self.version)

    def answer(self) -> Any:
        self.conn.sock.settimeout(ANSWER_WAIT_S)
        try:
            return self.conn.receive(self.request, self.version)
        except (TimeoutError, ConnectionError):
            return None


def _pulsar_producer(port: int, topic: str) -> PulsarWire:
    """A raw Pulsar connection with producer 1 open on partition 0 of `topic`, one message acknowledged."""
    w = PulsarWire(port, timeout=ANSWER_WAIT_S)
    w.connect()
    w.send(c.command(c.PRODUCER, topic=f"persistent://public/default/{topic}-partition-0", producer_id=1,
                     request_id=1, producer_name="paused-test"))
    w.expect(c.PRODUCER_SUCCESS)
    _pulsar_send(w, 0)
    assert w.expect(c.SEND_RECEIPT).sequence_id == 0
    return w


def _pulsar_send(w: PulsarWire, seq: int) -> None:
    md = c.MessageMetadata(producer_name="paused-test", sequence_id=seq, publish_time=1)
    w.send_message(c.command(c.SEND, producer_id=1, sequence_id=seq), md, f"pulsar-{seq}".encode())


def _pulsar_answer(w: PulsarWire, seq: int) -> int | None:
    """The type of the answer to SEND `seq` (SEND_RECEIPT or SEND_ERROR); None: none came (closed, timeout)."""
    while True:
        try:
            frame = w.recv()
        except (TimeoutError, ConnectionError):
            return None
        if frame is None:
            return None
        if frame.type in (c.SEND_RECEIPT, c.SEND_ERROR) and frame.inner.sequence_id == seq:
            return frame.type


def _take_over(new: Any, topic: str, group: str) -> None:
    """Wait until `new` leads the partition and coordinates the group (the old owner's session expired),
    then commit NEW_OFFSET there."""
    me = broker_id(new)
    eventually("the new owner leads the partition",
               lambda: metadata(new.bootstrap, [topic]).leaders[(topic, 0)] == (me, 0), timeout=90)
    eventually("the new owner coordinates the group",
               lambda: find_coordinator(new.bootstrap, group)[:2] == (0, me), timeout=90)
    with Negotiated(new.bootstrap) as w:
        eventually("a commit on the new coordinator", lambda: w.call(_commit(group, topic, NEW_OFFSET), cap=7)
                   .topics[0].partitions[0].error_code == 0, timeout=60)


def test_a_paused_broker_answers_nothing_from_stale_state(cluster, tmp_path_factory):
    settings = {"loadBalancerEnabled": "false"}
    proxy = ZooKeeperProxy(cluster.zk_port)
    chroot = f"/kop-cluster-{uuid.uuid4().hex[:10]}"
    brokers = start_brokers(tmp_path_factory, cluster, 1, chroot=chroot,
                            per_broker={1: {"metadataStoreUrl": f"zk:{proxy.connect}{chroot}"}}, **settings)
    old = brokers[0]
    try:
        topic, group = "paused-" + uuid.uuid4().hex[:6], "paused-group-" + uuid.uuid4().hex[:6]
        create_topic(old.bootstrap, topic, 1)
        assert find_coordinator(old.bootstrap, group)[:2] == (0, 1)  # alone: it owns everything
        with Negotiated(old.bootstrap) as w:
            assert w.produce(topic, 0, batch([b"k-0", b"k-1", b"k-2"])).error_code == 0
            assert eventually("a commit", lambda: w.call(_commit(group, topic, OLD_OFFSET), cap=7)
                              .topics[0].partitions[0].error_code == 0)
        pulsar = _pulsar_producer(old.pulsar_port, topic)  # 4 records acknowledged in all
        brokers += start_brokers(tmp_path_factory, cluster, 1, chroot=old.chroot, first_id=2, **settings)
        new = brokers[1]
        conns = [Negotiated(old.bootstrap, timeout=ANSWER_WAIT_S) for _ in range(4)]
        requests = [Pipelined(conns[0], _metadata(topic), 12), Pipelined(conns[1], _offset_fetch(group, topic), 7),
                    Pipelined(conns[2], produce_request(topic, 0, batch([b"stale"])), 9),
                    Pipelined(conns[3], fetch_request(topic, 0, 0), 12)]

        os.kill(old.pid, signal.SIGSTOP)
        proxy.freeze()  # ZooKeeper's closing the expired session's connection does not reach broker 1
        try:
            _take_over(new, topic, group)
            for r in requests:
                r.submit()
            _pulsar_send(pulsar, 1)
        finally:
            os.kill(old.pid, signal.SIGCONT)
        md, offsets, produced, fetched = (r.answer() for r in requests)
        sent = _pulsar_answer(pulsar, 1)

        if md is not None:  # never "broker 1 leads it": no leader, or broker 2
            (t,) = md.topics
            assert (t.partitions[0].leader_id, t.partitions[0].error_code) in ((-1, LEADER_NOT_AVAILABLE), (2, 0))
        if offsets is not None:  # never the offset broker 2 has replaced
            assert offsets.error_code in COORDINATOR_ERRORS, offsets
        if produced is not None:
            assert produced.responses[0].partition_responses[0].error_code == NOT_LEADER_OR_FOLLOWER
        if fetched is not None:
            p = fetched.responses[0].partitions[0]
            assert p.error_code == NOT_LEADER_OR_FOLLOWER and not p.records
        assert sent != c.SEND_RECEIPT
        # The new owner holds exactly the acknowledged records; the old one names it once it serves again.
        with Negotiated(new.bootstrap) as w:
            assert eventually("a fetch on the new owner", lambda: (r := w.fetch(topic, 0, 0)).error_code == 0 and r
                              ).high_watermark == 4
            assert w.call(_offset_fetch(group, topic), cap=7).topics[0].partitions[0].committed_offset == NEW_OFFSET
        eventually("the old broker names the new leader",
                   lambda: metadata(old.bootstrap, [topic]).leaders[(topic, 0)] == (2, 0))
        assert "session lease lapsed" in old.log_path.read_text(errors="replace")
        for w in [*conns, pulsar]:
            w.close()
    finally:
        stop_brokers(brokers)
        proxy.close()
