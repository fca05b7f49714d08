"""tests/support/net.py: the free ports every broker of the suite listens on."""

from __future__ import annotations

from tests.support.net import _ephemeral_low, free_port


def test_free_ports_are_never_handed_out_twice_and_stay_below_the_ephemeral_range() -> None:
    """Two picks close together must differ (a broker's Kafka and Pulsar ports), and no port-0 bind of the kernel
    may be given one of them."""
    ports = [free_port() for _ in range(500)]
    assert len(set(ports)) == len(ports)
    assert all(p < _ephemeral_low() for p in ports)
