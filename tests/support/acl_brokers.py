"""Brokers with ACLs enforced, for the authorization tests (tests/e2e/test_acl_*.py), and a raw Kafka client that
can connect from another loopback address.

Identity without SASL: on a PLAINTEXT listener every client is User:ANONYMOUS, on our broker and on Apache
Kafka alike, and ACL entries name a host. So the tests' *admin* is ANONYMOUS connecting from 127.0.0.1, which
a bootstrap ACL allows everything (ALL on the cluster and on every topic, group and transactional id, host
127.0.0.1), and the *subject* is ANONYMOUS connecting from 127.0.0.2 (SUBJECT_HOST), which may do only what
a test grants it. Linux routes all of 127.0.0.0/8 to the loopback interface, so no set-up is needed.

Bootstrapping the admin's ACLs needs a super user once:

* Apache Kafka 4.x (KRaft, StandardAuthorizer, allow.everyone.if.no.acl.found=false): the controller listener
  is SASL_PLAINTEXT with PLAIN user `admin`, a super user - the broker registers with its controller as that
  user (ANONYMOUS cannot be the super user here, it is the subject). The bootstrap ACLs are created through
  the controller (`kafka-acls --bootstrap-controller`).
* ours: started once with superUserRoles=ANONYMOUS, the bootstrap ACLs created, then restarted without super
  users; the ACLs persist in the metadata store.
"""

from __future__ import annotations

import socket
import struct
import time
from pathlib import Path
from typing import Any

from kop.protocol import api_info, decode_response, encode_request
from tests.support.broker import KopBroker
from tests.support.java import JavaTools
from tests.support.kafka_server import KafkaServer
from tests.support.wire import recv_exact

ADMIN_HOST = "127.0.0.1"
SUBJECT_HOST = "127.0.0.2"
PRINCIPAL = "User:ANONYMOUS"
# (resource type, name) the admin may do ALL on: CLUSTER, TOPIC *, GROUP *, TRANSACTIONAL_ID *
BOOTSTRAP = [(4, "kafka-cluster"), (2, "*"), (3, "*"), (5, "*")]
ADMIN_JAAS = ('org.apache.kafka.common.security.plain.PlainLoginModule required username="admin" '
              'password="admin-secret" user_admin="admin-secret";')

KAFKA_ACL_PROPERTIES = {
    "listener.security.protocol.map": "CONTROLLER:SASL_PLAINTEXT,PLAINTEXT:PLAINTEXT",
    "sasl.mechanism.controller.protocol": "PLAIN",
    "listener.name.controller.sasl.enabled.mechanisms": "PLAIN",
    "listener.name.controller.plain.sasl.jaas.config": ADMIN_JAAS,
    "authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
    "super.users": "User:admin",
    "allow.everyone.if.no.acl.found": "false",
}
KOP_ACL_OVERRIDES: dict[str, object] = {
    "authorizationEnabled": "true",
    "allowAutoTopicCreation": "true",
    "defaultNumPartitions": 1,
    "groupInitialRebalanceDelayMs": 0,
}


class RawClient:
    """Blocking Kafka requests encoded by kop.protocol, from a chosen source address."""

    def __init__(self, bootstrap: str, source: str = ADMIN_HOST, timeout: float = 30) -> None:
        host, port = bootstrap.rsplit(":", 1)
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self.sock.settimeout(timeout)
        self.sock.bind((source, 0))
        self.sock.connect((host, int(port)))
        self.correlation_id = 0

    def call(self, api_key: int, version: int, body: Any) -> Any:
        self.correlation_id += 1
        self.sock.sendall(encode_request(api_key, version, self.correlation_id, "acl-tests", body))
        size = struct.unpack(">i", self._recv(4))[0]
        corr, resp = decode_response(api_key, version, self._recv(size))
        assert corr == self.correlation_id
        return resp

    def closed_by_peer(self) -> bool:
        """True when the broker closed the connection (after a request it refused to parse)."""
        try:
            return self.sock.recv(1) == b""
        except (ConnectionResetError, TimeoutError):
            return True

    def _recv(self, n: int) -> bytes:
        return recv_exact(self.sock, n)

    def close(self) -> None:
        self.sock.close()

    def __enter__(self) -> RawClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def create_acls(client: RawClient, bindings: list[tuple[int, str, int, str, str, int, int]]) -> Any:
    """(resource type, name, pattern type, principal, host, operation, permission) each."""
    R = api_info(30).request_class
    return client.call(30, 3, R(creations=[R.AclCreation(
        resource_type=rt, resource_name=n, resource_pattern_type=pt, principal=p, host=h, operation=op,
        permission_type=perm) for rt, n, pt, p, h, op, perm in bindings]))


def _bootstrap_bindings() -> list[tuple[int, str, int, str, str, int, int]]:
    return [(rt, name, 3, PRINCIPAL, ADMIN_HOST, 2, 3) for rt, name in BOOTSTRAP]


def start_kop(base: Path, **overrides: object) -> KopBroker:
    broker = KopBroker(base, {**KOP_ACL_OVERRIDES, **overrides, "superUserRoles": "ANONYMOUS"})
    broker.start()
    with RawClient(broker.bootstrap) as c:
        resp = create_acls(c, _bootstrap_bindings())
        assert [r.error_code for r in resp.results] == [0] * len(BOOTSTRAP), resp
    broker.stop()
    broker.overrides["superUserRoles"] = str(overrides.get("superUserRoles", ""))
    broker.start()
    return broker


def start_kafka(base: Path) -> KafkaServer:
    server = KafkaServer(base, dict(KAFKA_ACL_PROPERTIES))
    server.start()
    admin = base / "controller-admin.properties"
    client_jaas = ADMIN_JAAS.replace(' user_admin="admin-secret"', "")
    admin.write_text(f"security.protocol=SASL_PLAINTEXT\nsasl.mechanism=PLAIN\nsasl.jaas.config={client_jaas}\n")
    tools = JavaTools()
    for rt, name in BOOTSTRAP:
        flag = {4: ["--cluster"], 2: ["--topic", name], 3: ["--group", name], 5: ["--transactional-id", name]}[rt]
        tools.run("kafka-acls", "--bootstrap-controller", f"127.0.0.1:{server.controller_port}", "--command-config",
                  admin, "--add", "--allow-principal", PRINCIPAL, "--allow-host", ADMIN_HOST, "--operation", "All",
                  *flag, check=True)
    # FindCoordinator is what makes Kafka create __consumer_offsets; group requests before it get NOT_COORDINATOR
    deadline = time.monotonic() + 120
    with RawClient(server.bootstrap) as c:
        while c.call(10, 4, api_info(10).request_class(key_type=0, coordinator_keys=["warm-up"])).coordinators[
                0].error_code:
            assert time.monotonic() < deadline, "Apache Kafka never made its group coordinator available"
            time.sleep(0.2)
    return server
