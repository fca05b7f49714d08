"""DescribeClientQuotas (key 48): v0-v1, answering that no client quota is set.

This broker keeps no client quotas (Kafka's user / client-id / ip produce, fetch and request rate limits), so
every well-formed filter matches nothing. It is served because `kafka-configs --describe --entity-type users`
asks for a user's quotas before its SCRAM credentials and fails on a broker without it.

- Needs DESCRIBE_CONFIGS on the cluster, else CLUSTER_AUTHORIZATION_FAILED (no message, entries null).
- A component's entity type must be user, client-id or ip (else UNSUPPORTED_VERSION "Unsupported entity type
  <t>") and its match type 0 (exact), 1 (default) or 2 (any) (else INVALID_REQUEST "Unknown match type <n>"),
  as Kafka answers; checked against Kafka 4.x by tests/e2e/test_acl_tools.py.
"""

from __future__ import annotations

from kop.kafka import authorize
from kop.kafka.context import RequestContext
from kop.protocol.errors import ErrorCode
from kop.protocol.messages import DescribeClientQuotasRequest, DescribeClientQuotasResponse

API_KEY = 48
VERSIONS = (0, 1)
ENTITY_TYPES = ("user", "client-id", "ip")


async def handle(ctx: RequestContext, req: DescribeClientQuotasRequest) -> DescribeClientQuotasResponse:
    R = DescribeClientQuotasResponse
    if not authorize.cluster_allowed(ctx, authorize.Op.DESCRIBE_CONFIGS):
        return R(throttle_time_ms=0, error_code=ErrorCode.CLUSTER_AUTHORIZATION_FAILED, error_message=None,
                 entries=None)
    for c in req.components:
        if c.entity_type not in ENTITY_TYPES:
            return R(throttle_time_ms=0, error_code=ErrorCode.UNSUPPORTED_VERSION,
                     error_message=f"Unsupported entity type {c.entity_type}", entries=None)
        if c.match_type not in (0, 1, 2):
            return R(throttle_time_ms=0, error_code=ErrorCode.INVALID_REQUEST,
                     error_message=f"Unknown match type {c.match_type}", entries=None)
    return R(throttle_time_ms=0, error_code=0, error_message="", entries=[])
