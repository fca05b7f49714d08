"""CONNECT/CONNECTED and PING/PONG: the connection-level commands.

CONNECTED answers min(our highest protocol version, the client's) - the client gates features on it (>= 6
checksums, >= 12 GET_LAST_MESSAGE_ID) - with `maxMessageSize` and our feature flags. Differences from
Pulsar's broker: the authentication methods are `token` (AuthenticationProviderToken, with the token
settings the Kafka side's PLAIN tokens use: docs/security.md), `basic` (htpasswd users) and `tls` (the client
certificate's CN, on brokerServicePortTls) - kop/security/authn.py -, no auth refresh (AUTH_CHALLENGE) - a
token that expires later does not end the connection -, and no proxy-to-broker URL. A client whose feature flags say
`supports_broker_entry_metadata` gets broker entry metadata (index, broker timestamp: kop/pulsar/subscription.py)
in front of every MESSAGE payload when `exposingBrokerEntryMetadataToClientEnabled` is on (Pulsar's key and default,
off), as Pulsar's broker gives it; `msg.index()` / `getIndex()` are then the messages' Kafka offsets.

With authenticationEnabled a CONNECT must pass the provider of the method it names, or, naming none (or one not
configured), is `anonymousUserRole`'s when that is set (Pulsar's rule): otherwise ERROR AuthenticationError
(request id -1 as an unsigned long, as Pulsar sends it) and the connection is closed; the reason is logged,
never the credentials. The role becomes the connection's principal (`User:<role>`), the one the Kafka ACLs name when
`authorizationEnabled` (kop/pulsar/authorize.py checks PRODUCER, SUBSCRIBE and lookups with it).
"""

from __future__ import annotations

import logging
from typing import Any

from kop import __version__
from kop.pulsar.codec import commands as c
from kop.pulsar.codec.framing import Frame
from kop.pulsar.connection import PulsarConnection
from kop.security.authn import AuthenticationFailed, peer_certificate
from kop.security.principal import KafkaPrincipal

log = logging.getLogger(__name__)

UNKNOWN_REQUEST_ID = 2**64 - 1  # Pulsar's -1 as an unsigned long: an error that answers no request


async def connect(conn: PulsarConnection, frame: Frame) -> None:
    req = frame.inner
    if conn.connected:
        conn.send(c.error(0, c.ServerError.NotAllowedError, "already connected"))
        return
    if conn.handler.authentication and not _authenticate(conn, req):
        return
    version = min(c.MAX_PROTOCOL_VERSION, req.protocol_version if req.HasField("protocol_version") else 0)
    conn.protocol_version = version
    conn.client_version = req.client_version if req.HasField("client_version") else ""
    conn.broker_entry_metadata = conn.handler.config.exposingBrokerEntryMetadataToClientEnabled and \
        req.HasField("feature_flags") and req.feature_flags.supports_broker_entry_metadata
    conn.connected = True
    conn.send(c.command(c.CONNECTED, server_version=f"kop-{__version__}", protocol_version=version,
                        max_message_size=conn.handler.config.maxMessageSize))


def _authenticate(conn: PulsarConnection, req: Any) -> bool:
    method = req.auth_method_name if req.HasField("auth_method_name") else ""
    transport = conn.transport
    cert = peer_certificate(transport.get_extra_info("ssl_object")) if transport is not None else None
    try:
        who = conn.handler.authenticators.connect(method, req.auth_data, cert)
    except AuthenticationFailed as e:
        log.warning("pulsar %s: authentication failed: %s", conn.peer, e)
        conn.send(c.error(UNKNOWN_REQUEST_ID, c.ServerError.AuthenticationError, f"Unable to authenticate: {e}"))
        conn.close()
        return False
    conn.principal = KafkaPrincipal.user(who.role)
    log.info("pulsar %s: authenticated principal=User:%s method=%s", conn.peer, who.role, who.method)
    return True


async def ping(conn: PulsarConnection, frame: Frame) -> None:
    conn.send(c.command(c.PONG))


async def pong(conn: PulsarConnection, frame: Frame) -> None:
    return None
