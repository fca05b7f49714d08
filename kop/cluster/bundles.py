"""Namespace bundles: which hash range a topic partition falls in, and which live broker should own a range.

Pulsar splits each namespace's 32-bit hash space into bundles (``defaultNumberOfNamespaceBundles``, 4 by
default) and assigns whole bundles to brokers; a partition belongs to the bundle whose range holds the
CRC32 of the partition's full name (``persistent://tenant/ns/topic-partition-<i>``; Pulsar's
NamespaceBundleFactory hashes with CRC32 by default). Ranges are ``[lower, upper)``, except the last one,
which includes 0xffffffff; their names are Pulsar's (``0x40000000_0x80000000``), so the ownership znodes
read like a Pulsar broker's.

Which broker takes an unowned bundle is rendezvous (highest-random-weight) hashing over the live brokers'
ids: every broker computes the same winner from the same live set without talking to the others, and
when a broker dies only its bundles move. Nothing here touches ZooKeeper (kop/cluster/ownership.py does).
"""

from __future__ import annotations

import hashlib
import zlib
from dataclasses import dataclass
from functools import lru_cache

FULL = 0x1_0000_0000  # size of the hash space


@dataclass(frozen=True, slots=True)
class Bundle:
    """One hash range of one namespace (``tenant/namespace``)."""

    namespace: str
    lower: int
    upper: int  # exclusive, except 0xffffffff for the last range (inclusive)

    @property
    def range_name(self) -> str:
        return f"0x{self.lower:08x}_0x{self.upper:08x}"

    def __str__(self) -> str:
        return f"{self.namespace}/{self.range_name}"


@lru_cache(maxsize=256)
def bundles_of(namespace: str, count: int) -> tuple[Bundle, ...]:
    """The `count` equal ranges of a namespace, in order (Pulsar's initial split)."""
    step = FULL // count
    bounds = [i * step for i in range(count)] + [0xFFFFFFFF]
    return tuple(Bundle(namespace, bounds[i], bounds[i + 1]) for i in range(count))


def partition_hash(tenant: str, namespace: str, local: str, partition: int) -> int:
    return zlib.crc32(f"persistent://{tenant}/{namespace}/{local}-partition-{partition}".encode()) & 0xFFFFFFFF


def bundle_for(tenant: str, namespace: str, local: str, partition: int, count: int) -> Bundle:
    """The bundle owning partition `partition` of topic tenant/namespace/local."""
    h = partition_hash(tenant, namespace, local, partition)
    ranges = bundles_of(f"{tenant}/{namespace}", count)
    index = min(h // (FULL // count), count - 1)
    return ranges[index]


def _weight(bundle: Bundle, broker_id: int) -> bytes:
    return hashlib.blake2b(f"{bundle}|{broker_id}".encode(), digest_size=8).digest()


def choose_owner(bundle: Bundle, live_broker_ids: list[int] | set[int]) -> int | None:
    """The live broker that should acquire an unowned bundle (None when no broker is live)."""
    if not live_broker_ids:
        return None
    return max(live_broker_ids, key=lambda b: (_weight(bundle, b), b))
