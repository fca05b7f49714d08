"""The chaos suite's workloads: real clients in threads against the cluster under test, each recording a
History (tests/chaos/checker.py) as it goes, and reading the log back once the load stopped.

- IdempotentProducer: confluent-kafka, enable.idempotence, acks=all, unique values spread over partitions.
- GroupConsumer: a consumer group of two confluent-kafka members reading that topic with manual synchronous
  commits, asking the coordinator for the group's committed offsets now and then (stale reads).
- TransactionalCopier: consume-transform-produce with confluent-kafka transactions (kafka-python has none):
  read_committed input, output plus sendOffsetsToTransaction committed together; every fourth transaction
  writes marker values only and is aborted - none may ever reach a read_committed reader.
- PulsarWorkload: a pulsar-client producer and a durable Shared subscription acknowledging what it receives.

A client error during a fault is no finding by itself (clients retry, or the workload starts a new session);
only what the checker finds in the histories is.
"""

from __future__ import annotations

import logging
import threading
import time
import uuid
from typing import Any

from .checker import Ack, Commit, CommittedAnswer, History, Read

# librdkafka logs every dropped connection at NOTICE: a fault's expected noise (errors reach the workloads).
QUIET = {"log_level": 2}
FINAL_READ_S = 90  # bound on reading the log back after the heal (the cluster converging; not a measurement)
HUNG_S = 45.0  # a transactional call blocked this long (its own timeouts are 30 s) is taken for hung


def now() -> float:
    return time.monotonic()


class Workload:
    """A thread running `run` until stop(); `history` is appended under `lock`."""

    name = "workload"

    def __init__(self, bootstrap: str) -> None:
        self.bootstrap = bootstrap
        self.history = History(workloads={self.name})
        self.lock = threading.Lock()
        self.stopping = threading.Event()
        self.errors: list[str] = []
        self._threads: list[threading.Thread] = []

    def start(self) -> None:
        for i, target in enumerate(self.targets()):
            t = threading.Thread(target=self._guarded, args=(target,), name=f"chaos-{self.name}-{i}", daemon=True)
            t.start()
            self._threads.append(t)

    def targets(self) -> list[Any]:
        return [self.run]

    def run(self) -> None:  # pragma: no cover - every subclass defines it (or targets)
        raise NotImplementedError

    def _guarded(self, target: Any) -> None:
        try:
            target()
        except Exception as e:  # a workload that died is reported (and shows as stuck), not swallowed
            self.errors.append(f"{self.name}: {e!r}")

    def stop(self, timeout: float = 60) -> None:
        self.stopping.set()
        for t in self._threads:
            t.join(timeout)

    def final_read(self) -> None:
        """Fill history.final (default: nothing to read back)."""


def read_log(bootstrap: str, topic: str, partitions: int, committed: bool) -> dict[tuple[str, int], list]:
    """Every record of `topic` from the beginning up to each partition's end (the last stable offset under
    read_committed): {(topic, partition): [(offset, value)]}."""
    from confluent_kafka import Consumer, KafkaError, TopicPartition

    c = Consumer({**QUIET, "bootstrap.servers": bootstrap, "group.id": f"chaos-read-{uuid.uuid4().hex[:6]}",
                  "enable.auto.commit": False, "enable.partition.eof": True,
                  "isolation.level": "read_committed" if committed else "read_uncommitted"})
    out: dict[tuple[str, int], list] = {(topic, p): [] for p in range(partitions)}
    try:
        ends = {p: _high_watermark(c, topic, p) for p in range(partitions)}
        c.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
        done: set[int] = set()
        deadline = now() + FINAL_READ_S
        while len(done) < partitions and now() < deadline:
            for m in c.consume(500, 0.5):
                if m.error():
                    if m.error().code() == KafkaError._PARTITION_EOF and m.offset() >= ends[m.partition()]:
                        done.add(m.partition())
                    continue
                out[(topic, m.partition())].append((m.offset(), m.value().decode()))
    finally:
        c.close()
    return out


def _high_watermark(c: Any, topic: str, partition: int) -> int:
    """The partition's high watermark, asked again while the client's metadata still names an old leader."""
    from confluent_kafka import KafkaException, TopicPartition

    deadline = now() + FINAL_READ_S
    while True:
        try:
            return int(c.get_watermark_offsets(TopicPartition(topic, partition), timeout=30)[1])
        except KafkaException:
            if now() > deadline:
                raise
            time.sleep(0.5)


