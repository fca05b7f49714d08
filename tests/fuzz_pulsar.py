"""Protocol fuzzing of the Pulsar listener: the Pulsar `Target` of tests/fuzz.py's machinery.

The corpus is built at run time with kop.pulsar.codec's encoders: for every command type the handler serves
(kop.pulsar.commands_table.COMMANDS), several commands whose every field (nested messages too) has a plausible value
- a topic "persistent://public/default/fuzz" or a partition of it, small producer/consumer/request ids so commands
of one connection meet each other's producers and consumers - and SENDs with real message metadata, batched or
not, with and without their CRC32C section. Most mutations keep the command size and the BaseCommand's type
(the first 6 bytes after the size prefix); mutation 7 writes another command type (served, not served, unknown)
over it, so a handler reads a command whose fields are another's.

Every connection starts with CONNECT (Pulsar's broker serves nothing else before it) and each fuzzed frame is
followed by a "ping", a PARTITIONED_METADATA with a request id nothing else uses: the broker handles a
connection's commands in order, so its answer comes after whatever the frame caused, or the connection is
closed. (Pulsar's own PING would not do: its PONG carries no id, so a fuzzed PING's PONG would pass for ours.) The health check: the broker answers a pulsar-client producer and
consumer round trip, and the Kafka health check of tests/fuzz.py (both protocols share the broker).

    python -m tests.fuzz --protocol pulsar --frames 1000000 [--seed 1]
"""

from __future__ import annotations

import asyncio
import random
import struct
import time
from typing import Any

from google.protobuf.descriptor import FieldDescriptor as FD

from kop.pulsar.codec import commands as c
from kop.pulsar.codec.framing import encode_command, encode_message
from tests import fuzz

TOPICS = ("persistent://public/default/fuzz", "fuzz", "persistent://public/default/fuzz-partition-0",
          "persistent://public/default/fuzz-p-partition-1", "non-persistent://public/default/fuzz", "")
STRINGS = ("fuzz", "sub", "public/default", "", "pulsar.dedup")
VARIANTS = 8  # commands per served type
_INTS = (0, 0, 1, 1, 2, 3, 100)


def _served_types() -> list[int]:
    from kop.pulsar.commands_table import COMMANDS

    return sorted(COMMANDS)


def _fill(msg: Any, rnd: random.Random, depth: int = 0) -> None:
    """Give every required field and most optional ones of a protobuf message a plausible value."""
    for f in msg.DESCRIPTOR.fields:
        required = f.is_required
        if not required and (depth > 2 or rnd.random() < 0.3):
            continue
        repeated = f.is_repeated
        for _ in range(rnd.choice((1, 2)) if repeated else 1):
            if f.type == FD.TYPE_MESSAGE:
                sub = getattr(msg, f.name).add() if repeated else getattr(msg, f.name)
                _fill(sub, rnd, depth + 1)
                if not repeated:
                    sub.SetInParent()
                continue
            v = _scalar(f, rnd)
            if repeated:
                getattr(msg, f.name).append(v)
            else:
                setattr(msg, f.name, v)


def _scalar(f: Any, rnd: random.Random) -> Any:
    if f.type == FD.TYPE_ENUM:
        return rnd.choice(f.enum_type.values).number
    if f.type == FD.TYPE_STRING:
        return rnd.choice(TOPICS if "topic" in f.name.lower() else STRINGS)
    if f.type == FD.TYPE_BYTES:
        return rnd.choice((b"", b"\x00\x01\x02", b"fuzz"))
    if f.type == FD.TYPE_BOOL:
        return rnd.random() < 0.5
    if f.type in (FD.TYPE_DOUBLE, FD.TYPE_FLOAT):
        return 0.5
    return rnd.choice(_INTS)


