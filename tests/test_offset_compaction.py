"""Log compaction of a partition log (kop/offset/compaction.py, ManagedPartitionLog.compact).

Real files, real record batches. The model: every record i of a test log has key K(i) and value
b"v<i>" (or None: a tombstone), so whatever a read returns can be checked record by record against its
offset. After a pass the log must hold exactly the latest record of each key (tombstones until their delete
horizon) at its ORIGINAL offset; the high watermark and the log start offset do not move; a read at any
offset returns the batch holding the next surviving record.
"""

from __future__ import annotations

import asyncio
import os
import random
import signal
import subprocess
import sys
import textwrap
import time

import pytest

from kop.managed_ledger import ManagedLedgerConfig
from kop.offset import CursorCache, OffsetOutOfRange, open_embedded_storage
from kop.offset.compaction import (
    COMPACTED_OFFSET_PROPERTY,
    DELETE_HORIZON_PROPERTY,
)
from kop.protocol.records import (
    NewRecord,
    build_batch,
    decode_records_absolute,
    stamp_base_offset,
)
from tests.support.storage import run, settled
from tests.support.storage import storage_at as shared_storage_at

NAME = "public/default/persistent/compacted-partition-0"
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def storage_at(path, **ml):
    """Embedded storage with 5-entry ledgers unless told otherwise."""
    return shared_storage_at(path, **{"max_entries_per_ledger": 5, **ml})


def value_of(i: int) -> bytes:
    return b"v%d" % i


async def append_records(log, specs, ts0=1_000, codec=0) -> int:
    """specs: [(key, is_tombstone)] as ONE batch; returns its base offset."""
    base = log.high_watermark
    records = [NewRecord(k, None if tomb else value_of(base + j), (), ts0 + base + j)
               for j, (k, tomb) in enumerate(specs)]
    b = build_batch(records, compression=codec)
    got = await log.append(b, len(records) - 1, ts0 + base + len(records) - 1)
    assert got == base
    return base


async def fill(log, n_records, keys, per_batch=3, codec=0, tombstone_every=0):
    """n_records over `keys` keys (key of offset i: k<i % keys>), per_batch records per batch.
    Returns the model {offset: (key, value)}."""
    model = {}
    i = log.high_watermark
    end = i + n_records
    while i < end:
        specs = []
        for j in range(i, min(end, i + per_batch)):
            tomb = bool(tombstone_every) and j % tombstone_every == tombstone_every - 1
            specs.append((b"k%d" % (j % keys), tomb))
        base = await append_records(log, specs, codec=codec)
        for j, (k, tomb) in enumerate(specs):
            model[base + j] = (k, None if tomb else value_of(base + j))
        i += len(specs)
    await settled(log)
    return model


def survivors(model, horizon_passed=False):
    """{offset: (key, value)} of the latest record per key (tombstones kept unless horizon_passed)."""
    latest = {}
    for off in sorted(model):
        latest[model[off][0]] = off
    return {off: model[off] for off in sorted(latest.values())
            if not (horizon_passed and model[off][1] is None)}


async def read_all(log, start=None, cache=None, max_bytes=1 << 20, interleave=False):
    """Every record from the log start, as {offset: (key, value)}, checking batch ranges on the way.
    interleave: let other tasks run between reads (local reads never suspend)."""
    out = {}
    off = log.log_start_offset if start is None else start
    last_end = -1
    while off < log.high_watermark:
        hint = cache.get(log.name, off) if cache is not None else None
        res = await log.read(off, max_bytes, hint=hint)
        if cache is not None:
            cache.remember(log.name, res)
        if not res.batches:
            break
        for fb in res.batches:
            assert fb.base_offset > last_end, "batches overlap or go back"
            assert fb.last_offset >= off
            last_end = fb.last_offset
            for r in records_of(fb):
                assert fb.base_offset <= r.offset <= fb.last_offset
                out[r.offset] = (r.key, r.value)
        assert res.next_offset == res.batches[-1].last_offset + 1
        off = res.next_offset
        if interleave:
            await asyncio.sleep(0)
    return out


