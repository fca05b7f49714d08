"""Wire layouts of the APIs kafka-python's schema files do not ship: KIP-848's ConsumerGroupHeartbeat (68)
and ConsumerGroupDescribe (69), at Apache Kafka 4.x's versions; KIP-932's share-group APIs
ShareGroupHeartbeat (76), ShareGroupDescribe (77), ShareFetch (78) and ShareAcknowledge (79) at Kafka 4.4's
versions (v1, and v2 of ShareFetch/ShareAcknowledge: KIP-1206's acquire mode, KIP-1222's renew
acknowledgements; v0 was 4.0's early access, removed in 4.1) and the share-group admin APIs
Describe/Alter/DeleteShareGroupOffsets (90-92); ApiVersions (18) at Kafka 4.4's v0-v5 (KIP-1242's
ClusterId and NodeId, v5) and TxnOffsetCommit (28) at Kafka 4.4's v0-v6 (KIP-1319's topic ids), which
replace kafka-python 3.0's v0-v4 / v0-v5 files (an extra schema wins
only when it reaches a higher version: kop/protocol/schema.py).

kop.protocol generates its codec from the JSON schemas bundled with kafka-python (kop/protocol/schema.py),
whose 3.0 release has no consumer-group-protocol APIs. These are the same facts (field names, types,
versions, nullability, defaults: research/kip848.md §1-§2) written down here in the parsed form, so the one
code generator serves them too.
"""

from __future__ import annotations

from typing import Any


def _f(name: str, type_: str, versions: str = "0+", nullable: str | None = None, default: Any = None,
       fields: list[dict[str, Any]] | None = None, tag: int | None = None) -> dict[str, Any]:
    raw: dict[str, Any] = {"name": name, "type": type_, "versions": versions}
    if tag is not None:  # a tagged field, tagged in every version that has it
        raw["tag"] = tag
        raw["taggedVersions"] = versions
    if nullable is not None:
        raw["nullableVersions"] = nullable
    if default is not None:
        raw["default"] = default
    if fields is not None:
        raw["fields"] = fields
    return raw


def _message(name: str, kind: str, key: int, valid: str, fields: list[dict[str, Any]],
             common: list[dict[str, Any]] | None = None, flexible: str = "0+") -> dict[str, Any]:
    return {"name": name, "type": kind, "apiKey": key, "validVersions": valid, "flexibleVersions": flexible,
            "fields": fields, "commonStructs": common or []}


_OWNED = [_f("TopicId", "uuid"), _f("Partitions", "[]int32")]
_DESCRIBED_PARTITIONS = [_f("TopicId", "uuid"), _f("TopicName", "string"), _f("Partitions", "[]int32")]

