"""Issue #14's authorization matrix: for each API the Kafka clients use, a principal without the ACL it needs
gets Kafka's authorization error, and with it succeeds - on our broker and on Apache Kafka 4.x
(StandardAuthorizer, allow.everyone.if.no.acl.found=false) with the same ACLs, and the answers are the same.

Identity: tests/support/acl_brokers.py (the admin is User:ANONYMOUS from 127.0.0.1 with a bootstrap ALLOW ALL,
the subject is User:ANONYMOUS from 127.0.0.2). Each case sends one raw request (kop.protocol's codec, so every
field is compared) as the subject once per step: step 0 with no ACL for it, then with the ACLs of each
further step added; afterwards the subject's ACLs are deleted again. An ACL counts as in force once the
broker's DescribeAcls lists it (Kafka's broker answers DescribeAcls from its authorizer's copy).

Both brokers run in this module (not through the `target` fixture): the comparison is the test.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import pytest

from kop.protocol import api_info
from kop.protocol.model import Struct
from tests.support.acl_brokers import (
    PRINCIPAL,
    SUBJECT_HOST,
    RawClient,
    create_acls,
    start_kafka,
    start_kop,
)

# resource types, operations (Kafka's codes)
TOPIC, GROUP, CLUSTER, TXN = 2, 3, 4, 5
READ, WRITE, CREATE, DELETE, ALTER, DESCRIBE = 3, 4, 5, 6, 7, 8
CLUSTER_ACTION, IDEMPOTENT_WRITE, DESCRIBE_CONFIGS, ALTER_CONFIGS = 9, 12, 10, 11
AUTH_ERRORS = {29, 30, 31, 53}
Z16 = b"\0" * 16


def req(key: int, **fields: Any) -> Any:
    return api_info(key).request_class(**fields)


@dataclass
class Env:
    bootstrap: str
    topic: str
    group: str
    token: str
    extra: dict[str, Any] = field(default_factory=dict)

    def admin(self) -> RawClient:
        return RawClient(self.bootstrap)

    def subject(self) -> RawClient:
        return RawClient(self.bootstrap, SUBJECT_HOST)

    def name(self, key: str) -> str:
        return {"topic": self.topic, "group": self.group, "cluster": "kafka-cluster", "txn": f"tx-{self.token}",
                "new": f"{self.topic}-new"}[key]


# ---- set-ups (run as the admin) ----------------------------------------------------------------------------

def make_topic(env: Env, name: str | None = None, partitions: int = 1) -> None:
    R = api_info(19).request_class
    with env.admin() as c:
        resp = c.call(19, 7, R(topics=[R.CreatableTopic(name=name or env.topic, num_partitions=partitions,
                                                        replication_factor=1, assignments=[], configs=[])],
                               timeout_ms=30000))
    assert resp.topics[0].error_code == 0, resp
    wait_leader(env, name or env.topic)


def wait_leader(env: Env, name: str) -> None:
    deadline = time.monotonic() + 60
    while True:
        with env.admin() as c:
            md = c.call(3, 12, req(3, topics=[api_info(3).request_class.MetadataRequestTopic(topic_id=Z16, name=name)],
                                   allow_auto_topic_creation=False))
        t = md.topics[0]
        if t.error_code == 0 and t.partitions and all(p.leader_id >= 0 for p in t.partitions):
            return
        assert time.monotonic() < deadline, md
        time.sleep(0.2)


def produce_batch() -> bytes:
    from kafka.record.default_records import DefaultRecordBatchBuilder

    b = DefaultRecordBatchBuilder(magic=2, compression_type=0, is_transactional=0, producer_id=-1, producer_epoch=-1,
                                  base_sequence=-1, batch_size=1 << 20)
    b.append(0, timestamp=None, key=b"k", value=b"v", headers=[])
    return bytes(b.build())


def commit_offsets(env: Env) -> None:
    """The group exists (Empty, with an offset for partition 0 of the topic)."""
    make_topic(env)
    with env.admin() as c:
        c.call(10, 4, req(10, key_type=0, coordinator_keys=[env.group]))
    R = api_info(8).request_class
    deadline = time.monotonic() + 60
    while True:
        with env.admin() as c:
            resp = c.call(8, 9, R(group_id=env.group, generation_id_or_member_epoch=-1, member_id="",
                                  group_instance_id=None, topics=[R.OffsetCommitRequestTopic(name=env.topic, partitions=[
                                      R.OffsetCommitRequestPartition(partition_index=0, committed_offset=0,
                                                                     committed_leader_epoch=-1, committed_metadata="")])]))
        code = resp.topics[0].partitions[0].error_code
        if code == 0:
            return
        assert code in (14, 15, 16) and time.monotonic() < deadline, resp  # coordinator loading / moving
        time.sleep(0.2)


def call_until(env: Env, key: int, version: int, body: Any, code: Callable[[Any], int]) -> Any:
    """As the admin, until `code(answer)` is NONE (coordinators loading, __transaction_state being created)."""
    deadline = time.monotonic() + 60
    while True:
        with env.admin() as c:
            resp = c.call(key, version, body)
        if code(resp) == 0:
            return resp
        assert code(resp) in (7, 14, 15, 16, 51) and time.monotonic() < deadline, resp
        time.sleep(0.2)


def open_txn(env: Env) -> None:
    """The admin's producer has an Ongoing transaction with partition 0 of the topic in it."""
    make_topic(env)
    tid = env.name("txn")
    call_until(env, 10, 4, req(10, key_type=1, coordinator_keys=[tid]), lambda r: r.coordinators[0].error_code)
    init = call_until(env, 22, 5, req(22, transactional_id=tid, transaction_timeout_ms=60000, producer_id=-1,
                                      producer_epoch=-1), lambda r: r.error_code)
    env.extra.update(pid=init.producer_id, epoch=init.producer_epoch)
    call_until(env, 24, 3, add_partitions(env), lambda r: r.results_by_topic_v3_and_below[0].results_by_partition[
        0].partition_error_code)


