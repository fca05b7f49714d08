"""`kop` command line: `kop standalone` runs a broker on the embedded storage; `kop pipeline audit|stream`
runs the PySpark jobs against a running broker (kop/pipeline/cli.py, docs/spark.md).

    kop standalone [--config FILE] [--data-dir DIR] [--override key=value ...]

Configuration problems (unknown keys, bad values, a port in use) stop start-up with one clear message and
exit status 2; SIGTERM and SIGINT shut down gracefully (in-flight requests finish, storage is closed).
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import signal
import sys
from pathlib import Path

from kop.config import BrokerConfig, ConfigError, parse_overrides
from kop.pipeline.cli import add_pipeline_parser, run_pipeline

log = logging.getLogger("kop")


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="kop", description="KoP in Python: a Kafka wire-protocol broker")
    sub = p.add_subparsers(dest="command", required=True)
    s = sub.add_parser("standalone", help="run a broker on the embedded storage (local ledger files + sqlite), "
                       "or on BookKeeper + ZooKeeper when metadataStoreUrl/zookeeperServers is set")
    s.add_argument("--config", help="a broker config file (key=value lines, KoP/Pulsar key names)")
    s.add_argument("--data-dir", default="data", help="where ledgers and metadata are kept (default: ./data)")
    s.add_argument(
        "--override", action="append", default=[], metavar="KEY=VALUE",
        help="set one config key (repeatable; wins over the config file)",
    )
    s.add_argument("--log-level", default=os.environ.get("KOP_LOG_LEVEL", "INFO"))
    add_pipeline_parser(sub)  # PySpark jobs; pyspark itself is imported only when one runs
    return p


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    if args.command == "pipeline":
        return run_pipeline(args)
    logging.basicConfig(
        level=getattr(logging, str(args.log_level).upper(), logging.INFO),
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
        stream=sys.stderr,
    )
    try:
        config = BrokerConfig.load(args.config, parse_overrides(args.override))
    except ConfigError as e:
        print(f"kop: configuration error: {e}", file=sys.stderr)
        return 2
    if args.command == "standalone":
        return run_standalone(config, Path(args.data_dir))
    return 2


def run_standalone(config: BrokerConfig, data_dir: Path) -> int:
    try:
        import uvloop

        runner = uvloop.run
    except ImportError:  # uvloop is a dependency; this only keeps odd platforms running
        runner = asyncio.run
    try:
        return runner(_serve(config, data_dir))
    except ConfigError as e:
        print(f"kop: configuration error: {e}", file=sys.stderr)
        return 2
    except OSError as e:
        print(f"kop: cannot start: {e}", file=sys.stderr)
        return 1


async def _serve(config: BrokerConfig, data_dir: Path) -> int:
    from kop.broker.protocol_handler import load_handlers
    from kop.broker.service import BrokerService
    from kop.broker.storage import open_storage

    handlers = load_handlers(config)  # config problems surface before any file is touched
    data_dir.mkdir(parents=True, exist_ok=True)
    storage = await open_storage(data_dir, config)  # embedded, or BookKeeper + ZooKeeper (docs/bookkeeper.md)
    service = BrokerService(config, storage)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    try:
        await service.start(handlers)
    except BaseException:
        await service.stop()
        raise
    log.info("kop standalone ready (%s storage, data dir %s, cluster id %s)", config.storage_backend,
             data_dir.resolve(), service.cluster_id)
    await stop.wait()
    log.info("shutting down")
    await service.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
