"""A throwaway CA and certificates it signs, made with `cryptography` in the test (no files checked in)."""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID


@dataclass
class Issued:
    cert: x509.Certificate
    key: ec.EllipticCurvePrivateKey

    @property
    def cert_pem(self) -> bytes:
        return self.cert.public_bytes(serialization.Encoding.PEM)

    @property
    def cert_der(self) -> bytes:
        return self.cert.public_bytes(serialization.Encoding.DER)

    @property
    def key_pem(self) -> bytes:
        """PKCS#8, the form Kafka's PEM stores and Pulsar's tlsKeyFilePath want."""
        return self.key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                      serialization.NoEncryption())


def name(*attrs: tuple | list) -> x509.Name:
    """name((NameOID.COMMON_NAME, "alice"), ...) - RDNs in issuing order (least specific first);
    a list of pairs makes one multi-valued RDN."""
    rdns = []
    for a in attrs:
        pairs = a if isinstance(a, list) else [a]
        rdns.append(x509.RelativeDistinguishedName([x509.NameAttribute(o, v) for o, v in pairs]))
    return x509.Name(rdns)


class CertAuthority:
    def __init__(self, subject: str = "kop test CA") -> None:
        self.key = ec.generate_private_key(ec.SECP256R1())
        self.name = name((NameOID.COMMON_NAME, subject))
        now = dt.datetime.now(dt.UTC)
        self.cert = (
            x509.CertificateBuilder().subject_name(self.name).issuer_name(self.name)
            .public_key(self.key.public_key()).serial_number(x509.random_serial_number())
            .not_valid_before(now - dt.timedelta(minutes=5)).not_valid_after(now + dt.timedelta(days=1))
            .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
            .sign(self.key, hashes.SHA256())
        )

    def issue(self, subject: x509.Name, dns: list[str] | None = None, ips: list[str] | None = None) -> Issued:
        key = ec.generate_private_key(ec.SECP256R1())
        now = dt.datetime.now(dt.UTC)
        builder = (
            x509.CertificateBuilder().subject_name(subject).issuer_name(self.name)
            .public_key(key.public_key()).serial_number(x509.random_serial_number())
            .not_valid_before(now - dt.timedelta(minutes=5)).not_valid_after(now + dt.timedelta(days=1))
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        )
        if dns or ips:
            import ipaddress

            sans: list[x509.GeneralName] = [x509.DNSName(d) for d in dns or []]
            sans += [x509.IPAddress(ipaddress.ip_address(ip)) for ip in ips or []]
            builder = builder.add_extension(x509.SubjectAlternativeName(sans), critical=False)
        return Issued(builder.sign(self.key, hashes.SHA256()), key)