def records_of(fb):
    b = bytearray(fb.batch)
    stamp_base_offset(b, fb.base_offset)
    return decode_records_absolute(bytes(b))


def check_values(records):
    for off, (_key, value) in records.items():
        assert value is None or value == value_of(off), f"offset {off} holds {value!r}"


# ---- semantics ----------------------------------------------------------------------------------------------


@pytest.mark.parametrize("codec", [0, 1, 4])
async def test_latest_value_per_key_with_original_offsets(tmp_path, codec):
    async with storage_at(tmp_path) as st:
        log = await st.open_log(NAME)
        model = await fill(log, 300, keys=17, per_batch=4, codec=codec)
        hwm, lso = log.high_watermark, log.log_start_offset
        ledgers_before = sum(1 for li in log.ml.ledgers() if li.entries)
        result = await log.compact(60_000, roll_current=True)
        assert result.compacted and result.records_before == 300 and result.records_after == 17
        assert result.keys == 17 and result.end_offset == 299
        assert result.ledgers_before == ledgers_before  # every closed ledger (the current one was rolled)
        assert result.bytes_after < result.bytes_before / 5
        assert log.high_watermark == hwm and log.log_start_offset == lso == 0
        got = await read_all(log)
        assert got == survivors(model)
        check_values(got)
        # small ledgers were merged: 17 records in batches of <= 4 fit in one or two ledgers of 5 entries
        assert len(log.ml.ledgers()) <= 3
        # and the replaced ledgers are gone from the disk
        stored = set(await st.ledger_store.list_ledgers())
        assert stored == {li.ledger_id for li in log.ml.ledgers()}


async def test_reads_at_every_offset_return_the_batch_of_the_next_surviving_record(tmp_path):
    async with storage_at(tmp_path) as st:
        log = await st.open_log(NAME)
        # keys 0..9 written 10 times, then keys 0..4 once more: offsets 100..104 survive for them
        model = await fill(log, 100, keys=10, per_batch=3)
        for k in range(5):
            base = await append_records(log, [(b"k%d" % k, False)])
            model[base] = (b"k%d" % k, value_of(base))
        await settled(log)
        cache = CursorCache()
        await read_all(log, cache=cache)  # hints into the ledgers about to be replaced
        await log.compact(60_000, roll_current=True)
        alive = survivors(model)
        entries = []  # (base, last) of the stored batches, from a full scan
        off = 0
        while off < log.high_watermark:
            res = await log.read(off, 1)
            if not res.batches:
                break
            entries += [(fb.base_offset, fb.last_offset) for fb in res.batches]
            off = res.next_offset
        for o in range(0, log.high_watermark):
            res = await log.read(o, 1, hint=cache.get(log.name, o))
            nxt = min((a for a in alive if a >= o), default=None)
            if nxt is None:  # a gap at the end: nothing to return
                assert res.batches == [] and res.next_offset == o
                continue
            fb = res.batches[0]
            assert (fb.base_offset, fb.last_offset) == next(e for e in entries if e[1] >= o)
            recs = [r.offset for r in records_of(fb) if r.offset >= o]
            assert recs and recs[0] == nxt, (o, recs, nxt)
        # stale hints of replaced ledgers are harmless
        for o in range(0, log.high_watermark, 7):
            for hint in list(cache._entries.values())[:5]:
                res = await log.read(o, 1 << 20, hint=hint)
                assert res.batches and res.batches[0].last_offset >= o


