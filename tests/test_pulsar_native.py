"""kop/pulsar/_native.c: the C loops of the Kafka <-> Pulsar conversion against their Python reference.

Both directions, on random batches (keys UTF-8, binary, empty or null; null and empty values; headers with null
or non-UTF-8 values; timestamps and sequence ids of every varint size, LogAppendTime; overlong varints; Pulsar
metadata with unknown or repeated fields, base64 keys canonical or not, compacted-out messages) and on damaged
ones (every truncation, flipped and inserted bytes, sizes that do not add up): the C function either returns
exactly what the Python one returns, or None - and then the Python path decides. A C result where Python
declines or raises is a failure, and so is a clean batch the C code declines.

Under CI (CI=true or KOP_FAIL_ON_SKIP=1) a missing extension fails the run: scripts/setup builds it, and a broker
without it spends several times the CPU per converted message.
"""

from __future__ import annotations

import os
import random
import struct
from pathlib import Path
from typing import Any

import pytest

from kop.pulsar import convert
from kop.pulsar.codec import batch as pbatch
from kop.pulsar.codec import commands as c

T0 = 1_700_000_000_000


def _in_ci() -> bool:
    return os.environ.get("CI", "").lower() == "true" or os.environ.get("KOP_FAIL_ON_SKIP") == "1"


@pytest.fixture
def native():  # noqa: ANN201
    if convert._native is None:
        if _in_ci():
            pytest.fail("kop.pulsar._native was not built: `pip install -e .` (scripts/setup) compiles it")
        pytest.skip("kop.pulsar._native is not built here (python setup.py build_ext --inplace)")
    return convert._native


def test_the_extension_is_built_under_ci() -> None:
    if convert._native is None and not _in_ci():
        pytest.skip("kop.pulsar._native is not built here; outside CI the broker converts in Python")
    assert convert._native is not None, "kop.pulsar._native was not built: run `pip install -e .`"
    # the one built from this tree, next to convert.py (not a stale copy found elsewhere on the path)
    assert Path(convert._native.__file__).parent == Path(convert.__file__).parent


# ---- Kafka -> Pulsar ---------------------------------------------------------------------------------


def _damaged(rnd: random.Random, data: bytes, inserts: tuple[int, ...]) -> list[bytes]:
    """Every truncation of `data`, and 30 copies with one byte changed or a few inserted (`inserts` lengths)."""
    variants = [data[:cut] for cut in range(len(data))]
    for _ in range(30):
        damaged = bytearray(data)
        at = rnd.randrange(len(damaged))
        if rnd.random() < 0.5:
            damaged[at] = rnd.randrange(256)
        else:
            damaged[at:at] = rnd.randbytes(rnd.choice(inserts))
        variants.append(bytes(damaged))
    return variants


def _zz(value: int, overlong: int = 0) -> bytes:
    """A Kafka varint, optionally padded with ``overlong`` redundant continuation bytes."""
    raw = ((value << 1) ^ (value >> 63)) & 0xFFFFFFFFFFFFFFFF
    out = bytearray()
    while raw > 0x7F:
        out.append((raw & 0x7F) | 0x80)
        raw >>= 7
    out.append(raw)
    for _ in range(overlong):
        out[-1] |= 0x80
        out.append(0)
    return bytes(out[:10]) if len(out) > 10 else bytes(out)