SCHEMAS: list[dict[str, Any]] = [
    _message("ConsumerGroupHeartbeatRequest", "request", 68, "0-1", [
        _f("GroupId", "string"),
        _f("MemberId", "string"),
        _f("MemberEpoch", "int32"),
        _f("InstanceId", "string", nullable="0+", default="null"),
        _f("RackId", "string", nullable="0+", default="null"),
        _f("RebalanceTimeoutMs", "int32", default=-1),
        _f("SubscribedTopicNames", "[]string", nullable="0+", default="null"),
        _f("SubscribedTopicRegex", "string", "1+", nullable="1+", default="null"),
        _f("ServerAssignor", "string", nullable="0+", default="null"),
        _f("TopicPartitions", "[]TopicPartitions", nullable="0+", default="null", fields=_OWNED),
    ]),
    _message("ConsumerGroupHeartbeatResponse", "response", 68, "0-1", [
        _f("ThrottleTimeMs", "int32"),
        _f("ErrorCode", "int16"),
        _f("ErrorMessage", "string", nullable="0+", default="null"),
        _f("MemberId", "string", nullable="0+", default="null"),
        _f("MemberEpoch", "int32"),
        _f("HeartbeatIntervalMs", "int32"),
        _f("Assignment", "Assignment", nullable="0+", default="null",
           fields=[_f("TopicPartitions", "[]TopicPartitions")]),
    ], common=[{"name": "TopicPartitions", "versions": "0+", "fields": _OWNED}]),
    _message("ConsumerGroupDescribeRequest", "request", 69, "0-1", [
        _f("GroupIds", "[]string"),
        _f("IncludeAuthorizedOperations", "bool"),
    ]),
    _message("ConsumerGroupDescribeResponse", "response", 69, "0-1", [
        _f("ThrottleTimeMs", "int32"),
        _f("Groups", "[]DescribedGroup", fields=[
            _f("ErrorCode", "int16"),
            _f("ErrorMessage", "string", nullable="0+", default="null"),
            _f("GroupId", "string"),
            _f("GroupState", "string"),
            _f("GroupEpoch", "int32"),
            _f("AssignmentEpoch", "int32"),
            _f("AssignorName", "string"),
            _f("Members", "[]Member", fields=[
                _f("MemberId", "string"),
                _f("InstanceId", "string", nullable="0+", default="null"),
                _f("RackId", "string", nullable="0+", default="null"),
                _f("MemberEpoch", "int32"),
                _f("ClientId", "string"),
                _f("ClientHost", "string"),
                _f("SubscribedTopicNames", "[]string"),
                _f("SubscribedTopicRegex", "string", nullable="0+", default="null"),
                _f("Assignment", "Assignment"),
                _f("TargetAssignment", "Assignment"),
                _f("MemberType", "int8", "1+", default=-1),  # KIP-1099: -1 unknown, 0 classic, 1 consumer
            ]),
            _f("AuthorizedOperations", "int32", default="-2147483648"),
        ]),
    ], common=[{"name": "TopicPartitions", "versions": "0+", "fields": _DESCRIBED_PARTITIONS},
               {"name": "Assignment", "versions": "0+", "fields": [_f("TopicPartitions", "[]TopicPartitions")]}]),
    # Kafka 4.4's ApiVersions: v5 adds ClusterId and NodeId (KIP-1242): the cluster and node the client means
    # to reach, both or neither; a mismatch is REBOOTSTRAP_REQUIRED (kop/kafka/apis/api_versions.py).
    _message("ApiVersionsRequest", "request", 18, "0-5", [
        _f("ClientSoftwareName", "string", "3+"),
        _f("ClientSoftwareVersion", "string", "3+"),
        _f("ClusterId", "string", "5+", nullable="5+", default="null"),
        _f("NodeId", "int32", "5+", default=-1),
    ], flexible="3+"),
    _message("ApiVersionsResponse", "response", 18, "0-5", [
        _f("ErrorCode", "int16"),
        _f("ApiKeys", "[]ApiVersion", fields=[
            _f("ApiKey", "int16"), _f("MinVersion", "int16"), _f("MaxVersion", "int16")]),
        _f("ThrottleTimeMs", "int32", "1+"),
        _f("SupportedFeatures", "[]SupportedFeatureKey", "3+", tag=0, fields=[
            _f("Name", "string", "3+"), _f("MinVersion", "int16", "3+"), _f("MaxVersion", "int16", "3+")]),
        _f("FinalizedFeaturesEpoch", "int64", "3+", default="-1", tag=1),
        _f("FinalizedFeatures", "[]FinalizedFeatureKey", "3+", tag=2, fields=[
            _f("Name", "string", "3+"), _f("MaxVersionLevel", "int16", "3+"), _f("MinVersionLevel", "int16", "3+")]),
        _f("ZkMigrationReady", "bool", "3+", default="false", tag=3),
    ], flexible="3+"),
    # Kafka 4.4's TxnOffsetCommit: v6 names topics by id instead of name (KIP-1319); Kafka renamed GenerationId
    # to GenerationIdOrMemberEpoch, the same int32 on the wire (the old name is kept for the attribute).
    _message("TxnOffsetCommitRequest", "request", 28, "0-6", [
        _f("TransactionalId", "string"),
        _f("GroupId", "string"),
        _f("ProducerId", "int64"),
        _f("ProducerEpoch", "int16"),
        _f("GenerationId", "int32", "3+", default="-1"),
        _f("MemberId", "string", "3+", default=""),
        _f("GroupInstanceId", "string", "3+", nullable="3+", default="null"),
        _f("Topics", "[]TxnOffsetCommitRequestTopic", fields=[
            _f("Name", "string", "0-5"),
            _f("TopicId", "uuid", "6+"),
            _f("Partitions", "[]TxnOffsetCommitRequestPartition", fields=[
                _f("PartitionIndex", "int32"),
                _f("CommittedOffset", "int64"),
                _f("CommittedLeaderEpoch", "int32", "2+", default="-1"),
                _f("CommittedMetadata", "string", nullable="0+"),
            ]),
        ]),
    ], flexible="3+"),
    _message("TxnOffsetCommitResponse", "response", 28, "0-6", [
        _f("ThrottleTimeMs", "int32"),
        _f("Topics", "[]TxnOffsetCommitResponseTopic", fields=[
            _f("Name", "string", "0-5"),
            _f("TopicId", "uuid", "6+"),
            _f("Partitions", "[]TxnOffsetCommitResponsePartition", fields=[
                _f("PartitionIndex", "int32"),
                _f("ErrorCode", "int16"),
            ]),
        ]),
    ], flexible="3+"),
]

