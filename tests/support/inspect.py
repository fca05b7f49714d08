"""Read our broker's managed-ledger metadata from its data dir (read-only), through kop.offset.inspect.

Managed-ledger names follow kop/topics/names.py: `<tenant>/<namespace>/persistent/<topic>-partition-<p>`,
with the default tenant/namespace `public/default`. kop.offset.inspect opens the sqlite metadata read-only,
so this works while the broker runs. A broker on BookKeeper + ZooKeeper (KopBookKeeperBroker) reads the same
view from its ZooKeeper chroot.
"""

from __future__ import annotations

import urllib.parse

from .broker import KopBroker


def ledger_name(topic: str, partition: int, tenant: str = "public", namespace: str = "default") -> str:
    return f"{tenant}/{namespace}/persistent/{urllib.parse.quote(f'{topic}-partition-{partition}', safe='')}"


def managed_ledger(broker: KopBroker, topic: str, partition: int):
    from kop.offset.inspect import inspect_managed_ledger, list_managed_ledgers

    name = ledger_name(topic, partition)
    if hasattr(broker, "managed_ledger_view"):  # a broker on BookKeeper + ZooKeeper (tests/support/bookkeeper.py)
        view = broker.managed_ledger_view(name)
        if view is None:
            raise AssertionError(f"managed ledger {name!r} not found in {broker!r}; "
                                 f"present: {broker.managed_ledger_names()}")
        return view
    view = inspect_managed_ledger(broker.data_dir, name)
    if view is None:
        raise AssertionError(
            f"managed ledger {name!r} not found in {broker.data_dir}; present: {list_managed_ledgers(broker.data_dir)}"
        )
    return view


def ledger_counts(broker: KopBroker, topic: str, partitions: int) -> dict[int, int]:
    """Number of ledgers in each partition's managed ledger (the current one included)."""
    return {p: len(managed_ledger(broker, topic, p).ledgers) for p in range(partitions)}
