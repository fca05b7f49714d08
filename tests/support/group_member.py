"""One consumer-group member as its own process, so a test can SIGKILL it like a crashed application.

    python -m tests.support.group_member --client kafka-python|confluent-kafka --bootstrap B --topic T \
        --group G --log events.jsonl [--instance-id ID] [--session-timeout-ms 6000] [--batch-delay-ms 0]

It subscribes, and after processing each batch commits the next offsets synchronously ("commit after
processing"). Every event is one JSON line with a system-wide monotonic timestamp "t", written with a single os.write so that a SIGKILL never leaves a
torn line:

    {"ev": "assigned", "parts": [0, 3]}          partitions received in a rebalance
    {"ev": "revoked", "parts": [0, 3]}
    {"ev": "consumed", "recs": [[p, offset, value], ...]}
    {"ev": "commit", "ok": true, "offsets": {"p": next_offset}}
    {"ev": "commit", "ok": false, "offsets": {...}, "error": "..."}

SIGTERM closes the consumer gracefully (LeaveGroup for dynamic members) and exits.
"""

from __future__ import annotations

import argparse
import faulthandler
import json
import os
import signal
import time
from typing import Any

_stop = False
_interruptible = False  # True while blocked in kafka-python's poll(): SIGTERM then interrupts it


class _Stop(Exception):  # noqa: N818 - a signal, not an error
    pass


def _on_term(signum: int, frame: Any) -> None:
    global _stop
    _stop = True
    if _interruptible:
        raise _Stop


class Log:
    def __init__(self, path: str) -> None:
        self.fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)

    def write(self, **event: Any) -> None:
        # CLOCK_MONOTONIC is one clock for every process of the machine: events of several members can be
        # put in order (which member read a record first), never used to measure anything.
        event["t"] = time.monotonic()
        os.write(self.fd, (json.dumps(event) + "\n").encode())


