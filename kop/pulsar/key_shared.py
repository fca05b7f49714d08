"""Key_Shared: which consumer of a subscription gets the messages of a key.

Pulsar's rules, as far as we serve them: the sticky key of an entry is its ordering key, else its partition key
(base64-decoded when flagged), else ``NONE_KEY``; its hash is Murmur3 x86_32 (seed 0) of the key, masked to 31 bits,
modulo 65536. AUTO_SPLIT (the default) places every consumer on a consistent-hash ring with 100 points (the hash of
``consumer name + index``) and gives a hash to the first point at or after it; STICKY uses the hash ranges the
consumer declared (``keySharedMeta.hashRanges``; an overlap with another consumer is refused ConsumerAssignError).

How the dispatcher (kop/pulsar/subscription.py) keeps a key's order: an entry goes only to its key's consumer; an
entry whose hash still has unacknowledged entries at another consumer waits until they are acknowledged (or that
consumer leaves and they are replayed first) - Pulsar 4's "draining hashes", without its look-ahead: the first entry
that cannot go holds back the ones after it (a consumer out of permits slows the others down).
Differences from Pulsar: batches are dispatched whole by their entry key, as in Pulsar, and a Kafka producer's
batch mixes keys - its entry has no key of its own (kop/pulsar/convert.py), so it goes by ``NONE_KEY``; key
order holds per key only for entries of one key (Pulsar producers: unbatched, or ``BatchingType.KeyBased``).
"""

from __future__ import annotations

import base64
import bisect
from typing import TYPE_CHECKING, Generic, Protocol, TypeVar

if TYPE_CHECKING:
    from kop.pulsar.codec.pulsar_api_pb2 import MessageMetadata

RANGE = 65536
POINTS_PER_CONSUMER = 100
NONE_KEY = b"NONE_KEY"
_M = 0xFFFFFFFF


def murmur3_32(data: bytes, seed: int = 0) -> int:
    """MurmurHash3 x86_32 (what Pulsar's Murmur3_32Hash uses)."""
    c1, c2 = 0xCC9E2D51, 0x1B873593
    h = seed & _M
    n = len(data)
    body = n - n % 4
    for i in range(0, body, 4):
        k = int.from_bytes(data[i:i + 4], "little")
        k = (k * c1) & _M
        k = ((k << 15) | (k >> 17)) & _M
        h ^= (k * c2) & _M
        h = ((h << 13) | (h >> 19)) & _M
        h = (h * 5 + 0xE6546B64) & _M
    k = 0
    tail = data[body:]
    if len(tail) >= 3:
        k ^= tail[2] << 16
    if len(tail) >= 2:
        k ^= tail[1] << 8
    if tail:
        k ^= tail[0]
        k = (k * c1) & _M
        k = ((k << 15) | (k >> 17)) & _M
        h ^= (k * c2) & _M
    h ^= n
    h ^= h >> 16
    h = (h * 0x85EBCA6B) & _M
    h ^= h >> 13
    h = (h * 0xC2B2AE35) & _M
    h ^= h >> 16
    return h


def sticky_key(metadata: MessageMetadata) -> bytes:
    if metadata.HasField("ordering_key") and metadata.ordering_key:
        return bytes(metadata.ordering_key)
    if metadata.HasField("partition_key") and metadata.partition_key:
        if metadata.partition_key_b64_encoded:
            try:
                return base64.b64decode(metadata.partition_key)
            except ValueError:
                pass
        return metadata.partition_key.encode()
    return NONE_KEY


def key_hash(key: bytes) -> int:
    return (murmur3_32(key) & 0x7FFFFFFF) % RANGE


class Named(Protocol):
    @property
    def name(self) -> str: ...


C = TypeVar("C", bound=Named)


class Selector(Generic[C]):
    """The consumer (any object with a ``name``) that owns a hash."""

    def __init__(self) -> None:
        self._ring: list[tuple[int, int, C]] = []  # (point, tie-break, consumer), sorted
        self._ranges: list[tuple[int, int, C]] = []  # STICKY: (start, end inclusive, consumer)
        self._seq = 0

    def add(self, consumer: C, ranges: list[tuple[int, int]] | None) -> str | None:
        """Place a consumer; for STICKY (`ranges` given) an error text when a range is invalid or taken."""
        if ranges is not None:
            for start, end in ranges:
                if not 0 <= start <= end < RANGE:
                    return f"Key_Shared hash range [{start}, {end}] is outside [0, {RANGE - 1}]"
                for s, e, other in self._ranges:
                    if start <= e and s <= end:
                        return f"Key_Shared hash range [{start}, {end}] overlaps [{s}, {e}] of {other.name}"
            self._ranges.extend((s, e, consumer) for s, e in ranges)
            return None
        for i in range(POINTS_PER_CONSUMER):
            self._seq += 1
            bisect.insort(self._ring, (key_hash(f"{consumer.name}{i}".encode()), self._seq, consumer))
        return None

    def remove(self, consumer: C) -> None:
        self._ring = [p for p in self._ring if p[2] is not consumer]
        self._ranges = [r for r in self._ranges if r[2] is not consumer]

    def select(self, h: int) -> C | None:
        for s, e, consumer in self._ranges:
            if s <= h <= e:
                return consumer
        if not self._ring:
            return None
        i = bisect.bisect_left(self._ring, (h, -1))
        return self._ring[i % len(self._ring)][2]