def open_txn_with_offsets(env: Env) -> None:
    """As open_txn, and the group's offsets partition is in the transaction too (AddOffsetsToTxn)."""
    open_txn(env)
    call_until(env, 25, 3, add_offsets(env), lambda r: r.error_code)


# ---- the requests (sent as the subject) --------------------------------------------------------------------

def produce(env: Env) -> Any:
    R = api_info(0).request_class
    return R(transactional_id=None, acks=-1, timeout_ms=30000, topic_data=[R.TopicProduceData(
        name=env.topic, partition_data=[R.PartitionProduceData(index=0, records=produce_batch())])])


def fetch(env: Env) -> Any:
    R = api_info(1).request_class
    return R(replica_id=-1, max_wait_ms=0, min_bytes=0, max_bytes=1 << 20, isolation_level=0, session_id=0,
             session_epoch=-1, topics=[R.FetchTopic(topic=env.topic, partitions=[R.FetchPartition(
                 partition=0, current_leader_epoch=-1, fetch_offset=0, log_start_offset=-1,
                 partition_max_bytes=1 << 20)])], forgotten_topics_data=[], rack_id="")


def list_offsets(env: Env) -> Any:
    R = api_info(2).request_class
    return R(replica_id=-1, isolation_level=0, topics=[R.ListOffsetsTopic(name=env.topic, partitions=[
        R.ListOffsetsPartition(partition_index=0, current_leader_epoch=-1, timestamp=-1)])])


def offset_for_leader_epoch(env: Env) -> Any:
    R = api_info(23).request_class
    return R(replica_id=-1, topics=[R.OffsetForLeaderTopic(topic=env.topic, partitions=[
        R.OffsetForLeaderTopic.OffsetForLeaderPartition(partition=0, current_leader_epoch=-1, leader_epoch=0)])])


def metadata(env: Env, name: str | None = None, auto: bool = False, ops: bool = True) -> Any:
    R = api_info(3).request_class
    return R(topics=[R.MetadataRequestTopic(topic_id=Z16, name=name or env.topic)], allow_auto_topic_creation=auto,
             include_topic_authorized_operations=ops)


