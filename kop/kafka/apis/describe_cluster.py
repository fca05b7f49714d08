"""DescribeCluster (key 60), v0-v2 (v2: Kafka 4.4's admin client, e.g. kafka-log-dirs, asks it).

The broker list is this broker's advertised endpoint for the listener the request came in on, and it is
also the controller (a single KoP broker plays both parts for clients). In cluster mode it lists every
live broker registered in ZooKeeper (kop/cluster/ownership.py) and names the lowest live id as the
controller, the same answer Metadata gives. v1's endpoint type must be 1
(brokers); asking for controllers gets UNSUPPORTED_ENDPOINT_TYPE as in Kafka. include_cluster_authorized_operations
is answered by kop/kafka/authorize.py: every cluster operation without an authorizer, as Kafka answers; with
ACLs the allowed ones, or 0 without DESCRIBE on the cluster (never an error), as Kafka. v2's
IncludeFencedBrokers (KIP-1073) changes nothing here: a broker is listed once registered and alive, none is ever
fenced (IsFenced false), so there are no fenced brokers to add.
"""

from __future__ import annotations

from kop.kafka import authorize
from kop.kafka.context import RequestContext
from kop.protocol.errors import ErrorCode
from kop.protocol.messages import DescribeClusterRequest, DescribeClusterResponse

API_KEY = 60
VERSIONS = (0, 2)


async def handle(ctx: RequestContext, req: DescribeClusterRequest) -> DescribeClusterResponse:
    R = DescribeClusterResponse
    h = ctx.handler
    endpoint_type = getattr(req, "endpoint_type", 1)
    if endpoint_type != 1:
        return R(
            error_code=ErrorCode.UNSUPPORTED_ENDPOINT_TYPE, error_message="Only brokers are described here",
            endpoint_type=endpoint_type, cluster_id=h.service.cluster_id, controller_id=-1, brokers=[],
        )
    nodes = h.broker_nodes(ctx.listener_name)
    own = h.service.ownership
    return R(
        error_code=0,
        error_message=None,
        endpoint_type=1,
        cluster_id=h.service.cluster_id,
        controller_id=own.controller_id if own.clustered else nodes[0].node_id,
        brokers=[R.DescribeClusterBroker(broker_id=n.node_id, host=n.host, port=n.port, rack=None, is_fenced=False)
                 for n in nodes],
        cluster_authorized_operations=authorize.cluster_operations(ctx, bool(req.include_cluster_authorized_operations)),
    )
