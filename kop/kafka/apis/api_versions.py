"""ApiVersions (key 18), v0-v4.

Advertises exactly the dispatch table. A request newer than v4 is answered (by the connection) in the v0
shape with UNSUPPORTED_VERSION plus our ranges, so the client retries at a version we serve; the response
header is always v0, whatever the body version. No features are advertised: in particular no
`transaction.version`, so Kafka 4.x transactional producers stay on the classic ("TV1") path: explicit
AddPartitionsToTxn, one epoch per session (KIP-890 part 2 is not implemented; docs/transactions.md).
Deviation: the client software name/version (v3+) is accepted without Kafka's pattern check.
SaslHandshake and SaslAuthenticate are listed only on SASL listeners, where they work (Kafka lists them
everywhere and answers ILLEGAL_SASL_STATE on other listeners; listing them where they fail invites a
client to try).
"""

from __future__ import annotations

from kop.kafka.context import RequestContext
from kop.protocol.messages import ApiVersionsRequest, ApiVersionsResponse

API_KEY = 18
VERSIONS = (0, 4)


async def handle(ctx: RequestContext, request: ApiVersionsRequest) -> ApiVersionsResponse:
    return ctx.handler.api_versions_body(sasl=ctx.conn.sasl is not None)
