"""Operability: the admin HTTP server (/metrics, Pulsar admin-v2-shaped REST with PIP-415, health), the
metrics the handlers feed, and the `kop-admin` CLI. See docs/operability.md.

    metrics.py  hot-path counters and their Prometheus exposition (bounded labels)
    lag.py      consumer lag from the group coordinator's committed offsets
    views.py    what each REST endpoint answers, computed from the broker service
    server.py   the aiohttp application on webServicePort
    cli.py      kop-admin
"""
