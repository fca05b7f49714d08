"""The embedded ledger store: one framed, append-only file per ledger (kop/storage/local/ledgers.py).

Real files in a temporary directory; a "crash" is either a process killed with SIGKILL or a store
abandoned without closing (what a killed process leaves on disk: written bytes, nothing sealed). The contract
it shares with the BookKeeper store is in tests/test_storage_ledgers.py; this module holds what is local:
fsync policies, the index file, torn tails and damaged frames, one owner per directory.
"""

from __future__ import annotations

import asyncio
import os
import struct

import pytest

from kop.storage.api import LedgerDamagedError, NoSuchLedgerError, StorageError
from kop.storage.local.ledgers import HEADER_SIZE, VERIFIED_SPAN_MIN_BUDGET, LocalLedgerStore
from tests.support.storage import run


def payload(i: int, size: int = 100) -> bytes:
    return (f"entry-{i}-".encode() * size)[:size]


# ---- append and read ------------------------------------------------------------------------------------


@pytest.mark.parametrize("fsync", ["always", "interval", "none"])
async def test_appends_get_consecutive_ids_and_read_back(tmp_path, fsync):
    store = LocalLedgerStore(tmp_path, fsync=fsync, fsync_interval_ms=10)
    lh = await store.create_ledger()
    assert lh.last_add_confirmed == -1 and lh.length == 0
    ids = await asyncio.gather(*(lh.append(payload(i)) for i in range(50)))
    assert ids == list(range(50))
    assert lh.last_add_confirmed == 49
    assert lh.length == 50 * 100
    got = await lh.read(0, 49)
    assert [bytes(x) for x in got] == [payload(i) for i in range(50)]
    assert bytes((await lh.read(7, 7))[0]) == payload(7)
    await lh.close()
    await store.close()


async def test_concurrent_appends_share_fsyncs_with_policy_always(tmp_path):
    """Group commit: appends issued while a write+fsync is in flight go into the next one."""
    store = LocalLedgerStore(tmp_path, fsync="always")
    lh = await store.create_ledger()
    ids = await asyncio.gather(*(lh.append(payload(i)) for i in range(500)))
    assert ids == list(range(500))
    assert 1 <= store.syncs < 100, store.syncs
    await store.close()


async def test_interval_policy_syncs_in_the_background(tmp_path):
    store = LocalLedgerStore(tmp_path, fsync="interval", fsync_interval_ms=20)
    lh = await store.create_ledger()
    await lh.append(b"x")
    assert lh.last_add_confirmed == 0  # returned after the write, before any fsync
    before = store.syncs
    for _ in range(100):
        await asyncio.sleep(0.01)
        if store.syncs > before:
            break
    assert store.syncs > before
    await store.close()


async def test_none_policy_never_fsyncs_ledger_data(tmp_path):
    store = LocalLedgerStore(tmp_path, fsync="none")
    lh = await store.create_ledger()
    for i in range(20):
        await lh.append(payload(i))
    await lh.close()
    assert store.syncs == 0
    await store.close()


# ---- close, reopen, ids ---------------------------------------------------------------------------------


async def test_close_writes_an_index_that_a_reopen_seals_from(tmp_path):
    """Closing writes <id>.idx beside the ledger file; a reopen takes the sealed length from it (the
    close/refuse/reopen contract itself is in tests/test_storage_ledgers.py)."""
    store = LocalLedgerStore(tmp_path, fsync="always")
    lh = await store.create_ledger()
    for i in range(30):
        await lh.append(payload(i))
    await lh.close()
    assert (tmp_path / f"{lh.ledger_id}.idx").exists()
    await store.close()

    store = LocalLedgerStore(tmp_path, fsync="always")
    rh = await store.open_ledger(lh.ledger_id)
    assert rh.is_sealed and rh.last_add_confirmed == 29 and rh.length == 3000
    await store.close()


async def test_delete_removes_files_and_later_opens_fail(tmp_path):
    store = LocalLedgerStore(tmp_path, fsync="none")
    lh = await store.create_ledger()
    await lh.append(b"a")
    await lh.close()
    assert await store.list_ledgers() == [lh.ledger_id]
    await store.delete_ledger(lh.ledger_id)
    assert not any(tmp_path.glob(f"{lh.ledger_id}.*"))
    assert await store.list_ledgers() == []
    with pytest.raises(NoSuchLedgerError):
        await store.open_ledger(lh.ledger_id)
    with pytest.raises(NoSuchLedgerError):
        await store.delete_ledger(lh.ledger_id)
    await store.close()


