"""One schema store for both protocols: Pulsar's per-topic schema versions and Confluent Schema Registry's
subjects and global ids over them (kop/schemas/api.py names what the other layers use)."""