def _record(rnd: random.Random, i: int, key: bytes | None, odd: bool, prefixes: list[bytes] | None = None) -> bytes:
    """One Kafka record's bytes (without its length), fields drawn at random; ``odd`` adds the rare forms;
    ``prefixes``: most values start with one of them (Confluent's magic byte and id, or look-alikes)."""
    def ov() -> int:
        return rnd.choice([0, 0, 0, 1, 2]) if odd else 0

    value = None if rnd.random() < 0.15 else rnd.randbytes(rnd.choice([0, 1, 100, 1000, 9000]))
    if prefixes and value is not None and rnd.random() < 0.8:
        value = rnd.choice(prefixes) + value
    body = bytearray(b"\x00")
    body += _zz(rnd.choice([0, 1, -1, 5000, -70000, 2**40]), ov())
    body += _zz(i, ov())
    body += _zz(rnd.choice([-1, -7]) if key is None and odd else -1 if key is None else len(key), ov())
    body += key or b""
    body += _zz(-1 if value is None else len(value), ov())
    body += value or b""
    headers = []
    for _ in range(rnd.choice([0, 0, 1, 3])):
        hk = rnd.choice([b"h", "é".encode() * 70, b""])
        hv = rnd.choice([None, b"", b"v", "€".encode() * 50])
        if odd and rnd.random() < 0.2:
            hv = b"\xff\xfe bad"  # not UTF-8: Python replaces, C declines
        headers.append((hk, hv))
    for _ in range(rnd.choice([0, 0, 0, 1] + ([2] if odd else []))):  # twice: the last counts (C declines)
        # the Pulsar ordering key header: not a property; its value is the ordering key (binary or not, null: none)
        headers.insert(rnd.randrange(len(headers) + 1), (convert.ORDERING_KEY_HEADER.encode(),
                                                         rnd.choice([None, b"", b"ok", b"\xff\x00", key])))
    body += _zz(len(headers), ov())
    for hk, hv in headers:
        body += _zz(len(hk)) + hk + _zz(-1 if hv is None else len(hv)) + (hv or b"")
    return bytes(body)


def _random_records(rnd: random.Random, odd: bool, prefixes: list[bytes] | None = None) -> tuple[bytes, int]:
    count = rnd.choice([1, 2, 10, 130])
    shared = rnd.random() < 0.3
    key0 = None
    out = bytearray()
    for i in range(count):
        if shared and i:
            key = key0
        elif rnd.random() < 0.3:
            key = None
        else:
            key = rnd.choice([b"", b"k", "ké".encode(), b"\xff\x00raw", rnd.randbytes(200), b"x" * 20000])
        key0 = key if i == 0 else key0
        rec = _record(rnd, i, key, odd, prefixes)
        out += _zz(len(rec)) + rec
    return bytes(out), count


def _k2p_args(rnd: random.Random) -> tuple:
    fixed = rnd.choice([None, None, T0, 0, -1])
    base_ts = rnd.choice([T0, 0, 5, -1, 2**62])
    base_seq = rnd.choice([-1, -1, 0, 12345, 2**40])
    return fixed, base_ts, base_seq


def _py_k2p(data: bytes, count: int, *args: Any) -> object:
    try:
        return convert._records_to_batch_py(data, count, *args)
    except Exception as exc:  # noqa: BLE001 - the reference refusing is an outcome to compare against
        return exc


@pytest.mark.parametrize("seed", range(6))
def test_kafka_to_pulsar_native_is_the_python_loop(native, seed: int) -> None:  # noqa: ANN001
    rnd = random.Random(seed)
    for round_ in range(50):
        odd = round_ % 2 == 1
        data, count = _random_records(rnd, odd)
        args = _k2p_args(rnd)
        expected = _py_k2p(data, count, *args)
        got = native.records_to_batch(data, count, *args)
        if got is None:
            assert odd, "a clean batch was declined"
            continue
        assert got == expected
        assert native.records_to_batch(memoryview(data), count, *args) == got  # any bytes-like


@pytest.mark.parametrize("seed", range(3))
def test_kafka_to_pulsar_damaged_input_is_declined_or_read_the_same(native, seed: int) -> None:  # noqa: ANN001
    rnd = random.Random(100 + seed)
    declined = 0
    for _ in range(40):
        data, count = _random_records(rnd, odd=rnd.random() < 0.5)
        if len(data) > 3000:
            continue
        args = _k2p_args(rnd)
        variants = _damaged(rnd, data, inserts=(1, 5))
        for variant in variants:
            for n in (count, count + 1, max(count - 1, 0)):
                got = native.records_to_batch(variant, n, *args)
                if got is None:
                    declined += 1
                    continue
                assert got == _py_k2p(variant, n, *args)
    assert declined


def _prefix(schema_id: int) -> bytes:
    return b"\x00" + schema_id.to_bytes(4, "big")


# ids a map may know, ids it may lack, and look-alikes: no id (0, past int32), a cut-short prefix, another magic
_IDS = [1, 7, 300, 70000, 2**31 - 1]
_PREFIXES = [_prefix(i) for i in _IDS + [0, 2**31, 2**32 - 1, 12, 13]] + [b"\x00", b"\x00\x00\x00", b"\x01\x00\x00\x00\x07"]


