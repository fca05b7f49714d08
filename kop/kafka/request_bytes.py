"""The broker-wide request-bytes bound now lives in kop/net/request_bytes.py (shared by every protocol
handler); this name stays for the Kafka handler's callers and tests."""

from kop.net.request_bytes import Reader, RequestBytesBound

__all__ = ["Reader", "RequestBytesBound"]
