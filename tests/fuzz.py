"""Protocol fuzzing of the Kafka listener: mutated requests of every API and version the broker serves.

The corpus is built at run time, one request per (API, version) the broker's dispatch table serves (its
advertised range), each field filled with a plausible value (a topic "fuzz", one element per array, a valid
record batch for records) and encoded by kop.protocol's generated encoder from the schemas: what a real client
sends, for every version, without keeping captured bytes in the repository. Each frame sent is one corpus entry
mutated by a seeded random choice of: bit flips, interesting integers (0, -1, 2^31-1, -2^31, ...) written over
1/2/4/8 bytes, bytes inserted, removed, duplicated or truncated, a splice with another entry, a wrong API version
or key, or a size prefix that lies. Most mutations keep the header (api key, version) so that the body decoders
and API handlers, not just the header check, see them.

Each frame is sent followed by an ApiVersions v0 "ping" on the same connection. The broker either closes the
connection (the frame was not a request it can take: Kafka does the same) or answers the frame, if it answers
at all (acks=0), and then the ping, in order. Neither within HANG_SECONDS is a hang. After the run, and every
--check-every frames, a health check: the process is alive, ApiVersions and Metadata are answered, a
confluent-kafka producer and consumer round-trip records. Broker log lines with a traceback (a handler that
raised instead of answering) are counted as findings.

    python -m tests.fuzz --frames 1000000 [--seed 1] [--concurrency 16]   # starts its own broker (make fuzz)
    python -m tests.fuzz --bootstrap 127.0.0.1:9092 --frames 20000         # against a running broker
    python -m tests.fuzz --protocol pulsar --frames 1000000                 # the Pulsar port (tests/fuzz_pulsar.py)

The machinery (mutation, sending with a ping after each frame, hang detection, health checks, log findings,
the CLI) is protocol-independent; a `Target` says what is protocol-specific: the corpus, which header bytes
most mutations keep, the header mutation (another version, key or command type), the ping and how to read
until its answer, a greeting each connection starts with, and the health check. KAFKA is defined here, PULSAR
in tests/fuzz_pulsar.py.
"""

from __future__ import annotations

import argparse
import asyncio
import random
import re
import shutil
import struct
import sys
import tempfile
import time
import uuid
from collections import Counter
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kop.kafka.apis import build_table
from kop.protocol import api_info, encode_request
from kop.protocol.records import build_batch

HANG_SECONDS = 30.0
PING_CORRELATION_ID = 0x7FFF_FFF0
#: Broker settings for fuzzing: waits that a request may legitimately ask for are made short, so that an
#: answer that does not come is a hang and not a long poll or a rebalance delay.
BROKER_OVERRIDES = {"fetchMaxWaitCapMs": 200, "groupInitialRebalanceDelayMs": 0, "slowRequestThresholdMs": -1,
                    "allowAutoTopicCreation": "true"}
_INTERESTING = (0, 1, -1, 0x7F, 0x80, 0xFF, 0x7FFF, 0x8000, 0xFFFF, 0x7FFF_FFFF, 0x8000_0000, 0xFFFF_FFFF,
                0x7FFF_FFFF_FFFF_FFFF, 0x8000_0000_0000_0000)


@dataclass(frozen=True)
class Target:
    """What is protocol-specific in fuzzing one listener (module docstring)."""

    name: str
    build_corpus: Callable[[int], list[bytes]]  # seed -> frames with their size prefix
    header: int  # bytes after the size prefix that most mutations keep, so handlers (not only framing) see them
    retarget_min: int  # mutation 7 needs at least this many bytes after the size prefix
    retarget: Callable[[bytearray, random.Random], None]  # mutation 7: another version, key or command type
    ping: Callable[[], bytes]  # sent after each frame; its answer comes after the frame's (in order)
    until_ping: Callable[[asyncio.StreamReader], Awaitable[str]]  # "answered" or "closed"
    address: Callable[[Any], str]  # host:port of the target's listener on a tests.support.broker.KopBroker
    health: Callable[[str, str], None]  # (address, Kafka bootstrap): raises unless the broker serves clients
    greeting: bytes = b""  # sent on every new connection; one answer frame is read before fuzzing it