def offset_commit(env: Env) -> Any:
    R = api_info(8).request_class
    return R(group_id=env.group, generation_id_or_member_epoch=-1, member_id="", group_instance_id=None,
             topics=[R.OffsetCommitRequestTopic(name=env.topic, partitions=[R.OffsetCommitRequestPartition(
                 partition_index=0, committed_offset=1, committed_leader_epoch=-1, committed_metadata="")])])


def offset_fetch(env: Env) -> Any:
    R = api_info(9).request_class
    return R(groups=[R.OffsetFetchRequestGroup(group_id=env.group, member_id=None, member_epoch=-1, topics=[
        R.OffsetFetchRequestGroup.OffsetFetchRequestTopics(name=env.topic, partition_indexes=[0])])],
        require_stable=False)


def offset_fetch_all(env: Env) -> Any:
    R = api_info(9).request_class
    return R(groups=[R.OffsetFetchRequestGroup(group_id=env.group, member_id=None, member_epoch=-1, topics=None)],
             require_stable=False)


def join_group(env: Env) -> Any:
    R = api_info(11).request_class
    return R(group_id=env.group, session_timeout_ms=30000, rebalance_timeout_ms=30000, member_id="",
             group_instance_id=None, protocol_type="consumer",
             protocols=[R.JoinGroupRequestProtocol(name="range", metadata=b"")], reason=None)


def sync_group(env: Env) -> Any:
    return req(14, group_id=env.group, generation_id=1, member_id="m", group_instance_id=None,
               protocol_type="consumer", protocol_name="range", assignments=[])


def heartbeat(env: Env) -> Any:
    return req(12, group_id=env.group, generation_id=1, member_id="m", group_instance_id=None)


def leave_group(env: Env) -> Any:
    R = api_info(13).request_class
    return R(group_id=env.group, members=[R.MemberIdentity(member_id="m", group_instance_id=None, reason=None)])


def describe_groups(env: Env) -> Any:
    return req(15, groups=[env.group], include_authorized_operations=True)


def list_groups(env: Env) -> Any:
    return req(16, states_filter=[], types_filter=[])


def delete_groups(env: Env) -> Any:
    return req(42, groups_names=[env.group])


def offset_delete(env: Env) -> Any:
    R = api_info(47).request_class
    return R(group_id=env.group, topics=[R.OffsetDeleteRequestTopic(name=env.topic, partitions=[
        R.OffsetDeleteRequestPartition(partition_index=0)])])


def create_topics(env: Env) -> Any:
    R = api_info(19).request_class
    return R(topics=[R.CreatableTopic(name=env.name("new"), num_partitions=1, replication_factor=1, assignments=[],
                                      configs=[])], timeout_ms=30000, validate_only=False)


def delete_topics(env: Env) -> Any:
    R = api_info(20).request_class
    return R(topics=[R.DeleteTopicState(name=env.topic, topic_id=Z16)], timeout_ms=30000)


def create_partitions(env: Env) -> Any:
    R = api_info(37).request_class
    return R(topics=[R.CreatePartitionsTopic(name=env.topic, count=2, assignments=None)], timeout_ms=30000,
             validate_only=True)


def describe_configs(env: Env) -> Any:
    R = api_info(32).request_class
    return R(resources=[R.DescribeConfigsResource(resource_type=2, resource_name=env.topic,
                                                  configuration_keys=["retention.ms"])],
             include_synonyms=False, include_documentation=False)


def describe_broker_configs(env: Env) -> Any:
    R = api_info(32).request_class
    return R(resources=[R.DescribeConfigsResource(resource_type=4, resource_name="1",
                                                  configuration_keys=["no.such.config"])],
             include_synonyms=False, include_documentation=False)


def alter_configs(env: Env) -> Any:
    R = api_info(33).request_class
    return R(resources=[R.AlterConfigsResource(resource_type=2, resource_name=env.topic, configs=[
        R.AlterConfigsResource.AlterableConfig(name="retention.ms", value="3600000")])], validate_only=True)


def incremental_alter_configs(env: Env) -> Any:
    R = api_info(44).request_class
    return R(resources=[R.AlterConfigsResource(resource_type=2, resource_name=env.topic, configs=[
        R.AlterConfigsResource.AlterableConfig(name="retention.ms", config_operation=0, value="3600000")])],
        validate_only=True)


