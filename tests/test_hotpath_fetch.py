"""The zero-copy Fetch path keeps Kafka's behaviour (issue 5): batches come back byte for byte as produced
(only baseOffset and partitionLeaderEpoch, both outside the CRC, are the broker's), offsets stay continuous
across ledger roll-overs and broker restarts, and the byte limits cut where Kafka cuts (whole batches; the
first batch of a response always, even when it is larger than the limits).

Requests are made with kafka-python's protocol classes (tests/support/wire.py), not with our codec.
"""

from __future__ import annotations

from kafka.protocol.consumer import FetchRequest

from kop.kafka.apis.common import LEADER_EPOCH
from kop.protocol.records import build_batch
from tests.support.clients import create_topic
from tests.support.wire import Negotiated

EPOCH_FIELD = slice(12, 16)


def _batch(tag: str, n: int, size: int) -> bytes:
    """A batch of n records of `size` value bytes, as a client would send it (base offset 0, epoch -1)."""
    return build_batch([(b"k%d" % i, (tag.encode() + b"%06d" % i) * (size // 10 + 1)) for i in range(n)])


def _split(records: bytes) -> list[bytes]:
    out, pos, mv = [], 0, memoryview(records or b"")
    while pos + 12 <= len(mv):
        length = int.from_bytes(mv[pos + 8 : pos + 12], "big")
        assert pos + 12 + length <= len(mv), "a partial batch: this broker only returns whole batches"
        out.append(bytes(mv[pos : pos + 12 + length]))
        pos += 12 + length
    assert pos == len(mv)
    return out


def _fetch(c: Negotiated, topic: str, parts: dict[int, tuple[int, int]], max_bytes: int):
    """One Fetch v12 (max_wait 0) for {partition: (offset, partition_max_bytes)} -> {partition: data}."""
    FT = FetchRequest.FetchTopic
    req = FetchRequest(
        replica_id=-1, max_wait_ms=0, min_bytes=0, max_bytes=max_bytes, isolation_level=0, session_id=0,
        session_epoch=-1, forgotten_topics_data=[], rack_id="",
        topics=[FT(topic=topic, partitions=[
            FT.FetchPartition(partition=p, current_leader_epoch=-1, fetch_offset=off, log_start_offset=-1,
                              partition_max_bytes=pmax) for p, (off, pmax) in parts.items()])],
    )
    resp = c.send(req, 12)
    (t,) = resp.responses
    return {p.partition_index: p for p in t.partitions}


def _read_all(c: Negotiated, topic: str, partition: int, max_bytes: int) -> list[bytes]:
    """Everything from offset 0 with fetches of at most `max_bytes`, following the returned offsets."""
    got: list[bytes] = []
    offset = 0
    while True:
        p = _fetch(c, topic, {partition: (offset, max_bytes)}, max_bytes)[partition]
        assert p.error_code == 0
        batches = _split(p.records)
        if not batches:
            return got
        got += batches
        last = batches[-1]
        offset = int.from_bytes(last[:8], "big", signed=True) + int.from_bytes(last[23:27], "big") + 1


def _same_batch(sent: bytes, got: bytes, base_offset: int) -> None:
    assert len(got) == len(sent)
    assert int.from_bytes(got[:8], "big", signed=True) == base_offset
    assert got[8:12] == sent[8:12]  # batchLength
    assert got[16:] == sent[16:]  # magic, CRC and everything it covers: untouched
    assert int.from_bytes(got[EPOCH_FIELD], "big", signed=True) == LEADER_EPOCH  # the broker's epoch


def test_batches_identical_and_offsets_continuous_across_rollovers_and_restarts(kop_broker) -> None:
    broker = kop_broker(localStoreFsyncPolicy="none", managedLedgerMaxEntriesPerLedger=3,
                        managedLedgerMinLedgerRolloverTimeMinutes=0)
    topic = "hotpath"
    create_topic(broker.bootstrap, topic, 1)
    sent: list[bytes] = []
    counts: list[int] = []

    def produce(c: Negotiated, tag: str, batches: int) -> None:
        for i in range(batches):
            n = 1 + (i * 7) % 13
            b = _batch(f"{tag}{i}", n, 40 + 30 * i)
            p = c.produce(topic, 0, b)
            assert p.error_code == 0
            assert p.base_offset == sum(counts)  # offsets continuous, across ledger roll-overs too
            sent.append(b)
            counts.append(n)

    with Negotiated(broker.bootstrap) as c:
        produce(c, "a", 8)  # 3 ledgers at 3 entries each
    broker.restart()
    with Negotiated(broker.bootstrap) as c:
        produce(c, "b", 5)
        bases = [sum(counts[:i]) for i in range(len(counts))]
        # Read back with a roomy limit and with a limit below most batches (one batch per fetch).
        for limit in (1 << 20, 64):
            got = _read_all(c, topic, 0, limit)
            assert len(got) == len(sent)
            for s, g, base in zip(sent, got, bases, strict=True):
                _same_batch(s, g, base)
        # A fetch at an offset inside a batch returns that whole batch.
        i = next(i for i, n in enumerate(counts) if n > 2)
        p = _fetch(c, topic, {0: (bases[i] + 1, 1 << 20)}, 1 << 20)[0]
        first = _split(p.records)[0]
        _same_batch(sent[i], first, bases[i])
        assert p.high_watermark == sum(counts)
        assert p.log_start_offset == 0


def test_byte_limits_cut_at_whole_batches_and_the_first_batch_always_comes(kop_broker) -> None:
    broker = kop_broker(localStoreFsyncPolicy="none")
    topic = "limits"
    create_topic(broker.bootstrap, topic, 2)
    with Negotiated(broker.bootstrap) as c:
        sizes = {}
        for part in (0, 1):
            batches = [_batch(f"p{part}b{i}", 5, 200) for i in range(4)]
            for b in batches:
                assert c.produce(topic, part, b).error_code == 0
            sizes[part] = [len(b) for b in batches]
        one = sizes[0][0]
        assert all(s == one for s in sizes[0] + sizes[1])

        # Partition limit below the first batch: that batch still comes, alone.
        p = _fetch(c, topic, {0: (0, 10)}, 1 << 20)[0]
        assert [len(b) for b in _split(p.records)] == [one]
        # Room for two and a half batches: two whole batches, never a cut one.
        p = _fetch(c, topic, {0: (0, 2 * one + one // 2)}, 1 << 20)[0]
        assert len(_split(p.records)) == 2
        # Response limit below one batch: the first partition's first batch only; the next partition gets
        # nothing (its data does not fit what is left), with its high watermark.
        ps = _fetch(c, topic, {0: (0, 1 << 20), 1: (0, 1 << 20)}, 10)
        assert len(_split(ps[0].records)) == 1
        assert _split(ps[1].records) == []
        assert ps[1].error_code == 0 and ps[1].high_watermark == 20
        # The response limit is shared in partition order: 5.5 batches = all 4 of the first, 1 of the second.
        ps = _fetch(c, topic, {0: (0, 1 << 20), 1: (0, 1 << 20)}, 5 * one + one // 2)
        assert len(_split(ps[0].records)) == 4
        assert len(_split(ps[1].records)) == 1
