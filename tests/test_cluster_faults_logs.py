"""What the logs say when ledgers fail (issue #24), against the real ZooKeeper and bookies of
tests/support/bookkeeper.py.

* A managed ledger whose BookKeeper ledger is fenced by another owner while appends are in flight: every
  append fails, and no "Future exception was never retrieved" is logged (the failed appends that an
  earlier failure had already answered used to leave their ledger futures unread).
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

