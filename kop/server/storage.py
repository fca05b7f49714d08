"""Opening the storage stack the broker runs on, from the broker config; nothing above this module knows
which backend runs.

* embedded (default): local ledger files + sqlite under the data directory.
* bookkeeper: entries on BookKeeper bookies, metadata (managed-ledger infos, the broker's own nodes) in
  ZooKeeper - chosen by ``storageBackend=bookkeeper`` or by setting ``metadataStoreUrl`` /
  ``zookeeperServers`` (docs/bookkeeper.md).
"""

from __future__ import annotations

from pathlib import Path

from kop.config import BrokerConfig
from kop.managed_ledger import ManagedLedgerConfig
from kop.offset import LogStorage
from kop.offset import open_embedded_storage as _open_embedded


async def open_storage(data_dir: Path, config: BrokerConfig) -> LogStorage:
    """The storage the config asks for."""
    if config.storage_backend == "bookkeeper":
        return await open_bookkeeper_storage(config)
    return await open_embedded_storage(data_dir, config)


async def open_embedded_storage(data_dir: Path, config: BrokerConfig, *, exclusive: bool = True) -> LogStorage:
    """`exclusive=False`: a worker of a multi-process node (kop/node/; kop.offset.open_embedded_storage)."""
    return await _open_embedded(
        data_dir,
        fsync=config.localStoreFsyncPolicy,
        fsync_interval_ms=config.localStoreFsyncIntervalMs,
        managed_ledger_config=ManagedLedgerConfig.from_broker_config(config),
        verify_reads=config.localStoreVerifyChecksums,
        damaged_ledger_policy=config.localStoreDamagedLedgerPolicy,
        exclusive=exclusive,
    )


def bookkeeper_metadata_service_uri(config: BrokerConfig) -> str:
    """bookkeeperMetadataServiceUri, or the metadata store's ZooKeeper with BookKeeper's default root."""
    if config.bookkeeperMetadataServiceUri:
        return config.bookkeeperMetadataServiceUri
    from kop.storage.zookeeper import parse_zookeeper_servers

    hosts, _ = parse_zookeeper_servers(config.metadataStoreUrl or config.zookeeperServers)
    return f"zk+hierarchical://{hosts.replace(',', ';')}/ledgers"


async def open_bookkeeper_storage(config: BrokerConfig) -> LogStorage:
    """Managed ledgers on bookies, their infos in ZooKeeper at Pulsar's /managed-ledgers paths.

    No start-up garbage collection of unreferenced ledgers (the embedded store's collect_garbage): the
    BookKeeper cluster is shared, and a ledger another broker has just created but not yet recorded
    would look unreferenced. Orphans of a crash stay until a safe collector exists (docs/bookkeeper.md).
    """
    from kop.storage.bookkeeper import BookKeeperLedgerStore
    from kop.storage.zookeeper import ZooKeeperMetadataStore

    session_ms = config.metadataStoreSessionTimeoutMillis
    metadata = await ZooKeeperMetadataStore.connect(config.metadataStoreUrl or config.zookeeperServers,
                                                    session_timeout_ms=session_ms)
    try:
        ledgers = await BookKeeperLedgerStore.connect(
            bookkeeper_metadata_service_uri(config),
            ensemble_size=config.managedLedgerDefaultEnsembleSize,
            write_quorum=config.managedLedgerDefaultWriteQuorum,
            ack_quorum=config.managedLedgerDefaultAckQuorum,
        )
    except BaseException:
        await metadata.close()
        raise
    return LogStorage(ledgers, metadata, ManagedLedgerConfig.from_broker_config(config))
