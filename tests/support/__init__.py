"""Test support: real servers (Apache Kafka 4.x, our broker) and the real Kafka 4.x CLI tools."""
