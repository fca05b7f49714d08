"""Encrypted and chunked Pulsar messages pass through the broker; a refused send ends (issue #22).

Apache Pulsar stores an encrypted payload and each chunk of a chunked message as they were sent, and its clients
decrypt (pulsar.CryptoKeyReader, RSA keys made here with `cryptography`) and reassemble them; ours stores them as
opaque entries (kop/pulsar/opaque.py). The same assertions run on Apache Pulsar (`pulsar`) and on ours
(`kop`, `kop-bk`), each broker with a small `maxMessageSize` (MAX) and `brokerDeduplicationEnabled`, shared by
the module:

- an encrypted batch and an unbatched encrypted message come back decrypted, properties and keys intact; a
  consumer with the wrong private key, or without a key reader, gets what its ConsumerCryptoFailureAction says
  (CONSUME: the ciphertext with an encryption context saying decryption failed; DISCARD: nothing - a plaintext
  message sent after is the next one it receives);
- a message of 5 x MAX sent with chunking comes back whole, and so does an LZ4 one that compresses below MAX
  (ours stores it as sent: it cannot convert what inflates past maxMessageSize);
- a message over MAX without chunking fails its send (MessageTooBig) without the client reconnecting (counted
  from pulsar-client's own log lines), and the producer's next send succeeds.

On ours a Kafka consumer of the same topics sees what docs/pulsar.md says: one record per stored entry, its value
the opaque payload, headers `pulsar.encrypted` (key names) or `pulsar.chunk` (id/count/uuid) and `pulsar.metadata`.
"""

from __future__ import annotations

import base64
import logging
import os
import urllib.request
import uuid
from pathlib import Path

import pulsar
import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa

from tests.support.clients import consume_kafka_python, end_offsets
from tests.support.pulsar_java import PulsarJava

PULSAR_SIDE_TARGETS = ("pulsar", "kop", "kop-bk")

MAX = 32 * 1024  # maxMessageSize of the module's brokers
RECEIVE_MS = 30_000  # a generous bound for one receive; never a measured quantity
SEND_TIMEOUT_MS = 10_000


@pytest.fixture(scope="module")
def key_files(tmp_path_factory) -> dict[str, Path]:
    """PEM files of two RSA key pairs: "good.pub"/"good.pem" and "other.pub"/"other.pem"."""
    d = tmp_path_factory.mktemp("keys")
    paths: dict[str, Path] = {}
    for name in ("good", "other"):
        key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
        (d / f"{name}.pem").write_bytes(key.private_bytes(serialization.Encoding.PEM,
                                                           serialization.PrivateFormat.TraditionalOpenSSL,
                                                           serialization.NoEncryption()))
        (d / f"{name}.pub").write_bytes(key.public_key().public_bytes(serialization.Encoding.PEM,
                                                                      serialization.PublicFormat.SubjectPublicKeyInfo))
        for suffix in ("pub", "pem"):
            paths[f"{name}.{suffix}"] = d / f"{name}.{suffix}"
    return paths


@pytest.fixture(scope="module")
def keys(key_files) -> dict[str, pulsar.CryptoKeyReader]:
    """Key readers: "good" holds the producer's key pair, "wrong" the same public key with another private key."""
    return {"good": pulsar.CryptoKeyReader(str(key_files["good.pub"]), str(key_files["good.pem"])),
            "wrong": pulsar.CryptoKeyReader(str(key_files["good.pub"]), str(key_files["other.pem"]))}


class ClientLog(logging.Handler):
    """What one pulsar-client Client logged: its connections are counted from it."""

    CONNECTIONS = ("Create ClientConnection", "Connected to broker")

    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(record.getMessage())

    def connections(self) -> dict[str, int]:
        return {t: sum(t in line for line in list(self.lines)) for t in self.CONNECTIONS}


@pytest.fixture
def endpoint(target):
    # de-duplication on: a chunked message's chunks share one sequence id, and must not be taken for resends
    return target.pulsar_broker(pulsar_config={"maxMessageSize": str(MAX), "brokerDeduplicationEnabled": "true"},
                                maxMessageSize=MAX, brokerDeduplicationEnabled="true")


@pytest.fixture
def log() -> ClientLog:
    return ClientLog()


@pytest.fixture
def client(endpoint, log):
    logger = logging.getLogger(f"kop-tests.passthrough.{uuid.uuid4().hex[:8]}")
    logger.setLevel(logging.INFO)
    logger.propagate = False
    logger.addHandler(log)
    c = pulsar.Client(endpoint.service_url, operation_timeout_seconds=60, logger=logger)
    yield c
    c.close()


