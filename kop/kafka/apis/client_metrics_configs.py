"""The CLIENT_METRICS config resource (type 16, KIP-714's client metrics subscriptions), as Apache Kafka 4.4 has
it: what `kafka-client-metrics --alter / --describe / --list / --delete` and Admin.incrementalAlterConfigs change.

A subscription is a named set of up to three configs: `metrics` (a LIST of metric name prefixes, `*` for all),
`interval.ms` (an INT, the push interval, 100..3600000, default 300000) and `match` (a LIST of `selector=regex`
client matching patterns over client_id, client_instance_id, client_software_name, client_software_version,
client_source_address and client_source_port). Validation is Kafka's ClientMetricsConfigs.validate on the
resource's complete new set, run by its controller (ConfigurationControlManager): an unknown config name or an
interval out of range is INVALID_REQUEST, a value its ConfigDef cannot parse (an INT that is not one, a duplicated
or empty list item) or an illegal matching pattern INVALID_CONFIG, with Kafka's messages. The pattern's regex
is compiled by Python's `re`, not java.util.regex: the few constructs one accepts and the other refuses
(possessive quantifiers on old Pythons, `\\p{...}` classes) are judged differently.

IncrementalAlterConfigs (SET / DELETE / APPEND / SUBTRACT, the latter two on the LIST configs only) and the legacy
AlterConfigs (the named configs become the whole set) both serve it, as Kafka's controller does. A subscription
whose configs are all deleted is gone (`--delete`), as in Kafka's metadata image. DescribeConfigs lists the three
configs, set ones as CLIENT_METRICS_CONFIG and the others at their defaults (DEFAULT_CONFIG), and a name never set
answers the defaults (Kafka 4.4's ConfigHelper); ListConfigResources lists the names.

Storage: one JSON node per subscription under /kop/config/client-metrics (its name percent-encoded), in the
metadata store that holds the dynamic broker configs (kop/topics/broker_configs.py), written with
compare-and-set before the answer; read on every request, so every broker of a cluster answers the same.

Not served: pushing the subscriptions to clients. GetTelemetrySubscriptions (71) and PushTelemetry (72) are not
advertised, so clients do not collect or send metrics here; a subscription is stored, validated and described
only, for the tools and for a later move to Apache Kafka.
"""

from __future__ import annotations

import json
import re
from urllib.parse import quote, unquote

from kop.protocol.errors import ErrorCode
from kop.protocol.messages import (
    AlterConfigsRequest,
    DescribeConfigsRequest,
    DescribeConfigsResponse,
    IncrementalAlterConfigsRequest,
)
from kop.storage.api import BadVersionError, MetadataStore, NodeExistsError, NoSuchNodeError

RESOURCE_CLIENT_METRICS = 16
ROOT = "/kop/config/client-metrics"
SET, DELETE, APPEND, SUBTRACT = 0, 1, 2, 3
_OP_NAMES = {APPEND: "APPEND", SUBTRACT: "SUBTRACT"}
TYPE_INT, TYPE_LIST = 3, 7  # DescribeConfigs' config types
SOURCE_CLIENT_METRICS, SOURCE_DEFAULT = 7, 5  # DescribeConfigs' CLIENT_METRICS_CONFIG, DEFAULT_CONFIG
MIN_INTERVAL_MS, MAX_INTERVAL_MS = 100, 3_600_000
# Kafka 4.4's ClientMetricsConfigs ConfigDef, in its definition order: (type, default, documentation)
CONFIGS = {
    "metrics": (TYPE_LIST, "", "Telemetry metric name prefix list"),
    "interval.ms": (TYPE_INT, "300000", "Metrics push interval in milliseconds"),
    "match": (TYPE_LIST, "", "Client match criteria"),
}
MATCH_SELECTORS = frozenset({"client_id", "client_instance_id", "client_software_name", "client_software_version",
                             "client_source_address", "client_source_port"})
_INT = re.compile(r"[+-]?[0-9]+")
_LIST_SPLIT = re.compile(r"\s*,\s*")


