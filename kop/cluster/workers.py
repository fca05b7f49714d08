"""Ownership among the worker processes of one node (`numWorkers` > 1, kop/node/): a static function.

Worker i of N owns partition p of topic t when `(crc32(tenant/namespace/topic) + p) % N == i` - the internal
topics' partitions (`__consumer_offsets`, `__transaction_state`, ...) too, so each worker coordinates the
groups and transactional ids whose partitions it owns. No election, no lease: a worker's share never moves
while the node runs, and a worker that dies leaves its partitions without a serving process until the
supervisor has restarted it (Metadata and LOOKUP name no owner meanwhile: clients retry). Why "+ p" and
not a hash per partition: a topic with N partitions or more is spread over every worker, evenly.

Each worker is a logical broker (id kafkaBrokerId + i) with ports of its own; it registers itself in the
node's shared metadata store at /kop/node/workers/<i> (BrokerInfo JSON plus its pid) and re-reads the others'
registrations every `REFRESH_SECONDS`, so Kafka's Metadata and Pulsar's LOOKUP send clients to the owner. A
registration whose process is gone (its pid does not exist) names no owner. Nothing here holds a partition
exclusively: safety rests on the static function (one owner per partition, the same in every worker) and on
the supervisor running one process per worker index (kop/node/supervisor.py).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import zlib
from typing import TYPE_CHECKING

from kop.cluster.bundles import Bundle, bundle_for
from kop.cluster.ownership import BrokerInfo, Ownership
from kop.storage.api import StorageError
from kop.topics.names import TopicName

if TYPE_CHECKING:
    from kop.storage.api import MetadataStore
    from kop.topics.manager import TopicManager

log = logging.getLogger(__name__)

WORKERS_ROOT = "/kop/node/workers"
REFRESH_SECONDS = 0.5


def worker_of(name: TopicName, partition: int, workers: int) -> int:
    """The index of the worker that owns `partition` of `name` on a node of `workers` processes."""
    h = zlib.crc32(f"{name.tenant}/{name.namespace}/{name.local}".encode())
    return (h + partition) % workers


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # exists, another user's: not ours, but alive
        return True
    return True


class WorkerOwnership(Ownership):
    """Worker `index` of a node of `workers` processes; see the module docstring."""

    clustered = True

    def __init__(self, topics: TopicManager, store: MetadataStore, index: int, workers: int,
                 bundle_count: int) -> None:
        super().__init__()
        self.topics = topics
        self.store = store
        self.index = index
        self.workers = workers
        self.bundle_count = bundle_count
        self._peers: dict[int, BrokerInfo] = {}  # worker index -> registration (live processes only)
        self._task: asyncio.Task[None] | None = None
        self._changed = asyncio.Event()

    async def start(self, local: BrokerInfo) -> None:
        self.local = local
        value = json.loads(local.to_json())
        value["pid"] = os.getpid()
        await self.store.put(f"{WORKERS_ROOT}/{self.index}", json.dumps(value).encode())
        await self.refresh()
        self._task = asyncio.create_task(self._refresh_loop(), name="worker-ownership-refresh")
        log.info("worker %d of %d registered as broker %d (%s)", self.index, self.workers, local.broker_id,
                 local.key)

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None

    async def release_all(self) -> None:
        """Graceful stop: the logs are closed by the topic manager; nothing to hand over (static shares)."""
        return None

    async def refresh(self) -> None:
        """Re-read every worker's registration (its ports change when it restarts)."""
        peers: dict[int, BrokerInfo] = {}
        for i in range(self.workers):
            if i == self.index:
                continue
            got = await self.store.get(f"{WORKERS_ROOT}/{i}")
            if got is None:
                continue
            try:
                info = BrokerInfo.from_json(got[0])
                pid = int(json.loads(got[0]).get("pid", 0))
            except (ValueError, KeyError):
                log.warning("unreadable registration of worker %d", i)
                continue
            if pid and _pid_alive(pid):
                peers[i] = info
        if peers != self._peers:
            self._peers = peers
            self._changed.set()
            self._changed = asyncio.Event()

    async def _refresh_loop(self) -> None:
        while True:
            await asyncio.sleep(REFRESH_SECONDS)
            try:
                await self.refresh()
            except StorageError as e:
                log.warning("reading the workers' registrations failed: %s", e)

    # ------------------------------------------------------------------ the Ownership interface
    def bundle_of(self, name: TopicName, partition: int) -> Bundle:
        return bundle_for(name.tenant, name.namespace, name.local, partition, self.bundle_count)

    def owns(self, name: TopicName, partition: int) -> bool:
        return worker_of(name, partition, self.workers) == self.index

    def owner_cached(self, name: TopicName, partition: int) -> BrokerInfo | None:
        i = worker_of(name, partition, self.workers)
        return self.local if i == self.index else self._peers.get(i)

    def live_brokers(self) -> list[BrokerInfo]:
        return sorted([self.local, *self._peers.values()], key=lambda b: b.broker_id)

    async def watch_namespace(self, ns: str) -> None:
        return None  # ownership does not depend on namespaces' bundles here

    def mine(self) -> set[Bundle]:
        return set()

    async def wait_owned(self, keys: list[tuple[TopicName, int]], timeout: float) -> None:
        """Wait (up to `timeout`) for the owners of `keys` to be registered and alive: a restarting worker."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        while any(self.owner_cached(tn, p) is None for tn, p in keys):
            remaining = deadline - loop.time()
            if remaining <= 0:
                return
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._changed.wait(), remaining)
