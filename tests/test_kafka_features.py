"""Features (kop/topics/features.py, ApiVersions' feature fields, UpdateFeatures): the refusals carry Apache
Kafka 4.4's messages (recorded from a 4.4.0 broker's `kafka-features`), the levels live in the metadata store and
another broker reads them on its next re-read, and ApiVersions lists them as Kafka's ApiVersionsResponse does.
Sans-IO but for the SQLite metadata store in a temporary directory."""

from __future__ import annotations

import asyncio

import pytest

from kop.kafka.apis.api_versions import add_features
from kop.protocol.messages import ApiVersionsResponse
from kop.storage.local.metadata import SqliteMetadataStore
from kop.topics.features import (
    SAFE_DOWNGRADE,
    UNSAFE_DOWNGRADE,
    UPGRADE,
    Features,
    FeatureUpdateError,
    check_update,
)


@pytest.mark.parametrize(("name", "level", "kind", "current", "message"), [
    ("transaction.version", 5, UPGRADE, 2, "Invalid update version 5 for feature transaction.version. Local "
     "controller 1 only supports versions 0-2"),
    ("foo.version", 1, UPGRADE, 0, "Invalid update version 1 for feature foo.version. Local controller 1 does "
     "not support this feature."),
    ("streams.version", 2, UPGRADE, 1, "Invalid update version 2 for feature streams.version. Local controller 1 "
     "only supports versions 0-1"),
    ("eligible.leader.replicas.version", 1, UPGRADE, 0, "Invalid update version 1 for feature "
     "eligible.leader.replicas.version. Local controller 1 does not support this feature."),
    ("share.version", 3, UPGRADE, 2, "Invalid update version 3 for feature share.version. Local controller 1 "
     "only supports versions 0-2"),
    ("transaction.version", 1, UPGRADE, 2, "Invalid update version 1 for feature transaction.version. Can't "
     "downgrade the version of this feature without setting the upgrade type to either safe or unsafe "
     "downgrade."),
    ("transaction.version", 2, SAFE_DOWNGRADE, 1, "Invalid update version 2 for feature transaction.version. "
     "Can't downgrade to a newer version."),
    ("group.version", -1, UPGRADE, 1, "Invalid update version -1 for feature group.version. A feature version "
     "cannot be less than 0."),
    ("group.version", 1, 9, 1, "Invalid update version 1 for feature group.version. The controller does not "
     "support the given upgrade type."),
    ("metadata.version", 20, SAFE_DOWNGRADE, 33, "Unsupported metadata.version downgrade from 33 to 20. "
     "Refusing to perform the requested downgrade because it might delete metadata information."),
])
def test_refusals_are_kafkas(name: str, level: int, kind: int, current: int, message: str) -> None:
    with pytest.raises(FeatureUpdateError) as e:
        check_update(name, level, kind, current, 1)
    assert str(e.value) == message


def test_accepted_updates() -> None:
    check_update("transaction.version", 1, SAFE_DOWNGRADE, 2, 1)
    check_update("transaction.version", 0, UNSAFE_DOWNGRADE, 2, 1)
    check_update("transaction.version", 2, UPGRADE, 0, 1)
    check_update("transaction.version", 2, UPGRADE, 2, 1)  # the same level: nothing to do, no error
    check_update("metadata.version", 33, UPGRADE, 33, 1)


def test_levels_are_stored_and_read_by_another_broker(tmp_path) -> None:
    async def run() -> None:
        store = SqliteMetadataStore(tmp_path)
        one, two = Features(store, 1), Features(store, 2)
        await one.reload()
        await two.reload()
        assert one.finalized() == {"group.version": 1, "kraft.version": 0, "metadata.version": 33,
                                   "share.version": 2, "streams.version": 1, "transaction.version": 2}
        assert one.epoch == 0
        await one.update({"transaction.version": (1, SAFE_DOWNGRADE)}, validate_only=True)
        await two.reload()
        assert (two.level("transaction.version"), two.epoch) == (2, 0)  # validate_only wrote nothing
        await one.update({"transaction.version": (1, SAFE_DOWNGRADE)})
        await two.reload()
        assert (two.level("transaction.version"), two.epoch) == (1, 1)
        # all or nothing: one refused feature and nothing of the request is written
        with pytest.raises(FeatureUpdateError):
            await two.update({"group.version": (0, SAFE_DOWNGRADE), "transaction.version": (7, UPGRADE)})
        await one.reload()
        assert (one.level("group.version"), one.epoch) == (1, 1)
        await two.update({"transaction.version": (2, UPGRADE), "group.version": (0, SAFE_DOWNGRADE)})
        await one.reload()
        assert one.finalized()["transaction.version"] == 2 and one.finalized()["group.version"] == 0
        assert one.epoch == 2  # the epoch goes up with every change: clients re-read the levels
        await store.close()

    asyncio.run(run())


def test_api_versions_lists_features_as_kafka(tmp_path) -> None:
    async def run() -> Features:
        store = SqliteMetadataStore(tmp_path)
        f = Features(store, 1)
        await f.update({"group.version": (0, SAFE_DOWNGRADE)})
        await store.close()
        return f

    f = asyncio.run(run())
    body = ApiVersionsResponse(error_code=0, api_keys=[], throttle_time_ms=0)
    add_features(body, f, 4)
    assert {(k.name, k.min_version, k.max_version) for k in body.supported_features} == {
        ("group.version", 0, 1), ("kraft.version", 0, 1), ("metadata.version", 7, 33), ("share.version", 0, 2),
        ("streams.version", 0, 1), ("transaction.version", 0, 2)}
    # level 0 (kraft.version, group.version disabled) is not finalized; min = max, as Kafka's
    assert {(k.name, k.min_version_level, k.max_version_level) for k in body.finalized_features} == {
        ("metadata.version", 33, 33), ("share.version", 2, 2), ("streams.version", 1, 1),
        ("transaction.version", 2, 2)}
    assert body.finalized_features_epoch == 1
    add_features(body, f, 3)  # v3 leaves out the supported features with minimum 0 (KAFKA-17011)
    assert [k.name for k in body.supported_features] == ["metadata.version"]