_ACK_BATCH = [_f("FirstOffset", "int64"), _f("LastOffset", "int64"), _f("AcknowledgeTypes", "[]int8")]
_LEADER = [_f("LeaderId", "int32"), _f("LeaderEpoch", "int32")]
_NODE_ENDPOINT = [_f("NodeId", "int32"), _f("Host", "string"), _f("Port", "int32"),
                  _f("Rack", "string", nullable="0+", default="null")]

#: KIP-932's share-group APIs at Kafka 4.4's versions (the field lists of kafka-clients 4.4.0's generated
#: ShareGroupHeartbeat/ShareGroupDescribe/ShareFetch/ShareAcknowledge Request/ResponseData SCHEMAS).
SHARE_SCHEMAS: list[dict[str, Any]] = [
    _message("ShareGroupHeartbeatRequest", "request", 76, "1", [
        _f("GroupId", "string"),
        _f("MemberId", "string"),
        _f("MemberEpoch", "int32"),
        _f("RackId", "string", nullable="0+", default="null"),
        _f("SubscribedTopicNames", "[]string", nullable="0+", default="null"),
    ]),
    _message("ShareGroupHeartbeatResponse", "response", 76, "1", [
        _f("ThrottleTimeMs", "int32"),
        _f("ErrorCode", "int16"),
        _f("ErrorMessage", "string", nullable="0+", default="null"),
        _f("MemberId", "string", nullable="0+", default="null"),
        _f("MemberEpoch", "int32"),
        _f("HeartbeatIntervalMs", "int32"),
        _f("Assignment", "Assignment", nullable="0+", default="null",
           fields=[_f("TopicPartitions", "[]TopicPartitions")]),
    ], common=[{"name": "TopicPartitions", "versions": "0+", "fields": _OWNED}]),
    _message("ShareGroupDescribeRequest", "request", 77, "1", [
        _f("GroupIds", "[]string"),
        _f("IncludeAuthorizedOperations", "bool"),
    ]),
    _message("ShareGroupDescribeResponse", "response", 77, "1", [
        _f("ThrottleTimeMs", "int32"),
        _f("Groups", "[]DescribedGroup", fields=[
            _f("ErrorCode", "int16"),
            _f("ErrorMessage", "string", nullable="0+", default="null"),
            _f("GroupId", "string"),
            _f("GroupState", "string"),
            _f("GroupEpoch", "int32"),
            _f("AssignmentEpoch", "int32"),
            _f("AssignorName", "string"),
            _f("Members", "[]Member", fields=[
                _f("MemberId", "string"),
                _f("RackId", "string", nullable="0+", default="null"),
                _f("MemberEpoch", "int32"),
                _f("ClientId", "string"),
                _f("ClientHost", "string"),
                _f("SubscribedTopicNames", "[]string"),
                _f("Assignment", "Assignment"),
            ]),
            _f("AuthorizedOperations", "int32", default="-2147483648"),
        ]),
    ], common=[{"name": "TopicPartitions", "versions": "0+", "fields": _DESCRIBED_PARTITIONS},
               {"name": "Assignment", "versions": "0+", "fields": [_f("TopicPartitions", "[]TopicPartitions")]}]),
    _message("ShareFetchRequest", "request", 78, "1-2", [
        _f("GroupId", "string", nullable="0+", default="null"),
        _f("MemberId", "string", nullable="0+"),
        _f("ShareSessionEpoch", "int32"),
        _f("MaxWaitMs", "int32"),
        _f("MinBytes", "int32"),
        _f("MaxBytes", "int32", default="0x7fffffff"),
        _f("MaxRecords", "int32"),
        _f("BatchSize", "int32"),
        _f("ShareAcquireMode", "int8", "2+"),  # KIP-1206: 0 batch-optimized, 1 record-limit
        _f("IsRenewAck", "bool", "2+", default="false"),  # KIP-1222
        _f("Topics", "[]FetchTopic", fields=[
            _f("TopicId", "uuid"),
            _f("Partitions", "[]FetchPartition", fields=[
                _f("PartitionIndex", "int32"),
                _f("AcknowledgementBatches", "[]AcknowledgementBatch", fields=_ACK_BATCH),
            ]),
        ]),
        _f("ForgottenTopicsData", "[]ForgottenTopic", fields=[_f("TopicId", "uuid"), _f("Partitions", "[]int32")]),
    ]),
    _message("ShareFetchResponse", "response", 78, "1-2", [
        _f("ThrottleTimeMs", "int32"),
        _f("ErrorCode", "int16"),
        _f("ErrorMessage", "string", nullable="0+", default="null"),
        _f("AcquisitionLockTimeoutMs", "int32"),
        _f("Responses", "[]ShareFetchableTopicResponse", fields=[
            _f("TopicId", "uuid"),
            _f("Partitions", "[]PartitionData", fields=[
                _f("PartitionIndex", "int32"),
                _f("ErrorCode", "int16"),
                _f("ErrorMessage", "string", nullable="0+", default="null"),
                _f("AcknowledgeErrorCode", "int16"),
                _f("AcknowledgeErrorMessage", "string", nullable="0+", default="null"),
                _f("CurrentLeader", "LeaderIdAndEpoch", fields=_LEADER),
                _f("Records", "records", nullable="0+"),
                _f("AcquiredRecords", "[]AcquiredRecords", fields=[
                    _f("FirstOffset", "int64"), _f("LastOffset", "int64"), _f("DeliveryCount", "int16")]),
            ]),
        ]),
        _f("NodeEndpoints", "[]NodeEndpoint", fields=_NODE_ENDPOINT),
    ]),
    _message("ShareAcknowledgeRequest", "request", 79, "1-2", [
        _f("GroupId", "string", nullable="0+", default="null"),
        _f("MemberId", "string", nullable="0+"),
        _f("ShareSessionEpoch", "int32"),
        _f("IsRenewAck", "bool", "2+", default="false"),
        _f("Topics", "[]AcknowledgeTopic", fields=[
            _f("TopicId", "uuid"),
            _f("Partitions", "[]AcknowledgePartition", fields=[
                _f("PartitionIndex", "int32"),
                _f("AcknowledgementBatches", "[]AcknowledgementBatch", fields=_ACK_BATCH),
            ]),
        ]),
    ]),
    _message("ShareAcknowledgeResponse", "response", 79, "1-2", [
        _f("ThrottleTimeMs", "int32"),
        _f("ErrorCode", "int16"),
        _f("ErrorMessage", "string", nullable="0+", default="null"),
        _f("AcquisitionLockTimeoutMs", "int32", "2+"),
        _f("Responses", "[]ShareAcknowledgeTopicResponse", fields=[
            _f("TopicId", "uuid"),
            _f("Partitions", "[]PartitionData", fields=[
                _f("PartitionIndex", "int32"),
                _f("ErrorCode", "int16"),
                _f("ErrorMessage", "string", nullable="0+", default="null"),
                _f("CurrentLeader", "LeaderIdAndEpoch", fields=_LEADER),
            ]),
        ]),
        _f("NodeEndpoints", "[]NodeEndpoint", fields=_NODE_ENDPOINT),
    ]),
]
#: The share-group admin APIs of `kafka-share-groups` (Admin.listShareGroupOffsets, alterShareGroupOffsets,
#: deleteShareGroupOffsets) at Kafka 4.4's versions: DescribeShareGroupOffsets v1 adds the lag (KIP-1226).
SHARE_ADMIN_SCHEMAS: list[dict[str, Any]] = [
    _message("DescribeShareGroupOffsetsRequest", "request", 90, "0-1", [
        _f("Groups", "[]DescribeShareGroupOffsetsRequestGroup", fields=[
            _f("GroupId", "string"),
            _f("Topics", "[]DescribeShareGroupOffsetsRequestTopic", nullable="0+", fields=[
                _f("TopicName", "string"), _f("Partitions", "[]int32")]),
        ]),
    ]),
    _message("DescribeShareGroupOffsetsResponse", "response", 90, "0-1", [
        _f("ThrottleTimeMs", "int32"),
        _f("Groups", "[]DescribeShareGroupOffsetsResponseGroup", fields=[
            _f("GroupId", "string"),
            _f("Topics", "[]DescribeShareGroupOffsetsResponseTopic", fields=[
                _f("TopicName", "string"),
                _f("TopicId", "uuid"),
                _f("Partitions", "[]DescribeShareGroupOffsetsResponsePartition", fields=[
                    _f("PartitionIndex", "int32"),
                    _f("StartOffset", "int64"),
                    _f("LeaderEpoch", "int32"),
                    _f("Lag", "int64", "1+", default=-1),
                    _f("ErrorCode", "int16"),
                    _f("ErrorMessage", "string", nullable="0+", default="null"),
                ]),
            ]),
            _f("ErrorCode", "int16"),
            _f("ErrorMessage", "string", nullable="0+", default="null"),
        ]),
    ]),
    _message("AlterShareGroupOffsetsRequest", "request", 91, "0", [
        _f("GroupId", "string"),
        _f("Topics", "[]AlterShareGroupOffsetsRequestTopic", fields=[
            _f("TopicName", "string"),
            _f("Partitions", "[]AlterShareGroupOffsetsRequestPartition", fields=[
                _f("PartitionIndex", "int32"), _f("StartOffset", "int64")]),
        ]),
    ]),
    _message("AlterShareGroupOffsetsResponse", "response", 91, "0", [
        _f("ThrottleTimeMs", "int32"),
        _f("ErrorCode", "int16"),
        _f("ErrorMessage", "string", nullable="0+", default="null"),
        _f("Responses", "[]AlterShareGroupOffsetsResponseTopic", fields=[
            _f("TopicName", "string"),
            _f("TopicId", "uuid"),
            _f("Partitions", "[]AlterShareGroupOffsetsResponsePartition", fields=[
                _f("PartitionIndex", "int32"),
                _f("ErrorCode", "int16"),
                _f("ErrorMessage", "string", nullable="0+", default="null"),
            ]),
        ]),
    ]),
    _message("DeleteShareGroupOffsetsRequest", "request", 92, "0", [
        _f("GroupId", "string"),
        _f("Topics", "[]DeleteShareGroupOffsetsRequestTopic", fields=[_f("TopicName", "string")]),
    ]),
    _message("DeleteShareGroupOffsetsResponse", "response", 92, "0", [
        _f("ThrottleTimeMs", "int32"),
        _f("ErrorCode", "int16"),
        _f("ErrorMessage", "string", nullable="0+", default="null"),
        _f("Responses", "[]DeleteShareGroupOffsetsResponseTopic", fields=[
            _f("TopicName", "string"),
            _f("TopicId", "uuid"),
            _f("ErrorCode", "int16"),
            _f("ErrorMessage", "string", nullable="0+", default="null"),
        ]),
    ]),
]
SCHEMAS += SHARE_SCHEMAS + SHARE_ADMIN_SCHEMAS

