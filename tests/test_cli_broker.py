"""`kop broker --config conf/broker.conf`: cluster mode from the command line, and the two shipped configs.

* Both conf/ files load through kop.config (no unknown key, every value valid); standalone.conf's values are
  the defaults it says they are; every config key is documented in one of the two files.
* `kop broker` refuses to start without a ZooKeeper metadata store or with embedded storage: exit status 2,
  one message naming the key, no traceback.
* docker-compose.yml (never run here: no Docker engine) parses, and agrees with conf/broker.conf and with
  the test cluster: 4 bookies, 2 brokers with distinct ids and advertised listeners, one ZooKeeper.
* `kop broker --config conf/broker.conf --override <addresses>` runs against the real ZooKeeper + 4 bookies
  of tests/support/bookkeeper.py (its own ZooKeeper chroot): kafka-python round-trips records, and they
  are in BookKeeper ledgers with the conf's E/Qw/Qa and under the chroot's /managed-ledgers.
* With fewer bookies than the ensemble size it waits outside the cluster; a second SIGTERM ends a
  shutdown that waits on a frozen ZooKeeper.
"""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from kop.config import BrokerConfig, ConfigError, parse_overrides, read_properties
from tests.support.bookkeeper import BookKeeperCluster, KopBookKeeperBroker
from tests.support.clients import (
    assert_consumed_exactly,
    by_partition,
    consume_kafka_python,
    create_topic,
    make_records,
    produce_kafka_python,
)

REPO = Path(__file__).resolve().parents[1]
BROKER_CONF = REPO / "conf" / "broker.conf"
STANDALONE_CONF = REPO / "conf" / "standalone.conf"


class KopClusterBroker(KopBookKeeperBroker):
    """`kop broker --config conf/broker.conf`, with only what a test must change overridden: addresses
    (free loopback ports, this cluster's ZooKeeper, a chroot of its own) and small test sizes. No
    --data-dir: a cluster broker keeps nothing locally."""

    def __init__(self, base_dir: Path, cluster: BookKeeperCluster, overrides: dict[str, object] | None = None,
                 **kwargs: object) -> None:
        super().__init__(base_dir, cluster, overrides, config_file=BROKER_CONF, **kwargs)
        self.overrides.setdefault("kafkaAdvertisedListeners", f"PLAINTEXT://127.0.0.1:{self.port}")
        for key in ("managedLedgerDefaultEnsembleSize", "managedLedgerDefaultWriteQuorum",
                    "managedLedgerDefaultAckQuorum"):  # conf/broker.conf's own values are the point
            if overrides is None or key not in overrides:
                self.overrides.pop(key, None)

    def command(self) -> list[str]:
        cmd = [sys.executable, "-m", "kop.cli", "broker", "--config", str(self.config_file)]
        for k, v in self.overrides.items():
            cmd += ["--override", f"{k}={v}"]
        return cmd


def _kop(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "kop.cli", *args], capture_output=True, text=True, timeout=120,
                          cwd=REPO)


# ---------------------------------------------------------------------------------------------- configs


def test_shipped_configs_load_and_document_every_key():
    standalone = BrokerConfig.load(STANDALONE_CONF)
    defaults = BrokerConfig()
    # "the values below are the defaults" (its header): a drift between the file and the code shows here.
    assert {k: getattr(standalone, k) for k in BrokerConfig.keys()} == {
        k: getattr(defaults, k) for k in BrokerConfig.keys()}
    assert standalone.storage_backend == "embedded"

    broker = BrokerConfig.load(BROKER_CONF)
    from kop.cli import check_cluster_config

    check_cluster_config(broker)  # what `kop broker` insists on
    assert broker.storage_backend == "bookkeeper"
    assert broker.metadataStoreUrl.startswith("zk:") and broker.bookkeeperMetadataServiceUri
    assert (broker.managedLedgerDefaultEnsembleSize, broker.managedLedgerDefaultWriteQuorum,
            broker.managedLedgerDefaultAckQuorum) == (3, 3, 2)
    assert broker.advertised_listeners[0].host not in ("", "0.0.0.0", "::")

    # Every key is documented: set in one of the files, or named in a comment line of standalone.conf.
    text = STANDALONE_CONF.read_text() + BROKER_CONF.read_text()
    documented = set(read_properties(STANDALONE_CONF)) | set(read_properties(BROKER_CONF))
    missing = [k for k in BrokerConfig.keys() if k not in documented and f"# {k}=" not in text]
    assert missing == [], f"config keys in neither conf/standalone.conf nor conf/broker.conf: {missing}"