def _ids_map(rnd: random.Random) -> dict[int, int] | None:
    return rnd.choice([None, {}, {i: rnd.randrange(5) for i in rnd.sample(_IDS, rnd.randrange(1, len(_IDS) + 1))}])


@pytest.mark.parametrize("seed", range(4))
def test_kafka_to_pulsar_prefixes_native_is_the_python_loop(native, seed: int) -> None:  # noqa: ANN001
    """Values behind known, unknown and look-alike prefixes, with and without a map: the same payload, version
    and unknown ids from C and Python (and a map that names something does get used)."""
    rnd = random.Random(300 + seed)
    stripped = 0
    for round_ in range(50):
        odd = round_ % 2 == 1
        data, count = _random_records(rnd, odd, _PREFIXES)
        args = _k2p_args(rnd)
        ids = _ids_map(rnd)
        expected = _py_k2p(data, count, *args, ids)
        got = native.records_to_batch(data, count, *args, ids)
        if got is None:
            assert odd, "a clean batch was declined"
            continue
        assert got == expected
        if ids is None:
            assert got[3:] == (-1, ())
            assert got == native.records_to_batch(data, count, *args)  # None is the default: nothing is read
        stripped += got[3] >= 0
    assert stripped


@pytest.mark.parametrize("seed", range(2))
def test_kafka_to_pulsar_prefixes_damaged_input_is_declined_or_read_the_same(native, seed: int) -> None:  # noqa: ANN001
    rnd = random.Random(400 + seed)
    for _ in range(30):
        data, count = _random_records(rnd, odd=rnd.random() < 0.5, prefixes=_PREFIXES)
        if len(data) > 3000:
            continue
        args = _k2p_args(rnd)
        ids = _ids_map(rnd)
        for variant in _damaged(rnd, data, inserts=(1, 5)):
            got = native.records_to_batch(variant, count, *args, ids)
            if got is not None:
                assert got == _py_k2p(variant, count, *args, ids)


def test_kafka_to_pulsar_ids_that_are_not_versions_are_declined(native) -> None:  # noqa: ANN001
    rec = b"\x00" + _zz(0) + _zz(0) + _zz(-1) + _zz(6) + _prefix(7) + b"v" + _zz(0)
    data = _zz(len(rec)) + rec
    assert native.records_to_batch(data, 1, None, T0, -1, {7: 3})[3] == 3
    assert native.records_to_batch(data, 1, None, T0, -1, {7: -1}) is None  # a negative version: Python decides
    assert native.records_to_batch(data, 1, None, T0, -1, {7: "x"}) is None  # not an int either
    with pytest.raises(TypeError):
        native.records_to_batch(data, 1, None, T0, -1, [7])


def test_kafka_to_pulsar_hostile_sizes(native) -> None:  # noqa: ANN001
    """Lengths that point past the end, eleven-byte varints, header counts beyond the record: declined,
    never read past the input (the buffers here end exactly where the claim starts to lie)."""
    ok = _zz(0) + _zz(0) + _zz(-1) + _zz(1) + b"v" + _zz(0)
    cases = [
        _zz(2**40) + ok,  # record length far past the end
        _zz(len(ok) + 1) + ok,  # one byte short
        b"\xff" * 11,  # a varint that never ends
        _zz(len(ok)) + b"\x00" + b"\xff" * 10,  # timestamp delta varint of eleven bytes
        _zz(9) + b"\x00" + _zz(0) + _zz(0) + _zz(2**30) + b"k",  # key length past the end
        _zz(7) + b"\x00" + _zz(0) + _zz(0) + _zz(-1) + _zz(-1) + _zz(10**6),  # header count past the record
        _zz(-5) + ok,  # negative record length
        b"",
    ]
    for data in cases:
        for count in (0, 1, 2, -1, 2**31 - 1):  # a count no batch of this size can hold is declined, not allocated
            assert native.records_to_batch(data, count, None, T0, -1) is None


# ---- Pulsar -> Kafka ---------------------------------------------------------------------------------


def _tag(field: int, wire: int) -> bytes:
    return bytes([field << 3 | wire])


