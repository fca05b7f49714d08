"""Producer ids for InitProducerId, unique across restarts (and, later, across brokers).

Ids are handed out from blocks reserved in the metadata store with compare-and-set, as Kafka's controller
(and KoP's `/kop_latest_producer_id_block`) do: a crash loses at most the rest of a block, never reuses an id.
"""

from __future__ import annotations

import asyncio
import json

from kop.storage.api import BadVersionError, MetadataStore, NodeExistsError

BLOCK_PATH = "/kop/producer-id-block"
BLOCK_SIZE = 1000


class ProducerIdAllocator:
    def __init__(self, store: MetadataStore, broker_id: int) -> None:
        self.store = store
        self.broker_id = broker_id
        self._next = 0
        self._end = 0  # exclusive
        self._lock = asyncio.Lock()

    async def next_id(self) -> int:
        async with self._lock:
            if self._next >= self._end:
                await self._reserve_block()
            pid = self._next
            self._next += 1
            return pid

    async def _reserve_block(self) -> None:
        while True:
            got = await self.store.get(BLOCK_PATH)
            start = json.loads(got[0])["end"] if got else 0
            value = json.dumps({"broker": self.broker_id, "start": start, "end": start + BLOCK_SIZE}).encode()
            try:
                await self.store.put(BLOCK_PATH, value, expected_version=got[1].version if got else -1)
            except (BadVersionError, NodeExistsError):
                continue
            self._next, self._end = start, start + BLOCK_SIZE
            return
