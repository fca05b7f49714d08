"""kop/security/principal.py: principals, and Kafka's ssl.principal.mapping.rules over certificate DNs.

The certificates are made here with `cryptography` (a CA and client certificates it signs); the DN text
and the rule results are compared with what Kafka's own Java classes print for the same certificates.
"""

from __future__ import annotations

import asyncio
import ssl
import subprocess

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import serialization
from cryptography.x509.oid import NameOID

from kop.security.principal import (
    ANONYMOUS,
    KafkaPrincipal,
    NoMatchingRule,
    SslPrincipalMapper,
    certificate_subject,
)
from tests.support.certs import CertAuthority, name
from tests.support.java import JavaToolsMissing, java_command

STANDARD = name((NameOID.COUNTRY_NAME, "UN"), (NameOID.STATE_OR_PROVINCE_NAME, "Unknown"),
                (NameOID.LOCALITY_NAME, "Unknown"), (NameOID.ORGANIZATION_NAME, "Unknown"),
                (NameOID.ORGANIZATIONAL_UNIT_NAME, "Unknown"), (NameOID.COMMON_NAME, "writeuser"))
# Subjects whose printing is easy to get wrong: escapes, an attribute Java has no RFC 2253 keyword for
# (emailAddress, printed as OID=#hex-of-DER), a multi-valued RDN, DC components, leading/trailing spaces.
AWKWARD = [
    name((NameOID.ORGANIZATION_NAME, 'Acme, Inc. "R&D" <lab>'), (NameOID.COMMON_NAME, "a+b=c;d#e\\f")),
    name((NameOID.ORGANIZATION_NAME, "Acme"), (NameOID.COMMON_NAME, "alice"),
         (NameOID.EMAIL_ADDRESS, "alice@example.com")),
    name((NameOID.DOMAIN_COMPONENT, "com"), (NameOID.DOMAIN_COMPONENT, "example"),
         [(NameOID.ORGANIZATIONAL_UNIT_NAME, "ops"), (NameOID.COMMON_NAME, "bob")]),
    name((NameOID.COMMON_NAME, " padded  "), (NameOID.USER_ID, "u1")),
    name((NameOID.COMMON_NAME, "#hash")),
]
RULES = [
    "DEFAULT",
    "RULE:^CN=(.*?),OU=ServiceUsers.*$/$1/,RULE:^CN=(.*?),OU=(.*?),O=(.*?),L=(.*?),ST=(.*?),C=(.*?)$/$1@$2/L,"
    "RULE:^.*[Cc][Nn]=([a-zA-Z0-9.]*).*$/$1/L,DEFAULT",
    "RULE:^CN=([a-z]+),.*$/$1/U",
    "RULE:^CN=(.*?),.*$/$1 via \\$ and $3/",  # $3 with one group: Kafka keeps it literal
    "RULE:^O=(.*)$/x/",  # matches none of ours: NoMatchingRule
    "RULE:^(?<first>[A-Z]+)=(?<value>[^,]*),.*$/$2 ($1)/L, DEFAULT",  # Java's named groups
]


def test_principal_text_round_trip():
    p = KafkaPrincipal.parse("User:CN=a:b")
    assert p == KafkaPrincipal("User", "CN=a:b") and str(p) == "User:CN=a:b"
    assert str(KafkaPrincipal.user("alice")) == "User:alice"
    assert str(ANONYMOUS) == "User:ANONYMOUS"
    with pytest.raises(ValueError):
        KafkaPrincipal.parse("alice")


def test_default_rule_is_the_rfc2253_dn_most_specific_first():
    ca = CertAuthority()
    cert = ca.issue(STANDARD).cert
    assert certificate_subject(cert) == "CN=writeuser,OU=Unknown,O=Unknown,L=Unknown,ST=Unknown,C=UN"
    assert SslPrincipalMapper().principal(cert) == KafkaPrincipal.user(
        "CN=writeuser,OU=Unknown,O=Unknown,L=Unknown,ST=Unknown,C=UN")
    assert SslPrincipalMapper().principal(None) == ANONYMOUS


def test_rules_as_in_kafkas_documentation():
    m = SslPrincipalMapper(RULES[1])
    assert m.name("CN=kafka-broker1,OU=ServiceUsers,O=Unknown") == "kafka-broker1"
    assert m.name("CN=Adam,OU=Sales,O=Unknown,L=Unknown,ST=Unknown,C=UN") == "adam@sales"
    assert m.name("OU=X,cn=Foo.Bar") == "foo.bar"
    assert m.name("O=Only") == "O=Only"  # DEFAULT catches the rest
    assert SslPrincipalMapper("RULE:^CN=(.*)$/$1/U").name("CN=bob") == "BOB"


def test_first_matching_rule_wins_and_no_match_fails():
    m = SslPrincipalMapper("RULE:^CN=([^,]*),.*$/first-$1/, RULE:^CN=.*$/second/")
    assert m.name("CN=a,O=b") == "first-a"
    assert m.name("CN=a") == "second"
    with pytest.raises(NoMatchingRule):
        m.name("O=b")


