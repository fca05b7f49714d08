"""Pulsar's token authentication (AuthenticationProviderToken), as KoP accepted it.

One validator serves every place a Pulsar token arrives: KoP's SASL/PLAIN with password ``token:<jwt>``,
the admin REST's ``Authorization: Bearer``, and later the Pulsar handler's CommandConnect. The keys and
their formats are Pulsar's, so an operator's broker.conf and the keys made by ``bin/pulsar tokens`` work
unchanged: ``tokenSecretKey`` (raw HMAC secret bytes) or ``tokenPublicKey`` (DER SubjectPublicKeyInfo;
PEM is accepted too), each given as ``file:<path>``, ``data:;base64,<b64>`` or bare base64.
"""

from __future__ import annotations

import base64
import binascii
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import unquote, urlparse

import jwt
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa

from kop.config import ConfigError

if TYPE_CHECKING:
    from kop.config import BrokerConfig

HMAC_ALGORITHMS = ["HS256", "HS384", "HS512"]
RSA_ALGORITHMS = ["RS256", "RS384", "RS512", "PS256", "PS384", "PS512"]
EC_ALGORITHMS = ["ES256", "ES384", "ES512"]


class InvalidToken(Exception):
    """The token was refused; the message says why (never the token itself) and is safe to log."""


def read_key_value(value: str) -> bytes:
    """The bytes behind a Pulsar key setting: ``file:///abs/path`` or ``file:relative/path``,
    ``data:;base64,<b64>`` (any media type before the ``;``), or a bare base64 string."""
    value = value.strip()
    if value.startswith("file:"):
        parsed = urlparse(value)
        path = unquote(parsed.path) if parsed.netloc in ("", "localhost") and parsed.path else value[5:]
        return Path(path).read_bytes()
    if value.startswith("data:"):
        header, sep, payload = value.partition(",")
        if not sep:
            raise ValueError("data: key value without a ','")
        if header.endswith(";base64"):
            return base64.b64decode(payload)
        return unquote(payload).encode()
    try:
        return base64.b64decode(value, validate=True)
    except binascii.Error as e:
        raise ValueError("a key must be file:..., data:;base64,... or base64") from e


def load_public_key(data: bytes) -> rsa.RSAPublicKey | ec.EllipticCurvePublicKey:
    """Pulsar writes DER SubjectPublicKeyInfo (``tokens create-key-pair``); PEM is accepted as well."""
    if data.lstrip().startswith(b"-----BEGIN"):
        key = serialization.load_pem_public_key(data)
    else:
        key = serialization.load_der_public_key(data)
    if not isinstance(key, rsa.RSAPublicKey | ec.EllipticCurvePublicKey):
        raise ValueError(f"unsupported token public key type {type(key).__name__}")
    return key


@dataclass(frozen=True, slots=True)
class ValidatedToken:
    role: str  # the role claim (default ``sub``): the principal is User:<role>
    expires_at_ms: int | None  # None: the token has no ``exp`` and never expires (Pulsar's rule)
    claims: dict[str, Any] = field(default_factory=dict)


class PulsarTokenValidator:
    """Validates a Pulsar JWT: a signature by the configured key (unsigned tokens are refused), ``exp`` and
    ``nbf`` when present (no ``exp`` = never expires; ``iat`` not required), the role claim present as a
    string (or a list whose first element is one), and, with ``audience_claim``, that claim naming
    ``audience``. The secret key wins when both keys are configured, as in Pulsar."""

    def __init__(self, *, secret_key: str | bytes | None = None, public_key: str | bytes | None = None,
                 public_alg: str = "RS256", auth_claim: str = "sub", audience_claim: str | None = None,
                 audience: str | None = None, allowed_clock_skew_seconds: int = 0) -> None:
        if (audience_claim is None) != (audience is None):
            raise ValueError("tokenAudienceClaim and tokenAudience must be set together")
        if secret_key is not None:
            self._key: Any = read_key_value(secret_key) if isinstance(secret_key, str) else secret_key
            self._algorithms = HMAC_ALGORITHMS
        elif public_key is not None:
            raw = read_key_value(public_key) if isinstance(public_key, str) else public_key
            self._key = load_public_key(raw)
            family = RSA_ALGORITHMS if isinstance(self._key, rsa.RSAPublicKey) else EC_ALGORITHMS
            if public_alg not in family:
                raise ValueError(f"tokenPublicAlg {public_alg} does not fit a {type(self._key).__name__}")
            self._algorithms = family
        else:
            raise ValueError("token authentication needs tokenSecretKey or tokenPublicKey")
        self.auth_claim = auth_claim
        self.audience_claim = audience_claim
        self.audience = audience
        self.leeway = allowed_clock_skew_seconds

    @classmethod
    def from_config(cls, config: BrokerConfig) -> PulsarTokenValidator:
        """The validator of a broker's token keys (tokenSecretKey/tokenPublicKey and their companions), for
        the Kafka listeners, the Pulsar port and the admin REST alike; ConfigError when none is usable."""
        try:
            return cls(secret_key=config.tokenSecretKey or None, public_key=config.tokenPublicKey or None,
                       public_alg=config.tokenPublicAlg, auth_claim=config.tokenAuthClaim,
                       audience_claim=config.tokenAudienceClaim or None, audience=config.tokenAudience or None,
                       allowed_clock_skew_seconds=config.tokenAllowedClockSkewSeconds)
        except (OSError, ValueError) as e:
            raise ConfigError(f"bad value for tokenSecretKey/tokenPublicKey: {e}") from None

    def validate(self, token: str) -> ValidatedToken:
        try:
            claims = jwt.decode(
                token, self._key, algorithms=self._algorithms, leeway=self.leeway,
                options={"require": [], "verify_aud": False, "verify_iat": False},
            )
        except jwt.ExpiredSignatureError as e:
            raise InvalidToken("token has expired") from e
        except jwt.ImmatureSignatureError as e:
            raise InvalidToken("token is not valid yet (nbf)") from e
        except jwt.InvalidAlgorithmError as e:
            raise InvalidToken("token is signed with an algorithm the key does not allow") from e
        except jwt.InvalidSignatureError as e:
            raise InvalidToken("token signature does not verify") from e
        except jwt.PyJWTError as e:
            raise InvalidToken(f"token is malformed: {type(e).__name__}") from e
        role = claims.get(self.auth_claim)
        if isinstance(role, list):
            role = role[0] if role else None
        if not isinstance(role, str) or not role:
            raise InvalidToken(f"token has no {self.auth_claim!r} claim naming a role")
        if self.audience_claim is not None:
            aud = claims.get(self.audience_claim)
            auds = aud if isinstance(aud, list) else [aud]
            if self.audience not in auds:
                raise InvalidToken(f"token's {self.audience_claim!r} claim does not name this broker")
        exp = claims.get("exp")
        return ValidatedToken(role, int(exp * 1000) if isinstance(exp, int | float) else None, claims)


def bearer_token(authorization_header: str | None) -> str | None:
    """The token of an HTTP ``Authorization: Bearer <token>`` header (scheme case-insensitive)."""
    if not authorization_header:
        return None
    scheme, _, token = authorization_header.strip().partition(" ")
    if scheme.lower() != "bearer" or not token.strip():
        return None
    return token.strip()