def test_broker_refuses_to_start_without_zookeeper_naming_the_key(tmp_path):
    conf = tmp_path / "broker.conf"
    # conf/broker.conf minus its metadata store: what an operator gets by copying standalone.conf
    lines = [ln for ln in BROKER_CONF.read_text().splitlines()
             if not ln.startswith(("metadataStoreUrl=", "bookkeeperMetadataServiceUri=", "storageBackend="))]
    conf.write_text("\n".join(lines) + "\n")
    r = _kop("broker", "--config", str(conf))
    assert r.returncode == 2, r
    assert "metadataStoreUrl" in r.stderr and "zookeeperServers" in r.stderr
    assert "Traceback" not in r.stderr + r.stdout

    # storageBackend=embedded would make a cluster of disjoint copies: refused, naming the key
    r = _kop("broker", "--config", str(BROKER_CONF), "--override", "storageBackend=embedded")
    assert r.returncode == 2 and "storageBackend" in r.stderr and "Traceback" not in r.stderr, r

    # the same command line with standalone starts (it is only cluster mode that insists); not run here
    from kop.cli import check_cluster_config

    with pytest.raises(ConfigError, match="metadataStoreUrl"):
        check_cluster_config(BrokerConfig.load(conf))
    with pytest.raises(ConfigError, match="bad value for metadataStoreUrl"):
        check_cluster_config(BrokerConfig.load(conf, {"metadataStoreUrl": "etcd://h:2379"}))
    with pytest.raises(ConfigError, match="bad value for bookkeeperMetadataServiceUri"):
        check_cluster_config(BrokerConfig.load(conf, {"zookeeperServers": "h:2181",
                                                      "bookkeeperMetadataServiceUri": "etcd://h/ledgers"}))
    check_cluster_config(BrokerConfig.load(conf, {"zookeeperServers": "h1:2181,h2:2181"}))  # Pulsar's older key


def test_help_documents_both_commands():
    r = _kop("--help")
    assert r.returncode == 0
    assert "kop standalone" in r.stdout and "kop broker --config conf/broker.conf" in r.stdout
    r = _kop("broker", "--help")
    assert r.returncode == 0 and "metadataStoreUrl" in r.stdout and "--data-dir" not in r.stdout


# ---------------------------------------------------------------------------------------------- docker-compose


