"""CreateAcls (key 30): v1-v3 (v0 is gone since Kafka 4.0, KIP-896; v3 added the USER resource type).

- Needs ALTER on the cluster: without it every creation is CLUSTER_AUTHORIZATION_FAILED. Without an
  authorizer every creation is SECURITY_DISABLED "No Authorizer is configured.".
- Each creation is checked as Kafka's controller does (kop/security/acl/model.py validation_error: CLUSTER
  named other than kafka-cluster, empty name, a principal without a type) and answered INVALID_REQUEST with
  Kafka's message; the valid ones are stored even when others in the request are not, as in Kafka.
- A creation with resource type ANY, pattern type ANY or MATCH, operation ANY or permission ANY fails the
  whole request with UNKNOWN_SERVER_ERROR and no message for every creation, nothing stored: Kafka's
  controller cannot even build such a binding (its ResourcePattern/AccessControlEntry constructors throw)
  and answers so. Measured against Kafka 4.x by tests/e2e/test_acl_tools.py.
- A creation with an element of code 0 (UNKNOWN) closes the connection: Kafka's CreateAclsRequest refuses to
  parse it. A code Kafka does not know (99) reads as UNKNOWN and that creation is INVALID_REQUEST
  ("Invalid resourceType UNKNOWN"), as Kafka's controller answers.
- Stored in the metadata store (kop/security/metadata_stores.py), so every broker of a cluster enforces them
  (the others within ACL_RELOAD_INTERVAL).
"""

from __future__ import annotations

from kop.kafka import authorize
from kop.kafka.apis.describe_acls import enum_of
from kop.kafka.context import RequestContext
from kop.protocol.errors import ErrorCode
from kop.protocol.messages import CreateAclsRequest, CreateAclsResponse
from kop.security.acl import AclBinding, AclOperation, AclPermissionType, PatternType, ResourceType

API_KEY = 30
VERSIONS = (1, 3)
NO_AUTHORIZER = "No Authorizer is configured."  # Kafka's controller words it so (DescribeAcls differs)


def _binding(c: CreateAclsRequest.AclCreation) -> AclBinding:
    return AclBinding.of(enum_of(ResourceType, c.resource_type), c.resource_name,
                         enum_of(PatternType, c.resource_pattern_type), c.principal, c.host,
                         enum_of(AclOperation, c.operation), enum_of(AclPermissionType, c.permission_type))


async def handle(ctx: RequestContext, req: CreateAclsRequest) -> CreateAclsResponse | None:
    R = CreateAclsResponse

    def every(code: ErrorCode, message: str) -> CreateAclsResponse:
        return R(throttle_time_ms=0, results=[R.AclCreationResult(error_code=code, error_message=message)
                                              for _ in req.creations])

    if not authorize.cluster_allowed(ctx, authorize.Op.ALTER):
        return every(ErrorCode.CLUSTER_AUTHORIZATION_FAILED, authorize.MESSAGES[ErrorCode.CLUSTER_AUTHORIZATION_FAILED])
    if any(0 in (c.resource_type, c.resource_pattern_type, c.operation, c.permission_type) for c in req.creations):
        ctx.conn.abort("CreateAcls with UNKNOWN elements (Kafka refuses such a request)")
        return None
    authz = authorize.authorizer(ctx)
    if authz is None:
        return every(ErrorCode.SECURITY_DISABLED, NO_AUTHORIZER)
    bindings = [_binding(c) for c in req.creations]
    if any(b.pattern.resource_type == ResourceType.ANY or b.entry.operation == AclOperation.ANY
           or b.pattern.pattern_type in (PatternType.ANY, PatternType.MATCH)
           or b.entry.permission_type == AclPermissionType.ANY for b in bindings):
        return R(throttle_time_ms=0, results=[R.AclCreationResult(error_code=ErrorCode.UNKNOWN_SERVER_ERROR,
                                                                  error_message=None) for _ in bindings])
    errors = await authz.create_acls(bindings)
    return R(throttle_time_ms=0, results=[
        R.AclCreationResult(error_code=0 if e is None else ErrorCode.INVALID_REQUEST, error_message=e or "")
        for e in errors])