async def test_tombstones_are_kept_for_delete_retention_then_dropped(tmp_path):
    async with storage_at(tmp_path) as st:
        log = await st.open_log(NAME)
        model = await fill(log, 40, keys=4, per_batch=2)
        t_base = await append_records(log, [(b"k1", True), (b"k2", True)])  # delete k1 and k2
        model[t_base] = (b"k1", None)
        model[t_base + 1] = (b"k2", None)
        await append_records(log, [(b"k9", False)])
        model[t_base + 2] = (b"k9", value_of(t_base + 2))
        t0 = 10_000_000
        r1 = await log.compact(1_000, roll_current=True, now_ms=t0)
        assert r1.tombstones_kept == 2 and r1.tombstones_dropped == 0
        assert await read_all(log) == survivors(model)
        assert log.ml.properties[DELETE_HORIZON_PROPERTY] == str(t0 + 1_000)
        state = await log.cleaning_state()
        assert state.delete_horizon == t0 + 1_000 and state.dirty_bytes == 0
        # the horizon counts from the first pass that kept them, not from later passes
        r2 = await log.compact(1_000, roll_current=True, now_ms=t0 + 999)
        assert r2.tombstones_kept == 2 and r2.tombstones_dropped == 0
        assert log.ml.properties[DELETE_HORIZON_PROPERTY] == str(t0 + 1_000)
        r3 = await log.compact(1_000, roll_current=True, now_ms=t0 + 1_000)
        assert r3.tombstones_dropped == 2 and r3.tombstones_kept == 0
        got = await read_all(log)
        assert got == survivors(model, horizon_passed=True)
        assert all(v is not None for _, v in got.values())
        assert log.ml.properties[DELETE_HORIZON_PROPERTY] == ""


async def test_everything_removed_keeps_high_watermark_and_log_start_across_restart(tmp_path):
    async with storage_at(tmp_path) as st:
        log = await st.open_log(NAME)
        await fill(log, 12, keys=3, per_batch=3)
        await append_records(log, [(b"k0", True), (b"k1", True), (b"k2", True)])
        await log.compact(0, roll_current=True, now_ms=1)  # keeps the tombstones, horizon 1
        await log.compact(0, roll_current=True, now_ms=2)  # drops them: nothing left
        assert log.ml.number_of_entries == 0
        assert log.high_watermark == 15 and log.log_start_offset == 0
        for o in (0, 7, 14):
            res = await log.read(o, 1 << 20)
            assert res.batches == [] and res.next_offset == o
        assert await log.offset_for_timestamp(0) is None
        assert await log.max_timestamp() is None
    async with storage_at(tmp_path) as st:
        log = await st.open_log(NAME)
        assert log.high_watermark == 15 and log.log_start_offset == 0
        with pytest.raises(OffsetOutOfRange):
            await log.read(16, 100)
        base = await append_records(log, [(b"k5", False)])
        assert base == 15
        res = await log.read(3, 1 << 20)  # the gap before it reads as that batch
        assert [(fb.base_offset, fb.last_offset) for fb in res.batches] == [(15, 15)]


async def test_restart_after_compaction_and_compact_again(tmp_path):
    async with storage_at(tmp_path) as st:
        log = await st.open_log(NAME)
        model = await fill(log, 120, keys=9, per_batch=5)
        await log.compact(60_000, roll_current=True)
        model.update(await fill(log, 30, keys=9, per_batch=2))  # new values after the pass
    async with storage_at(tmp_path) as st:
        log = await st.open_log(NAME)
        assert log.high_watermark == 150 and log.log_start_offset == 0
        got = await read_all(log)
        # compacted part + everything written after the pass
        expected = {o: v for o, v in survivors({o: model[o] for o in range(120)}).items()}
        expected.update({o: model[o] for o in range(120, 150)})
        assert got == expected
        assert log.ml.properties[COMPACTED_OFFSET_PROPERTY] == "119"
        state = await log.cleaning_state()
        assert state.compacted_offset == 119
        r = await log.compact(60_000, roll_current=True)
        assert r.compacted and await read_all(log) == survivors(model)
        assert int(log.ml.properties[COMPACTED_OFFSET_PROPERTY]) == 149
        assert (await log.cleaning_state()).dirty_ratio == 0.0
    async with storage_at(tmp_path) as st:
        log = await st.open_log(NAME)
        assert await read_all(log) == survivors(model)
        assert log.interceptor.index == 149