def names(target, hint: str) -> tuple[str, str]:
    """(Pulsar topic, the Kafka topic of the same partition log on ours)."""
    short = target.topic(hint)
    return f"persistent://public/default/{short}", short


def kafka_view(target, endpoint, topic: str) -> list:
    """What a Kafka consumer reads of the topic (ours only: Apache Pulsar has no Kafka listener)."""
    bootstrap = endpoint.handle.bootstrap
    return consume_kafka_python(bootstrap, topic, end_offsets(bootstrap, topic, 1))


def peek(endpoint, short: str, sub: str) -> tuple[dict[str, str], bytes]:
    """The admin REST's peek at the first message of a subscription of the (non-partitioned) topic."""
    url = f"{endpoint.admin_url}/admin/v2/persistent/public/default/{short}/subscription/{sub}/position/1"
    with urllib.request.urlopen(url, timeout=60) as r:
        return dict(r.headers), r.read()


def test_encrypted_messages_are_decrypted_by_the_consumer(target, endpoint, client, keys):
    topic, short = names(target, "enc")
    consumer = client.subscribe(topic, "s", crypto_key_reader=keys["good"],
                                initial_position=pulsar.InitialPosition.Earliest)
    batched = client.create_producer(topic, encryption_key="app-key", crypto_key_reader=keys["good"],
                                     batching_enabled=True, batching_max_publish_delay_ms=60_000,
                                     compression_type=pulsar.CompressionType.LZ4)
    for i in range(3):
        batched.send_async(f"secret-{i}".encode() * 20, None, properties={"i": str(i)}, partition_key=f"k{i}")
    batched.flush()  # one entry: an encrypted batch of three
    single = client.create_producer(topic, encryption_key="app-key", crypto_key_reader=keys["good"],
                                    batching_enabled=False)
    single.send(b"secret-3", properties={"i": "3"}, partition_key="k3")
    got = [consumer.receive(RECEIVE_MS) for _ in range(4)]
    assert [m.data() for m in got] == [f"secret-{i}".encode() * 20 for i in range(3)] + [b"secret-3"]
    assert [m.properties() for m in got] == [{"i": str(i)} for i in range(4)]
    assert [m.partition_key() for m in got] == [f"k{i}" for i in range(4)]
    assert all(m.encryption_context() is None or not m.encryption_context().is_decryption_failed() for m in got)
    headers, body = peek(endpoint, short, "s")  # the admin REST shows the batch unopened, and says so
    assert headers["X-Pulsar-Is-Encrypted"] == "true" and headers["X-Pulsar-compression"] == "LZ4"
    assert headers["X-Pulsar-num-batch-message"] == "3" and b"secret" not in body
    assert b"app-key" in base64.b64decode(headers["X-Pulsar-Base64-encryption-keys"])
    if target.is_kop:  # what a Kafka consumer reads of the two entries: the ciphertext, with headers saying so
        records = kafka_view(target, endpoint, short)
        assert [r.offset for r in records] == [0, 3]  # the batch takes three offsets, one record at the first
        for r in records:
            headers = dict(r.headers)
            assert headers["pulsar.encrypted"] == b"app-key" and "pulsar.metadata" in headers
            assert b"secret" not in r.value


def test_java_client_encrypts_and_decrypts(target, endpoint, client, keys, key_files):
    """Pulsar's Java client (DefaultCryptoKeyReader): its encrypted batch is decrypted by itself and by
    pulsar-client, and pulsar-client's encrypted message by it."""
    topic, _ = names(target, "enc-java")
    py_consumer = client.subscribe(topic, "py", crypto_key_reader=keys["good"],
                                   initial_position=pulsar.InitialPosition.Earliest)
    java = PulsarJava(endpoint.service_url, endpoint.admin_url)
    with java.session() as s:
        s(f"subscribe c1 {topic} java Exclusive privateKey={key_files['good.pem']}")
        s(f"produce {topic} 3 true LZ4 batch=3 encryptKey=app-key publicKey={key_files['good.pub']}")
        client.create_producer(topic, encryption_key="app-key", crypto_key_reader=keys["good"],
                               batching_enabled=False).send(b"from-python", properties={"idx": "3"})
        got = s("receive c1 4")
        assert [m["value"] for m in got] == ["java-0", "java-1", "java-2", "from-python"]
        assert [m["properties"] for m in got] == [{"idx": str(i)} for i in range(4)]
        s("close c1")
    assert [py_consumer.receive(RECEIVE_MS).data() for _ in range(4)] == [b"java-0", b"java-1", b"java-2",
                                                                          b"from-python"]


