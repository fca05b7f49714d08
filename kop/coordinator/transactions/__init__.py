"""The transaction coordinator (KIP-98 / KIP-447 / KIP-890 part 1), beside the group coordinator:
records.py (__transaction_state's records in Kafka's layouts), state.py (the rules, sans-IO) and
coordinator.py (the async shell: loading, writes, markers, timeouts). See docs/transactions.md."""

from kop.coordinator.transactions.coordinator import TransactionCoordinator

__all__ = ["TransactionCoordinator"]
