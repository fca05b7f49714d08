"""LogStorage: the partition logs of the broker by managed-ledger name, over one ledger store and one
metadata store (the interfaces of kop/storage/, which is all the word "storage" names below this module).

    storage = await open_embedded_storage(data_dir, fsync="always")
    log = await storage.open_log("public/default/persistent/t-partition-0")
    ...
    await storage.close()

On-disk layout of the embedded backend::

    <data_dir>/metadata.db       sqlite (WAL): /managed-ledgers/<name> infos, and the broker's own nodes
    <data_dir>/ledgers/          one <id>.log (+ <id>.idx once sealed) per ledger, LOCK, ledger-ids
"""

from __future__ import annotations

import contextlib
import logging
import os

from kop.aio import SingleFlight
from kop.managed_ledger import ManagedLedgerConfig, ManagedLedgerFactory
from kop.offset.partition_log import ManagedPartitionLog
from kop.storage.api import LedgerStore, MetadataStore, NoSuchLedgerError
from kop.storage.local.ledgers import FSYNC_POLICIES, LocalLedgerStore
from kop.storage.local.metadata import SqliteMetadataStore

log = logging.getLogger(__name__)

LEDGERS_DIR = "ledgers"
METADATA_FILE = "metadata.db"


class LogStorage:
    """Opens, lists and deletes PartitionLogs; owns (and closes) the stores it was given."""

    def __init__(self, ledger_store: LedgerStore, metadata_store: MetadataStore,
                 managed_ledger_config: ManagedLedgerConfig | None = None) -> None:
        self.ledger_store = ledger_store
        self.metadata_store = metadata_store
        self.managed_ledger_config = managed_ledger_config or ManagedLedgerConfig()
        self.factory = ManagedLedgerFactory(ledger_store, metadata_store, self.managed_ledger_config)
        self._logs: dict[str, ManagedPartitionLog] = {}
        self._opening: SingleFlight[str, ManagedPartitionLog] = SingleFlight()
        self._closed = False

    @property
    def open_logs(self) -> dict[str, ManagedPartitionLog]:
        return dict(self._logs)

    def get_log(self, name: str) -> ManagedPartitionLog | None:
        return self._logs.get(name)

    async def open_log(self, name: str, config: ManagedLedgerConfig | None = None) -> ManagedPartitionLog:
        """The partition log of managed ledger `name`, created when it does not exist. Concurrent opens
        of one name share one instance; `config` applies when this call is the one that opens it."""
        if self._closed:
            raise RuntimeError("storage is closed")
        plog = self._logs.get(name)
        if plog is not None:
            return plog

        async def open_it() -> ManagedPartitionLog:
            plog = await ManagedPartitionLog.open(self.factory, name, config, on_close=self._forget)
            self._logs[name] = plog
            return plog

        return await self._opening.run(name, open_it)

    def _forget(self, plog: ManagedPartitionLog) -> None:
        if self._logs.get(plog.name) is plog:
            del self._logs[plog.name]

    async def delete_log(self, name: str) -> bool:
        """Delete the log's data and metadata, open or not; False when it did not exist."""
        await self._opening.wait(name)
        plog = self._logs.get(name)
        if plog is not None:
            await plog.delete()
            return True
        if not await self.factory.exists(name):
            return False
        await self.factory.delete(name)
        return True

    async def list_logs(self) -> list[str]:
        """Names of every stored partition log (managed ledger), open or not."""
        return await self.factory.list()

    @property
    def data_dir(self) -> str | None:
        """The embedded backend's data directory (absolute), None on BookKeeper: the "log dir" Kafka's
        DescribeLogDirs names, whose volume's total and usable bytes it reports."""
        if isinstance(self.ledger_store, LocalLedgerStore):
            return os.path.dirname(os.path.abspath(self.ledger_store.directory))
        return None

    async def stored_size(self, name: str) -> int | None:
        """The retained bytes of partition log `name` (DescribeLogDirs' partition size): the open log's, else
        what its stored info records, without opening it (opening a log starts a ledger). A ledger left
        unclosed by a crash has no recorded size and counts 0 until the log is opened. None: no such log."""
        plog = self._logs.get(name)
        if plog is not None:
            return plog.size_bytes
        info = await self.factory.get_info(name)
        if info is None:
            return None
        return sum(li.size or 0 for li in info.ledgers)

    async def collect_garbage(self) -> list[int]:
        """Delete ledgers no managed ledger references (left by a crash between creating a ledger and
        recording it, or by a compaction pass killed before or after its swap - kop/offset/compaction.py).
        Only safe while nothing is being opened, rolled over or compacted: call it at start-up."""
        try:
            stored = await self.ledger_store.list_ledgers()
        except NotImplementedError:
            return []
        referenced = await self.factory.referenced_ledgers()
        if stored and not referenced:
            # Ledgers but no managed ledger at all: more likely a lost metadata.db than a crash; keep
            # the data for an operator to look at rather than deleting everything.
            log.warning("%d ledger(s) on disk but no managed ledger references any: not collecting", len(stored))
            return []
        orphans = [lid for lid in stored if lid not in referenced]
        for lid in orphans:
            with contextlib.suppress(NoSuchLedgerError):
                await self.ledger_store.delete_ledger(lid)
        if orphans:
            log.info("deleted %d unreferenced ledger(s): %s", len(orphans), orphans)
        return orphans

    async def close(self) -> None:
        """Close every log (sealing its current ledger), then the stores."""
        if self._closed:
            return
        self._closed = True
        for plog in list(self._logs.values()):
            try:
                await plog.close()
            except Exception:
                log.exception("closing partition log %s", plog.name)
        await self.factory.close()
        await self.ledger_store.close()
        await self.metadata_store.close()

    def abandon(self) -> None:
        """Drop everything like a killed process (crash tests): nothing is closed, sealed or flushed."""
        self._closed = True
        self.factory.abandon()
        self._logs.clear()
        if isinstance(self.ledger_store, LocalLedgerStore):
            self.ledger_store.abandon()


