"""A durable Shared Pulsar subscription across takeovers (issue #24: the chaos short form found the tail of one
partition never delivered after `broker-pause` and `all-brokers-kill`), on two brokers sharing ZooKeeper and the
bookies of tests/support/bookkeeper.py.

* The cause: a SUBSCRIBE (or PRODUCER) that reached the owner just before it lost the partition awaited the
  metadata store (policies, cursor) while the partition was released - its consumers told to go, its state
  dropped - and then attached its consumer to that dropped state and answered SUCCESS. Nothing would ever tell
  that consumer to go: it waited forever. The test queues the commands on a paused owner (raw Pulsar wire), lets
  the other broker take over, and wakes it: they must be refused with a retriable error (kop/pulsar/consume.py
  `served`); without the fix SUBSCRIBE was answered SUCCESS and nothing followed it.
* The whole path with the real pulsar-client: the owner of partition 0 paused past its session while a producer
  writes and a Shared consumer receives and acknowledges; the other broker takes over, the paused one comes back
  and gets the bundle back (the rendezvous choice: a graceful hand-back); every acknowledged record is delivered.
"""

from __future__ import annotations

import os
import signal
import threading
import time
import uuid
from typing import Any

import pulsar

from kop.pulsar.codec import commands as c
from tests.support.clients import create_topic
from tests.support.cluster import (
    SESSION_MS,
    ZooKeeperProxy,
    broker_id,
    eventually,
    leader_of,
    metadata,
    start_brokers,
    stop_brokers,
)
from tests.support.pulsar_wire import WireClient as PulsarWire

PARTITIONS = 2


class Load:
    """A producer sending unique values (async, no batching) and a Shared consumer acknowledging what it gets."""

    def __init__(self, url: str, topic: str) -> None:
        self.client = pulsar.Client(url, operation_timeout_seconds=30,
                                    logger=pulsar.ConsoleLogger(pulsar.LoggerLevel.Error))
        self.consumer = self.client.subscribe(topic, "durable", consumer_type=pulsar.ConsumerType.Shared,
                                              initial_position=pulsar.InitialPosition.Earliest)
        self.producer = self.client.create_producer(topic, send_timeout_millis=0, batching_enabled=False,
                                                    block_if_queue_full=True, max_pending_messages=500)
        self.acked: dict[str, int] = {}  # value -> partition
        self.received: set[str] = set()
        self.lock = threading.Lock()
        self.producing = threading.Event()
        self.producing.set()
        self.stopping = threading.Event()
        self.threads = [threading.Thread(target=self._produce, daemon=True),
                        threading.Thread(target=self._consume, daemon=True)]
        for t in self.threads:
            t.start()

    def _produce(self) -> None:
        seq = 0
        while self.producing.is_set():
            value = f"v-{seq}"

            def done(res: pulsar.Result, mid: pulsar.MessageId, value: str = value) -> None:
                if res == pulsar.Result.Ok:
                    with self.lock:
                        self.acked[value] = mid.partition()
            self.producer.send_async(value.encode(), done)
            seq += 1
            time.sleep(0.005)
        self.producer.flush()

    def _consume(self) -> None:
        while not self.stopping.is_set():
            try:
                msg = self.consumer.receive(timeout_millis=200)
            except pulsar.Timeout:
                continue
            except pulsar.PulsarException:
                time.sleep(0.1)
                continue
            with self.lock:
                self.received.add(msg.data().decode())
            self.consumer.acknowledge(msg)

    def count(self) -> int:
        with self.lock:
            return len(self.acked)

    def missing(self) -> dict[int, int]:
        """Per partition, how many acknowledged values the consumer has not received."""
        with self.lock:
            out: dict[int, int] = {}
            for v, p in self.acked.items():
                if v not in self.received:
                    out[p] = out.get(p, 0) + 1
            return out

    def close(self) -> None:
        self.producing.clear()
        self.stopping.set()
        for t in self.threads:
            t.join(timeout=30)
        self.client.close()


