"""Cluster mode (BookKeeper + ZooKeeper): SCRAM credentials live in the shared metadata store, so a user
created once is accepted by every broker, and a credential removed once is refused by every broker at the
next login - with kafka-python's SCRAM client on each broker's SASL_PLAINTEXT listener."""

from __future__ import annotations

import uuid
from pathlib import Path

import pytest
from kafka import KafkaProducer
from kafka.errors import KafkaError

from kop.security.metadata_stores import SCRAM_ROOT
from kop.security.sasl.scram import ScramCredential
from tests.support.bookkeeper import KopBookKeeperBroker, shared_cluster
from tests.support.cluster import stop_brokers
from tests.support.net import free_port

MECH = "SCRAM-SHA-512"


def login_and_send(bootstrap: str, password: str) -> None:
    p = KafkaProducer(bootstrap_servers=bootstrap, security_protocol="SASL_PLAINTEXT", sasl_mechanism=MECH,
                      sasl_plain_username="carol", sasl_plain_password=password, max_block_ms=15000)
    try:
        p.send("scram-cluster", b"x").get(timeout=60)
    finally:
        p.close()


def test_scram_users_are_shared_by_the_brokers_of_a_cluster(tmp_path_factory: pytest.TempPathFactory) -> None:
    cluster = shared_cluster()
    cluster.ensure_all_up()
    chroot = f"/kop-scram-{uuid.uuid4().hex[:10]}"
    users = Path(tmp_path_factory.mktemp("users")) / "users.txt"
    users.write_text("admin=admin-secret\n")
    brokers: list[KopBookKeeperBroker] = []
    try:
        sasl_ports = []
        for i in (1, 2):
            port, sasl = free_port(), free_port()
            sasl_ports.append(sasl)
            b = KopBookKeeperBroker(Path(tmp_path_factory.mktemp(f"kop-{i}")), cluster, {
                "kafkaBrokerId": i, "kafkaListeners": f"PLAINTEXT://127.0.0.1:{port},SASL_PLAINTEXT://127.0.0.1:{sasl}",
                "authenticationEnabled": "true", "saslAllowedMechanisms": f"PLAIN,{MECH}",
                "saslPlainUsersFile": users, "messagingProtocols": "kafka", "groupInitialRebalanceDelayMs": 0,
                "offsetsTopicNumPartitions": 4}, chroot=chroot, port=port)
            brokers.append(b)
            b.start()
        # The user is written once, into the cluster's store (as AlterUserScramCredentials would).
        zk = cluster.zk()
        node = f"{chroot}{SCRAM_ROOT}/carol/{MECH}"
        zk.create(node, ScramCredential.from_password(MECH, "carol-secret", iterations=4096).to_json(),
                  makepath=True)
        for sasl in sasl_ports:
            login_and_send(f"127.0.0.1:{sasl}", "carol-secret")
        with pytest.raises(KafkaError):
            login_and_send(f"127.0.0.1:{sasl_ports[1]}", "wrong")
        zk.delete(node)
        for sasl in sasl_ports:
            with pytest.raises(KafkaError):
                login_and_send(f"127.0.0.1:{sasl}", "carol-secret")
    finally:
        stop_brokers(brokers)
