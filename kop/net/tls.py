"""Server-side TLS contexts from Pulsar's PEM keys, for every protocol handler's TLS ports.

tlsCertificateFilePath (chain) and tlsKeyFilePath (PKCS#8) are the broker's identity; tlsProtocols bounds the
versions (TLSv1.2, TLSv1.3); tlsCiphers (OpenSSL syntax) narrows TLSv1.2's suites. With `client_certs`, client
certificates are checked against tlsTrustCertsFilePath: required with tlsRequireTrustedClientCertOnConnect
(Kafka's ssl.client.auth=required), else asked for and optional (=requested); without a trust bundle they are
not asked for. A file that cannot be read or parsed is a ConfigError naming its key, at start-up.
"""

from __future__ import annotations

import ssl

from kop.config import BrokerConfig, ConfigError

_TLS_VERSIONS = {"TLSv1.2": ssl.TLSVersion.TLSv1_2, "TLSv1.3": ssl.TLSVersion.TLSv1_3}


def server_context(config: BrokerConfig, client_certs: bool) -> ssl.SSLContext:
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    versions = sorted(_TLS_VERSIONS[v] for v in config.tls_protocols)
    ctx.minimum_version, ctx.maximum_version = versions[0], versions[-1]
    try:
        ctx.load_cert_chain(config.tlsCertificateFilePath, config.tlsKeyFilePath)
    except (OSError, ssl.SSLError) as e:
        raise ConfigError(f"bad value for tlsCertificateFilePath/tlsKeyFilePath: cannot load the broker's "
                          f"certificate and key ({e})") from None
    if config.tlsCiphers:
        try:
            ctx.set_ciphers(config.tlsCiphers)
        except ssl.SSLError as e:
            raise ConfigError(f"bad value for tlsCiphers: {e}") from None
    if client_certs and config.tlsTrustCertsFilePath:
        try:
            ctx.load_verify_locations(cafile=config.tlsTrustCertsFilePath)
        except (OSError, ssl.SSLError) as e:
            raise ConfigError(f"bad value for tlsTrustCertsFilePath: {e}") from None
        ctx.verify_mode = ssl.CERT_REQUIRED if config.tlsRequireTrustedClientCertOnConnect else ssl.CERT_OPTIONAL
    else:
        ctx.verify_mode = ssl.CERT_NONE
    return ctx