async def open_embedded_storage(
    data_dir: str | os.PathLike[str],
    *,
    fsync: str = "always",
    fsync_interval_ms: int = 1000,
    managed_ledger_config: ManagedLedgerConfig | None = None,
    verify_reads: bool = True,
    collect_garbage: bool = True,
    damaged_ledger_policy: str = "serve-intact",
    exclusive: bool = True,
) -> LogStorage:
    """LogStorage on the embedded backends under `data_dir` (created if missing).

    fsync: "always" (default; appends complete after fdatasync, group commit), "interval" (fsync every
    fsync_interval_ms in the background), "none" (page cache only). The sqlite metadata store fsyncs
    every commit only with "always". Broker keys: localStoreFsyncPolicy, localStoreFsyncIntervalMs; the
    managed-ledger keys map through ManagedLedgerConfig.from_broker_config(config). `exclusive=False`: a
    worker of a multi-process node (kop/node/) - the directory is not locked (the supervisor holds it) and
    nothing is garbage-collected (another worker may have just created a ledger it has yet to record)."""
    if fsync not in FSYNC_POLICIES:
        raise ValueError(f"fsync must be one of {FSYNC_POLICIES}, got {fsync!r}")
    root = os.fspath(data_dir)
    os.makedirs(root, exist_ok=True)
    ledgers = LocalLedgerStore(os.path.join(root, LEDGERS_DIR), fsync=fsync,
                               fsync_interval_ms=fsync_interval_ms, verify_reads=verify_reads,
                               damaged_ledger_policy=damaged_ledger_policy, exclusive=exclusive)
    try:
        metadata = SqliteMetadataStore(root, durable=fsync == "always", filename=METADATA_FILE)
    except BaseException:
        await ledgers.close()
        raise
    storage = LogStorage(ledgers, metadata, managed_ledger_config)
    if collect_garbage and exclusive:
        await storage.collect_garbage()
    return storage
