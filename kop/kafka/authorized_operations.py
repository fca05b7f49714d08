"""The `authorized_operations` bitfields of Metadata, DescribeCluster (and the resource types DescribeGroups
uses): one place that answers "which ACL operations may this request's principal perform on resource R".

There is no authorizer yet, and Kafka without an authorizer answers every operation the resource type
supports (KafkaApis.authorizedOperations), so that is the answer here. An authorizer, once there is one,
plugs in through `handler.authorizer` (an object with `authorized(conn, resource_type, name, operation)`),
and these functions then keep only the operations it allows.

Bits are AclOperation codes: READ 3, WRITE 4, CREATE 5, DELETE 6, ALTER 7, DESCRIBE 8, CLUSTER_ACTION 9,
DESCRIBE_CONFIGS 10, ALTER_CONFIGS 11, IDEMPOTENT_WRITE 12, CREATE_TOKENS 13, DESCRIBE_TOKENS 14. The sets
per resource type are Kafka's (checked against Apache Kafka by tests/e2e/test_differential.py).
"""

from __future__ import annotations

from typing import Any

NOT_REQUESTED = -2147483648  # the field's value when the request did not ask (Kafka's default)

RESOURCE_TOPIC = 2
RESOURCE_GROUP = 3
RESOURCE_CLUSTER = 4

READ, WRITE, CREATE, DELETE, ALTER, DESCRIBE, CLUSTER_ACTION = 3, 4, 5, 6, 7, 8, 9
DESCRIBE_CONFIGS, ALTER_CONFIGS, IDEMPOTENT_WRITE, CREATE_TOKENS, DESCRIBE_TOKENS = 10, 11, 12, 13, 14

SUPPORTED: dict[int, tuple[int, ...]] = {
    RESOURCE_TOPIC: (READ, WRITE, CREATE, DELETE, ALTER, DESCRIBE, DESCRIBE_CONFIGS, ALTER_CONFIGS),
    RESOURCE_GROUP: (READ, DELETE, DESCRIBE, DESCRIBE_CONFIGS, ALTER_CONFIGS),
    # CREATE_TOKENS / DESCRIBE_TOKENS belong to USER resources: Kafka's cluster answer is 8096
    RESOURCE_CLUSTER: (CREATE, ALTER, DESCRIBE, CLUSTER_ACTION, DESCRIBE_CONFIGS, ALTER_CONFIGS, IDEMPOTENT_WRITE),
}


def authorized_operations(conn: Any, resource_type: int, name: str) -> int:
    """The bitfield of operations the connection's principal may perform on the resource."""
    authorizer = getattr(getattr(conn, "handler", None), "authorizer", None)
    bits = 0
    for op in SUPPORTED[resource_type]:
        if authorizer is None or authorizer.authorized(conn, resource_type, name, op):
            bits |= 1 << op
    return bits


def requested(conn: Any, asked: bool, resource_type: int, name: str) -> int:
    """authorized_operations when the request asked for them, Kafka's "not requested" value otherwise."""
    return authorized_operations(conn, resource_type, name) if asked else NOT_REQUESTED
