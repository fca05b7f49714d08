"""ACL bindings and filters with Kafka's codes and matching rules.

The int8 codes are the wire values of CreateAcls/DescribeAcls/DeleteAcls. A binding is a resource pattern
(type, name, LITERAL or PREFIXED) plus an entry (principal ``User:x``, host, operation, ALLOW/DENY). Filters
are what DescribeAcls and DeleteAcls carry; their matching is Kafka's (ResourcePatternFilter,
AccessControlEntryFilter): a null name/principal/host or ANY matches anything; pattern type ANY matches
either pattern type with the exact name; MATCH matches every binding that *applies to* the named
resource - the same literal name, the literal ``*``, and every prefix of the name.
"""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass
from enum import IntEnum

WILDCARD_RESOURCE = "*"
WILDCARD_PRINCIPAL = "User:*"
WILDCARD_HOST = "*"
CLUSTER_NAME = "kafka-cluster"


class ResourceType(IntEnum):
    UNKNOWN = 0
    ANY = 1
    TOPIC = 2
    GROUP = 3
    CLUSTER = 4
    TRANSACTIONAL_ID = 5
    DELEGATION_TOKEN = 6
    USER = 7


class PatternType(IntEnum):
    UNKNOWN = 0
    ANY = 1
    MATCH = 2
    LITERAL = 3
    PREFIXED = 4


class AclOperation(IntEnum):
    UNKNOWN = 0
    ANY = 1
    ALL = 2
    READ = 3
    WRITE = 4
    CREATE = 5
    DELETE = 6
    ALTER = 7
    DESCRIBE = 8
    CLUSTER_ACTION = 9
    DESCRIBE_CONFIGS = 10
    ALTER_CONFIGS = 11
    IDEMPOTENT_WRITE = 12
    CREATE_TOKENS = 13
    DESCRIBE_TOKENS = 14
    TWO_PHASE_COMMIT = 15  # Kafka 4.1+ (KIP-939)


class AclPermissionType(IntEnum):
    UNKNOWN = 0
    ANY = 1
    DENY = 2
    ALLOW = 3


Op = AclOperation
# The operations that mean something on each resource type (Kafka 4.2's AclEntry.supportedOperations);
# the "authorized operations" bitfields are computed over these.
SUPPORTED_OPERATIONS: dict[ResourceType, frozenset[AclOperation]] = {
    ResourceType.TOPIC: frozenset({Op.READ, Op.WRITE, Op.CREATE, Op.DESCRIBE, Op.DELETE, Op.ALTER,
                                   Op.DESCRIBE_CONFIGS, Op.ALTER_CONFIGS}),
    ResourceType.GROUP: frozenset({Op.READ, Op.DESCRIBE, Op.DELETE, Op.DESCRIBE_CONFIGS, Op.ALTER_CONFIGS}),
    ResourceType.CLUSTER: frozenset({Op.CREATE, Op.CLUSTER_ACTION, Op.DESCRIBE_CONFIGS, Op.ALTER_CONFIGS,
                                     Op.IDEMPOTENT_WRITE, Op.ALTER, Op.DESCRIBE}),
    ResourceType.TRANSACTIONAL_ID: frozenset({Op.DESCRIBE, Op.WRITE, Op.TWO_PHASE_COMMIT}),
    ResourceType.DELEGATION_TOKEN: frozenset({Op.DESCRIBE}),
    ResourceType.USER: frozenset({Op.CREATE_TOKENS, Op.DESCRIBE_TOKENS}),
}


@dataclass(frozen=True, slots=True, order=True)
class ResourcePattern:
    resource_type: ResourceType
    name: str
    pattern_type: PatternType = PatternType.LITERAL


@dataclass(frozen=True, slots=True, order=True)
class AccessControlEntry:
    principal: str  # "User:alice", "User:*"
    host: str
    operation: AclOperation
    permission_type: AclPermissionType