def test_docker_compose_matches_conf_and_the_test_cluster():
    """docker-compose.yml cannot run here (no Docker engine): this keeps it consistent instead. Each
    broker's command is parsed by kop's own CLI parser and its config loaded from conf/broker.conf plus its
    overrides, exactly as the container would."""
    import yaml

    from kop.cli import _parser, check_cluster_config
    from kop.storage.bookkeeper import parse_metadata_service_uri
    from kop.storage.zookeeper import parse_zookeeper_servers

    text = (REPO / "docker-compose.yml").read_text()
    assert "no Docker engine" in text.split("\n\n", 1)[0]  # the header says it is not run here
    services = yaml.safe_load(text)["services"]
    conf = BrokerConfig.load(BROKER_CONF)

    zk = [n for n, s in services.items() if str(s.get("image", "")).startswith("zookeeper:")]
    assert len(zk) == 1
    zk_host = f"{services[zk[0]].get('hostname', zk[0])}:2181"

    bk_image = [n for n, s in services.items() if str(s.get("image", "")).startswith("apache/bookkeeper:")]
    init = [n for n in bk_image if "initnewcluster" in str(services[n].get("command"))]
    bookies = [n for n in bk_image if n not in init]
    assert len(init) == 1 and len(bookies) == 4, (init, bookies)
    bookie_uris = {services[b]["environment"]["BKCONF_metadataServiceUri"] for b in bookies}
    assert bookie_uris == {services[init[0]]["environment"]["BKCONF_metadataServiceUri"]}
    (bookie_uri,) = bookie_uris
    assert parse_metadata_service_uri(bookie_uri) == (zk_host, "/ledgers")  # /ledgers at the root, as in tests
    assert len({services[b]["environment"]["BKCONF_advertisedAddress"] for b in bookies}) == 4
    for b in bookies:  # every bookie waits for the metadata init to have completed
        assert services[b]["depends_on"][init[0]]["condition"] == "service_completed_successfully"

    brokers = {n: s for n, s in services.items() if s.get("build")}
    assert len(brokers) == 2
    configs = {}
    for name, svc in brokers.items():
        args = _parser().parse_args(svc["command"])
        assert args.command == "broker"
        assert Path(args.config).name == "broker.conf" and Path(args.config).parent.name == "conf"
        cfg = BrokerConfig.load(BROKER_CONF, parse_overrides(args.override))
        check_cluster_config(cfg)
        configs[name] = cfg
        # ZooKeeper: the compose service, the chroot of conf/broker.conf; BookKeeper: the bookies' own URI
        assert parse_zookeeper_servers(cfg.metadataStoreUrl) == (
            zk_host, parse_zookeeper_servers(conf.metadataStoreUrl)[1])
        assert cfg.bookkeeperMetadataServiceUri == bookie_uri
        # ensemble settings: conf/broker.conf's, not overridden per broker
        for key in ("managedLedgerDefaultEnsembleSize", "managedLedgerDefaultWriteQuorum",
                    "managedLedgerDefaultAckQuorum", "offsetsTopicNumPartitions", "defaultNumberOfNamespaceBundles"):
            assert getattr(cfg, key) == getattr(conf, key), (name, key)
        for b in bookies:
            assert b in svc["depends_on"]
        # every listener's port is the container port the advertised address points at
        assert {lst.port for lst in cfg.listeners} == {a.port for a in cfg.advertised_listeners}
    assert len({c.kafkaBrokerId for c in configs.values()}) == 2
    assert len({str(a) for c in configs.values() for a in c.advertised_listeners}) == 4
    assert len({c.metadataStoreUrl for c in configs.values()}) == 1
    assert (conf.managedLedgerDefaultEnsembleSize, conf.managedLedgerDefaultWriteQuorum,
            conf.managedLedgerDefaultAckQuorum) == (3, 3, 2)  # what tests/support/bookkeeper.py clusters run
    assert len(bookies) > conf.managedLedgerDefaultEnsembleSize  # a failed bookie can be replaced
    published = [p.split(":")[0] for s in brokers.values() for p in s.get("ports", [])]
    assert len(published) == len(set(published))


# ---------------------------------------------------------------------------------------------- cluster


def test_kop_broker_with_conf_broker_conf_round_trips_records(cluster, tmp_path):
    broker = KopClusterBroker(tmp_path / "b1", cluster, {
        "kafkaBrokerId": 1,
        "offsetsTopicNumPartitions": 2,  # fewer ledgers to create than conf's 50; the point is the command
        "managedLedgerMaxEntriesPerLedger": 2,  # a rollover or two on the bookies (an entry is a batch)
        "managedLedgerMinLedgerRolloverTimeMinutes": 0,
    })
    try:
        broker.start()
        topic, partitions = "cli-broker-round-trip", 2
        create_topic(broker.bootstrap, topic, partitions)
        records = make_records(400, partitions, base_ts=int(time.time() * 1000) - 60_000)
        for chunk in range(3):  # three producers, so at least three batches (entries) per partition
            produce_kafka_python(broker.bootstrap, topic, records[chunk * 134:(chunk + 1) * 134], "zstd")
        ends = {p: len(rs) for p, rs in enumerate(by_partition(records, partitions))}
        got = consume_kafka_python(broker.bootstrap, topic, ends)
        assert_consumed_exactly(got, by_partition(records, partitions))

        log = broker.log_path.read_text(errors="replace")
        assert "kop broker ready (bookkeeper storage" in log
        assert not broker.data_dir.exists()  # nothing local: it is all in BookKeeper + ZooKeeper

        # The records are in this broker's chroot (Pulsar's /managed-ledgers layout), on ledgers with
        # conf/broker.conf's ensemble settings (the test did not override them).
        from kop.managed_ledger.protobuf import ManagedLedgerInfo
        from kop.storage.bookkeeper import LedgerMetadata, ledger_path

        zk = cluster.zk()
        base = f"{broker.chroot}/managed-ledgers/public/default/persistent/{topic}-partition-0"
        info = ManagedLedgerInfo.decode(zk.get(base)[0])
        assert len(info.ledgers) >= 2
        md = LedgerMetadata.decode(zk.get(ledger_path(info.ledgers[0].ledger_id))[0])
        assert (md.ensemble_size, md.write_quorum, md.ack_quorum) == (3, 3, 2)

        assert broker.stop() == 0  # SIGTERM: a clean shutdown
    finally:
        broker.stop()
        broker.purge()