def _send(rnd: random.Random) -> bytes:
    """A SEND with message metadata as a producer writes it: one message, or a batch of a few."""
    cmd = c.command(c.SEND, producer_id=rnd.choice((0, 1)), sequence_id=rnd.randint(0, 5))
    md = c.MessageMetadata(producer_name=rnd.choice(STRINGS), sequence_id=rnd.randint(0, 5),
                           publish_time=int(time.time() * 1000))
    if rnd.random() < 0.5:
        n = rnd.randint(1, 3)
        md.num_messages_in_batch = n
        cmd.send.num_messages = n
        parts = []
        for i in range(n):
            smm = c.SingleMessageMetadata(payload_size=3, partition_key=f"k{i}")
            body = smm.SerializeToString()
            parts.append(struct.pack(">I", len(body)) + body + b"v%02d" % i)
        payload = b"".join(parts)
    else:
        if rnd.random() < 0.3:
            _fill(md, rnd, 1)  # odd metadata: compression, chunking, markers, ...
        payload = b"v" * rnd.randint(0, 64)
    return encode_message(cmd, md, payload, checksum=rnd.random() < 0.9)


def build_corpus(seed: int = 0) -> list[bytes]:
    """VARIANTS frames (with their size prefix) per command type the Pulsar handler serves."""
    rnd = random.Random(seed)
    out = []
    for t in _served_types():
        for _ in range(VARIANTS):
            if t == c.SEND:
                out.append(_send(rnd))
                continue
            cmd = c.BaseCommand(type=t)
            inner = getattr(cmd, c.FIELD_BY_TYPE[t])
            _fill(inner, rnd)
            inner.SetInParent()
            out.append(encode_command(cmd))
    return out


def _retarget(body: bytearray, rnd: random.Random) -> None:
    """Mutation 7: another command type in the BaseCommand's type field (body[4] is its tag, body[5] its value)."""
    body[5] = rnd.choice((*_served_types(), c.CONNECTED, c.SEND_RECEIPT, c.MESSAGE, c.SUCCESS, c.ERROR,
                          c.GET_SCHEMA, c.GET_OR_CREATE_SCHEMA, 0, 99, 127))


#: The ping's request id: no corpus command or mutation writes it, so its answer cannot be mistaken for the
#: answer to a fuzzed command (a PING's PONG could: a fuzzed PING, or a frame that swallowed part of ours).
PING_REQUEST_ID = 0x5EED_0000_F0F0


def _ping() -> bytes:
    """PARTITIONED_METADATA of a fixed topic: answered in order, and carries our request id back."""
    return encode_command(c.command(c.PARTITIONED_METADATA, topic="persistent://public/default/fuzz-ping",
                                    request_id=PING_REQUEST_ID))


async def _until_pong(reader: asyncio.StreamReader) -> str:
    """Read frames until the ping's answer ("answered") or the end of the connection ("closed")."""
    while True:
        try:
            (total,) = struct.unpack(">I", await reader.readexactly(4))
            frame = await reader.readexactly(total)
        except asyncio.IncompleteReadError:
            return "closed"
        (size,) = struct.unpack_from(">I", frame)
        cmd = c.BaseCommand.FromString(frame[4:4 + size])
        if cmd.type == c.PARTITIONED_METADATA_RESPONSE and cmd.partitionMetadataResponse.request_id == PING_REQUEST_ID:
            return "answered"


def health_check(address: str, kafka_bootstrap: str, messages: int = 50) -> None:
    """A pulsar-client producer and consumer round-trip messages; the Kafka side answers too."""
    import pulsar

    topic = f"fuzz-health-{time.monotonic_ns()}"
    client = pulsar.Client(f"pulsar://{address}", operation_timeout_seconds=30,
                           logger=pulsar.ConsoleLogger(pulsar.LoggerLevel.Warn))
    try:
        consumer = client.subscribe(topic, "health", initial_position=pulsar.InitialPosition.Earliest)
        producer = client.create_producer(topic)
        values = [b"h%04d" % i for i in range(messages)]
        for v in values:
            producer.send(v)
        got = []
        for _ in values:
            m = consumer.receive(30000)
            got.append(m.data())
            consumer.acknowledge(m)
        assert got == values, f"pulsar health check read {got[:5]}..."
    finally:
        client.close()
    fuzz.health_check(kafka_bootstrap)


PULSAR = fuzz.Target("pulsar", build_corpus=build_corpus, header=6, retarget_min=6, retarget=_retarget,
                     ping=_ping, until_ping=_until_pong, address=lambda broker: f"127.0.0.1:{broker.pulsar_port}",
                     health=health_check,
                     greeting=encode_command(c.command(c.CONNECT, client_version="fuzz", protocol_version=21)))
