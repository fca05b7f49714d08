"""Pulsar's binary protocol, beside the Kafka one (issue #13): the `pulsar` protocol-handler plugin.

The sans-IO layer at the bottom: ``codec`` (frames, the protobuf commands, batch payloads, compression) and
``convert`` (Kafka record batches <-> Pulsar messages with KoP's field mapping) open no sockets and touch no
storage; docs/pulsar.md says what each piece costs. Above them: the partitions' subscriptions and producers
(``subscription``, ``subscriptions``, ``dedup``, ``key_shared``), one module per command
family (``session``, ``lookup``, ``produce``, ``consume``, ``consumer_stats``, ``schemas``), the explicit table
of the commands served (``commands_table``), the connection (``connection``) and, on top, the handler
(``handler``). Imports run downward only, with no cycle (tests/test_pulsar_imports.py).
"""
