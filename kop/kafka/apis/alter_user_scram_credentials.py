"""AlterUserScramCredentials (key 51): v0.

- Needs ALTER on the cluster, else every named user is CLUSTER_AUTHORIZATION_FAILED (Kafka).
- The client salts the password itself (KIP-554): the broker stores salt, iterations, StoredKey and ServerKey
  derived from the salted password, never the password. The checks and messages are Kafka's controller's
  (kop/security/scram_admin.py: empty name, unknown mechanism, iterations outside 4096..16384, a user named
  twice, deleting a credential that does not exist); every other user's change is made.
- Stored in the metadata store, so a user created through one broker authenticates on every broker.
"""

from __future__ import annotations

from kop.kafka import authorize
from kop.kafka.context import RequestContext
from kop.protocol.errors import ErrorCode
from kop.protocol.messages import AlterUserScramCredentialsRequest, AlterUserScramCredentialsResponse
from kop.security.scram_admin import ScramDeletion, ScramUpsertion, alter_user_scram_credentials

API_KEY = 51
VERSIONS = (0, 0)


async def handle(ctx: RequestContext, req: AlterUserScramCredentialsRequest) -> AlterUserScramCredentialsResponse:
    R = AlterUserScramCredentialsResponse
    if not authorize.cluster_allowed(ctx, authorize.Op.ALTER):
        code = ErrorCode.CLUSTER_AUTHORIZATION_FAILED
        users = sorted({d.name for d in req.deletions} | {u.name for u in req.upsertions})
        return R(throttle_time_ms=0, results=[R.AlterUserScramCredentialsResult(
            user=u, error_code=code, error_message=authorize.MESSAGES[code]) for u in users])
    results = await alter_user_scram_credentials(
        ctx.services.scram_store,
        [ScramDeletion(d.name, d.mechanism) for d in req.deletions],
        [ScramUpsertion(u.name, u.mechanism, u.iterations, bytes(u.salt), bytes(u.salted_password))
         for u in req.upsertions])
    return R(throttle_time_ms=0, results=[
        R.AlterUserScramCredentialsResult(user=r.user, error_code=r.error_code, error_message=r.error_message)
        for r in results])
