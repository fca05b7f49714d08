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


def check_node_config(config: BrokerConfig) -> None:
    """What a node of several workers cannot serve; raises ConfigError naming the key. Pulsar's named
    listeners (advertisedListeners) advertise fixed host:port pairs - the node's ports - where a LOOKUP must
    name the owning worker's own port; the embedded storage is the only one the workers share safely (on
    BookKeeper + ZooKeeper, run one `kop broker` per core instead: docs/cluster.md)."""
    if config.storage_backend != "embedded":
        raise ConfigError("numWorkers > 1 needs the embedded storage (on BookKeeper + ZooKeeper, run one "
                          "`kop broker` per core: docs/cluster.md)")
    if config.advertisedListeners:
        raise ConfigError("numWorkers > 1 cannot serve Pulsar's advertisedListeners (each worker has ports of its "
                          "own); set numWorkers=1 or leave advertisedListeners empty")


def node_workers(config: BrokerConfig) -> int:
    """How many workers the node runs: numWorkers, 0 meaning one per CPU core this process may use (on the
    embedded storage; 1 on BookKeeper + ZooKeeper, which a node of workers does not serve)."""
    if config.numWorkers > 0:
        return config.numWorkers
    if config.storage_backend != "embedded":
        return 1
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # not Linux
        return max(1, os.cpu_count() or 1)
