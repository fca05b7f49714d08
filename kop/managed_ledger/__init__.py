"""The managed ledger layer (Pulsar's design): a log of entries over a list of ledgers, with rollover,
trimming, recovery and binary search, keeping its ledger list in the metadata store."""

from kop.managed_ledger.config import ManagedLedgerConfig
from kop.managed_ledger.factory import ManagedLedgerFactory
from kop.managed_ledger.ledger import (
    Entry,
    EntryTooShort,
    FailureHook,
    InvalidPositionError,
    ManagedLedger,
    ManagedLedgerClosedError,
    ManagedLedgerError,
    ManagedLedgerFencedError,
    ManagedLedgerInterceptor,
    Position,
)
from kop.managed_ledger.protobuf import LedgerInfo, ManagedLedgerInfo
from kop.managed_ledger.rewrite import LedgerRewriter

__all__ = [
    "Entry",
    "EntryTooShort",
    "FailureHook",
    "InvalidPositionError",
    "LedgerInfo",
    "LedgerRewriter",
    "ManagedLedger",
    "ManagedLedgerClosedError",
    "ManagedLedgerConfig",
    "ManagedLedgerError",
    "ManagedLedgerFactory",
    "ManagedLedgerFencedError",
    "ManagedLedgerInfo",
    "ManagedLedgerInterceptor",
    "Position",
]
