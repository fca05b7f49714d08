"""kop/protocol_handler.py: a second protocol handler plugs in beside the Kafka one, and the broker calls the
declared hooks on every handler (no duck typing).

The second handler here is a real, tiny line protocol on its own TCP listener ("TOPICS" answers the number
of topics), standing where a Pulsar handler will: it is written against the interface only, and the Kafka
handler is not touched for it.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from kop.cluster.bundles import Bundle
from kop.config import BrokerConfig, ConfigError
from kop.kafka.handler import KafkaProtocolHandler
from kop.protocol_handler import ProtocolHandler, load_handlers
from kop.schemas.versions import SchemaRegistry
from kop.server.service import BrokerService
from kop.server.storage import open_embedded_storage
from kop.services import BrokerServices, ProvidedServices


class LineHandler(ProtocolHandler):
    name = "line"

    def __init__(self) -> None:
        self.services: BrokerServices | None = None
        self.server: asyncio.base_events.Server | None = None
        self.released: list[str] = []
        self.deleted: list[str] = []
        self.ownership: list[tuple[Bundle, bool]] = []
        self.stopped = False

    def accept(self, protocol: str) -> bool:
        return protocol == "line"

    def initialize(self, config: BrokerConfig) -> None:
        self.config = config

    async def start(self, services: BrokerServices) -> None:
        self.services = services
        self.server = await asyncio.start_server(self._serve, "127.0.0.1", 0)

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        assert self.services is not None
        if (await reader.readline()).strip() == b"TOPICS":
            writer.write(b"%d\n" % len(list(self.services.topics.all())))
        await writer.drain()
        writer.close()

    def listeners(self) -> list[str]:
        assert self.server is not None
        return [f"line://127.0.0.1:{self.server.sockets[0].getsockname()[1]}"]

    async def stop(self, timeout: float) -> None:
        self.stopped = True
        if self.server is not None:
            self.server.close()
            await self.server.wait_closed()

    def partition_log_released(self, ledger_name: str) -> None:
        self.released.append(ledger_name)

    def partition_log_deleted(self, ledger_name: str) -> None:
        self.deleted.append(ledger_name)

    async def ownership_changed(self, bundle: Bundle, owned: bool) -> None:
        self.ownership.append((bundle, owned))


async def test_a_second_handler_serves_beside_kafka_and_hears_the_broker(tmp_path: Path) -> None:
    config = BrokerConfig.load(overrides={"kafkaListeners": "PLAINTEXT://127.0.0.1:0", "webServicePort": "-1"})
    service = BrokerService(config, await open_embedded_storage(tmp_path, config))
    kafka, line = KafkaProtocolHandler(), LineHandler()
    kafka.initialize(config)
    line.initialize(config)
    await service.start([kafka, line])
    try:
        assert line.services is service  # the broker's services, seen through the interface
        assert kafka.bound_port("PLAINTEXT") not in (None, 0)
        assert line.bound_port("PLAINTEXT") is None  # the default: not one of its listeners
        # registered with the bound Kafka port, not the configured 0
        assert service._local_broker().listeners[0][2] == kafka.bound_port("PLAINTEXT")

        topic = await service.topics.create(service.topics.parse("orders"), 2)
        host, port = line.listeners()[0].removeprefix("line://").split(":")
        reader, writer = await asyncio.open_connection(host, int(port))
        writer.write(b"TOPICS\n")
        assert int(await reader.readline()) == len(list(service.topics.all()))
        writer.close()

        ledgers = [topic.name.ledger_name(p) for p in range(2)]
        plog = await service.topics.partition_log(topic, 0)
        tables = service.topics.producer_tables
        await tables.of(plog)  # the partition seam keeps per-partition producer state
        await service.topics.delete(topic)
        assert line.deleted == ledgers  # every handler hears each partition's deletion
        assert ledgers[0] not in tables._tables  # and the seam dropped the partition's state
    finally:
        await service.stop()
    assert line.stopped


def test_messaging_protocols_name_handlers_by_entry_point() -> None:
    handlers = load_handlers(BrokerConfig.load(overrides={"messagingProtocols": "kafka"}))
    assert [type(h) for h in handlers] == [KafkaProtocolHandler]
    from kop.pulsar.handler import PulsarProtocolHandler

    both = load_handlers(BrokerConfig.load(overrides={"messagingProtocols": "kafka,pulsar"}))
    assert [type(h) for h in both] == [KafkaProtocolHandler, PulsarProtocolHandler]
    with pytest.raises(ConfigError, match="no protocol handler named 'mqtt'"):
        load_handlers(BrokerConfig.load(overrides={"messagingProtocols": "kafka,mqtt"}))


class ProvidingHandler(LineHandler):
    """A handler that brings a service of its own, as the pulsar handler brings its schema registry."""

    name = "providing"

    def accept(self, protocol: str) -> bool:
        return protocol == "providing"

    async def start(self, services: BrokerServices) -> None:
        await super().start(services)
        self.schemas = SchemaRegistry(services.topics.store, self.config.schemaCompatibilityStrategy)

    def provides(self) -> ProvidedServices:
        return ProvidedServices(pulsar_schemas=self.schemas)


async def test_the_services_a_handler_provides_are_registered_once_it_started(tmp_path: Path) -> None:
    config = BrokerConfig.load(overrides={"kafkaListeners": "PLAINTEXT://127.0.0.1:0", "webServicePort": "-1"})
    service = BrokerService(config, await open_embedded_storage(tmp_path, config))
    plain, providing = LineHandler(), ProvidingHandler()
    plain.initialize(config)
    providing.initialize(config)
    assert service.pulsar_schemas is None and service.pulsar_subscriptions is None  # nothing provides them yet
    await service.start([plain, providing])
    try:
        assert service.pulsar_schemas is providing.schemas  # a typed attribute, no lookup by name
        assert service.pulsar_subscriptions is None  # provided by no handler here
    finally:
        await service.stop()

    service = BrokerService(config, await open_embedded_storage(tmp_path / "2", config))
    twins = [ProvidingHandler(), ProvidingHandler()]
    for h in twins:
        h.initialize(config)
    with pytest.raises(ConfigError, match="providing provides pulsar_schemas, which another handler already"):
        await service.start(twins)
    await service.stop()


def test_no_service_is_looked_up_by_name() -> None:
    """Services are typed attributes of BrokerServices (kop/services.py), Optional where absent: nothing in kop/
    asks getattr/hasattr for one (or for a handler's `service`), which would hide a missing or renamed service
    from the type checker."""
    import ast

    from kop.services import BrokerServices

    names = set(BrokerServices.__annotations__) | {"service", "services"}
    root = Path(__file__).resolve().parent.parent
    found = []
    for path in sorted((root / "kop").rglob("*.py")):
        rel = str(path.relative_to(root))
        if path.name.endswith("_pb2.py"):
            continue
        for node in ast.walk(ast.parse(path.read_text(), rel)):
            if (isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in ("getattr", "hasattr")
                    and len(node.args) >= 2 and isinstance(node.args[1], ast.Constant) and node.args[1].value in names):
                found.append(f"{rel}:{node.lineno} {ast.unparse(node)}")
    assert not found, "services looked up by name (declare them on BrokerServices):\n" + "\n".join(found)
