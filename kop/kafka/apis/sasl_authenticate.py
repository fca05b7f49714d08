"""SaslAuthenticate (key 36), v0-v2 (KIP-152; v1 adds SessionLifetimeMs for KIP-368, v2 is flexible).

Carries one mechanism token each way (kop/kafka/sasl.py): every request is answered, a challenge with the
server's bytes, success with the mechanism's last bytes (SCRAM's server-final) and, from v1, the session
lifetime (the lesser of connectionsMaxReauthMs and the credential's expiry; 0 = none). A failure answers
SASL_AUTHENTICATION_FAILED with Kafka's message (the generic sentence unless the mechanism's own message
reveals nothing), then closes the connection after failedAuthenticationDelayMs. Out of turn:
ILLEGAL_SASL_STATE (and a close before authentication).
"""

from __future__ import annotations

from kop.kafka.context import RequestContext
from kop.protocol.errors import ErrorCode
from kop.protocol.messages import SaslAuthenticateRequest, SaslAuthenticateResponse

API_KEY = 36
VERSIONS = (0, 2)


async def handle(ctx: RequestContext, request: SaslAuthenticateRequest) -> SaslAuthenticateResponse:
    R = SaslAuthenticateResponse
    sasl = ctx.conn.sasl
    if sasl is None:
        return R(error_code=ErrorCode.ILLEGAL_SASL_STATE, error_message="SASL is not enabled on this listener",
                 auth_bytes=b"", session_lifetime_ms=0)
    answer = await sasl.authenticate(ctx.version, bytes(request.auth_bytes or b""))
    if answer.error == ErrorCode.SASL_AUTHENTICATION_FAILED:
        await ctx.conn.authentication_failed()
    elif answer.close:
        ctx.conn.close_after_response()
    elif answer.completed:
        ctx.conn.authentication_succeeded()
    return R(error_code=answer.error, error_message=answer.message, auth_bytes=answer.auth_bytes,
             session_lifetime_ms=answer.session_lifetime_ms)