def run_kafka_python(args: argparse.Namespace, log: Log) -> None:
    from kafka import KafkaConsumer, OffsetAndMetadata, TopicPartition
    from kafka.consumer.subscription_state import ConsumerRebalanceListener

    class Listener(ConsumerRebalanceListener):
        def on_partitions_revoked(self, revoked: Any) -> None:
            log.write(ev="revoked", parts=sorted(tp.partition for tp in revoked))

        def on_partitions_assigned(self, assigned: Any) -> None:
            log.write(ev="assigned", parts=sorted(tp.partition for tp in assigned))

    extra: dict[str, Any] = {}
    if args.instance_id:
        extra["group_instance_id"] = args.instance_id
    consumer = KafkaConsumer(
        bootstrap_servers=args.bootstrap, group_id=args.group, client_id=args.client_id or "member-kafka-python",
        enable_auto_commit=False, auto_offset_reset="earliest", session_timeout_ms=args.session_timeout_ms,
        heartbeat_interval_ms=min(1000, args.session_timeout_ms // 3), max_poll_interval_ms=30000,
        max_poll_records=args.max_records, request_timeout_ms=max(40000, args.session_timeout_ms + 5000), **extra,
    )
    # Know the topic's partitions before joining. kafka-python 3.0.12 otherwise joins with no metadata, then
    # rejoins when the metadata arrives; if that rejoin's JoinGroup/SyncGroup is still in flight when a
    # poll() times out, its need_rejoin() turns False (the metadata snapshots match again) and the
    # completed join is never processed: the member stops heartbeating and loses its session, against any
    # broker (seen with Apache Kafka too).
    while not consumer.partitions_for_topic(args.topic):
        time.sleep(0.1)
    consumer.subscribe([args.topic], listener=Listener())
    global _interruptible
    try:
        while not _stop:
            # A long poll: kafka-python 3.0.12 can lose a rebalance whose JoinGroup/SyncGroup is still in
            # flight when poll() times out (the member then stops heartbeating; seen against Apache Kafka
            # too), so poll() must outlast any rebalance here; SIGTERM interrupts it.
            _interruptible = True
            try:
                batch = consumer.poll(timeout_ms=10000)
            except _Stop:
                break
            finally:
                _interruptible = False
            recs = [[tp.partition, m.offset, m.value.decode()] for tp, msgs in batch.items() for m in msgs]
            if not recs:
                continue
            log.write(ev="consumed", recs=recs)
            if args.batch_delay_ms:
                time.sleep(args.batch_delay_ms / 1000)
            offsets: dict[int, int] = {}
            for p, o, _ in recs:
                offsets[p] = max(offsets.get(p, 0), o + 1)
            try:
                consumer.commit({TopicPartition(args.topic, p): OffsetAndMetadata(o, "", -1) for p, o in offsets.items()})
                log.write(ev="commit", ok=True, offsets=offsets)
            except Exception as e:
                log.write(ev="commit", ok=False, offsets=offsets, error=repr(e))
    finally:
        consumer.close(autocommit=False)
        log.write(ev="closed")


def run_confluent(args: argparse.Namespace, log: Log) -> None:
    from confluent_kafka import Consumer, KafkaException, TopicPartition

    conf: dict[str, Any] = {
        "bootstrap.servers": args.bootstrap, "group.id": args.group, "client.id": args.client_id or "member-confluent",
        "enable.auto.commit": False, "enable.auto.offset.store": False, "auto.offset.reset": "earliest",
        "max.poll.interval.ms": max(30000, args.session_timeout_ms),  # librdkafka: must be >= the session timeout
    }
    if args.group_protocol == "consumer":
        # KIP-848: the broker sets the session timeout and heartbeat interval (librdkafka refuses both keys)
        conf["group.protocol"] = "consumer"
    else:
        conf["session.timeout.ms"] = args.session_timeout_ms
        conf["heartbeat.interval.ms"] = min(1000, args.session_timeout_ms // 3)
    if args.instance_id:
        conf["group.instance.id"] = args.instance_id
    consumer = Consumer(conf)

    # With the consumer protocol (KIP-848) rebalances are incremental: the callbacks name only what is added
    # or taken away, so the member logs its whole assignment after each change, as for the classic protocol.
    incremental = args.group_protocol == "consumer"
    current: set[int] = set()

    def on_assign(c: Any, parts: list[Any]) -> None:
        if not incremental:
            current.clear()
        current.update(tp.partition for tp in parts)
        log.write(ev="assigned", parts=sorted(current))

    def on_revoke(c: Any, parts: list[Any]) -> None:
        log.write(ev="revoked", parts=sorted(tp.partition for tp in parts))
        current.difference_update(tp.partition for tp in parts)
        if incremental and current:
            log.write(ev="assigned", parts=sorted(current))

    consumer.subscribe([args.topic], on_assign=on_assign, on_revoke=on_revoke)
    try:
        while not _stop:
            msgs = consumer.consume(num_messages=args.max_records, timeout=0.2)
            recs = []
            for m in msgs:
                if m.error():
                    log.write(ev="error", error=str(m.error()))
                    continue
                recs.append([m.partition(), m.offset(), m.value().decode()])
            if not recs:
                continue
            log.write(ev="consumed", recs=recs)
            if args.batch_delay_ms:
                time.sleep(args.batch_delay_ms / 1000)
            offsets: dict[int, int] = {}
            for p, o, _ in recs:
                offsets[p] = max(offsets.get(p, 0), o + 1)
            try:
                consumer.commit(offsets=[TopicPartition(args.topic, p, o) for p, o in offsets.items()],
                                asynchronous=False)
                log.write(ev="commit", ok=True, offsets=offsets)
            except KafkaException as e:
                log.write(ev="commit", ok=False, offsets=offsets, error=str(e))
    finally:
        consumer.close()
        log.write(ev="closed")


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--client", choices=["kafka-python", "confluent-kafka"], required=True)
    p.add_argument("--bootstrap", required=True)
    p.add_argument("--topic", required=True)
    p.add_argument("--group", required=True)
    p.add_argument("--log", required=True)
    p.add_argument("--client-id", default="")
    p.add_argument("--instance-id", default="")
    p.add_argument("--session-timeout-ms", type=int, default=6000)
    p.add_argument("--batch-delay-ms", type=int, default=0)
    p.add_argument("--max-records", type=int, default=50)
    p.add_argument("--group-protocol", choices=["classic", "consumer"], default="classic")
    args = p.parse_args()
    signal.signal(signal.SIGTERM, _on_term)
    # SIGUSR1 dumps every thread's stack to stderr: the harness asks for it when a member seems stuck.
    faulthandler.register(signal.SIGUSR1, all_threads=True)
    if os.environ.get("KOP_MEMBER_DEBUG"):
        import logging

        logging.basicConfig(level=logging.DEBUG, format="%(asctime)s %(threadName)s %(name)s: %(message)s")
    log = Log(args.log)
    log.write(ev="started", pid=os.getpid())
    if args.client == "kafka-python":
        run_kafka_python(args, log)
    else:
        run_confluent(args, log)


if __name__ == "__main__":
    main()