class IdempotentProducer(Workload):
    name = "producer"

    def __init__(self, bootstrap: str, topic: str, partitions: int, name: str = "producer") -> None:
        self.name = name
        super().__init__(bootstrap)
        self.topic, self.partitions = topic, partitions

    def run(self) -> None:
        from confluent_kafka import Producer

        p = Producer({**QUIET, "bootstrap.servers": self.bootstrap, "enable.idempotence": True, "acks": "all",
                      "linger.ms": 5, "message.timeout.ms": 300000, "retry.backoff.ms": 100})
        seq = 0
        while not self.stopping.is_set():
            value = f"{self.name}-{seq}"
            try:
                p.produce(self.topic, value.encode(), partition=seq % self.partitions,
                          on_delivery=self._delivered(value, seq))
            except BufferError:
                p.poll(0.1)
                continue
            seq += 1
            p.poll(0.005)
        p.flush(30)

    def _delivered(self, value: str, seq: int) -> Any:
        def cb(err: Any, msg: Any) -> None:
            if err is None:
                with self.lock:
                    self.history.acks.append(Ack(self.name, msg.topic(), msg.partition(), msg.offset(), value, seq,
                                                 now()))
        return cb

    def final_read(self) -> None:
        self.history.final.update(read_log(self.bootstrap, self.topic, self.partitions, committed=False))


class GroupConsumer(Workload):
    """Two members of one group; reader names are `<group>/<member>` (the checker groups reads by group)."""

    def __init__(self, bootstrap: str, topic: str, group: str) -> None:
        self.name = group
        super().__init__(bootstrap)
        self.topic, self.group = topic, group
        self.history.group_topics[(group, topic)] = 0

    def targets(self) -> list[Any]:
        return [lambda: self.member("m1"), lambda: self.member("m2")]

    def member(self, member: str) -> None:
        from confluent_kafka import Consumer, KafkaException

        c = Consumer({**QUIET, "bootstrap.servers": self.bootstrap, "group.id": self.group, "enable.auto.commit": False,
                      "auto.offset.reset": "earliest", "session.timeout.ms": 10000,
                      "heartbeat.interval.ms": 1000})
        c.subscribe([self.topic])
        asked_last = 0.0
        try:
            while not self.stopping.is_set():
                msgs = [m for m in c.consume(200, 0.3) if not m.error()]
                with self.lock:
                    self.history.reads += [Read(f"{self.group}/{member}", m.topic(), m.partition(), m.offset(),
                                                m.value().decode()) for m in msgs]
                try:
                    if msgs:
                        self._commit(c)
                    if now() - asked_last > 1:
                        asked_last = now()
                        self._ask(c)
                except KafkaException:
                    pass  # a fault: the next round tries again
        finally:
            c.close()

    def _commit(self, c: Any) -> None:
        done = c.commit(asynchronous=False)
        at = now()
        with self.lock:
            self.history.commits += [Commit(self.group, tp.topic, tp.partition, tp.offset, at)
                                     for tp in done or [] if tp.error is None and tp.offset >= 0]

    def _ask(self, c: Any) -> None:
        assignment = c.assignment()
        if not assignment:
            return
        asked = now()
        got = c.committed(assignment, timeout=10)
        with self.lock:
            self.history.answers += [CommittedAnswer(self.group, tp.topic, tp.partition, tp.offset, asked)
                                     for tp in got if tp.error is None and tp.offset >= 0]


