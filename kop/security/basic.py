"""Pulsar's basic authentication (AuthenticationProviderBasic): htpasswd users for the Pulsar port and admin REST.

The users come from `basicAuthConf`, read the way Pulsar's provider reads it so that an operator's file works
unchanged: a `data:` or `file:` URL, else a path that exists, else bare base64. Each line is `user:hash`; a line
with another number of ':'-separated fields stops start-up, as Pulsar's "The format of the password auth conf file
is invalid" does (blank lines are skipped here, where Pulsar would refuse them too).

Which hashes verify is Pulsar's rule, not htpasswd's: a hash starting `$apr1$` is Apache's MD5 crypt
(`htpasswd -m`, `openssl passwd -apr1`); any other hash is checked as traditional DES crypt with its first two
characters as the salt (`htpasswd -d`). bcrypt (`htpasswd -B`), `$1$`, `$5$` and `$6$` hashes never verify on
Pulsar's broker, so they never verify here either; loading warns about such users instead of failing, since
Pulsar starts with them. apr1 is computed here (hashlib's MD5, the algorithm is public and short); DES crypt comes
from Python's `crypt` module, which Python 3.13 removed: there a DES user stops start-up, saying to use apr1.

Credentials arrive as `user:password` (CONNECT's auth_data with auth_method_name "basic", pulsar-client's
AuthenticationBasic) or as an HTTP `Authorization: Basic <base64 of user:password>` header; like Pulsar, a
password containing ':' is refused (Pulsar splits on every ':', dropping trailing empty fields as Java's split does:
`alice:hunter2:` is alice with `hunter2`).
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import logging
import warnings
from collections.abc import Callable
from pathlib import Path
from types import ModuleType

from kop.config import ConfigError
from kop.security.tokens import read_key_value

log = logging.getLogger(__name__)

APR1 = "$apr1$"
_ITOA64 = "./0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"
FAILED = "Unknown user or invalid password"  # Pulsar's one message for both, so users cannot be probed


class BasicAuthFailed(Exception):
    """Refused basic credentials; the message never contains the password."""


def _to64(value: int, n: int) -> str:
    out = []
    for _ in range(n):
        out.append(_ITOA64[value & 0x3F])
        value >>= 6
    return "".join(out)


def apr1_crypt(password: bytes, salt: str) -> str:
    """Apache's MD5 crypt (`$apr1$<salt>$<22 chars>`): the FreeBSD MD5 crypt with the magic `$apr1$`. The salt is
    cut at 8 characters, as every implementation does."""
    salt_b = salt[:8].encode()
    magic = APR1.encode()
    alt = hashlib.md5(password + salt_b + password).digest()
    ctx = password + magic + salt_b
    for remaining in range(len(password), 0, -16):
        ctx += alt[:min(16, remaining)]
    i = len(password)
    while i:
        ctx += b"\0" if i & 1 else password[:1]
        i >>= 1
    final = hashlib.md5(ctx).digest()
    for r in range(1000):  # the 1000 rounds that make each guess cost
        step = password if r & 1 else final
        if r % 3:
            step += salt_b
        if r % 7:
            step += password
        step += final if r & 1 else password
        final = hashlib.md5(step).digest()
    encoded = "".join(_to64(final[a] << 16 | final[b] << 8 | final[c], 4)
                      for a, b, c in ((0, 6, 12), (1, 7, 13), (2, 8, 14), (3, 9, 15), (4, 10, 5)))
    return f"{APR1}{salt[:8]}${encoded}{_to64(final[11], 2)}"


def _crypt_module() -> ModuleType | None:
    """Python's `crypt` (glibc's crypt(3)) where it still exists (Python < 3.13); its deprecation warning is
    expected and says nothing to an operator."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        try:
            import crypt
        except ImportError:
            return None
    return crypt


def des_crypt_function() -> Callable[[str, str], str] | None:
    module = _crypt_module()
    return None if module is None else module.crypt


