"""The transaction APIs over the wire (kop/kafka/apis/{find_coordinator, init_producer_id,
add_partitions_to_txn, add_offsets_to_txn, end_txn, txn_offset_commit, describe_transactions,
list_transactions}.py) on a real broker, with kafka-python's protocol classes (tests/support/wire.py):
Kafka's error codes for bad input, and the state DescribeTransactions / ListTransactions report."""

from __future__ import annotations

import time
import uuid

import pytest
from kafka.admin import KafkaAdminClient, NewTopic
from kafka.protocol.admin.transactions import DescribeTransactionsRequest, ListTransactionsRequest
from kafka.protocol.metadata.find_coordinator import FindCoordinatorRequest
from kafka.protocol.producer.transaction import (
    AddOffsetsToTxnRequest,
    AddPartitionsToTxnRequest,
    EndTxnRequest,
    InitProducerIdRequest,
    TxnOffsetCommitRequest,
)

from tests.support.broker import KopBroker
from tests.support.wire import WireClient

NONE = 0
UNKNOWN_TOPIC_OR_PARTITION = 3
COORDINATOR_LOAD_IN_PROGRESS = 14
ILLEGAL_GENERATION = 22
UNKNOWN_MEMBER_ID = 25
INVALID_REQUEST = 42
INVALID_PRODUCER_EPOCH = 47
INVALID_TXN_STATE = 48
INVALID_PRODUCER_ID_MAPPING = 49
INVALID_TRANSACTION_TIMEOUT = 50
CONCURRENT_TRANSACTIONS = 51
OPERATION_NOT_ATTEMPTED = 55
PRODUCER_FENCED = 90
TRANSACTIONAL_ID_NOT_FOUND = 105

TOPIC = "txn-wire"
APT = AddPartitionsToTxnRequest.AddPartitionsToTxnTopic
TOC = TxnOffsetCommitRequest.TxnOffsetCommitRequestTopic


@pytest.fixture(scope="module")
def broker(tmp_path_factory):
    b = KopBroker(tmp_path_factory.mktemp("kop-txn-wire"),
                  {"transactionMaxTimeoutMs": 120000, "offsetsTopicNumPartitions": 4,
                   "transactionStateLogNumPartitions": 4})
    b.start()
    admin = KafkaAdminClient(bootstrap_servers=b.bootstrap)
    admin.create_topics([NewTopic(TOPIC, 2, 1)])
    admin.close()
    yield b
    b.stop()


def retry(c: WireClient, req, version: int, field=lambda r: r.error_code, timeout: float = 30):
    """Send until the answer is not a retriable load/concurrency error (the coordinator loads at start-up,
    markers are written after EndTxn)."""
    deadline = time.monotonic() + timeout
    while True:
        resp = c.send(req, version)
        if field(resp) not in (COORDINATOR_LOAD_IN_PROGRESS, CONCURRENT_TRANSACTIONS) or time.monotonic() > deadline:
            return resp
        time.sleep(0.1)


def init(c: WireClient, tid: str, version: int = 4, timeout_ms: int = 60000, pid: int = -1, epoch: int = -1):
    req = InitProducerIdRequest(transactional_id=tid, transaction_timeout_ms=timeout_ms, producer_id=pid,
                                producer_epoch=epoch)
    return retry(c, req, version)


def add(c: WireClient, tid: str, pid: int, epoch: int, topics: dict[str, list[int]], version: int = 3):
    req = AddPartitionsToTxnRequest(v3_and_below_transactional_id=tid, v3_and_below_producer_id=pid,
                                    v3_and_below_producer_epoch=epoch,
                                    v3_and_below_topics=[APT(name=t, partitions=ps) for t, ps in topics.items()])
    resp = retry(c, req, version, lambda r: r.results_by_topic_v3_and_below[0].results_by_partition[0].partition_error_code)
    return {(t.name, p.partition_index): p.partition_error_code
            for t in resp.results_by_topic_v3_and_below for p in t.results_by_partition}


def end(c: WireClient, tid: str, pid: int, epoch: int, commit: bool, version: int = 3) -> int:
    return retry(c, EndTxnRequest(transactional_id=tid, producer_id=pid, producer_epoch=epoch, committed=commit),
                 version).error_code


def describe(c: WireClient, tid: str):
    return c.send(DescribeTransactionsRequest(transactional_ids=[tid]), 0).transaction_states[0]


