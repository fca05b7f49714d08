"""OAuth JWT validation against a JWKS endpoint, as Kafka's broker does it (KIP-768).

The broker options keep Kafka's meaning: ``sasl.oauthbearer.jwks.endpoint.url`` (http(s), or ``file:``),
``...jwks.endpoint.refresh.ms`` (3600000), ``...jwks.endpoint.retry.backoff.ms`` (100) and
``...retry.backoff.max.ms`` (10000), ``sasl.oauthbearer.expected.audience`` (any one of a set),
``sasl.oauthbearer.expected.issuer``, ``sasl.oauthbearer.clock.skew.seconds`` (30),
``sasl.oauthbearer.sub.claim.name`` (sub) and ``sasl.oauthbearer.scope.claim.name`` (scope).

A token must be signed (never ``alg: none``, never an HMAC algorithm against a public JWKS), and carry
``exp``, ``iat`` and the subject claim. Keys are fetched once at start, again every refresh interval (in the
background: validations keep using the keys at hand, and a failed refresh keeps them), and at once when a
token names a ``kid`` the cache does not know - at most once a minute per unknown kid
(Kafka's rate limit), so a client cannot make the broker hammer the identity provider with made-up kids.
The fetch runs on the event loop (aiohttp), never blocking it the way PyJWT's own PyJWKClient would.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlparse

import aiohttp
import jwt

log = logging.getLogger(__name__)

ASYMMETRIC_ALGORITHMS = ["RS256", "RS384", "RS512", "PS256", "PS384", "PS512", "ES256", "ES384", "ES512",
                         "EdDSA"]
MISSING_KID_RETRY_S = 60.0  # Kafka's RefreshingHttpsJwks.MISSING_KEY_ID_CACHE_IN_FLIGHT_MS
MISSING_KID_MEMORY = 16  # how many unknown kids are remembered for that limit (Kafka: 16)


class JwksUnavailable(Exception):
    """The key set could not be fetched (after the retries)."""


class JwksKeySource:
    """The signing keys of an identity provider, cached and refreshed. ``clock`` is injectable so tests
    can move time instead of waiting for it."""

    def __init__(self, url: str, *, refresh_ms: int = 3_600_000, retry_backoff_ms: int = 100,
                 retry_backoff_max_ms: int = 10_000, ssl: Any = None,
                 clock: Callable[[], float] = time.monotonic) -> None:
        scheme = urlparse(url).scheme
        if scheme not in ("http", "https", "file"):
            raise ValueError(f"JWKS endpoint must be an http(s) or file URL, not {url!r}")
        self.url = url
        self.refresh_s = refresh_ms / 1000
        self.retry_backoff_s = retry_backoff_ms / 1000
        self.retry_backoff_max_s = retry_backoff_max_ms / 1000
        self._ssl = ssl
        self._clock = clock
        self._keys: dict[str, jwt.PyJWK] = {}
        self._unnamed: list[jwt.PyJWK] = []  # keys without a kid: tried for tokens without one
        self._fetched_at: float | None = None
        self._missing: OrderedDict[str, float] = OrderedDict()
        self._lock = asyncio.Lock()
        self._background: asyncio.Task[None] | None = None
        self.fetches = 0  # for metrics and tests

    async def _download(self) -> bytes:
        if self.url.startswith("file:"):
            return await asyncio.to_thread(Path(unquote(urlparse(self.url).path)).read_bytes)
        timeout = aiohttp.ClientTimeout(total=30)
        async with aiohttp.ClientSession(timeout=timeout) as session, \
                session.get(self.url, ssl=self._ssl, headers={"Accept": "application/json"}) as resp:
            if resp.status != 200:
                raise JwksUnavailable(f"JWKS endpoint answered HTTP {resp.status}")
            return await resp.read()

    async def refresh(self) -> None:
        """Fetch the key set, retrying with doubling back-off until retry.backoff.max.ms is spent.
        Callers that queued behind a fetch in progress take its result instead of fetching again."""
        seen = self._fetched_at
        async with self._lock:
            if self._fetched_at != seen:
                return
            delay, waited = self.retry_backoff_s, 0.0
            while True:
                self.fetches += 1
                try:
                    document = json.loads(await self._download())
                    keys = jwt.PyJWKSet.from_dict(document).keys
                    break
                except (TimeoutError, OSError, aiohttp.ClientError, ValueError, JwksUnavailable, jwt.PyJWTError) as e:
                    if waited + delay > self.retry_backoff_max_s:
                        raise JwksUnavailable(f"cannot fetch the JWKS from {self.url}: {e}") from e
                    log.warning("JWKS fetch from %s failed (%s); retrying in %.1fs", self.url, e, delay)
                    await asyncio.sleep(delay)
                    waited += delay
                    delay *= 2
            self._keys = {k.key_id: k for k in keys if k.key_id}
            self._unnamed = [k for k in keys if not k.key_id]
            self._fetched_at = self._clock()

    def _stale(self) -> bool:
        return self._fetched_at is not None and self._clock() - self._fetched_at >= self.refresh_s

    async def _refresh_in_background(self) -> None:
        try:
            await self.refresh()
        except JwksUnavailable as e:
            # Kafka's scheduled refresh does the same: keep the keys we have, try again next interval.
            log.warning("scheduled JWKS refresh failed, keeping the previous keys: %s", e)
            self._fetched_at = self._clock()

    async def wait_background_refresh(self) -> None:
        """For tests and shutdown: let a scheduled refresh in progress finish."""
        if self._background is not None:
            await self._background

    async def key(self, kid: str | None) -> jwt.PyJWK | None:
        if self._fetched_at is None:
            await self.refresh()  # the first use (the broker should call refresh() at start-up)
        elif self._stale() and (self._background is None or self._background.done()):
            # The scheduled refresh: done in the background, so that no client waits for the IdP while
            # the keys we already have are still good.
            self._background = asyncio.get_running_loop().create_task(self._refresh_in_background())
        if kid is None:
            return self._unnamed[0] if len(self._unnamed) == 1 else None
        found = self._keys.get(kid)
        if found is not None:
            return found
        kid = kid[:1000]  # Kafka ignores longer kids for its bookkeeping; so do we
        now = self._clock()
        last = self._missing.get(kid)
        if last is not None and now - last < MISSING_KID_RETRY_S:
            return None  # asked recently: no new fetch
        self._missing[kid] = now
        self._missing.move_to_end(kid)
        while len(self._missing) > MISSING_KID_MEMORY:
            self._missing.popitem(last=False)
        await self.refresh()
        return self._keys.get(kid)


@dataclass(frozen=True, slots=True)
class OAuthToken:
    principal: str
    scopes: frozenset[str]
    expires_at_ms: int
    issued_at_ms: int
    claims: dict[str, Any] = field(default_factory=dict)


class TokenRejected(Exception):
    """Why a token was refused (for the log; the client only hears ``invalid_token``)."""


class JwksTokenValidator:
    def __init__(self, keys: JwksKeySource, *, expected_audience: set[str] | None = None,
                 expected_issuer: str | None = None, clock_skew_seconds: int = 30,
                 sub_claim_name: str = "sub", scope_claim_name: str = "scope") -> None:
        self.keys = keys
        self.expected_audience = set(expected_audience or ())
        self.expected_issuer = expected_issuer
        self.clock_skew_seconds = clock_skew_seconds
        self.sub_claim_name = sub_claim_name
        self.scope_claim_name = scope_claim_name

    async def validate(self, token: str) -> OAuthToken:
        try:
            header = jwt.get_unverified_header(token)
        except jwt.PyJWTError as e:
            raise TokenRejected(f"malformed token: {type(e).__name__}") from e
        alg = header.get("alg")
        if alg not in ASYMMETRIC_ALGORITHMS:
            raise TokenRejected(f"algorithm {alg!r} is not accepted")
        try:
            key = await self.keys.key(header.get("kid"))
        except JwksUnavailable as e:
            raise TokenRejected(str(e)) from e
        if key is None:
            raise TokenRejected(f"no key with kid {header.get('kid')!r} in the JWKS")
        if key.algorithm_name and key.algorithm_name != alg:
            raise TokenRejected(f"token alg {alg} does not match the key's {key.algorithm_name}")
        required = ["exp", "iat", self.sub_claim_name]
        try:
            claims = jwt.decode(
                token, key.key, algorithms=[alg], leeway=self.clock_skew_seconds,
                audience=sorted(self.expected_audience) or None, issuer=self.expected_issuer,
                options={"require": required, "verify_aud": bool(self.expected_audience)},
            )
        except jwt.PyJWTError as e:
            raise TokenRejected(f"could not validate the access token: {type(e).__name__}: {e}") from e
        sub = claims.get(self.sub_claim_name)
        if not isinstance(sub, str) or not sub.strip():
            raise TokenRejected(f"{self.sub_claim_name} value must be a non-empty string")
        raw_scope = claims.get(self.scope_claim_name)
        # Kafka's broker takes a string scope claim as one scope and a list as many.
        scopes = [raw_scope] if isinstance(raw_scope, str) else raw_scope if isinstance(raw_scope, list) else []
        if len(set(scopes)) != len(scopes) or not all(isinstance(s, str) and s.strip() for s in scopes):
            raise TokenRejected(f"{self.scope_claim_name} value must hold distinct non-empty strings")
        exp, iat = claims["exp"], claims["iat"]
        if not isinstance(exp, int | float) or exp < 0 or not isinstance(iat, int | float) or iat < 0:
            raise TokenRejected("exp and iat must be non-negative numbers")
        return OAuthToken(sub, frozenset(scopes), int(exp * 1000), int(iat * 1000), claims)
