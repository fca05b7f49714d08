"""Batch-index acknowledgements (issue 13): `acknowledgmentAtBatchIndexLevelEnabled`, with Pulsar's Java client
acknowledging single messages of a batch (`enableBatchIndexAcknowledgment`).

A Pulsar-side module (tests/e2e/conftest.py), run on Apache Pulsar standalone (`pulsar`: a broker of the
module's, one per setting of the key) and on ours on both storage backends (`kop`, `kop-bk`). A batch of five is received, messages 0, 2 and 4 acknowledged, the
consumer closed and a new one subscribed: with the key on only 1 and 3 come again (the broker sends the entry with
the ack set, and the client skips what it says is acknowledged); with it off (Pulsar's default) the acknowledgements
of part of a batch are ignored and all five come again. A last message, produced after, ends each receive, so no
test waits for something not to arrive.
"""

from __future__ import annotations

import pytest

from tests.support.pulsar_java import PulsarJava

PULSAR_SIDE_TARGETS = ("pulsar", "kop", "kop-bk")


@pytest.mark.parametrize("enabled", [True, False], ids=["on", "off"])
def test_acknowledged_messages_of_a_batch_are_not_redelivered(target, enabled):
    value = "true" if enabled else "false"
    endpoint = target.pulsar_broker(pulsar_config={"acknowledgmentAtBatchIndexLevelEnabled": value},
                                    acknowledgmentAtBatchIndexLevelEnabled=value)
    topic = f"persistent://public/default/{target.topic('bia')}"
    java = PulsarJava(endpoint.service_url, endpoint.admin_url)
    with java.session() as s:
        ids = s(f"produce {topic} 5 true NONE batch=5")
        assert len({i.rsplit(":", 1)[0] for i in ids}) == 1  # one entry, batch indexes 0..4
        s(f"subscribe c1 {topic} sub Shared batchIndexAck=true")
        got = s("receive c1 5 ack=false")
        assert [m["value"] for m in got] == [f"java-{i}" for i in range(5)]
        for m in got[0::2]:
            s(f"ack c1 {m['id']}")
        s("close c1")  # its pending acknowledgements go out before CLOSE_CONSUMER
        s(f"produce {topic} 1 false NONE start=5")
        s(f"subscribe c2 {topic} sub Shared batchIndexAck=true")
        expected = ["java-1", "java-3"] if enabled else [f"java-{i}" for i in range(5)]
        again = s(f"receive c2 {len(expected) + 1}")
        assert [m["value"] for m in again] == [*expected, "java-5"]
        s("close c2")


def test_cumulative_ack_inside_a_batch(target):
    """A cumulative acknowledgement of message 2 of a batch (Exclusive): the entries before and messages 0..2 are
    acknowledged; a new consumer gets 3 and 4."""
    endpoint = target.pulsar_broker(pulsar_config={"acknowledgmentAtBatchIndexLevelEnabled": "true"},
                                    acknowledgmentAtBatchIndexLevelEnabled="true")
    topic = f"persistent://public/default/{target.topic('biac')}"
    java = PulsarJava(endpoint.service_url, endpoint.admin_url)
    with java.session() as s:
        s(f"produce {topic} 2 false NONE")  # two entries of one message
        s(f"produce {topic} 5 true NONE start=2 batch=5")  # one entry of five
        s(f"subscribe c1 {topic} sub Exclusive batchIndexAck=true")
        got = s("receive c1 7 ack=false")
        assert [m["value"] for m in got] == [f"java-{i}" for i in range(7)]
        s(f"ack-cumulative c1 {got[4]['id']}")
        s("close c1")
        s(f"produce {topic} 1 false NONE start=7")
        s(f"subscribe c2 {topic} sub Exclusive batchIndexAck=true")
        assert [m["value"] for m in s("receive c2 3")] == ["java-5", "java-6", "java-7"]
        s("close c2")
