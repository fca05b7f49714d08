"""SASL/PLAIN (RFC 4616), checked against configured users or, as KoP does, against Pulsar tokens.

The client sends one token, ``authzid NUL authcid NUL password``; success answers empty bytes. Kafka's
rules: exactly three fields, empty user or password refused with their own messages, a non-empty authzid
must equal the user. These messages are shown to the client (they reveal nothing about which users exist).

KoP's convention (kept so KoP clients keep working): the username names the Pulsar tenant, or
``tenant/namespace``, the client works in; the password is ``<authMethod>:<credential>``, in practice
``token:<jwt>``; the principal is the token's role (its ``sub``), not the username, and the authzid is
ignored. With ``kafkaEnableMultiTenantMetadata`` (``tenant_namespace`` given) the username must name a
tenant or tenant/namespace with legal names, or the login fails with a message saying so: the connection's
short topic names, group ids and transactional ids then live there (kop/topics/scope.py). Which topics that
role may use is the ACLs' question (they name topics, groups and ids by their broker-global names).
"""

from __future__ import annotations

import abc
import hmac
from dataclasses import dataclass

from kop.security.principal import KafkaPrincipal
from kop.security.sasl.base import Failure, SaslServer, Step, Success
from kop.security.tokens import InvalidToken, PulsarTokenValidator
from kop.topics.scope import InvalidTenant, tenant_namespace

MECHANISM = "PLAIN"
INVALID_CREDENTIALS = "Authentication failed: Invalid username or password"


@dataclass(frozen=True, slots=True)
class PlainIdentity:
    principal: KafkaPrincipal
    expires_at_ms: int | None = None
    tenant: str | None = None


class PlainCredentialCheck(abc.ABC):
    """Decides a (username, password) pair: the identity it proves, or a Failure."""

    @abc.abstractmethod
    async def check(self, username: str, password: str) -> PlainIdentity | Failure: ...


class StaticUsers(PlainCredentialCheck):
    """Kafka's JAAS ``user_<name>="<password>"`` list; the principal is ``User:<username>``."""

    def __init__(self, users: dict[str, str]) -> None:
        self._users = {u: p.encode() for u, p in users.items()}

    async def check(self, username: str, password: str) -> PlainIdentity | Failure:
        expected = self._users.get(username)
        # Compare even for an unknown user, so that the time taken does not tell which users exist.
        ok = hmac.compare_digest(expected if expected is not None else b"\0" * 16, password.encode())
        if expected is None or not ok:
            return Failure(INVALID_CREDENTIALS, public=True)
        return PlainIdentity(KafkaPrincipal.user(username))


class PulsarTokenCredentials(PlainCredentialCheck):
    """KoP's PLAIN: password ``token:<jwt>`` checked by the Pulsar token validator; username = tenant."""

    AUTH_METHOD = "token"

    def __init__(self, validator: PulsarTokenValidator, default_namespace: str | None = None) -> None:
        """`default_namespace` (kafkaNamespace): the username names the tenant, checked; None: not checked."""
        self.validator = validator
        self.default_namespace = default_namespace

    async def check(self, username: str, password: str) -> PlainIdentity | Failure:
        parts = password.split(":")
        if len(parts) != 2:
            # KoP demands exactly <authMethod>:<credential>.
            return Failure("Authentication failed: password must be <authMethod>:<credential>, e.g. token:<jwt>",
                           public=True)
        method, credential = parts
        if method != self.AUTH_METHOD:
            return Failure(f"Authentication failed: no authentication provider for method {method!r}", public=True)
        try:
            token = self.validator.validate(credential)
        except InvalidToken as e:
            return Failure(f"Authentication failed: {e}", public=True)
        tenant = username
        if self.default_namespace is not None:
            try:
                tenant = "/".join(tenant_namespace(username, self.default_namespace))
            except InvalidTenant as e:
                return Failure(f"Authentication failed: {e}", public=True)
        return PlainIdentity(KafkaPrincipal.user(token.role), token.expires_at_ms, tenant=tenant)


class PlainServer(SaslServer):
    mechanism = MECHANISM

    def __init__(self, credentials: PlainCredentialCheck, *, check_authzid: bool = True) -> None:
        """``check_authzid=False`` for KoP's token mode, where the username is a tenant, not an identity."""
        super().__init__()
        self.credentials = credentials
        self.check_authzid = check_authzid and not isinstance(credentials, PulsarTokenCredentials)

    async def _evaluate(self, response: bytes) -> Step:
        try:
            text = response.decode("utf-8")
        except UnicodeDecodeError:
            return Failure("Invalid SASL/PLAIN response: not UTF-8", public=True)
        fields = text.split("\0")
        if len(fields) != 3:
            # Kafka counts at most four fields when it says how many it got.
            return Failure(f"Invalid SASL/PLAIN response: expected 3 tokens, got {min(len(fields), 4)}",
                           public=True)
        authzid, username, password = fields
        if not username:
            return Failure("Authentication failed: username not specified", public=True)
        if not password:
            return Failure("Authentication failed: password not specified", public=True)
        outcome = await self.credentials.check(username, password)
        if isinstance(outcome, Failure):
            return outcome
        if self.check_authzid and authzid and authzid != username:
            return Failure("Authentication failed: Client requested an authorization id that is different "
                           "from username", public=True)
        return Success(outcome.principal, b"", outcome.expires_at_ms, outcome.tenant)