# ------------------------------------------------------------------------------------------ corpus


def _value(f: Any, version: int, rnd: random.Random, classes: dict[str, type]) -> Any:
    """A plausible value for one schema field (recursing into structs)."""
    if f.is_array:
        return [_element(f, version, rnd, classes)]
    return _element(f, version, rnd, classes)


def _element(f: Any, version: int, rnd: random.Random, classes: dict[str, type]) -> Any:
    t = f.element_type
    if f.is_struct:
        return _struct(classes[f.struct_name], f.fields, version, rnd, classes)
    if t in ("int8", "int16", "uint16", "int32", "uint32", "int64"):
        return rnd.choice((0, 1, 1, 3))
    if t == "bool":
        return rnd.random() < 0.5
    if t == "float64":
        return 0.5
    if t == "string":
        return rnd.choice(("fuzz", "fuzz", "fuzz-group", "cleanup.policy", ""))
    if t == "bytes":
        return b"\x00\x01\x02"
    if t == "records":
        return build_batch([(b"k", b"v" * rnd.randint(0, 64)) for _ in range(rnd.randint(1, 3))])
    if t == "uuid":
        return rnd.choice((b"\x00" * 16, uuid.UUID(int=rnd.getrandbits(128)).bytes))
    raise ValueError(f"no fuzz value for field type {t}")


def _struct(cls: type, fields: list[Any], version: int, rnd: random.Random, classes: dict[str, type]) -> Any:
    kwargs = {}
    for f in fields:
        if version in f.versions:
            kwargs[f.attr] = _value(f, version, rnd, classes)
    return cls(**kwargs)


def build_corpus(seed: int = 0) -> list[bytes]:
    """One request frame (with its size prefix) per (API, version) the broker serves."""
    from kop.protocol.codec import MODELS

    rnd = random.Random(seed)
    out = []
    for api in sorted(build_table().values(), key=lambda a: a.key):
        info = api_info(api.key)
        classes = MODELS[info.request_spec.name].classes
        # Versions advertised but outside the schema (Produce v0-2, refused: KAFKA-18659) come from mutation 7.
        for version in range(max(api.min_version, info.min_version), min(api.max_version, info.max_version) + 1):
            body = _struct(info.request_class, info.request_spec.fields, version, rnd, classes)
            out.append(encode_request(api.key, version, rnd.randint(0, 1000), "fuzz-client", body))
    return out


def _ping() -> bytes:
    R = api_info(18).request_class
    return encode_request(18, 0, PING_CORRELATION_ID, "fuzz-ping", R())


# ------------------------------------------------------------------------------------------ mutation


def _kafka_retarget(body: bytearray, rnd: random.Random) -> None:
    """Mutation 7 for Kafka: another version (or key) in the request header."""
    if rnd.random() < 0.8:
        body[2:4] = struct.pack(">h", rnd.choice((-1, 0, 1, 5, 13, 100, 32767)))
    else:
        body[0:2] = struct.pack(">h", rnd.choice((-1, 17, 19, 67, 1000)))


