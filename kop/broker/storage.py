"""Opening the storage stack the broker runs on, from the broker config.

Today: the embedded backends (local ledger files + sqlite). The BookKeeper + ZooKeeper backends will be
chosen here from the config as well; nothing above this module knows which one runs.
"""

from __future__ import annotations

from pathlib import Path

from kop.config import BrokerConfig
from kop.managed_ledger import ManagedLedgerConfig
from kop.offset import Storage
from kop.offset import open_embedded_storage as _open_embedded


async def open_embedded_storage(data_dir: Path, config: BrokerConfig) -> Storage:
    return await _open_embedded(
        data_dir,
        fsync=config.localStoreFsyncPolicy,
        fsync_interval_ms=config.localStoreFsyncIntervalMs,
        managed_ledger_config=ManagedLedgerConfig.from_broker_config(config),
    )