# KIP-1071 streams groups, at Kafka 4.4's versions (read from its generated message classes: v1 of the
# heartbeat response replaces the int32 AcceptableRecoveryLag by an int64 one and adds
# TopologyDescriptionRequired; v1 of the describe adds IncludeTopologyDescription, the group's TopologyDescription,
# its status and the assignor's name)
_KV = [_f("Key", "string"), _f("Value", "string")]
_TOPIC_INFO = [_f("Name", "string"), _f("Partitions", "int32"), _f("ReplicationFactor", "int16"),
               _f("TopicConfigs", "[]KeyValue")]
_TASK_IDS = [_f("SubtopologyId", "string"), _f("Partitions", "[]int32")]
_TASK_OFFSET = [_f("SubtopologyId", "string"), _f("Partition", "int32"), _f("Offset", "int64")]
_ENDPOINT = [_f("Host", "string"), _f("Port", "uint16")]
_STREAMS_COMMON = [{"name": "KeyValue", "versions": "0+", "fields": _KV},
                   {"name": "TopicInfo", "versions": "0+", "fields": _TOPIC_INFO},
                   {"name": "Endpoint", "versions": "0+", "fields": _ENDPOINT},
                   {"name": "TaskOffset", "versions": "0+", "fields": _TASK_OFFSET},
                   {"name": "TaskIds", "versions": "0+", "fields": _TASK_IDS}]