async def test_a_directory_has_one_owner(tmp_path):
    store = LocalLedgerStore(tmp_path)
    with pytest.raises(StorageError, match="in use"):
        LocalLedgerStore(tmp_path)
    await store.close()
    LocalLedgerStore(tmp_path).abandon()


# ---- crash recovery ---------------------------------------------------------------------------------------


async def _write_unsealed(tmp_path, n: int) -> int:
    """n entries in an open ledger, then a store left as a killed process leaves it."""
    store = LocalLedgerStore(tmp_path, fsync="always")
    lh = await store.create_ledger()
    for i in range(n):
        await lh.append(payload(i))
    store.abandon()
    return lh.ledger_id


@pytest.mark.parametrize(
    "tail",
    [
        b"\x00" * 7,  # fewer bytes than a header
        b"garbage that is not a frame at all....",
        struct.pack(">IIQ", 0x12345678, 100, 10) + b"partial",  # header of entry 10, payload cut short
        struct.pack(">IIQ", 0, 4, 10) + b"abcd",  # complete frame with a wrong CRC
        struct.pack(">IIQ", 0, 0xFFFFFFF0, 10),  # absurd length
    ],
    ids=["short", "garbage", "partial-frame", "bad-crc", "huge-length"],
)
async def test_torn_tail_is_dropped_at_recovery_and_complete_entries_are_kept(tmp_path, tail):
    ledger_id = await _write_unsealed(tmp_path, 10)
    path = tmp_path / f"{ledger_id}.log"
    good_size = path.stat().st_size
    with open(path, "ab") as f:
        f.write(tail)
    store = LocalLedgerStore(tmp_path)
    rh = await store.open_ledger(ledger_id, recover=True)
    assert rh.last_add_confirmed == 9
    assert [bytes(x) for x in await rh.read(0, 9)] == [payload(i) for i in range(10)]
    assert path.stat().st_size == good_size  # the tail was cut off
    await store.close()
    store = LocalLedgerStore(tmp_path)  # sealed now: the index is used, the result is the same
    rh = await store.open_ledger(ledger_id)
    assert rh.is_sealed and rh.last_add_confirmed == 9
    await store.close()


def test_a_damaged_entry_in_the_middle_is_kept_in_place_not_cut_off(tmp_path, caplog):
    """Entries 7..9 were acknowledged after entry 6: a flipped byte in 6 must not make recovery cut them
    off as if 6 were a torn tail. Entry 6 is kept (ids stay in place) and refused as damaged."""
    from kop.storage.api import LedgerDamagedError

    async def main():
        ledger_id = await _write_unsealed(tmp_path, 10)
        path = tmp_path / f"{ledger_id}.log"
        with open(path, "r+b") as f:  # flip a payload byte of entry 6
            f.seek(6 * (HEADER_SIZE + 100) + HEADER_SIZE + 3)
            f.write(b"\xff")
        store = LocalLedgerStore(tmp_path)
        rh = await store.open_ledger(ledger_id, recover=True)
        assert rh.last_add_confirmed == 9
        assert [bytes(x) for x in await rh.read(0, 9)] == [payload(i) for i in range(6)]  # stops before 6
        with pytest.raises(LedgerDamagedError) as e:
            await rh.read(6, 9)
        assert (e.value.first_entry, e.value.last_entry) == (6, 6)
        assert [bytes(x) for x in await rh.read(7, 9)] == [payload(i) for i in range(7, 10)]
        assert [d["firstEntry"] for d in store.damage_list()] == [6]
        assert store.recovery["damaged_entries_kept"] == 1
        await store.close()

    run(main())
    assert sum("entries 6..6" in r.getMessage() for r in caplog.records) == 1


def test_a_damaged_length_field_is_resynchronised(tmp_path):
    async def main():
        ledger_id = await _write_unsealed(tmp_path, 10)
        with open(tmp_path / f"{ledger_id}.log", "r+b") as f:  # entry 4's length field
            f.seek(4 * (HEADER_SIZE + 100) + 4)
            f.write(b"\x7f")
        store = LocalLedgerStore(tmp_path)
        rh = await store.open_ledger(ledger_id, recover=True)
        assert rh.last_add_confirmed == 9
        assert len(await rh.read(0, 9)) == 4
        await store.close()

    run(main())


