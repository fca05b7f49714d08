"""The Kafka protocol handler: connections, dispatch, and one module per API family under apis/."""
