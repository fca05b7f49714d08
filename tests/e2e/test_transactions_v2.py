"""Transaction version 2 (KIP-890 part 2, issue 23) end to end, on our broker and on Apache Kafka with the same
assertions (Kafka 4.x finalizes transaction.version 2 on a new cluster):

* over the wire (kop.protocol's codec, tests/support/txn_wire.py), a TV2 producer's requests: ApiVersions
  finalizes transaction.version 2; a transactional Produce v12 without any AddPartitionsToTxn adds its
  partition (DescribeTransactions shows it); EndTxn v5 answers the producer id and the epoch bumped by each
  end, and a retry of it the same; the markers carry the bumped epoch (DescribeProducers), so the old epoch
  is fenced; read_committed sees the committed transaction only; TxnOffsetCommit v5 without AddOffsetsToTxn
  adds the group's offsets partition (its offset is committed with the transaction, dropped with an abort).
* `kafka-features describe` prints the lines of the features we advertise as Kafka prints them.
* ours only (it reads our per-API request metrics): the Java transactional producer of the suite's Kafka
  clients (4.x) commits and aborts without sending AddPartitionsToTxn, with EndTxn v5; after UpdateFeatures
  sets transaction.version 1, a new producer runs the classic protocol (AddPartitionsToTxn, one epoch).
"""

from __future__ import annotations

import re
import time
from pathlib import Path
from typing import Any

import pytest

from kop.protocol import api_info
from tests.support.admin import Scrape
from tests.support.broker import KopBroker
from tests.support.clients import create_topic
from tests.support.java import run_java
from tests.support.txn_wire import RawClient, batches_of, txn_batch

