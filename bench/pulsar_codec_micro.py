"""Micro-benchmark of kop/pulsar's codec and conversion (not a test; numbers are machine-dependent).

Run: PYTHONPATH=. python bench/pulsar_codec_micro.py [--conversion] — prints the median time per operation.

Part 1 chose the protobuf implementation: the hot commands (SEND + MessageMetadata, MESSAGE, ACK,
FLOW, SEND_RECEIPT) encoded and decoded with the ``protobuf`` runtime (upb, the generated
pulsar_api_pb2) and with a hand-rolled codec built the way kop/managed_ledger/protobuf.py works
(field_* encoders, iter_fields decoding) - the cheapest way to extend what we have. Both produce the
same bytes (checked before timing).

Part 2 is the price of the Kafka <-> Pulsar conversion (kop/pulsar/convert.py) per message, both ways,
next to what the Kafka path costs for the same batch (iter_batches: header + CRC, records opaque), with the C
loops of kop.pulsar._native and with their Python reference; then what an LZ4 entry's codec work costs next to
its conversion.
"""

from __future__ import annotations

import statistics
import sys
import time
from collections.abc import Callable

from kop.protocol import compression as kcomp
from kop.protocol.records import build_batch, iter_batches
from kop.pulsar import convert
from kop.pulsar.codec import commands as c
from kop.pulsar.codec import compression as pz
from kop.pulsar.codec import framing
from kop.pulsar.codec.commands import pb
from kop.pulsar.convert import kafka_to_pulsar, pulsar_to_kafka
from kop.storage.protobuf import LEN, field_bytes, field_string, field_varint, iter_fields

_NATIVE = convert._native


def bench(label: str, fn: Callable[[], object], per: int = 1, rounds: int = 7, min_time: float = 0.05) -> float:
    n = 1
    while True:
        start = time.perf_counter()
        for _ in range(n):
            fn()
        if time.perf_counter() - start > min_time / 5:
            break
        n *= 2
    times = []
    for _ in range(rounds):
        start = time.perf_counter()
        for _ in range(n):
            fn()
        times.append((time.perf_counter() - start) / n / per)
    median = statistics.median(times)
    print(f"{label:<66} {median * 1e6:9.2f} µs")
    return median


# ---- the hot commands, both ways -----------------------------------------------------------------------

PRODUCER, SEQ, PUBLISH = "standalone-0-3", 123456, 1_700_000_000_123


def upb_send() -> tuple[bytes, bytes]:
    cmd = pb.BaseCommand(type=c.SEND)
    send = cmd.send
    send.producer_id = 1
    send.sequence_id = SEQ
    send.num_messages = 100
    md = pb.MessageMetadata(producer_name=PRODUCER, sequence_id=SEQ, publish_time=PUBLISH,
                            num_messages_in_batch=100, compression=1, uncompressed_size=20480)
    return cmd.SerializeToString(), md.SerializeToString()


def hr_send() -> tuple[bytes, bytes]:
    cmd = b"\x08\x06" + field_bytes(6, field_varint(1, 1) + field_varint(2, SEQ) + field_varint(3, 100))
    md = (field_string(1, PRODUCER) + field_varint(2, SEQ) + field_varint(3, PUBLISH) + field_varint(8, 1)
          + field_varint(9, 20480) + field_varint(11, 100))
    return cmd, md


def upb_send_decode(cmd: bytes, md: bytes) -> tuple:
    command = pb.BaseCommand()
    command.MergeFromString(cmd)
    s = command.send
    m = pb.MessageMetadata()
    m.MergeFromString(md)
    return (s.producer_id, s.sequence_id, s.num_messages, m.producer_name, m.sequence_id, m.publish_time,
            m.num_messages_in_batch, m.compression, m.uncompressed_size)


def _fields(buf: bytes, start: int = 0, end: int | None = None) -> dict[int, object]:
    out: dict[int, object] = {}
    for number, wire, value, _, stop in iter_fields(buf, start, end):
        out[number] = (value, stop) if wire == LEN else value
    return out