async def test_time_search_log_start_and_delete_records(tmp_path):
    async with storage_at(tmp_path) as st:
        log = await st.open_log(NAME)
        model = await fill(log, 60, keys=6, per_batch=3)  # timestamps 1000 + offset
        await log.compact(60_000, roll_current=True)
        alive = sorted(survivors(model))  # 54..59
        assert alive == list(range(54, 60))
        assert log.log_start_offset == 0
        # the first record with timestamp >= 1000 + 10 is the first survivor
        assert await log.offset_for_timestamp(1_010) == (54, 1_054)
        assert await log.offset_for_timestamp(1_057) == (57, 1_057)
        assert await log.offset_for_timestamp(5_000) is None
        assert await log.max_timestamp() == (59, 1_059)
        # DeleteRecords below the survivors moves the log start; compaction drops what is below it
        assert await log.delete_records(56) == 56
        await log.compact(60_000, roll_current=True)
        assert sorted(await read_all(log)) == [56, 57, 58, 59]
        assert log.log_start_offset == 56
        with pytest.raises(OffsetOutOfRange):
            await log.read(55, 100)


async def test_nothing_to_compact_and_current_ledger_untouched(tmp_path):
    async with storage_at(tmp_path, max_entries_per_ledger=1000) as st:
        log = await st.open_log(NAME)
        r = await log.compact(1)
        assert not r.compacted and r.reason
        model = await fill(log, 30, keys=3)
        r = await log.compact(1)  # no closed ledger: the current one is never compacted
        assert not r.compacted
        assert await read_all(log) == model
        # a key superseded in the current ledger is removed from the closed ones
        await log.ml.rollover()
        await append_records(log, [(b"k0", False)])
        r = await log.compact(1)
        assert r.compacted
        got = await read_all(log)
        assert [o for o, (k, _) in got.items() if k == b"k0"] == [30]
        assert sorted(got) == [28, 29, 30]


async def test_cleaning_state_tracks_dirty_bytes(tmp_path):
    async with storage_at(tmp_path) as st:
        log = await st.open_log(NAME)
        await fill(log, 60, keys=5, per_batch=3)
        s = await log.cleaning_state()
        assert s.compacted_offset == -1 and s.dirty_ratio == 1.0 and s.closed_bytes > 0
        assert s.current_entries == log.ml.ledgers()[-1].entries
        await log.compact(1_000, roll_current=True)
        s = await log.cleaning_state()
        assert s.dirty_bytes == 0 and s.dirty_ratio == 0.0 and s.current_first_timestamp is None
        await fill(log, 33, keys=5, per_batch=3)  # two closed ledgers and one entry in the current one
        s = await log.cleaning_state()
        assert 0 < s.dirty_ratio < 1 and s.current_first_timestamp is not None


# ---- crashes --------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("step", ["rewrite", "finish", "swap"])
async def test_failure_in_the_middle_leaves_the_old_log(tmp_path, step):
    async with storage_at(tmp_path) as st:
        log = await st.open_log(NAME)
        model = await fill(log, 100, keys=7, per_batch=2)
        before = await read_all(log)
        ledgers = log.ml.ledgers()
        stored = set(await st.ledger_store.list_ledgers())

        class Boom(Exception):
            pass

        real_rewriter = log.ml.rewriter

        def rewriter(*a, **kw):
            rw = real_rewriter(*a, **kw)
            if step == "rewrite":
                real_add = rw.add
                calls = [0]

                async def add(data):
                    calls[0] += 1
                    if calls[0] == 3:
                        raise Boom
                    await real_add(data)

                rw.add = add
            elif step == "finish":
                async def finish():
                    raise Boom

                rw.finish = finish
            return rw

        log.ml.rewriter = rewriter
        if step == "swap":
            real_put = st.metadata_store.put

            async def put(path, value, expected_version=None):
                if path.endswith(NAME) and COMPACTED_OFFSET_PROPERTY.encode() in value:
                    raise Boom
                return await real_put(path, value, expected_version)

            st.metadata_store.put = put
        with pytest.raises(Boom):
            await log.compact(1_000)
        assert log.ml.ledgers() == ledgers
        assert await read_all(log) == before == model
        assert set(await st.ledger_store.list_ledgers()) == stored  # what the pass wrote is deleted
        del log.ml.rewriter
        if step == "swap":
            st.metadata_store.put = real_put
        assert (await log.compact(1_000, roll_current=True)).compacted  # and the next pass works
        assert await read_all(log) == survivors(model)


