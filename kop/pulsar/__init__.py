"""Pulsar's binary protocol, beside the Kafka one (issue #13).

This package holds the sans-IO layer the Pulsar protocol handler stands on: ``codec`` (frames, the
protobuf commands, batch payloads, compression) and ``convert`` (Kafka record batches <-> Pulsar
messages with KoP's field mapping). Nothing here opens sockets or touches storage; docs/pulsar.md says
what each piece costs.
"""