def test_a_shared_subscription_delivers_every_record_after_a_paused_owner_takeover(cluster, tmp_path_factory):
    brokers = start_brokers(tmp_path_factory, cluster, 2, messagingProtocols="kafka,pulsar",
                            brokerDeduplicationEnabled="true")
    try:
        topic = "ptake-" + uuid.uuid4().hex[:6]
        create_topic(brokers[0].bootstrap, topic, PARTITIONS)
        old = leader_of(brokers, topic, 0)
        new = next(b for b in brokers if b is not old)
        url = "pulsar://" + ",".join(f"127.0.0.1:{b.pulsar_port}" for b in brokers)
        load = Load(url, topic)
        try:
            eventually("records acknowledged before the pause", lambda: load.count() >= 200)
            os.kill(old.pid, signal.SIGSTOP)
            try:
                eventually("the other broker leads partition 0", lambda: metadata(new.bootstrap, [topic]).leaders[
                    (topic, 0)][0] == broker_id(new), timeout=120)
                time.sleep(SESSION_MS / 1000 / 2)  # past the session: the paused broker's session has expired
            finally:
                os.kill(old.pid, signal.SIGCONT)
            # the paused broker comes back, and the bundle with partition 0 goes back to it (its place)
            eventually("partition 0 back on its first owner", lambda: metadata(new.bootstrap, [topic]).leaders[
                (topic, 0)][0] == broker_id(old), timeout=120)
            before = load.count()
            eventually("records acknowledged after the hand-back", lambda: load.count() >= before + 200, timeout=120)
            load.producing.clear()
            load.threads[0].join(timeout=60)
            eventually("every acknowledged record delivered", lambda: not load.missing(), timeout=60)
        finally:
            print("missing per partition:", load.missing(), "acked:", load.count())
            load.close()
    finally:
        stop_brokers(brokers)



def _subscribe(w: PulsarWire, topic: str, consumer_id: int) -> None:
    w.send(c.command(c.SUBSCRIBE, topic=f"persistent://public/default/{topic}-partition-0", subscription="durable",
                     subType=1, consumer_id=consumer_id, request_id=consumer_id, initialPosition=1))  # Shared, Earliest


def _answer(w: PulsarWire, request_id: int) -> Any:
    """The answer to request `request_id` (SUCCESS or ERROR), past anything else the broker sends meanwhile
    (CLOSE_CONSUMER to the first consumer when the partition leaves); None if the connection ended first."""
    while True:
        try:
            frame = w.recv()
        except (TimeoutError, ConnectionError):
            return None
        if frame is None:
            return None
        if frame.type in (c.SUCCESS, c.ERROR, c.PRODUCER_SUCCESS) and frame.inner.request_id == request_id:
            return frame


def test_a_subscribe_met_by_the_loss_of_the_partition_is_refused(cluster, tmp_path_factory):
    """SUBSCRIBE reaches the owner while it is paused past its session (queued on a connection it accepted): when
    it wakes it loses the partition to the other broker while the command awaits the metadata store. Answering
    SUCCESS then attached the consumer to the abandoned partition - the broker had already told that partition's
    consumers to go, so this one would wait forever (the chaos runs' undelivered tail). It must be refused with a
    retriable error, and the client finds the subscription at the new owner."""
    settings = {"loadBalancerEnabled": "false", "messagingProtocols": "kafka,pulsar"}  # no hand-back
    proxy = ZooKeeperProxy(cluster.zk_port)
    chroot = f"/kop-cluster-{uuid.uuid4().hex[:10]}"
    brokers = start_brokers(tmp_path_factory, cluster, 1, chroot=chroot,
                            per_broker={1: {"metadataStoreUrl": f"zk:{proxy.connect}{chroot}"}}, **settings)
    old = brokers[0]
    try:
        topic = "psub-" + uuid.uuid4().hex[:6]
        create_topic(old.bootstrap, topic, 1)
        first, second, third = (PulsarWire(old.pulsar_port, timeout=60) for _ in range(3))
        for w in (first, second, third):
            w.connect()
        _subscribe(first, topic, 1)
        assert _answer(first, 1).type == c.SUCCESS  # the partition's state and subscription are open on broker 1
        brokers += start_brokers(tmp_path_factory, cluster, 1, chroot=old.chroot, first_id=2, **settings)
        new = brokers[1]
        os.kill(old.pid, signal.SIGSTOP)
        proxy.freeze()  # ZooKeeper's closing the expired session's connection does not reach broker 1
        try:
            eventually("the new owner leads the partition", lambda: metadata(new.bootstrap, [topic]).leaders[
                (topic, 0)][0] == broker_id(new), timeout=90)
            _subscribe(second, topic, 2)
            third.send(c.command(c.PRODUCER, topic=f"persistent://public/default/{topic}-partition-0",
                                 producer_id=1, request_id=4))
        finally:
            os.kill(old.pid, signal.SIGCONT)
        got = _answer(second, 2)
        assert got is not None and got.type == c.ERROR and got.inner.error == c.ServerError.ServiceNotReady, got
        produced = _answer(third, 4)  # a producer likewise: not PRODUCER_SUCCESS on a partition gone elsewhere
        assert produced is None or (produced.type == c.ERROR and produced.inner.error == c.ServerError.ServiceNotReady)
        fourth = PulsarWire(new.pulsar_port, timeout=60)  # the subscription is served by the new owner
        fourth.connect()
        _subscribe(fourth, topic, 3)
        assert _answer(fourth, 3).type == c.SUCCESS
        for w in (first, second, third, fourth):
            w.close()
    finally:
        stop_brokers(brokers)
        proxy.close()
