"""min.compaction.lag.ms in the broker's log cleaner (LogCleaner.run, kop/topics/chores.py): no record younger than the
lag is compacted; a pass waits until the newest record it would clean is old enough (in-process service over
real embedded storage, explicit clock, as tests/test_broker_cleaner.py)."""

from __future__ import annotations

import time

from kop.protocol.records import NewRecord, build_batch
from tests.test_broker_cleaner import service, topic_with


async def test_min_compaction_lag_holds_passes_back(tmp_path):
    svc = await service(tmp_path)
    try:
        _, lagged = await topic_with(svc, "lagged", {"cleanup.policy": "compact", "min.compaction.lag.ms": "3600000"})
        _, plain = await topic_with(svc, "plain", {"cleanup.policy": "compact"})
        now = int(time.time() * 1000)
        ran = await svc.cleaner.run(now_ms=now)
        assert [r.name for r in ran] == [plain.name]  # same dirt, but the lagged topic's records are too young
        assert lagged.ml.number_of_entries == 20
        ran = await svc.cleaner.run(now_ms=now + 3_600_000 + 60_000)
        assert [r.name for r in ran] == [lagged.name] and lagged.ml.number_of_entries < 20
        # max.compaction.lag.ms due but the current ledger too young: only the closed ledgers are waited for
        _, both = await topic_with(svc, "both", {"cleanup.policy": "compact", "min.compaction.lag.ms": "3600000",
                                                 "max.compaction.lag.ms": "3600000"}, batches=3)
        await both.append(build_batch([NewRecord(b"k9", b"x", (), 1)]), 0, 1)
        assert await svc.cleaner.run(now_ms=int(time.time() * 1000) + 1000) == []
        ran = await svc.cleaner.run(now_ms=int(time.time() * 1000) + 3_600_000 + 60_000)
        assert [r.name for r in ran] == [both.name] and (await both.cleaning_state()).current_entries == 0
    finally:
        await svc.topics.close()
        await svc.storage.close()
