"""BookKeeper backend of the ledger store: an asyncio client of real bookies (kop/storage/bookkeeper/ledgers.py)."""

from kop.storage.bookkeeper.ledgers import (
    BKReadHandle,
    BKWriteHandle,
    BookKeeperLedgerStore,
    NotEnoughBookiesError,
    parse_metadata_service_uri,
)
from kop.storage.bookkeeper.metadata import LedgerMetadata, ledger_path

__all__ = [
    "BKReadHandle",
    "BKWriteHandle",
    "BookKeeperLedgerStore",
    "LedgerMetadata",
    "NotEnoughBookiesError",
    "ledger_path",
    "parse_metadata_service_uri",
]
