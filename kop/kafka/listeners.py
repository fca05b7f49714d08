"""What each Kafka listener demands of its connections: TLS, and SASL with which mechanisms.

A listener is (name, host:port, protocol) with Kafka's four protocols (kafkaListeners + kafkaProtocolMap,
kop/config.py): PLAINTEXT, SSL, SASL_PLAINTEXT, SASL_SSL. This module turns the configuration into
- one `ssl.SSLContext` per TLS listener, from Pulsar's PEM keys (tlsCertificateFilePath, tlsKeyFilePath,
  tlsTrustCertsFilePath, tlsProtocols, tlsCiphers). On SSL listeners a client certificate is required with
  tlsRequireTrustedClientCertOnConnect (Kafka's ssl.client.auth=required), asked for but optional when
  only a trust bundle is configured (=requested), and not asked for otherwise. On SASL_SSL listeners it is
  never asked for: the principal comes from SASL, as KIP-684 makes Kafka do unless a per-listener
  ssl.client.auth says otherwise (we have no per-listener TLS settings).
- `SaslMechanisms`: the enabled mechanisms and a fresh server per exchange (kop/security/sasl), with the
  credentials they check: a users file and/or Pulsar tokens for PLAIN, the metadata store's SCRAM
  credentials (shared by the brokers of a cluster), and the JWKS of OAUTHBEARER, fetched before the broker
  accepts anyone (Kafka fails start-up when it cannot fetch it; so do we).
The connection side (frames, states, KIP-368) is kop/kafka/sasl.py.
"""

from __future__ import annotations

import logging
import ssl
from dataclasses import dataclass
from pathlib import Path

from kop.config import BrokerConfig, ConfigError
from kop.net.tls import server_context
from kop.security.jwks import JwksKeySource, JwksTokenValidator, JwksUnavailable
from kop.security.principal import SslPrincipalMapper
from kop.security.sasl.base import SaslServer, Step
from kop.security.sasl.oauthbearer import OAuthBearerServer
from kop.security.sasl.plain import PlainServer, PulsarTokenCredentials, StaticUsers
from kop.security.sasl.scram import HASHES, ScramCredentialStore, ScramServer
from kop.security.tokens import PulsarTokenValidator

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class ListenerSecurity:
    name: str
    protocol: str  # PLAINTEXT | SSL | SASL_PLAINTEXT | SASL_SSL
    ssl_context: ssl.SSLContext | None

    @property
    def sasl(self) -> bool:
        return self.protocol.startswith("SASL_")


def tls_context(config: BrokerConfig, client_certs: bool) -> ssl.SSLContext:
    """A server context from the tls* keys; `client_certs`: ask for client certificates (SSL listeners)."""
    return server_context(config, client_certs)


def listener_security(config: BrokerConfig) -> dict[str, ListenerSecurity]:
    """Per listener name: its protocol and TLS context (one context per kind, shared by its listeners)."""
    contexts: dict[bool, ssl.SSLContext] = {}
    out: dict[str, ListenerSecurity] = {}
    for lst in config.listeners:
        proto = config.security_protocols[lst.name]
        ctx = None
        if proto in ("SSL", "SASL_SSL"):
            wants_certs = proto == "SSL"
            if wants_certs not in contexts:
                contexts[wants_certs] = tls_context(config, wants_certs)
            ctx = contexts[wants_certs]
        out[lst.name] = ListenerSecurity(lst.name, proto, ctx)
    return out


def principal_mapper(config: BrokerConfig) -> SslPrincipalMapper:
    try:
        return SslPrincipalMapper(config.sslPrincipalMappingRules)
    except ValueError as e:
        raise ConfigError(f"bad value for sslPrincipalMappingRules: {e}") from None


def read_users_file(path: str) -> dict[str, str]:
    """`user=password` lines (`#` comments, blank lines); the password is everything after the first '='."""
    try:
        text = Path(path).read_text()
    except OSError as e:
        raise ConfigError(f"bad value for saslPlainUsersFile: cannot read {path} ({e.strerror})") from None
    users: dict[str, str] = {}
    for lineno, line in enumerate(text.splitlines(), 1):
        s = line.strip()
        if not s or s.startswith("#"):
            continue
        user, sep, password = s.partition("=")
        if not sep or not user.strip():
            raise ConfigError(f"bad value for saslPlainUsersFile: {path}:{lineno}: expected user=password")
        users[user.strip()] = password
    return users


