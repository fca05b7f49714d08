"""ManagedLedgerFactory: opens, lists and deletes managed ledgers over one ledger store + metadata store."""

from __future__ import annotations

import contextlib

from kop.aio import SingleFlight
from kop.managed_ledger.config import ManagedLedgerConfig
from kop.managed_ledger.ledger import (
    ML_ROOT,
    ManagedLedger,
    ManagedLedgerError,
    ManagedLedgerInterceptor,
)
from kop.managed_ledger.protobuf import ManagedLedgerInfo
from kop.storage.api import LedgerStore, MetadataStore, NoSuchLedgerError, NoSuchNodeError, NotEmptyError


def check_name(name: str) -> str:
    """Managed-ledger names are '/'-separated like Pulsar's (tenant/ns/persistent/topic), no empty part."""
    if not name or name.startswith("/") or name.endswith("/") or "//" in name:
        raise ValueError(f"invalid managed ledger name {name!r}")
    return name


class ManagedLedgerFactory:
    """One per broker. Open managed ledgers are shared: opening an open name returns the same instance."""

    def __init__(self, ledger_store: LedgerStore, metadata_store: MetadataStore,
                 default_config: ManagedLedgerConfig | None = None) -> None:
        self.ledger_store = ledger_store
        self.metadata_store = metadata_store
        self.default_config = default_config or ManagedLedgerConfig()
        self._open: dict[str, ManagedLedger] = {}
        self._opening: SingleFlight[str, ManagedLedger] = SingleFlight()
        self._closed = False
        # Recovery steps of the managed ledgers opened (ledger.py _initialize), for metrics.
        self.recovery: dict[str, int] = {"empty_ledgers_dropped": 0, "damaged_last_entry": 0}

    async def open(self, name: str, config: ManagedLedgerConfig | None = None,
                   interceptor: ManagedLedgerInterceptor | None = None) -> ManagedLedger:
        """Open (creating if absent) the managed ledger `name`. The config and interceptor of the first
        open win while it stays open."""
        check_name(name)
        if self._closed:
            raise ManagedLedgerError("managed ledger factory is closed")
        ml = self._open.get(name)
        if ml is not None:
            return ml

        async def initialize() -> ManagedLedger:
            ml = ManagedLedger(self, name, config or self.default_config, interceptor)
            await ml._initialize()
            self._open[name] = ml
            return ml

        return await self._opening.run(name, initialize)

    def get(self, name: str) -> ManagedLedger | None:
        """The open instance, if any."""
        return self._open.get(name)

    def _forget(self, ml: ManagedLedger) -> None:
        if self._open.get(ml.name) is ml:
            del self._open[ml.name]

    async def get_info(self, name: str) -> ManagedLedgerInfo | None:
        """The stored info (not the in-memory state of an open instance)."""
        got = await self.metadata_store.get(f"{ML_ROOT}/{check_name(name)}")
        return None if got is None or not got[0] else ManagedLedgerInfo.decode(got[0])

    async def exists(self, name: str) -> bool:
        return await self.get_info(name) is not None

    async def list(self) -> list[str]:
        """Names of the stored managed ledgers, sorted. A node with a value is a managed ledger (its info
        is never empty once created); empty nodes are path prefixes (tenant/namespace levels)."""
        out: list[str] = []

        async def walk(path: str, prefix: str) -> None:
            for child in await self.metadata_store.children(path):
                child_path = f"{path}/{child}"
                got = await self.metadata_store.get(child_path)
                if got is not None and got[0]:
                    out.append(prefix + child)
                else:
                    await walk(child_path, prefix + child + "/")

        await walk(ML_ROOT, "")
        return sorted(out)

    async def delete(self, name: str) -> None:
        """Close it if open, remove its info (CAS on the version read), then delete its ledgers."""
        check_name(name)
        ml = self._open.get(name)
        if ml is not None:
            await ml.close()
        path = f"{ML_ROOT}/{name}"
        got = await self.metadata_store.get(path)
        if got is None:
            raise ManagedLedgerError(f"managed ledger {name} does not exist")
        info = ManagedLedgerInfo.decode(got[0]) if got[0] else ManagedLedgerInfo()
        for child in await self.metadata_store.children(path):  # cursors, if any
            await self.metadata_store.delete_recursive(f"{path}/{child}")
        await self.metadata_store.delete(path, got[1].version)
        for li in info.ledgers:
            with contextlib.suppress(NoSuchLedgerError):
                await self.ledger_store.delete_ledger(li.ledger_id)
        # Remove the now-empty parent levels (tenant/namespace prefixes), as Pulsar leaves them tidy.
        parent = path.rpartition("/")[0]
        while parent != ML_ROOT and parent.startswith(ML_ROOT + "/"):
            if await self.metadata_store.children(parent):
                break
            got = await self.metadata_store.get(parent)
            if got is None or got[0]:
                break
            try:
                await self.metadata_store.delete(parent)
            except NoSuchNodeError:
                pass
            except NotEmptyError:
                break  # a topic of the same namespace was created meanwhile: the level is in use again
            parent = parent.rpartition("/")[0]

    async def referenced_ledgers(self) -> set[int]:
        """Ids of every ledger some stored managed-ledger info lists."""
        ids: set[int] = set()
        for name in await self.list():
            info = await self.get_info(name)
            if info is not None:
                ids.update(li.ledger_id for li in info.ledgers)
        return ids

    def abandon(self) -> None:
        """Stop every open managed ledger without writing anything (crash tests)."""
        self._closed = True
        for ml in list(self._open.values()):
            ml.abandon()

    async def close(self) -> None:
        """Close every open managed ledger."""
        self._closed = True
        for ml in list(self._open.values()):
            await ml.close()
