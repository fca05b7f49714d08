"""`kop` command line: `kop standalone` runs one broker on the embedded storage; `kop broker` runs one broker
of a cluster (BookKeeper + ZooKeeper, several brokers sharing them; docs/cluster.md); `kop pipeline
audit|stream` runs the PySpark jobs against a running broker (kop/pipeline/cli.py, docs/spark.md).

    kop standalone [--config FILE] [--data-dir DIR] [--override key=value ...]
    kop broker --config conf/broker.conf [--override key=value ...]
    kop storage check --data-dir DIR

`kop storage check` verifies every entry of every ledger file offline (as BookKeeper's and Kafka's own
tools do) and lists what is damaged: exit status 1 if anything is, 0 otherwise (docs/operability.md).

Both run the same BrokerService. `kop broker` differs only in what it insists on before starting: a
ZooKeeper metadata store and BookKeeper storage. Why refuse rather than fall back: a "cluster" broker that
quietly ran on local files would be a second, disjoint copy of every topic, and clients would see data
vanish as they moved between brokers. `kop standalone` keeps accepting BookKeeper settings too (one broker
on a cluster's storage, docs/bookkeeper.md).

Configuration problems (unknown keys, bad values, a missing cluster key, a duplicate kafkaBrokerId, a port
in use) stop start-up with one clear message and exit status 2. `kop broker` waits for enough writable
bookies (the ensemble size) before it joins the cluster. SIGTERM and SIGINT shut down gracefully (in-flight
requests finish, ledgers are sealed, storage is closed); a second signal, or a shutdown stuck on an absent
ZooKeeper, exits at once with status 1. SIGUSR1 logs the stack of every asyncio task (a stuck request's await).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import gc
import logging
import os
import signal
import sys
from collections.abc import Callable, Coroutine
from pathlib import Path
from typing import TYPE_CHECKING, Any

from kop.config import BrokerConfig, ConfigError, parse_overrides
from kop.pipeline.cli import add_pipeline_parser, run_pipeline

if TYPE_CHECKING:
    from kop.cluster.ownership import Ownership
    from kop.offset.storage import LogStorage
    from kop.topics.manager import TopicManager
log = logging.getLogger("kop")

_EPILOG = """\
commands:
  kop standalone [--config conf/standalone.conf] [--data-dir DIR] [--override k=v ...]
      one broker; embedded storage (local ledger files + sqlite) in --data-dir unless the config names a
      ZooKeeper (metadataStoreUrl / zookeeperServers), then BookKeeper + ZooKeeper
  kop broker --config conf/broker.conf [--override k=v ...]
      one broker of a cluster: requires metadataStoreUrl (or zookeeperServers) and BookKeeper storage;
      every broker of the cluster needs its own kafkaBrokerId and advertised listeners (docs/cluster.md)
  kop pipeline audit|stream ...
      the PySpark jobs (docs/spark.md)
  kop storage check --data-dir DIR
      verify every entry of every ledger file offline; exit status 1 if anything is damaged
