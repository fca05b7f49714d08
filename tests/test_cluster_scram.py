"""Cluster mode (BookKeeper + ZooKeeper): SCRAM credentials live in the shared metadata store, so a user
created once is accepted by every broker, and a credential removed once is refused by every broker at the
next login - with confluent-kafka's SCRAM client on each broker's SASL_PLAINTEXT listener."""

from __future__ import annotations

import uuid
from pathlib import Path

import pytest
from confluent_kafka import KafkaError

from kop.security.metadata_stores import SCRAM_ROOT
from kop.security.sasl.scram import ScramCredential
from tests.support.bookkeeper import KopBookKeeperBroker, shared_cluster
from tests.support.clients import send_one_or_error
from tests.support.cluster import stop_brokers
from tests.support.net import free_port

MECH = "SCRAM-SHA-512"


def login_and_send(bootstrap: str, password: str) -> object | None:
    """None when carol's record was acknowledged, else the client's first error (confluent-kafka: a SASL
    refusal is reported at once as _AUTHENTICATION)."""
    return send_one_or_error({"bootstrap.servers": bootstrap, "security.protocol": "SASL_PLAINTEXT",
                              "sasl.mechanism": MECH, "sasl.username": "carol", "sasl.password": password},
                             "scram-cluster")


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
            assert login_and_send(f"127.0.0.1:{sasl}", "carol-secret") is None
        assert login_and_send(f"127.0.0.1:{sasl_ports[1]}", "wrong").code() == KafkaError._AUTHENTICATION
        zk.delete(node)
        for sasl in sasl_ports:
            assert login_and_send(f"127.0.0.1:{sasl}", "carol-secret").code() == KafkaError._AUTHENTICATION
    finally:
        stop_brokers(brokers)