def test_truncated_sealed_ledger_serves_the_entries_before_the_cut(tmp_path, caplog):
    from kop.storage.api import LedgerDamagedError

    async def main():
        store = LocalLedgerStore(tmp_path)
        lh = await store.create_ledger()
        for i in range(20):
            await lh.append(payload(i))
        await lh.close()
        await store.close()
        path = tmp_path / f"{lh.ledger_id}.log"
        os.truncate(path, path.stat().st_size - 5)
        store = LocalLedgerStore(tmp_path)  # found at start-up (logged once) ...
        assert [d["firstEntry"] for d in store.damage_list()] == [19]
        rh = await store.open_ledger(lh.ledger_id, recover=True)
        assert rh.is_sealed and rh.last_add_confirmed == 19  # ... and the index is not rewritten shorter
        assert len(await rh.read(0, 19)) == 19
        with pytest.raises(LedgerDamagedError):
            await rh.read(19, 19)
        with pytest.raises(LedgerDamagedError):
            await rh.read_prefix(19, 10)
        await store.close()
        assert path.stat().st_size == 20 * (HEADER_SIZE + 100) - 5

    run(main())
    assert sum("entries 19..19" in r.getMessage() for r in caplog.records) == 1


def test_garbage_after_a_sealed_ledger_is_reported_and_refuse_start_refuses(tmp_path):
    from kop.storage.local.ledgers import LedgerDamagedAtStart

    async def main():
        store = LocalLedgerStore(tmp_path)
        lh = await store.create_ledger()
        for i in range(3):
            await lh.append(payload(i))
        await lh.close()
        await store.close()
        with open(tmp_path / f"{lh.ledger_id}.log", "ab") as f:
            f.write(b"garbage!" * 4)
        store = LocalLedgerStore(tmp_path)
        assert [(d["kind"], d["byteEnd"] - d["byteStart"]) for d in store.damage_list()] == [("trailing-garbage", 32)]
        rh = await store.open_ledger(lh.ledger_id)
        assert len(await rh.read(0, 2)) == 3
        await store.close()
        with pytest.raises(LedgerDamagedAtStart, match="trailing-garbage"):
            LocalLedgerStore(tmp_path, damaged_ledger_policy="refuse-start")
        LocalLedgerStore(tmp_path).abandon()  # the refused store released its lock

    run(main())


def test_a_torn_tail_is_logged_once_and_counted(tmp_path, caplog):
    async def main():
        ledger_id = await _write_unsealed(tmp_path, 5)
        with open(tmp_path / f"{ledger_id}.log", "ab") as f:
            f.write(b"\x00\x01\x02")
        store = LocalLedgerStore(tmp_path)
        rh = await store.open_ledger(ledger_id, recover=True)
        assert rh.last_add_confirmed == 4
        assert store.recovery["torn_tails"] == 1 and store.recovery["torn_bytes"] == 3
        assert store.damage_list() == []  # a torn tail is normal after a crash, not damage
        await store.close()

    run(main())
    torn = [r.getMessage() for r in caplog.records if "torn tail" in r.getMessage()]
    assert len(torn) == 1 and "3 bytes" in torn[0] and "after entry 4" in torn[0]


def test_reads_verify_checksums_by_default(tmp_path):
    async def main():
        store = LocalLedgerStore(tmp_path, verify_reads=True)
        lh = await store.create_ledger()
        for i in range(3):
            await lh.append(payload(i))
        await lh.close()
        await store.close()
        with open(tmp_path / f"{lh.ledger_id}.log", "r+b") as f:
            f.seek(HEADER_SIZE + (HEADER_SIZE + 100) + 1)  # entry 1
            f.write(b"\xff")
        store = LocalLedgerStore(tmp_path, verify_reads=False)
        rh = await store.open_ledger(lh.ledger_id)
        assert len(await rh.read(0, 2)) == 3  # unverified: served as stored
        await store.close()
        store = LocalLedgerStore(tmp_path)  # verified by default
        rh = await store.open_ledger(lh.ledger_id)
        assert bytes((await rh.read(0, 0))[0]) == payload(0)
        assert [bytes(x) for x in await rh.read(0, 2)] == [payload(0)]  # the intact entry before the damage
        with pytest.raises(StorageError, match="checksum"):
            await rh.read(1, 2)
        assert [bytes(x) for x in await rh.read_up_to(2, 2, 1000)] == [payload(2)]
        await store.close()

    run(main())


async def test_an_empty_unsealed_ledger_recovers_empty(tmp_path):
    ledger_id = await _write_unsealed(tmp_path, 0)
    store = LocalLedgerStore(tmp_path)
    rh = await store.open_ledger(ledger_id)
    assert rh.last_add_confirmed == -1 and rh.length == 0
    await store.close()


