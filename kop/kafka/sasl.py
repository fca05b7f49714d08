"""One connection's SASL state machine (Kafka's SaslServerAuthenticator, KIP-43/152/368), without sockets.

The connection asks `gate()` what to do with each request before dispatching it, and the SaslHandshake and
SaslAuthenticate modules (kop/kafka/apis/sasl_*.py) drive `handshake()` and `authenticate()`; after a v0
handshake the tokens travel as bare size-prefixed frames, which the connection hands to `raw_token()`.

States, as Kafka's:
- HANDSHAKE_OR_VERSIONS: only ApiVersions and SaslHandshake. Anything else closes the connection without an
  answer (Kafka 4.x: InvalidRequestException).
- AUTHENTICATE (after a v1 handshake): only SaslAuthenticate, each answered, even with empty bytes.
  Anything else closes (Kafka answers that API's error response with ILLEGAL_SASL_STATE first; we have
  no generic error-response builder, and the client sees a closed connection either way).
- RAW (after a v0 handshake): the next frames are mechanism tokens, not requests.
- COMPLETE: authenticated; every API is served. A SaslHandshake starts KIP-368 re-authentication when the
  client said it can (SaslAuthenticate v1+) and the last authentication is at least a second old;
  otherwise, and for a SaslAuthenticate out of turn, ILLEGAL_SASL_STATE. Once the session lifetime has
  passed, any request but SaslHandshake closes the connection (also when the credential had already
  expired at authentication: KAFKA-13848). Re-authentication keeps the mechanism and the principal.
- FAILED: the answer is sent, then the connection closes after failedAuthenticationDelayMs.

A failure's log line carries `Failure.reason`, which never holds a password or a token.
"""

from __future__ import annotations

import enum
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass

from kop.kafka.listeners import SaslMechanisms
from kop.protocol.errors import ErrorCode
from kop.security.principal import KafkaPrincipal
from kop.security.sasl.base import (
    Challenge,
    Failure,
    IllegalSaslState,
    SaslServer,
    Success,
    session_lifetime_ms,
)

log = logging.getLogger(__name__)

API_VERSIONS, SASL_HANDSHAKE, SASL_AUTHENTICATE = 18, 17, 36
MIN_REAUTH_INTERVAL_MS = 1000  # Kafka refuses a re-authentication sooner than this after the last one


class State(enum.Enum):
    HANDSHAKE_OR_VERSIONS = "handshake_or_versions"
    AUTHENTICATE = "authenticate"
    RAW = "raw"
    COMPLETE = "complete"
    FAILED = "failed"


@dataclass(slots=True)
class HandshakeAnswer:
    error: ErrorCode
    mechanisms: list[str]
    close: bool = False


@dataclass(slots=True)
class AuthenticateAnswer:
    error: ErrorCode
    message: str | None
    auth_bytes: bytes
    session_lifetime_ms: int = 0
    close: bool = False
    completed: bool = False  # this answer ends a successful (re-)authentication


