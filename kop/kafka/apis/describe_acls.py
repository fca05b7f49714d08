"""DescribeAcls (key 29): v1-v3 (v0 is gone since Kafka 4.0, KIP-896).

- Needs DESCRIBE on the cluster (CLUSTER_AUTHORIZATION_FAILED); without an authorizer (authorizationEnabled
  false) SECURITY_DISABLED "No Authorizer is configured on the broker", as Kafka answers without
  authorizer.class.name.
- The filter's matching is Kafka's (kop/security/acl/model.py: LITERAL, PREFIXED, ANY, MATCH); the bindings
  come from this broker's copy of the ACLs, which follows the metadata store within ACL_RELOAD_INTERVAL
  (kop/server/service.py) when another broker changed them.
- A filter with an UNKNOWN element closes the connection: Kafka's DescribeAclsRequest refuses to parse it.
  Codes Kafka does not know read as UNKNOWN, as its fromCode() does.
- Resources are answered sorted by (type, name, pattern type), entries sorted within each; Kafka answers in
  its map's order, which no client relies on.
"""

from __future__ import annotations

from enum import IntEnum
from typing import TypeVar

from kop.kafka import authorize
from kop.kafka.context import RequestContext
from kop.protocol.errors import ErrorCode
from kop.protocol.messages import DeleteAclsRequest, DescribeAclsRequest, DescribeAclsResponse
from kop.security.acl import (
    AccessControlEntryFilter,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    PatternType,
    ResourcePatternFilter,
    ResourceType,
)
from kop.security.acl.authorizer import group_by_resource

API_KEY = 29
VERSIONS = (1, 3)
NO_AUTHORIZER = "No Authorizer is configured on the broker"  # Kafka's words


_Enum = TypeVar("_Enum", bound=IntEnum)


def enum_of(cls: type[_Enum], code: int) -> _Enum:
    """Kafka's fromCode: a code it does not know is UNKNOWN."""
    try:
        return cls(code)
    except ValueError:
        return cls["UNKNOWN"]


def binding_filter(f: DescribeAclsRequest | DeleteAclsRequest.DeleteAclsFilter) -> AclBindingFilter:
    """A DescribeAcls request or a DeleteAcls filter as the authorizer's filter."""
    return AclBindingFilter(
        ResourcePatternFilter(enum_of(ResourceType, f.resource_type_filter), f.resource_name_filter,
                              enum_of(PatternType, f.pattern_type_filter)),
        AccessControlEntryFilter(f.principal_filter, f.host_filter, enum_of(AclOperation, f.operation),
                                 enum_of(AclPermissionType, f.permission_type)))


async def handle(ctx: RequestContext, req: DescribeAclsRequest) -> DescribeAclsResponse | None:
    R = DescribeAclsResponse

    def error(code: ErrorCode, message: str) -> DescribeAclsResponse:
        return R(throttle_time_ms=0, error_code=code, error_message=message, resources=[])

    if not authorize.cluster_allowed(ctx, authorize.Op.DESCRIBE):
        return error(ErrorCode.CLUSTER_AUTHORIZATION_FAILED, authorize.MESSAGES[ErrorCode.CLUSTER_AUTHORIZATION_FAILED])
    flt = binding_filter(req)
    if flt.is_unknown:
        ctx.conn.abort("DescribeAcls filter with UNKNOWN elements (Kafka refuses such a request)")
        return None
    authz = authorize.authorizer(ctx)
    if authz is None:
        return error(ErrorCode.SECURITY_DISABLED, NO_AUTHORIZER)
    resources = [
        R.DescribeAclsResource(resource_type=rtype, resource_name=name, pattern_type=ptype, acls=[
            R.AclDescription(principal=e.principal, host=e.host, operation=e.operation,
                             permission_type=e.permission_type) for e in entries])
        for (rtype, name, ptype), entries in group_by_resource(authz.describe_acls(flt)).items()
    ]
    return R(throttle_time_ms=0, error_code=0, error_message="", resources=resources)  # "" as Kafka
