"""Kafka's authorization model: ACL bindings, their filters, and an authorizer with StandardAuthorizer's
semantics (kop/security/acl/authorizer.py)."""

from kop.security.acl.authorizer import Authorizer, authorized_operations
from kop.security.acl.model import (
    AccessControlEntry,
    AccessControlEntryFilter,
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    PatternType,
    ResourcePattern,
    ResourcePatternFilter,
    ResourceType,
)
from kop.security.acl.store import AclStore, InMemoryAclStore

__all__ = [
    "AccessControlEntry", "AccessControlEntryFilter", "AclBinding", "AclBindingFilter", "AclOperation",
    "AclPermissionType", "AclStore", "Authorizer", "InMemoryAclStore", "PatternType", "ResourcePattern",
    "ResourcePatternFilter", "ResourceType", "authorized_operations",
]
