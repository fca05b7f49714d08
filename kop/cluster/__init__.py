"""Several brokers sharing one ZooKeeper and one BookKeeper cluster: membership, bundle ownership and
takeover (docs/cluster.md, "Ownership and takeover")."""

from kop.cluster.bundles import Bundle, bundle_for, bundles_of, choose_owner
from kop.cluster.ownership import BrokerIdInUseError, BrokerInfo, LocalOwnership, OwnerInfo, Ownership

__all__ = [
    "BrokerIdInUseError",
    "BrokerInfo",
    "Bundle",
    "LocalOwnership",
    "OwnerInfo",
    "Ownership",
    "bundle_for",
    "bundles_of",
    "choose_owner",
]