def test_crash_between_the_steps_leaves_old_or_new_list_and_garbage_is_collected(tmp_path):
    async def crash(where):
        st = await open_embedded_storage(tmp_path, fsync="none",
                                         managed_ledger_config=ManagedLedgerConfig(max_entries_per_ledger=5))
        log = await st.open_log(NAME)
        if log.high_watermark == 0:
            await fill(log, 100, keys=7, per_batch=2)
        ml = log.ml
        real_replace = ml.replace_ledgers
        real_delete = st.ledger_store.delete_ledger

        class Killed(BaseException):
            pass

        async def replace(old, new, props=None):
            if where == "before-swap":
                raise Killed
            return await real_replace(old, new, props)

        async def delete(ledger_id):
            if where == "after-swap":
                raise Killed
            return await real_delete(ledger_id)

        ml.replace_ledgers = replace
        st.ledger_store.delete_ledger = delete
        try:
            await log.compact(1_000, roll_current=True)
        except Killed:
            pass
        st.abandon()

    async def reopen():
        async with storage_at(tmp_path) as st:  # collects garbage at open
            log = await st.open_log(NAME)
            stored = set(await st.ledger_store.list_ledgers())
            referenced = {li.ledger_id for li in log.ml.ledgers()}
            return await read_all(log), stored - referenced, log.high_watermark

    run(crash("before-swap"))
    got, unreferenced, hwm = run(reopen())
    assert len(got) == 100 and not unreferenced and hwm == 100  # the old list, whole
    check_values(got)
    run(crash("after-swap"))
    got, unreferenced, hwm = run(reopen())
    assert sorted(got) == list(range(93, 100)) and not unreferenced and hwm == 100  # the new list
    check_values(got)


_CHILD = textwrap.dedent("""
    import asyncio, sys
    sys.path.insert(0, {root!r})
    from kop.managed_ledger import ManagedLedgerConfig
    from kop.offset import open_embedded_storage
    from kop.protocol.records import NewRecord, build_batch

    async def main(path):
        st = await open_embedded_storage(path, fsync="none",
                                         managed_ledger_config=ManagedLedgerConfig(max_entries_per_ledger=4))
        log = await st.open_log({name!r})
        n = 0
        while True:
            base = log.high_watermark
            recs = [NewRecord(b"k%d" % ((base + j) % 23), b"v%d" % (base + j), (), 1000 + base + j) for j in range(3)]
            got = await log.append(build_batch(recs), 2, 0)
            assert got == base
            print("acked", base + 2, flush=True)
            n += 1
            if n % 7 == 0:
                await log.compact(0, roll_current=n % 14 == 0)
                print("compacted", flush=True)

    asyncio.run(main(sys.argv[1]))
""")