def test_invalid_rules_are_refused():
    for bad in ("RULE:^CN=(.*)$/$1/X", "RULE:^CN=(.*)$", "NOT_A_RULE"):
        with pytest.raises(ValueError):
            SslPrincipalMapper(bad)


def test_escaped_slash_in_a_rule():
    assert SslPrincipalMapper(r"RULE:^CN=(.*?)\/(.*)$/$2\/$1/").name("CN=a/b") == "b/a"


JAVA_PROBE = """
import java.io.FileInputStream;
import java.security.cert.CertificateFactory;
import java.security.cert.X509Certificate;
import org.apache.kafka.common.security.ssl.SslPrincipalMapper;

public class Probe {
    public static void main(String[] args) throws Exception {
        CertificateFactory cf = CertificateFactory.getInstance("X.509");
        int nRules = Integer.parseInt(args[0]);
        for (int c = nRules + 1; c < args.length; c++) {
            X509Certificate cert = (X509Certificate) cf.generateCertificate(new FileInputStream(args[c]));
            String dn = cert.getSubjectX500Principal().getName();
            System.out.println("DN\\t" + dn);
            for (int r = 1; r <= nRules; r++) {
                try {
                    System.out.println("NAME\\t" + SslPrincipalMapper.fromRules(args[r]).getName(dn));
                } catch (SslPrincipalMapper.NoMatchingRule e) {
                    System.out.println("NAME\\t<no matching rule>");
                }
            }
        }
    }
}
"""


def _ours(mapper: SslPrincipalMapper, dn: str) -> str:
    try:
        return mapper.name(dn)
    except NoMatchingRule:
        return "<no matching rule>"


@pytest.mark.java
def test_same_dn_text_and_rule_results_as_kafkas_java_classes(tmp_path):
    """The differential check: Kafka 4.x's SslPrincipalMapper on Java's X500Principal.getName()."""
    ca = CertAuthority()
    paths = []
    for i, subject in enumerate([STANDARD, *AWKWARD]):
        p = tmp_path / f"c{i}.pem"
        p.write_bytes(ca.issue(subject).cert_pem)
        paths.append(p)
    probe = tmp_path / "Probe.java"
    probe.write_text(JAVA_PROBE)
    try:
        cmd = java_command(str(probe), [str(len(RULES)), *RULES, *paths], jvm_opts=["-Xmx128m"])
    except JavaToolsMissing as e:
        pytest.fail(str(e))
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    lines = [ln.split("\t", 1) for ln in out.stdout.splitlines() if "\t" in ln]
    expected = []
    mappers = [SslPrincipalMapper(r) for r in RULES]
    for p in paths:
        dn = certificate_subject(x509.load_pem_x509_certificate(p.read_bytes()))
        expected.append(["DN", dn])
        expected.extend(["NAME", _ours(m, dn)] for m in mappers)
    assert len(lines) == len(paths) * (1 + len(RULES))
    assert lines == expected


def test_principal_from_a_real_tls_handshake(tmp_path):
    """The path the listener will take: a mutual-TLS handshake, the peer's DER certificate, the mapper."""
    ca = CertAuthority()
    server, client = ca.issue(name((NameOID.COMMON_NAME, "localhost")), dns=["localhost"]), ca.issue(STANDARD)
    for n, data in {"ca.pem": ca.cert.public_bytes(serialization.Encoding.PEM), "s.pem": server.cert_pem, "s.key": server.key_pem,
                    "c.pem": client.cert_pem, "c.key": client.key_pem}.items():
        (tmp_path / n).write_bytes(data)
    sctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    sctx.load_cert_chain(tmp_path / "s.pem", tmp_path / "s.key")
    sctx.load_verify_locations(tmp_path / "ca.pem")
    sctx.verify_mode = ssl.CERT_REQUIRED
    cctx = ssl.create_default_context(cafile=str(tmp_path / "ca.pem"))
    cctx.load_cert_chain(tmp_path / "c.pem", tmp_path / "c.key")
    mapper = SslPrincipalMapper(RULES[1])

    async def run() -> KafkaPrincipal:
        seen: asyncio.Future[KafkaPrincipal] = asyncio.get_running_loop().create_future()

        async def on_client(reader, writer):
            der = writer.get_extra_info("ssl_object").getpeercert(binary_form=True)
            seen.set_result(mapper.principal(der))
            writer.close()

        srv = await asyncio.start_server(on_client, "127.0.0.1", 0, ssl=sctx)
        port = srv.sockets[0].getsockname()[1]
        _, w = await asyncio.open_connection("127.0.0.1", port, ssl=cctx, server_hostname="localhost")
        result = await seen
        w.close()
        srv.close()
        await srv.wait_closed()
        return result

    assert asyncio.run(run()) == KafkaPrincipal.user("writeuser@unknown")