def mutate(frame: bytes, corpus: list[bytes], rnd: random.Random, target: Target | None = None) -> bytes:
    """A mutated copy of one corpus frame, size prefix included (usually corrected to the new length)."""
    target = target or KAFKA
    body = bytearray(frame[4:])
    keep_header = rnd.random() < 0.85
    lo = min(len(body), target.header) if keep_header else 0  # Kafka: api key, version, correlation id, ...
    for _ in range(rnd.choice((1, 1, 1, 2, 3, 5))):
        op = rnd.randrange(9)
        n = len(body)
        pos = rnd.randrange(lo, n) if n > lo else n
        if op == 0 and n > lo:  # bit flip
            body[pos] ^= 1 << rnd.randrange(8)
        elif op == 1 and n > lo:  # interesting integer over 1/2/4/8 bytes
            width = rnd.choice((1, 2, 4, 8))
            v = rnd.choice(_INTERESTING) & ((1 << (8 * width)) - 1)
            body[pos:pos + width] = v.to_bytes(width, "big")
        elif op == 2:  # insert random bytes
            body[pos:pos] = rnd.randbytes(rnd.choice((1, 2, 4, 16, 200)))
        elif op == 3 and n > lo:  # remove a run
            del body[pos:pos + rnd.choice((1, 2, 4, 16))]
        elif op == 4 and n > lo:  # truncate
            del body[pos:]
        elif op == 5 and n > lo:  # duplicate a run
            run = body[pos:pos + rnd.choice((1, 4, 16, 64))]
            body[pos:pos] = run * rnd.choice((1, 2, 8))
        elif op == 6:  # splice: the tail of another request
            other = rnd.choice(corpus)[4:]
            cut = rnd.randrange(len(other)) if other else 0
            body[pos:] = other[cut:]
        elif op == 7 and len(body) >= target.retarget_min:  # another version, key or command type
            target.retarget(body, rnd)
        elif n > lo:  # random byte
            body[pos] = rnd.randrange(256)
    size = len(body)
    if rnd.random() < 0.03:  # a size prefix that lies (shorter frames, negative or huge sizes)
        size = rnd.choice((0, -1, size - 1, size + 1, 0x7FFF_FFFF, rnd.randrange(1, size + 2)))
    return struct.pack(">i", size) + bytes(body)


# ------------------------------------------------------------------------------------------ sending


@dataclass
class Stats:
    frames: int = 0
    answered: int = 0  # frames after which the ping was answered (the frame was taken as a request)
    closed: int = 0  # frames after which the broker closed the connection
    hangs: int = 0
    lying: int = 0  # frames whose size prefix lies: no answer can be expected (the broker may wait for more)
    connections: int = 0
    connect_errors: int = 0
    hang_examples: list[str] = field(default_factory=list)


async def _connect(host: str, port: int, target: Target) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    """A connection, greeted (e.g. Pulsar's CONNECT, answered before any other command is served)."""
    reader, writer = await asyncio.open_connection(host, port)
    if target.greeting:
        writer.write(target.greeting)
        try:
            await asyncio.wait_for(_read_frame(reader), HANG_SECONDS)
        except (TimeoutError, asyncio.IncompleteReadError) as e:
            writer.transport.abort()
            raise OSError(f"greeting not answered: {e!r}") from None
    return reader, writer


async def _read_frame(reader: asyncio.StreamReader) -> bytes:
    """One frame whose u32 size prefix counts the bytes after it (Kafka's and Pulsar's framing)."""
    (size,) = struct.unpack(">I", await reader.readexactly(4))
    return await reader.readexactly(size)


async def _worker(host: str, port: int, frames: list[bytes], stats: Stats, target: Target) -> None:
    reader: asyncio.StreamReader | None = None
    writer: asyncio.StreamWriter | None = None
    ping = target.ping()
    for frame in frames:
        if writer is None:
            try:
                reader, writer = await _connect(host, port, target)
            except OSError:
                stats.connect_errors += 1
                await asyncio.sleep(0.05)
                continue
            stats.connections += 1
        assert reader is not None
        stats.frames += 1
        honest = struct.unpack_from(">i", frame)[0] == len(frame) - 4
        try:
            writer.write(frame + ping)
            outcome = await asyncio.wait_for(target.until_ping(reader), HANG_SECONDS if honest else 0.5)
        except TimeoutError:
            if not honest:  # e.g. a size larger than what follows: the broker rightly waits for the rest
                stats.lying += 1
                writer.transport.abort()
                writer = reader = None
                continue
            stats.hangs += 1
            if len(stats.hang_examples) < 5:
                stats.hang_examples.append(frame[:64].hex())
            outcome = "hang"
        except (ConnectionError, OSError):
            outcome = "closed"
        if outcome == "answered":
            stats.answered += 1
            continue
        if outcome == "closed":
            stats.closed += 1
        assert writer is not None
        writer.transport.abort()
        writer = reader = None
    if writer is not None:
        writer.transport.abort()