def test_sigkill_during_compaction_loop_loses_no_latest_record(tmp_path):
    """A child appends (3 records per batch, keys k0..k22, value v<offset>) and compacts every 7 batches;
    we SIGKILL it at random moments, reopen, and check: nothing acknowledged is lost (the high watermark
    covers it and the latest record of every key is there), no record is corrupt or misplaced, no ledger
    file is left unreferenced, and the next child goes on from the same offsets."""
    script = tmp_path / "child.py"
    script.write_text(_CHILD.format(root=ROOT, name=NAME))
    data = tmp_path / "data"
    rnd = random.Random(7)
    acked = -1
    compactions = 0
    for _round in range(6):
        out_path = tmp_path / f"child-{_round}.out"
        with open(out_path, "w") as out, open(tmp_path / f"child-{_round}.err", "w") as err:
            proc = subprocess.Popen([sys.executable, str(script), str(data)], stdout=out, stderr=err)
            # kill at a random moment once the child has compacted at least once in this round (liveness
            # deadline only: a loaded machine just takes longer)
            deadline = time.monotonic() + 120
            while "compacted" not in out_path.read_text() and proc.poll() is None:
                assert time.monotonic() < deadline, "the child never compacted"
                time.sleep(0.02)
            time.sleep(rnd.uniform(0.0, 0.3))
            proc.send_signal(signal.SIGKILL)
            proc.wait()
        assert proc.returncode == -signal.SIGKILL, (tmp_path / f"child-{_round}.err").read_text()
        # only whole lines: the kill may cut the last one short ("acked " without its offset)
        lines = out_path.read_text().split("\n")[:-1]
        for line in lines:
            if line.startswith("acked "):
                acked = max(acked, int(line.split()[1]))
            elif line == "compacted":
                compactions += 1

        async def check(acked=acked):
            async with storage_at(data) as st:
                log = await st.open_log(NAME)
                assert log.high_watermark >= acked + 1
                got = await read_all(log)
                check_values(got)
                assert all(k == b"k%d" % (o % 23) for o, (k, _) in got.items())
                # the latest acknowledged record of every key is still there
                hwm = log.high_watermark
                for k in range(23):
                    last = max((o for o in range(min(hwm, acked + 1)) if o % 23 == k), default=None)
                    if last is not None:
                        assert last in got, f"latest record of k{k} (offset {last}) lost"
                stored = set(await st.ledger_store.list_ledgers())
                assert stored == {li.ledger_id for li in log.ml.ledgers()}

        run(check())
    assert compactions >= 6 and acked > 100


# ---- concurrency ----------------------------------------------------------------------------------------------


async def test_appends_and_reads_during_compaction(tmp_path):
    async with storage_at(tmp_path, max_entries_per_ledger=20) as st:
        log = await st.open_log(NAME)
        model = await fill(log, 3_000, keys=40, per_batch=3)
        layout = log.ml.layout_version
        done = asyncio.Event()
        reads = 0
        reads_across_swap = 0

        async def appender():
            while not done.is_set():
                model.update(await fill(log, 3, keys=40, per_batch=3))
                await asyncio.sleep(0)

        async def reader():
            nonlocal reads, reads_across_swap
            cache = CursorCache()
            while not done.is_set():
                v = log.ml.layout_version
                hwm0 = log.high_watermark
                got = await read_all(log, cache=cache, max_bytes=700, interleave=True)
                check_values(got)
                assert all(k == b"k%d" % (o % 40) for o, (k, _) in got.items())
                # the latest record of each key when the read started - or a later one - is in it
                for k in range(40):
                    latest = max(o for o in range(hwm0) if o % 40 == k)
                    assert max(o for o, (kk, _) in got.items() if kk == b"k%d" % k) >= latest
                reads += 1
                reads_across_swap += v != log.ml.layout_version
                await asyncio.sleep(0)  # local reads never suspend: let the others run

        async def lister():
            while not done.is_set():
                found = await log.offset_for_timestamp(1_000 + 1_500)
                assert found is not None and found[0] >= 1_500
                await log.max_timestamp()
                await asyncio.sleep(0)

        tasks = [asyncio.create_task(t()) for t in (appender, reader, reader, lister)]
        result = await log.compact(60_000)
        await asyncio.sleep(0.05)
        done.set()
        await asyncio.gather(*tasks)
        assert result.compacted and log.ml.layout_version > layout
        assert reads >= 2 and reads_across_swap >= 1
        # after the pass: the compacted range holds survivors only, everything after it is whole
        end = result.end_offset
        got = await read_all(log)
        expected = {o: v for o, v in model.items() if o > end}
        latest_all = survivors(model)
        expected.update({o: v for o, v in latest_all.items() if o <= end})
        # records <= end that a later (concurrent) append superseded may be gone or not: they were the
        # latest when the key map was built
        maybe = {o for o in model if o <= end} - set(latest_all)
        assert set(expected) <= set(got) <= set(expected) | maybe
        check_values(got)