def test_kop_broker_waits_for_enough_bookies_before_joining(cluster, tmp_path):
    """E=5 on a cluster of 4 bookies: the broker waits (and says so) instead of joining the cluster and
    failing to open ledgers; it has neither opened its Kafka port nor registered in ZooKeeper; SIGTERM
    ends the wait cleanly (exit status 0)."""
    import os

    from tests.support.net import port_open, wait_until

    broker = KopClusterBroker(tmp_path / "b", cluster, {"kafkaBrokerId": 7, "managedLedgerDefaultEnsembleSize": 5})
    try:
        broker._spawn(broker.command(), dict(os.environ, PYTHONUNBUFFERED="1"))
        wait_until("the broker waiting for bookies",
                   lambda: "waiting for 5 writable bookies" in broker.log_path.read_text(errors="replace"),
                   60, broker.proc, broker.log_path)
        assert "4 registered" in broker.log_path.read_text(errors="replace")
        assert broker.alive() and not port_open("127.0.0.1", broker.port)
        zk = cluster.zk()
        registered = f"{broker.chroot}/loadbalance/brokers"
        assert not zk.exists(registered) or zk.get_children(registered) == []
        assert broker.stop() == 0
        assert "Traceback" not in broker.log_path.read_text(errors="replace")
    finally:
        broker.stop()
        broker.purge()


def test_a_second_signal_ends_a_shutdown_that_waits_for_zookeeper(cluster, tmp_path):
    """SIGTERM with ZooKeeper frozen (SIGSTOP): the graceful stop waits on ZooKeeper to seal the ledger and
    release ownership. A second SIGTERM ends the process at once, exit status 1, saying so - what a crash
    does, which the next owner recovers from."""

    from tests.support.net import wait_until

    broker = KopClusterBroker(tmp_path / "b", cluster, {"kafkaBrokerId": 1, "offsetsTopicNumPartitions": 1})
    try:
        broker.start()
        create_topic(broker.bootstrap, "cli-broker-stop", 1)
        produce_kafka_python(broker.bootstrap, "cli-broker-stop", make_records(10, 1, base_ts=0), "none")
        cluster.zk_proc.send_signal(signal.SIGSTOP)
        try:
            broker.proc.send_signal(signal.SIGTERM)
            wait_until("the broker shutting down",
                       lambda: "shutting down" in broker.log_path.read_text(errors="replace"), 60, None)
            broker.proc.send_signal(signal.SIGTERM)
            rc = broker.proc.wait(60)
        finally:
            cluster.zk_proc.send_signal(signal.SIGCONT)
        assert rc == 1
        assert "exiting without a clean shutdown (a second signal)" in broker.log_path.read_text(errors="replace")
    finally:
        broker.stop()
        broker.purge()


def test_sigusr1_logs_every_task_stack_and_the_broker_keeps_serving(tmp_path):
    """SIGUSR1 is the operator's `jstack`: the log names the waiting tasks, and the broker carries on."""
    from tests.support.broker import KopBroker

    broker = KopBroker(tmp_path).start()
    try:
        broker.proc.send_signal(signal.SIGUSR1)
        deadline = time.monotonic() + 30
        while "SIGUSR1 task dump" not in broker.log_path.read_text(errors="replace"):
            assert time.monotonic() < deadline, broker.log_tail()
            time.sleep(0.1)
        dump = broker.log_path.read_text(errors="replace").split("SIGUSR1 task dump", 1)[1]
        assert " tasks" in dump and "_accept_loop" in dump and "thread MainThread" in dump, dump[:2000]
        create_topic(broker.bootstrap, "after-dump", 1)
        records = make_records(5, 1, base_ts=int(time.time() * 1000))
        produce_kafka_python(broker.bootstrap, "after-dump", records, "none")
        got = consume_kafka_python(broker.bootstrap, "after-dump", {0: len(records)})
        assert_consumed_exactly(got, by_partition(records, 1))
    finally:
        assert broker.stop() == 0