class TransactionalCopier(Workload):
    """Consume-transform-produce as a correct application writes it (confluent-kafka's transactional API
    docs and its eos example): ONE consumer for the whole run; a commit that fails retriably is committed
    again; any other failure aborts the transaction and rewinds the consumer to its committed offsets; only a
    fatal error (the producer fenced), a failed abort or a call that hung makes a new producer, whose
    init_transactions fences the old one and aborts what it left open.

    Issue #24's stuck copier (no commit in the 120 s after a heal) was this workload: py-spy showed it
    blocked inside librdkafka's send_offsets_to_transaction long past the call's 30 s timeout after a
    ZooKeeper kill (librdkafka issues 5456 and 5511), with no way out; it also re-created its consumer with
    its producer after any error, which an application does not do. See `run` for the way out."""

    name = "txn"

    def __init__(self, bootstrap: str, source: str, sink: str, partitions: int) -> None:
        super().__init__(bootstrap)
        self.source, self.sink, self.partitions = source, sink, partitions
        self.transactional_id = f"chaos-txn-{uuid.uuid4().hex[:6]}"
        self.seq = 0
        self.rounds = 0
        self.rewind = False  # an aborted transaction's input must be consumed again
        self.generation = 0  # the session thread that may use the consumer (run)
        self.progress = now()  # when the session last finished a step (run's watchdog)
        self.empty_rounds = 0  # rounds since the last commit that consumed nothing (a stuck copier's status)
        self.committed_at = 0.0  # when a transaction last committed
        self.history.final_committed.add(sink)

    def run(self) -> None:
        """The consumer, and a session thread per producer. librdkafka's send_offsets_to_transaction can
        block past its timeout, for good, when the group coordinator was unreachable (librdkafka issues 5456
        and 5511, open in 2.16): a call blocked over HUNG_S is left behind with its thread, and a new session
        with a new producer (whose init_transactions fences the old one) goes on - what an application using
        this client has to do too; the old thread returns without touching the consumer if it ever wakes."""
        from confluent_kafka import Consumer

        c = Consumer({**QUIET, "bootstrap.servers": self.bootstrap, "group.id": self.transactional_id,
                      "enable.auto.commit": False, "auto.offset.reset": "earliest",
                      "isolation.level": "read_committed"})
        c.subscribe([self.source])
        t = None
        try:
            while not self.stopping.is_set():
                self.generation += 1
                self.progress = now()
                t = threading.Thread(target=self._session, args=(c, self.generation), daemon=True,
                                     name=f"chaos-txn-session-{self.generation}")
                t.start()
                while t.is_alive() and not self.stopping.is_set() and now() - self.progress < HUNG_S:
                    t.join(0.5)
                if t.is_alive() and not self.stopping.is_set():
                    self.errors.append(f"txn session ended at {now():.1f}: a transactional call blocked for "
                                       f"{HUNG_S:.0f} s (librdkafka 5456): a new producer; blocked in "
                                       f"{_innermost_call(t)}")
                    self.rewind = True
            if t is not None:
                t.join(60)
        finally:
            self.errors.append(self._status(c))
            c.close()

    def _session(self, c: Any, generation: int) -> None:
        from confluent_kafka import KafkaException

        p = None
        try:
            while not self.stopping.is_set() and generation == self.generation:
                try:
                    if p is None:  # first, so that its init_transactions aborts what the old one left open
                        p = self._producer()
                except KafkaException as e:
                    p = self._recover(None, e)
                    continue
                if generation != self.generation or (self.rewind and not self._rewind(c)):
                    continue
                try:
                    self.rounds += 1
                    if self.rounds % 4 == 0:
                        self._aborted_round(p)
                    else:
                        self._copy_round(c, p)
                    self.progress = now()
                except KafkaException as e:
                    p = self._recover(p, e)
        finally:
            if p is not None:
                p.flush(5)

    def _producer(self) -> Any:
        from confluent_kafka import Producer

        p = Producer({**QUIET, "bootstrap.servers": self.bootstrap, "transactional.id": self.transactional_id,
                      "transaction.timeout.ms": 10000, "message.timeout.ms": 10000})
        p.init_transactions(30)
        return p

    def _recover(self, p: Any, e: Exception) -> Any:
        """After a failed step: the producer to go on with (None: make a new one). The transaction is
        aborted unless the producer is fenced (fatal); either way the input is consumed again."""
        from confluent_kafka import KafkaException

        err = e.args[0] if e.args else None
        fatal = err is not None and hasattr(err, "fatal") and err.fatal()
        self.errors.append(f"txn session ended at {now():.1f}: {e}{' (fatal)' if fatal else ''}")
        self.rewind = True
        if p is None or fatal:
            time.sleep(0.2)
            return None
        try:
            p.abort_transaction(30)
        except KafkaException as abort_error:  # no transaction open, or the coordinator unreachable
            self.errors.append(f"txn session ended at {now():.1f}: abort: {abort_error}")
            return None
        return p

    def _rewind(self, c: Any) -> bool:
        """Back to the committed offsets (stable ones: a transaction's offsets count once it completed), as
        the eos example does after an abort; False when the group coordinator did not answer (tried again)."""
        from confluent_kafka import OFFSET_BEGINNING, KafkaException, TopicPartition

        try:
            assignment = c.assignment()
            for tp in c.committed(assignment, timeout=30) if assignment else []:
                c.seek(TopicPartition(tp.topic, tp.partition, tp.offset if tp.offset >= 0 else OFFSET_BEGINNING))
        except KafkaException as e:
            self.errors.append(f"txn session ended at {now():.1f}: rewind: {e}")
            time.sleep(0.2)
            return False
        self.rewind = False
        return True

    def _aborted_round(self, p: Any) -> None:
        values = [f"{self.name}-aborted-{self.rounds}-{k}" for k in range(3)]
        with self.lock:
            self.history.aborted.update(values)  # never committed, whatever happens next
        p.begin_transaction()
        for k, v in enumerate(values):
            p.produce(self.sink, v.encode(), partition=k % self.partitions)
        p.abort_transaction(30)

    def _status(self, c: Any) -> str:
        """The copier as the load stopped (a note: printed with a stuck copier): its last commit, the rounds
        since that consumed nothing, and the consumer's assignment with its positions."""
        try:
            assignment = c.assignment()
            where = [(tp.partition, tp.offset) for tp in c.position(assignment)] if assignment else []
        except Exception as e:  # noqa: BLE001 - a status line, whatever the client says
            where = [repr(e)]
        return (f"txn status at stop ({now():.1f}): last commit at {self.committed_at:.1f}, {self.rounds} rounds, "
                f"{self.empty_rounds} empty since the last commit, generation {self.generation}, rewind pending "
                f"{self.rewind}; positions {where}")

    def _copy_round(self, c: Any, p: Any) -> None:
        msgs = [m for m in c.consume(100, 0.3) if not m.error()]
        if not msgs:
            self.empty_rounds += 1
            return
        p.begin_transaction()
        written = []
        for m in msgs:
            value = f"{self.name}:{m.partition()}:{m.offset()}"
            p.produce(self.sink, value.encode(), partition=m.partition() % self.partitions)
            written.append((value, m.partition() % self.partitions, self.seq))
            self.seq += 1
        p.send_offsets_to_transaction(c.position(c.assignment()), c.consumer_group_metadata(), 30)
        self._commit(p)
        at = self.committed_at = now()
        self.empty_rounds = 0
        with self.lock:
            self.history.acks += [Ack(self.name, self.sink, part, None, v, seq, at) for v, part, seq in written]

    def _commit(self, p: Any) -> None:
        """commit_transaction, again while it fails retriably (its outcome unknown: committing again is safe)."""
        from confluent_kafka import KafkaException

        while True:
            try:
                p.commit_transaction(30)
                return
            except KafkaException as e:
                if not e.args[0].retriable() or self.stopping.is_set():
                    raise
                self.errors.append(f"txn session ended at {now():.1f}: commit retried: {e}")

    def final_read(self) -> None:
        self.history.final.update(read_log(self.bootstrap, self.sink, self.partitions, committed=True))


