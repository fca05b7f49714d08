"""kop/admin/server.py over HTTPS (webServicePortTls) with a certificate of a CA made by the test."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.support.broker import KopBroker


def test_admin_over_https(tmp_path: Path) -> None:
    """webServicePortTls: the admin routes over HTTPS with the broker certificate (and still over HTTP on
    webServicePort); plain HTTP on the HTTPS port gets no answer."""
    import ssl
    import urllib.request

    from cryptography.hazmat.primitives import serialization
    from cryptography.x509.oid import NameOID

    from tests.support.certs import CertAuthority, name
    from tests.support.net import free_port

    ca = CertAuthority()
    (tmp_path / "ca.pem").write_bytes(ca.cert.public_bytes(serialization.Encoding.PEM))
    cert = ca.issue(name((NameOID.COMMON_NAME, "kop-admin")), ips=["127.0.0.1"])
    (tmp_path / "admin.pem").write_bytes(cert.cert_pem)
    (tmp_path / "admin.key").write_bytes(cert.key_pem)
    https_port = free_port()
    broker = KopBroker(tmp_path / "b", {
        "webServicePortTls": https_port, "tlsCertificateFilePath": tmp_path / "admin.pem",
        "tlsKeyFilePath": tmp_path / "admin.key", "messagingProtocols": "kafka"}).start()
    try:
        ctx = ssl.create_default_context(cafile=str(tmp_path / "ca.pem"))
        url = f"https://127.0.0.1:{https_port}"
        assert urllib.request.urlopen(f"{url}/health", context=ctx, timeout=30).status == 200
        assert b"kop_server_connections" in urllib.request.urlopen(f"{url}/metrics", context=ctx, timeout=30).read()
        assert urllib.request.urlopen(f"{broker.admin_url}/health", timeout=30).status == 200
        with pytest.raises(OSError):  # http:// to the HTTPS port: the TLS handshake fails, no HTTP answer
            urllib.request.urlopen(f"http://127.0.0.1:{https_port}/health", timeout=30)
        assert f"admin HTTPS listening on {url}" in broker.log_path.read_text(errors="replace")
    finally:
        broker.stop()