def test_find_coordinator_for_a_transactional_id(broker) -> None:
    with WireClient(broker.bootstrap) as c:
        r = c.send(FindCoordinatorRequest(key_type=1, coordinator_keys=["some-txn"]), 4)
        (coord,) = r.coordinators
        assert (coord.error_code, coord.port) == (NONE, broker.port)
        r = c.send(FindCoordinatorRequest(key="some-txn", key_type=1), 3)
        assert (r.error_code, r.port) == (NONE, broker.port)


def test_init_producer_id_bumps_the_epoch_per_session_and_checks_the_timeout(broker) -> None:
    tid = f"init-{uuid.uuid4().hex[:6]}"
    with WireClient(broker.bootstrap) as c:
        first = init(c, tid)
        assert first.error_code == NONE and first.producer_epoch == 0
        second = init(c, tid)
        assert (second.producer_id, second.producer_epoch) == (first.producer_id, 1)
        assert init(c, tid, timeout_ms=120001).error_code == INVALID_TRANSACTION_TIMEOUT
        assert init(c, "", version=4).error_code == INVALID_REQUEST
        # KIP-360: a producer that is not the current one is fenced (v4+), INVALID_PRODUCER_EPOCH before
        assert init(c, tid, pid=first.producer_id, epoch=7).error_code == PRODUCER_FENCED
        assert init(c, tid, version=3, pid=first.producer_id, epoch=7).error_code == INVALID_PRODUCER_EPOCH
        # the current one gets the next epoch
        third = init(c, tid, pid=first.producer_id, epoch=1)
        assert (third.error_code, third.producer_epoch) == (NONE, 2)


def test_add_partitions_errors(broker) -> None:
    tid = f"add-{uuid.uuid4().hex[:6]}"
    with WireClient(broker.bootstrap) as c:
        r = init(c, tid)
        pid, epoch = r.producer_id, r.producer_epoch
        # an unknown topic: its partitions UNKNOWN_TOPIC_OR_PARTITION, the others not attempted
        got = add(c, tid, pid, epoch, {TOPIC: [0], "no-such-topic": [0]})
        assert got == {(TOPIC, 0): OPERATION_NOT_ATTEMPTED, ("no-such-topic", 0): UNKNOWN_TOPIC_OR_PARTITION}
        assert add(c, tid, pid, epoch, {TOPIC: [5]}) == {(TOPIC, 5): UNKNOWN_TOPIC_OR_PARTITION}
        assert describe(c, tid).transaction_state == "Empty"
        assert add(c, tid, pid, epoch + 1, {TOPIC: [0]}) == {(TOPIC, 0): PRODUCER_FENCED}
        assert add(c, tid, pid, epoch + 1, {TOPIC: [0]}, version=1) == {(TOPIC, 0): INVALID_PRODUCER_EPOCH}
        assert add(c, tid, pid + 1000, epoch, {TOPIC: [0]}) == {(TOPIC, 0): INVALID_PRODUCER_ID_MAPPING}
        assert add(c, "never-initialised", pid, epoch, {TOPIC: [0]}) == {(TOPIC, 0): INVALID_PRODUCER_ID_MAPPING}
        assert add(c, tid, pid, epoch, {TOPIC: [0, 1]}) == {(TOPIC, 0): NONE, (TOPIC, 1): NONE}
        d = describe(c, tid)
        assert (d.error_code, d.transaction_state, d.producer_id) == (NONE, "Ongoing", pid)
        assert [(t.topic, sorted(t.partitions)) for t in d.topics] == [(TOPIC, [0, 1])]
        assert d.transaction_start_time_ms > 0 and d.transaction_timeout_ms == 60000


def test_end_txn_without_a_transaction_and_with_a_wrong_epoch(broker) -> None:
    tid = f"end-{uuid.uuid4().hex[:6]}"
    with WireClient(broker.bootstrap) as c:
        r = init(c, tid)
        pid, epoch = r.producer_id, r.producer_epoch
        assert end(c, tid, pid, epoch, True) == INVALID_TXN_STATE
        assert end(c, tid, pid, epoch, False) == INVALID_TXN_STATE
        assert end(c, tid, pid, epoch + 3, True) == PRODUCER_FENCED
        assert end(c, tid, pid, epoch + 3, True, version=1) == INVALID_PRODUCER_EPOCH
        assert end(c, "never-initialised", pid, epoch, True) == INVALID_PRODUCER_ID_MAPPING


