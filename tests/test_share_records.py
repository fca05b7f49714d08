"""`__share_group_state` records (kop/coordinator/share/records.py) in Kafka 4.x's layouts, and a share-partition's
snapshot and restore (kop/coordinator/share/partition.py)."""

from __future__ import annotations

from kop.coordinator.share import records as srec
from kop.coordinator.share.partition import AckType, Acquired, RecordState, SharePartition

TID = bytes(range(16))


def test_key_and_snapshot_value_bytes() -> None:
    key = srec.encode_key(srec.SNAPSHOT, "g", TID, 3)
    # int16 type 0, int16-length "g", the topic id, int32 partition: ShareSnapshotKey v0 is not flexible.
    assert key == bytes.fromhex("0000" "0001" "67") + TID + bytes.fromhex("00000003")
    assert srec.decode_key(key) == (srec.SNAPSHOT, "g", TID, 3)
    state = srec.ShareState(10, ((10, 11, 2, 1), (12, 12, 0, 3)), snapshot_epoch=4)
    value = srec.encode_snapshot(state, now_ms=1000)
    assert value == bytes.fromhex(
        "0000" "00000004" "00000000" "00000000" "000000000000000a" "00000000000003e8" "00000000000003e8"
        "03" "000000000000000a" "000000000000000b" "02" "0001" "00" "000000000000000c" "000000000000000c" "00" "0003"
        "00" "00")
    assert srec.decode_value(srec.SNAPSHOT, value) == state


def test_an_update_applies_over_its_snapshot() -> None:
    base = srec.ShareState(0, ((0, 4, 0, 1),), 1)
    update = srec.ShareState(2, ((3, 3, 2, 1), (5, 6, 4, 5)), 2)
    assert srec.apply_update(base, update) == srec.ShareState(2, ((2, 2, 0, 1), (3, 3, 2, 1), (4, 4, 0, 1),
                                                                  (5, 6, 4, 5)), 2)
    assert srec.coordinator_key("g", TID, 0) == "g:AAECAwQFBgcICQoLDA0ODw:0"


def test_snapshot_keeps_acquired_records_available_and_restores() -> None:
    sp = SharePartition(0)
    assert sp.acquire("a", [(0, 5)], 10, now=0) == [Acquired(0, 5, 1)]
    sp.acknowledge("a", 1, 2, [AckType.ACCEPT])
    sp.acknowledge("a", 3, 3, [AckType.RELEASE])
    start, batches = sp.snapshot()
    assert start == 0
    assert batches == [(0, 0, 0, 1), (1, 2, 2, 1), (3, 5, 0, 1)]  # 4-5 were ACQUIRED
    again = SharePartition(start)
    again.restore(batches)
    assert again.state(0) == (RecordState.AVAILABLE, 1) and again.state(2) == (RecordState.ACKNOWLEDGED, 1)
    assert again.end_offset == 6 and again.next_fetch_offset() == 0
    assert again.acquire("b", [(0, 5)], 10, now=0) == [Acquired(0, 0, 2), Acquired(3, 5, 2)]
