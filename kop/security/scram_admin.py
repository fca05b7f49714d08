"""What DescribeUserScramCredentials (50) and AlterUserScramCredentials (51) do, over a
ScramCredentialStore, with Kafka's per-user checks, error codes and messages (its ScramControlManager and
ScramImage). The API modules only translate requests and responses; authorization (DESCRIBE / ALTER on
the cluster) is theirs too.

Kafka answers in HashMap order; we answer deletions, then upsertions, then failures, each in request order.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from kop.protocol.errors import ErrorCode
from kop.security.sasl.scram import (
    MAX_ITERATIONS,
    MECHANISM_CODES,
    MIN_ITERATIONS,
    ScramCredential,
    ScramCredentialStore,
)

MECHANISMS_BY_CODE = {code: name for name, code in MECHANISM_CODES.items()}
DUPLICATE_ALTER = "A user credential cannot be altered twice in the same request"


@dataclass(frozen=True, slots=True)
class ScramDeletion:
    name: str
    mechanism: int  # 1 SCRAM-SHA-256, 2 SCRAM-SHA-512


@dataclass(frozen=True, slots=True)
class ScramUpsertion:
    name: str
    mechanism: int
    iterations: int
    salt: bytes
    salted_password: bytes  # computed by the client; the password never reaches the broker


@dataclass(frozen=True, slots=True)
class UserResult:
    user: str
    error_code: int = ErrorCode.NONE
    error_message: str | None = None


@dataclass(frozen=True, slots=True)
class DescribedUser:
    user: str
    error_code: int = ErrorCode.NONE
    error_message: str | None = None
    credentials: list[tuple[int, int]] = field(default_factory=list)  # (mechanism code, iterations)


def _check_name_and_mechanism(name: str, mechanism: int) -> UserResult | None:
    if not name:
        return UserResult(name, ErrorCode.UNACCEPTABLE_CREDENTIAL, "Username must not be empty")
    if mechanism not in MECHANISMS_BY_CODE:
        return UserResult(name, ErrorCode.UNSUPPORTED_SASL_MECHANISM, "Unknown SCRAM mechanism")
    return None


async def alter_user_scram_credentials(store: ScramCredentialStore, deletions: list[ScramDeletion],
                                       upsertions: list[ScramUpsertion]) -> list[UserResult]:
    """A user named twice in one request (in either list) fails as a whole with DUPLICATE_RESOURCE and
    none of its changes is made; every other user's valid change is."""
    errors: dict[str, UserResult] = {}
    to_delete: dict[str, ScramDeletion] = {}
    to_upsert: dict[str, ScramUpsertion] = {}
    for d in deletions:
        if d.name in errors:
            continue
        if to_delete.pop(d.name, None) is not None:
            errors[d.name] = UserResult(d.name, ErrorCode.DUPLICATE_RESOURCE, DUPLICATE_ALTER)
            continue
        bad = _check_name_and_mechanism(d.name, d.mechanism)
        if bad is None and await store.get(d.name, MECHANISMS_BY_CODE[d.mechanism]) is None:
            bad = UserResult(d.name, ErrorCode.RESOURCE_NOT_FOUND,
                             "Attempt to delete a user credential that does not exist")
        if bad is not None:
            errors[d.name] = bad
        else:
            to_delete[d.name] = d
    for u in upsertions:
        if u.name in errors:
            continue
        if to_delete.pop(u.name, None) is not None or to_upsert.pop(u.name, None) is not None:
            errors[u.name] = UserResult(u.name, ErrorCode.DUPLICATE_RESOURCE, DUPLICATE_ALTER)
            continue
        bad = _check_name_and_mechanism(u.name, u.mechanism)
        if bad is None and u.iterations < MIN_ITERATIONS:
            bad = UserResult(u.name, ErrorCode.UNACCEPTABLE_CREDENTIAL, "Too few iterations")
        elif bad is None and u.iterations > MAX_ITERATIONS:
            bad = UserResult(u.name, ErrorCode.UNACCEPTABLE_CREDENTIAL, "Too many iterations")
        if bad is not None:
            errors[u.name] = bad
        else:
            to_upsert[u.name] = u
    results = []
    for d in to_delete.values():
        await store.delete(d.name, MECHANISMS_BY_CODE[d.mechanism])
        results.append(UserResult(d.name))
    for u in to_upsert.values():
        mechanism = MECHANISMS_BY_CODE[u.mechanism]
        await store.put(u.name, mechanism, ScramCredential.from_salted_password(
            mechanism, u.salted_password, u.salt, u.iterations))
        results.append(UserResult(u.name))
    return results + list(errors.values())


async def describe_user_scram_credentials(store: ScramCredentialStore, users: list[str] | None) -> list[DescribedUser]:
    """``users`` None or empty: every user with a credential. A user listed twice gets DUPLICATE_RESOURCE,
    an unknown one RESOURCE_NOT_FOUND."""
    known = await store.describe()
    out = []
    if not users:
        for user, mechs in known.items():
            out.append(DescribedUser(user, credentials=[(MECHANISM_CODES[m], i) for m, i in sorted(mechs.items())]))
        return out
    seen: dict[str, bool] = {}
    for u in users:
        seen[u] = u in seen
    for user, duplicated in seen.items():
        if duplicated:
            out.append(DescribedUser(user, ErrorCode.DUPLICATE_RESOURCE,
                                     "Cannot describe SCRAM credentials for the same user twice in a single "
                                     f"request: {user}"))
        elif user not in known:
            out.append(DescribedUser(user, ErrorCode.RESOURCE_NOT_FOUND,
                                     f"Attempt to describe a user credential that does not exist: {user}"))
        else:
            out.append(DescribedUser(user, credentials=[(MECHANISM_CODES[m], i)
                                                        for m, i in sorted(known[user].items())]))
    return out