class PulsarWorkload(Workload):
    """The log is read back through the Kafka port (the same topic): message ids are not Kafka offsets, so
    acknowledgements name no position, and the subscription's receptions are checked for delivery."""

    name = "pulsar"

    def __init__(self, service_url: str, topic: str, partitions: int, kafka_bootstrap: str,
                 log_path: str | None = None) -> None:
        super().__init__(service_url)
        self.log_path = log_path  # the client library's own log (its reconnections), kept with KOP_CHAOS_KEEP
        self.topic = f"persistent://public/default/{topic}"
        self.short, self.partitions, self.kafka_bootstrap = topic, partitions, kafka_bootstrap
        self.received: set[str] = set()
        self.last_received: dict[int, float] = {}  # partition -> when the subscription last handed one of it
        self.receipts: dict[str, tuple[int, int, int]] = {}  # value -> its receipt (ledger, entry, partition)
        self.history.delivered[topic] = self.received

    def targets(self) -> list[Any]:
        import pulsar

        quiet = logging.getLogger("chaos-pulsar")
        quiet.setLevel(logging.CRITICAL)
        if self.log_path:  # what the client did (lookups, reconnections and their back-off) for a post-mortem
            handler = logging.FileHandler(self.log_path)
            handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(message)s"))
            quiet.addHandler(handler)
            quiet.setLevel(logging.INFO)
        self.client = pulsar.Client(self.bootstrap, operation_timeout_seconds=30, logger=quiet)
        self.consumer = self._retrying("subscribe", lambda: self.client.subscribe(
            self.topic, "chaos-durable", consumer_type=pulsar.ConsumerType.Shared,
            initial_position=pulsar.InitialPosition.Earliest))
        return [self.produce, self.consume]

    def _retrying(self, what: str, action: Any) -> Any:
        """`action` again while it times out, as an application retries: a subscribe or a producer's
        creation that meets the fault (its cursor or lookup waits on storage) times out after 30 s."""
        import pulsar

        deadline = now() + FINAL_READ_S
        while True:
            try:
                return action()
            except pulsar.PulsarException as e:
                if now() > deadline:
                    raise
                self.errors.append(f"pulsar session ended at {now():.1f}: {what}: {e!r}")

    def produce(self) -> None:
        import pulsar

        producer = self._retrying("create_producer", lambda: self.client.create_producer(
            self.topic, send_timeout_millis=0, batching_enabled=False, block_if_queue_full=True,
            max_pending_messages=1000))
        seq = 0
        while not self.stopping.is_set():
            value = f"{self.name}-{seq}"

            def cb(res: Any, msg_id: Any, value: str = value, seq: int = seq) -> None:
                if res == pulsar.Result.Ok:
                    with self.lock:
                        self.receipts[value] = (msg_id.ledger_id(), msg_id.entry_id(), msg_id.partition())
                        self.history.acks.append(Ack(self.name, self.short, max(msg_id.partition(), 0), None,
                                                     value, seq, now()))
            producer.send_async(value.encode(), cb)
            seq += 1
            time.sleep(0.005)
        producer.flush()

    def consume(self) -> None:
        while not self.stopping.is_set():
            self._receive_one()

    def _receive_one(self) -> bool:
        import pulsar

        try:
            msg = self.consumer.receive(timeout_millis=300)
        except pulsar.Timeout:
            return False
        except pulsar.PulsarException:
            time.sleep(0.2)
            return False
        mid = msg.message_id()
        value = msg.data().decode()
        with self.lock:  # under a topic name of their own: message ids, compared among themselves only
            self.history.reads.append(Read(f"{self.name}/sub", f"{self.short}#subscription",
                                           max(mid.partition(), 0), _position(mid), value))
            self.received.add(value)
            self.last_received[max(mid.partition(), 0)] = now()
        self.consumer.acknowledge(msg)
        return True

    def final_read(self) -> None:
        """The log through the Kafka port; then the subscription receives on until it was handed every
        acknowledged value that is in the log (bounded: the rest are undelivered)."""
        self.history.final.update(read_log(self.kafka_bootstrap, self.short, self.partitions, committed=False))
        stored = {v for entries in self.history.final.values() for _, v in entries}
        deadline = now() + FINAL_READ_S / 3
        while now() < deadline and any(a.value in stored and a.value not in self.received
                                       for a in self.history.acks):
            self._receive_one()
        self.client.close()
        self._report_undelivered(stored)
        lost = [a.value for a in self.history.acks if a.value not in stored]
        if lost:  # what the receipts said (ledger -1: answered as a duplicate) and whether the subscription had them
            self.errors.append(f"pulsar: {len(lost)} acknowledged values not in the log read back, e.g. "
                               f"{[(v, self.receipts.get(v), v in self.received) for v in lost[:5]]}; "
                               f"read back per partition: {[(k, len(v)) for k, v in self.history.final.items()]}")


    def _report_undelivered(self, stored: set[str]) -> None:
        """Per partition, what the subscription never handed over: how many, the first one's acknowledgement
        time and receipt, and when the partition last delivered (times on the runner's clock, `now`), so that
        a tail can be told from holes and placed against the fault."""
        missing: dict[int, list[Any]] = {}
        for a in self.history.acks:
            if a.value in stored and a.value not in self.received:
                missing.setdefault(a.partition, []).append(a)
        for partition, acks in sorted(missing.items()):
            first = acks[0]
            self.errors.append(f"pulsar: partition {partition}: {len(acks)} undelivered, the first {first.value} "
                               f"acknowledged at {first.at:.1f} (receipt {self.receipts.get(first.value)}), the last "
                               f"at {acks[-1].at:.1f}; last delivery of the partition at "
                               f"{self.last_received.get(partition, float('nan')):.1f}, read-back ended at {now():.1f}")


