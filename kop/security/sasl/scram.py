"""SASL/SCRAM-SHA-256 and SCRAM-SHA-512, server side (RFC 5802, RFC 7677; Kafka's KIP-84 flavour).

Four messages: client-first ``n,,n=<user>,r=<cnonce>``, server-first ``r=<cnonce+snonce>,s=<salt>,
i=<iterations>``, client-final ``c=biws,r=<nonce>,p=<proof>``, server-final ``v=<signature>``.

Kafka's choices, kept for its clients and tools: no channel binding (gs2 flag ``n`` only), the name is
used as sent (``=2C``/``=3D`` decoded, no SASLprep), extensions are accepted and ignored except
``tokenauth`` (delegation tokens, which we do not serve, so it fails), at least 4096 iterations, and a
failure is never an ``e=`` message: the exchange ends with SASL_AUTHENTICATION_FAILED and, except for an
authzid mismatch, the generic text, so a client cannot learn whether a user exists. Replays fail because
every exchange draws a fresh server nonce that the client's final message and proof must cover.

The broker keeps only (salt, iterations, StoredKey, ServerKey) per user and mechanism - never the
password, nor the salted password it is derived from.
"""

from __future__ import annotations

import abc
import base64
import binascii
import hashlib
import hmac
import json
import re
import secrets
from collections.abc import Callable
from dataclasses import dataclass

from kop.security.principal import KafkaPrincipal
from kop.security.sasl.base import Challenge, Failure, SaslServer, Step, Success

MIN_ITERATIONS = 4096  # Kafka's ScramMechanism minimum, both mechanisms
MAX_ITERATIONS = 16384  # what AlterUserScramCredentials accepts (Kafka's ScramControlManager)
HASHES = {"SCRAM-SHA-256": "sha256", "SCRAM-SHA-512": "sha512"}
# AlterUserScramCredentials / DescribeUserScramCredentials mechanism codes.
MECHANISM_CODES = {"SCRAM-SHA-256": 1, "SCRAM-SHA-512": 2}


def _hmac(hash_name: str, key: bytes, msg: bytes) -> bytes:
    return hmac.new(key, msg, hash_name).digest()


@dataclass(frozen=True, slots=True)
class ScramCredential:
    """What the broker stores for one user and mechanism (Kafka's UserScramCredentialRecord)."""

    salt: bytes
    iterations: int
    stored_key: bytes
    server_key: bytes

    @classmethod
    def from_salted_password(cls, mechanism: str, salted_password: bytes, salt: bytes,
                             iterations: int) -> ScramCredential:
        """From what AlterUserScramCredentials carries: the client salts the password, we derive keys."""
        h = HASHES[mechanism]
        client_key = _hmac(h, salted_password, b"Client Key")
        return cls(salt, iterations, hashlib.new(h, client_key).digest(),
                   _hmac(h, salted_password, b"Server Key"))

    @classmethod
    def from_password(cls, mechanism: str, password: str, salt: bytes | None = None,
                      iterations: int = MIN_ITERATIONS) -> ScramCredential:
        """For configured users and tests; the password is used as UTF-8 with no SASLprep, as Kafka."""
        salt = salt if salt is not None else secrets.token_bytes(32)
        salted = hashlib.pbkdf2_hmac(HASHES[mechanism], password.encode("utf-8"), salt, iterations)
        return cls.from_salted_password(mechanism, salted, salt, iterations)

    def to_json(self) -> bytes:
        return json.dumps({
            "salt": base64.b64encode(self.salt).decode(), "iterations": self.iterations,
            "stored_key": base64.b64encode(self.stored_key).decode(),
            "server_key": base64.b64encode(self.server_key).decode(),
        }, sort_keys=True).encode()

    @classmethod
    def from_json(cls, data: bytes) -> ScramCredential:
        d = json.loads(data)
        return cls(base64.b64decode(d["salt"]), int(d["iterations"]), base64.b64decode(d["stored_key"]),
                   base64.b64decode(d["server_key"]))


class ScramCredentialStore(abc.ABC):
    """Where SCRAM credentials live; shared by all brokers of a cluster once it is the metadata store."""

    @abc.abstractmethod
    async def get(self, user: str, mechanism: str) -> ScramCredential | None: ...

    @abc.abstractmethod
    async def put(self, user: str, mechanism: str, credential: ScramCredential) -> None: ...

    @abc.abstractmethod
    async def delete(self, user: str, mechanism: str) -> bool:
        """True when there was a credential to delete (else Kafka answers RESOURCE_NOT_FOUND)."""

    @abc.abstractmethod
    async def describe(self) -> dict[str, dict[str, int]]:
        """{user: {mechanism: iterations}} - what DescribeUserScramCredentials shows (no keys)."""


class InMemoryScramCredentialStore(ScramCredentialStore):
    def __init__(self) -> None:
        self._creds: dict[tuple[str, str], ScramCredential] = {}

    async def get(self, user: str, mechanism: str) -> ScramCredential | None:
        return self._creds.get((user, mechanism))

    async def put(self, user: str, mechanism: str, credential: ScramCredential) -> None:
        self._creds[(user, mechanism)] = credential

    async def delete(self, user: str, mechanism: str) -> bool:
        return self._creds.pop((user, mechanism), None) is not None

    async def describe(self) -> dict[str, dict[str, int]]:
        out: dict[str, dict[str, int]] = {}
        for (user, mech), cred in sorted(self._creds.items()):
            out.setdefault(user, {})[mech] = cred.iterations
        return out


# --- message parsing (the grammar Kafka's ScramMessages accepts) -------------------------------------