async def _until_ping(reader: asyncio.StreamReader) -> str:
    """Read answers until the ping's ("answered") or the end of the connection ("closed")."""
    while True:
        try:
            head = await reader.readexactly(8)
        except asyncio.IncompleteReadError:
            return "closed"
        size, correlation_id = struct.unpack(">ii", head)
        try:
            await reader.readexactly(size - 4)
        except asyncio.IncompleteReadError:
            return "closed"
        if correlation_id == PING_CORRELATION_ID and size < 4096:
            return "answered"


def run_frames(bootstrap: str, frames: int, seed: int, concurrency: int = 16, corpus: list[bytes] | None = None,
               first: int = 0, target: Target | None = None) -> Stats:
    """Send `frames` mutated frames (numbers first..first+frames-1 of the seeded sequence) with `concurrency`
    connections at a time to `bootstrap` (host:port of the target's listener)."""
    target = target or KAFKA
    corpus = corpus or target.build_corpus(seed)
    stats = Stats()
    host, port = bootstrap.rsplit(":", 1)
    batches: list[list[bytes]] = [[] for _ in range(concurrency)]
    for i in range(first, first + frames):
        rnd = random.Random(seed * 1_000_003 + i)  # frame i is the same whatever the batch size
        batches[i % concurrency].append(mutate(rnd.choice(corpus), corpus, rnd, target))

    async def main() -> None:
        await asyncio.gather(*(_worker(host, int(port), b, stats, target) for b in batches))

    asyncio.run(main())
    return stats


# ------------------------------------------------------------------------------------------ health


def health_check(bootstrap: str, topic: str = "fuzz-health", records: int = 200) -> None:
    """The broker answers ApiVersions and Metadata, and a normal producer and consumer round-trip records."""
    from confluent_kafka import Consumer, Producer
    from kafka.protocol.metadata import ApiVersionsRequest, MetadataRequest

    from tests.support.wire import WireClient

    with WireClient(bootstrap, timeout=30) as c:
        r = c.send(ApiVersionsRequest(client_software_name="fuzz", client_software_version="1"), version=3)
        assert r.error_code == 0, f"ApiVersions error {r.error_code}"
        m = c.send(MetadataRequest(topics=None, allow_auto_topic_creation=False), version=9)
        assert m.brokers, "Metadata lists no broker"
    p = Producer({"bootstrap.servers": bootstrap, "acks": "all", "message.timeout.ms": 60000})
    values = [f"{topic}-{i}".encode() for i in range(records)]
    for v in values:
        p.produce(topic, v, partition=0)
    assert p.flush(60) == 0, "health-check producer could not deliver"
    c2 = Consumer({"bootstrap.servers": bootstrap, "group.id": f"{topic}-{time.monotonic_ns()}",
                   "auto.offset.reset": "earliest", "enable.auto.commit": False})
    try:
        c2.subscribe([topic])
        got: list[bytes] = []
        errors: list[str] = []  # what the consumer was told, for the failure message (a CI run once read 0)
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and len(got) < records:
            for m2 in c2.consume(num_messages=1000, timeout=1.0):
                if not m2.error():
                    got.append(m2.value())
                elif len(errors) < 10:
                    errors.append(str(m2.error()))
        assert got[-records:] == values, (f"health-check consumer read {len(got)} of {records} records; "
                                          f"assignment {c2.assignment()}, errors {errors}")
    finally:
        c2.close()


KAFKA = Target("kafka", build_corpus=build_corpus, header=14, retarget_min=4, retarget=_kafka_retarget,
               ping=_ping, until_ping=_until_ping, address=lambda broker: broker.bootstrap,
               health=lambda address, bootstrap: health_check(bootstrap))


def target_named(name: str) -> Target:
    if name == "pulsar":
        from tests.fuzz_pulsar import PULSAR  # it builds on this module

        return PULSAR
    return KAFKA


