"""Listening sockets a worker of a multi-process node inherits from its supervisor (kop/node/).

The node's configured ports (the Kafka listeners', Pulsar's brokerServicePort) are bound once, by the
supervisor; every worker accepts on them too, beside the ports of its own that it advertises, and the kernel
hands each new connection to one of the accepting workers. So a client bootstraps on the node's port whichever
worker is up, and Metadata / LOOKUP then send it to the owner's own port. The supervisor names the sockets in
the environment variable `KOP_SHARED_SOCKETS`: JSON `[[kind, listener name, fd], ...]`, kind "kafka" or
"pulsar". Outside a node the list is empty.
"""

from __future__ import annotations

import json
import os
import socket
from functools import cache

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
