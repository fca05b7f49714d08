"""CreateAcls (key 30): v1-v3 (v0 is gone since Kafka 4.0, KIP-896; v3 added the USER resource type).

- Needs ALTER on the cluster: without it every creation is CLUSTER_AUTHORIZATION_FAILED. Without an
  authorizer every creation is SECURITY_DISABLED "No Authorizer is configured.".
- Each creation is checked as Kafka's controller does (kop/security/acl/model.py validation_error: CLUSTER
  named other than kafka-cluster, empty name, resource type ANY, pattern type other than LITERAL/PREFIXED,
  operation ANY, permission ANY, a principal without a type) and answered INVALID_REQUEST with Kafka's
  message; the valid ones are stored even when others in the request are not, as in Kafka.
- A creation with an UNKNOWN element closes the connection: Kafka's CreateAclsRequest refuses to parse it.
- Stored in the metadata store (kop/security/metadata_stores.py), so every broker of a cluster enforces them
  (the others within ACL_RELOAD_INTERVAL).
"""

from __future__ import annotations

from typing import Any

from kop.kafka import authorize
from kop.kafka.apis.describe_acls import NO_AUTHORIZER, enum_of
from kop.kafka.context import RequestContext
from kop.protocol import api_info
from kop.protocol.errors import ErrorCode
from kop.security.acl import AclBinding, AclOperation, AclPermissionType, PatternType, ResourceType

API_KEY = 30
VERSIONS = (1, 3)


def _binding(c: Any) -> AclBinding:
    return AclBinding.of(enum_of(ResourceType, c.resource_type), c.resource_name,
                         enum_of(PatternType, c.resource_pattern_type), c.principal, c.host,
                         enum_of(AclOperation, c.operation), enum_of(AclPermissionType, c.permission_type))


async def handle(ctx: RequestContext, req: Any) -> Any:
    R = api_info(API_KEY).response_class

    def every(code: ErrorCode, message: str) -> Any:
        return R(throttle_time_ms=0, results=[R.AclCreationResult(error_code=code, error_message=message)
                                              for _ in req.creations])

    if not authorize.cluster_allowed(ctx, authorize.Op.ALTER):
        return every(ErrorCode.CLUSTER_AUTHORIZATION_FAILED, authorize.MESSAGES[ErrorCode.CLUSTER_AUTHORIZATION_FAILED])
    bindings = [_binding(c) for c in req.creations]
    if any(b.pattern.resource_type == ResourceType.UNKNOWN or b.pattern.pattern_type == PatternType.UNKNOWN
           or b.entry.operation == AclOperation.UNKNOWN or b.entry.permission_type == AclPermissionType.UNKNOWN
           for b in bindings):
        ctx.conn.abort("CreateAcls with UNKNOWN elements (Kafka refuses such a request)")
        return None
    authz = authorize.authorizer(ctx)
    if authz is None:
        return every(ErrorCode.SECURITY_DISABLED, NO_AUTHORIZER)
    errors = await authz.create_acls(bindings)
    return R(throttle_time_ms=0, results=[
        R.AclCreationResult(error_code=0 if e is None else ErrorCode.INVALID_REQUEST, error_message=e or "")
        for e in errors])
