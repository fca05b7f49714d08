"""ApiVersions (key 18), v0-v5.

Advertises exactly the dispatch table. A request newer than v5 is answered (by the connection) in the v0
shape with UNSUPPORTED_VERSION plus our ranges, so the client retries at a version we serve; the response
header is always v0, whatever the body version. Kafka 4.4 clients open every connection at v5: serving it
saves them that extra round trip (they sent v5, got UNSUPPORTED_VERSION and retried at v4).
v5 (KIP-1242): the request may name the cluster and node the client means to reach (ClusterId, NodeId;
both or neither, else INVALID_REQUEST). When it names them and either differs from this broker's cluster
id or node id (kafkaBrokerId), the answer is REBOOTSTRAP_REQUIRED with no API list, as Kafka's
KafkaApis.handleApiVersionsRequest: the client's metadata points at a broker that is not the one it
reached (an address reused by another cluster or node), and it must bootstrap again.
v3+ advertise the supported and finalized features (kop/topics/features.py: metadata.version, kraft.version,
group.version, transaction.version with Kafka 4.4's ranges, and the finalized levels of the metadata store
with their epoch); as Kafka, v3 leaves out the supported features whose minimum is 0 (KAFKA-17011: a 3.x
client took min 0 for "unsupported"), and level-0 features are not in the finalized list. With
transaction.version 2 finalized, Kafka 4.x transactional producers run KIP-890 part 2 (docs/transactions.md).
Deviation: the client software name/version (v3+) is accepted without Kafka's pattern check.
SaslHandshake and SaslAuthenticate are listed only on SASL listeners, where they work (Kafka lists them
everywhere and answers ILLEGAL_SASL_STATE on other listeners; listing them where they fail invites a
client to try).
"""

from __future__ import annotations

from kop.kafka.context import RequestContext
from kop.protocol.errors import ErrorCode
from kop.protocol.messages import ApiVersionsRequest, ApiVersionsResponse
from kop.topics.features import SUPPORTED, Features

API_KEY = 18
VERSIONS = (0, 5)


async def handle(ctx: RequestContext, request: ApiVersionsRequest) -> ApiVersionsResponse:
    if ctx.version >= 5:
        refused = target_error(request, ctx.handler.service.cluster_id, ctx.config.kafkaBrokerId)
        if refused:
            return ApiVersionsResponse(error_code=refused, api_keys=[], throttle_time_ms=0)
    body = ctx.handler.api_versions_body(sasl=ctx.conn.sasl is not None)
    if ctx.version >= 3:
        add_features(body, ctx.services.features, ctx.version)
    return body


def add_features(body: ApiVersionsResponse, features: Features, version: int) -> None:
    """The supported and finalized features, as Kafka's ApiVersionsResponse.createApiVersionsResponse."""
    R = ApiVersionsResponse
    body.supported_features = [R.SupportedFeatureKey(name=f.name, min_version=f.min_version, max_version=f.max_version)
                               for f in SUPPORTED.values() if version >= 4 or f.min_version > 0]
    body.finalized_features_epoch = features.epoch
    body.finalized_features = [R.FinalizedFeatureKey(name=name, max_version_level=level, min_version_level=level)
                               for name, level in features.finalized().items() if level != 0]


def target_error(request: ApiVersionsRequest, cluster_id: str, node_id: int) -> int:
    """v5's check of the cluster and node the client meant (KIP-1242): 0, INVALID_REQUEST when only one of
    them is given, REBOOTSTRAP_REQUIRED when they are given and are not this broker's."""
    named_cluster = request.cluster_id is not None
    if named_cluster != (request.node_id != -1):
        return ErrorCode.INVALID_REQUEST
    if named_cluster and (request.cluster_id != cluster_id or request.node_id != node_id):
        return ErrorCode.REBOOTSTRAP_REQUIRED
    return 0
