"""kop/kafka/authorize.py: what Kafka's tests cannot show - KoP's three spellings of a topic name are one ACL
resource (an ACL on `t` cannot be side-stepped by asking for `public/default/t` or
`persistent://public/default/t`), auto-creation through Produce needs CREATE as Metadata's does, and the
client host is compared as Java prints it."""

from __future__ import annotations

import time
import uuid
from typing import Any

import pytest

from kop.kafka.authorize import client_host
from kop.protocol import api_info
from tests.support.acl_brokers import ADMIN_HOST, PRINCIPAL, SUBJECT_HOST, RawClient, create_acls
from tests.support.broker import KopBroker

Z16 = b"\0" * 16


@pytest.fixture
def broker(tmp_path):
    # allowEveryoneIfNoAclFound: what no ACL names stays open, so one DENY is the whole set-up
    b = KopBroker(tmp_path, {"authorizationEnabled": "true", "allowEveryoneIfNoAclFound": "true",
                             "allowAutoTopicCreation": "true"}).start()
    yield b
    b.stop()


def metadata(bootstrap: str, names: list[str], auto: bool = False) -> list[tuple[str, int]]:
    M = api_info(3).request_class
    with RawClient(bootstrap, SUBJECT_HOST) as c:
        resp = c.call(3, 12, M(topics=[M.MetadataRequestTopic(topic_id=Z16, name=n) for n in names],
                                allow_auto_topic_creation=auto))
    return [(t.name, t.error_code) for t in resp.topics]


def test_every_spelling_of_a_topic_is_one_resource(broker) -> None:
    topic = f"t-{uuid.uuid4().hex[:8]}"
    spellings = [topic, f"public/default/{topic}", f"persistent://public/default/{topic}"]
    assert [code for _, code in metadata(broker.bootstrap, spellings, auto=True)] == [0, 0, 0]
    with RawClient(broker.bootstrap, ADMIN_HOST) as c:
        resp = create_acls(c, [(2, topic, 3, PRINCIPAL, SUBJECT_HOST, 8, 2)])  # DENY DESCRIBE to the subject
    assert [r.error_code for r in resp.results] == [0]
    assert sorted(metadata(broker.bootstrap, spellings)) == sorted((n, 29) for n in spellings)


def test_produce_auto_creates_only_with_create(broker) -> None:
    topic = f"p-{uuid.uuid4().hex[:8]}"
    with RawClient(broker.bootstrap, ADMIN_HOST) as c:  # WRITE on the prefix, CREATE denied on it and the cluster
        resp = create_acls(c, [(4, "kafka-cluster", 3, PRINCIPAL, SUBJECT_HOST, 5, 2),
                               (2, "p-", 4, PRINCIPAL, SUBJECT_HOST, 5, 2),
                               (2, "p-", 4, PRINCIPAL, SUBJECT_HOST, 4, 3)])
    assert [r.error_code for r in resp.results] == [0, 0, 0]
    from kafka.record.default_records import DefaultRecordBatchBuilder

    b = DefaultRecordBatchBuilder(magic=2, compression_type=0, is_transactional=0, producer_id=-1, producer_epoch=-1,
                                  base_sequence=-1, batch_size=1 << 20)
    b.append(0, timestamp=None, key=None, value=b"v", headers=[])
    R = api_info(0).request_class
    with RawClient(broker.bootstrap, SUBJECT_HOST) as c:
        resp: Any = c.call(0, 9, R(transactional_id=None, acks=-1, timeout_ms=30000, topic_data=[R.TopicProduceData(
            name=topic, partition_data=[R.PartitionProduceData(index=0, records=bytes(b.build()))])]))
    assert resp.responses[0].partition_responses[0].error_code == 3  # UNKNOWN_TOPIC_OR_PARTITION: not created
    assert metadata(broker.bootstrap, [topic]) == [(topic, 3)]


@pytest.mark.parametrize(("ip", "expected"), [
    ("127.0.0.1", "127.0.0.1"),
    ("::ffff:10.1.2.3", "10.1.2.3"),  # Java makes an IPv4-mapped address an Inet4Address
    ("::1", "0:0:0:0:0:0:0:1"),
    ("fe80::1%eth0", "fe80:0:0:0:0:0:0:1%eth0"),
])
def test_client_host_as_java_prints_it(ip: str, expected: str) -> None:
    class Conn:
        peer = "?"

    conn = Conn()
    conn.ip = ip  # type: ignore[attr-defined]
    assert client_host(conn) == expected
    conn2 = Conn()
    conn2.peer = f"[{ip}]:1234" if ":" in ip else f"{ip}:1234"
    assert client_host(conn2) == expected


def add_partitions(bootstrap: str, tid: str, names: list[str]) -> list[tuple[str, int]]:
    R = api_info(24).request_class
    with RawClient(bootstrap, SUBJECT_HOST) as c:
        resp = c.call(24, 3, R(v3_and_below_transactional_id=tid, v3_and_below_producer_id=1,
                               v3_and_below_producer_epoch=0,
                               v3_and_below_topics=[R.AddPartitionsToTxnTopic(name=n, partitions=[0]) for n in names]))
    return sorted((t.name, t.results_by_partition[0].partition_error_code) for t in resp.results_by_topic_v3_and_below)


def test_add_partitions_to_txn_refuses_every_spelling_and_internal_topics(broker) -> None:
    """AddPartitionsToTxn: a DENY on `t` covers KoP's other spellings; Kafka's internal topics are refused
    with no ACL naming them (Kafka leaves them out of the topics it authorizes); the other partitions are
    not attempted."""
    topic, other = f"x-{uuid.uuid4().hex[:8]}", f"y-{uuid.uuid4().hex[:8]}"
    assert [code for _, code in metadata(broker.bootstrap, [topic, other], auto=True)] == [0, 0]
    with RawClient(broker.bootstrap, ADMIN_HOST) as c:
        resp = create_acls(c, [(2, topic, 3, PRINCIPAL, SUBJECT_HOST, 4, 2)])  # DENY WRITE to the subject
    assert [r.error_code for r in resp.results] == [0]
    tid = f"tx-{uuid.uuid4().hex[:8]}"
    for spelling in (topic, f"public/default/{topic}", f"persistent://public/default/{topic}"):
        assert add_partitions(broker.bootstrap, tid, [spelling, other]) == sorted([(spelling, 29), (other, 55)])
    assert add_partitions(broker.bootstrap, tid, ["__consumer_offsets", other]) == [("__consumer_offsets", 29),
                                                                                    (other, 55)]
    # allowed topics of an unknown producer reach the coordinator: INVALID_PRODUCER_ID_MAPPING (after
    # COORDINATOR_LOAD_IN_PROGRESS while a young broker still loads __transaction_state, retried as clients do)
    deadline = time.monotonic() + 60
    while (got := add_partitions(broker.bootstrap, tid, [other])) == [(other, 14)] and time.monotonic() < deadline:
        time.sleep(0.2)
    assert got == [(other, 49)]