def test_describe_and_list_transactions(broker) -> None:
    tid = f"list-{uuid.uuid4().hex[:6]}"
    with WireClient(broker.bootstrap) as c:
        d = describe(c, "unknown-" + tid)
        assert d.error_code == TRANSACTIONAL_ID_NOT_FOUND
        r = init(c, tid)
        add(c, tid, r.producer_id, r.producer_epoch, {TOPIC: [1]})
        lst = retry(c, ListTransactionsRequest(state_filters=[], producer_id_filters=[r.producer_id],
                                               duration_filter=-1), 1)
        assert lst.error_code == NONE
        assert [(t.transactional_id, t.producer_id, t.transaction_state) for t in lst.transaction_states] == [
            (tid, r.producer_id, "Ongoing")]
        lst = c.send(ListTransactionsRequest(state_filters=["Bogus"], producer_id_filters=[]), 0)
        assert list(lst.unknown_state_filters) == ["Bogus"] and list(lst.transaction_states) == []
        lst = c.send(ListTransactionsRequest(state_filters=[], producer_id_filters=[], duration_filter=-1,
                                             transactional_id_pattern=f"{tid[:8]}.*"), 2)
        assert [t.transactional_id for t in lst.transaction_states] == [tid]


def test_reinit_fences_the_open_transaction(broker) -> None:
    tid = f"fence-{uuid.uuid4().hex[:6]}"
    with WireClient(broker.bootstrap) as c:
        r = init(c, tid)
        pid, epoch = r.producer_id, r.producer_epoch
        assert add(c, tid, pid, epoch, {TOPIC: [0]}) == {(TOPIC, 0): NONE}
        # the first InitProducerId answers CONCURRENT_TRANSACTIONS and aborts the transaction
        first = c.send(InitProducerIdRequest(transactional_id=tid, transaction_timeout_ms=60000, producer_id=-1,
                                             producer_epoch=-1), 4)
        assert first.error_code == CONCURRENT_TRANSACTIONS
        # the old producer is fenced at once
        assert add(c, tid, pid, epoch, {TOPIC: [1]}) == {(TOPIC, 1): PRODUCER_FENCED}
        new = init(c, tid)  # retried until the abort completed
        assert (new.error_code, new.producer_id, new.producer_epoch) == (NONE, pid, epoch + 2)
        assert describe(c, tid).transaction_state == "Empty"


def test_commit_and_abort_complete(broker) -> None:
    tid = f"commit-{uuid.uuid4().hex[:6]}"
    with WireClient(broker.bootstrap) as c:
        r = init(c, tid)
        pid, epoch = r.producer_id, r.producer_epoch
        add(c, tid, pid, epoch, {TOPIC: [0, 1]})
        assert end(c, tid, pid, epoch, True) == NONE
        deadline = time.monotonic() + 30
        while describe(c, tid).transaction_state != "CompleteCommit" and time.monotonic() < deadline:
            time.sleep(0.1)
        d = describe(c, tid)
        assert d.transaction_state == "CompleteCommit" and list(d.topics) == []
        assert end(c, tid, pid, epoch, True) == NONE  # a retry after completion
        assert end(c, tid, pid, epoch, False) == INVALID_TXN_STATE
        add(c, tid, pid, epoch, {TOPIC: [0]})
        assert end(c, tid, pid, epoch, False) == NONE
        while describe(c, tid).transaction_state != "CompleteAbort" and time.monotonic() < deadline:
            time.sleep(0.1)
        assert describe(c, tid).transaction_state == "CompleteAbort"