def hr_send_decode(cmd: bytes, md: bytes) -> tuple:
    start, stop = _fields(cmd)[6]
    s = _fields(cmd, start, stop)
    m = _fields(md)
    name_start, name_stop = m[1]
    return (s[1], s[2], s.get(3, 1), md[name_start:name_stop].decode(), m[2], m[3], m.get(11, 1), m.get(8, 0),
            m.get(9, 0))


def upb_message() -> bytes:
    cmd = pb.BaseCommand(type=c.MESSAGE)
    msg = cmd.message
    msg.consumer_id = 3
    mid = msg.message_id
    mid.ledgerId = 123456
    mid.entryId = 7890
    return cmd.SerializeToString()


def hr_message() -> bytes:
    mid = field_varint(1, 123456) + field_varint(2, 7890)
    return b"\x08\x09" + field_bytes(9, field_varint(1, 3) + field_bytes(2, mid))


def upb_message_decode(cmd: bytes) -> tuple:
    command = pb.BaseCommand()
    command.MergeFromString(cmd)
    m = command.message
    return m.consumer_id, m.message_id.ledgerId, m.message_id.entryId


def hr_message_decode(cmd: bytes) -> tuple:
    start, stop = _fields(cmd)[9]
    m = _fields(cmd, start, stop)
    mid = _fields(cmd, *m[2])
    return m[1], mid[1], mid[2]


ACK_IDS = [(123456, 7000 + i) for i in range(10)]


def upb_ack() -> bytes:
    cmd = pb.BaseCommand(type=c.ACK)
    ack = cmd.ack
    ack.consumer_id = 3
    ack.ack_type = 0
    for ledger, entry in ACK_IDS:
        mid = ack.message_id.add()
        mid.ledgerId = ledger
        mid.entryId = entry
    return cmd.SerializeToString()


def hr_ack() -> bytes:
    body = field_varint(1, 3) + field_varint(2, 0) + b"".join(
        field_bytes(3, field_varint(1, ledger) + field_varint(2, entry)) for ledger, entry in ACK_IDS)
    return b"\x08\x0a" + field_bytes(10, body)


def upb_ack_decode(cmd: bytes) -> tuple:
    command = pb.BaseCommand()
    command.MergeFromString(cmd)
    a = command.ack
    return a.consumer_id, a.ack_type, [(m.ledgerId, m.entryId) for m in a.message_id]


def hr_ack_decode(cmd: bytes) -> tuple:
    start, stop = _fields(cmd)[10]
    consumer = kind = 0
    ids = []
    for number, _, value, _, end in iter_fields(cmd, start, stop):
        if number == 1:
            consumer = value
        elif number == 2:
            kind = value
        elif number == 3:
            mid = _fields(cmd, value, end)
            ids.append((mid[1], mid[2]))
    return consumer, kind, ids


def upb_flow() -> bytes:
    cmd = pb.BaseCommand(type=c.FLOW)
    cmd.flow.consumer_id = 3
    cmd.flow.messagePermits = 500
    return cmd.SerializeToString()


def hr_flow() -> bytes:
    return b"\x08\x0b" + field_bytes(11, field_varint(1, 3) + field_varint(2, 500))


def upb_flow_decode(cmd: bytes) -> tuple:
    command = pb.BaseCommand()
    command.MergeFromString(cmd)
    return command.flow.consumer_id, command.flow.messagePermits


def hr_flow_decode(cmd: bytes) -> tuple:
    start, stop = _fields(cmd)[11]
    f = _fields(cmd, start, stop)
    return f[1], f[2]


def upb_receipt() -> bytes:
    cmd = pb.BaseCommand(type=c.SEND_RECEIPT)
    r = cmd.send_receipt
    r.producer_id = 1
    r.sequence_id = SEQ
    r.message_id.ledgerId = 123456
    r.message_id.entryId = 7890
    return cmd.SerializeToString()


