"""Producer and consumer throughput over SASL_SSL (PLAIN) against Apache Kafka with the same settings, and the
cost of TLS + SASL on each broker (the same run over PLAINTEXT).

    python bench/sasl_ssl.py [--records 100000] [--record-size 1024] [--rounds 2]

Both brokers start once, each with a PLAINTEXT and a SASL_SSL listener: Apache Kafka 4.x (PEM keystore,
`user_alice` in the listener's JAAS) and ours (tlsCertificateFilePath/tlsKeyFilePath, saslPlainUsersFile).
The certificate (EC P-256, signed by a CA made here) and the client settings are the same for both. Each
round, on each broker and listener in turn (order rotated per round): kafka-producer-perf-test (acks=1,
linger 5 ms, 64 KiB batches, no compression) into a fresh one-partition topic, then
kafka-consumer-perf-test over it. Printed: records/s and MB/s per broker and listener (best round), ours
over Kafka's, and each broker's SASL_SSL over PLAINTEXT (the TLS cost, measured).
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.brokers import KOP_COMMON  # noqa: E402
from bench.tools import TOOL_JVM, BenchError, parse_consumer, parse_producer, producer_args  # noqa: E402
from tests.support.broker import KopBroker  # noqa: E402
from tests.support.clients import create_topic  # noqa: E402
from tests.support.java import JavaTools  # noqa: E402
from tests.support.kafka_server import KafkaServer  # noqa: E402
from tests.support.net import free_port  # noqa: E402


def write_pki(d: Path) -> None:
    from cryptography.hazmat.primitives import serialization
    from cryptography.x509.oid import NameOID

    from tests.support.certs import CertAuthority, name

    ca = CertAuthority()
    (d / "ca.pem").write_bytes(ca.cert.public_bytes(serialization.Encoding.PEM))
    broker = ca.issue(name((NameOID.COMMON_NAME, "bench-broker")), dns=["localhost"], ips=["127.0.0.1"])
    (d / "broker.pem").write_bytes(broker.cert_pem)
    (d / "broker.key").write_bytes(broker.key_pem)
    (d / "broker-keystore.pem").write_bytes(broker.key_pem + broker.cert_pem)
    (d / "users.txt").write_text("alice=alice-secret\n")
    (d / "client.properties").write_text(
        "security.protocol=SASL_SSL\nsasl.mechanism=PLAIN\n"
        "sasl.jaas.config=org.apache.kafka.common.security.plain.PlainLoginModule required "
        'username="alice" password="alice-secret";\n'
        f"ssl.truststore.type=PEM\nssl.truststore.location={d / 'ca.pem'}\n")


def brokers(d: Path) -> dict[str, tuple[object, str, str]]:
    """{name: (server, plaintext bootstrap, sasl_ssl bootstrap)} (not started)."""
    kafka = KafkaServer(d / "kafka", heap="1g", quick_start=False)
    k_sasl = free_port()
    kafka.extra.update({
        "listeners": f"PLAINTEXT://127.0.0.1:{kafka.port},CONTROLLER://127.0.0.1:{kafka.controller_port},"
                     f"SASL_SSL://127.0.0.1:{k_sasl}",
        "advertised.listeners": f"PLAINTEXT://127.0.0.1:{kafka.port},SASL_SSL://127.0.0.1:{k_sasl}",
        "listener.security.protocol.map": "CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT,SASL_SSL:SASL_SSL",
        "sasl.enabled.mechanisms": "PLAIN",
        "listener.name.sasl_ssl.plain.sasl.jaas.config":
            'org.apache.kafka.common.security.plain.PlainLoginModule required user_alice="alice-secret";',
        "ssl.keystore.type": "PEM", "ssl.keystore.location": str(d / "broker-keystore.pem"),
    })
    port, sasl = free_port(), free_port()
    kop = KopBroker(d / "kop", {
        **KOP_COMMON, "localStoreFsyncPolicy": "none", "messagingProtocols": "kafka",
        "kafkaListeners": f"PLAINTEXT://127.0.0.1:{port},SASL_SSL://127.0.0.1:{sasl}",
        "tlsCertificateFilePath": d / "broker.pem", "tlsKeyFilePath": d / "broker.key",
        "authenticationEnabled": "true", "saslPlainUsersFile": d / "users.txt",
    }, port=port)
    return {"kafka": (kafka, kafka.bootstrap, f"127.0.0.1:{k_sasl}"),
            "kop": (kop, kop.bootstrap, f"127.0.0.1:{sasl}")}


def one_run(tools: JavaTools, admin_bootstrap: str, bootstrap: str, config: Path | None, topic: str,
            records: int, size: int) -> dict[str, float]:
    create_topic(admin_bootstrap, topic, 1)
    extra = ["--command-config", str(config)] if config else []
    r = tools.run("kafka-producer-perf-test", *producer_args(bootstrap, topic, records, size, "1", "none"), *extra,
                  jvm_opts=TOOL_JVM, timeout=1800)
    if r.rc != 0:
        raise BenchError(f"producer on {bootstrap}: rc {r.rc}\n{r.stdout[-2000:]}\n{r.stderr[-2000:]}")
    res = parse_producer(r.stdout)
    r = tools.run("kafka-consumer-perf-test", "--bootstrap-server", bootstrap, "--topic", topic, "--messages",
                  str(records), "--timeout", "60000", *extra, jvm_opts=TOOL_JVM, timeout=1800)
    if r.rc != 0:
        raise BenchError(f"consumer on {bootstrap}: rc {r.rc}\n{r.stdout[-2000:]}\n{r.stderr[-2000:]}")
    res.update(parse_consumer(r.stdout))
    if int(res["c_records"]) != records:
        raise BenchError(f"{bootstrap}: consumer read {res['c_records']:.0f} of {records}")
    return res


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--records", type=int, default=100_000)
    ap.add_argument("--record-size", type=int, default=1024)
    ap.add_argument("--rounds", type=int, default=2)
    args = ap.parse_args()
    tools = JavaTools()
    with tempfile.TemporaryDirectory(prefix="kop-bench-sasl-") as tmp:
        d = Path(tmp)
        write_pki(d)
        servers = brokers(d)
        for server, *_ in servers.values():
            server.start()  # type: ignore[attr-defined]
        best: dict[tuple[str, str], dict[str, float]] = {}
        try:
            runs = [(b, lst) for b in servers for lst in ("PLAINTEXT", "SASL_SSL")]
            for rnd in range(args.rounds):
                order = runs[rnd % len(runs):] + runs[:rnd % len(runs)]
                for b, lst in order:
                    _, plain, sasl = servers[b]
                    topic = f"bench-{lst.lower()}-{rnd}-{int(time.time())}"
                    res = one_run(tools, plain, sasl if lst == "SASL_SSL" else plain,
                                  d / "client.properties" if lst == "SASL_SSL" else None, topic, args.records,
                                  args.record_size)
                    print(f"round {rnd} {b:5s} {lst:9s} produce {res['p_rps']:9.0f} rec/s {res['p_mbps']:7.2f} MB/s"
                          f"  consume {res['c_fetch_rps']:9.0f} rec/s {res['c_fetch_mbps']:7.2f} MB/s", flush=True)
                    prev = best.get((b, lst))
                    best[(b, lst)] = {k: max(v, prev[k]) if prev else v for k, v in res.items()}
        finally:
            for server, *_ in servers.values():
                server.stop()  # type: ignore[attr-defined]
    print(f"\nbest of {args.rounds} rounds, {args.records} records of {args.record_size} B, acks=1:")
    for metric, label in (("p_mbps", "produce MB/s"), ("c_fetch_mbps", "consume MB/s (fetch phase)")):
        k_plain, k_sasl = best[("kafka", "PLAINTEXT")][metric], best[("kafka", "SASL_SSL")][metric]
        o_plain, o_sasl = best[("kop", "PLAINTEXT")][metric], best[("kop", "SASL_SSL")][metric]
        print(f"{label}: kafka {k_plain:.1f} plaintext / {k_sasl:.1f} sasl_ssl; kop {o_plain:.1f} / {o_sasl:.1f}; "
              f"kop/kafka over SASL_SSL {o_sasl / k_sasl:.2f} (plaintext {o_plain / k_plain:.2f}); "
              f"SASL_SSL/PLAINTEXT kafka {k_sasl / k_plain:.2f}, kop {o_sasl / o_plain:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