def verify(stored: str, password: str) -> bool:
    """Pulsar's check of one password against one stored hash (module docstring)."""
    if stored.startswith(APR1):
        parts = stored.split("$")
        return len(parts) == 4 and hmac.compare_digest(stored, apr1_crypt(password.encode(), parts[2]))
    crypt_fn = des_crypt_function()
    if crypt_fn is None or len(stored) != 13:  # DES crypt is 2 salt + 11 hash characters; others never match
        return False
    computed = crypt_fn(password, stored[:2])
    return computed is not None and hmac.compare_digest(stored, computed)


def java_split(text: str, separator: str) -> list[str]:
    """Java's String.split, which Pulsar's provider uses: trailing empty fields are dropped, so `alice:hunter2:`
    is alice's password `hunter2` there, and must be here too."""
    fields = text.split(separator)
    while fields and fields[-1] == "":
        fields.pop()
    return fields


def read_conf(value: str) -> bytes:
    """basicAuthConf's bytes, in Pulsar's order: data:/file: URL, an existing path, base64."""
    value = value.strip()
    if value.startswith(("data:", "file:")):
        return read_key_value(value)
    if Path(value).exists():
        return Path(value).read_bytes()
    try:
        return base64.b64decode(value, validate=True)
    except binascii.Error:
        raise ValueError("not a data: or file: URL, an existing file, or base64") from None


def parse_users(text: str) -> dict[str, str]:
    """`user:hash` lines -> {user: hash}; ConfigError on a line Pulsar would refuse (module docstring)."""
    users: dict[str, str] = {}
    has_des = des_crypt_function() is not None
    for number, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        fields = java_split(line.rstrip("\r"), ":")
        if len(fields) != 2 or not fields[0] or not fields[1]:
            raise ConfigError(f"bad value for basicAuthConf: line {number} is not user:hash (The format of the "
                              "password auth conf file is invalid)")
        user, stored = fields
        if not stored.startswith(APR1) and len(stored) == 13 and not has_des:
            raise ConfigError(f"bad value for basicAuthConf: user {user!r} has a DES crypt hash, which needs Python's "
                              "crypt module (gone from Python 3.13); give it an $apr1$ hash (htpasswd -m)")
        if not stored.startswith(APR1) and len(stored) != 13:
            log.warning("basicAuthConf: user %r has a hash Pulsar's basic provider never accepts (only $apr1$ and "
                        "DES crypt are): that user cannot authenticate", user)
        users[user] = stored
    return users


class BasicUsers:
    """The htpasswd users of basicAuthConf, checking `user:password` credentials."""

    def __init__(self, users: dict[str, str]) -> None:
        self.users = users

    @classmethod
    def from_config(cls, conf: str) -> BasicUsers:
        try:
            data = read_conf(conf)
        except (OSError, ValueError) as e:
            raise ConfigError(f"bad value for basicAuthConf: {e}") from None
        return cls(parse_users(data.decode("utf-8", "replace")))

    def authenticate(self, credentials: str) -> str:
        """The user of `user:password`, or BasicAuthFailed."""
        fields = java_split(credentials, ":")
        if len(fields) != 2:
            raise BasicAuthFailed("Base64 decoded params are invalid")  # Pulsar's words, for either transport
        user, password = fields
        stored = self.users.get(user)
        if stored is None or not verify(stored, password):
            raise BasicAuthFailed(FAILED)
        return user

    def authenticate_header(self, header: str | None) -> str:
        """The user of an `Authorization: Basic <base64>` header (HTTP), or BasicAuthFailed."""
        if not header or not header.upper().startswith("BASIC "):
            raise BasicAuthFailed('Authentication token has to be started with "Basic "')
        parts = java_split(header, " ")
        if len(parts) != 2:
            raise BasicAuthFailed("Base64 encoded token is not found")
        try:
            decoded = base64.b64decode(parts[1], validate=True).decode("utf-8")
        except (binascii.Error, UnicodeDecodeError) as e:
            raise BasicAuthFailed(f"Base64 decoding is failure: {e}") from None
        return self.authenticate(decoded)