class ClientMetricsError(Exception):
    """A subscription's change is refused with this Kafka error code and message."""

    def __init__(self, error: int, message: str) -> None:
        super().__init__(message)
        self.error = error
        self.message = message


def _parse(name: str, value: str) -> int | list[str]:
    """Kafka's ConfigDef.parseValue of one config: an INT, or a LIST split on commas (an empty or blank value is
    the empty list) whose items must be non-empty and not duplicated (ValidList.anyNonDuplicateValues)."""
    if CONFIGS[name][0] == TYPE_INT:
        s = value.strip()
        if not _INT.fullmatch(s) or not -(2**31) <= int(s) < 2**31:
            raise ClientMetricsError(ErrorCode.INVALID_CONFIG,
                                     f"Invalid value {value} for configuration {name}: Not a number of type INT")
        return int(s)
    s = value.strip()
    items = _LIST_SPLIT.split(s) if s else []
    if len(set(items)) != len(items):
        raise ClientMetricsError(ErrorCode.INVALID_CONFIG, f"Configuration '{name}' values must not be duplicated.")
    if "" in items:
        raise ClientMetricsError(ErrorCode.INVALID_CONFIG, f"Configuration '{name}' values must not be empty.")
    return items


def _java_split_eq(pattern: str) -> list[str]:
    """Java's String.split("="): trailing empty strings removed."""
    parts = pattern.split("=")
    while parts and parts[-1] == "":
        parts.pop()
    return parts


def check_match(patterns: list[str]) -> None:
    """Kafka's parseMatchingPatterns: each `selector=regex`, split on every '=', a known selector, a regex."""
    for pattern in patterns:
        parts = _java_split_eq(pattern)
        illegal = ClientMetricsError(ErrorCode.INVALID_CONFIG, f"Illegal client matching pattern: {pattern}")
        if len(parts) != 2 or parts[0].strip() not in MATCH_SELECTORS:
            raise illegal
        try:
            re.compile(parts[1].strip())
        except re.error:
            raise illegal from None


def validate(name: str, configs: dict[str, str]) -> None:
    """Kafka 4.4's ClientMetricsConfigs.validate of a subscription's complete new set, in Kafka's order."""
    if not name:
        raise ClientMetricsError(ErrorCode.INVALID_REQUEST, "Subscription name can't be empty")
    for key in configs:
        if key not in CONFIGS:
            raise ClientMetricsError(ErrorCode.INVALID_REQUEST, f"Unknown client metrics configuration: {key}")
    parsed = {key: _parse(key, configs[key]) for key in CONFIGS if key in configs}
    interval = parsed.get("interval.ms")
    if isinstance(interval, int) and not MIN_INTERVAL_MS <= interval <= MAX_INTERVAL_MS:
        raise ClientMetricsError(ErrorCode.INVALID_REQUEST, f"Invalid value {interval} for interval.ms, interval "
                                 f"must be between {MIN_INTERVAL_MS} and {MAX_INTERVAL_MS} (1 hour)")
    match = parsed.get("match")
    if isinstance(match, list):
        check_match(match)


def apply_incremental(current: dict[str, str], ops: list[tuple[str, int, str | None]]) -> dict[str, str]:
    """A subscription's configs after IncrementalAlterConfigs' operations (Kafka's ConfigurationControlManager):
    SET (a null value deletes), DELETE, APPEND / SUBTRACT on a LIST config from its value or its default."""
    new = dict(current)
    for key, op, value in ops:
        if op == SET and value is not None:
            new[key] = value
        elif op in (SET, DELETE):
            new.pop(key, None)
        elif op in (APPEND, SUBTRACT):
            if CONFIGS.get(key, (None,))[0] != TYPE_LIST:
                raise ClientMetricsError(ErrorCode.INVALID_CONFIG,
                                         f"Can't {_OP_NAMES[op]} to key {key} because its type is not LIST.")
            old = new.get(key, CONFIGS[key][1]).strip()
            items = _LIST_SPLIT.split(old) if old else []
            given = (value or "").split(",")
            if op == APPEND:
                items += [v for v in given if v not in items]
            else:
                for v in given:
                    if v in items:
                        items.remove(v)
            new[key] = ",".join(items)
        else:
            raise ClientMetricsError(ErrorCode.INVALID_REQUEST, f"Unknown operation type {op}")
    return new


