"""Authentication of the admin HTTP server: Pulsar's providers (kop/security/authn.py) and `anonymousUserRole`.

With `authenticationEnabled` every path except `adminOpenPaths` (by default /metrics and /health, which probes
and scrapers reach without credentials) needs a role: `Authorization: Bearer <token>` with a Pulsar JWT
(tokenSecretKey / tokenPublicKey, expiry, audience, role claim - kop/security/tokens.py; taken whenever a
token key is set), `Authorization: Basic` with AuthenticationProviderBasic's htpasswd users, the client
certificate's CN on webServicePortTls with AuthenticationProviderTls, or else `anonymousUserRole` when set
(Pulsar's rule: also for a request whose credentials were refused, unless it names its method in
`X-Pulsar-Auth-Method-Name`):

- no credentials, a malformed header, or credentials that are refused (forged, expired, wrong key or
  password), and no anonymous role: 401 with `{"reason": "Authentication required"}` - Pulsar's one answer
  (its AuthenticationFilter), which tells a prober nothing; why it was refused goes to the log at INFO (never
  the credentials);
- the broker's readiness (GET /admin/v2/brokers/ready) needs only an authenticated role, as Pulsar's isReady
  checks nothing more; listing the clusters (GET /admin/v2/clusters) is a super user's, as from Pulsar 5.0 (401
  "Unauthorized to validateBothSuperuserAndClusterOperation ... [LIST_CLUSTERS] on cluster [null]"; Pulsar 4.0
  let any authenticated role list them);
- the broker health check (GET /admin/v2/brokers/health), for a role that is not one of `superUserRoles`: 401
  with Pulsar's reason ("Unauthorized to validateBothSuperuserAndBrokerOperation ... [HEALTH_CHECK] on broker
  [host:port]");
- any other path, for such a role: 403 "This operation requires super-user access": broker administration is
  reserved to super users. With `authorizationEnabled`, a tenant's paths are also
  open to the roles in its `adminRoles`, and others are refused there as Pulsar refuses them
  (kop/admin/tenant_access.py); without it, only super users administer, as before.

Without `authenticationEnabled` nothing is checked, as Pulsar does. With it but without any provider or anonymous
role (a broker whose Kafka listeners authenticate SASL users only), nothing but the open paths is served: 401.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Awaitable, Callable

from aiohttp import web

from kop.admin import tenant_access
from kop.config import BrokerConfig
from kop.security.acl import Authorizer
from kop.security.authn import METHOD_HEADER, AuthenticationFailed, Authenticators, peer_certificate
from kop.topics.namespaces import Namespaces

log = logging.getLogger("kop.admin")

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]
REQUIRES_SUPER_USER = tenant_access.REQUIRES_SUPER_USER
# Pulsar 4.0's reason for every refused authentication; Pulsar 5.0 (Jetty 12) answers the same 401 with Jetty's HTML
# page naming the provider's own reason, which tells a prober more: ours keeps the one reason, JSON as elsewhere
AUTHENTICATION_REQUIRED = "Authentication required"
ANY_ROLE = frozenset({("GET", "/admin/v2/brokers/ready")})
BROKER_HEALTH = ("GET", "/admin/v2/brokers/health")
LIST_CLUSTERS = ("GET", "/admin/v2/clusters")


def _broker_refusal(request: web.Request, advertised: str, role: str) -> web.Response:
    """Pulsar's 401 for a role that is no super user on its broker health check; the broker is named as Pulsar
    names it, advertised address and the port the request came in on."""
    transport = request.transport
    sock = transport.get_extra_info("sockname") if transport is not None else None
    host, port = (advertised or str(sock[0]), sock[1]) if sock else (advertised, 0)
    return _refuse(401, "Unauthorized to validateBothSuperuserAndBrokerOperation for originalPrincipal [null] and "
                        f"clientAppId [{role}] about operation [HEALTH_CHECK] on broker [{host}:{port}]")


def _refuse(status: int, reason: str) -> web.Response:
    return web.Response(text=json.dumps({"reason": reason}), status=status, content_type="application/json")


def _client_certificate(request: web.Request) -> bytes | None:
    transport = request.transport
    return peer_certificate(transport.get_extra_info("ssl_object")) if transport is not None else None


def middleware(cfg: BrokerConfig, delegated: tuple[str, ...] = (), role_key: str = "kop.role",
               tenants: Namespaces | None = None) -> Callable[..., Awaitable[web.StreamResponse]] | None:
    """The aiohttp middleware enforcing the module docstring's rules; None when authentication is off. Paths
    under a `delegated` prefix (the schema registry's, kop/admin/registry.py) need an authenticated role but no
    super user: the role is left in `request[role_key]` for the route to authorize. `tenants` (the store of
    tenants, with authorization on) lets tenant admins administer their tenants."""
    if not cfg.authenticationEnabled:
        return None
    authenticators = Authenticators.from_config(cfg, tokens_by_key=True)  # a bad key or file stops start-up
    if not authenticators.methods and not authenticators.anonymous_role:
        # e.g. SASL PLAIN/SCRAM users only: the admin REST stays closed rather than open
        log.warning("authenticationEnabled without tokenSecretKey or tokenPublicKey, basic users or anonymousUserRole: "
                    "the admin REST accepts no credentials, so every path but adminOpenPaths answers 401")
    open_paths = frozenset(p.strip() for p in cfg.adminOpenPaths.split(",") if p.strip())
    super_users = frozenset(Authorizer.parse_super_users(cfg.superUserRoles))

    @web.middleware
    async def authenticate(request: web.Request, handler: Handler) -> web.StreamResponse:
        if request.path in open_paths:
            return await handler(request)
        try:
            role = authenticators.http(request.headers.get("Authorization"), request.headers.get(METHOD_HEADER),
                                       _client_certificate(request)).role
        except AuthenticationFailed as e:
            log.info("admin request %s %s refused: %s", request.method, request.path, e)
            return _refuse(401, AUTHENTICATION_REQUIRED)
        if f"User:{role}" in super_users or (request.method, request.path) in ANY_ROLE:
            return await handler(request)
        if (request.method, request.path) == BROKER_HEALTH:
            return _broker_refusal(request, cfg.advertisedAddress, role)
        if (request.method, request.path) == LIST_CLUSTERS:
            return _refuse(401, "Unauthorized to validateBothSuperuserAndClusterOperation for originalPrincipal [null] "
                                f"and clientAppId [{role}] about operation [LIST_CLUSTERS] on cluster [null]")
        if request.path == "/" or request.path.startswith(delegated):
            request[role_key] = role
            return await handler(request)
        if tenants is None or not cfg.authorizationEnabled:
            return _refuse(403, REQUIRES_SUPER_USER)
        refusal = await tenant_access.check(tenants, request.method, request.path, role)
        if refusal is not None:
            return _refuse(*refusal)
        request[role_key] = role
        return await handler(request)

    return authenticate
