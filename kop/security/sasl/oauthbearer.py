"""SASL/OAUTHBEARER (RFC 7628), server side, with Kafka's message forms.

The client's one message: ``n,[a=<authzid>],^Aauth=Bearer <jwt>[^Akey=value...]^A^A`` (^A = 0x01). A token
that validates ends the exchange with empty bytes and the principal of its subject claim; its ``exp`` is
the credential lifetime (KIP-368). A token that does not is *not* an immediate failure: as RFC 7628 and
Kafka do, the server answers a JSON error challenge (``{"status":"invalid_token"}``), the client answers a
single 0x01, and only then does the exchange fail, with that JSON as the message the client sees.
"""

from __future__ import annotations

import re

from kop.security.jwks import JwksTokenValidator, TokenRejected
from kop.security.principal import KafkaPrincipal
from kop.security.sasl.base import Challenge, Failure, SaslServer, Step, Success

MECHANISM = "OAUTHBEARER"
_SEP = "\x01"
_SASLNAME = r"(?:[\x01-\x2b\x2d-\x3c\x3e-\x7f]|=2C|=3D)+"
_KVPAIRS = r"(?:[A-Za-z]+=[\x21-\x7e \t\r\n]+\x01)*"
_INITIAL = re.compile(rf"n,(?:a=(?P<authzid>{_SASLNAME}))?,\x01(?P<kv>{_KVPAIRS})\x01")
_AUTH = re.compile(r"(?P<scheme>\w+) +(?P<token>[-_~+/.a-zA-Z0-9]+=*)")


def error_json(status: str, scope: str | None = None, openid_configuration: str | None = None) -> str:
    """Kafka's error challenge, byte for byte (its own string formatting, including the space)."""
    text = f'{{"status":"{status}"'
    if scope is not None:
        text += f', "scope":"{scope}"'
    if openid_configuration is not None:
        text += f', "openid-configuration":"{openid_configuration}"'
    return text + "}"


class OAuthBearerServer(SaslServer):
    mechanism = MECHANISM

    def __init__(self, validator: JwksTokenValidator) -> None:
        super().__init__()
        self.validator = validator
        self._error: str | None = None
        self.rejection: str | None = None  # why the token was refused, for the broker's log

    async def _evaluate(self, response: bytes) -> Step:
        if response == b"\x01" and self._error is not None:
            return Failure(self._error, public=True)
        self._error = None
        m = _INITIAL.fullmatch(response.decode("utf-8", "replace"))
        if m is None:
            return Failure("Invalid OAUTHBEARER client first message")
        pairs = dict(item.split("=", 1) for item in m.group("kv").split(_SEP) if item)
        auth = pairs.pop("auth", None)
        if auth is None:
            return Failure("Invalid OAUTHBEARER client first message: 'auth' not specified")
        a = _AUTH.fullmatch(auth)
        if a is None:
            return Failure("Invalid OAUTHBEARER client first message: invalid 'auth' format")
        if a.group("scheme").lower() != "bearer":
            return Failure("Invalid scheme in OAUTHBEARER client first message")
        try:
            token = await self.validator.validate(a.group("token"))
        except TokenRejected as e:
            self.rejection = str(e)
            self._error = error_json("invalid_token")
            return Challenge(self._error.encode())
        authzid = m.group("authzid")
        if authzid and authzid != token.principal:
            return Failure(
                f"Authentication failed: Client requested an authorization id ({authzid}) that is different "
                f"from the token's principal name ({token.principal})", public=True)
        return Success(KafkaPrincipal.user(token.principal), b"", token.expires_at_ms, extensions=pairs)
