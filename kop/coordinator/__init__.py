"""The group coordinator (Kafka's classic group protocol) and its records in __consumer_offsets.

Split along Apache Kafka's own seam, so that the rules can be tested without the storage under them:

* `runtime.CoordinatorRuntime` - the life of a coordinator's internal-topic partitions (ownership, load,
  failed loads, unload, load epochs, the one append), shared with the transaction coordinator.
* `coordinator.GroupCoordinator` - the group metadata manager and async shell: replays and writes the
  group records of __consumer_offsets through the runtime, and drives the state machines.
* `offsets.OffsetManager` - committed offsets: commit, fetch, delete, expire, transactional commits.
* `group_state.GroupStateMachine` - join/sync/heartbeat/leave of classic groups, sans-IO: requests and a
  clock in, answers and records to write out.
* `group` - the in-memory model of one classic group (states, members, protocol selection).
* `records` - Kafka's key/value layouts of the __consumer_offsets records, and the group -> partition hash.
"""

from kop.coordinator.coordinator import GroupCoordinator

__all__ = ["GroupCoordinator"]
