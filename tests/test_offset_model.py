"""A randomized run of the PartitionLog against a plain model: concurrent appends, reads at random offsets
(with and without cursor hints), DeleteRecords, retention, restarts and crashes, with tiny ledgers so that
rollovers happen all the time. Seeded: a failure reproduces."""

from __future__ import annotations

import asyncio
import bisect
import random

import pytest

from kop.managed_ledger import ManagedLedgerConfig
from kop.offset import CursorCache, OffsetOutOfRange, open_embedded_storage
from kop.protocol.records import NewRecord, build_batch

NAME = "public/default/persistent/model-partition-0"


def make_batch(rng: random.Random, ts: int) -> tuple[bytes, int]:
    n = rng.randint(1, 6)
    records = [NewRecord(None, rng.randbytes(rng.randint(0, 300)), (), ts + i) for i in range(n)]
    return build_batch(records, compression=rng.choice([0, 0, 1, 3])), n


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_random_operations_match_the_model(tmp_path, seed):
    rng = random.Random(seed)
    config = ManagedLedgerConfig(max_entries_per_ledger=rng.randint(2, 7))
    model: list[tuple[int, int, bytes]] = []  # (base, last, batch) of every acknowledged batch
    state = {"log_start": 0, "ts": 1_000}

    def hwm() -> int:
        return model[-1][1] + 1 if model else 0

    async def session(crash: bool) -> None:
        st = await open_embedded_storage(tmp_path, fsync=rng.choice(["none", "always"]),
                                         managed_ledger_config=config)
        log = await st.open_log(NAME)
        # everything acknowledged survived; the recovered end may include batches that were in flight
        assert log.high_watermark >= hwm()
        if log.high_watermark > hwm():
            extra = (await log.read(hwm(), 1 << 30)).batches
            model.extend((b.base_offset, b.last_offset, bytes(b.batch)) for b in extra)
        assert log.high_watermark == hwm()
        assert log.log_start_offset >= state["log_start"]
        state["log_start"] = log.log_start_offset
        cache = CursorCache()
        for _ in range(60):
            op = rng.random()
            if op < 0.45:
                items = []
                for _ in range(rng.randint(1, 8)):
                    b, n = make_batch(rng, state["ts"])
                    state["ts"] += n
                    items.append((b, n))
                bases = await asyncio.gather(*(log.append(b, n - 1, 0) for b, n in items))
                for base, (b, n) in zip(bases, items, strict=True):
                    assert base == hwm()
                    # the stored batch carries its log base offset (the sendfile fetch path sends it as is)
                    model.append((base, base + n - 1, base.to_bytes(8, "big") + bytes(b)[8:]))
            elif op < 0.8 and model:
                offset = rng.randint(max(0, state["log_start"] - 2), hwm() + 1)
                if offset < state["log_start"] or offset > hwm():
                    with pytest.raises(OffsetOutOfRange):
                        await log.read(offset, 1000)
                    continue
                result = await log.read(offset, rng.choice([1, 500, 5000]), hint=cache.get(NAME, offset))
                cache.remember(NAME, result)
                if offset == hwm():
                    assert result.batches == []
                    continue
                i = bisect.bisect_right([m[0] for m in model], offset) - 1
                for got, want in zip(result.batches, model[i:], strict=False):
                    assert (got.base_offset, got.last_offset, bytes(got.batch)) == want
                assert result.next_offset == result.batches[-1].last_offset + 1
            elif op < 0.87 and model:
                target = rng.randint(state["log_start"], hwm())
                state["log_start"] = max(state["log_start"], await log.delete_records(target))
                assert log.log_start_offset == state["log_start"]
            elif op < 0.92:
                await log.apply_retention(-1, rng.randint(0, 20_000))
                assert log.log_start_offset >= state["log_start"]
                state["log_start"] = log.log_start_offset
            else:
                found = await log.offset_for_timestamp(rng.randint(900, state["ts"] + 10))
                if found is not None:
                    assert state["log_start"] <= found[0] < hwm()
        if crash:
            st.abandon()
            await st.metadata_store.close()
        else:
            await st.close()

    async def main() -> None:
        for _ in range(6):
            await session(crash=rng.random() < 0.5)

    asyncio.run(main())
