"""SCRAM credentials and ACL bindings kept in the cluster's MetadataStore, so that a user or an ACL
created through one broker is enforced by every broker (kop/storage/api.py's MetadataStore: ZooKeeper in
a cluster, sqlite when embedded).

Layout (values are JSON):

    /kop/security/scram/<user>/<mechanism>   {"salt", "iterations", "stored_key", "server_key"} (base64)
    /kop/security/acls                        its version counts ACL changes (other brokers reload on it)
    /kop/security/acls/<id>                   one binding; id = SHA-256 of its canonical JSON, so creating
                                              the same binding twice is one node, as Kafka keeps it once

User names are percent-encoded into one path segment ('/' and '.' included).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable
from urllib.parse import quote, unquote

from kop.security.acl.model import (
    AccessControlEntry,
    AclBinding,
    AclOperation,
    AclPermissionType,
    PatternType,
    ResourcePattern,
    ResourceType,
)
from kop.security.acl.store import AclStore
from kop.security.sasl.scram import ScramCredential, ScramCredentialStore
from kop.storage.api import MetadataStore, NodeExistsError, NoSuchNodeError, NotEmptyError

SCRAM_ROOT = "/kop/security/scram"
ACL_ROOT = "/kop/security/acls"


def _segment(name: str) -> str:
    return quote(name, safe="").replace(".", "%2E")


class MetadataScramCredentialStore(ScramCredentialStore):
    def __init__(self, store: MetadataStore, root: str = SCRAM_ROOT) -> None:
        self.ms = store
        self.root = root

    def _path(self, user: str, mechanism: str) -> str:
        return f"{self.root}/{_segment(user)}/{mechanism}"

    async def get(self, user: str, mechanism: str) -> ScramCredential | None:
        got = await self.ms.get(self._path(user, mechanism))
        return None if got is None else ScramCredential.from_json(got[0])

    async def put(self, user: str, mechanism: str, credential: ScramCredential) -> None:
        await self.ms.put(self._path(user, mechanism), credential.to_json())

    async def delete(self, user: str, mechanism: str) -> bool:
        try:
            await self.ms.delete(self._path(user, mechanism))
        except NoSuchNodeError:
            return False
        user_path = f"{self.root}/{_segment(user)}"
        if not await self.ms.children(user_path):
            try:
                await self.ms.delete(user_path)
            except (NoSuchNodeError, NotEmptyError):  # raced with another delete, or a new credential
                pass
        return True

    async def describe(self) -> dict[str, dict[str, int]]:
        out: dict[str, dict[str, int]] = {}
        for seg in await self.ms.children(self.root):
            user = unquote(seg)
            for mechanism in await self.ms.children(f"{self.root}/{seg}"):
                cred = await self.get(user, mechanism)
                if cred is not None:
                    out.setdefault(user, {})[mechanism] = cred.iterations
        return out


def binding_to_json(b: AclBinding) -> bytes:
    p, e = b.pattern, b.entry
    return json.dumps({
        "resource_type": p.resource_type.name, "name": p.name, "pattern_type": p.pattern_type.name,
        "principal": e.principal, "host": e.host, "operation": e.operation.name,
        "permission": e.permission_type.name,
    }, sort_keys=True, separators=(",", ":")).encode()


def binding_from_json(data: bytes) -> AclBinding:
    d = json.loads(data)
    return AclBinding(
        ResourcePattern(ResourceType[d["resource_type"]], d["name"], PatternType[d["pattern_type"]]),
        AccessControlEntry(d["principal"], d["host"], AclOperation[d["operation"]],
                           AclPermissionType[d["permission"]]))


class MetadataAclStore(AclStore):
    def __init__(self, store: MetadataStore, root: str = ACL_ROOT) -> None:
        self.ms = store
        self.root = root

    @staticmethod
    def binding_id(b: AclBinding) -> str:
        return hashlib.sha256(binding_to_json(b)).hexdigest()

    async def load(self) -> set[AclBinding]:
        out = set()
        for child in await self.ms.children(self.root):
            got = await self.ms.get(f"{self.root}/{child}")
            if got is not None:  # deleted between children() and get()
                out.add(binding_from_json(got[0]))
        return out

    async def version(self) -> int:
        """Changes so far (the root's version): a broker whose authorizer loaded at an older version
        reloads."""
        got = await self.ms.get(self.root)
        return -1 if got is None else got[1].version

    async def _bump(self) -> None:
        await self.ms.put(self.root, b"")

    async def add(self, bindings: Iterable[AclBinding]) -> None:
        changed = False
        for b in bindings:
            try:
                await self.ms.put(f"{self.root}/{self.binding_id(b)}", binding_to_json(b), expected_version=-1)
                changed = True
            except NodeExistsError:
                pass
        if changed:
            await self._bump()

    async def remove(self, bindings: Iterable[AclBinding]) -> None:
        changed = False
        for b in bindings:
            try:
                await self.ms.delete(f"{self.root}/{self.binding_id(b)}")
                changed = True
            except NoSuchNodeError:
                pass
        if changed:
            await self._bump()