SCHEMAS += [
    _message("StreamsGroupHeartbeatRequest", "request", 88, "0-1", [
        _f("GroupId", "string"),
        _f("MemberId", "string"),
        _f("MemberEpoch", "int32"),
        _f("EndpointInformationEpoch", "int32"),
        _f("InstanceId", "string", nullable="0+", default="null"),
        _f("RackId", "string", nullable="0+", default="null"),
        _f("RebalanceTimeoutMs", "int32", default=-1),
        _f("Topology", "Topology", nullable="0+", default="null", fields=[
            _f("Epoch", "int32"),
            _f("Subtopologies", "[]Subtopology", fields=[
                _f("SubtopologyId", "string"),
                _f("SourceTopics", "[]string"),
                _f("SourceTopicRegex", "[]string"),
                _f("StateChangelogTopics", "[]TopicInfo"),
                _f("RepartitionSinkTopics", "[]string"),
                _f("RepartitionSourceTopics", "[]TopicInfo"),
                _f("CopartitionGroups", "[]CopartitionGroup", fields=[
                    _f("SourceTopics", "[]int16"),
                    _f("SourceTopicRegex", "[]int16"),
                    _f("RepartitionSourceTopics", "[]int16"),
                ]),
            ]),
        ]),
        _f("ActiveTasks", "[]TaskIds", nullable="0+", default="null"),
        _f("StandbyTasks", "[]TaskIds", nullable="0+", default="null"),
        _f("WarmupTasks", "[]TaskIds", nullable="0+", default="null"),
        _f("ProcessId", "string", nullable="0+", default="null"),
        _f("UserEndpoint", "Endpoint", nullable="0+", default="null"),
        _f("ClientTags", "[]KeyValue", nullable="0+", default="null"),
        _f("TaskOffsets", "[]TaskOffset", nullable="0+", default="null"),
        _f("TaskEndOffsets", "[]TaskOffset", nullable="0+", default="null"),
        _f("ShutdownApplication", "bool", default="false"),
    ], common=_STREAMS_COMMON),
    _message("StreamsGroupHeartbeatResponse", "response", 88, "0-1", [
        _f("ThrottleTimeMs", "int32"),
        _f("ErrorCode", "int16"),
        _f("ErrorMessage", "string", nullable="0+", default="null"),
        _f("MemberId", "string"),
        _f("MemberEpoch", "int32"),
        _f("HeartbeatIntervalMs", "int32"),
        _f("AcceptableRecoveryLagLegacy", "int32", "0"),
        _f("TaskOffsetIntervalMs", "int32"),
        _f("AcceptableRecoveryLag", "int64", "1+", default=-1),
        _f("Status", "[]Status", nullable="0+", default="null", fields=[_f("StatusCode", "int8"), _f("StatusDetail", "string")]),
        _f("ActiveTasks", "[]TaskIds", nullable="0+", default="null"),
        _f("StandbyTasks", "[]TaskIds", nullable="0+", default="null"),
        _f("WarmupTasks", "[]TaskIds", nullable="0+", default="null"),
        _f("TopologyDescriptionRequired", "bool", "1+", default="false"),
        _f("EndpointInformationEpoch", "int32"),
        _f("PartitionsByUserEndpoint", "[]EndpointToPartitions", nullable="0+", default="null", fields=[
            _f("UserEndpoint", "Endpoint"),
            _f("ActivePartitions", "[]TopicPartition"),
            _f("StandbyPartitions", "[]TopicPartition"),
        ]),
    ], common=[{"name": "TopicPartition", "versions": "0+", "fields": [_f("Topic", "string"),
                                                                        _f("Partitions", "[]int32")]},
               {"name": "TaskIds", "versions": "0+", "fields": _TASK_IDS},
               {"name": "Endpoint", "versions": "0+", "fields": _ENDPOINT}]),
    _message("StreamsGroupDescribeRequest", "request", 89, "0-1", [
        _f("GroupIds", "[]string"),
        _f("IncludeAuthorizedOperations", "bool"),
        _f("IncludeTopologyDescription", "bool", "1+", default="false"),
    ]),
    _message("StreamsGroupDescribeResponse", "response", 89, "0-1", [
        _f("ThrottleTimeMs", "int32"),
        _f("Groups", "[]DescribedGroup", fields=[
            _f("ErrorCode", "int16"),
            _f("ErrorMessage", "string", nullable="0+", default="null"),
            _f("GroupId", "string"),
            _f("GroupState", "string"),
            _f("GroupEpoch", "int32"),
            _f("AssignmentEpoch", "int32"),
            _f("Topology", "Topology", nullable="0+", default="null", fields=[
                _f("Epoch", "int32"),
                _f("Subtopologies", "[]Subtopology", nullable="0+", default="null", fields=[
                    _f("SubtopologyId", "string"),
                    _f("SourceTopics", "[]string"),
                    _f("RepartitionSinkTopics", "[]string"),
                    _f("StateChangelogTopics", "[]TopicInfo"),
                    _f("RepartitionSourceTopics", "[]TopicInfo"),
                ]),
            ]),
            _f("Members", "[]Member", fields=[
                _f("MemberId", "string"),
                _f("MemberEpoch", "int32"),
                _f("InstanceId", "string", nullable="0+", default="null"),
                _f("RackId", "string", nullable="0+", default="null"),
                _f("ClientId", "string"),
                _f("ClientHost", "string"),
                _f("TopologyEpoch", "int32"),
                _f("ProcessId", "string"),
                _f("UserEndpoint", "Endpoint", nullable="0+", default="null"),
                _f("ClientTags", "[]KeyValue"),
                _f("TaskOffsets", "[]TaskOffset"),
                _f("TaskEndOffsets", "[]TaskOffset"),
                _f("Assignment", "Assignment"),
                _f("TargetAssignment", "Assignment"),
                _f("IsClassic", "bool"),
            ]),
            _f("AuthorizedOperations", "int32", default="-2147483648"),
            _f("TopologyDescription", "TopologyDescription", "1+", nullable="1+", default="null", fields=[
                _f("Subtopologies", "[]TopologyDescriptionSubtopology", fields=[
                    _f("SubtopologyId", "string"), _f("Nodes", "[]TopologyDescriptionNode")]),
                _f("GlobalStores", "[]TopologyDescriptionGlobalStore", fields=[
                    _f("Source", "TopologyDescriptionNode"), _f("Processor", "TopologyDescriptionNode")]),
            ]),
            _f("TopologyDescriptionStatus", "int8", "1+"),
            _f("AssignorName", "string", "1+", nullable="1+", default="null"),
        ]),
    ], common=_STREAMS_COMMON + [{"name": "Assignment", "versions": "0+", "fields": [
        _f("ActiveTasks", "[]TaskIds"), _f("StandbyTasks", "[]TaskIds"), _f("WarmupTasks", "[]TaskIds")]},
        {"name": "TopologyDescriptionNode", "versions": "1+", "fields": [
            _f("Name", "string"), _f("NodeType", "int8"), _f("SourceTopics", "[]string"),
            _f("SinkTopic", "string", nullable="1+", default="null"), _f("Stores", "[]string"),
            _f("Successors", "[]string")]}]),
]

