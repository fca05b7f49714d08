"""UpdateFeatures (key 57): v0-v2, as Apache Kafka 4.4's controller answers it (through a broker).

Sets the cluster-wide finalized level of features (`kafka-features upgrade / downgrade / disable`,
Admin.updateFeatures). The rules, messages and storage are kop/topics/features.py's (Kafka's
FeatureControlManager): a refused feature fails the whole request with INVALID_UPDATE_VERSION and "The update
failed for all features since the following feature had an error: ..."; nothing is changed then. v0's
AllowDowngrade is upgrade type SAFE_DOWNGRADE when true, UPGRADE otherwise (Kafka's UpdateFeaturesRequest); v1+
carry the type and ValidateOnly. v0-v1 answers list each feature with the request's outcome when it succeeded;
v2 has no per-feature results. Authorization: ALTER on the cluster, else CLUSTER_AUTHORIZATION_FAILED. A
feature named twice: INVALID_REQUEST, as Kafka's request parsing (a map keyed by the name) refuses it.
"""

from __future__ import annotations

from kop.kafka.authorize import Op, cluster_allowed
from kop.kafka.context import RequestContext
from kop.protocol.errors import ErrorCode
from kop.protocol.messages import UpdateFeaturesRequest, UpdateFeaturesResponse
from kop.topics.features import SAFE_DOWNGRADE, UPGRADE, FeatureUpdateError

API_KEY = 57
VERSIONS = (0, 2)
R = UpdateFeaturesResponse


def _failed(code: int, message: str | None) -> UpdateFeaturesResponse:
    return R(throttle_time_ms=0, error_code=code, error_message=message, results=[])


async def handle(ctx: RequestContext, req: UpdateFeaturesRequest) -> UpdateFeaturesResponse:
    if not cluster_allowed(ctx, Op.ALTER):
        return _failed(ErrorCode.CLUSTER_AUTHORIZATION_FAILED, None)
    updates: dict[str, tuple[int, int]] = {}
    for u in req.feature_updates:
        if u.feature in updates:
            return _failed(ErrorCode.INVALID_REQUEST, f"Feature {u.feature} is named more than once")
        kind = (SAFE_DOWNGRADE if u.allow_downgrade else UPGRADE) if ctx.version == 0 else u.upgrade_type
        updates[u.feature] = (u.max_version_level, kind)
    try:
        await ctx.services.features.update(updates, validate_only=ctx.version >= 1 and req.validate_only)
    except FeatureUpdateError as e:
        return _failed(ErrorCode.INVALID_UPDATE_VERSION,
                       f"The update failed for all features since the following feature had an error: {e}")
    results = [R.UpdatableFeatureResult(feature=name, error_code=0, error_message=None) for name in updates] \
        if ctx.version <= 1 else []
    return R(throttle_time_ms=0, error_code=0, error_message=None, results=results)
