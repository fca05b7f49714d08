"""KIP-1071 streams groups: the sans-IO group machine (group.py), its topology (topology.py) and the task
assignor (assignor.py), driven by kop/coordinator/coordinator.py."""