def described(configs: dict[str, str]) -> list[tuple[str, str, int, int, str]]:
    """(name, value, source, type, documentation) of the three configs, as Kafka 4.4's ConfigHelper describes a
    subscription: a set value as its ConfigDef prints it back (a LIST re-joined with ','), else the default."""
    out = []
    for name, (ctype, default, doc) in sorted(CONFIGS.items()):
        if name in configs:
            parsed = _parse(name, configs[name])
            value = ",".join(parsed) if isinstance(parsed, list) else str(parsed)
            out.append((name, value, SOURCE_CLIENT_METRICS, ctype, doc))
        else:
            out.append((name, default, SOURCE_DEFAULT, ctype, doc))
    return out


def _path(name: str) -> str:
    """The subscription's node: its name percent-encoded, dots too (ZooKeeper refuses a "." or ".." node)."""
    return f"{ROOT}/{quote(name, safe='').replace('.', '%2E')}"


async def read(store: MetadataStore, name: str) -> tuple[dict[str, str], int]:
    """A subscription's stored configs and node version (-1: none)."""
    got = await store.get(_path(name))
    if got is None:
        return {}, -1
    configs = json.loads(got[0]).get("configs", {})
    return {str(k): str(v) for k, v in configs.items()}, got[1].version


async def names(store: MetadataStore) -> list[str]:
    """The subscriptions that have configs, by name (ListConfigResources)."""
    return sorted(unquote(child) for child in await store.children(ROOT))


async def alter(store: MetadataStore, res: AlterConfigsRequest.AlterConfigsResource
                | IncrementalAlterConfigsRequest.AlterConfigsResource, validate_only: bool) -> tuple[int, str | None]:
    """One CLIENT_METRICS resource of (Incremental)AlterConfigs: its new set validated, then stored (the node
    removed when nothing is left), compare-and-set and retried when another broker wrote it in between."""
    name = res.resource_name
    while True:
        current, version = await read(store, name)
        try:
            if isinstance(res, IncrementalAlterConfigsRequest.AlterConfigsResource):
                new = apply_incremental(current, [(c.name, c.config_operation, c.value) for c in res.configs])
            else:
                new = {c.name: c.value for c in res.configs if c.value is not None}
            validate(name, new)
        except ClientMetricsError as e:
            return e.error, e.message
        if validate_only:
            return 0, None
        try:
            if new:
                await store.put(_path(name), json.dumps({"configs": new}).encode(), expected_version=version)
            elif version >= 0:
                await store.delete(_path(name), expected_version=version)
        except (BadVersionError, NodeExistsError, NoSuchNodeError):
            continue
        return 0, None


async def describe(store: MetadataStore, res: DescribeConfigsRequest.DescribeConfigsResource, synonyms: bool,
                   documentation: bool) -> tuple[int, str | None, list[DescribeConfigsResponse.DescribeConfigsResourceResult]]:
    """(error, message, entries) of DescribeConfigs for one CLIENT_METRICS resource."""
    R = DescribeConfigsResponse
    if not res.resource_name:
        return ErrorCode.INVALID_REQUEST, "Client metrics subscription name must not be empty", []
    configs, _ = await read(store, res.resource_name)
    keys = set(res.configuration_keys) if res.configuration_keys else None
    return 0, "", [
        R.DescribeConfigsResourceResult(
            name=name, value=value, read_only=False, config_source=source, is_default=source == SOURCE_DEFAULT,
            is_sensitive=False, config_type=ctype, documentation=doc if documentation else None,
            synonyms=[R.DescribeConfigsSynonym(name=name, value=value, source=source)]
            if synonyms and source == SOURCE_CLIENT_METRICS else [])
        for name, value, source, ctype, doc in described(configs) if keys is None or name in keys]
