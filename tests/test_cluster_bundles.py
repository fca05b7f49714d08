"""Namespace bundles and the rendezvous choice of their owner (kop/cluster/bundles.py): plain functions,
checked against Pulsar's facts (range names, CRC32 of the partition's full name) and the properties the
ownership protocol relies on."""

from __future__ import annotations

import zlib

from kop.cluster.bundles import bundle_for, bundles_of, choose_owner
from kop.cluster.ownership import BrokerInfo


def test_four_bundles_split_the_hash_space_as_pulsar_names_them():
    names = [b.range_name for b in bundles_of("public/default", 4)]
    assert names == ["0x00000000_0x40000000", "0x40000000_0x80000000", "0x80000000_0xc0000000",
                     "0xc0000000_0xffffffff"]
    three = bundles_of("t/ns", 3)
    assert three[0].lower == 0 and three[-1].upper == 0xFFFFFFFF
    assert all(a.upper == b.lower for a, b in zip(three, three[1:], strict=False))


def test_a_partition_belongs_to_the_bundle_holding_the_crc32_of_its_full_name():
    for p in range(50):
        h = zlib.crc32(f"persistent://public/default/orders-partition-{p}".encode())
        b = bundle_for("public", "default", "orders", p, 4)
        assert b.namespace == "public/default"
        assert b.lower <= h < b.upper or (h == 0xFFFFFFFF and b.upper == 0xFFFFFFFF)
    spread = {bundle_for("public", "default", "orders", p, 4) for p in range(50)}
    assert len(spread) == 4


def test_rendezvous_choice_is_stable_and_moves_only_the_lost_brokers_bundles():
    bundles = [b for ns in ("public/default", "public/__kafka", "a/b") for b in bundles_of(ns, 16)]
    live = {1, 2, 3}
    before = {b: choose_owner(b, live) for b in bundles}
    assert set(before.values()) == live  # every broker gets some
    assert before == {b: choose_owner(b, [3, 1, 2]) for b in bundles}  # order of the live set is irrelevant
    after = {b: choose_owner(b, live - {2}) for b in bundles}
    for b in bundles:
        if before[b] != 2:
            assert after[b] == before[b]  # sticky for the survivors' bundles
        else:
            assert after[b] in {1, 3}
    assert choose_owner(bundles[0], set()) is None


def test_broker_info_round_trips_through_its_znode_json():
    info = BrokerInfo(7, (("PLAINTEXT", "10.0.0.7", 9092), ("INTERNAL", "kop-7", 9093)), "http://10.0.0.7:8080")
    assert BrokerInfo.from_json(info.to_json()) == info
    assert info.key == "10.0.0.7:9092"
    assert info.address("INTERNAL") == ("kop-7", 9093)
    assert info.address("OTHER") == ("10.0.0.7", 9092)  # KoP's rule: unknown listener name -> the first