_SASLNAME = r"(?:[\x01-\x2b\x2d-\x3c\x3e-\x7f]|=2C|=3D)+"  # 0x01-0x7F but ',' and '=', or the two escapes
_PRINTABLE = r"[\x21-\x2b\x2d-\x7e]+"  # printable ASCII but ','
_VALUE = r"[\x01-\x2b\x2d-\x7f]+"
_B64 = r"(?:[A-Za-z0-9/+]{4})*(?:[A-Za-z0-9/+]{3}=|[A-Za-z0-9/+]{2}==)?"
_EXTENSIONS = rf"(?:,[A-Za-z]+={_VALUE})*"
_CLIENT_FIRST = re.compile(
    rf"n,(?:a=(?P<authzid>{_SASLNAME}))?,(?:m={_VALUE},)?n=(?P<name>{_SASLNAME}),r=(?P<nonce>{_PRINTABLE})"
    rf"(?P<ext>{_EXTENSIONS})")
_CLIENT_FINAL = re.compile(
    rf"c=(?P<channel>{_B64}),r=(?P<nonce>{_PRINTABLE}){_EXTENSIONS},p=(?P<proof>{_B64})")


def _unescape_name(saslname: str) -> str:
    return saslname.replace("=2C", ",").replace("=3D", "=")


def _extensions(text: str) -> dict[str, str]:
    return dict(item.split("=", 1) for item in text.split(",") if item)


class ScramServer(SaslServer):
    """One SCRAM exchange. ``nonce_factory`` exists for tests only (a fixed server nonce)."""

    def __init__(self, mechanism: str, store: ScramCredentialStore, *,
                 nonce_factory: Callable[[], str] | None = None) -> None:
        super().__init__()
        if mechanism not in HASHES:
            raise ValueError(f"not a SCRAM mechanism: {mechanism}")
        self.mechanism = mechanism
        self._hash = HASHES[mechanism]
        self.store = store
        self._nonce_factory = nonce_factory or (lambda: secrets.token_urlsafe(24))
        self._state = "client-first"
        self._user = ""
        self._credential: ScramCredential | None = None
        self._client_first_bare = ""
        self._gs2_header = ""
        self._server_first = ""
        self._nonce = ""

    async def _evaluate(self, response: bytes) -> Step:
        if self._state == "client-first":
            return await self._client_first(response)
        return self._client_final(response)

    async def _client_first(self, response: bytes) -> Step:
        text = response.decode("utf-8", "replace")
        m = _CLIENT_FIRST.fullmatch(text)
        if m is None:
            # Covers 'y'/'p=' gs2 flags (channel binding, which Kafka never offers) as well as garbage.
            return Failure(f"Invalid SCRAM client first message format ({len(response)} bytes)")
        if "tokenauth" in _extensions(m.group("ext")[1:]):
            return Failure("Token Authentication failed: delegation tokens are not supported")
        self._user = _unescape_name(m.group("name"))
        credential = await self.store.get(self._user, self.mechanism)
        if credential is None:
            return Failure("Authentication failed: Invalid user credentials")
        authzid = m.group("authzid")
        if authzid and _unescape_name(authzid) != self._user:
            return Failure("Authentication failed: Client requested an authorization id that is different from "
                           "username", public=True)
        if credential.iterations < MIN_ITERATIONS:
            return Failure(f"Iterations {credential.iterations} is less than the minimum {MIN_ITERATIONS} for "
                           f"{self.mechanism}")
        self._credential = credential
        end_of_gs2 = text.index(",", 2) + 1  # 'n,,' or 'n,a=<authzid>,' (an authzid holds no bare ',')
        self._gs2_header, self._client_first_bare = text[:end_of_gs2], text[end_of_gs2:]
        self._nonce = m.group("nonce") + self._nonce_factory()
        self._server_first = (f"r={self._nonce},s={base64.b64encode(credential.salt).decode()},"
                              f"i={credential.iterations}")
        self._state = "client-final"
        return Challenge(self._server_first.encode())

    def _client_final(self, response: bytes) -> Step:
        assert self._credential is not None
        text = response.decode("utf-8", "replace")
        m = _CLIENT_FINAL.fullmatch(text)
        if m is None:
            return Failure(f"Invalid SCRAM client final message format ({len(response)} bytes)")
        if m.group("nonce") != self._nonce:
            # RFC 5802: exactly the combined nonce of server-first (Kafka only checks that the nonce
            # ends with it); every real client sends exactly that.
            return Failure("Invalid client nonce in the final client message.")
        try:
            channel = base64.b64decode(m.group("channel"), validate=True)
            proof = base64.b64decode(m.group("proof"), validate=True)
        except binascii.Error:
            return Failure("Invalid SCRAM client final message format (base64)")
        if channel != self._gs2_header.encode():
            return Failure("Invalid SCRAM channel binding: expected the gs2 header of the first message")
        without_proof = text[: m.start("proof") - 3]
        auth_message = f"{self._client_first_bare},{self._server_first},{without_proof}".encode()
        cred = self._credential
        client_signature = _hmac(self._hash, cred.stored_key, auth_message)
        if len(proof) != len(client_signature):
            return Failure("Invalid client credentials")
        client_key = bytes(a ^ b for a, b in zip(proof, client_signature, strict=True))
        if not hmac.compare_digest(hashlib.new(self._hash, client_key).digest(), cred.stored_key):
            return Failure("Invalid client credentials")
        server_signature = _hmac(self._hash, cred.server_key, auth_message)
        self._credential = None
        return Success(KafkaPrincipal.user(self._user), b"v=" + base64.b64encode(server_signature))