"""


def _add_common(p: argparse.ArgumentParser, config_help: str) -> None:
    p.add_argument("--config", help=config_help)
    p.add_argument(
        "--override", action="append", default=[], metavar="KEY=VALUE",
        help="set one config key (repeatable; wins over the config file)",
    )
    p.add_argument("--log-level", default=os.environ.get("KOP_LOG_LEVEL", "INFO"))


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="kop", description="KoP in Python: a Kafka wire-protocol broker",
                                epilog=_EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="command", required=True)
    s = sub.add_parser("standalone", help="run one broker on the embedded storage (local ledger files + sqlite), "
                       "or on BookKeeper + ZooKeeper when metadataStoreUrl/zookeeperServers is set")
    _add_common(s, "a broker config file (key=value lines, KoP/Pulsar key names; conf/standalone.conf)")
    s.add_argument("--data-dir", default="data", help="where ledgers and metadata are kept (default: ./data)")
    s.add_argument("--workers", type=int, metavar="N", help="worker processes of this node (numWorkers: 1 = one "
                   "process, 0 = one per core; embedded storage only; docs/architecture.md)")
    b = sub.add_parser(
        "broker", help="run one broker of a cluster: BookKeeper + ZooKeeper storage shared with the other "
        "brokers, topic ownership through ZooKeeper (docs/cluster.md)",
        description="Run one broker of a cluster. The config must name a ZooKeeper metadata store "
        "(metadataStoreUrl or zookeeperServers) and must not select storageBackend=embedded; everything "
        "lives in BookKeeper and ZooKeeper, so there is no data directory. Give every broker its own "
        "kafkaBrokerId and advertised listeners. See conf/broker.conf and docs/cluster.md.",
    )
    _add_common(b, "the broker config file (conf/broker.conf lists every key a cluster broker needs)")
    add_pipeline_parser(sub)  # PySpark jobs; pyspark itself is imported only when one runs
    st = sub.add_parser("storage", help="offline tools for the embedded storage")
    st_sub = st.add_subparsers(dest="storage_command", required=True)
    chk = st_sub.add_parser("check", help="verify every entry of every ledger file; exit status 1 if anything "
                            "is damaged (safe while a broker runs, which may still be appending)")
    chk.add_argument("--data-dir", required=True, help="the broker's data directory (holds ledgers/ and metadata.db)")
    return p


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    if args.command == "pipeline":
        return run_pipeline(args)
    if args.command == "storage":
        return storage_check(Path(args.data_dir))
    from kop.node.worker import check_node_config, node_workers, worker_identity, worker_overrides

    worker = worker_identity()  # a worker of a node (kop/node/): KOP_NODE_WORKER=i/N
    logging.basicConfig(
        level=getattr(logging, str(args.log_level).upper(), logging.INFO),
        format="%(asctime)s %(levelname)s " + (f"[worker {worker[0]}] " if worker else "") + "%(name)s: %(message)s",
        stream=sys.stderr,
    )
    try:
        overrides = parse_overrides(args.override)
        if getattr(args, "workers", None) is not None:
            overrides["numWorkers"] = str(args.workers)
        config = BrokerConfig.load(args.config, overrides)
        if worker is not None:
            config = BrokerConfig.load(args.config, {**overrides, **worker_overrides(config, worker[0])})
        if args.command == "broker":
            check_cluster_config(config)
        workers = node_workers(config) if args.command == "standalone" and worker is None else 1
        if workers > 1:
            check_node_config(config)
    except ConfigError as e:
        print(f"kop: configuration error: {e}", file=sys.stderr)
        return 2
    if workers > 1:
        return run_node(config, Path(args.data_dir), sys.argv[1:] if argv is None else argv, workers)
    if args.command == "standalone":
        return run_broker(config, Path(args.data_dir), "standalone", worker)
    if args.command == "broker":
        return run_broker(config, None, "broker")
    return 2


def storage_check(data_dir: Path) -> int:
    """`kop storage check`: one line per damaged run (ledger, entries, bytes, partition and Kafka offsets
    when known), a torn tail of an unsealed ledger as a note (recovery drops it: never acknowledged),
    then a summary. 1 when anything is damaged, 0 when not, 2 when there is no ledger directory."""
    from kop.offset.inspect import inspect_managed_ledger, list_managed_ledgers
    from kop.offset.partition_log import entry_meta
    from kop.offset.storage import LEDGERS_DIR
    from kop.storage.local.ledgers import check_ledger_file, read_entry_at

    ledger_dir = data_dir / LEDGERS_DIR
    if not ledger_dir.is_dir():
        print(f"kop storage check: no ledger directory {ledger_dir}", file=sys.stderr)
        return 2
    owners: dict[int, str] = {}
    following: dict[int, int] = {}  # ledger -> the next ledger of its managed ledger (log order)
    try:
        for name in list_managed_ledgers(data_dir):
            view = inspect_managed_ledger(data_dir, name)
            order = [lv.ledger_id for lv in view.ledgers] if view is not None else []
            for i, lid in enumerate(order):
                owners[lid] = name
                if i + 1 < len(order):
                    following[lid] = order[i + 1]
    except (OSError, ValueError) as e:  # no or unreadable metadata.db: ledgers are still checked
        print(f"note: partitions unknown ({e})")
    ids = sorted(int(f.name[:-4]) for f in ledger_dir.glob("*.log") if f.name[:-4].isdigit())
    damaged = entries = 0
    for lid in ids:
        path = str(ledger_dir / f"{lid}.log")
        try:
            chk = check_ledger_file(path)
        except OSError as e:
            print(f"DAMAGED ledger {lid}: cannot be read: {e}")
            damaged += 1
            continue
        entries += chk.entries
        where = f" (partition {owners[lid]})" if lid in owners else " (no managed ledger references it)"
        if chk.torn_tail is not None:
            print(f"note: ledger {lid}{where}: unsealed, {chk.torn_tail[1] - chk.torn_tail[0]} bytes after entry "
                  f"{chk.entries - 1} (bytes {chk.torn_tail[0]}..{chk.torn_tail[1]}) are a torn tail that recovery drops")
        for d in chk.damage:
            damaged += 1
            offsets = ""
            if d.first_entry >= 0:
                before = read_entry_at(path, chk, d.first_entry - 1)
                after = read_entry_at(path, chk, d.last_entry + 1)
                if d.last_entry + 1 >= chk.entries and lid in following:  # first entry of the next ledger
                    nxt = str(ledger_dir / f"{following[lid]}.log")
                    with contextlib.suppress(OSError, ValueError):
                        after = read_entry_at(nxt, check_ledger_file(nxt), 0)
                try:
                    lo = str(entry_meta(before).index + 1) if before is not None else "?"
                    hi = str(entry_meta(after).base_offset - 1) if after is not None else "the ledger's end"
                    offsets = f"; Kafka offsets {lo}..{hi}"
                except ValueError:  # not a Kafka entry (EntryFormatError): offsets unknown
                    pass
            print(f"DAMAGED {d.describe()}{where}{offsets}")
    print(f"checked {len(ids)} ledger(s), {entries} entries: {damaged} damaged place(s)")
    return 1 if damaged else 0


def check_cluster_config(config: BrokerConfig) -> None:
    """What `kop broker` needs beyond a valid config; raises ConfigError naming the key to set."""
    if config.storageBackend == "embedded":
        raise ConfigError("storageBackend=embedded cannot run a cluster broker: brokers share BookKeeper "
                          "storage (set storageBackend=bookkeeper, or leave it empty)")
    url = config.metadataStoreUrl or config.zookeeperServers
    if not url:
        raise ConfigError("kop broker needs a ZooKeeper metadata store: set metadataStoreUrl "
                          "(zk:host:port[,host:port][/chroot]) or zookeeperServers (host:port[,host:port])")
    from kop.storage.bookkeeper import parse_metadata_service_uri
    from kop.storage.zookeeper import parse_zookeeper_servers

    key = "metadataStoreUrl" if config.metadataStoreUrl else "zookeeperServers"
    try:
        parse_zookeeper_servers(url)
    except ValueError as e:
        raise ConfigError(f"bad value for {key}: {e}") from None
    if config.bookkeeperMetadataServiceUri:
        try:
            parse_metadata_service_uri(config.bookkeeperMetadataServiceUri)
        except ValueError as e:
            raise ConfigError(f"bad value for bookkeeperMetadataServiceUri: {e}") from None


def _warn_loopback_advertised(config: BrokerConfig) -> None:
    """A cluster broker that advertises 127.0.0.1 only works when every client and broker is on this
    machine; say so once, because the symptom (clients timing out against the other brokers' partitions)
    is far from the cause."""
    if config.kafkaAdvertisedListeners or config.advertisedAddress:
        return
    if any(lst.host in ("", "0.0.0.0", "::") for lst in config.listeners):
        log.warning("kafkaListeners binds a wildcard address and neither kafkaAdvertisedListeners nor "
                    "advertisedAddress is set: this broker advertises 127.0.0.1, reachable only from this "
                    "machine")


def run_node(config: BrokerConfig, data_dir: Path, argv: list[str], workers: int) -> int:
    """`kop standalone` with several worker processes: the supervisor (kop/node/supervisor.py)."""
    from kop.node.supervisor import serve_node
    from kop.storage.api import StorageError

    try:
        return asyncio.run(serve_node(config, data_dir, argv, workers))
    except (OSError, StorageError) as e:
        print(f"kop: cannot start: {e}", file=sys.stderr)
        return 1


def run_broker(config: BrokerConfig, data_dir: Path | None, mode: str,
               worker: tuple[int, int] | None = None) -> int:
    try:
        import uvloop

        runner: Callable[[Coroutine[Any, Any, int]], int] = uvloop.run
    except ImportError:  # uvloop is a dependency; this only keeps odd platforms running
        runner = asyncio.run
    from kop.storage.api import StorageError

    try:
        code = runner(_serve(config, data_dir, mode, worker))
        # Exit without the interpreter's final garbage collection: it walks the whole heap the broker built
        # (seconds on a busy machine, most of a graceful stop), and nothing in it is left to finalize - the
        # storage and every connection were closed by the stop.
        gc.freeze()
        return code
    except ConfigError as e:
        print(f"kop: configuration error: {e}", file=sys.stderr)
        return 2
    except (OSError, StorageError) as e:  # a port in use, ZooKeeper unreachable, ...
        print(f"kop: cannot start: {e}", file=sys.stderr)
        return 1


def dump_tasks() -> None:
    """SIGUSR1: log where every asyncio task of the broker waits and what every thread runs (what `jstack`
    is to a JVM broker), so a request that is never answered can be traced to the await it is stuck on
    without stopping the broker."""
    from kop.aio import describe_task, describe_threads

    tasks = sorted(asyncio.all_tasks(), key=lambda t: t.get_name())
    text = "\n".join(describe_task(t) for t in tasks)
    logging.getLogger("kop.tasks").warning("SIGUSR1 task dump: %d tasks\n%s\n%s", len(tasks), text,
                                           describe_threads())


async def _serve(config: BrokerConfig, data_dir: Path | None, mode: str, worker: tuple[int, int] | None = None) -> int:
    from kop.protocol_handler import load_handlers
    from kop.server.service import BrokerService
    from kop.server.storage import open_bookkeeper_storage, open_embedded_storage, open_storage

    handlers = load_handlers(config)  # config problems surface before any file is touched
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    loop.add_signal_handler(signal.SIGUSR1, dump_tasks)
    if data_dir is None:  # kop broker: everything is in BookKeeper + ZooKeeper
        _warn_loopback_advertised(config)
        storage = await open_bookkeeper_storage(config)
        where = f"metadata store {config.metadataStoreUrl or config.zookeeperServers}"
        try:
            enough = await wait_for_bookies(storage.ledger_store, config.managedLedgerDefaultEnsembleSize, stop)
        except BaseException:
            await storage.close()
            raise
        if not enough:  # stopped while waiting
            await storage.close()
            return 0
    else:
        data_dir.mkdir(parents=True, exist_ok=True)
        if worker is None:
            storage = await open_storage(data_dir, config)  # embedded, or BookKeeper + ZooKeeper (docs/bookkeeper.md)
        else:  # a worker of a node: the supervisor holds the directory (kop/node/)
            storage = await open_embedded_storage(data_dir, config, exclusive=False)
        where = f"data dir {data_dir.resolve()}"
    service = BrokerService(config, storage, _worker_ownership(config, storage, worker))
    try:
        await service.start(handlers)
    except BaseException:
        await service.stop()
        raise
    log.info("kop %s ready (%s storage, %s, broker id %d, cluster id %s)", mode, config.storage_backend,
             where, config.kafkaBrokerId, service.cluster_id)
    await stop.wait()
    log.info("shutting down")
    stop.clear()
    return await _stop_bounded(service, config, stop)


def _worker_ownership(config: BrokerConfig, storage: LogStorage,
                      worker: tuple[int, int] | None) -> Callable[[TopicManager], Ownership] | None:
    """The ownership factory of a worker of a node (kop/cluster/workers.py); None outside a node."""
    if worker is None:
        return None
    from kop.cluster.workers import WorkerOwnership

    index, workers = worker
    return lambda topics: WorkerOwnership(topics, storage.metadata_store, index, workers,
                                          config.defaultNumberOfNamespaceBundles)


async def _stop_bounded(service: object, config: BrokerConfig, again: asyncio.Event) -> int:
    """A graceful stop that cannot hang the process. It seals ledgers and releases ownership through
    ZooKeeper and the bookies; with ZooKeeper gone, those calls wait for a reconnection that may never
    come. So a second SIGTERM/SIGINT, or the stop outliving brokerShutdownTimeoutMs plus a session's worth
    of waiting, ends the process at once (exit status 1). That is safe by design: it is what a crash
    does, and the next owner of the partitions recovers (fences) their ledgers before using them."""
    grace = config.brokerShutdownTimeoutMs / 1000 + max(30.0, config.metadataStoreSessionTimeoutMillis / 1000)
    stopping = asyncio.ensure_future(service.stop())  # type: ignore[attr-defined]
    forced = asyncio.ensure_future(again.wait())
    done, _ = await asyncio.wait({stopping, forced}, timeout=grace, return_when=asyncio.FIRST_COMPLETED)
    if stopping in done:
        forced.cancel()
        stopping.result()
        return 0
    why = "a second signal" if forced.done() else f"the shutdown took more than {grace:.0f} s"
    log.error("exiting without a clean shutdown (%s); the partitions' next owner recovers their ledgers", why)
    for h in logging.getLogger().handlers:
        h.flush()
    sys.stderr.flush()
    os._exit(1)  # not a return: the loop's own shutdown would wait for the very calls that hang


async def wait_for_bookies(ledger_store: object, ensemble_size: int, stop: asyncio.Event,
                           log_every: float = 10.0) -> bool:
    """Wait until at least `ensemble_size` writable bookies are registered (True), or `stop` is set (False).

    Why a cluster broker waits before it starts serving: started first (docker compose starts every
    container at once; bookies register seconds later), it would register in ZooKeeper, be handed bundles,
    and fail to open their ledgers - the group coordinator's partitions among them - while nothing is
    wrong but the order. Waiting here keeps it out of the cluster until it can do its job; it says why
    every `log_every` seconds."""
    writable = getattr(ledger_store, "writable_bookies", None)
    if writable is None:
        return True
    loop = asyncio.get_running_loop()
    next_log = loop.time()
    while not stop.is_set():
        found = await writable()
        if len(found) >= ensemble_size:
            return True
        if loop.time() >= next_log:
            log.warning("waiting for %d writable bookies (managedLedgerDefaultEnsembleSize) before serving; "
                        "%d registered: %s", ensemble_size, len(found), ", ".join(sorted(found)) or "none")
            next_log = loop.time() + log_every
        try:
            await asyncio.wait_for(stop.wait(), 0.5)
        except TimeoutError:
            pass
    return False


if __name__ == "__main__":
    sys.exit(main())