def _position(msg_id: Any) -> tuple[int, int, int] | None:
    """(ledger, entry, batch index); None for the receipt of a resend de-duplication dropped (ledger -1: it
    names no entry, the first copy is where the record is)."""
    if msg_id.ledger_id() < 0:
        return None
    return (msg_id.ledger_id(), msg_id.entry_id(), msg_id.batch_index())


class Remote:
    """A workload in a process of its own (multiprocessing, spawn). Why: the harness forks JVMs and brokers
    (with a preexec_fn) while the load runs, and forking a process whose native client threads (librdkafka,
    the Pulsar C++ client) hold locks can hang the child before it execs; the harness process keeps no
    such threads. The child runs the workload until stop(), reads the log back and sends its History."""

    def __init__(self, cls: type[Workload], *args: Any) -> None:
        import multiprocessing as mp

        ctx = mp.get_context("spawn")
        self.name = getattr(cls, "name", cls.__name__)
        self._stop = ctx.Event()
        self._last = ctx.Value("d", 0.0)  # monotonic time of the latest acknowledgement (one clock per host)
        self._recv, send = ctx.Pipe(duplex=False)
        self._proc = ctx.Process(target=_remote_main, args=(cls, args, self._stop, self._last, send),
                                 name=f"chaos-{self.name}", daemon=True)
        self.history = History()
        self.errors: list[str] = []

    def start(self) -> None:
        self._proc.start()

    def last_ack(self) -> float:
        return float(self._last.value)

    def stop(self) -> None:
        self._stop.set()

    def collect(self, timeout: float = 300) -> None:
        """The child's History once it read the log back (bounded: a child that never answers is an error)."""
        try:
            if self._recv.poll(timeout):
                self.history, self.errors = self._recv.recv()
            else:
                self.errors.append(f"{self.name}: no history after {timeout:.0f}s")
        except EOFError:  # the child died without sending: its workload shows as missing from the stalls
            self._proc.join(30)
            self.errors.append(f"{self.name}: its process ended with {self._proc.exitcode} before sending")
        self._proc.join(30)
        if self._proc.is_alive():
            self._proc.kill()


