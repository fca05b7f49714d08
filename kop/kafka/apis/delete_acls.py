"""DeleteAcls (key 31): v1-v3 (v0 is gone since Kafka 4.0, KIP-896).

- Needs ALTER on the cluster: without it every filter is CLUSTER_AUTHORIZATION_FAILED. Without an authorizer
  every filter is SECURITY_DISABLED, with Kafka's controller's message.
- Each filter matches the bindings as they were before the request (one binding matched by two filters is
  reported by both, as Kafka does); the matching bindings are removed from the metadata store, so every
  broker of a cluster stops enforcing them.
- A filter with an UNKNOWN element closes the connection: Kafka's DeleteAclsRequest refuses to parse it.
"""

from __future__ import annotations

from kop.kafka import authorize
from kop.kafka.apis.create_acls import NO_AUTHORIZER
from kop.kafka.apis.describe_acls import binding_filter
from kop.kafka.context import RequestContext
from kop.protocol.errors import ErrorCode
from kop.protocol.messages import DeleteAclsRequest, DeleteAclsResponse

API_KEY = 31
VERSIONS = (1, 3)


async def handle(ctx: RequestContext, req: DeleteAclsRequest) -> DeleteAclsResponse | None:
    R = DeleteAclsResponse

    def every(code: ErrorCode, message: str) -> DeleteAclsResponse:
        return R(throttle_time_ms=0, filter_results=[
            R.DeleteAclsFilterResult(error_code=code, error_message=message, matching_acls=[]) for _ in req.filters])

    if not authorize.cluster_allowed(ctx, authorize.Op.ALTER):
        return every(ErrorCode.CLUSTER_AUTHORIZATION_FAILED, authorize.MESSAGES[ErrorCode.CLUSTER_AUTHORIZATION_FAILED])
    filters = [binding_filter(f) for f in req.filters]
    if any(f.is_unknown for f in filters):
        ctx.conn.abort("DeleteAcls filter with UNKNOWN elements (Kafka refuses such a request)")
        return None
    authz = authorize.authorizer(ctx)
    if authz is None:
        return every(ErrorCode.SECURITY_DISABLED, NO_AUTHORIZER)
    results = []
    for res in await authz.delete_acls(filters):
        if res.error is not None:
            results.append(R.DeleteAclsFilterResult(error_code=ErrorCode.INVALID_REQUEST, error_message=res.error,
                                                    matching_acls=[]))
            continue
        results.append(R.DeleteAclsFilterResult(error_code=0, error_message=None, matching_acls=[
            R.DeleteAclsMatchingAcl(
                error_code=0, error_message=None, resource_type=b.pattern.resource_type,
                resource_name=b.pattern.name, pattern_type=b.pattern.pattern_type, principal=b.entry.principal,
                host=b.entry.host, operation=b.entry.operation, permission_type=b.entry.permission_type)
            for b in res.deleted]))
    return R(throttle_time_ms=0, filter_results=results)
