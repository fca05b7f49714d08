"""The composition root: builds the broker from its config and runs it (docs/architecture.md)."""
