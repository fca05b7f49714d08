"""What makes a worker of a node differ from a lone `kop standalone`: its config and its identity.

The supervisor starts each worker as `kop standalone` with the node's own arguments and `KOP_NODE_WORKER=i/N`
in its environment. The worker then runs the node's config with `worker_overrides` on top: broker id
kafkaBrokerId + i, its Kafka listeners, Pulsar port and admin port on ephemeral ports of its own (advertised,
so Metadata and LOOKUP send clients there), and numWorkers=1. The node's configured ports are the bootstrap
ones, accepted on by every worker (kop/net/shared.py).
"""

from __future__ import annotations

import os

from kop.config import BrokerConfig, ConfigError, Listener

ENV = "KOP_NODE_WORKER"


def worker_identity() -> tuple[int, int] | None:
    """(index, workers) when this process is a worker of a node, else None."""
    raw = os.environ.get(ENV)
    if not raw:
        return None
    try:
        index, workers = (int(x) for x in raw.split("/"))
    except ValueError:
        raise ConfigError(f"bad {ENV}={raw!r}: expected i/N") from None
    if not 0 <= index < workers:
        raise ConfigError(f"bad {ENV}={raw!r}: expected 0 <= i < N")
    return index, workers


def _ephemeral(listeners: tuple[Listener, ...]) -> str:
    return ",".join(str(Listener(lst.name, lst.host, 0)) for lst in listeners)


def worker_overrides(config: BrokerConfig, index: int) -> dict[str, str]:
    """The keys a worker sets on top of the node's config (module docstring)."""
    out = {
        "kafkaBrokerId": str(config.kafkaBrokerId + index),
        "kafkaListeners": _ephemeral(config.listeners),
        "brokerServicePort": "0",
        "numWorkers": "1",
    }
    if config.kafkaAdvertisedListeners:
        out["kafkaAdvertisedListeners"] = _ephemeral(config.advertised_listeners)
    if config.brokerServicePortTls >= 0:
        out["brokerServicePortTls"] = "0"
    if config.webServicePort >= 0:
        out["webServicePort"] = "0"
    if config.webServicePortTls >= 0:
        out["webServicePortTls"] = "0"
    return out


def node_workers(config: BrokerConfig) -> int:
    """How many workers the node runs: numWorkers, 0 meaning one per CPU core this process may use."""
    if config.numWorkers > 0:
        return config.numWorkers
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # not Linux
        return max(1, os.cpu_count() or 1)