def alter_broker_configs(env: Env) -> Any:
    R = api_info(33).request_class
    # broker 1's own set: the legacy API replaces a whole set, and a KRaft cluster with ELR refuses a cluster
    # default set without the min.insync.replicas its format put there
    return R(resources=[R.AlterConfigsResource(resource_type=4, resource_name="1", configs=[
        R.AlterConfigsResource.AlterableConfig(name="log.cleaner.threads", value="2")])], validate_only=True)


def incremental_alter_broker_configs(env: Env) -> Any:
    R = api_info(44).request_class
    return R(resources=[R.AlterConfigsResource(resource_type=4, resource_name="", configs=[
        R.AlterConfigsResource.AlterableConfig(name="log.cleaner.threads", config_operation=0, value="2")])],
        validate_only=True)


def delete_records(env: Env) -> Any:
    R = api_info(21).request_class
    return R(topics=[R.DeleteRecordsTopic(name=env.topic, partitions=[R.DeleteRecordsPartition(
        partition_index=0, offset=0)])], timeout_ms=30000)


def init_producer_id(env: Env) -> Any:
    return req(22, transactional_id=None, transaction_timeout_ms=60000, producer_id=-1, producer_epoch=-1)


def describe_cluster(env: Env) -> Any:
    return req(60, include_cluster_authorized_operations=True, endpoint_type=1)


def find_coordinator(env: Env) -> Any:
    return req(10, key_type=0, coordinator_keys=[env.group])


def cg_heartbeat(env: Env) -> Any:
    return req(68, group_id=env.group, member_id=uuid.uuid4().hex[:22], member_epoch=0, instance_id=None,
               rack_id=None, rebalance_timeout_ms=30000, subscribed_topic_names=[env.topic],
               server_assignor=None, topic_partitions=[])


def cg_describe(env: Env) -> Any:
    return req(69, group_ids=[env.group], include_authorized_operations=True)


def describe_acls(env: Env) -> Any:
    return req(29, resource_type_filter=2, resource_name_filter=env.topic, pattern_type_filter=3,
               principal_filter=None, host_filter=None, operation=1, permission_type=1)


def create_acls_req(env: Env) -> Any:
    R = api_info(30).request_class
    return R(creations=[R.AclCreation(resource_type=GROUP, resource_name=f"other-{env.token}", resource_pattern_type=3,
                                      principal="User:nobody", host="*", operation=READ, permission_type=3)])


def delete_acls_req(env: Env) -> Any:
    R = api_info(31).request_class
    return R(filters=[R.DeleteAclsFilter(resource_type_filter=GROUP, resource_name_filter=f"other-{env.token}",
                                         pattern_type_filter=3, principal_filter=None, host_filter=None, operation=1,
                                         permission_type=1)])


def alter_scram(env: Env) -> Any:
    R = api_info(51).request_class
    return R(deletions=[R.ScramCredentialDeletion(name=f"b-{env.token}", mechanism=1)], upsertions=[
        R.ScramCredentialUpsertion(name=f"a-{env.token}", mechanism=1, iterations=8192, salt=b"s" * 16,
                                   salted_password=b"p" * 32)])


def describe_scram(env: Env) -> Any:
    R = api_info(50).request_class
    return R(users=[R.UserName(name=f"nobody-{env.token}")])


def add_partitions(env: Env) -> Any:
    R = api_info(24).request_class
    return R(v3_and_below_transactional_id=env.name("txn"), v3_and_below_producer_id=env.extra["pid"],
             v3_and_below_producer_epoch=env.extra["epoch"],
             v3_and_below_topics=[R.AddPartitionsToTxnTopic(name=env.topic, partitions=[0])])


def add_partitions_verify(env: Env) -> Any:
    """v4+, a broker's form: is partition 0 in the transaction (verify_only)?"""
    R = api_info(24).request_class
    T = R.AddPartitionsToTxnTransaction
    return R(transactions=[T(transactional_id=env.name("txn"), producer_id=env.extra["pid"],
                             producer_epoch=env.extra["epoch"], verify_only=True,
                             topics=[T.AddPartitionsToTxnTopic(name=env.topic, partitions=[0])])])


