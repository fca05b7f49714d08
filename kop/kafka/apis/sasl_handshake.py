"""SaslHandshake (key 17), v0-v1.

Names the mechanism of the exchange that follows (kop/kafka/sasl.py has the state machine): v1 means the
tokens travel in SaslAuthenticate requests, v0 that they follow as bare size-prefixed frames. The answer
always lists the enabled mechanisms (saslAllowedMechanisms). An unknown mechanism gets
UNSUPPORTED_SASL_MECHANISM and the connection closes after failedAuthenticationDelayMs. On an
authenticated connection a handshake begins KIP-368 re-authentication, or gets ILLEGAL_SASL_STATE when the
client cannot re-authenticate. Never advertised past v1 (KAFKA-9577: old clients mis-negotiate v2).
On a listener without SASL: ILLEGAL_SASL_STATE, as Kafka answers (and ApiVersions does not list it there).
"""

from __future__ import annotations

from kop.kafka.context import RequestContext
from kop.protocol.errors import ErrorCode
from kop.protocol.messages import SaslHandshakeRequest, SaslHandshakeResponse

API_KEY = 17
VERSIONS = (0, 1)


async def handle(ctx: RequestContext, request: SaslHandshakeRequest) -> SaslHandshakeResponse:
    R = SaslHandshakeResponse
    sasl = ctx.conn.sasl
    if sasl is None:
        return R(error_code=ErrorCode.ILLEGAL_SASL_STATE, mechanisms=[])
    answer = sasl.handshake(ctx.version, request.mechanism or "")
    if answer.close:
        await ctx.conn.authentication_failed()
    return R(error_code=answer.error, mechanisms=answer.mechanisms)
