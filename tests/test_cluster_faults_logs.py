"""What the logs say when ledgers fail (issue #24), against the real ZooKeeper and bookies of
tests/support/bookkeeper.py.

* A managed ledger whose BookKeeper ledger is fenced by another owner while appends are in flight: every
  append fails, and no "Future exception was never retrieved" is logged (the failed appends that an
  earlier failure had already answered used to leave their ledger futures unread).
* Failed produce appends: at most one ERROR line per partition and cause per 10 s, the next one counting
  those held back (kop/kafka/apis/produce.py AppendFailureLog).
* The log cleaner, when a pass cannot create a ledger: one WARNING line naming the partition and the
  cause, no traceback (it used to be "log-cleaner pass failed" with one).
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import logging
import time

from kop.storage.api import StorageError
from kop.storage.bookkeeper import BookKeeperLedgerStore
from tests.support.storage import run_uvloop


def test_appends_failed_by_fencing_leave_no_unretrieved_future(cluster, caplog):
    from kop.managed_ledger import ManagedLedgerFactory
    from kop.storage.zookeeper import ZooKeeperMetadataStore

    caplog.set_level(logging.ERROR, logger="asyncio")

    async def main() -> None:
        meta = await ZooKeeperMetadataStore.connect(f"zk:{cluster.zk_connect}/kop-logs-{time.time_ns()}")
        store = await BookKeeperLedgerStore.connect(cluster.metadata_service_uri)
        other = await BookKeeperLedgerStore.connect(cluster.metadata_service_uri)
        factory = ManagedLedgerFactory(store, meta)
        try:
            ml = await factory.open("public/default/persistent/fenced-partition-0")
            await ml.add_entry(b"first")
            ledger_id = ml.ledgers()[-1].ledger_id
            futs = [ml.add_entry_nowait(b"in flight %d" % i) for i in range(200)]
            await other.open_ledger(ledger_id, recover=True)  # another owner: fences the ledger
            futs += [ml.add_entry_nowait(b"after %d" % i) for i in range(20)]
            results = await asyncio.gather(*futs, return_exceptions=True)
            failed = [r for r in results if isinstance(r, BaseException)]
            assert failed and all(isinstance(r, StorageError) for r in failed)
            for _ in range(3):  # let every callback run, then drop the futures
                await asyncio.sleep(0.05)
            del futs, results, failed
            gc.collect()
            await asyncio.sleep(0)
        finally:
            with contextlib.suppress(StorageError):  # closing the fenced managed ledger
                await factory.close()
            await store.close()
            await other.close()
            await meta.close()

    run_uvloop(main())
    gc.collect()
    unread = [r.getMessage() for r in caplog.records if "never retrieved" in r.getMessage()]
    assert not unread, unread[:3]



def test_failed_appends_are_logged_once_per_partition_and_cause_per_interval(caplog):
    """kop/kafka/apis/produce.py AppendFailureLog: a storm of failures of one partition and cause is one
    line per interval, the next one counting those held back; another cause or partition gets its own."""
    from kop.kafka.apis.produce import AppendFailureLog
    from kop.managed_ledger.ledger import ManagedLedgerError
    from kop.storage.api import LedgerFencedError
    from kop.storage.bookkeeper import NotEnoughBookiesError

    def wrapped(inner: Exception) -> ManagedLedgerError:
        e = ManagedLedgerError("p-0: add failed")
        e.__cause__ = inner
        return e

    caplog.set_level(logging.ERROR, logger="kop.kafka.apis.produce")
    logs = AppendFailureLog(interval=10.0)
    for i in range(500):
        logs.failed("t-0", wrapped(LedgerFencedError("fenced")), now=100.0 + i * 0.01)  # 5 s of failures
    logs.failed("t-0", wrapped(NotEnoughBookiesError("2 of 3")), now=105.0)  # another cause
    logs.failed("t-1", wrapped(LedgerFencedError("fenced")), now=105.0)  # another partition
    lines = [r.getMessage() for r in caplog.records]
    assert len(lines) == 3, lines
    logs.failed("t-0", wrapped(LedgerFencedError("fenced")), now=111.0)  # the interval is over
    last = caplog.records[-1].getMessage()
    assert len(caplog.records) == 4 and "append to t-0 failed" in last and "499 more like it" in last, last


async def test_a_cleaner_pass_that_cannot_create_a_ledger_says_why_in_one_line(tmp_path, caplog):
    """LogCleaner.run (kop/topics/chores.py) over real embedded storage whose ledger directory stops
    taking new files (what a pass meets when no ledger can be created - bookies gone, a full disk): the
    pass ends with one WARNING line naming the partition and the cause, no traceback, nothing raised."""
    import os

    from kop.config import BrokerConfig
    from kop.managed_ledger import ManagedLedgerConfig
    from kop.offset import open_embedded_storage
    from kop.protocol.records import NewRecord, build_batch
    from kop.server.service import BrokerService

    cfg = BrokerConfig.from_strings({"managedLedgerMinLedgerRolloverTimeMinutes": "0"})
    st = await open_embedded_storage(tmp_path, fsync="none",
                                     managed_ledger_config=ManagedLedgerConfig(max_entries_per_ledger=4))
    svc = BrokerService(cfg, st)
    await svc.topics.load()
    directory = st.ledger_store.directory
    try:
        topic = await svc.topics.create(svc.topics.parse("cleaned"), 1, {"cleanup.policy": "compact"})
        plog = await svc.topics.partition_log(topic, 0)
        for i in range(20):
            await plog.append(build_batch([NewRecord(b"k%d" % (i % 3), b"v%d" % i, (), 1_000 + i)]), 0, 1_000 + i)
        while plog.ml.rolling_over:
            await asyncio.sleep(0.001)
        os.rename(directory, f"{directory}.away")  # new ledger files cannot be created any more
        open(directory, "w").close()
        caplog.set_level(logging.WARNING, logger="kop.topics.chores")
        assert await svc.cleaner.run(now_ms=1) == []
        lines = [r for r in caplog.records if r.name == "kop.topics.chores"]
        assert len(lines) == 1 and lines[0].exc_info is None, [r.getMessage() for r in lines]
        assert "log-cleaner pass skipped at persistent://public/default/cleaned-0" in lines[0].getMessage()
    finally:
        if os.path.isfile(directory):
            os.remove(directory)
            os.rename(f"{directory}.away", directory)
        await svc.topics.close()
        await svc.storage.close()