class _Plain(PlainServer):
    """PLAIN over configured users, Pulsar tokens, or both: with both, a password `token:<jwt>` is a token
    (KoP's convention) and any other password is checked against the users file."""

    def __init__(self, users: StaticUsers | None, tokens: PulsarTokenCredentials | None) -> None:
        first = users if users is not None else tokens
        assert first is not None
        super().__init__(first)
        self._users, self._tokens = users, tokens

    async def _evaluate(self, response: bytes) -> Step:
        fields = response.split(b"\0")
        tokens, users = self._tokens, self._users
        if tokens is not None and (users is None or (len(fields) == 3 and fields[2].startswith(b"token:"))):
            self.credentials, self.check_authzid = tokens, False
        elif users is not None:  # (always: one of the two is configured)
            self.credentials, self.check_authzid = users, True
        return await super()._evaluate(response)


class SaslMechanisms:
    """The broker's enabled SASL mechanisms (saslAllowedMechanisms, in order) and their credentials."""

    def __init__(self, config: BrokerConfig, scram_store: ScramCredentialStore | None) -> None:
        self.enabled = config.sasl_mechanisms
        self.token_validator: PulsarTokenValidator | None = None
        if config.token_auth_enabled:
            self.token_validator = PulsarTokenValidator.from_config(config)
        self._users = StaticUsers(read_users_file(config.saslPlainUsersFile)) if config.saslPlainUsersFile else None
        self._tokens = PulsarTokenCredentials(
            self.token_validator, config.kafkaNamespace if config.kafkaEnableMultiTenantMetadata else None,
        ) if self.token_validator else None
        self._scram = scram_store
        self.jwks: JwksKeySource | None = None
        self._oauth: JwksTokenValidator | None = None
        if "OAUTHBEARER" in self.enabled:
            try:
                self.jwks = JwksKeySource(
                    config.saslOauthbearerJwksEndpointUrl, refresh_ms=config.saslOauthbearerJwksEndpointRefreshMs,
                    retry_backoff_ms=config.saslOauthbearerJwksEndpointRetryBackoffMs,
                    retry_backoff_max_ms=config.saslOauthbearerJwksEndpointRetryBackoffMaxMs)
            except ValueError as e:
                raise ConfigError(f"bad value for saslOauthbearerJwksEndpointUrl: {e}") from None
            audience = {a.strip() for a in config.saslOauthbearerExpectedAudience.split(",") if a.strip()}
            self._oauth = JwksTokenValidator(
                self.jwks, expected_audience=audience, expected_issuer=config.saslOauthbearerExpectedIssuer or None,
                clock_skew_seconds=config.saslOauthbearerClockSkewSeconds,
                sub_claim_name=config.saslOauthbearerSubClaimName,
                scope_claim_name=config.saslOauthbearerScopeClaimName)

    def set_scram_store(self, store: ScramCredentialStore) -> None:
        self._scram = store

    async def start(self) -> None:
        """Fetch the JWKS now: a broker that cannot validate OAUTHBEARER tokens must not start (Kafka)."""
        if any(m.startswith("SCRAM-") for m in self.enabled) and self._scram is None:
            raise ConfigError("saslAllowedMechanisms names SCRAM but no credential store was given")
        if self.jwks is not None:
            try:
                await self.jwks.refresh()
            except JwksUnavailable as e:
                raise ConfigError(f"bad value for saslOauthbearerJwksEndpointUrl: {e}") from None
            log.info("OAUTHBEARER: JWKS fetched from %s", self.jwks.url)

    async def stop(self) -> None:
        if self.jwks is not None:
            await self.jwks.wait_background_refresh()

    def server(self, mechanism: str) -> SaslServer | None:
        """A new server for one exchange, None when `mechanism` is not enabled."""
        if mechanism not in self.enabled:
            return None
        if mechanism == "PLAIN":
            return _Plain(self._users, self._tokens)
        if mechanism in HASHES:
            assert self._scram is not None
            return ScramServer(mechanism, self._scram)
        if mechanism == "OAUTHBEARER":
            assert self._oauth is not None
            return OAuthBearerServer(self._oauth)
        return None