PROBE = Path(__file__).resolve().parent.parent / "support" / "TxnProbe.java"
JVM = ["-Xmx256m", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1"]
RETRIABLE = {14, 15, 16, 51}  # COORDINATOR_LOAD_IN_PROGRESS, COORDINATOR_NOT_AVAILABLE, NOT_COORDINATOR, CONCURRENT
pytestmark = pytest.mark.java


def retried(call: Any, attempts: int = 150) -> Any:
    """A coordinator request until its error is not a retriable coordinator error (Kafka creates
    __transaction_state on first use)."""
    for _ in range(attempts):
        r = call()
        if r.error_code not in RETRIABLE:
            return r
        time.sleep(0.1)
    raise AssertionError(f"still retriable after {attempts} attempts: {r}")


def describe_txn(c: RawClient, tid: str) -> Any:
    (state,) = c.call(65, 0, transactional_ids=[tid]).transaction_states
    return state


def produce_v12(c: RawClient, topic: str, tid: str, pid: int, epoch: int, seq: int, values: list[bytes]) -> Any:
    """A transactional Produce v12, retried while the coordinator is busy with the previous transaction's
    markers (CONCURRENT_TRANSACTIONS, as Kafka 4.4 answers then; NOT_ENOUGH_REPLICAS, a busy coordinator)."""
    for _ in range(100):
        r = c.produce(topic, 0, txn_batch(pid, epoch, seq, values), transactional_id=tid, version=12)
        if r.error_code not in (19, 51):
            return r
        time.sleep(0.1)
    raise AssertionError(f"still retriable after 10 s: {r}")


def txn_offset_commit_v5(c: RawClient, tid: str, group: str, pid: int, epoch: int, topic: str, offset: int
                         ) -> list[int]:
    R = api_info(28).request_class
    for _ in range(100):
        r = c.call(28, 5, transactional_id=tid, group_id=group, producer_id=pid, producer_epoch=epoch,
                   generation_id=-1, member_id="", group_instance_id=None, topics=[R.TxnOffsetCommitRequestTopic(
                       name=topic, partitions=[R.TxnOffsetCommitRequestTopic.TxnOffsetCommitRequestPartition(
                           partition_index=0, committed_offset=offset, committed_leader_epoch=-1,
                           committed_metadata="")])])
        errors = [p.error_code for t in r.topics for p in t.partitions]
        if not set(errors) & RETRIABLE:
            return errors
        time.sleep(0.1)
    raise AssertionError(f"TxnOffsetCommit still retriable: {errors}")


def committed_offset(c: RawClient, group: str, topic: str) -> int:
    R = api_info(9).request_class
    for _ in range(100):
        r = c.call(9, 7, group_id=group, require_stable=True, topics=[R.OffsetFetchRequestTopic(
            name=topic, partition_indexes=[0])])
        (p,) = r.topics[0].partitions
        if p.error_code != 88:  # UNSTABLE_OFFSET_COMMIT: the marker is not written yet
            assert (r.error_code, p.error_code) == (0, 0), r
            return int(p.committed_offset)
        time.sleep(0.1)
    raise AssertionError("UNSTABLE_OFFSET_COMMIT for 10 s")


def test_tv2_epoch_bump_and_implicit_add_over_the_wire(target) -> None:
    b = target.broker()
    topic = target.topic("tv2")
    create_topic(b.bootstrap, topic, 1)
    tid = f"tv2-{topic}"
    c = RawClient(b.bootstrap)
    try:
        av = c.call(18, 4, client_software_name="kop-tests", client_software_version="1")
        assert {f.name: f.max_version_level for f in av.finalized_features}["transaction.version"] == 2
        assert {f.name: f.max_version for f in av.supported_features}["transaction.version"] == 2
        assert retried(lambda: c.call(10, 4, key_type=1, coordinator_keys=[tid]).coordinators[0]).error_code == 0
        init = retried(lambda: c.call(22, 4, transactional_id=tid, transaction_timeout_ms=60000, producer_id=-1,
                                      producer_epoch=-1))
        assert init.error_code == 0
        pid, e0 = init.producer_id, init.producer_epoch

        # 1st transaction: no AddPartitionsToTxn - the Produce adds the partition
        assert produce_v12(c, topic, tid, pid, e0, 0, [b"c-0", b"c-1"]).error_code == 0
        state = describe_txn(c, tid)
        assert (state.error_code, state.transaction_state, state.producer_epoch) == (0, "Ongoing", e0)
        assert [(t.topic, list(t.partitions)) for t in state.topics] == [(topic, [0])]
        # TxnOffsetCommit v5 without AddOffsetsToTxn: the group's offsets partition joins the transaction
        group = f"g-{topic}"
        assert retried(lambda: c.call(10, 4, key_type=0, coordinator_keys=[group]).coordinators[0]).error_code == 0
        assert txn_offset_commit_v5(c, tid, group, pid, e0, topic, 2) == [0]
        state = describe_txn(c, tid)
        assert "__consumer_offsets" in [t.topic for t in state.topics]
        end = retried(lambda: c.call(26, 5, transactional_id=tid, producer_id=pid, producer_epoch=e0, committed=True))
        assert (end.error_code, end.producer_id, end.producer_epoch) == (0, pid, e0 + 1)
        assert committed_offset(c, group, topic) == 2

        # 2nd transaction, at the bumped epoch (sequences start over); the zombie at the old epoch is fenced
        assert produce_v12(c, topic, tid, pid, e0 + 1, 0, [b"a-0"]).error_code == 0
        assert txn_offset_commit_v5(c, tid, group, pid, e0 + 1, topic, 5) == [0]
        assert c.produce(topic, 0, txn_batch(pid, e0, 2, [b"zombie"]), transactional_id=tid,
                         version=12).error_code != 0
        end = retried(lambda: c.call(26, 5, transactional_id=tid, producer_id=pid, producer_epoch=e0 + 1,
                                     committed=False))
        assert (end.error_code, end.producer_id, end.producer_epoch) == (0, pid, e0 + 2)
        # a retry of that end (the epoch it was sent with) answers the same once complete
        again = retried(lambda: c.call(26, 5, transactional_id=tid, producer_id=pid, producer_epoch=e0 + 1,
                                       committed=False))
        assert (again.error_code, again.producer_id, again.producer_epoch) == (0, pid, e0 + 2)
        state = describe_txn(c, tid)
        assert (state.transaction_state, state.producer_epoch) == ("CompleteAbort", e0 + 2)

        # the markers were written with the bumped epochs
        assert committed_offset(c, group, topic) == 2  # the aborted transaction's offset (5) was dropped
        (producer,) = [p for p in c.describe_producers(topic, [0])[0].active_producers if p.producer_id == pid]
        assert producer.producer_epoch == e0 + 2
        committed = c.fetch(topic, 0, 0, committed=True)
        values = [v for _, h, vs in batches_of(committed.records) if not h.is_control for v in vs]
        aborted = {(a.producer_id, a.first_offset) for a in committed.aborted_transactions}
        data = [(off, vs) for off, h, vs in batches_of(committed.records) if not h.is_control]
        assert values[:2] == [b"c-0", b"c-1"]
        assert [vs for off, vs in data if (pid, off) in aborted] == [[b"a-0"]]
        assert b"zombie" not in values
    finally:
        c.close()


# Kafka 4.2's tool separates the columns with tabs, 4.4's pads them; a level the tool does not know prints as
# "UNKNOWN <level>" (metadata.version 33, 4.4-IV2, through 4.2's tool, as against an Apache Kafka 4.4)
FEATURE_LINE = re.compile(r"^Feature: (\S+)\s+SupportedMinVersion: (.+?)\s+SupportedMaxVersion: (.+?)\s+"
                          r"FinalizedVersionLevel: (.+?)\s+Epoch: (\d+)$")


def test_kafka_features_describe_as_kafka(target, java_tools) -> None:
    b = target.broker()
    r = java_tools.run("org.apache.kafka.tools.FeatureCommand", "--bootstrap-server", b.bootstrap, "describe",
                       check=True)
    lines = {m.group(1): m.groups()[1:4] for m in map(FEATURE_LINE.match, r.lines) if m}
    assert lines["transaction.version"] == ("0", "2", "2"), r.stdout
    assert lines["group.version"] == ("0", "1", "1"), r.stdout
    assert lines["kraft.version"] == ("0", "1", "0"), r.stdout
    assert lines["metadata.version"][0] == "3.3-IV3", r.stdout
    assert lines["metadata.version"][1] == lines["metadata.version"][2], r.stdout  # finalized at the newest
    assert lines["share.version"] == ("0", "2", "2"), r.stdout  # share groups with their dead-letter queue
    # refusals (nothing changes: the reference broker is shared) and a dry run carry Kafka's messages
    refused = java_tools.run("org.apache.kafka.tools.FeatureCommand", "--bootstrap-server", b.bootstrap, "upgrade",
                             "--feature", "transaction.version=5", "--feature", "foo.version=1")
    assert refused.rc == 1, refused.stdout
    assert "Invalid update version 5 for feature transaction.version. Local controller 1 only supports versions " \
           "0-2" in refused.stdout, refused.stdout
    dry = java_tools.run("org.apache.kafka.tools.FeatureCommand", "--bootstrap-server", b.bootstrap, "downgrade",
                         "--feature", "transaction.version=1", "--dry-run", check=True)
    assert dry.stdout.strip() == "transaction.version can be downgraded to 1.", dry.stdout
    if target.is_kop:
        tools = tuple(int(x) for x in re.findall(r"\d+", java_tools.version)[:2])
        assert lines["metadata.version"][1] == ("4.4-IV2" if tools >= (4, 4) else "UNKNOWN 33"), r.stdout
        assert "eligible.leader.replicas.version" not in lines
        assert lines["streams.version"] == ("0", "1", "1"), r.stdout  # streams groups (KIP-1071), as Kafka 4.4


@pytest.fixture(scope="module")
def kop_broker(tmp_path_factory: pytest.TempPathFactory):
    broker = KopBroker(tmp_path_factory.mktemp("tv2")).start()
    yield broker
    broker.stop()


def run_probe(broker: KopBroker, topic: str, tid: str) -> dict[str, float]:
    """The Java producer commits 3 records, aborts 2, commits 2; {api or api@version: requests sent}."""
    before = Scrape(broker.admin_url)
    r = run_java(str(PROBE), ["produce", broker.bootstrap, topic, tid, "C3,A2,C2"], jvm_opts=JVM,
                 capture_output=True, text=True, timeout=180)
    assert r.returncode == 0 and r.stdout.splitlines()[-1] == "OK", r.stderr[-4000:]
    after = Scrape(broker.admin_url)
    name = "kop_server_request_latency_seconds_count"
    out = {}
    for labels in after.series(name):
        d = dict(labels)
        n = after.value(name, **d) - before.value(name, **d)
        out[d["api"]] = out.get(d["api"], 0) + n
        out[f"{d['api']}@{d['version']}"] = n
    return out


def test_java_tv2_producer_sends_no_add_partitions(kop_broker: KopBroker) -> None:
    """Ours only: our request metrics count each API by version. At transaction.version 2 the Java producer
    sends no AddPartitionsToTxn and ends with EndTxn v5, each end bumping the epoch; with the level set to 1
    through UpdateFeatures (kafka-features downgrade), a new producer runs the classic protocol."""
    topic = "tv2-java"
    create_topic(kop_broker.bootstrap, topic, 2)
    sent = run_probe(kop_broker, topic, f"tx-{topic}")
    assert sent.get("AddPartitionsToTxn", 0) == 0, sent
    assert sent.get("EndTxn@5") == 3, sent
    assert sent["Produce"] >= 3 and sent["Produce"] == sent.get("Produce@13", 0) + sent.get("Produce@12", 0), sent
    c = RawClient(kop_broker.bootstrap)
    try:
        state = describe_txn(c, f"tx-{topic}")
        assert state.transaction_state == "CompleteCommit"
        assert state.producer_epoch == 3  # a new transactional id starts at epoch 0; each of 3 ends bumped it

        R = api_info(57).request_class
        r = c.call(57, 1, timeout_ms=60000, validate_only=False, feature_updates=[R.FeatureUpdateKey(
            feature="transaction.version", max_version_level=1, upgrade_type=2)])
        assert (r.error_code, [(x.feature, x.error_code) for x in r.results]) == (0, [("transaction.version", 0)])
        sent = run_probe(kop_broker, topic, f"tx1-{topic}")
        assert sent.get("AddPartitionsToTxn", 0) >= 2 and sent.get("EndTxn@5", 0) == 0, sent
        state = describe_txn(c, f"tx1-{topic}")
        assert (state.transaction_state, state.producer_epoch) == ("CompleteCommit", 0)
    finally:
        c.close()
