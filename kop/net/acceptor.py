"""Accepting connections under broker-wide limits, for every protocol handler (Kafka's acceptor behaviour).

Accepting is our own loop per listening socket (not asyncio's server), so the limits behave as Kafka's
acceptor (kafka.network.ConnectionQuotas) does:
- `maxConnections` (Kafka's max.connections) reached: the broker stops accepting until a connection closes.
  New connections wait in the kernel's listen backlog (1024); nothing is closed. Kafka also does this (it has
  no inter-broker listener here to exempt).
- `maxConnectionsPerIp` / `maxConnectionsPerIpOverrides` (max.connections.per.ip[.overrides]) reached for an
  address: the new connection is accepted and closed at once, with one INFO line ("Rejected connection from
  ..."), counted in kop_server_connections_rejected. A client sees its connection closed before any answer.

One `Acceptor` per broker counts the connections of every protocol handler together (a Kafka and a Pulsar
connection from one address are two connections of that address): `maxConnections` protects the broker's
file descriptors and memory, which both protocols use, so a user setting it expects it to hold for the broker,
not per protocol. It also holds the broker-wide `RequestBytesBound`, over the connections of every handler.
Pulsar's own names (brokerMaxConnections, brokerMaxConnectionsPerIp) are not aliased: Pulsar closes a
connection over its total limit where Kafka's acceptor waits, and 0 disables them in Pulsar but not in Kafka,
so one set of names with one behaviour is clearer (README, "Connection limits").

TLS listeners (`serve(..., ssl=context)`): the handshake of each accepted connection runs in a task of its
own, so a client that stalls its handshake holds its connection slot (until the handshake timeout) but never
the accept loop. A failed handshake (plaintext bytes on a TLS port, an untrusted client certificate) is one
INFO line and a closed socket; the protocol never sees the connection.
"""

from __future__ import annotations

import asyncio
import ipaddress
import logging
import socket
import ssl as _ssl
from collections.abc import Callable, Iterable, Iterator
from typing import Any, Protocol

from kop.config import BrokerConfig
from kop.net.request_bytes import Reader, RequestBytesBound

log = logging.getLogger(__name__)

BACKLOG = 1024
TLS_HANDSHAKE_TIMEOUT = 10.0  # seconds a client has to finish its TLS handshake (Kafka has no own bound)


class Counted(Protocol):
    """What the acceptor sets on a connection it accepted (given back by `connection_closed`)."""

    ip: str
    counted: bool