def test_txn_offset_commit_member_fencing(broker) -> None:
    tid = f"tocommit-{uuid.uuid4().hex[:6]}"
    group = f"g-{uuid.uuid4().hex[:6]}"
    with WireClient(broker.bootstrap) as c:
        r = init(c, tid)
        pid, epoch = r.producer_id, r.producer_epoch
        assert retry(c, AddOffsetsToTxnRequest(transactional_id=tid, producer_id=pid, producer_epoch=epoch,
                                               group_id=group), 3).error_code == NONE

        def commit(version: int, generation: int = -1, member: str = "", topic: str = TOPIC) -> int:
            req = TxnOffsetCommitRequest(
                transactional_id=tid, group_id=group, producer_id=pid, producer_epoch=epoch, generation_id=generation,
                member_id=member, group_instance_id=None,
                topics=[TOC(name=topic, partitions=[TOC.TxnOffsetCommitRequestPartition(
                    partition_index=0, committed_offset=5, committed_leader_epoch=-1, committed_metadata="")])])
            resp = retry(c, req, version, lambda r: r.topics[0].partitions[0].error_code)
            return resp.topics[0].partitions[0].error_code

        assert commit(3, generation=4) == ILLEGAL_GENERATION  # no such group at generation 4
        assert commit(0) == NONE  # no member information: accepted
        assert commit(3, generation=1, member="stranger") == UNKNOWN_MEMBER_ID
        assert commit(0, topic="no-such-topic") == UNKNOWN_TOPIC_OR_PARTITION
        # a producer id that did not add the group's offsets partition
        other = init(c, f"other-{tid}")
        req = TxnOffsetCommitRequest(
            transactional_id=f"other-{tid}", group_id=group, producer_id=other.producer_id,
            producer_epoch=other.producer_epoch, generation_id=-1, member_id="", group_instance_id=None,
            topics=[TOC(name=TOPIC, partitions=[TOC.TxnOffsetCommitRequestPartition(
                partition_index=0, committed_offset=5, committed_leader_epoch=-1, committed_metadata="")])])
        assert c.send(req, 3).topics[0].partitions[0].error_code == INVALID_TXN_STATE


def test_txn_offsets_become_visible_with_the_commit_marker_only(broker) -> None:
    from kafka.protocol.consumer.group import OffsetFetchRequest

    unstable = 88

    def fetched(c: WireClient, group: str, stable: bool) -> tuple[int, int]:
        req = OffsetFetchRequest(group_id=group, require_stable=stable, topics=[
            OffsetFetchRequest.OffsetFetchRequestTopic(name=TOPIC, partition_indexes=[0])])
        p = c.send(req, 7).topics[0].partitions[0]
        return p.committed_offset, p.error_code

    for commit in (True, False):
        tid = f"vis-{uuid.uuid4().hex[:6]}"
        group = f"gv-{uuid.uuid4().hex[:6]}"
        with WireClient(broker.bootstrap) as c:
            r = init(c, tid)
            pid, epoch = r.producer_id, r.producer_epoch
            assert retry(c, AddOffsetsToTxnRequest(transactional_id=tid, producer_id=pid, producer_epoch=epoch,
                                                   group_id=group), 0).error_code == NONE
            req = TxnOffsetCommitRequest(
                transactional_id=tid, group_id=group, producer_id=pid, producer_epoch=epoch,
                topics=[TOC(name=TOPIC, partitions=[TOC.TxnOffsetCommitRequestPartition(
                    partition_index=0, committed_offset=42, committed_metadata="m")])])
            assert retry(c, req, 0, lambda r: r.topics[0].partitions[0].error_code).topics[0].partitions[0].error_code == NONE
            assert fetched(c, group, False) == (-1, NONE)  # pending: not visible
            assert fetched(c, group, True) == (-1, unstable)
            assert end(c, tid, pid, epoch, commit, version=0) == NONE
            deadline = time.monotonic() + 30
            while fetched(c, group, True)[1] == unstable and time.monotonic() < deadline:
                time.sleep(0.1)
            assert fetched(c, group, True) == ((42, NONE) if commit else (-1, NONE))


@pytest.fixture(scope="module")
def fast_broker(tmp_path_factory):
    """A broker whose sweeps run every 200 ms and whose idle transactional ids expire after 2 s."""
    b = KopBroker(tmp_path_factory.mktemp("kop-txn-sweeps"),
                  {"transactionAbortTimedOutTransactionCleanupIntervalMs": 200, "transactionalIdExpirationMs": 2000,
                   "transactionRemoveExpiredTransactionalIdCleanupIntervalMs": 200,
                   "offsetsTopicNumPartitions": 2, "transactionStateLogNumPartitions": 2})
    b.start()
    admin = KafkaAdminClient(bootstrap_servers=b.bootstrap)
    admin.create_topics([NewTopic(TOPIC, 2, 1)])
    admin.close()
    yield b
    b.stop()


def wait_state(c: WireClient, tid: str, states: tuple[str, ...], timeout: float = 30):
    deadline = time.monotonic() + timeout
    while True:
        d = describe(c, tid)
        if d.transaction_state in states or (d.error_code and "" in states) or time.monotonic() > deadline:
            return d
        time.sleep(0.1)