class SaslSession:
    """`now_ms` is injectable so tests move time instead of waiting."""

    def __init__(self, mechanisms: SaslMechanisms, max_reauth_ms: int = 0,
                 now_ms: Callable[[], int] = lambda: int(time.time() * 1000)) -> None:
        self.mechanisms = mechanisms
        self.max_reauth_ms = max_reauth_ms
        self.now_ms = now_ms
        self.state = State.HANDSHAKE_OR_VERSIONS
        self.mechanism: str | None = None
        self.principal: KafkaPrincipal | None = None
        self.tenant: str | None = None  # KoP PLAIN with tokens: the tenant the username names
        self.session_end_ms: int | None = None
        self.reauth_capable = False  # the client sent SaslAuthenticate v1+ (KIP-368)
        self.reauthenticating = False
        self._server: SaslServer | None = None
        self._last_auth_ms = 0
        self._bad_mechanism: str | None = None
        self.failure_reason: str | None = None  # the last failure, for the connection's log line

    @property
    def authenticated(self) -> bool:
        return self.state is State.COMPLETE

    @property
    def raw(self) -> bool:
        return self.state is State.RAW

    def gate(self, api_key: int) -> str | None:
        """None: dispatch this request; else why the connection must close instead."""
        state = self.state
        if state is State.COMPLETE:
            end = self.session_end_ms
            if end is not None and api_key != SASL_HANDSHAKE and not (
                    self.reauthenticating and api_key == SASL_AUTHENTICATE) and self.now_ms() >= end:
                return "the authenticated session expired (KIP-368) and the client did not re-authenticate"
            return None
        if state is State.HANDSHAKE_OR_VERSIONS:
            if api_key in (API_VERSIONS, SASL_HANDSHAKE):
                return None
            return f"API key {api_key} before SASL authentication (only ApiVersions and SaslHandshake are served)"
        if state is State.AUTHENTICATE:
            if api_key == SASL_AUTHENTICATE:
                return None
            return f"API key {api_key} during SASL authentication (only SaslAuthenticate is served)"
        return "request after a failed SASL authentication"

    # ------------------------------------------------------------------ SaslHandshake
    def handshake(self, version: int, mechanism: str) -> HandshakeAnswer:
        enabled = list(self.mechanisms.enabled)
        if self.state is State.COMPLETE:
            now = self.now_ms()
            if not self.reauth_capable or self.reauthenticating or now - self._last_auth_ms < MIN_REAUTH_INTERVAL_MS:
                return HandshakeAnswer(ErrorCode.ILLEGAL_SASL_STATE, enabled)
            self.reauthenticating = True
            self._bad_mechanism = None
            if mechanism != self.mechanism:
                self._bad_mechanism = (f"SASL mechanism '{mechanism}' requested by client is not supported for "
                                       f"re-authentication of mechanism '{self.mechanism}'")
            else:
                self._server = self.mechanisms.server(mechanism)
            return HandshakeAnswer(ErrorCode.NONE, enabled)
        if self.state is not State.HANDSHAKE_OR_VERSIONS:
            return HandshakeAnswer(ErrorCode.ILLEGAL_SASL_STATE, enabled, close=True)
        server = self.mechanisms.server(mechanism)
        if server is None:
            self.state = State.FAILED
            self.failure_reason = f"unsupported SASL mechanism {mechanism[:100]!r}"
            return HandshakeAnswer(ErrorCode.UNSUPPORTED_SASL_MECHANISM, enabled, close=True)
        self._server = server
        self.mechanism = mechanism
        self.state = State.AUTHENTICATE if version >= 1 else State.RAW
        return HandshakeAnswer(ErrorCode.NONE, enabled)

    # ------------------------------------------------------------------ SaslAuthenticate
    async def authenticate(self, version: int, token: bytes) -> AuthenticateAnswer:
        if self.state is State.COMPLETE and not self.reauthenticating:
            return AuthenticateAnswer(ErrorCode.ILLEGAL_SASL_STATE,
                                      "Unexpected SaslAuthenticate request: the connection is authenticated", b"")
        if self.state not in (State.AUTHENTICATE, State.COMPLETE):
            self.state = State.FAILED
            return AuthenticateAnswer(ErrorCode.ILLEGAL_SASL_STATE, "Unexpected SaslAuthenticate request", b"",
                                      close=True)
        if version >= 1:
            self.reauth_capable = True
        mechanism = self.mechanism or "?"
        if self._bad_mechanism is not None:
            return self._fail(Failure(self._bad_mechanism, public=True))
        assert self._server is not None
        try:
            step = await self._server.evaluate(token)
        except IllegalSaslState as e:
            self.state = State.FAILED
            self.failure_reason = str(e)
            return AuthenticateAnswer(ErrorCode.ILLEGAL_SASL_STATE, str(e), b"", close=True)
        if isinstance(step, Challenge):
            return AuthenticateAnswer(ErrorCode.NONE, "", step.data)
        if isinstance(step, Failure):
            return self._fail(step)
        if self.reauthenticating and step.principal != self.principal:
            return self._fail(Failure(f"Cannot change principals during re-authentication from {self.principal}: "
                                      f"{step.principal}", public=True))
        lifetime = self._complete(step)
        log.debug("SASL/%s authenticated %s", mechanism, step.principal)
        # Kafka's answers carry an empty (not a null) error message when all is well.
        return AuthenticateAnswer(ErrorCode.NONE, "", step.data, lifetime if version >= 1 else 0, completed=True)

    def _complete(self, step: Success) -> int:
        now = self.now_ms()
        lifetime, end = session_lifetime_ms(now, self.max_reauth_ms, step.expires_at_ms)
        # Only clients that can re-authenticate (SaslAuthenticate v1+) are held to the lifetime, as Kafka.
        self.session_end_ms = end if self.reauth_capable else None
        self.principal = step.principal
        if not self.reauthenticating:
            self.tenant = step.tenant
        self.state = State.COMPLETE
        self.reauthenticating = False
        self._server = None
        self._last_auth_ms = now
        return lifetime

    def _fail(self, failure: Failure) -> AuthenticateAnswer:
        reauth = self.reauthenticating
        # OAUTHBEARER tells the client only {"status":"invalid_token"}; why the token was refused goes to the log.
        why = getattr(self._server, "rejection", None)
        self.state = State.FAILED
        self.reauthenticating = False
        self._server = None
        self.failure_reason = f"{failure.reason} ({why})" if why else failure.reason
        return AuthenticateAnswer(ErrorCode.SASL_AUTHENTICATION_FAILED,
                                  failure.client_message(self.mechanism or "?", reauth), b"", close=True)

    # ------------------------------------------------------------------ v0: raw tokens
    async def raw_token(self, token: bytes) -> tuple[bytes | None, bool]:
        """(bytes to send as a bare size-prefixed frame or None, close afterwards). A v0 exchange has no
        way to say why it failed: the connection is closed, as Kafka does."""
        assert self._server is not None and self.state is State.RAW
        try:
            step = await self._server.evaluate(token)
        except IllegalSaslState as e:
            self.state = State.FAILED
            self.failure_reason = str(e)
            return None, True
        if isinstance(step, Challenge):
            return step.data, False
        if isinstance(step, Failure):
            self.state = State.FAILED
            self.failure_reason = step.reason
            return None, True
        self._complete(step)
        return step.data, False
