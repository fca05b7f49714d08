"""Group configs (KIP-848/KIP-932's GROUP config resource, type 32) of share groups, through IncrementalAlterConfigs
and DescribeConfigs: what `kafka-configs --entity-type groups` and Admin.incrementalAlterConfigs change.

The share configs are served - share.auto.offset.reset (latest / earliest), share.record.lock.duration.ms,
share.delivery.count.limit, share.isolation.level and the dead-letter queue's errors.deadletterqueue.topic.name
and errors.deadletterqueue.copy.record.enable (KIP-1191, kop/coordinator/share/dlq.py) - with Kafka 4.4's
bounds (the broker's group.share.min/max.record.lock.duration.ms 15000-60000 and
group.share.min/max.delivery.count.limit 2-10 defaults). The share coordinator (kop/coordinator/share/
coordinator.py) keeps them, durable in the metadata store (Kafka: its metadata log) before the answer. Other group configs (consumer.*, streams.*) are refused
as unknown; `share.auto.offset.reset=by_duration:...` is not served.
"""

from __future__ import annotations

from kop.coordinator.share.coordinator import GROUP_CONFIG_DEFAULTS, ShareCoordinator
from kop.coordinator.share.dlq import COPY_RECORD, TOPIC_NAME
from kop.kafka.apis.configs_common import ConfigRequestError
from kop.protocol.errors import ErrorCode

RESOURCE_GROUP = 32
SET, DELETE = 0, 1
_BOUNDS = {"share.record.lock.duration.ms": (15_000, 60_000), "share.delivery.count.limit": (2, 10)}
_CHOICES = {"share.auto.offset.reset": ("latest", "earliest"),
            "share.isolation.level": ("read_uncommitted", "read_committed")}


def _check(name: str, value: str) -> None:
    if name == TOPIC_NAME and value.startswith("__"):
        raise ConfigRequestError(ErrorCode.INVALID_CONFIG, f"{TOPIC_NAME}: DLQ topic name must not start with '__'")
    if name == COPY_RECORD and value.lower() not in ("true", "false"):
        raise ConfigRequestError(ErrorCode.INVALID_CONFIG, f"Invalid value {value} for configuration {name}: "
                                 "Expected value to be either true or false")
    if name in _CHOICES and value not in _CHOICES[name]:
        raise ConfigRequestError(ErrorCode.INVALID_CONFIG, f"Invalid value {value} for configuration {name}: "
                                 f"String must be one of: {', '.join(_CHOICES[name])}")
    if name in _BOUNDS:
        low, high = _BOUNDS[name]
        try:
            n = int(value)
        except ValueError:
            raise ConfigRequestError(ErrorCode.INVALID_CONFIG, f"Invalid value {value} for configuration {name}: "
                                     f"Not a number of type INT") from None
        if not low <= n <= high:
            raise ConfigRequestError(ErrorCode.INVALID_CONFIG,
                                     f"Invalid value {value} for configuration {name}: must be between {low} and {high}")


def alter(share: ShareCoordinator, group_id: str, ops: list[tuple[str, int, str | None]], validate_only: bool) -> None:
    """Apply (name, operation, value) entries to a group's configs, all or none (ConfigRequestError)."""
    if not group_id:
        raise ConfigRequestError(ErrorCode.INVALID_REQUEST, "Group name must not be empty.")
    for name, op, value in ops:
        if name not in GROUP_CONFIG_DEFAULTS:
            raise ConfigRequestError(ErrorCode.INVALID_CONFIG, f"Unknown group config name: {name}")
        if op == SET:
            if value is None:
                raise ConfigRequestError(ErrorCode.INVALID_REQUEST, f"Null value not supported for : {name}")
            _check(name, value)
        elif op != DELETE:
            raise ConfigRequestError(ErrorCode.INVALID_CONFIG, f"Config value append/subtract is not allowed for "
                                     f"config key: {name}")
    if validate_only:
        return
    for name, op, value in ops:
        share.set_config(group_id, name, value if op == SET else None)


SOURCE_DEFAULT, SOURCE_GROUP = 5, 8  # DescribeConfigs' DEFAULT_CONFIG, GROUP_CONFIG
TYPE_BOOLEAN, TYPE_STRING, TYPE_INT = 1, 2, 3


def describe(share: ShareCoordinator, group_id: str) -> list[tuple[str, str, int, int]]:
    """(name, value, source, type) of every share group config of a group: GROUP_CONFIG when set on the group,
    else the default (DEFAULT_CONFIG)."""
    set_ = share.configs.get(group_id, {})
    return [(name, share.config(group_id, name), SOURCE_GROUP if name in set_ else SOURCE_DEFAULT,
             TYPE_INT if name in _BOUNDS else TYPE_BOOLEAN if name == COPY_RECORD else TYPE_STRING)
            for name in GROUP_CONFIG_DEFAULTS]