def test_a_timed_out_transaction_is_aborted_and_its_producer_fenced(fast_broker) -> None:
    tid = f"timeout-{uuid.uuid4().hex[:6]}"
    with WireClient(fast_broker.bootstrap) as c:
        r = init(c, tid, timeout_ms=1000)
        pid, epoch = r.producer_id, r.producer_epoch
        assert add(c, tid, pid, epoch, {TOPIC: [0]}) == {(TOPIC, 0): NONE}
        d = wait_state(c, tid, ("CompleteAbort",))
        assert (d.transaction_state, d.producer_epoch) == ("CompleteAbort", epoch + 1)
        assert end(c, tid, pid, epoch, True) == PRODUCER_FENCED


def test_an_idle_transactional_id_expires(fast_broker) -> None:
    tid = f"expire-{uuid.uuid4().hex[:6]}"
    with WireClient(fast_broker.bootstrap) as c:
        r = init(c, tid)
        assert describe(c, tid).error_code == NONE
        d = wait_state(c, tid, ("",))
        assert d.error_code == TRANSACTIONAL_ID_NOT_FOUND
        # the id starts over with a fresh producer id
        again = init(c, tid)
        assert again.error_code == NONE and again.producer_id != r.producer_id and again.producer_epoch == 0


def test_txn_offset_commit_v6_names_topics_by_id(broker) -> None:
    """Kafka 4.4's TxnOffsetCommit v6 (KIP-1319) with a TV2 producer: topics by id (an unknown id:
    UNKNOWN_TOPIC_ID, the rest committed), ids echoed, the group's offsets partition added implicitly."""
    from kop.protocol import api_info
    from tests.support.txn_wire import RawClient

    c = RawClient(broker.bootstrap)
    try:
        M = api_info(3).request_class
        md = c.call(3, 12, topics=[M.MetadataRequestTopic(name=TOPIC)], allow_auto_topic_creation=False,
                    include_topic_authorized_operations=False)
        topic_id = md.topics[0].topic_id
        unknown_id = uuid.uuid4().bytes
        tid, group = f"tx-v6-{uuid.uuid4().hex[:6]}", f"g-v6-{uuid.uuid4().hex[:6]}"
        init = c.call(22, 4, transactional_id=tid, transaction_timeout_ms=60000, producer_id=-1, producer_epoch=-1)
        for _ in range(100):
            if init.error_code not in (COORDINATOR_LOAD_IN_PROGRESS, CONCURRENT_TRANSACTIONS):
                break
            time.sleep(0.1)
            init = c.call(22, 4, transactional_id=tid, transaction_timeout_ms=60000, producer_id=-1,
                          producer_epoch=-1)
        assert init.error_code == NONE
        R = api_info(28).request_class
        T, P = R.TxnOffsetCommitRequestTopic, R.TxnOffsetCommitRequestTopic.TxnOffsetCommitRequestPartition
        r = c.call(28, 6, transactional_id=tid, group_id=group, producer_id=init.producer_id,
                   producer_epoch=init.producer_epoch, generation_id=-1, member_id="", group_instance_id=None,
                   topics=[T(topic_id=topic_id, partitions=[P(partition_index=0, committed_offset=7,
                                                              committed_leader_epoch=-1, committed_metadata="")]),
                           T(topic_id=unknown_id, partitions=[P(partition_index=0, committed_offset=1,
                                                                committed_leader_epoch=-1, committed_metadata="")])])
        assert [(t.topic_id, [p.error_code for p in t.partitions]) for t in r.topics] == [
            (topic_id, [NONE]), (unknown_id, [100])]  # UNKNOWN_TOPIC_ID
        end = c.call(26, 5, transactional_id=tid, producer_id=init.producer_id, producer_epoch=init.producer_epoch,
                     committed=True)
        assert (end.error_code, end.producer_epoch) == (NONE, init.producer_epoch + 1)
        F = api_info(9).request_class
        for _ in range(100):
            got = c.call(9, 7, group_id=group, require_stable=True,
                         topics=[F.OffsetFetchRequestTopic(name=TOPIC, partition_indexes=[0])])
            (p,) = got.topics[0].partitions
            if p.error_code != 88:  # UNSTABLE_OFFSET_COMMIT until the marker is written
                break
            time.sleep(0.1)
        assert (p.error_code, p.committed_offset) == (NONE, 7)
    finally:
        c.close()