def hr_receipt() -> bytes:
    mid = field_varint(1, 123456) + field_varint(2, 7890)
    return b"\x08\x07" + field_bytes(7, field_varint(1, 1) + field_varint(2, SEQ) + field_bytes(3, mid))


def part1() -> None:
    print("== protobuf runtime (upb) vs hand-rolled (kop/managed_ledger/protobuf.py style) ==")
    pairs = [
        ("SEND + MessageMetadata", upb_send, hr_send, upb_send_decode, hr_send_decode),
        ("MESSAGE", upb_message, hr_message, upb_message_decode, hr_message_decode),
        ("ACK (10 message ids)", upb_ack, hr_ack, upb_ack_decode, hr_ack_decode),
        ("FLOW", upb_flow, hr_flow, upb_flow_decode, hr_flow_decode),
        ("SEND_RECEIPT", upb_receipt, hr_receipt, None, None),
    ]
    for name, upb_enc, hr_enc, upb_dec, hr_dec in pairs:
        assert upb_enc() == hr_enc(), name  # same bytes both ways
        encoded = upb_enc()
        args = encoded if isinstance(encoded, tuple) else (encoded,)
        if upb_dec is not None:
            assert upb_dec(*args) == hr_dec(*args), name
        up = bench(f"{name}: encode, protobuf/upb", upb_enc)
        hr = bench(f"{name}: encode, hand-rolled", hr_enc)
        print(f"{'':<66} hand-rolled/upb = {hr / up:.1f}x")
        if upb_dec is not None:
            up = bench(f"{name}: decode, protobuf/upb", lambda d=upb_dec, a=args: d(*a))
            hr = bench(f"{name}: decode, hand-rolled", lambda d=hr_dec, a=args: d(*a))
            print(f"{'':<66} hand-rolled/upb = {hr / up:.1f}x")


def part1_frames() -> None:
    print("== whole frames through kop.pulsar.codec.framing ==")
    md = pb.MessageMetadata(producer_name=PRODUCER, sequence_id=SEQ, publish_time=PUBLISH, num_messages_in_batch=100)
    payload = b"x" * 20480
    send_frame = framing.encode_message(c.command(c.SEND, producer_id=1, sequence_id=SEQ, num_messages=100),
                                        md, payload)
    reader = framing.FrameReader()

    def read_send() -> object:
        reader.feed(send_frame)
        frame = reader.next_frame()
        return frame.metadata.num_messages_in_batch

    bench("SEND frame, 20 KiB payload: FrameReader + CRC32C + metadata", read_send)
    flow = framing.encode_command(c.command(c.FLOW, consumer_id=1, messagePermits=1000))

    def read_flow() -> object:
        reader.feed(flow)
        return reader.next_frame().inner.messagePermits

    bench("FLOW frame: FrameReader", read_flow)
    stored = framing.encode_headers_and_payload(md, payload)

    def write_message() -> bytes:
        cmd = pb.BaseCommand(type=c.MESSAGE)
        cmd.message.consumer_id = 3
        cmd.message.message_id.ledgerId = 123456
        cmd.message.message_id.entryId = 7890
        return framing.encode_payload_command(cmd, stored)

    bench("MESSAGE frame around a stored 20 KiB entry: encode", write_message)
    bench("SEND_RECEIPT frame: encode",
          lambda: framing.encode_command(c.command(c.SEND_RECEIPT, producer_id=1, sequence_id=SEQ,
                                                   message_id=c.message_id(123456, 7890))))


# ---- conversion ------------------------------------------------------------------------------------------


