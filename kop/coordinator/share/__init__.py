"""Share groups (KIP-932): the sans-IO share-partition state machine (partition.py) and the in-memory share
group membership (groups.py), served by kop/kafka/apis/share_*.py."""
