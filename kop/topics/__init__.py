"""The topic layer: names, topics and their configs, producer ids, retention and the log cleaner
(docs/architecture.md: below the coordinator, cluster and handlers; above the partition logs)."""
