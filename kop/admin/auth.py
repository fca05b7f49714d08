"""Authentication of the admin HTTP server: `Authorization: Bearer <token>` with Pulsar's token provider.

With `authenticationEnabled` every path except `adminOpenPaths` (by default /metrics and /health, which probes
and scrapers reach without credentials) needs a Pulsar JWT that `PulsarTokenValidator` accepts
(tokenSecretKey / tokenPublicKey, expiry, audience, role claim - kop/security/tokens.py):

- no token, a malformed header, or a token that is refused (forged, expired, wrong key): 401, with the
  reason in Pulsar's `{"reason": ...}` body (the reason never contains the token);
- a valid token whose role is not one of `superUserRoles`: 403. Every admin v2 operation here administers
  topics and subscriptions across tenants, which Pulsar reserves to super users (or tenant admins, which
  we do not have), and the readiness and broker endpoints are cluster administration: so the role must be
  a super user.

Without `authenticationEnabled` nothing is checked, as Pulsar does. With it but without a token key (a broker
whose Kafka listeners authenticate SASL users only), nothing but the open paths is served: 401 for every token.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Awaitable, Callable

from aiohttp import web

from kop.config import BrokerConfig
from kop.security.acl import Authorizer
from kop.security.tokens import InvalidToken, PulsarTokenValidator, bearer_token

log = logging.getLogger("kop.admin")

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]
REQUIRES_SUPER_USER = "This operation requires super-user access"


def _refuse(status: int, reason: str) -> web.Response:
    return web.Response(text=json.dumps({"reason": reason}), status=status, content_type="application/json")


def middleware(cfg: BrokerConfig, delegated: tuple[str, ...] = (),
               role_key: str = "kop.role") -> Callable[..., Awaitable[web.StreamResponse]] | None:
    """The aiohttp middleware enforcing the module docstring's rules; None when authentication is off. Paths
    under a `delegated` prefix (the schema registry's, kop/admin/registry.py) need a valid token but no super
    user: the token's role is left in `request[role_key]` for the route to authorize."""
    if not cfg.authenticationEnabled:
        return None
    validator: PulsarTokenValidator | None = None
    if cfg.tokenSecretKey or cfg.tokenPublicKey:
        validator = PulsarTokenValidator.from_config(cfg)  # an unusable key stops start-up, saying why
    else:  # e.g. SASL PLAIN/SCRAM users only: the admin REST stays closed rather than open
        log.warning("authenticationEnabled without tokenSecretKey or tokenPublicKey: the admin REST accepts no "
                    "credentials, so every path but adminOpenPaths answers 401")
    open_paths = frozenset(p.strip() for p in cfg.adminOpenPaths.split(",") if p.strip())
    super_users = frozenset(Authorizer.parse_super_users(cfg.superUserRoles))

    @web.middleware
    async def authenticate(request: web.Request, handler: Handler) -> web.StreamResponse:
        if request.path in open_paths:
            return await handler(request)
        token = bearer_token(request.headers.get("Authorization"))
        if token is None:
            return _refuse(401, "Authentication required")
        if validator is None:
            return _refuse(401, "Authentication failed: this broker has no token key (tokenSecretKey or "
                                "tokenPublicKey) to check tokens with")
        try:
            role = validator.validate(token).role
        except InvalidToken as e:
            log.info("admin request %s %s refused: %s", request.method, request.path, e)
            return _refuse(401, f"Authentication failed: {e}")
        if f"User:{role}" in super_users:
            return await handler(request)
        if request.path == "/" or request.path.startswith(delegated):
            request[role_key] = role
            return await handler(request)
        if f"User:{role}" not in super_users:
            return _refuse(403, REQUIRES_SUPER_USER)
        return await handler(request)

    return authenticate
