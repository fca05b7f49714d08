"""Listening sockets a worker of a multi-process node inherits from its supervisor (kop/node/).

The node's configured ports (the Kafka listeners', Pulsar's brokerServicePort) are bound once, by the
supervisor; every worker accepts on them too, beside the ports of its own that it advertises, and the kernel
hands each new connection to one of the accepting workers. So a client bootstraps on the node's port whichever
worker is up, and Metadata / LOOKUP then send it to the owner's own port. The supervisor names the sockets in
the environment variable `KOP_SHARED_SOCKETS`: JSON `[[kind, listener name, fd], ...]`, kind "kafka" or
"pulsar". Outside a node the list is empty.

The worker's own ports are bound by the supervisor too (kinds "kafka-own", "pulsar-own"; `listen_or_inherit`):
so a worker restarted after a crash listens on the same ports - the addresses clients learned from Metadata
and LOOKUP stay valid, and connections made while it restarts wait in the socket's backlog instead of being
refused - and the supervisor keeps the numbers across node restarts too.
"""

from __future__ import annotations

import json
import os
import socket
from functools import cache

from kop.net.acceptor import listen

ENV = "KOP_SHARED_SOCKETS"


@cache
def _all() -> tuple[tuple[str, str, socket.socket], ...]:
    raw = os.environ.get(ENV)
    if not raw:
        return ()
    out = []
    for kind, name, fd in json.loads(raw):
        sock = socket.socket(fileno=int(fd))
        sock.setblocking(False)
        out.append((str(kind), str(name), sock))
    return tuple(out)


def shared_sockets(kind: str) -> list[tuple[str, socket.socket]]:
    """(listener name, listening socket) of every inherited socket of `kind` ("kafka", "pulsar")."""
    return [(name, sock) for k, name, sock in _all() if k == kind]


def listen_or_inherit(kind: str, name: str, host: str | None, port: int) -> list[socket.socket]:
    """A handler's own listening sockets for listener `name`: the ones the supervisor bound for this worker
    (kind + "-own"), else newly bound (kop.net.acceptor.listen)."""
    own = [sock for k, n, sock in _all() if k == kind + "-own" and n == name]
    return own if own else listen(host, port)
