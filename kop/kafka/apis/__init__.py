"""One module per Kafka API (the kfake layout): each opens with the versions it serves and how it differs
from Apache Kafka, and why. This package builds the dispatch table from them; ApiVersions advertises exactly
this table, nothing more (KoP advertised every API its kafka-clients jar knew, and clients tripped on it)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from types import ModuleType

from kop.protocol import Struct, api_info


@dataclass(frozen=True, slots=True)
class Api:
    key: int
    name: str
    min_version: int  # advertised range
    max_version: int
    request_floor: int  # lowest version actually served (Produce advertises 0 but serves 3+, KAFKA-18659)
    handle: Callable[..., Awaitable[Struct | None]]  # (RequestContext, its request) -> its response


# long: one import line per API module (isort's layout), then the table's order - a list, not logic
def _modules() -> list[ModuleType]:
    from kop.kafka.apis import (
        add_offsets_to_txn,
        add_partitions_to_txn,
        alter_configs,
        alter_share_group_offsets,
        alter_user_scram_credentials,
        api_versions,
        consumer_group_describe,
        consumer_group_heartbeat,
        create_acls,
        create_partitions,
        create_topics,
        delete_acls,
        delete_groups,
        delete_records,
        delete_share_group_offsets,
        delete_share_group_state,
        delete_topics,
        describe_acls,
        describe_client_quotas,
        describe_cluster,
        describe_configs,
        describe_groups,
        describe_log_dirs,
        describe_producers,
        describe_share_group_offsets,
        describe_topic_partitions,
        describe_transactions,
        describe_user_scram_credentials,
        end_txn,
        fetch,
        find_coordinator,
        heartbeat,
        incremental_alter_configs,
        init_producer_id,
        initialize_share_group_state,
        join_group,
        leave_group,
        list_config_resources,
        list_groups,
        list_offsets,
        list_transactions,
        metadata,
        offset_commit,
        offset_delete,
        offset_fetch,
        offset_for_leader_epoch,
        produce,
        read_share_group_state,
        read_share_group_state_summary,
        sasl_authenticate,
        sasl_handshake,
        share_acknowledge,
        share_fetch,
        share_group_describe,
        share_group_heartbeat,
        streams_group_describe,
        streams_group_heartbeat,
        sync_group,
        txn_offset_commit,
        update_features,
        write_share_group_state,
        write_txn_markers,
    )

    return [
        produce, fetch, list_offsets, metadata, api_versions, init_producer_id, offset_for_leader_epoch,
        create_topics, delete_topics, create_partitions, describe_configs, alter_configs,
        incremental_alter_configs, delete_records, describe_cluster,
        describe_topic_partitions,  # Kafka 4.x's kafka-topics --describe and Admin.describeTopics
        describe_log_dirs, list_config_resources,  # kafka-log-dirs, kafka-client-metrics (Kafka 4.4's admin)
        update_features,  # kafka-features (kop/topics/features.py)
        # group coordinator (kop/coordinator)
        find_coordinator, join_group, sync_group, heartbeat, leave_group, offset_commit, offset_fetch,
        list_groups, describe_groups, delete_groups, offset_delete,
        consumer_group_heartbeat, consumer_group_describe,  # KIP-848 (kop/coordinator/consumer_group.py)
        share_group_heartbeat, share_group_describe, share_fetch, share_acknowledge,  # KIP-932 (kop/coordinator/share)
        streams_group_heartbeat, streams_group_describe,  # KIP-1071 (kop/coordinator/streams)
        describe_share_group_offsets, alter_share_group_offsets, delete_share_group_offsets,  # kafka-share-groups
        # the share coordinator's inter-broker RPCs (kop/coordinator/share/persister.py)
        initialize_share_group_state, read_share_group_state, write_share_group_state, delete_share_group_state,
        read_share_group_state_summary,
        txn_offset_commit,
        # transaction coordinator (kop/coordinator/transactions)
        add_partitions_to_txn, add_offsets_to_txn, end_txn, describe_transactions, list_transactions,
        write_txn_markers, describe_producers,  # the partition side of transactions (kop/offset/producer_state.py)
        # security (kop/security): ACLs and SCRAM users
        describe_acls, create_acls, delete_acls, describe_user_scram_credentials, alter_user_scram_credentials,
        describe_client_quotas,  # answers "no quotas": kafka-configs --describe --entity-type users asks first
        sasl_handshake, sasl_authenticate,  # SASL listeners only (kop/kafka/sasl.py)
    ]


def build_table() -> dict[int, Api]:
    table: dict[int, Api] = {}
    for mod in _modules():
        key: int = mod.API_KEY
        lo, hi = mod.VERSIONS
        info = api_info(key)
        # Never advertise past what the codec (Kafka's schemas) knows.
        hi = min(hi, info.max_version)
        floor = max(getattr(mod, "REQUEST_FLOOR", lo), info.min_version)
        table[key] = Api(key, info.name, lo, hi, floor, mod.handle)
    return table
