"""Cluster features (KIP-584, KIP-1022): what this broker supports and the cluster-wide finalized levels, as
ApiVersions advertises them and UpdateFeatures (key 57) changes them.

Which features: those of Apache Kafka 4.4 whose behaviour this broker has, with Kafka 4.4's ranges and
defaults (checked against a 4.4.0 broker's `kafka-features describe`):
- metadata.version 7-33 (3.3-IV3 to 4.4-IV2), finalized 33: the level the 4.4 clients and tools read
  (kafka-features prints its name). It can be set only upward: Kafka refuses every downgrade that might delete
  metadata, and 4.4-IV2 is the newest, so in effect it stays at 33.
- kraft.version 0-1, finalized 0 (so not in the finalized list, as Kafka's broker shows it). It describes the
  controller quorum, which clients never see; a level set here is stored and advertised, with no effect.
- group.version 0-1, finalized 1: the consumer group protocol of KIP-848 (ConsumerGroupHeartbeat).
- streams.version 0-1, finalized 1: KIP-1071's streams groups (StreamsGroupHeartbeat; kop/coordinator/streams).
- transaction.version 0-2, finalized 2: KIP-890 part 2 (docs/transactions.md). A Kafka 4.x producer reads the
  finalized level from ApiVersions and runs the TV2 path (EndTxn v5, implicit partition adds in Produce v12+)
  at 2, the classic path below; what the broker does follows the versions each client sends, so both kinds of
  clients keep working whatever the level.
- share.version 0-2, finalized 2: share groups (KIP-932) at 1, their dead-letter queue (KIP-1191) at 2
  (kop/coordinator/share/dlq.py: below 2, a group's errors.deadletterqueue.topic.name has no effect).
Not advertised: eligible.leader.replicas.version (replication; there are no replicas here): an update of it
gets Kafka's "does not support this feature".

Validation is Kafka's FeatureControlManager, with its messages and INVALID_UPDATE_VERSION; an error fails the
whole request ("The update failed for all features since the following feature had an error: ...").

Storage: one JSON node, /kop/features = {"epoch": n, "levels": {name: level}} with the levels set through
UpdateFeatures (absent: the defaults above), written with compare-and-set. The epoch (ApiVersions'
FinalizedFeaturesEpoch) goes up with every change: Kafka 4.x clients re-read the finalized levels only from a
response with a newer epoch. Every broker re-reads the node every second (the service's chore), as the dynamic
broker configs, so a level set through one broker of a cluster is advertised by all within a second.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

from kop.storage.api import BadVersionError, MetadataStore, NodeExistsError

FEATURES_PATH = "/kop/features"
METADATA_VERSION = "metadata.version"
TRANSACTION_VERSION = "transaction.version"
GROUP_VERSION = "group.version"
KRAFT_VERSION = "kraft.version"
SHARE_VERSION = "share.version"
STREAMS_VERSION = "streams.version"

UPGRADE, SAFE_DOWNGRADE, UNSAFE_DOWNGRADE = 1, 2, 3


@dataclass(frozen=True, slots=True)
class Feature:
    name: str
    min_version: int  # the supported range
    max_version: int
    default: int  # the finalized level of a fresh cluster


SUPPORTED: dict[str, Feature] = {f.name: f for f in (
    Feature(GROUP_VERSION, 0, 1, 1),
    Feature(KRAFT_VERSION, 0, 1, 0),
    Feature(METADATA_VERSION, 7, 33, 33),
    Feature(SHARE_VERSION, 0, 2, 2),
    Feature(TRANSACTION_VERSION, 0, 2, 2),
    Feature(STREAMS_VERSION, 0, 1, 1),
)}


class FeatureUpdateError(Exception):
    """A refused update: Kafka's INVALID_UPDATE_VERSION and message."""


def _invalid(name: str, level: int, why: str) -> FeatureUpdateError:
    return FeatureUpdateError(f"Invalid update version {level} for feature {name}. {why}")


def check_update(name: str, level: int, upgrade_type: int, current: int, node_id: int) -> None:
    """Kafka's FeatureControlManager.updateFeature, for one feature; raises FeatureUpdateError."""
    if upgrade_type not in (UPGRADE, SAFE_DOWNGRADE, UNSAFE_DOWNGRADE):
        raise _invalid(name, level, "The controller does not support the given upgrade type.")
    if level < 0:
        raise _invalid(name, level, "A feature version cannot be less than 0.")
    spec = SUPPORTED.get(name)
    if spec is None:
        raise _invalid(name, level, f"Local controller {node_id} does not support this feature.")
    if not spec.min_version <= level <= spec.max_version:
        raise _invalid(name, level, f"Local controller {node_id} only supports versions "
                                    f"{spec.min_version}-{spec.max_version}")
    if level < current and upgrade_type == UPGRADE:
        raise _invalid(name, level, "Can't downgrade the version of this feature without setting the upgrade "
                                    "type to either safe or unsafe downgrade.")
    if level > current and upgrade_type != UPGRADE:
        raise _invalid(name, level, "Can't downgrade to a newer version.")
    if name == METADATA_VERSION and level < current:
        raise FeatureUpdateError(f"Unsupported metadata.version downgrade from {current} to {level}. Refusing to "
                                 "perform the requested downgrade because it might delete metadata information.")


class Features:
    """The finalized levels as last read from the metadata store (see the module docstring)."""

    def __init__(self, store: MetadataStore, node_id: int) -> None:
        self.store = store
        self.node_id = node_id
        self.epoch = 0
        self.set_levels: dict[str, int] = {}  # what UpdateFeatures set; the rest are the defaults

    def level(self, name: str) -> int:
        spec = SUPPORTED.get(name)
        return self.set_levels.get(name, spec.default if spec is not None else 0)

    def finalized(self) -> dict[str, int]:
        """Every supported feature's finalized level, zeros included."""
        return {name: self.level(name) for name in SUPPORTED}

    async def _read(self) -> tuple[int, dict[str, int], int]:
        got = await self.store.get(FEATURES_PATH)
        if got is None:
            return 0, {}, -1
        doc = json.loads(got[0])
        return int(doc.get("epoch", 0)), {str(k): int(v) for k, v in doc.get("levels", {}).items()}, got[1].version

    async def reload(self) -> None:
        self.epoch, self.set_levels, _ = await self._read()

    async def update(self, updates: dict[str, tuple[int, int]], validate_only: bool = False) -> None:
        """Apply {feature: (level, upgrade type)} all or nothing, after Kafka's checks of each; raises
        FeatureUpdateError with the message of the first refused one. Compare-and-set, retried when another
        broker wrote the node in between."""
        while True:
            epoch, levels, version = await self._read()
            for name, (level, kind) in updates.items():
                spec = SUPPORTED.get(name)
                current = levels.get(name, spec.default if spec is not None else 0)
                check_update(name, level, kind, current, self.node_id)
            if validate_only:
                return
            new = {**levels, **{name: level for name, (level, _) in updates.items()}}
            try:
                await self.store.put(FEATURES_PATH, json.dumps({"epoch": epoch + 1, "levels": new}).encode(),
                                     expected_version=version)
            except (BadVersionError, NodeExistsError):
                continue
            self.epoch, self.set_levels = epoch + 1, new
            return