def add_offsets(env: Env) -> Any:
    return req(25, transactional_id=env.name("txn"), producer_id=env.extra["pid"], producer_epoch=env.extra["epoch"],
               group_id=env.group)


def end_txn(env: Env) -> Any:
    return req(26, transactional_id=env.name("txn"), producer_id=env.extra["pid"], producer_epoch=env.extra["epoch"],
               committed=True)


def txn_offset_commit(env: Env) -> Any:
    R = api_info(28).request_class
    return R(transactional_id=env.name("txn"), group_id=env.group, producer_id=env.extra["pid"],
             producer_epoch=env.extra["epoch"], generation_id=-1, member_id="", group_instance_id=None,
             topics=[R.TxnOffsetCommitRequestTopic(name=env.topic, partitions=[R.TxnOffsetCommitRequestPartition(
                 partition_index=0, committed_offset=0, committed_leader_epoch=-1, committed_metadata="")])])


def describe_transactions(env: Env) -> Any:
    return req(65, transactional_ids=[env.name("txn")])


def list_transactions(env: Env) -> Any:
    return req(66, state_filters=[], producer_id_filters=[env.extra["pid"]], duration_filter=-1,
               transactional_id_pattern=None)


def describe_producers(env: Env) -> Any:
    R = api_info(61).request_class
    return R(topics=[R.TopicRequest(name=env.topic, partition_indexes=[0])])


def write_txn_markers(env: Env) -> Any:
    """An ABORT marker for a producer the partition never saw (`kafka-transactions.sh abort`'s request)."""
    R = api_info(27).request_class
    return R(markers=[R.WritableTxnMarker(producer_id=987654, producer_epoch=0, transaction_result=False,
                                          topics=[R.WritableTxnMarkerTopic(name=env.topic, partition_indexes=[0])],
                                          coordinator_epoch=0, transaction_version=0)])


# ---- the matrix -------------------------------------------------------------------------------------------

Grant = tuple[int, str, int]  # (resource type, Env.name key, operation)


@dataclass
class Case:
    name: str
    key: int
    version: int
    build: Callable[[Env], Any]
    steps: list[list[Grant]]  # ACLs added before each step after the first (step 0: none)
    setup: Callable[[Env], None] | None = make_topic
    expect: int = 29  # the error step 0 must carry somewhere in its answer
    success_codes: tuple[int, ...] = (0,)  # codes the last step may carry (besides 0)


