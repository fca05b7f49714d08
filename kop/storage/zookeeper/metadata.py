"""The metadata store over ZooKeeper (kazoo), in Pulsar's layout: the same znodes a Pulsar broker keeps
(/managed-ledgers/<name> with the ManagedLedgerInfo protobuf, ...), written with versioned compare-and-set.

Why kazoo, bridged to asyncio, rather than aiozk: kazoo is the ZooKeeper client the Python ecosystem
relies on (maintained, 2.11 in 2025; OpenStack, Airflow and others run it), with a complete and tested
session state machine - reconnection within a session, session expiry, re-registration of watches -
which is where ZooKeeper clients tend to be wrong. aiozk is asyncio-native but has far fewer users and
releases. The bridge costs nothing on the event loop: kazoo's ``*_async`` calls return at once, kazoo's
own connection thread does the I/O, and the completion is handed back with ``loop.call_soon_threadsafe``
(no thread pool, no blocked thread per call). Metadata operations are rare (ledger rollover, topic
changes), so the thread hop (~50 us) does not matter.

ZooKeeper semantics carried through unchanged:

* ``Stat.version`` is the znode's data version: 0 at create, +1 per set - the same numbers the embedded
  store uses, so compare-and-set code above cannot tell the backends apart.
* put(expected_version=-1) is a create (NodeExistsError if present); put(expected_version=n) is a
  versioned setData (BadVersionError on a mismatch or when absent); put(None) sets or creates. Parents
  are created with empty values, as the embedded store does.
* A ConnectionLoss (ZooKeeper restarting, a network blip) does not fail an operation: it is retried when
  the client has reconnected, within ``operation_timeout``. A write retried after a ConnectionLoss may
  already have been applied; the retry then reports NodeExists / BadVersion, so such an outcome is
  re-checked against what is stored (our value at the next version means it was ours).
* Ephemeral and sequential nodes (create()), watches (watch_data / watch_children, delivered on the event
  loop) and session state listeners are available to the layers above (broker liveness, ownership).
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import time
from collections.abc import Callable
from typing import Any

from kazoo.client import KazooClient, KazooState
from kazoo.exceptions import BadVersionError as KzBadVersion
from kazoo.exceptions import ConnectionLoss, NoNodeError, OperationTimeoutError, SessionExpiredError
from kazoo.exceptions import NodeExistsError as KzNodeExists
from kazoo.exceptions import NotEmptyError as KzNotEmpty
from kazoo.protocol.states import ZnodeStat
from kazoo.retry import KazooRetry

from kop.storage.api import (
    BadVersionError,
    MetadataStore,
    NodeExistsError,
    NoSuchNodeError,
    NotEmptyError,
    Stat,
    StorageError,
)
from kop.storage.local.metadata import check_path

log = logging.getLogger(__name__)

# Errors after which the request may or may not have reached the server: retried once connected again.
_RETRYABLE = (ConnectionLoss, OperationTimeoutError)


def connection_retry() -> KazooRetry:
    """kazoo's reconnection policy for our sessions: retry for ever, the pause between attempts growing
    from 0.1 s to at most 1 s (+-20% jitter).

    Why bounded: without a policy kazoo doubles the pause up to an hour, so after a 20 s outage a broker
    tried again 8-13 s after ZooKeeper was back - by then its session (30 s in conf/broker.conf) had often
    expired, every bundle was released and acquired anew. With at most ~1.2 s between attempts a broker
    is connected within about a second of ZooKeeper answering, and a session survives any outage shorter
    than its timeout (ZooKeeper restarts every session's clock when it comes back). A connection attempt
    to a dead server costs one refused SYN, so a second between attempts is no load on anyone."""
    return KazooRetry(max_tries=-1, delay=0.1, backoff=2, max_delay=1.0, max_jitter=0.2)


class ZooKeeperError(StorageError):
    """ZooKeeper could not be reached in time, or the session is gone."""


def parse_zookeeper_servers(url: str) -> tuple[str, str]:
    """(kazoo host list, chroot) from Pulsar's forms: ``zk:h1:2181,h2:2181/chroot``,
    ``metadata-store:zk:h:2181``, or a bare ``h1:2181,h2:2181`` (zookeeperServers). The chroot is "" or
    "/path"."""
    text = url.strip()
    for prefix in ("metadata-store:", "zk:"):
        text = text.removeprefix(prefix)
    if "://" in text:
        raise ValueError(f"not a ZooKeeper server list: {url!r} (expected host:port[,host:port][/chroot])")
    hosts, slash, root = text.partition("/")
    if not hosts or any(not h.strip() for h in hosts.split(",")):
        raise ValueError(f"no ZooKeeper servers in {url!r}")
    chroot = ("/" + root.strip("/")) if slash and root.strip("/") else ""
    return hosts, chroot


def _stat(zstat: ZnodeStat) -> Stat:
    return Stat(zstat.version, ephemeral=bool(zstat.ephemeralOwner))


class ZooKeeperMetadataStore(MetadataStore):
    """MetadataStore on one ZooKeeper session. Create with ``await ZooKeeperMetadataStore.connect(...)``;
    the BookKeeper ledger store shares the session (``.client``) for its /ledgers znodes, as a Pulsar
    broker's BookKeeper client shares its ZooKeeper."""

    def __init__(self, client: KazooClient, loop: asyncio.AbstractEventLoop, *,
                 operation_timeout: float = 30.0, owns_client: bool = True) -> None:
        self.client = client
        self._loop = loop
        self.operation_timeout = operation_timeout
        self._owns_client = owns_client
        self._closed = False
        self._connected = asyncio.Event()
        self._session_listeners: list[Callable[[str], None]] = []
        if client.state == KazooState.CONNECTED:
            self._connected.set()
        client.add_listener(self._on_state)

    @classmethod
    async def connect(cls, servers: str, *, session_timeout_ms: int = 30000, connect_timeout: float = 30.0,
                      operation_timeout: float | None = None) -> ZooKeeperMetadataStore:
        """Connect to ``servers`` (any form parse_zookeeper_servers accepts). A chroot is created when
        missing, so a fresh ZooKeeper needs no preparation."""
        hosts, chroot = parse_zookeeper_servers(servers)
        loop = asyncio.get_running_loop()
        if chroot:
            await _ensure_chroot(hosts, chroot, connect_timeout)
        client = KazooClient(hosts + chroot, timeout=session_timeout_ms / 1000,
                             connection_retry=connection_retry(), logger=logging.getLogger("kazoo.client"))
        try:
            await loop.run_in_executor(None, lambda: client.start(timeout=connect_timeout))
        except Exception as e:
            with contextlib.suppress(Exception):
                client.close()
            raise ZooKeeperError(f"cannot connect to ZooKeeper {servers}: {e}") from e
        return cls(client, loop, operation_timeout=operation_timeout or max(session_timeout_ms / 1000, 5.0))

    # ---- session state

    def _on_state(self, state: str) -> None:
        """kazoo's listener, on kazoo's thread: hand the change to the event loop."""
        with contextlib.suppress(RuntimeError):  # the loop is closed: nobody is listening any more
            self._loop.call_soon_threadsafe(self._state_changed, state)

    def _state_changed(self, state: str) -> None:
        if state == KazooState.CONNECTED and self.client.connected:
            self._connected.set()
        else:
            self._connected.clear()
        name = {KazooState.CONNECTED: "connected", KazooState.SUSPENDED: "suspended",
                KazooState.LOST: "lost"}.get(state, str(state).lower())
        for listener in list(self._session_listeners):
            try:
                listener(name)
            except Exception:
                log.exception("session listener failed")

    def add_session_listener(self, listener: Callable[[str], None]) -> None:
        """Called on the event loop with "connected", "suspended" (connection lost, session may still be
        alive) or "lost" (session expired: every ephemeral node of this store is gone)."""
        self._session_listeners.append(listener)

    def remove_session_listener(self, listener: Callable[[str], None]) -> None:
        with contextlib.suppress(ValueError):
            self._session_listeners.remove(listener)

    @property
    def connected(self) -> bool:
        return self._connected.is_set()

    @property
    def session_id(self) -> int | None:
        cid = self.client.client_id
        return cid[0] if cid else None

    # ---- the async bridge

    def _future(self, async_result: Any) -> asyncio.Future[Any]:
        loop = self._loop
        fut: asyncio.Future[Any] = loop.create_future()

        def deliver(ar: Any) -> None:  # kazoo's completion thread
            ok = ar.successful()
            value = ar.value if ok else ar.exception
            with contextlib.suppress(RuntimeError):
                loop.call_soon_threadsafe(_resolve, fut, ok, value)

        async_result.rawlink(deliver)
        return fut

    async def _call(self, start: Callable[[], Any]) -> Any:
        """Run one kazoo *_async operation; retry after a ConnectionLoss once the client is connected
        again, until operation_timeout. Raises the kazoo exception of a definite failure."""
        if self._closed:
            raise StorageError("metadata store is closed")
        deadline = time.monotonic() + self.operation_timeout
        while True:
            if not self._connected.is_set():
                await self._wait_connected(deadline)
            try:
                return await self._future(start())
            except _RETRYABLE as e:
                if time.monotonic() >= deadline:
                    raise ZooKeeperError(f"ZooKeeper unavailable: {e!r}") from e
                if not self.client.connected:
                    self._connected.clear()  # the state listener will set it again on reconnect
                await asyncio.sleep(0.05)
            except SessionExpiredError as e:
                if time.monotonic() >= deadline:
                    raise ZooKeeperError("ZooKeeper session expired") from e
                await asyncio.sleep(0.05)  # kazoo opens a new session by itself

    async def _wait_connected(self, deadline: float) -> None:
        if self._closed:
            raise StorageError("metadata store is closed")
        try:
            await asyncio.wait_for(self._connected.wait(), max(deadline - time.monotonic(), 0))
        except TimeoutError:
            raise ZooKeeperError(f"not connected to ZooKeeper within {self.operation_timeout}s") from None

    # ---- MetadataStore

    async def get(self, path: str) -> tuple[bytes, Stat] | None:
        check_path(path)
        try:
            value, zstat = await self._call(lambda: self.client.get_async(path))
        except NoNodeError:
            return None
        return bytes(value or b""), _stat(zstat)

    async def put(self, path: str, value: bytes, expected_version: int | None = None) -> Stat:
        check_path(path)
        if path == "/":
            raise ValueError("cannot write the root node")
        value = bytes(value)
        if expected_version == -1:
            return await self._create_new(path, value)
        if expected_version is not None:
            return await self._set_versioned(path, value, expected_version)
        while True:  # unconditional: set, or create when absent (racing a concurrent creator)
            try:
                return _stat(await self._call(lambda: self.client.set_async(path, value, -1)))
            except NoNodeError:
                pass
            try:
                await self._call(lambda: self.client.create_async(path, value, makepath=True))
                return Stat(0)
            except KzNodeExists:
                continue

    async def _create_new(self, path: str, value: bytes) -> Stat:
        attempts = 0

        def start() -> Any:
            nonlocal attempts
            attempts += 1
            return self.client.create_async(path, value, makepath=True)

        try:
            await self._call(start)
            return Stat(0)
        except KzNodeExists:
            if attempts > 1:  # our first attempt may have been applied before the connection dropped
                got = await self.get(path)
                if got is not None and got[0] == value and got[1].version == 0 and not got[1].ephemeral:
                    return got[1]
            raise NodeExistsError(f"{path} already exists") from None

    async def _set_versioned(self, path: str, value: bytes, expected: int) -> Stat:
        attempts = 0

        def start() -> Any:
            nonlocal attempts
            attempts += 1
            return self.client.set_async(path, value, expected)

        try:
            return _stat(await self._call(start))
        except NoNodeError:
            raise BadVersionError(f"{path}: expected version {expected}, node does not exist") from None
        except KzBadVersion:
            got = await self.get(path)
            if attempts > 1 and got is not None and got[1].version == expected + 1 and got[0] == value:
                return got[1]  # applied by the attempt whose answer was lost
            found = "absent" if got is None else got[1].version
            raise BadVersionError(f"{path}: expected version {expected}, found {found}") from None

    async def delete(self, path: str, expected_version: int | None = None) -> None:
        check_path(path)
        version = -1 if expected_version is None else expected_version
        attempts = 0

        def start() -> Any:
            nonlocal attempts
            attempts += 1
            return self.client.delete_async(path, version)

        try:
            await self._call(start)
        except NoNodeError:
            if attempts > 1:
                return  # the lost attempt deleted it
            raise NoSuchNodeError(path) from None
        except KzBadVersion:
            raise BadVersionError(f"{path}: expected version {expected_version}") from None
        except KzNotEmpty:
            raise NotEmptyError(f"{path} has children") from None

    async def children(self, path: str) -> list[str]:
        check_path(path)
        try:
            names = await self._call(lambda: self.client.get_children_async(path))
        except NoNodeError:
            return []
        return sorted(names)

    async def exists(self, path: str) -> bool:
        check_path(path)
        return await self._call(lambda: self.client.exists_async(path)) is not None

    async def ping(self) -> int | None:
        """One read of the root, not retried: the id of the session it was answered on, None when it failed
        or the session changed meanwhile. The cluster's session lease (kop/cluster/lease.py) counts the
        answer as a proof that the session was alive when the read was sent."""
        session = self.session_id
        if self._closed or session is None or not self.client.connected:
            return None
        try:
            await self._future(self.client.exists_async("/"))
        except Exception:  # noqa: BLE001 - any failure is "no proof", never an error to report
            return None
        return session if self.session_id == session else None

    async def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        self.client.remove_listener(self._on_state)
        if self._owns_client:
            client = self.client

            def stop() -> None:
                client.stop()
                client.close()

            await self._loop.run_in_executor(None, stop)

    # ---- beyond the MetadataStore interface: what ZooKeeper adds

    async def create(self, path: str, value: bytes = b"", *, ephemeral: bool = False,
                     sequential: bool = False, make_parents: bool = True) -> str:
        """Create a znode and return its path (with the sequence suffix for sequential nodes).
        Ephemeral nodes vanish when this store's session ends (close, or expiry). Not retried after a
        ConnectionLoss when sequential (a retry could leave a second node behind): the error is raised
        as ZooKeeperError instead."""
        check_path(path.rstrip("/") if sequential and path.endswith("/") else path)
        if sequential:
            if self._closed:
                raise StorageError("metadata store is closed")
            if not self._connected.is_set():
                await self._wait_connected(time.monotonic() + self.operation_timeout)
            try:
                return await self._future(self.client.create_async(
                    path, bytes(value), ephemeral=ephemeral, sequence=True, makepath=make_parents))
            except _RETRYABLE as e:
                raise ZooKeeperError(f"create {path}: outcome unknown: {e!r}") from e
            except KzNodeExists:
                raise NodeExistsError(path) from None
            except NoNodeError:
                raise NoSuchNodeError(f"parent of {path}") from None
        try:
            return await self._call(lambda: self.client.create_async(
                path, bytes(value), ephemeral=ephemeral, makepath=make_parents))
        except KzNodeExists:
            raise NodeExistsError(f"{path} already exists") from None
        except NoNodeError:
            raise NoSuchNodeError(f"parent of {path}") from None

    async def create_ephemerals(self, nodes: list[tuple[str, bytes]]) -> None:
        """Create several ephemeral nodes atomically (one ZooKeeper multi): all of them or none. Parents
        are created first (persistent, empty). Raises NodeExistsError naming the first path that exists
        and is not ours. A multi retried after a ConnectionLoss may already have been applied: nodes this
        session owns count as created (cluster membership and bundle ownership rely on this)."""
        for path, _ in nodes:
            check_path(path)
            parent = path.rpartition("/")[0]
            if parent:
                await self._call(functools.partial(self.client.ensure_path_async, parent))

        def start() -> Any:
            tx = self.client.transaction()
            for path, value in nodes:
                tx.create(path, bytes(value), ephemeral=True)
            return tx.commit_async()

        results = await self._call(start)
        failed = [(path, r) for (path, _), r in zip(nodes, results, strict=True) if isinstance(r, Exception)]
        for path, r in failed:
            if isinstance(r, KzNodeExists):
                if await self.ephemeral_owner(path) == self.session_id:
                    continue  # applied by an attempt whose answer was lost: only possible if all were
                raise NodeExistsError(f"{path} already exists")
        if failed and not all(isinstance(r, KzNodeExists) for _, r in failed):
            real = next((r for _, r in failed if not type(r).__name__ == "RolledBackError"), failed[0][1])
            raise StorageError(f"creating {[p for p, _ in nodes]} failed: {real!r}")

    async def ephemeral_owner(self, path: str) -> int | None:
        """The session id owning ephemeral node `path` (None: absent or persistent)."""
        check_path(path)
        zstat = await self._call(lambda: self.client.exists_async(path))
        if zstat is None or not zstat.ephemeralOwner:
            return None
        return int(zstat.ephemeralOwner)

    async def watch_children_async(self, path: str, callback: Callable[[list[str]], Any]) -> Callable[[], None]:
        """watch_children without blocking the event loop: kazoo's watch recipe reads the children once
        synchronously when it is set up, which would stall the loop while ZooKeeper is unreachable."""
        return await self._loop.run_in_executor(None, self.watch_children, path, callback)

    async def watch_data_async(self, path: str,
                               callback: Callable[[bytes | None, Stat | None], Any]) -> Callable[[], None]:
        """watch_data without blocking the event loop (see watch_children_async)."""
        return await self._loop.run_in_executor(None, self.watch_data, path, callback)

    def watch_data(self, path: str, callback: Callable[[bytes | None, Stat | None], Any]) -> Callable[[], None]:
        """Call ``callback(value, stat)`` on the event loop now and after every change of ``path``
        (value None: the node does not exist). Returns a function that stops the watch. Built on kazoo's
        DataWatch, which re-registers the one-shot ZooKeeper watch after each event and after a
        reconnect."""
        from kazoo.recipe.watchers import DataWatch

        stopped = False

        def on_change(data: bytes | None, zstat: ZnodeStat | None, *_: Any) -> bool | None:
            if stopped:
                return False
            value = None if zstat is None else bytes(data or b"")
            stat = None if zstat is None else _stat(zstat)
            with contextlib.suppress(RuntimeError):
                self._loop.call_soon_threadsafe(_guarded, callback, value, stat)
            return None

        DataWatch(self.client, path, on_change)

        def stop() -> None:
            nonlocal stopped
            stopped = True

        return stop

    def watch_children(self, path: str, callback: Callable[[list[str]], Any]) -> Callable[[], None]:
        """Call ``callback(sorted child names)`` on the event loop now and after every change of the
        children of ``path`` (which must exist). Returns a function that stops the watch."""
        from kazoo.recipe.watchers import ChildrenWatch

        stopped = False

        def on_change(names: list[str]) -> bool | None:
            if stopped:
                return False
            with contextlib.suppress(RuntimeError):
                self._loop.call_soon_threadsafe(_guarded, callback, sorted(names))
            return None

        ChildrenWatch(self.client, path, on_change)

        def stop() -> None:
            nonlocal stopped
            stopped = True

        return stop


def _resolve(fut: asyncio.Future[Any], ok: bool, value: Any) -> None:
    if fut.done():
        return
    if ok:
        fut.set_result(value)
    else:
        fut.set_exception(value)


def _guarded(callback: Callable[..., Any], *args: Any) -> None:
    try:
        callback(*args)
    except Exception:
        log.exception("metadata watch callback failed")


async def _ensure_chroot(hosts: str, chroot: str, timeout: float) -> None:
    """Create the chroot path with a short-lived session (a chrooted client cannot see above it)."""
    def work() -> None:
        client = KazooClient(hosts, timeout=10, connection_retry=connection_retry())
        client.start(timeout=timeout)
        try:
            client.ensure_path(chroot)
        finally:
            client.stop()
            client.close()

    try:
        await asyncio.get_running_loop().run_in_executor(None, work)
    except Exception as e:
        raise ZooKeeperError(f"cannot connect to ZooKeeper {hosts}: {e}") from e
