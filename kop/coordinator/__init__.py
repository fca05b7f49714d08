"""The group coordinator (Kafka's classic group protocol) and its records in __consumer_offsets.

Split along Apache Kafka's own seam, so that the rules can be tested without the storage under them:

* `coordinator.GroupCoordinator` - the group metadata manager and async shell: loads, replays, writes and
  unloads the __consumer_offsets partitions through the broker's topics like any client of the broker
  service, keeps the committed offsets (commit, fetch, delete, expire), and drives the state machine.
* `group_state.GroupStateMachine` - join/sync/heartbeat/leave of classic groups, sans-IO: requests and a
  clock in, answers and records to write out.
* `group` - the in-memory model of one classic group (states, members, protocol selection).
* `records` - Kafka's key/value layouts of the __consumer_offsets records, and the group -> partition hash.
"""

from kop.coordinator.coordinator import GroupCoordinator

__all__ = ["GroupCoordinator"]
