"""One node, several worker processes (`numWorkers` > 1 on `kop standalone`): the supervisor
(`supervisor.py`), the worker's config (`worker.py`) and the node's one admin HTTP address (`admin.py`).
docs/architecture.md "Several worker processes" says why it is built this way."""