async def test_damaged_index_falls_back_to_scanning(tmp_path):
    store = LocalLedgerStore(tmp_path)
    lh = await store.create_ledger()
    for i in range(4):
        await lh.append(payload(i))
    await lh.close()
    await store.close()
    idx = tmp_path / f"{lh.ledger_id}.idx"
    idx.write_bytes(idx.read_bytes()[:-1] + b"\x00")
    store = LocalLedgerStore(tmp_path)
    rh = await store.open_ledger(lh.ledger_id)
    assert rh.last_add_confirmed == 3
    await store.close()


def test_recovery_scan_reads_in_chunks_whatever_the_frame_boundaries(tmp_path):
    from kop.storage.local.ledgers import scan_frames

    async def main():
        ledger_id = await _write_unsealed(tmp_path, 0)
        store = LocalLedgerStore(tmp_path, fsync="none")
        lh = await store.create_ledger()
        sizes = [i * 7 % 300 for i in range(200)]
        for i, n in enumerate(sizes):
            await lh.append(payload(i, n))
        await store.close()
        fd = os.open(tmp_path / f"{lh.ledger_id}.log", os.O_RDONLY)
        try:
            for chunk in (16, 17, 100, 1000, 4 << 20):
                starts, end, total, size = scan_frames(fd, chunk)
                assert (len(starts), end, total) == (200, size, sum(sizes))
        finally:
            os.close(fd)
        assert ledger_id != lh.ledger_id

    run(main())


# ---- verified zero-copy reads (issue 27) ------------------------------------------------------------------


async def test_verified_spans_check_every_frame_and_stop_before_a_damaged_one(tmp_path):
    """With verify_reads, read_spans checks each entry's CRC in the store's scratch buffer (chunks of whole
    frames; an entry larger than the buffer alone) before handing out its head and a span of the file: the
    spans give back the stored payloads, and a byte flipped in the middle of a range - in the part that would
    go out by sendfile - ends the read before that entry; a read starting at it fails, later entries serve."""
    store = LocalLedgerStore(tmp_path, fsync="none")  # verify_reads by default
    store.scratch = bytearray(100 << 10)  # two 40 KiB entries per chunk; the 150 KiB entry alone
    sizes = [40 << 10, 40 << 10, 150 << 10, 40 << 10, 40 << 10, 40 << 10]
    payloads = [payload(i, size) for i, size in enumerate(sizes)]
    lh = await store.create_ledger()
    for p in payloads:
        await lh.append(p)
    try:
        got = await lh.read_spans(0, 5, 1 << 30, 0, 512)
        assert got is not None and [e.rest is not None for e in got] == [True] * 6
        assert [e.head + e.rest.read() for e in got] == payloads
        assert await lh.read_spans(0, 5, VERIFIED_SPAN_MIN_BUDGET - 1, 0, 512) is None  # a small read: copy path

        with open(tmp_path / f"{lh.ledger_id}.log", "r+b") as f:  # entry 3, far past its 512-byte head
            at = sum(HEADER_SIZE + s for s in sizes[:3]) + HEADER_SIZE + 30_000
            f.seek(at)
            old = f.read(1)
            f.seek(at)
            f.write(bytes([old[0] ^ 0x01]))
        got = await lh.read_spans(0, 5, 1 << 30, 0, 512)
        assert got is not None and [e.head + e.rest.read() for e in got] == payloads[:3]
        with pytest.raises(LedgerDamagedError, match="checksum") as err:
            await lh.read_spans(3, 5, 1 << 30, 0, 512)
        assert (err.value.first_entry, err.value.last_entry) == (3, 3)
        got = await lh.read_spans(4, 5, 1 << 30, 0, 512)
        assert got is not None and [e.head + e.rest.read() for e in got] == payloads[4:]
    finally:
        await store.close()


async def test_unverified_spans_are_not_checked(tmp_path):
    """The other side of the rule: with verify_reads off, spans are handed out without reading the bodies, so
    the flipped byte goes out as stored (Kafka's behaviour, localStoreVerifyChecksums=false)."""
    store = LocalLedgerStore(tmp_path, fsync="none", verify_reads=False)
    payloads = [payload(i, 40 << 10) for i in range(3)]
    lh = await store.create_ledger()
    for p in payloads:
        await lh.append(p)
    try:
        with open(tmp_path / f"{lh.ledger_id}.log", "r+b") as f:
            f.seek(HEADER_SIZE + (40 << 10) + HEADER_SIZE + 30_000)
            f.write(b"!")
        got = await lh.read_spans(0, 2, 1 << 30, 0, 512)
        assert got is not None and len(got) == 3 and got[1].head + got[1].rest.read() != payloads[1]
        assert not store.damage
    finally:
        await store.close()