CASES = [
    Case("produce", 0, 9, produce, [[(TOPIC, "topic", WRITE)]]),
    Case("fetch", 1, 12, fetch, [[(TOPIC, "topic", READ)]]),
    Case("list_offsets", 2, 8, list_offsets, [[(TOPIC, "topic", DESCRIBE)]]),
    Case("offset_for_leader_epoch", 23, 4, offset_for_leader_epoch, [[(TOPIC, "topic", DESCRIBE)]]),
    Case("metadata", 3, 12, metadata, [[(TOPIC, "topic", DESCRIBE)], [(TOPIC, "topic", ALTER)]]),
    Case("metadata_missing", 3, 12, lambda e: metadata(e, e.name("new")), [[(TOPIC, "new", DESCRIBE)]],
         success_codes=(3,)),
    Case("metadata_autocreate", 3, 12, lambda e: metadata(e, e.name("new"), auto=True, ops=False),
         [[(TOPIC, "new", DESCRIBE)]], success_codes=()),  # describable, but no CREATE: still refused
    Case("offset_commit", 8, 9, offset_commit, [[(GROUP, "group", READ)], [(TOPIC, "topic", READ)]], expect=30),
    Case("offset_fetch", 9, 9, offset_fetch, [[(GROUP, "group", DESCRIBE)], [(TOPIC, "topic", DESCRIBE)]],
         setup=commit_offsets, expect=30),
    Case("offset_fetch_all", 9, 9, offset_fetch_all, [[(GROUP, "group", DESCRIBE)], [(TOPIC, "topic", DESCRIBE)]],
         setup=commit_offsets, expect=30),
    Case("join_group", 11, 9, join_group, [[(GROUP, "group", READ)]], expect=30, success_codes=(79,)),
    Case("sync_group", 14, 5, sync_group, [[(GROUP, "group", READ)]], expect=30, success_codes=(25,)),
    Case("heartbeat", 12, 4, heartbeat, [[(GROUP, "group", READ)]], expect=30, success_codes=(25,)),
    Case("leave_group", 13, 5, leave_group, [[(GROUP, "group", READ)]], expect=30, success_codes=(25,)),
    Case("describe_groups", 15, 5, describe_groups, [[(GROUP, "group", DESCRIBE)]], setup=commit_offsets, expect=30),
    Case("list_groups", 16, 5, list_groups, [[(GROUP, "group", DESCRIBE)]], setup=commit_offsets, expect=-1),
    Case("delete_groups", 42, 2, delete_groups, [[(GROUP, "group", DELETE)]], setup=commit_offsets, expect=30),
    Case("offset_delete", 47, 0, offset_delete, [[(GROUP, "group", DELETE)], [(TOPIC, "topic", READ)]],
         setup=commit_offsets, expect=30),
    # step 1 creates the topic (its configs withheld: no DESCRIBE_CONFIGS), step 2 finds it created
    Case("create_topics", 19, 7, create_topics, [[(TOPIC, "new", CREATE)], [(TOPIC, "new", DESCRIBE_CONFIGS)]],
         setup=None, success_codes=(36,)),
    Case("create_topics_cluster", 19, 7, create_topics, [[(CLUSTER, "cluster", CREATE)]], setup=None),
    Case("delete_topics", 20, 6, delete_topics, [[(TOPIC, "topic", DESCRIBE)], [(TOPIC, "topic", DELETE)]]),
    Case("create_partitions", 37, 3, create_partitions, [[(TOPIC, "topic", ALTER)]]),
    Case("describe_configs", 32, 4, describe_configs, [[(TOPIC, "topic", DESCRIBE_CONFIGS)]]),
    Case("describe_broker_configs", 32, 4, describe_broker_configs, [[(CLUSTER, "cluster", DESCRIBE_CONFIGS)]],
         setup=None, expect=31),
    Case("alter_configs", 33, 2, alter_configs, [[(TOPIC, "topic", ALTER_CONFIGS)]]),
    Case("incremental_alter_configs", 44, 1, incremental_alter_configs, [[(TOPIC, "topic", ALTER_CONFIGS)]]),
    # dynamic broker configs (validate_only: the shared Apache Kafka keeps its own)
    Case("alter_broker_configs", 33, 2, alter_broker_configs, [[(CLUSTER, "cluster", ALTER_CONFIGS)]],
         setup=None, expect=31),
    Case("incremental_alter_broker_configs", 44, 1, incremental_alter_broker_configs,
         [[(CLUSTER, "cluster", ALTER_CONFIGS)]], setup=None, expect=31),
    Case("delete_records", 21, 2, delete_records, [[(TOPIC, "topic", DELETE)]]),
    Case("init_producer_id", 22, 5, init_producer_id, [[(TOPIC, "topic", WRITE)]], expect=31),
    Case("init_producer_id_cluster", 22, 5, init_producer_id, [[(CLUSTER, "cluster", IDEMPOTENT_WRITE)]],
         setup=None, expect=31),
    Case("describe_cluster", 60, 1, describe_cluster, [[(CLUSTER, "cluster", DESCRIBE)]], setup=None, expect=-1),
    Case("find_coordinator", 10, 4, find_coordinator, [[(GROUP, "group", DESCRIBE)]], setup=None, expect=30),
    Case("consumer_group_heartbeat", 68, 0, cg_heartbeat, [[(GROUP, "group", READ)], [(TOPIC, "topic", DESCRIBE)]],
         expect=30),
    Case("consumer_group_describe", 69, 0, cg_describe, [[(GROUP, "group", DESCRIBE)]], setup=commit_offsets,
         expect=30, success_codes=(69,)),
    Case("describe_acls", 29, 3, describe_acls, [[(CLUSTER, "cluster", DESCRIBE)]], setup=None, expect=31),
    Case("create_acls", 30, 3, create_acls_req, [[(CLUSTER, "cluster", ALTER)]], setup=None, expect=31),
    Case("delete_acls", 31, 3, delete_acls_req, [[(CLUSTER, "cluster", ALTER)]], setup=None, expect=31),
    Case("alter_user_scram_credentials", 51, 0, alter_scram, [[(CLUSTER, "cluster", ALTER)]], setup=None,
         expect=31, success_codes=(91,)),  # the deletion names a user without a credential
    Case("describe_user_scram_credentials", 50, 0, describe_scram, [[(CLUSTER, "cluster", DESCRIBE)]], setup=None,
         expect=31, success_codes=(91,)),
    # transactions (issue #15's APIs): the admin's producer has an open transaction (open_txn)
    Case("add_partitions_to_txn", 24, 3, add_partitions, [[(TXN, "txn", WRITE)], [(TOPIC, "topic", WRITE)]],
         setup=open_txn, expect=53),
    Case("add_partitions_to_txn_broker", 24, 4, add_partitions_verify, [[(CLUSTER, "cluster", CLUSTER_ACTION)]],
         setup=open_txn, expect=31),
    Case("add_offsets_to_txn", 25, 3, add_offsets, [[(TXN, "txn", WRITE)], [(GROUP, "group", READ)]],
         setup=open_txn, expect=53),
    Case("end_txn", 26, 3, end_txn, [[(TXN, "txn", WRITE)]], setup=open_txn, expect=53),
    Case("txn_offset_commit", 28, 3, txn_offset_commit,
         [[(TXN, "txn", WRITE)], [(GROUP, "group", READ)], [(TOPIC, "topic", READ)]],
         setup=open_txn_with_offsets, expect=53),
    Case("describe_transactions", 65, 0, describe_transactions, [[(TXN, "txn", DESCRIBE)], [(TOPIC, "topic", DESCRIBE)]],
         setup=open_txn, expect=53),
    Case("list_transactions", 66, 1, list_transactions, [[(TXN, "txn", DESCRIBE)]], setup=open_txn, expect=-1),
    Case("describe_producers", 61, 0, describe_producers, [[(TOPIC, "topic", READ)]]),
    Case("write_txn_markers", 27, 1, write_txn_markers, [[(CLUSTER, "cluster", CLUSTER_ACTION)]], expect=31),
    Case("write_txn_markers_alter", 27, 1, write_txn_markers, [[(CLUSTER, "cluster", ALTER)]], expect=31),
]

