"""The zero-copy read (issue 27) below the connection: PartitionLog.read(zero_copy=True) over real ledger files,
and what kop/kafka/apis/fetch.py makes of its batches.

Batches appended now are stored with their log base offset (the index interceptor writes it), so a fetch sends
each as one span of the ledger file; entries stored before (the producer's base offset, 0) get their 8 bytes
from memory and the rest from the file. Either way the bytes a consumer gets are the batch with its log base
offset. Verified reads (localStoreVerifyChecksums, the default) hand out spans of entries whose CRC was just
checked, and none past a damaged one."""

from __future__ import annotations

import pytest

from kop.kafka.apis.fetch import _add_batches
from kop.kafka.sendfile import read_spans
from kop.offset import open_embedded_storage
from kop.offset.entry_format import encode_entry_header
from kop.protocol.records import NewRecord, build_batch
from kop.storage.api import FileSpan, StorageError

NAME = "public/default/persistent/zc-partition-0"


def _batch(tag: int, n: int = 10) -> bytes:
    """~45 KiB: zero copy applies to entries of 32 KiB or more on average."""
    return build_batch([NewRecord(b"k%d" % i, b"%d-%d-" % (tag, i) + b"v" * 4500, (), 1_000 + i) for i in range(n)])


async def test_old_and_new_entries_come_out_as_the_batches_with_their_log_offsets(tmp_path) -> None:
    st = await open_embedded_storage(tmp_path, fsync="none", verify_reads=False)
    try:
        # Two entries as a broker before issue 27 stored them: the producer's batch untouched (base offset 0).
        ml = await st.factory.open(NAME)
        old = [_batch(0), _batch(1)]
        for i, b in enumerate(old):
            await ml.add_entry(encode_entry_header(1_000, 10 * i + 9, 10) + b)
        await ml.close()
        log = await st.open_log(NAME)
        new = [_batch(2), _batch(3)]
        for b in new:
            await log.append(b, 9, 1_009)
        assert log.high_watermark == 40

        res = await log.read(0, 1 << 24, zero_copy=True)
        assert [fb.base_offset for fb in res.batches] == [0, 10, 20, 30]
        assert all(fb.rest is not None for fb in res.batches)
        records: list = []
        size, count = _add_batches(res.batches, records)
        assert (size, count) == (sum(map(len, old + new)), 40)
        # old: 8 bytes + the rest of the head + a span; the first one's stored 0 is right. new: one span each.
        shapes = [type(p).__name__ for p in records]
        assert shapes == ["FileSpan", "bytes", "memoryview", "FileSpan", "FileSpan", "FileSpan"]
        want = b"".join((10 * i).to_bytes(8, "big") + b[8:] for i, b in enumerate(old + new))
        assert b"".join(read_spans(records)) == want

        # Read by the copy path, the same bytes.
        res = await log.read(0, 1 << 24)
        assert all(fb.rest is None for fb in res.batches)
        records = []
        _add_batches(res.batches, records)
        assert not any(isinstance(p, FileSpan) for p in records)
        assert b"".join(records) == want
    finally:
        await st.close()


async def test_verified_reads_give_spans_and_damage_ends_them(tmp_path) -> None:
    """Verified reads (the default) hand out spans too, since each entry's CRC is checked before (issue 27): the
    bytes are those of the copy path; a flipped byte in the second of three entries serves the first alone,
    the second raises (KAFKA_STORAGE_ERROR in a fetch) and the third is served after it."""
    st = await open_embedded_storage(tmp_path, fsync="none", verify_reads=True)
    try:
        log = await st.open_log(NAME)
        for i in range(3):
            await log.append(_batch(i), 9, 1_009)
        res = await log.read(0, 1 << 24, zero_copy=True)
        assert len(res.batches) == 3 and all(fb.rest is not None for fb in res.batches)
        spans: list = []
        _add_batches(res.batches, spans)
        copied: list = []
        _add_batches((await log.read(0, 1 << 24)).batches, copied)
        assert b"".join(read_spans(spans)) == b"".join(copied)

        ledger = next(iter(st.ledger_store._files.values()))  # noqa: SLF001 - the one ledger's file
        start, stop = ledger.starts[1], ledger.starts[2]
        with open(ledger.path, "r+b") as f:  # the middle of entry 1, in the part sendfile would send
            f.seek((start + stop) // 2)
            b = f.read(1)
            f.seek((start + stop) // 2)
            f.write(bytes([b[0] ^ 0x40]))
        res = await log.read(0, 1 << 24, zero_copy=True)
        assert [fb.base_offset for fb in res.batches] == [0]
        with pytest.raises(StorageError):
            await log.read(10, 1 << 24, zero_copy=True)
        res = await log.read(20, 1 << 24, zero_copy=True)
        assert [fb.base_offset for fb in res.batches] == [20] and res.batches[0].rest is not None
    finally:
        await st.close()


async def test_small_entries_stay_on_the_copy_path(tmp_path) -> None:
    st = await open_embedded_storage(tmp_path, fsync="none", verify_reads=False)
    try:
        log = await st.open_log(NAME)
        for i in range(5):
            await log.append(_batch(i, 1), 0, 1_000)  # ~4.5 KiB entries
        res = await log.read(0, 1 << 24, zero_copy=True)
        assert len(res.batches) == 5 and all(fb.rest is None for fb in res.batches)
    finally:
        await st.close()
