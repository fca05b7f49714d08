"""KoP in Python: a Kafka wire-protocol broker on a managed-ledger storage layer."""

__version__ = "0.1.0"
