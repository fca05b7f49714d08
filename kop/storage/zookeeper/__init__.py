"""ZooKeeper backend of the metadata store (kop/storage/zookeeper/metadata.py)."""

from kop.storage.zookeeper.metadata import ZooKeeperError, ZooKeeperMetadataStore, parse_zookeeper_servers

__all__ = ["ZooKeeperError", "ZooKeeperMetadataStore", "parse_zookeeper_servers"]
