"""Memory stays bounded under a slow consumer and a fast producer (back-pressure, not buffering).

A raw client pipelines many Fetch requests at the end of an empty partition (each waits for 512 KiB of
data, and may take 1 MiB) and then does not read its socket (a small SO_RCVBUF, so the kernel holds little for it).
When a fast producer writes, every one of those fetches becomes answerable at once: answering them all
would pin FETCHES x 1 MiB in the broker. Meanwhile a normal consumer on another connection must read every
record it asks for. The broker's peak RSS (VmHWM) may grow by far less than the bytes produced or the bytes the slow
client asked for; afterwards the slow client reads its answers, which must all be there, in order and
intact. Nothing here is timed (the waits are liveness deadlines).
"""

from __future__ import annotations

import socket
import struct
import threading
import time
import urllib.request

from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition
from kafka.protocol.consumer import FetchRequest, FetchResponse

from tests.support.clients import create_topic
from tests.support.net import read_vm_hwm_kib, wait_until
from tests.support.wire import batch_headers

RECORD = 1024
RECORDS = 96 * 1024  # 96 MiB produced while the slow client does not read
CONSUMED = 16 * 1024  # what the normal consumer reads meanwhile (16 MiB)
FETCHES = 480  # pipelined fetches of up to 1 MiB each: 480 MiB if the broker answered them all at once
PER_FETCH = 1 << 20
# Allowed peak RSS growth: below the 96 MiB produced and a fifth of the 480 MiB asked for. The allocator's own
# churn under this traffic (no slow client involved) measured 16-46 MiB on 2 loaded cores, so the slow client
# is made to ask for far more than that noise: code that buffers its answers grows by hundreds of MiB.
BOUND_KIB = 96 * 1024


def _value(i: int) -> bytes:
    return (b"%08d" % i) * (RECORD // 8)


def _produce(bootstrap: str, topic: str, count: int) -> None:
    p = Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 5, "batch.size": 64 * 1024})
    errors: list[object] = []
    for i in range(count):
        while True:
            try:
                p.produce(topic, _value(i), partition=0, on_delivery=lambda e, m: e and errors.append(e))
                break
            except BufferError:
                p.poll(0.1)
        p.poll(0)
    assert p.flush(120) == 0
    assert not errors, errors[:3]


def _consume(bootstrap: str, topic: str, count: int) -> list[tuple[int, bytes]]:
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "bp-normal", "enable.auto.commit": False,
                  "auto.offset.reset": "earliest", "fetch.max.bytes": PER_FETCH, "max.partition.fetch.bytes": PER_FETCH})
    got: list[tuple[int, bytes]] = []
    try:
        c.assign([TopicPartition(topic, 0, 0)])
        deadline = time.monotonic() + 180  # liveness only
        while len(got) < count:
            for m in c.consume(num_messages=10000, timeout=1.0):
                if m.error():
                    raise KafkaException(m.error())
                got.append((m.offset(), m.value()))
            assert time.monotonic() < deadline, f"normal consumer stalled at {len(got)} of {count} records"
    finally:
        c.close()
    return got


def _fetch_frame(topic: str, correlation_id: int) -> bytes:
    FT = FetchRequest.FetchTopic
    req = FetchRequest(
        replica_id=-1, max_wait_ms=30000, min_bytes=PER_FETCH // 2, max_bytes=PER_FETCH, isolation_level=0,
        session_id=0, session_epoch=-1, forgotten_topics_data=[], rack_id="",
        topics=[FT(topic=topic, partitions=[FT.FetchPartition(
            partition=0, current_leader_epoch=-1, fetch_offset=0, log_start_offset=-1,
            partition_max_bytes=PER_FETCH)])],
    )
    req.API_VERSION = 12
    req.with_header(correlation_id=correlation_id, client_id="slow-consumer")
    return req.encode(version=12, header=True, framed=True)


def _recv_exact(sock: socket.socket, n: int) -> bytes:
    buf = bytearray()
    while len(buf) < n:
        chunk = sock.recv(min(n - len(buf), 1 << 16))
        assert chunk, f"connection closed after {len(buf)} of {n} bytes"
        buf += chunk
    return bytes(buf)


def _fetch_log_prefix(bootstrap: str, topic: str) -> bytes:
    """The first MiB of the log as one ordinary fetch returns it (on a fresh connection)."""
    from tests.support.wire import Negotiated

    with Negotiated(bootstrap) as c:
        return c.fetch(topic, 0, 0, max_bytes=PER_FETCH).records


def _waiting_fetches(broker) -> float:
    text = urllib.request.urlopen(broker.admin_url + "/metrics", timeout=10).read().decode()
    for line in text.splitlines():
        if line.startswith("kop_server_waiting_fetches "):
            return float(line.split()[1])
    raise AssertionError("no kop_server_waiting_fetches in /metrics")


def test_slow_pipelined_consumer_does_not_make_the_broker_buffer(kop_broker) -> None:
    broker = kop_broker(localStoreFsyncPolicy="none")
    topic = "backpressure"
    create_topic(broker.bootstrap, topic, 1)
    assert broker.pid is not None
    baseline = read_vm_hwm_kib(broker.pid)
    assert baseline is not None

    slow = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    slow.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)  # before connect: the window stays small
    host, port = broker.bootstrap.rsplit(":", 1)
    slow.connect((host, int(port)))
    slow.settimeout(120)
    slow.sendall(b"".join(_fetch_frame(topic, cid) for cid in range(1, FETCHES + 1)))
    # Every fetch is in the broker, waiting for data (so they all become answerable together).
    wait_until("the slow client's fetches waiting", lambda: _waiting_fetches(broker) >= FETCHES, timeout=60)

    # While the slow client reads nothing: a fast producer and a normal consumer on other connections.
    producer = threading.Thread(target=_produce, args=(broker.bootstrap, topic, RECORDS))
    producer.start()
    got = _consume(broker.bootstrap, topic, CONSUMED)
    producer.join()
    assert [o for o, _ in got][:CONSUMED] == list(range(CONSUMED))
    assert all(v == _value(o) for o, v in got)

    peak = read_vm_hwm_kib(broker.pid)
    assert peak is not None
    grown = peak - baseline
    assert grown < BOUND_KIB, f"broker peak RSS grew by {grown} KiB under a slow consumer (bound {BOUND_KIB} KiB)"

    # The slow client now reads: every answer arrives, in order, each a prefix of the log (the batches
    # from offset 0 that fit in 1 MiB once 512 KiB were there), byte for byte the batches the log holds.
    whole = bytes(_fetch_log_prefix(broker.bootstrap, topic))
    for cid in range(1, FETCHES + 1):
        (size,) = struct.unpack(">i", _recv_exact(slow, 4))
        resp = FetchResponse.decode(_recv_exact(slow, size), version=12, header=True)
        assert resp.header.correlation_id == cid
        (t,) = resp.responses
        (p,) = t.partitions
        assert p.error_code == 0
        assert PER_FETCH // 2 <= len(p.records) <= PER_FETCH
        headers = batch_headers(p.records)
        assert headers[0]["base_offset"] == 0
        assert sum(h["length"] + 12 for h in headers) == len(p.records)  # whole batches only
        assert whole.startswith(bytes(p.records))
    slow.close()
    assert broker.alive()
