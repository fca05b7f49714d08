"""The storage service (kop/offset/storage.py), the cursor cache and the inspect tool."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys

import pytest

from kop.managed_ledger import ManagedLedgerConfig
from kop.offset import CursorCache, Position, ReadResult, open_embedded_storage
from kop.offset.api import FetchedBatch
from kop.offset.inspect import inspect_managed_ledger, list_managed_ledgers
from kop.protocol.records import NewRecord, build_batch
from kop.storage.api import StorageError

A = "public/default/persistent/a-partition-0"
B = "public/default/persistent/b-partition-0"
C = "other/ns/persistent/c-partition-3"


def batch(n: int = 1) -> bytes:
    return build_batch([NewRecord(b"k", b"v%d" % i, (), 1000 + i) for i in range(n)])


async def append(log, n: int = 1) -> int:
    return await log.append(batch(n), n - 1, 1000 + n - 1)


@pytest.mark.parametrize("fsync", ["always", "interval", "none"])
async def test_open_append_close_reopen(tmp_path, fsync):
    st = await open_embedded_storage(tmp_path, fsync=fsync, fsync_interval_ms=5)
    log = await st.open_log(A)
    assert await st.open_log(A) is log and st.get_log(A) is log
    for _ in range(10):
        await append(log, 3)
    await st.close()
    assert {"ledgers", "metadata.db"} <= {p.name for p in tmp_path.iterdir()}
    st = await open_embedded_storage(tmp_path, fsync=fsync)
    log = await st.open_log(A)
    assert log.high_watermark == 30
    await st.close()


async def test_concurrent_opens_share_one_log(tmp_path):
    st = await open_embedded_storage(tmp_path, fsync="none")
    logs = await asyncio.gather(*(st.open_log(A) for _ in range(5)))
    assert all(x is logs[0] for x in logs)
    await st.close()


async def test_list_and_delete_logs(tmp_path):
    st = await open_embedded_storage(tmp_path, fsync="none")
    for name in (A, B, C):
        await append(await st.open_log(name))
    assert await st.list_logs() == sorted([A, B, C])
    await st.get_log(B).close()
    assert st.get_log(B) is None
    assert await st.delete_log(A) is True  # open
    assert await st.delete_log(B) is True  # closed
    assert await st.delete_log(B) is False  # gone
    assert await st.list_logs() == [C]
    assert len(await st.ledger_store.list_ledgers()) == 1  # only C's ledger remains
    log = await st.open_log(A)  # a new log under the old name starts from scratch
    assert log.high_watermark == 0
    await st.close()


async def test_the_metadata_store_is_shared_with_the_broker(tmp_path):
    st = await open_embedded_storage(tmp_path, fsync="none")
    await st.metadata_store.put("/kop/topics/t", b"{}")
    await st.close()
    st = await open_embedded_storage(tmp_path, fsync="none")
    assert (await st.metadata_store.get("/kop/topics/t"))[0] == b"{}"
    await st.close()


async def test_unreferenced_ledgers_are_collected_at_open(tmp_path):
    st = await open_embedded_storage(tmp_path, fsync="none")
    await append(await st.open_log(A))
    orphan = await st.ledger_store.create_ledger()  # as if a crash hit between create and record
    await orphan.append(b"x")
    await st.close()
    st = await open_embedded_storage(tmp_path, fsync="none")
    assert orphan.ledger_id not in await st.ledger_store.list_ledgers()
    assert (await st.open_log(A)).high_watermark == 1
    await st.close()


async def test_one_process_per_data_dir(tmp_path):
    st = await open_embedded_storage(tmp_path, fsync="none")
    with pytest.raises(StorageError):
        await open_embedded_storage(tmp_path, fsync="none")
    await st.close()


async def test_managed_ledger_config_applies(tmp_path):
    st = await open_embedded_storage(tmp_path, fsync="none",
                                     managed_ledger_config=ManagedLedgerConfig(max_entries_per_ledger=2))
    log = await st.open_log(A)
    for _ in range(5):
        await append(log)
    assert log.rollovers == 2
    other = await st.open_log(B, ManagedLedgerConfig(max_entries_per_ledger=100))
    for _ in range(5):
        await append(other)
    assert other.rollovers == 0
    await st.close()


# ---- cursor cache ----------------------------------------------------------------------------------------


def test_cursor_cache_is_a_bounded_lru_keyed_by_log_and_offset():
    cache = CursorCache(capacity=2)
    cache.put("a", 10, Position(1, 2))
    cache.put("b", 10, Position(3, 4))
    assert cache.get("a", 10) == Position(1, 2)  # touches "a"
    cache.put("c", 5, Position(5, 6))  # evicts "b"
    assert cache.get("b", 10) is None and len(cache) == 2
    cache.remember("a", ReadResult([FetchedBatch(10, 12, memoryview(b""), Position(1, 2))], 13, Position(1, 3)))
    assert cache.get("a", 13) == Position(1, 3)
    cache.remember("a", ReadResult([], 13, None))  # nothing read: nothing learned
    cache.invalidate("a")
    assert cache.get("a", 13) is None and cache.get("c", 5) == Position(5, 6)
    assert (cache.hits, cache.misses) == (3, 2)


async def test_sequential_fetches_with_the_cursor_cache_never_search(tmp_path):
    st = await open_embedded_storage(tmp_path, fsync="none",
                                     managed_ledger_config=ManagedLedgerConfig(max_entries_per_ledger=5))
    log = await st.open_log(A)
    for _ in range(40):
        await append(log, 2)
    cache = CursorCache()
    searches = 0
    original = log.index.find_position  # the offset index's search (kop/offset/offset_index.py)

    async def counting(offset):
        nonlocal searches
        searches += 1
        return await original(offset)

    log.index.find_position = counting
    offset = 0
    while offset < log.high_watermark:
        result = await log.read(offset, 100, hint=cache.get(A, offset))
        cache.remember(A, result)
        offset = result.next_offset
    assert searches == 1  # only the first fetch
    await st.close()


# ---- inspect ---------------------------------------------------------------------------------------------


async def test_inspect_while_the_broker_runs_and_offline(tmp_path):
    st = await open_embedded_storage(tmp_path, fsync="always",
                                     managed_ledger_config=ManagedLedgerConfig(max_entries_per_ledger=3))
    log = await st.open_log(A)
    await append(await st.open_log(C))
    for _ in range(7):
        await append(log, 2)
    while log.ml.rolling_over:
        await asyncio.sleep(0.001)
    assert list_managed_ledgers(tmp_path) == sorted([A, C])
    view = inspect_managed_ledger(tmp_path, A)  # online: sqlite read-only, current ledger scanned
    assert [lv.entries for lv in view.ledgers] == [3, 3, 1]
    assert view.ledgers[-1].current and not view.ledgers[-1].sealed
    assert all(lv.sealed and lv.on_disk for lv in view.ledgers[:-1])
    assert view.current_ledger_id == log.ml.current_ledger_id
    assert view.index == 11  # as of the last info write (the second rollover)
    assert inspect_managed_ledger(tmp_path, "no/such/persistent/x") is None
    await log.delete_records(4)
    await st.close()
    view = inspect_managed_ledger(tmp_path, A)  # offline
    assert view.index == 13 and view.delete_records_offset == 4 and view.current_ledger_id is None
    assert view.entries == 7
    out = subprocess.run([sys.executable, "-m", "kop.offset.inspect", str(tmp_path), A],
                         capture_output=True, text=True, check=True).stdout
    assert json.loads(out)["index"] == 13
