"""Protocol handlers: plugins that speak a wire protocol on top of the broker service.

The shape is Pulsar's ProtocolHandler: a handler has a name, says whether it accepts a protocol listed in
`messagingProtocols`, is initialised with the broker config, and is started with the broker service; it then
serves its own listeners. Handlers are found through the `kop.protocol_handlers` entry-point group, so a
Pulsar-protocol handler (or a third party's) plugs in without touching the broker.
"""

from __future__ import annotations

import abc
from importlib.metadata import entry_points
from typing import TYPE_CHECKING

from kop.config import BrokerConfig, ConfigError

if TYPE_CHECKING:
    from kop.broker.service import BrokerService

ENTRY_POINT_GROUP = "kop.protocol_handlers"


class ProtocolHandler(abc.ABC):
    name: str

    @abc.abstractmethod
    def accept(self, protocol: str) -> bool: ...

    @abc.abstractmethod
    def initialize(self, config: BrokerConfig) -> None:
        """Validate and keep what the handler needs from the config; raise ConfigError on problems."""

    @abc.abstractmethod
    async def start(self, service: BrokerService) -> None:
        """Bind the listeners and begin serving."""

    @abc.abstractmethod
    def listeners(self) -> list[str]:
        """The listener URIs being served (after start: with real ports)."""

    @abc.abstractmethod
    async def stop(self, timeout: float) -> None:
        """Stop accepting, let in-flight requests finish (or fail them after `timeout`), close connections."""


def load_handlers(config: BrokerConfig) -> list[ProtocolHandler]:
    found = {ep.name: ep for ep in entry_points(group=ENTRY_POINT_GROUP)}
    handlers: list[ProtocolHandler] = []
    for proto in config.protocols:
        ep = found.get(proto)
        if ep is None:
            raise ConfigError(
                f"bad value for messagingProtocols: no protocol handler named {proto!r} "
                f"(installed: {', '.join(sorted(found)) or 'none'})"
            )
        handler: ProtocolHandler = ep.load()()
        if not handler.accept(proto):
            raise ConfigError(f"bad value for messagingProtocols: handler {ep.name} does not accept {proto!r}")
        handler.initialize(config)
        handlers.append(handler)
    return handlers