# Fields whose values differ between any two brokers or runs; compared as "set or not".
VOLATILE = {"throttle_time_ms", "topic_id", "producer_id", "member_id", "cluster_id", "controller_id", "node_id",
            "host", "port", "brokers", "leader_id", "replica_nodes", "isr_nodes", "records", "member_epoch",
            "heartbeat_interval_ms", "assignment", "leader", "error_message", "client_host", "client_id",
            "log_append_time_ms", "group_epoch", "assignment_epoch", "members", "configs", "high_watermark",
            "last_stable_offset", "log_start_offset", "base_offset", "low_watermark", "leader_epoch", "timestamp",
            "offset", "protocol_type", "committed_offset", "group_state", "assignor_name", "current_leader",
            "preferred_read_replica", "aborted_transactions", "num_partitions", "replication_factor", "session_id",
            "transaction_start_time_ms"}


def normalise(obj: Any, token: str, name: str = "") -> Any:
    if isinstance(obj, Struct):
        out = {}
        for f in obj._FIELDS:
            v = getattr(obj, f)
            out[f] = ("<null>" if v is None else "<set>") if f in VOLATILE else normalise(v, token, f)
        return out
    if isinstance(obj, list):
        items = [normalise(v, token, name) for v in obj]
        # other tests' groups and topics (ListGroups, all-topics answers), internal topics
        items = [i for i in items if not (isinstance(i, dict) and _foreign(i, token))]
        return sorted(items, key=repr)
    if isinstance(obj, (bytes, bytearray, memoryview)):
        return f"<{len(obj)} bytes>"
    if isinstance(obj, str):
        return obj.replace(token, "<token>")
    return obj


def _foreign(item: dict[str, Any], token: str) -> bool:
    """A group or topic of another test (ListGroups answers every group the subject may see)."""
    if "group_id" in item:
        name = item["group_id"]
    elif "partitions" in item or "partition_responses" in item:
        name = item.get("name")
    else:
        return False
    return isinstance(name, str) and "<token>" not in name


