"""Pulsar's AuthenticationService: the providers of `authenticationProviders` by method name, and
`anonymousUserRole`, for the Pulsar port's CONNECT and the admin REST.

Methods (config.AUTHENTICATION_PROVIDERS): `token` (kop/security/tokens.py), `basic` (htpasswd users,
kop/security/basic.py) and `tls` (the verified client certificate's CN, on the TLS Pulsar port).

The rules are Pulsar's (AuthenticationService and ServerCnx.handleConnect):
- CONNECT names a method (auth_method_name; none = "none"). A method with a configured provider must
  succeed, or the client gets AuthenticationError. A method without one - including a client that brings no
  credentials at all - is authenticated as `anonymousUserRole` when that is set, else refused with "No
  anonymous role, and no authentication provider configured".
- HTTP: a request naming its method (`X-Pulsar-Auth-Method-Name`) must pass that provider. Otherwise each
  provider is tried on what the request carries (Bearer token, Basic header, client certificate); when none
  accepts, the request is `anonymousUserRole`'s if set - even one whose credentials were refused, as on
  Pulsar - else 401 "Authentication required" (with the providers' reasons, never the credentials).
Unlike Pulsar, a broker with authentication on and no provider at all does not serve HTTP unauthenticated:
without an anonymous role every request is refused (kop/admin/auth.py).
"""

from __future__ import annotations

import ssl
from dataclasses import dataclass, field

from cryptography import x509

from kop.config import AUTHENTICATION_PROVIDERS, BrokerConfig
from kop.security.basic import BasicAuthFailed, BasicUsers
from kop.security.principal import certificate_subject
from kop.security.tokens import InvalidToken, PulsarTokenValidator, bearer_token

NO_ANONYMOUS = "No anonymous role, and no authentication provider configured"
METHOD_HEADER = "X-Pulsar-Auth-Method-Name"  # Pulsar's AuthenticationFilter.PULSAR_AUTH_METHOD_NAME


class AuthenticationFailed(Exception):
    """The credentials were refused (or none were given and no anonymous role is set); the message says why and
    never contains a credential."""


@dataclass(frozen=True)
class Authenticated:
    role: str
    method: str  # "token", "basic", "tls", or "anonymous"


def common_name(cert: bytes | x509.Certificate | None) -> str:
    """Pulsar's AuthenticationProviderTls: the first non-empty CN of the subject in RFC 2253 order."""
    if cert is None:
        raise AuthenticationFailed("Failed to get TLS certificates from client")
    for part in certificate_subject(cert).split(","):
        key, sep, value = part.partition("=")
        if sep and key == "CN" and value:
            return value
    raise AuthenticationFailed("Client unable to authenticate with TLS certificate")


def peer_certificate(ssl_object: ssl.SSLObject | ssl.SSLSocket | None) -> bytes | None:
    """The client's verified certificate (DER) of a TLS connection; None on plain TCP or without one."""
    return ssl_object.getpeercert(binary_form=True) if ssl_object is not None else None


@dataclass
class Authenticators:
    """The loaded providers and the anonymous role (module docstring)."""

    anonymous_role: str = ""
    token: PulsarTokenValidator | None = None
    basic: BasicUsers | None = None
    tls: bool = False
    methods: list[str] = field(default_factory=list)

    @classmethod
    def from_config(cls, cfg: BrokerConfig, tokens_by_key: bool = False) -> Authenticators:
        """Loads every configured provider now, so that a bad key or htpasswd file stops start-up.
        `tokens_by_key`: take tokens whenever a token key is set, even without AuthenticationProviderToken listed
        (the admin REST always has: kop/admin/auth.py)."""
        methods = [AUTHENTICATION_PROVIDERS[p] for p in cfg.authentication_providers if p in AUTHENTICATION_PROVIDERS]
        if tokens_by_key and "token" not in methods and (cfg.tokenSecretKey or cfg.tokenPublicKey):
            methods.insert(0, "token")
        out = cls(anonymous_role=cfg.anonymousUserRole.strip(), methods=list(dict.fromkeys(methods)))
        if "token" in methods and (cfg.tokenSecretKey or cfg.tokenPublicKey):
            out.token = PulsarTokenValidator.from_config(cfg)
        if "basic" in methods:
            out.basic = BasicUsers.from_config(cfg.basicAuthConf)
        out.tls = "tls" in methods
        return out

    def _anonymous(self, reason: str = NO_ANONYMOUS) -> Authenticated:
        if self.anonymous_role:
            return Authenticated(self.anonymous_role, "anonymous")
        raise AuthenticationFailed(reason)

    def connect(self, method: str, data: bytes, cert: bytes | None) -> Authenticated:
        """A CONNECT's auth_method_name and auth_data (and the TLS client certificate) -> the role."""
        method = method or "none"
        try:
            if method == "token" and self.token is not None:
                return Authenticated(self.token.validate(data.decode("utf-8", "replace")).role, method)
            if method == "basic" and self.basic is not None:
                return Authenticated(self.basic.authenticate(data.decode("utf-8", "replace")), method)
            if method == "tls" and self.tls:
                return Authenticated(common_name(cert), method)
        except (InvalidToken, BasicAuthFailed) as e:
            raise AuthenticationFailed(str(e)) from None
        return self._anonymous(f"{NO_ANONYMOUS} (method {method[:50]!r}; enabled: {', '.join(self.methods) or 'none'})")

    def _try(self, method: str, authorization: str | None, cert: bytes | None) -> str:
        if method == "token" and self.token is not None:
            token = bearer_token(authorization)
            if token is None:
                raise AuthenticationFailed("no Bearer token")
            return self.token.validate(token).role
        if method == "basic" and self.basic is not None:
            return self.basic.authenticate_header(authorization)
        if method == "tls" and self.tls:
            return common_name(cert)
        raise AuthenticationFailed(f"Unsupported authentication method: [{method[:50]}].")

    def http(self, authorization: str | None, method_header: str | None, cert: bytes | None) -> Authenticated:
        """An admin request's Authorization and X-Pulsar-Auth-Method-Name headers (and client certificate)."""
        if method_header:
            try:
                return Authenticated(self._try(method_header, authorization, cert), method_header)
            except (InvalidToken, BasicAuthFailed) as e:
                raise AuthenticationFailed(str(e)) from None
        reasons = []
        for method in self.methods:
            if method == "token" and self.token is None:
                continue
            try:
                return Authenticated(self._try(method, authorization, cert), method)
            except (InvalidToken, BasicAuthFailed, AuthenticationFailed) as e:
                reasons.append(f"{method}: {e}")
        given = authorization is not None or cert is not None
        return self._anonymous(f"Authentication failed: {'; '.join(reasons)}" if given and reasons
                               else "Authentication required")
