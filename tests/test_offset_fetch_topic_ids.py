"""OffsetFetch v10's recreated-topic rule (kop/kafka/apis/offset_fetch.py `_mismatched`, Kafka 4.4's
OffsetMetadataManager.isMismatchedTopicId): a committed offset carrying another topic id than the one asked
belongs to an earlier topic of that name and is answered as none; an offset committed without an id (below
OffsetCommit v10, or before Kafka 4.4 wrote the id) and a request without one (below v10) match anything."""

from __future__ import annotations

from kop.coordinator.offsets import OffsetAndMetadata
from kop.kafka.apis.offset_fetch import _mismatched
from kop.protocol import ZERO_UUID

OLD, NEW = b"\x01" * 16, b"\x02" * 16


def committed(topic_id: bytes) -> OffsetAndMetadata:
    return OffsetAndMetadata(42, -1, "", 0, topic_id=topic_id)


def test_an_offset_of_an_earlier_topic_of_the_name_is_not_the_new_ones() -> None:
    assert _mismatched(committed(OLD), NEW)
    assert not _mismatched(committed(NEW), NEW)
    assert not _mismatched(committed(ZERO_UUID), NEW)  # committed without an id: kept
    assert not _mismatched(committed(OLD), ZERO_UUID)  # asked by name: kept
    assert not _mismatched(None, NEW)  # nothing committed: answered -1 anyway