def _remote_main(cls: type[Workload], args: tuple, stop: Any, last: Any, send: Any) -> None:
    try:
        _remote_run(cls, args, stop, last, send)
    except BaseException as e:
        import traceback

        send.send((History(), [f"{cls.__name__}: {e!r}\n{traceback.format_exc()}"]))


def _remote_run(cls: type[Workload], args: tuple, stop: Any, last: Any, send: Any) -> None:
    w = cls(*args)
    w.start()
    while not stop.wait(0.2):
        with w.lock:
            h = w.history
            latest = max([a.at for a in h.acks[-1:]] + [c.at for c in h.commits[-1:]] + [0.0])
        last.value = max(last.value, latest)
    w.stop()
    try:
        w.final_read()
    except Exception as e:
        w.errors.append(f"{w.name}: read-back failed: {e!r}")
    send.send((w.history, w.errors))


def _innermost_call(t: threading.Thread) -> str:
    """Where a thread waits: the workload's innermost line (the client call that blocks), e.g.
    "_copy_round:412 p.commit_transaction(30)"."""
    import linecache
    import sys

    frame = sys._current_frames().get(t.ident or -1)
    where = "?"
    while frame is not None:
        if frame.f_code.co_filename == __file__:
            line = linecache.getline(__file__, frame.f_lineno).strip()
            where = f"{frame.f_code.co_name}:{frame.f_lineno} {line}"
            break
        frame = frame.f_back
    return where
