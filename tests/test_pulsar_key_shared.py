"""Key_Shared (kop/pulsar/key_shared.py and its dispatch in subscription.py): Murmur3 and the placement of hashes,
then the real `pulsar-client` against `kop standalone` - every key goes to one consumer, in order; STICKY ranges
decide who gets what and overlaps are refused; when a consumer leaves, its unacknowledged entries go to the
keys' new consumers before anything newer of those keys."""

from __future__ import annotations

import uuid

import pulsar
import pytest

from kop.pulsar.codec import commands as c
from kop.pulsar.key_shared import NONE_KEY, RANGE, Selector, key_hash, murmur3_32, sticky_key

RECEIVE_MS = 30000  # a guard against hangs, not a timing assertion


def test_murmur3_matches_the_reference_vectors() -> None:
    assert murmur3_32(b"") == 0
    assert murmur3_32(b"hello") == 0x248BFA47
    assert murmur3_32(b"The quick brown fox jumps over the lazy dog") == 0x2E4FF723
    assert murmur3_32(b"", 1) == 0x514E28B7
    assert all(0 <= key_hash(bytes([i])) < RANGE for i in range(256))


def test_sticky_key_of_an_entry() -> None:
    assert sticky_key(c.MessageMetadata(ordering_key=b"o", partition_key="p")) == b"o"
    assert sticky_key(c.MessageMetadata(partition_key="AP8=", partition_key_b64_encoded=True)) == b"\x00\xff"
    assert sticky_key(c.MessageMetadata()) == NONE_KEY


class Named:
    def __init__(self, name: str) -> None:
        self.name = name


def test_selector_ring_and_sticky_ranges() -> None:
    a, b = Named("a"), Named("b")
    ring = Selector()
    ring.add(a, None)
    assert {ring.select(h) for h in range(0, RANGE, 97)} == {a}
    ring.add(b, None)
    owners = [ring.select(h) for h in range(0, RANGE, 97)]
    assert set(owners) == {a, b}
    ring.remove(a)
    assert {ring.select(h) for h in range(0, RANGE, 97)} == {b}
    sticky = Selector()
    assert sticky.add(a, [(0, 100)]) is None
    assert "overlaps" in sticky.add(b, [(100, 200)])
    assert sticky.add(b, [(101, 200)]) is None
    assert (sticky.select(100), sticky.select(101), sticky.select(5000)) == (a, b, None)
    assert "outside" in Selector().add(a, [(0, RANGE)])


def key_shared(client: pulsar.Client, topic: str, name: str, **policy: object) -> pulsar.Consumer:
    return client.subscribe(topic, "ks", consumer_type=pulsar.ConsumerType.KeyShared, consumer_name=name,
                            initial_position=pulsar.InitialPosition.Earliest, receiver_queue_size=10,
                            key_shared_policy=pulsar.ConsumerKeySharedPolicy(**policy) if policy else None)


def drain(consumers: dict[str, pulsar.Consumer], n: int, ack: bool = True) -> list[tuple[str, pulsar.Message]]:
    out: list[tuple[str, pulsar.Message]] = []
    while len(out) < n:
        progressed = False
        for who, cons in consumers.items():
            try:
                m = cons.receive(100)
            except pulsar.Timeout:
                continue
            progressed = True
            out.append((who, m))
            if ack:
                cons.acknowledge(m)
        if not progressed and len(out) < n:
            got = [(w, m) for w, cons in consumers.items() for m in [cons.receive(RECEIVE_MS)]][:1]
            out.extend(got)
            if ack:
                for w, m in got:
                    consumers[w].acknowledge(m)
    return out


def produce_keyed(client: pulsar.Client, topic: str, keys: int, per_key: int, tag: str = "") -> None:
    producer = client.create_producer(topic)
    for i in range(per_key):
        for k in range(keys):
            producer.send(f"{tag}{k}:{i}".encode(), partition_key=f"key-{k}")
    producer.close()


def test_every_key_goes_to_one_consumer_in_order(client: pulsar.Client) -> None:
    topic = f"ks-{uuid.uuid4().hex[:8]}"
    consumers = {w: key_shared(client, topic, w) for w in ("c1", "c2", "c3")}
    produce_keyed(client, topic, keys=12, per_key=6)
    got = drain(consumers, 72)
    by_key: dict[str, list[tuple[str, int]]] = {}
    for who, m in got:
        k, i = m.data().decode().split(":")
        by_key.setdefault(k, []).append((who, int(i)))
    assert len(by_key) == 12
    for k, seen in by_key.items():
        assert len({w for w, _ in seen}) == 1, (k, seen)  # one consumer per key
        assert [i for _, i in seen] == list(range(6)), (k, seen)  # in order
    assert len({w for seen in by_key.values() for w, _ in seen}) > 1  # the keys are spread


def test_sticky_ranges_decide_and_overlaps_are_refused(client: pulsar.Client) -> None:
    topic = f"ks-{uuid.uuid4().hex[:8]}"
    low = key_shared(client, topic, "low", key_shared_mode=pulsar.KeySharedMode.Sticky, sticky_ranges=[(0, 32767)])
    with pytest.raises(pulsar.ConsumerAssignError):
        key_shared(client, topic, "clash", key_shared_mode=pulsar.KeySharedMode.Sticky, sticky_ranges=[(30000, 40000)])
    high = key_shared(client, topic, "high", key_shared_mode=pulsar.KeySharedMode.Sticky,
                      sticky_ranges=[(32768, 65535)])
    produce_keyed(client, topic, keys=10, per_key=2)
    for who, m in drain({"low": low, "high": high}, 20):
        h = key_hash(m.partition_key().encode())
        assert (who == "low") == (h <= 32767), (who, m.partition_key(), h)


def test_a_leaving_consumer_hands_its_keys_over_in_order(client: pulsar.Client) -> None:
    topic = f"ks-{uuid.uuid4().hex[:8]}"
    c1 = key_shared(client, topic, "c1")
    c2 = key_shared(client, topic, "c2")
    produce_keyed(client, topic, keys=8, per_key=3, tag="a")
    first = drain({"c1": c1, "c2": c2}, 24, ack=False)
    for who, m in first:  # c2 acknowledges what it got; c1 acknowledges nothing
        if who == "c2":
            c2.acknowledge(m)
    c1_keys = {m.data().decode().split(":")[0] for who, m in first if who == "c1"}
    assert c1_keys  # c1 had keys of its own
    c1.close()  # its entries go back for replay, to c2, before anything newer of those keys
    produce_keyed(client, topic, keys=8, per_key=1, tag="a")
    rest = [m.data().decode() for _, m in drain({"c2": c2}, 8 + 3 * len(c1_keys))]
    for k in c1_keys:
        seen = [int(v.split(":")[1]) for v in rest if v.split(":")[0] == k]
        assert seen == [0, 1, 2, 0], (k, seen)  # the replayed three, then the new one