# KIP-932's share coordinator RPCs that a share-partition leader sends to the broker owning the state's
# __share_group_state partition (kop/coordinator/share/persister.py): ReadShareGroupState (84) and
# WriteShareGroupState (85), v0 as in Apache Kafka 4.4 (clients/src/main/resources/common/message; 4.4 also has
# WriteShareGroupState v1, with DeliveryCompleteCount, not used here).
_STATE_BATCH = [_f("FirstOffset", "int64"), _f("LastOffset", "int64"), _f("DeliveryState", "int8"),
                _f("DeliveryCount", "int16")]
_STATE_RESULT = [_f("Partition", "int32"), _f("ErrorCode", "int16"),
                 _f("ErrorMessage", "string", nullable="0+", default="null")]
SCHEMAS += [
    _message("ReadShareGroupStateRequest", "request", 84, "0", [
        _f("GroupId", "string"),
        _f("Topics", "[]ReadStateData", fields=[
            _f("TopicId", "uuid"),
            _f("Partitions", "[]PartitionData", fields=[_f("Partition", "int32"), _f("LeaderEpoch", "int32")]),
        ]),
    ]),
    _message("ReadShareGroupStateResponse", "response", 84, "0", [
        _f("Results", "[]ReadStateResult", fields=[
            _f("TopicId", "uuid"),
            _f("Partitions", "[]PartitionResult", fields=[
                *_STATE_RESULT, _f("StateEpoch", "int32"), _f("StartOffset", "int64"),
                _f("StateBatches", "[]StateBatch", fields=_STATE_BATCH),
            ]),
        ]),
    ]),
    _message("WriteShareGroupStateRequest", "request", 85, "0", [
        _f("GroupId", "string"),
        _f("Topics", "[]WriteStateData", fields=[
            _f("TopicId", "uuid"),
            _f("Partitions", "[]PartitionData", fields=[
                _f("Partition", "int32"), _f("StateEpoch", "int32"), _f("LeaderEpoch", "int32"),
                _f("StartOffset", "int64"), _f("StateBatches", "[]StateBatch", fields=_STATE_BATCH),
            ]),
        ]),
    ]),
    _message("WriteShareGroupStateResponse", "response", 85, "0", [
        _f("Results", "[]WriteStateResult", fields=[
            _f("TopicId", "uuid"),
            _f("Partitions", "[]PartitionResult", fields=_STATE_RESULT),
        ]),
    ]),
]