def _uv(value: int, overlong: int = 0) -> bytes:
    out = bytearray()
    while value > 0x7F:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    for _ in range(overlong):
        out[-1] |= 0x80
        out.append(0)
    return bytes(out)


def _ld(field: int, raw: bytes) -> bytes:
    return _tag(field, 2) + _uv(len(raw)) + raw


def _smm(rnd: random.Random, odd: bool, payload: bytes) -> bytes:
    """A SingleMessageMetadata written by hand, so that repeated fields and odd forms can be in it."""
    parts = []
    for _ in range(rnd.choice([0, 0, 1, 3])):
        kv = b""
        if rnd.random() < 0.9:
            kv += _ld(1, rnd.choice(["a", "é" * 40, ""]).encode())
        if rnd.random() < 0.9:
            kv += _ld(2, rnd.choice(["v", "€" * 100, ""]).encode())
        if odd and rnd.random() < 0.1:
            kv += _ld(3, b"?")  # unknown KeyValue field
        parts.append(_ld(1, kv))
    null = rnd.random() < 0.1
    fields = {
        # clean: text that is also canonical base64 (so the flag may be either); odd: anything
        2: lambda: _ld(2, rnd.choice(["", "AP8=", "QR==", "/wBr"] + (["pk", "é", "not base64!", "A===", "===="]
                                                                     if odd else [])).encode()
                       if not (odd and rnd.random() < 0.2) else b"\xff\xfe"),
        3: lambda: _tag(3, 0) + _uv(len(payload), rnd.choice([0, 1]) if odd else 0),
        4: lambda: _tag(4, 0) + _uv(rnd.random() < 0.1),
        5: lambda: _tag(5, 0) + _uv(rnd.choice([0, 1, T0 + rnd.randrange(10**6), 2**40]
                                               + ([2**63, 2**64 - 1] if odd else []))),
        6: lambda: _tag(6, 0) + _uv(rnd.random() < 0.4),
        # ordering keys equal to a partition key above, as text or base64-decoded: no ORDERING_KEY_HEADER then
        7: lambda: _ld(7, rnd.choice([b"", b"ok", rnd.randbytes(300), b"AP8=", b"\x00\xff", b"/wBr", b"\xff\x00k"])),
        8: lambda: _tag(8, 0) + _uv(rnd.randrange(10**12)),
        9: lambda: _tag(9, 0) + _uv(null),
        10: lambda: _tag(10, 0) + _uv(1),
    }
    chosen = [f for f in fields if f == 3 or rnd.random() < 0.4]
    if odd and rnd.random() < 0.3:
        chosen.append(rnd.choice([2, 5, 7]))  # a repeated field: the last one counts
    rnd.shuffle(chosen) if odd else None
    parts += [fields[f]() for f in chosen]
    if odd and rnd.random() < 0.1:
        parts.append(_tag(11, 0) + _uv(1))  # unknown field
    return b"".join(parts)


def _random_pulsar_batch(rnd: random.Random, odd: bool) -> tuple[bytes, int]:
    count = rnd.choice([1, 2, 5, 70])
    out = bytearray()
    for _ in range(count):
        payload = rnd.randbytes(rnd.choice([0, 10, 100, 9000]))
        smm = _smm(rnd, odd, payload)
        out += struct.pack(">I", len(smm)) + smm + payload
    return bytes(out), count


@pytest.mark.parametrize("seed", range(6))
def test_pulsar_to_kafka_native_is_the_python_loop(native, seed: int) -> None:  # noqa: ANN001
    """With and without Confluent's prefix before the values."""
    rnd = random.Random(seed)
    for round_ in range(60):
        odd = round_ % 2 == 1
        data, count = _random_pulsar_batch(rnd, odd)
        publish = rnd.choice([T0, 0, 5])
        prefix = rnd.choice([None, None, b"", _prefix(1), _prefix(2**31 - 1)])
        expected = convert._batch_to_records_py(data, count, publish, prefix)
        got = native.batch_to_records(data, count, publish, prefix)
        if got is None:
            assert odd, "a clean batch was declined"  # only odd forms: non-canonical base64, past 63 bits
            continue
        assert expected is not None, "C converted what the reference declines"
        assert (bytes(expected[0]),) + expected[1:] == got


