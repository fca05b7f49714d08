"""Managed-ledger settings, named after Pulsar's ManagedLedgerConfig and mapped from KoP/Pulsar keys."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

MINUTE_MS = 60_000


@dataclass(frozen=True, slots=True)
class ManagedLedgerConfig:
    """Rollover and caching settings of one managed ledger.

    Broker keys: managedLedgerMaxEntriesPerLedger -> max_entries_per_ledger,
    managedLedgerMaxSizePerLedgerMbytes -> max_size_per_ledger_mb,
    managedLedgerMinLedgerRolloverTimeMinutes -> min_rollover_time_ms (x 60000),
    managedLedgerMaxLedgerRolloverTimeMinutes -> max_rollover_time_ms (x 60000); see from_broker_config.
    """

    max_entries_per_ledger: int = 50_000
    # A float so tests can roll over after a few KiB; brokers give whole megabytes.
    max_size_per_ledger_mb: float = 2048
    # A full ledger is switched only once it is older than this (0 = at once), Pulsar's minimum.
    min_rollover_time_ms: int = 0
    # A ledger with at least one entry is switched once it is this old (times a per-ledger random factor
    # in [1, 1 + rollover_time_jitter), so that many ledgers created together do not all roll together).
    max_rollover_time_ms: int = 240 * MINUTE_MS
    rollover_time_jitter: float = 0.05
    # Closed ledgers kept open for reads (each holds a file descriptor and its offset index).
    read_handle_cache_size: int = 8

    @property
    def max_size_per_ledger_bytes(self) -> int:
        return int(self.max_size_per_ledger_mb * 1024 * 1024)

    @classmethod
    def from_broker_config(cls, cfg: Any, **overrides: Any) -> ManagedLedgerConfig:
        """Build from any object with KoP's attribute names (kop.config.BrokerConfig)."""
        values: dict[str, Any] = dict(
            max_entries_per_ledger=int(cfg.managedLedgerMaxEntriesPerLedger),
            max_size_per_ledger_mb=float(cfg.managedLedgerMaxSizePerLedgerMbytes),
            min_rollover_time_ms=int(cfg.managedLedgerMinLedgerRolloverTimeMinutes) * MINUTE_MS,
            max_rollover_time_ms=int(cfg.managedLedgerMaxLedgerRolloverTimeMinutes) * MINUTE_MS,
        )
        values.update(overrides)
        return cls(**values)
