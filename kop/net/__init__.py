"""What every protocol handler shares about connections: the accept loop with the broker-wide connection
limits (acceptor.py) and the broker-wide bound on request bytes (request_bytes.py). Protocol-independent, so
the Kafka and Pulsar handlers, siblings that never import each other, both build on it."""