class Acceptor:
    """Connection counts, the accept loops and the request-bytes bound of one broker (module docstring)."""

    def __init__(self, config: BrokerConfig) -> None:
        self.config = config
        self.connection_count = 0
        self.ip_counts: dict[str, int] = {}
        self.connections_rejected = 0
        self.tls_handshake_failures = 0
        self._handshakes: set[asyncio.Task[None]] = set()
        self._ip_limits: dict[str, int] | None = None
        self._slot_free: asyncio.Event | None = None
        self._pools: list[Iterable[Reader]] = []
        self.request_bytes = RequestBytesBound(config.queuedMaxRequestBytes, self._all_connections)

    def add_connections(self, connections: Iterable[Reader]) -> None:
        """A handler's live connections (a set it keeps), paused and resumed by the request-bytes bound."""
        self._pools.append(connections)

    def _all_connections(self) -> Iterator[Reader]:
        for pool in self._pools:
            yield from list(pool)

    def _limits(self) -> dict[str, int]:
        if self._ip_limits is None:  # resolved once, at the first accept loop (Kafka resolves at start-up too)
            self._ip_limits = {}
            for host, limit in self.config.ip_overrides.items():
                for addr in resolve(host):
                    self._ip_limits[addr] = limit
        return self._ip_limits

    def serve(self, sock: socket.socket, factory: Callable[[], Any], name: str,
              ssl: _ssl.SSLContext | None = None) -> asyncio.Task[None]:
        """Accept on `sock` until cancelled; `factory()` makes the asyncio protocol of each connection;
        with `ssl`, connections speak TLS (module docstring)."""
        self._limits()
        if self._slot_free is None:
            self._slot_free = asyncio.Event()
        return asyncio.create_task(self._accept_loop(sock, factory, ssl), name=name)

    async def _wait_for_slot(self) -> None:
        assert self._slot_free is not None
        while self.connection_count >= self.config.maxConnections:
            self._slot_free.clear()
            await self._slot_free.wait()  # set by connection_closed()

    async def _accept_loop(self, sock: socket.socket, factory: Callable[[], Any],
                           tls: _ssl.SSLContext | None = None) -> None:
        loop = asyncio.get_running_loop()
        while True:
            await self._wait_for_slot()
            try:
                conn, addr = await loop.sock_accept(sock)
            except OSError as e:  # e.g. EMFILE: out of file descriptors; back off instead of spinning
                log.warning("accept failed on %s: %s", sock.getsockname(), e)
                await asyncio.sleep(0.1)
                continue
            try:
                await self._wait_for_slot()  # another listener took the last slot
            except asyncio.CancelledError:  # stop(): the accepted connection is not served
                conn.close()
                raise
            ip = normalize_ip(addr[0]) if isinstance(addr, tuple) else ""
            count = self.ip_counts.get(ip, 0)
            limit = self._limits().get(ip, self.config.maxConnectionsPerIp)
            if count >= limit:
                log.info("Rejected connection from %s, address already has the configured maximum of %d connections",
                         ip, limit)
                self.connections_rejected += 1
                conn.close()
                continue
            self.ip_counts[ip] = count + 1
            self.connection_count += 1
            protocol = factory()
            protocol.ip = ip
            protocol.counted = True  # connection_closed() gives the slot back
            if tls is None:
                await self._set_up(conn, protocol, ip, None)
            else:
                task = asyncio.create_task(self._set_up(conn, protocol, ip, tls))
                self._handshakes.add(task)
                task.add_done_callback(self._handshakes.discard)

    async def _set_up(self, conn: socket.socket, protocol: Any, ip: str, tls: _ssl.SSLContext | None) -> None:
        loop = asyncio.get_running_loop()
        try:
            conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            if tls is None:
                await loop.connect_accepted_socket(lambda: protocol, conn)
            else:
                await loop.connect_accepted_socket(lambda: protocol, conn, ssl=tls,
                                                   ssl_handshake_timeout=TLS_HANDSHAKE_TIMEOUT)
        except (OSError, RuntimeError, TimeoutError, asyncio.CancelledError) as e:
            # The peer went away between accept and set-up, or its TLS handshake failed.
            if isinstance(e, _ssl.SSLError | TimeoutError):
                self.tls_handshake_failures += 1
                log.info("TLS handshake with %s failed: %s", ip, _short(e))
            else:
                log.debug("could not set up an accepted connection from %s: %s", ip, e)
            self.connection_closed(protocol)
            conn.close()
            if isinstance(e, asyncio.CancelledError):
                raise

    async def cancel_handshakes(self) -> None:
        """Stop the TLS handshakes under way (broker shutdown): their connections are closed and uncounted."""
        tasks = list(self._handshakes)
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    def connection_closed(self, conn: Counted) -> None:
        """A connection accepted by an accept loop closed: free its slot (and wake a waiting acceptor)."""
        if conn.counted:
            conn.counted = False
            n = self.ip_counts.get(conn.ip, 0) - 1
            if n > 0:
                self.ip_counts[conn.ip] = n
            else:
                self.ip_counts.pop(conn.ip, None)
            self.connection_count -= 1
            if self._slot_free is not None and self.connection_count < self.config.maxConnections:
                self._slot_free.set()


def _short(e: BaseException) -> str:
    """An SSL error's reason (e.g. WRONG_VERSION_NUMBER, CERTIFICATE_VERIFY_FAILED) without its noise."""
    reason = getattr(e, "reason", None)
    return str(reason) if reason else (str(e) or type(e).__name__)


def normalize_ip(ip: str) -> str:
    """The address a peer is counted under: IPv4-mapped IPv6 (a dual-stack socket) as plain IPv4."""
    try:
        a = ipaddress.ip_address(ip.split("%", 1)[0])
    except ValueError:
        return ip
    if isinstance(a, ipaddress.IPv6Address) and a.ipv4_mapped is not None:
        return str(a.ipv4_mapped)
    return str(a)


def resolve(host: str) -> set[str]:
    """The addresses of a maxConnectionsPerIpOverrides host (Kafka resolves names once, at start-up, too)."""
    try:
        return {normalize_ip(str(ai[4][0])) for ai in socket.getaddrinfo(host, None, type=socket.SOCK_STREAM)}
    except OSError as e:
        log.warning("maxConnectionsPerIpOverrides: cannot resolve %s (%s); its override is not applied", host, e)
        return set()


def listen(host: str | None, port: int) -> list[socket.socket]:
    """Listening sockets for one listener: every address `host` resolves to (all interfaces when None), as
    asyncio's create_server binds them; with port 0 the later ones take the port the first one got."""
    infos = socket.getaddrinfo(host, port, family=socket.AF_UNSPEC, type=socket.SOCK_STREAM,
                               flags=socket.AI_PASSIVE)
    socks: list[socket.socket] = []
    seen: set[tuple[int, Any]] = set()
    try:
        for family, type_, proto, _, sockaddr in infos:
            if (family, sockaddr) in seen:
                continue
            seen.add((family, sockaddr))
            sock = socket.socket(family, type_, proto)
            socks.append(sock)
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            if family == socket.AF_INET6:
                sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
            if port == 0 and len(socks) > 1:
                sockaddr = (sockaddr[0], socks[0].getsockname()[1], *sockaddr[2:])
            sock.bind(sockaddr)
            sock.listen(BACKLOG)
            sock.setblocking(False)
    except OSError:
        for sock in socks:
            sock.close()
        raise
    return socks
