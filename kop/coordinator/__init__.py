"""The group coordinator (Kafka's classic group protocol) and its records in __consumer_offsets.

* `coordinator.GroupCoordinator` - groups, members, rebalances, offsets; loads and writes
  __consumer_offsets through the broker's topics like any client of the broker service.
* `group` - the in-memory model of one classic group (states, members, protocol selection).
* `records` - Kafka's key/value layouts of the __consumer_offsets records, and the group -> partition hash.
"""

from kop.coordinator.coordinator import GroupCoordinator

__all__ = ["GroupCoordinator"]