@dataclass(frozen=True, slots=True, order=True)
class AclBinding:
    pattern: ResourcePattern
    entry: AccessControlEntry

    @classmethod
    def of(cls, resource_type: ResourceType, name: str, pattern_type: PatternType, principal: str, host: str,
           operation: AclOperation, permission: AclPermissionType) -> AclBinding:
        return cls(ResourcePattern(resource_type, name, pattern_type),
                   AccessControlEntry(principal, host, operation, permission))

    def validation_error(self) -> str | None:
        """Why CreateAcls would refuse this binding (INVALID_REQUEST), None when it is acceptable. The
        checks and texts are Kafka's (its AclApis, then its controller's validateNewAcl)."""
        p, e = self.pattern, self.entry
        if p.resource_type == ResourceType.CLUSTER and p.name != CLUSTER_NAME:
            return f"The only valid name for the CLUSTER resource is {CLUSTER_NAME}"
        if not p.name:
            return "Invalid empty resource name"
        if p.resource_type in (ResourceType.UNKNOWN, ResourceType.ANY):
            return f"Invalid resourceType {p.resource_type.name}"
        if p.pattern_type not in (PatternType.LITERAL, PatternType.PREFIXED):
            return f"Invalid patternType {p.pattern_type.name}"
        if e.operation in (AclOperation.UNKNOWN, AclOperation.ANY):
            return f"Invalid operation {e.operation.name}"
        if e.permission_type not in (AclPermissionType.ALLOW, AclPermissionType.DENY):
            return f"Invalid permissionType {e.permission_type.name}"
        if ":" not in e.principal:
            return (f"Could not parse principal from `{e.principal}` (no colon is present separating the principal type "
                    "from the principal name)")  # Kafka 4.x's CreateAcls answer, measured
        return None


@dataclass(frozen=True, slots=True)
class ResourcePatternFilter:
    resource_type: ResourceType = ResourceType.ANY
    name: str | None = None
    pattern_type: PatternType = PatternType.ANY

    def matches(self, pattern: ResourcePattern) -> bool:
        if self.resource_type != ResourceType.ANY and self.resource_type != pattern.resource_type:
            return False
        if self.pattern_type not in (PatternType.ANY, PatternType.MATCH) and self.pattern_type != pattern.pattern_type:
            return False
        if self.name is None:
            return True
        if self.pattern_type in (PatternType.ANY, pattern.pattern_type):
            return self.name == pattern.name
        # MATCH: every binding that applies to the resource named by the filter.
        if pattern.pattern_type == PatternType.LITERAL:
            return self.name == pattern.name or pattern.name == WILDCARD_RESOURCE
        return self.name.startswith(pattern.name)

    @property
    def is_unknown(self) -> bool:
        return ResourceType.UNKNOWN == self.resource_type or PatternType.UNKNOWN == self.pattern_type


@dataclass(frozen=True, slots=True)
class AccessControlEntryFilter:
    principal: str | None = None
    host: str | None = None
    operation: AclOperation = AclOperation.ANY
    permission_type: AclPermissionType = AclPermissionType.ANY

    def matches(self, entry: AccessControlEntry) -> bool:
        if self.principal is not None and self.principal != entry.principal:
            return False
        if self.host is not None and self.host != entry.host:
            return False
        if self.operation != AclOperation.ANY and self.operation != entry.operation:
            return False
        return self.permission_type == AclPermissionType.ANY or self.permission_type == entry.permission_type

    @property
    def is_unknown(self) -> bool:
        return AclOperation.UNKNOWN == self.operation or AclPermissionType.UNKNOWN == self.permission_type


@dataclass(frozen=True, slots=True)
class AclBindingFilter:
    pattern: ResourcePatternFilter = ResourcePatternFilter()
    entry: AccessControlEntryFilter = AccessControlEntryFilter()

    def matches(self, binding: AclBinding) -> bool:
        return self.pattern.matches(binding.pattern) and self.entry.matches(binding.entry)

    @property
    def is_unknown(self) -> bool:
        return self.pattern.is_unknown or self.entry.is_unknown


def java_host_address(ip: str) -> str:
    """The client address as Java's ``InetAddress.getHostAddress()`` prints it, which is the form Kafka
    compares ACL hosts with: IPv4 dotted; IPv4-mapped IPv6 as IPv4 (Java turns those into Inet4Address);
    other IPv6 as eight groups of hex without leading zeros and without ``::`` compression
    (``0:0:0:0:0:0:0:1``), scope id kept."""
    addr, _, scope = ip.partition("%")
    try:
        parsed = ipaddress.ip_address(addr)
    except ValueError:
        return ip
    if isinstance(parsed, ipaddress.IPv6Address):
        if parsed.ipv4_mapped is not None:
            return str(parsed.ipv4_mapped)
        groups = parsed.exploded.split(":")
        text = ":".join(format(int(g, 16), "x") for g in groups)
        return f"{text}%{scope}" if scope else text
    return str(parsed)
