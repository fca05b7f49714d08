"""The protocol-handler plugin interface: everything the broker calls on a handler, and how handlers are found.

The shape is Pulsar's ProtocolHandler: a handler has a name, says whether it accepts a protocol listed in
`messagingProtocols`, is initialised with the broker config, and is started with the broker's services
(kop/services.py); it then serves its own listeners. The two built-in handlers (`kafka`, `pulsar`) are
known here by module path; any other name is looked up in the `kop.protocol_handlers` entry-point group, so
a third party's handler plugs in beside them without touching them or the broker. Why not entry points for
all: an installed package's entry points are the metadata of the install that wrote them (an editable install
made from another checkout, an old wheel), so a handler added to the source would stay invisible until a
reinstall; built-ins are part of this package and need no registry. pyproject.toml still declares them, so
other tools listing the group see both.

Besides the lifecycle, the broker tells each handler what happens to the partitions under it: bundles it
acquires or releases (cluster mode), partition logs let go or deleted. The hooks have no-op defaults, so a
handler overrides only those it has state for.
"""

from __future__ import annotations

import abc
import importlib
from importlib.metadata import entry_points

from kop.cluster.bundles import Bundle
from kop.config import BrokerConfig, ConfigError
from kop.services import BrokerServices

ENTRY_POINT_GROUP = "kop.protocol_handlers"
BUILT_IN = {
    "kafka": "kop.kafka.handler:KafkaProtocolHandler",
    "pulsar": "kop.pulsar.handler:PulsarProtocolHandler",
}


class ProtocolHandler(abc.ABC):
    name: str

    @abc.abstractmethod
    def accept(self, protocol: str) -> bool: ...

    @abc.abstractmethod
    def initialize(self, config: BrokerConfig) -> None:
        """Validate and keep what the handler needs from the config; raise ConfigError on problems."""

    @abc.abstractmethod
    async def start(self, services: BrokerServices) -> None:
        """Bind the listeners and begin serving."""

    @abc.abstractmethod
    def listeners(self) -> list[str]:
        """The listener URIs being served (after start: with real ports)."""

    @abc.abstractmethod
    async def stop(self, timeout: float) -> None:
        """Stop accepting, let in-flight requests finish (or fail them after `timeout`), close connections."""

    # ------------------------------------------------------------------ hooks (no-op by default)
    def bound_port(self, listener_name: str) -> int | None:
        """The port this handler's listener `listener_name` is bound to, None when it serves no listener of
        that name. The broker registers its advertised listeners with it when the config says port 0."""
        return None

    def advertised_addresses(self) -> list[tuple[str, str, int]]:
        """(listener name, host, port) of listeners this handler serves besides the Kafka ones; the broker
        registers them with the others in cluster mode (after start()), so that, e.g., the pulsar handler of
        another broker can redirect a LOOKUP here. Listed after the Kafka listeners: Kafka's choice of a
        broker's address (same listener name, else the first) is unchanged."""
        return []

    async def ownership_changed(self, bundle: Bundle, owned: bool) -> None:
        """Cluster mode: this broker acquired (`owned`) or released `bundle` (kop/cluster/bundles.py).
        Called after the broker has loaded or let go of the bundle's partitions."""
        return None

    def partition_log_released(self, ledger_name: str) -> None:
        """The log of one partition was let go (its bundle released, its topic deleted elsewhere): what
        the handler keeps per partition must not outlive it."""
        return None

    def partition_log_deleted(self, ledger_name: str) -> None:
        """The partition was deleted with its topic: its state is gone for good (a topic created again
        under the same name starts empty)."""
        return None


def _load_built_in(target: str) -> type[ProtocolHandler]:
    module, _, attr = target.partition(":")
    handler: type[ProtocolHandler] = getattr(importlib.import_module(module), attr)
    return handler


def load_handlers(config: BrokerConfig) -> list[ProtocolHandler]:
    found = {ep.name: ep for ep in entry_points(group=ENTRY_POINT_GROUP)}
    handlers: list[ProtocolHandler] = []
    for proto in config.protocols:
        name = proto.lower()
        if name in BUILT_IN:
            handler: ProtocolHandler = _load_built_in(BUILT_IN[name])()
        else:
            ep = found.get(proto)
            if ep is None:
                raise ConfigError(
                    f"bad value for messagingProtocols: no protocol handler named {proto!r} "
                    f"(installed: {', '.join(sorted(set(found) | set(BUILT_IN)))})"
                )
            handler = ep.load()()
        if not handler.accept(proto):
            raise ConfigError(f"bad value for messagingProtocols: handler {handler.name} does not accept {proto!r}")
        handler.initialize(config)
        handlers.append(handler)
    return handlers
