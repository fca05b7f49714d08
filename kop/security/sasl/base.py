"""The outcome types every mechanism returns, and Kafka's rules for what a failed client is told."""

from __future__ import annotations

import abc
from dataclasses import dataclass, field

from kop.security.principal import KafkaPrincipal


@dataclass(frozen=True, slots=True)
class Challenge:
    """Send ``data`` to the client and feed its answer to ``evaluate`` again."""

    data: bytes


@dataclass(frozen=True, slots=True)
class Success:
    """Authenticated. ``data`` is the mechanism's last token (SCRAM's server-final; empty otherwise) and
    still goes to the client. ``expires_at_ms`` is the credential's expiry (a token's ``exp``) for KIP-368's
    session lifetime; None = the credential does not expire. ``tenant`` is the Pulsar tenant (or
    tenant/namespace) a KoP PLAIN client named as its username; None for every other mechanism."""

    principal: KafkaPrincipal
    data: bytes = b""
    expires_at_ms: int | None = None
    tenant: str | None = None
    extensions: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class Failure:
    """Authentication failed: answer SASL_AUTHENTICATION_FAILED (58) and close after the failure delay.

    ``reason`` is for the broker's log (it never holds a password or a token). ``public`` says whether
    Kafka would show the reason to the client (its SaslAuthenticationException); otherwise the client is
    told only the generic sentence of :meth:`client_message`, so that it cannot probe which users exist."""

    reason: str
    public: bool = False

    def client_message(self, mechanism: str, reauthentication: bool = False) -> str:
        if self.public:
            return self.reason
        what = "re-authentication" if reauthentication else "authentication"
        return f"Authentication failed during {what} due to invalid credentials with SASL mechanism {mechanism}"


Step = Challenge | Success | Failure


class IllegalSaslState(Exception):
    """evaluate() after the exchange ended (Kafka: ILLEGAL_SASL_STATE, 34)."""


class SaslServer(abc.ABC):
    """One authentication exchange (make a new one per connection and per re-authentication)."""

    mechanism: str

    def __init__(self) -> None:
        self._done = False

    async def evaluate(self, response: bytes) -> Step:
        if self._done:
            raise IllegalSaslState(f"Unexpected SASL/{self.mechanism} token after the exchange ended")
        step = await self._evaluate(bytes(response))
        if not isinstance(step, Challenge):
            self._done = True
        return step

    @abc.abstractmethod
    async def _evaluate(self, response: bytes) -> Step: ...


def session_lifetime_ms(now_ms: int, max_reauth_ms: int, expires_at_ms: int | None) -> tuple[int, int | None]:
    """KIP-368: ``(SessionLifetimeMs to send, when the broker ends the session)``.

    The lifetime is the lesser of ``connections.max.reauth.ms`` (0 = unset) and the time left on the
    credential, floored at 0. With neither, ``(0, None)``: no expiry. A credential that has already expired
    gives ``(0, now_ms)`` - the client is told 0, and the session is over at once, so the next request other
    than SaslHandshake closes the connection (sending 0 *without* ending the session was KAFKA-13848)."""
    if max_reauth_ms <= 0 and expires_at_ms is None:
        return 0, None
    candidates = [max_reauth_ms] if max_reauth_ms > 0 else []
    if expires_at_ms is not None:
        candidates.append(expires_at_ms - now_ms)
    lifetime = max(0, min(candidates))
    return lifetime, now_ms + lifetime