def log_findings(log_path: Path) -> list[str]:
    """Broker log lines that carry a traceback (a request handler that raised)."""
    found: dict[int, str] = {}
    record, record_at = "", -1
    for i, line in enumerate(log_path.read_text(errors="replace").splitlines()):
        if line[:4].isdigit() and line[4:5] == "-":  # a log record ("2026-... LEVEL logger: message")
            record, record_at = line, i
        elif line.startswith("Traceback") and record_at >= 0:
            found[record_at] = record  # a chained exception's second traceback is the same finding
    return list(found.values())


# ------------------------------------------------------------------------------------------ CLI (make fuzz)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--frames", type=int, default=1_000_000)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--concurrency", type=int, default=16)
    ap.add_argument("--check-every", type=int, default=100_000, help="health check every N frames")
    ap.add_argument("--protocol", choices=("kafka", "pulsar"), default="kafka")
    ap.add_argument("--bootstrap", help="fuzz a running broker instead of starting one (Kafka host:port)")
    ap.add_argument("--pulsar", help="with --bootstrap and --protocol pulsar: the running broker's Pulsar host:port")
    args = ap.parse_args(argv)

    from tests.support.broker import KopBroker

    target = target_named(args.protocol)
    corpus = target.build_corpus(args.seed)
    print(f"corpus: {len(corpus)} {target.name} frames (every request type served); seed {args.seed}", flush=True)
    tmp = Path(tempfile.mkdtemp(prefix="kop-fuzz-"))  # removed at the end unless there are findings
    broker = None
    kafka_bootstrap = args.bootstrap
    address = args.pulsar if args.protocol == "pulsar" else args.bootstrap
    if kafka_bootstrap is None:
        broker = KopBroker(tmp, overrides=BROKER_OVERRIDES).start()
        kafka_bootstrap = broker.bootstrap
        address = target.address(broker)
        print(f"broker pid {broker.pid} on {address}, log {broker.log_path}", flush=True)
    elif address is None:
        ap.error("--protocol pulsar with --bootstrap needs --pulsar")
    total = Stats()
    started = time.monotonic()
    crashed = False
    try:
        done = 0
        while done < args.frames:
            n = min(args.check_every, args.frames - done)
            s = run_frames(address, n, args.seed, args.concurrency, corpus, first=done, target=target)
            done += n
            for k in ("frames", "answered", "closed", "hangs", "lying", "connections", "connect_errors"):
                setattr(total, k, getattr(total, k) + getattr(s, k))
            total.hang_examples += s.hang_examples
            if broker is not None and not broker.alive():
                crashed = True
                break
            target.health(address, kafka_bootstrap)
            elapsed = time.monotonic() - started
            print(f"{done} frames, {elapsed:.0f} s ({done / elapsed:.0f}/s): answered {total.answered}, "
                  f"closed {total.closed}, hangs {total.hangs}, lying sizes {total.lying}, "
                  f"connections {total.connections}; healthy", flush=True)
    finally:
        findings = log_findings(broker.log_path) if broker is not None else []
        alive = broker.alive() if broker is not None else True
        if broker is not None:
            broker.stop()
    elapsed = time.monotonic() - started
    print(f"RESULT frames={total.frames} crashes={int(crashed or not alive)} hangs={total.hangs} "
          f"answered={total.answered} closed={total.closed} lying_sizes={total.lying} connections={total.connections} "
          f"handler_tracebacks={len(findings)} duration_s={elapsed:.0f} rate={total.frames / elapsed:.0f}/s",
          flush=True)
    kinds = Counter(re.sub(r"^\S+ \S+ |peer=\S+ |\d+", "", f) for f in findings)
    for kind, n in kinds.most_common(20):
        print(f"finding x{n}: {kind}")
    for h in total.hang_examples[:5]:
        print("hang frame (first 64 bytes):", h)
    ok = not crashed and alive and total.hangs == 0
    if broker is not None and (findings or not ok):
        print(f"broker log kept for the findings: {broker.log_path}")
    else:
        shutil.rmtree(tmp, ignore_errors=True)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