def error_codes(obj: Any) -> set[int]:
    out: set[int] = set()
    if isinstance(obj, Struct):
        for f in obj._FIELDS:
            v = getattr(obj, f)
            if f == "topic_config_error_code":  # CreateTopics' configs withheld: not the request's outcome
                continue
            if f.endswith("error_code") and isinstance(v, int):
                out.add(v)
            else:
                out |= error_codes(v)
    elif isinstance(obj, list):
        for v in obj:
            out |= error_codes(v)
    return out


def _acl_filter(principal: str | None = PRINCIPAL, host: str | None = SUBJECT_HOST) -> Any:
    return dict(resource_type_filter=1, resource_name_filter=None, pattern_type_filter=1, principal_filter=principal,
                host_filter=host, operation=1, permission_type=1)


def subject_acls(env: Env) -> int:
    with env.admin() as c:
        resp = c.call(29, 3, req(29, **_acl_filter()))
    assert resp.error_code == 0, resp
    return sum(len(r.acls) for r in resp.resources)


def wait_acls(env: Env, n: int) -> None:
    """Until the broker's own copy lists `n` ACLs of the subject (Kafka: the controller commits first, the
    broker's authorizer follows)."""
    deadline = time.monotonic() + 30
    while subject_acls(env) != n:
        assert time.monotonic() < deadline, f"the subject's ACLs never became {n}"
        time.sleep(0.1)


RETRIABLE = {14, 15}  # COORDINATOR_LOAD_IN_PROGRESS / NOT_AVAILABLE: Kafka creating an internal topic


def send(env: Env, case: Case) -> Any:
    deadline = time.monotonic() + 60
    while True:
        with env.subject() as c:
            resp = c.call(case.key, case.version, case.build(env))
        if not error_codes(resp) & RETRIABLE or time.monotonic() > deadline:
            return resp
        time.sleep(0.2)


def run_case(case: Case, bootstrap: str, token: str) -> list[tuple[Any, set[int]]]:
    env = Env(bootstrap, f"acl-{case.name.replace('_', '-')}-{token}", f"g-{case.name}-{token}", token)
    if case.setup is not None:
        case.setup(env)
    answers = []
    granted = 0
    try:
        for i in range(len(case.steps) + 1):
            if i:
                grants = case.steps[i - 1]
                with env.admin() as c:
                    resp = create_acls(c, [(rt, env.name(k), 3, PRINCIPAL, SUBJECT_HOST, op, 3) for rt, k, op in grants])
                assert all(r.error_code == 0 for r in resp.results), resp
                granted += len(grants)
                wait_acls(env, granted)
            resp = send(env, case)
            answers.append((normalise(resp, token), error_codes(resp)))
    finally:
        with env.admin() as c:
            c.call(31, 3, req(31, filters=[api_info(31).request_class.DeleteAclsFilter(**_acl_filter())]))
        wait_acls(env, 0)
    return answers


@pytest.fixture(scope="module")
def brokers(tmp_path_factory: pytest.TempPathFactory, java_tools: Any):
    kop = start_kop(tmp_path_factory.mktemp("kop-acl"))
    try:
        kafka = start_kafka(tmp_path_factory.mktemp("kafka-acl"))
    except BaseException:
        kop.stop()
        raise
    yield {"kop": kop, "kafka": kafka}
    kop.stop()
    kafka.stop()


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_acl_matrix(case: Case, brokers: dict[str, Any]) -> None:
    token = uuid.uuid4().hex[:8]
    ours = run_case(case, brokers["kop"].bootstrap, token)
    theirs = run_case(case, brokers["kafka"].bootstrap, token)
    for step, ((a, _), (b, _)) in enumerate(zip(ours, theirs, strict=True)):
        assert a == b, f"step {step}: ours\n{a}\nApache Kafka\n{b}"
    if case.expect >= 0:
        assert case.expect in ours[0][1], ours[0]
    last_codes = ours[-1][1] - {0}
    assert not last_codes & AUTH_ERRORS or not case.success_codes, ours[-1]
    assert last_codes <= set(case.success_codes) or not case.success_codes, ours[-1]
