"""DescribeCluster (key 60), v0-v1.

The broker list is this broker's advertised endpoint for the listener the request came in on, and it is
also the controller (a single KoP broker plays both parts for clients). v1's endpoint type must be 1
(brokers); asking for controllers gets UNSUPPORTED_ENDPOINT_TYPE as in Kafka.
"""

from __future__ import annotations

from typing import Any

from kop.protocol import api_info
from kop.protocol.errors import ErrorCode

API_KEY = 60
VERSIONS = (0, 1)


async def handle(conn: Any, header: Any, req: Any) -> Any:
    R = api_info(API_KEY).response_class
    h = conn.handler
    endpoint_type = getattr(req, "endpoint_type", 1)
    if endpoint_type != 1:
        return R(
            error_code=ErrorCode.UNSUPPORTED_ENDPOINT_TYPE, error_message="Only brokers are described here",
            endpoint_type=endpoint_type, cluster_id=h.service.cluster_id, controller_id=-1, brokers=[],
        )
    node = h.node_for(conn.listener_name)
    return R(
        error_code=0,
        error_message=None,
        endpoint_type=1,
        cluster_id=h.service.cluster_id,
        controller_id=node.node_id,
        brokers=[R.DescribeClusterBroker(broker_id=node.node_id, host=node.host, port=node.port, rack=None)],
        cluster_authorized_operations=-2147483648,
    )