def test_wrong_or_missing_key_fails_as_configured(target, endpoint, client, keys):
    topic, _ = names(target, "enc-bad")
    consume = client.subscribe(topic, "consume", crypto_key_reader=keys["wrong"],
                               crypto_failure_action=pulsar.ConsumerCryptoFailureAction.CONSUME,
                               initial_position=pulsar.InitialPosition.Earliest)
    discard = client.subscribe(topic, "discard",
                               crypto_failure_action=pulsar.ConsumerCryptoFailureAction.DISCARD,
                               initial_position=pulsar.InitialPosition.Earliest)
    encrypted = client.create_producer(topic, encryption_key="app-key", crypto_key_reader=keys["good"],
                                       batching_enabled=False)
    encrypted.send(b"secret", properties={"p": "v"})
    client.create_producer(topic, batching_enabled=False).send(b"plain")
    msg = consume.receive(RECEIVE_MS)
    context = msg.encryption_context()
    assert context is not None and context.is_decryption_failed()
    assert [k.key for k in context.keys()] == ["app-key"] and msg.data() != b"secret"
    assert msg.properties() == {"p": "v"}
    assert consume.receive(RECEIVE_MS).data() == b"plain"
    assert discard.receive(RECEIVE_MS).data() == b"plain"  # the encrypted one was discarded


def test_chunked_message_comes_back_whole(target, endpoint, client):
    topic, short = names(target, "chunk")
    consumer = client.subscribe(topic, "s", initial_position=pulsar.InitialPosition.Earliest)
    producer = client.create_producer(topic, chunking_enabled=True, batching_enabled=False,
                                      send_timeout_millis=SEND_TIMEOUT_MS)
    big = os.urandom(5 * MAX)
    producer.send(big, properties={"kind": "big"}, partition_key="big-key")
    producer.send(b"after")
    first = consumer.receive(RECEIVE_MS)
    assert first.data() == big and first.properties() == {"kind": "big"} and first.partition_key() == "big-key"
    consumer.acknowledge(first)
    assert consumer.receive(RECEIVE_MS).data() == b"after"
    if target.is_kop:  # each chunk is a record of its own, in order, with a header naming it
        records = kafka_view(target, endpoint, short)
        chunks, last = records[:-1], records[-1]
        assert len(chunks) >= 6 and last.value == b"after"
        ids = [dict(r.headers)["pulsar.chunk"].decode().split("/") for r in chunks]
        assert [i[:2] for i in ids] == [[str(n), str(len(chunks))] for n in range(len(chunks))]
        assert len({i[2] for i in ids}) == 1
        assert b"".join(r.value for r in chunks) == big and all(r.key == b"big-key" for r in chunks)


def test_a_message_that_inflates_past_the_limit_is_stored_as_sent(target, endpoint, client):
    """An LZ4 message of 5 x MAX that compresses to a few hundred bytes: Pulsar stores it and its consumer inflates
    it; ours cannot convert it within maxMessageSize, so it stores it as sent too (no refusal)."""
    topic, short = names(target, "inflating")
    consumer = client.subscribe(topic, "s", initial_position=pulsar.InitialPosition.Earliest)
    producer = client.create_producer(topic, batching_enabled=False, send_timeout_millis=SEND_TIMEOUT_MS,
                                      compression_type=pulsar.CompressionType.LZ4)
    big = b"z" * (5 * MAX)
    producer.send(big, properties={"p": "1"})
    msg = consumer.receive(RECEIVE_MS)
    assert msg.data() == big and msg.properties() == {"p": "1"}
    if target.is_kop:  # the record says why its value is Pulsar's LZ4 block rather than the message
        [record] = kafka_view(target, endpoint, short)
        headers = dict(record.headers)
        assert headers["pulsar.unconverted"] == f"uncompressed size {5 * MAX} is over the {MAX}-byte limit".encode()
        assert headers["p"] == b"1" and len(record.value) < MAX


def test_refused_send_fails_without_reconnecting(target, endpoint, client, log):
    topic, _ = names(target, "refused")
    producer = client.create_producer(topic, batching_enabled=False, send_timeout_millis=SEND_TIMEOUT_MS)
    producer.send(b"first")
    before = log.connections()
    with pytest.raises(pulsar.MessageTooBig):
        producer.send(os.urandom(MAX + 1024))
    producer.send(b"next")  # the same producer, on the same connection
    assert log.connections() == before
    consumer = client.subscribe(topic, "s", initial_position=pulsar.InitialPosition.Earliest)
    assert [consumer.receive(RECEIVE_MS).data() for _ in range(2)] == [b"first", b"next"]