def part2() -> None:
    for native in (True, False):
        if native and _NATIVE is None:
            print("== kop.pulsar._native is not built (python setup.py build_ext --inplace): Python only ==")
            continue
        convert._native = _NATIVE if native else None
        which = "C loops (kop.pulsar._native)" if native else "Python loops (the reference)"
        print(f"== Kafka <-> Pulsar conversion (kop/pulsar/convert.py), per message, {which} ==")
        conversions()
    convert._native = _NATIVE
    print("== LZ4, per message, 1 KiB messages in one 128 KiB batch (pc-1024b-lz4's shape) ==")
    lz4_phases()


def conversions() -> None:
    for n, size, headers, keyed in ((1000, 100, 0, False), (100, 100, 1, True), (100, 1000, 0, True),
                                    (1, 100, 1, True)):
        records = [(b"key-%d" % i if keyed else None, b"v" * size, [("h", b"x")] * headers, 1_700_000_000_000 + i)
                   for i in range(n)]
        kafka = build_batch(records)
        label = f"{n} records of {size} B, {headers} header, {'keys' if keyed else 'no key'}"
        bench(f"Kafka path for comparison: iter_batches ({label})",
              lambda k=kafka: list(iter_batches(k)), per=n)
        bench(f"Kafka -> Pulsar ({label})", lambda k=kafka: kafka_to_pulsar(k), per=n)
        entry = kafka_to_pulsar(kafka)
        bench(f"Pulsar -> Kafka ({label})",
              lambda e=entry: pulsar_to_kafka(e.metadata, e.payload, 0), per=n)
    kafka = build_batch([(b"key-%d" % i, b"v" * 100, [], None) for i in range(100)], compression=3)
    bench("Kafka(lz4) -> Pulsar(lz4) (100 records of 100 B)", lambda: kafka_to_pulsar(kafka, compression=1), per=100)
    entry = kafka_to_pulsar(kafka, compression=1)
    bench("Pulsar(lz4) -> Kafka(lz4) (100 records of 100 B)",
          lambda: pulsar_to_kafka(entry.metadata, entry.payload, 0, compression=3), per=100)


def lz4_phases() -> None:
    """Where a Pulsar LZ4 SEND's and an LZ4 dispatch's time goes: codec work against the conversion."""
    n = 128
    raw_entry = kafka_to_pulsar(build_batch([(None, b"x" * 1024, [], None) for _ in range(n)]))
    md = raw_entry.metadata
    block = pz.compress(pz.LZ4, raw_entry.payload)
    lz4_md = pb.MessageMetadata()
    lz4_md.CopyFrom(md)
    lz4_md.compression = pz.LZ4
    lz4_md.uncompressed_size = len(raw_entry.payload)
    bench("SEND: Pulsar LZ4 block decompress", lambda: pz.decompress(pz.LZ4, block, len(raw_entry.payload), 1 << 26),
          per=n)
    bench("SEND: convert (uncompressed)", lambda: pulsar_to_kafka(md, raw_entry.payload, 0), per=n)
    records = convert._batch_to_records(raw_entry.payload, n, md.publish_time)[0]
    bench("SEND: Kafka LZ4 frame compress (kop/protocol/compression)", lambda: kcomp.compress(3, records), per=n)
    bench("SEND: all (pulsar_to_kafka, LZ4 -> LZ4)", lambda: pulsar_to_kafka(lz4_md, block, 0, compression=3), per=n)
    kafka = pulsar_to_kafka(lz4_md, block, 0, compression=3)
    frame = memoryview(kafka)[61:]
    bench("dispatch: Kafka LZ4 frame decompress", lambda: kcomp.decompress(3, frame), per=n)
    bench("dispatch: Pulsar LZ4 block compress", lambda: pz.compress(pz.LZ4, raw_entry.payload), per=n)
    bench("dispatch: all (kafka_to_pulsar, LZ4 -> LZ4)", lambda: kafka_to_pulsar(kafka, compression=pz.LZ4), per=n)


def main() -> None:
    if "--conversion" not in sys.argv[1:]:  # --conversion: part 2 only
        part1()
        part1_frames()
    part2()


if __name__ == "__main__":
    main()