def test_pulsar_to_kafka_agrees_with_protobuf_on_clean_batches(native) -> None:  # noqa: ANN001
    """The same batches through protobuf objects (_messages_to_records): C, Python loop and protobuf agree."""
    rnd = random.Random(7)
    for _ in range(40):
        items = []
        for _ in range(rnd.choice([1, 3, 50])):
            smm = c.pb.SingleMessageMetadata()
            if rnd.random() < 0.5:
                smm.ordering_key = rnd.randbytes(rnd.choice([0, 5]))
            if rnd.random() < 0.5:
                smm.partition_key = rnd.choice(["pk", "AP8=", "é"])
                smm.partition_key_b64_encoded = smm.partition_key == "AP8=" and rnd.random() < 0.5
            if rnd.random() < 0.5:
                smm.event_time = T0 + rnd.randrange(1000)
            smm.sequence_id = rnd.randrange(10**6)
            for _ in range(rnd.choice([0, 2])):
                smm.properties.add(key="k", value="é" * rnd.randrange(5))
            smm.null_value = rnd.random() < 0.1
            items.append((smm, b"" if smm.null_value else rnd.randbytes(rnd.choice([0, 100]))))
        md = c.MessageMetadata(producer_name="p", sequence_id=0, publish_time=T0, num_messages_in_batch=len(items))
        payload = pbatch.encode_batch(items)
        got = native.batch_to_records(payload, len(items), T0)
        assert got is not None
        ref = convert._messages_to_records(md, pbatch.messages(md, payload))
        assert got == (bytes(ref[0]),) + ref[1:]
        prefix = _prefix(rnd.randrange(1, 2**31))
        got = native.batch_to_records(payload, len(items), T0, prefix)
        ref = convert._messages_to_records(md, pbatch.messages(md, payload), prefix)
        assert got == (bytes(ref[0]),) + ref[1:]


@pytest.mark.parametrize("seed", range(3))
def test_pulsar_to_kafka_damaged_input_is_declined_or_read_the_same(native, seed: int) -> None:  # noqa: ANN001
    rnd = random.Random(200 + seed)
    declined = 0
    for _ in range(40):
        data, count = _random_pulsar_batch(rnd, odd=rnd.random() < 0.5)
        if len(data) > 3000:
            continue
        variants = _damaged(rnd, data, inserts=(1, 4))
        for variant in variants:
            prefix = rnd.choice([None, _prefix(9)])
            for n in (count, count + 1, max(count - 1, 0)):
                got = native.batch_to_records(variant, n, T0, prefix)
                if got is None:
                    declined += 1
                    continue
                expected = convert._batch_to_records_py(variant, n, T0, prefix)
                assert expected is not None and (bytes(expected[0]),) + expected[1:] == got
    assert declined


def test_pulsar_to_kafka_hostile_sizes(native) -> None:  # noqa: ANN001
    smm = _tag(3, 0) + _uv(1)
    cases = [
        struct.pack(">I", 0xFFFFFFFF) + smm,  # metadata size past the end
        struct.pack(">I", len(smm)) + smm,  # payload_size 1, no payload byte
        struct.pack(">I", 4) + _tag(3, 0) + b"\xff\xff\xff",  # varint cut by the metadata's end
        struct.pack(">I", 12) + _tag(3, 0) + b"\xff" * 11,  # varint of eleven bytes
        struct.pack(">I", 6) + _tag(3, 0) + _uv(2**31) + b"x",  # payload_size over 2 GiB
        struct.pack(">I", 3) + _tag(1, 2) + _uv(100),  # a property longer than the metadata
        struct.pack(">I", 5) + _tag(1, 2) + _uv(3) + _tag(1, 2) + _uv(50),  # a KeyValue text past its end
        b"\x00\x00",  # a size cut short
        b"",
    ]
    for data in cases:
        for count in (0, 1, 2, -1, 2**31 - 1):
            assert native.batch_to_records(data, count, T0) is None
    assert native.batch_to_records(struct.pack(">I", 2) + smm + b"x", 1, 2**63) is None  # publish time past 63 bits
    with pytest.raises(TypeError):
        native.batch_to_records(struct.pack(">I", 2) + smm + b"x", 1, T0, "not bytes")