# The share coordinator's other three RPCs in Apache Kafka 4.4 (read from its generated message classes):
# InitializeShareGroupState (83, v0), DeleteShareGroupState (86, v0) and ReadShareGroupStateSummary (87, v0-1; v1
# adds DeliveryCompleteCount, what DescribeShareGroupOffsets v1's lag is computed from).
SCHEMAS += [
    _message("InitializeShareGroupStateRequest", "request", 83, "0", [
        _f("GroupId", "string"),
        _f("Topics", "[]InitializeStateData", fields=[
            _f("TopicId", "uuid"),
            _f("Partitions", "[]PartitionData", fields=[
                _f("Partition", "int32"), _f("StateEpoch", "int32"), _f("StartOffset", "int64")]),
        ]),
    ]),
    _message("InitializeShareGroupStateResponse", "response", 83, "0", [
        _f("Results", "[]InitializeStateResult", fields=[
            _f("TopicId", "uuid"), _f("Partitions", "[]PartitionResult", fields=_STATE_RESULT)]),
    ]),
    _message("DeleteShareGroupStateRequest", "request", 86, "0", [
        _f("GroupId", "string"),
        _f("Topics", "[]DeleteStateData", fields=[
            _f("TopicId", "uuid"), _f("Partitions", "[]PartitionData", fields=[_f("Partition", "int32")])]),
    ]),
    _message("DeleteShareGroupStateResponse", "response", 86, "0", [
        _f("Results", "[]DeleteStateResult", fields=[
            _f("TopicId", "uuid"), _f("Partitions", "[]PartitionResult", fields=_STATE_RESULT)]),
    ]),
    _message("ReadShareGroupStateSummaryRequest", "request", 87, "0-1", [
        _f("GroupId", "string"),
        _f("Topics", "[]ReadStateSummaryData", fields=[
            _f("TopicId", "uuid"),
            _f("Partitions", "[]PartitionData", fields=[_f("Partition", "int32"), _f("LeaderEpoch", "int32")]),
        ]),
    ]),
    _message("ReadShareGroupStateSummaryResponse", "response", 87, "0-1", [
        _f("Results", "[]ReadStateSummaryResult", fields=[
            _f("TopicId", "uuid"),
            _f("Partitions", "[]PartitionResult", fields=[
                *_STATE_RESULT, _f("StateEpoch", "int32"), _f("LeaderEpoch", "int32"), _f("StartOffset", "int64"),
                _f("DeliveryCompleteCount", "int32", "1+", default=-1),
            ]),
        ]),
    ]),
]
