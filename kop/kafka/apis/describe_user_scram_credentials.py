"""DescribeUserScramCredentials (key 50): v0.

- Needs DESCRIBE on the cluster, else CLUSTER_AUTHORIZATION_FAILED for the whole request (Kafka).
- The work is kop/security/scram_admin.py's over the broker's MetadataScramCredentialStore (the metadata
  store, so every broker of a cluster sees the same users): a null or empty user list describes every user
  with a credential; a user named twice is DUPLICATE_RESOURCE, an unknown one RESOURCE_NOT_FOUND, with
  Kafka's messages. Only mechanisms and iterations are ever answered, never salts or keys.
"""

from __future__ import annotations

from kop.kafka import authorize
from kop.kafka.context import RequestContext
from kop.protocol.errors import ErrorCode
from kop.protocol.messages import DescribeUserScramCredentialsRequest, DescribeUserScramCredentialsResponse
from kop.security.scram_admin import describe_user_scram_credentials

API_KEY = 50
VERSIONS = (0, 0)


async def handle(ctx: RequestContext, req: DescribeUserScramCredentialsRequest) -> DescribeUserScramCredentialsResponse:
    R = DescribeUserScramCredentialsResponse
    if not authorize.cluster_allowed(ctx, authorize.Op.DESCRIBE):
        # Kafka's answer: the error at the top and once per requested user, its name left empty
        code = ErrorCode.CLUSTER_AUTHORIZATION_FAILED
        return R(throttle_time_ms=0, error_code=code, error_message=None, results=[
            R.DescribeUserScramCredentialsResult(user="", error_code=code, error_message=None, credential_infos=[])
            for _ in req.users or ()])
    users = None if req.users is None else [u.name for u in req.users]
    described = await describe_user_scram_credentials(ctx.services.scram_store, users)
    return R(throttle_time_ms=0, error_code=0, error_message="", results=[  # "" as Kafka
        R.DescribeUserScramCredentialsResult(
            user=d.user, error_code=d.error_code, error_message=d.error_message,
            credential_infos=[R.CredentialInfo(mechanism=m, iterations=i) for m, i in d.credentials])
        for d in described])
