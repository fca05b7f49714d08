"""Where ACL bindings are kept. The authorizer keeps its own in-memory copy for the hot path and writes
through a store; the next step gives the store a metadata-store implementation so that every broker of a
cluster enforces the same ACLs (kop/security/metadata_stores.py)."""

from __future__ import annotations

import abc
from collections.abc import Iterable

from kop.security.acl.model import AclBinding


class AclStore(abc.ABC):
    @abc.abstractmethod
    async def load(self) -> set[AclBinding]:
        """Every stored binding."""

    @abc.abstractmethod
    async def add(self, bindings: Iterable[AclBinding]) -> None:
        """Store bindings (already-present ones are no-ops, as in Kafka)."""

    @abc.abstractmethod
    async def remove(self, bindings: Iterable[AclBinding]) -> None:
        """Forget bindings (absent ones are ignored)."""


class InMemoryAclStore(AclStore):
    def __init__(self) -> None:
        self._bindings: set[AclBinding] = set()

    async def load(self) -> set[AclBinding]:
        return set(self._bindings)

    async def add(self, bindings: Iterable[AclBinding]) -> None:
        self._bindings.update(bindings)

    async def remove(self, bindings: Iterable[AclBinding]) -> None:
        self._bindings.difference_update(bindings)
